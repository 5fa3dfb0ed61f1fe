package audit

import (
	"errors"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// requestTypeName is the CEL type of `request`, with the fields of
// k8s.io/apiserver/pkg/admission/plugin/cel/compile.go BuildRequestType
// (uid, object and oldObject are left out there too). Declaring it the same
// way makes the type check match Kubernetes: a misspelt field does not
// compile instead of failing at run time.
const (
	requestTypeName  = "kubernetes.AdmissionRequest"
	gvkTypeName      = "kubernetes.GroupVersionKind"
	gvrTypeName      = "kubernetes.GroupVersionResource"
	userInfoTypeName = "kubernetes.UserInfo"
	// jsonPatchTypeName is what a MutatingAdmissionPolicy's JSONPatch
	// expression builds: JSONPatch{op: "add", path: "/...", value: ...}.
	jsonPatchTypeName = "JSONPatch"
)

func admissionStructs() map[string]map[string]*types.Type {
	str := types.StringType
	gvk := types.NewObjectType(gvkTypeName)
	gvr := types.NewObjectType(gvrTypeName)
	return map[string]map[string]*types.Type{
		gvkTypeName: {"group": str, "version": str, "kind": str},
		gvrTypeName: {"group": str, "version": str, "resource": str},
		userInfoTypeName: {
			"username": str,
			"uid":      str,
			"groups":   types.NewListType(str),
			"extra":    types.NewMapType(str, types.NewListType(str)),
		},
		requestTypeName: {
			"kind":               gvk,
			"resource":           gvr,
			"subResource":        str,
			"requestKind":        gvk,
			"requestResource":    gvr,
			"requestSubResource": str,
			"name":               str,
			"namespace":          str,
			"operation":          str,
			"userInfo":           types.NewObjectType(userInfoTypeName),
			"dryRun":             types.BoolType,
			"options":            types.DynType,
		},
	}
}

// structProvider adds the admission request types to an environment's
// provider, for type checking only: at run time `request` is the
// unstructured map, as in Kubernetes.
type structProvider struct {
	types.Provider
	structs map[string]map[string]*types.Type
	// objects: a mutating policy's JSONPatch and ApplyConfiguration types
	// (JSONPatch, Object, Object.spec, ...) can be built in expressions.
	objects bool
}

// constructible are the struct types an expression may build.
func (p *structProvider) constructible(name string) bool {
	return p.objects && (name == jsonPatchTypeName || name == "Object" || strings.HasPrefix(name, "Object."))
}

func (p *structProvider) FindStructType(name string) (*types.Type, bool) {
	if _, ok := p.structs[name]; ok || p.constructible(name) {
		return types.NewTypeTypeWithParam(types.NewObjectType(name)), true
	}
	return p.Provider.FindStructType(name)
}

func (p *structProvider) FindStructFieldNames(name string) ([]string, bool) {
	if fs, ok := p.structs[name]; ok {
		names := make([]string, 0, len(fs))
		for n := range fs {
			names = append(names, n)
		}
		return names, true
	}
	return p.Provider.FindStructFieldNames(name)
}

func (p *structProvider) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	fs, ok := p.structs[name]
	if !ok && p.constructible(name) {
		// Object types: the schema is not modelled, every field is dyn.
		return &types.FieldType{Type: types.DynType}, true
	}
	if !ok {
		return p.Provider.FindStructFieldType(name, field)
	}
	t, ok := fs[field]
	if !ok {
		return nil, false
	}
	return &types.FieldType{
		Type: t,
		// Values are maps, which the interpreter reads directly; these
		// accessors are only for native structs.
		IsSet: func(target any) bool {
			m, ok := target.(map[string]any)
			if !ok {
				return false
			}
			_, set := m[field]
			return set
		},
		GetFrom: func(target any) (any, error) {
			m, ok := target.(map[string]any)
			if !ok {
				return nil, errors.New("not a map")
			}
			v, set := m[field]
			if !set {
				return nil, errors.New("no such key: " + field)
			}
			return v, nil
		},
	}, true
}

func (p *structProvider) NewValue(name string, fields map[string]ref.Val) ref.Val {
	if p.constructible(name) {
		m := make(map[ref.Val]ref.Val, len(fields))
		for k, v := range fields {
			m[types.String(k)] = v
		}
		return types.NewRefValMap(types.DefaultTypeAdapter, m)
	}
	if _, ok := p.structs[name]; ok {
		return types.NewErr("cannot construct %s in an expression", name)
	}
	return p.Provider.NewValue(name, fields)
}

// withRequestType declares `request` with Kubernetes' object type on top of
// env; objects makes the mutating policies' types constructible.
func withRequestType(env *cel.Env, objects bool) (*cel.Env, error) {
	p := &structProvider{Provider: env.CELTypeProvider(), structs: admissionStructs(), objects: objects}
	return env.Extend(
		cel.CustomTypeProvider(p),
		cel.Variable(varRequest, types.NewObjectType(requestTypeName)),
	)
}
