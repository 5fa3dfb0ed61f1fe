package audit

import (
	"encoding/json"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1alpha1 "k8s.io/api/admissionregistration/v1alpha1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// Kinds of the admission policy objects (Configuration.Kind, Finding.Kind).
const (
	ValidatingPolicy        Kind = kinds.ValidatingPolicy
	ValidatingPolicyBinding Kind = kinds.ValidatingPolicyBinding
	MutatingPolicy          Kind = kinds.MutatingPolicy
	MutatingPolicyBinding   Kind = kinds.MutatingPolicyBinding
	// Param is any other object: a binding's paramRef may name it.
	Param Kind = "param"
)

// Policy is a ValidatingAdmissionPolicy or MutatingAdmissionPolicy, one of
// their bindings, or a param object, in any served version. The fields the
// audit reads have the same JSON names in every version, so they are read
// into one model with v1 types.
type Policy struct {
	APIVersion string
	Kind       string // the Kubernetes kind
	Name       string
	Namespace  string
	Labels     map[string]string
	Spec       PolicySpec
	// Object is the whole object as JSON-like data: the param CEL sees, and
	// what the fix writes back.
	Object map[string]interface{}
}

// PolicySpec is the union of a policy's and a binding's spec.
type PolicySpec struct {
	// Policies.
	ParamKind        *admissionregistrationv1.ParamKind         `json:"paramKind,omitempty"`
	MatchConstraints *admissionregistrationv1.MatchResources    `json:"matchConstraints,omitempty"`
	Validations      []admissionregistrationv1.Validation       `json:"validations,omitempty"`
	AuditAnnotations []admissionregistrationv1.AuditAnnotation  `json:"auditAnnotations,omitempty"`
	MatchConditions  []admissionregistrationv1.MatchCondition   `json:"matchConditions,omitempty"`
	Variables        []admissionregistrationv1.Variable         `json:"variables,omitempty"`
	FailurePolicy    *admissionregistrationv1.FailurePolicyType `json:"failurePolicy,omitempty"`
	Mutations        []Mutation                                 `json:"mutations,omitempty"`
	// Bindings.
	PolicyName        string                                     `json:"policyName,omitempty"`
	ParamRef          *admissionregistrationv1.ParamRef          `json:"paramRef,omitempty"`
	MatchResources    *admissionregistrationv1.MatchResources    `json:"matchResources,omitempty"`
	ValidationActions []admissionregistrationv1.ValidationAction `json:"validationActions,omitempty"`
}

// Mutation is one mutation of a MutatingAdmissionPolicy.
type Mutation struct {
	PatchType          string      `json:"patchType"`
	JSONPatch          *Expression `json:"jsonPatch,omitempty"`
	ApplyConfiguration *Expression `json:"applyConfiguration,omitempty"`
}

// Expression is a mutation's CEL expression.
type Expression struct {
	Expression string `json:"expression"`
}

// Patch types of a Mutation.
const (
	PatchTypeJSONPatch          = "JSONPatch"
	PatchTypeApplyConfiguration = "ApplyConfiguration"
)

// failurePolicy applies the default, Fail.
func (p *Policy) failurePolicy() admissionregistrationv1.FailurePolicyType {
	if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy == "" {
		return admissionregistrationv1.Fail
	}
	return *p.Spec.FailurePolicy
}

// policyScheme knows every served version of the policy kinds, so that
// files are decoded strictly against the right Go type.
var policyScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(admissionregistrationv1.AddToScheme(s))
	utilruntime.Must(admissionregistrationv1beta1.AddToScheme(s))
	utilruntime.Must(admissionregistrationv1alpha1.AddToScheme(s))
	return s
}()

var policyKinds = map[string]Kind{
	kinds.ValidatingAdmissionPolicy:        ValidatingPolicy,
	kinds.ValidatingAdmissionPolicyBinding: ValidatingPolicyBinding,
	kinds.MutatingAdmissionPolicy:          MutatingPolicy,
	kinds.MutatingAdmissionPolicyBinding:   MutatingPolicyBinding,
}

// decodePolicy reads a policy, a binding, or (any other object with a kind
// and a name) a param. ok is false for what is none of these.
func decodePolicy(tm typeMeta, raw []byte) (Configuration, bool, error) {
	kind, isPolicy := policyKinds[tm.Kind]
	if isPolicy {
		gv, err := schema.ParseGroupVersion(tm.APIVersion)
		if err != nil || gv.Group != "admissionregistration.k8s.io" {
			return Configuration{}, false, fmt.Errorf("%s has apiVersion %q, not admissionregistration.k8s.io", tm.Kind, tm.APIVersion)
		}
		typed, err := policyScheme.New(gv.WithKind(tm.Kind))
		if err != nil {
			return Configuration{}, false, fmt.Errorf("%s is not served as %s (ValidatingAdmissionPolicy: v1; MutatingAdmissionPolicy: v1alpha1, v1beta1)", tm.Kind, tm.APIVersion)
		}
		if err := sigsyaml.UnmarshalStrict(raw, typed); err != nil {
			return Configuration{}, false, fmt.Errorf("%s: %w", tm.Kind, err)
		}
	} else {
		kind = Param
	}
	p, err := policyFromJSON(raw)
	if err != nil {
		return Configuration{}, false, err
	}
	if kind == Param && (p.APIVersion == "" || p.Kind == "" || p.Name == "") {
		return Configuration{}, false, nil
	}
	return Configuration{Kind: kind, Policy: p}, true, nil
}

