package etcdtest

import (
	"bytes"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1alpha1 "k8s.io/api/admissionregistration/v1alpha1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

var (
	scheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		utilruntime.Must(admissionregistrationv1.AddToScheme(s))
		utilruntime.Must(admissionregistrationv1beta1.AddToScheme(s))
		utilruntime.Must(admissionregistrationv1alpha1.AddToScheme(s))
		utilruntime.Must(corev1.AddToScheme(s))
		return s
	}()
	codecs = serializer.NewCodecFactory(scheme)
)

// EncodeProtobuf encodes obj the way kube-apiserver's storage codec does:
// converted to version gv, then the protobuf serializer ("k8s\x00" and a
// runtime.Unknown envelope around the protobuf bytes).
func EncodeProtobuf(obj runtime.Object, gv schema.GroupVersion) ([]byte, error) {
	enc := codecs.EncoderForVersion(protobuf.NewSerializer(scheme, scheme), gv)
	var buf bytes.Buffer
	if err := enc.Encode(obj, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Namespace is a namespace as kube-apiserver stores it (protobuf), with
// its UID: kube-system's UID tells whose cluster an etcd's data is.
func Namespace(name, uid string) []byte {
	b, err := EncodeProtobuf(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}, corev1.SchemeGroupVersion)
	if err != nil {
		panic(err) // a fixed, valid object
	}
	return b
}

// EncodeJSON encodes obj as JSON in version gv (--storage-media-type=application/json).
func EncodeJSON(obj runtime.Object, gv schema.GroupVersion) ([]byte, error) {
	enc := codecs.EncoderForVersion(kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{}), gv)
	var buf bytes.Buffer
	if err := enc.Encode(obj, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// FailClosedWebhook is the incident's webhook configuration: failurePolicy
// Fail, every resource, CREATE and UPDATE, with the defaults kube-apiserver
// fills in, calling url (keep it on loopback).
func FailClosedWebhook(name, url string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	all := admissionregistrationv1.AllScopes
	timeout := int32(10)
	webhook := strings.ReplaceAll(name, "/", "-") + ".breakglass.test"
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "6c1e9f0e-0000-4000-8000-000000000001", Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         webhook,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}, Scope: &all},
			}},
			FailurePolicy: &fail, MatchPolicy: &equivalent, SideEffects: &none, TimeoutSeconds: &timeout,
			NamespaceSelector: &metav1.LabelSelector{}, ObjectSelector: &metav1.LabelSelector{},
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}
