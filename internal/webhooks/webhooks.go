// Package webhooks reduces one admission webhook to what an incident needs,
// with kube-apiserver's defaults applied: the summary that etcd lists, the
// audit judges and diagnose reports. It imports nothing of the project.
package webhooks

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Summary is the part of one webhook that matters during an incident.
type Summary struct {
	Name string `json:"name"`
	// FailurePolicy is the effective policy (the API default when unset).
	FailurePolicy      string                                       `json:"failurePolicy"`
	MatchPolicy        string                                       `json:"matchPolicy,omitempty"`
	SideEffects        string                                       `json:"sideEffects,omitempty"`
	ReinvocationPolicy string                                       `json:"reinvocationPolicy,omitempty"`
	Rules              []admissionregistrationv1.RuleWithOperations `json:"rules,omitempty"`
	NamespaceSelector  *metav1.LabelSelector                        `json:"namespaceSelector,omitempty"`
	ObjectSelector     *metav1.LabelSelector                        `json:"objectSelector,omitempty"`
	MatchConditions    []admissionregistrationv1.MatchCondition     `json:"matchConditions,omitempty"`
	ClientConfig       admissionregistrationv1.WebhookClientConfig  `json:"clientConfig"`
	// TimeoutSeconds is the effective timeout (the API default when unset).
	TimeoutSeconds int32 `json:"timeoutSeconds"`
}

// Target is the webhook's client config in one line: its URL, or
// service NAMESPACE/NAME:PORT/PATH.
func (w Summary) Target() string {
	cc := w.ClientConfig
	switch {
	case cc.URL != nil:
		return *cc.URL
	case cc.Service != nil:
		port := int32(443)
		if cc.Service.Port != nil {
			port = *cc.Service.Port
		}
		p := ""
		if cc.Service.Path != nil {
			p = *cc.Service.Path
		}
		return fmt.Sprintf("service %s/%s:%d%s", cc.Service.Namespace, cc.Service.Name, port, p)
	}
	return "none"
}

// Defaults are the failurePolicy and timeoutSeconds kube-apiserver applies
// to a webhook that sets none, by the admissionregistration.k8s.io version
// it was written as: v1beta1 had other defaults than v1.
func Defaults(version string) (failurePolicy string, timeoutSeconds int32) {
	if version == "v1beta1" {
		return string(admissionregistrationv1.Ignore), 30
	}
	return string(admissionregistrationv1.Fail), 10
}

// DefaultMatchPolicy is the matchPolicy of a v1 webhook that sets none
// (Summary keeps it unset, as written).
const DefaultMatchPolicy = admissionregistrationv1.Equivalent

// FromValidating summarizes a v1 validating webhook.
func FromValidating(w admissionregistrationv1.ValidatingWebhook) Summary {
	return fromV1(Summary{Name: w.Name, Rules: w.Rules, NamespaceSelector: w.NamespaceSelector, ObjectSelector: w.ObjectSelector,
		MatchConditions: w.MatchConditions, ClientConfig: w.ClientConfig},
		w.FailurePolicy, w.MatchPolicy, w.SideEffects, nil, w.TimeoutSeconds)
}

// FromMutating summarizes a v1 mutating webhook.
func FromMutating(w admissionregistrationv1.MutatingWebhook) Summary {
	return fromV1(Summary{Name: w.Name, Rules: w.Rules, NamespaceSelector: w.NamespaceSelector, ObjectSelector: w.ObjectSelector,
		MatchConditions: w.MatchConditions, ClientConfig: w.ClientConfig},
		w.FailurePolicy, w.MatchPolicy, w.SideEffects, w.ReinvocationPolicy, w.TimeoutSeconds)
}

func fromV1(s Summary, fp *admissionregistrationv1.FailurePolicyType, mp *admissionregistrationv1.MatchPolicyType,
	se *admissionregistrationv1.SideEffectClass, rp *admissionregistrationv1.ReinvocationPolicyType, timeout *int32) Summary {
	s.FailurePolicy, s.TimeoutSeconds = Defaults("v1")
	if fp != nil {
		s.FailurePolicy = string(*fp)
	}
	if timeout != nil {
		s.TimeoutSeconds = *timeout
	}
	if mp != nil {
		s.MatchPolicy = string(*mp)
	}
	if se != nil {
		s.SideEffects = string(*se)
	}
	if rp != nil {
		s.ReinvocationPolicy = string(*rp)
	}
	return s
}