func policyFromJSON(raw []byte) (*Policy, error) {
	var doc struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	p := &Policy{APIVersion: doc.APIVersion, Kind: doc.Kind, Name: doc.Metadata.Name, Namespace: doc.Metadata.Namespace, Labels: doc.Metadata.Labels}
	if err := json.Unmarshal(raw, &p.Object); err != nil {
		return nil, err
	}
	if _, isPolicy := policyKinds[doc.Kind]; isPolicy {
		var s struct {
			Spec PolicySpec `json:"spec"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", doc.Kind, err)
		}
		p.Spec = s.Spec
	}
	return p, nil
}

// policyFromObject wraps a decoded policy or binding of any served version.
func policyFromObject(o runtime.Object) (Configuration, bool, error) {
	gvks, _, err := policyScheme.ObjectKinds(o)
	if err != nil || len(gvks) == 0 {
		return Configuration{}, false, nil
	}
	kind, ok := policyKinds[gvks[0].Kind]
	if !ok {
		return Configuration{}, false, nil
	}
	o = o.DeepCopyObject()
	o.GetObjectKind().SetGroupVersionKind(gvks[0])
	raw, err := json.Marshal(o)
	if err != nil {
		return Configuration{}, false, err
	}
	p, err := policyFromJSON(raw)
	if err != nil {
		return Configuration{}, false, err
	}
	return Configuration{Kind: kind, Policy: p, item: -1}, true, nil
}

// isPolicyKind tells the policies and bindings from webhooks and params.
func (k Kind) isPolicyKind() bool { _, ok := policyKindName[k]; return ok }

var policyKindName = map[Kind]string{
	ValidatingPolicy:        kinds.ValidatingAdmissionPolicy,
	ValidatingPolicyBinding: kinds.ValidatingAdmissionPolicyBinding,
	MutatingPolicy:          kinds.MutatingAdmissionPolicy,
	MutatingPolicyBinding:   kinds.MutatingAdmissionPolicyBinding,
}

// bindingKind is the kind of the bindings of policy kind k.
func (k Kind) bindingKind() Kind {
	if k == MutatingPolicy {
		return MutatingPolicyBinding
	}
	return ValidatingPolicyBinding
}

// paramMatches tells whether object p is of the param kind pk.
func (p *Policy) isOfKind(pk *admissionregistrationv1.ParamKind) bool {
	if pk == nil {
		return false
	}
	want, err := schema.ParseGroupVersion(pk.APIVersion)
	have, err2 := schema.ParseGroupVersion(p.APIVersion)
	// Any served version of the same group: the param is converted.
	return err == nil && err2 == nil && want.Group == have.Group && strings.EqualFold(pk.Kind, p.Kind)
}

// Subject names what the finding is about: "CONFIGURATION/WEBHOOK" for a
// webhook, "KIND POLICY (binding BINDING)" for an admission policy.
func (f Finding) Subject() string {
	if f.ObjectKind == "" {
		return f.Configuration + "/" + f.Webhook
	}
	if f.Binding == "" {
		return f.ObjectKind + " " + f.Configuration
	}
	return f.ObjectKind + " " + f.Configuration + " (binding " + f.Binding + ")"
}

// HasAdmissionObjects tells whether cfgs hold something to audit: a
// webhook configuration, a policy or a binding (params alone are not).
func HasAdmissionObjects(cfgs []Configuration) bool {
	for _, c := range cfgs {
		if c.Kind != Param {
			return true
		}
	}
	return false
}

// withListType gives an item of a typed List (what the API server returns:
// its items carry no apiVersion and kind) the list's type.
func withListType(item json.RawMessage, list typeMeta) json.RawMessage {
	if list.Kind == "List" || !strings.HasSuffix(list.Kind, "List") {
		return item
	}
	var obj map[string]interface{}
	if json.Unmarshal(item, &obj) != nil || obj["kind"] != nil {
		return item
	}
	obj["kind"], obj["apiVersion"] = strings.TrimSuffix(list.Kind, "List"), list.APIVersion
	out, err := json.Marshal(obj)
	if err != nil {
		return item
	}
	return out
}
