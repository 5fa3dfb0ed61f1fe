package audit

import (
	"errors"

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
}

func (p *structProvider) FindStructType(name string) (*types.Type, bool) {
	if _, ok := p.structs[name]; ok {
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
	if _, ok := p.structs[name]; ok {
		return types.NewErr("cannot construct %s in an expression", name)
	}
	return p.Provider.NewValue(name, fields)
}

// withRequestType declares `request` with Kubernetes' object type on top of env.
func withRequestType(env *cel.Env) (*cel.Env, error) {
	p := &structProvider{Provider: env.CELTypeProvider(), structs: admissionStructs()}
	return env.Extend(
		cel.CustomTypeProvider(p),
		cel.Variable(varRequest, types.NewObjectType(requestTypeName)),
	)
}
