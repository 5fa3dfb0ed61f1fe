package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// buildTags are the tags make build and make dist build both binaries with:
// grpcnotrace leaves out grpc's golang.org/x/net/trace, whose /debug/requests
// pages (html/template, registered at init) breakglass never serves.
const buildTags = "grpcnotrace"

// The binary carried during an incident links none of the lab's real
// components (embedded etcd server, emulated Talos nodes): they belong in
// breakglass-lab. Nor does it link what executes templates at run time
// (upstream urfave/cli, whose help third_party/forked/urfave/cli writes in Go; grpc's
// x/net/trace and html/template): see
// TestOnCallBinaryKeepsMethodDeadCodeElimination. (Package testing reaches
// both binaries through the Talos machinery's go-cni dependency, as it
// reaches talosctl: not worth a replace directive that would break go
// install.)
func TestOnCallBinaryLinksNoLabCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", buildTags, "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	forbidden := []string{
		"go.etcd.io/etcd/server/v3/embed",
		"github.com/breakglass-dev/breakglass/lab",
		"github.com/breakglass-dev/breakglass/etcd/etcdtest",
		"github.com/breakglass-dev/breakglass/talos/talostest",
		"github.com/urfave/cli/v2",
		"golang.org/x/net/trace",
		"html/template",
		"net/http/pprof",
	}
	for _, dep := range deps {
		for _, f := range forbidden {
			// the emulator's parts are packages under talostest
			if dep == f || strings.HasPrefix(dep, "github.com/breakglass-dev/breakglass/talos/talostest/") {
				t.Errorf("breakglass links %s", dep)

				break
			}
		}
	}
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed only %d packages; the check would prove nothing", len(deps))
	}
}

// A binary whose linker can reach reflect.Value.MethodByName with a name
// known only at run time (text/template's evalField, executing any
// template) keeps every exported method of every type it links, since the
// linker cannot tell which one a template would call. That cost breakglass
// 9.4 MB of 44.1 MB (linux/amd64): urfave/cli executes its help templates,
// grpc's x/net/trace its debug pages. The linker marks such a function
// <ReflectMethod> in its -dumpdep listing of what it keeps: none may be
// reachable from the on-call binary, built as make dist builds it.
func TestOnCallBinaryKeepsMethodDeadCodeElimination(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "breakglass")
	cmd := exec.Command("go", "build", "-tags", buildTags, "-ldflags=-dumpdep", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var deps bytes.Buffer
	cmd.Stderr = &deps
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("go build: %v\n%s%s", err, out, tail(deps.String(), 2000))
	}
	kept := 0
	for _, line := range strings.Split(deps.String(), "\n") {
		if strings.Contains(line, " -> ") {
			kept++
		}
		if strings.Contains(line, "<ReflectMethod>") {
			t.Errorf("the linker keeps a run-time method lookup, and with it every exported method: %s", line)
		}
	}
	if kept < 10000 {
		t.Fatalf("-dumpdep listed %d edges; the check would prove nothing", kept)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// `go install github.com/breakglass-dev/breakglass/cmd/breakglass@latest`
// refuses a module whose go.mod has replace or exclude directives (they
// would make it build differently than as the main module).
func TestGoModAllowsGoInstall(t *testing.T) {
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if found := installBlockers(string(data)); len(found) > 0 {
		t.Errorf("go.mod has directives go install pkg@version refuses:\n%s", strings.Join(found, "\n"))
	}
	for _, tc := range []struct {
		gomod string
		want  int
	}{
		{"module m\n\nrequire x v1.0.0 // replace me someday\n", 0},
		{"module m\n// replace x => ./y\nrequire (\n\tx v1.0.0\n)\n", 0},
		{"module m\nreplace x v1.0.0 => ./third_party/x\n", 1},
		{"module m\n  replace\tx => y v1.2.0 // one line\n", 1},
		{"module m\nreplace (\n\tx => ./x\n\n\t// a comment\n\ty v1.0.0 => z v1.1.0\n)\nrequire a v1.0.0\n", 2},
		{"module m\nreplace(\n\tx => ./x\n)\n", 1},
		{"module m\nexclude x v1.0.0\n", 1},
		{"module m\nexclude (\n\tx v1.0.0\n)\n", 1},
	} {
		if got := installBlockers(tc.gomod); len(got) != tc.want {
			t.Errorf("%q: %q, want %d", tc.gomod, got, tc.want)
		}
	}
}

// installBlockers lists the replace and exclude directives of a go.mod,
// one-line or in a block, comments aside.
func installBlockers(gomod string) []string {
	var found []string
	block := ""
	for _, line := range strings.Split(gomod, "\n") {
		line, _, _ = strings.Cut(line, "//")
		fields := strings.Fields(strings.ReplaceAll(line, "(", " ( "))
		switch {
		case len(fields) == 0:
		case block != "":
			if fields[0] == ")" {
				block = ""
			} else if block == "replace" || block == "exclude" {
				found = append(found, block+" "+strings.Join(fields, " "))
			}
		case len(fields) >= 2 && fields[1] == "(":
			block = fields[0]
		case fields[0] == "replace" || fields[0] == "exclude":
			found = append(found, strings.Join(fields, " "))
		}
	}
	return found
}

// Imports point one way (DESIGN.md, Layout): cmd -> recovery -> talos,
// etcd, runbooks (audit beside recovery); talos and etcd never import each
// other or recovery; internal/* imports nothing of the project but other
// internal packages and the forks; a fork (third_party/forked) imports
// nothing of the project but itself, as the module it stands for would. No
// import runs back up.
func TestImportsRunOneWay(t *testing.T) {
	const module = "github.com/breakglass-dev/breakglass/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	// may is what each part of the tree may import of the project, by the
	// first element of the package's path.
	may := map[string][]string{
		"third_party": {"third_party"},
		"internal":    {"internal", "third_party"},
		"talos":       {"internal", "talos"},
		"etcd":        {"internal", "etcd"},
		"runbooks":    {"internal"},
		"audit":       {"internal"},
		"recovery":    {"internal", "talos", "etcd", "runbooks", "audit", "recovery"},
		"lab":         {"internal", "talos", "etcd", "runbooks", "audit", "recovery", "lab"},
		"cmd":         {"internal", "talos", "etcd", "runbooks", "audit", "recovery", "lab", "third_party"},
	}
	part := func(pkg string) string { p, _, _ := strings.Cut(strings.TrimPrefix(pkg, module), "/"); return p }
	packages := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		from := part(fields[0])
		allowed, ok := may[from]
		if !ok {
			t.Errorf("%s: a part of the tree the rule does not know", fields[0])
			continue
		}
		packages++
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, module) && !slices.Contains(allowed, part(imp)) {
				t.Errorf("%s imports %s: an import that runs back up", fields[0], imp)
			}
		}
	}
	if packages < 20 {
		t.Fatalf("go list listed only %d packages; the check would prove nothing", packages)
	}
}
