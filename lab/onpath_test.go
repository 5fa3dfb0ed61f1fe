package lab

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"testing"
)

// stepInternals are recovery's pieces of a step: what only the engine's
// loop may call (plan and execute an admission change by hand, skipping
// the loop's show, confirm, lock and journal).
var stepInternals = []string{"PlanDisable", "PlanRestore", "AdmissionPlan", "AdmissionOptions", "AdmissionResult"}

// The lab rehearses the on-call code path (issue 20): no file of package
// lab, tests included, calls a step's internals, and Rehearse runs
// recovery.Recover, the operation `breakglass recover` runs.
func TestLabRehearsesTheOnCallPath(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	recovers := false
	for _, f := range files {
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(parsed, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "recovery" {
				if slices.Contains(stepInternals, sel.Sel.Name) {
					t.Errorf("%s uses recovery.%s, a step's internals: use recovery's public operations (Recover, DisableAdmission, ...)", f, sel.Sel.Name)
				}
				recovers = recovers || f == "rehearse.go" && sel.Sel.Name == "Recover"
			}
			return true
		})
	}
	if !recovers {
		t.Error("rehearse.go does not call recovery.Recover")
	}
}
