package audit

import (
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// The CEL environment of admission policies: the webhooks' one
// (k8s.io/apiserver/pkg/admission/plugin/cel/compile.go with HasParams and
// HasPatchTypes) plus `params` and `variables`, the JSONPatch and Object
// types a MutatingAdmissionPolicy builds, and jsonpatch.escapeKey.
// `variables` is a map here (an object type per policy in Kubernetes): the
// same expressions compile and evaluate.
const (
	varParams    = "params"
	varVariables = "variables"
)

// policyCELEnv is the environment of policies' expressions, built once.
var policyCELEnv = sync.OnceValues(func() (*cel.Env, error) {
	return requestEnv(append(baseEnvOptions(),
		cel.Variable(varParams, cel.DynType),
		cel.Variable(varVariables, cel.MapType(cel.StringType, cel.DynType)),
		cel.Function("jsonpatch.escapeKey", cel.Overload("jsonpatch_escape_key", []*cel.Type{cel.StringType}, cel.StringType,
			cel.UnaryBinding(func(v ref.Val) ref.Val {
				s, ok := v.(types.String)
				if !ok {
					return types.MaybeNoSuchOverloadErr(v)
				}
				return types.String(strings.NewReplacer("~", "~0", "/", "~1").Replace(string(s)))
			}))),
	), true)
})

// policyExpr is one compiled expression of a policy: a matchCondition, a
// variable, a validation, an audit annotation or a mutation.
type policyExpr struct {
	what       string // e.g. `validation 1 "object.metadata.name != 'x'"`
	program    cel.Program
	compileErr error
}

func compilePolicyExpr(what, expression string, wantBool bool) policyExpr {
	e := policyExpr{what: what}
	e.program, e.compileErr = compileProgram(policyCELEnv, expression, wantBool)
	return e
}

const notCompiled = "does not compile in the audit's CEL environment (a Kubernetes-only function or type): "

func (e policyExpr) evalBool(in celInput) (conditionResult, string) {
	if e.compileErr != nil {
		return condUnknown, notCompiled + firstLine(e.compileErr.Error())
	}
	return evalBool(e.program, in)
}

func (e policyExpr) evalValue(in celInput) (ref.Val, conditionResult, string) {
	if e.compileErr != nil {
		return nil, condUnknown, notCompiled + firstLine(e.compileErr.Error())
	}
	return evalValue(e.program, in)
}

// nativeValue converts a CEL result (maps, lists built in the expression)
// to plain Go values; ok is false when something in it is not plain data.
func nativeValue(v ref.Val) (interface{}, bool) {
	switch x := v.(type) {
	case types.String:
		return string(x), true
	case types.Bool:
		return bool(x), true
	case types.Int:
		return int64(x), true
	case types.Uint:
		return uint64(x), true
	case types.Double:
		return float64(x), true
	case types.Null:
		return nil, true
	}
	switch x := v.(type) {
	case traits.Lister:
		n, _ := x.Size().(types.Int)
		out := make([]interface{}, 0, int(n))
		for i := types.Int(0); i < n; i++ {
			e, ok := nativeValue(x.Get(i))
			if !ok {
				return nil, false
			}
			out = append(out, e)
		}
		return out, true
	case traits.Mapper:
		out := map[string]interface{}{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, false
			}
			e, ok := nativeValue(x.Get(k))
			if !ok {
				return nil, false
			}
			out[string(ks)] = e
		}
		return out, true
	}
	return nil, false
}
