package etcd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1alpha1 "k8s.io/api/admissionregistration/v1alpha1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/internal/webhooks"
)

// Encoding says how a value is stored.
type Encoding string

// Value encodings found in etcd.
const (
	EncodingProtobuf Encoding = "protobuf"  // "k8s\x00" + runtime.Unknown, what kube-apiserver writes
	EncodingJSON     Encoding = "json"      // old clusters, or --storage-media-type=application/json
	EncodingEncrypt  Encoding = "encrypted" // "k8s:enc:" encryption at rest; never decoded
	EncodingUnknown  Encoding = "unknown"   // none of the above
)

var (
	protobufMagic  = []byte("k8s\x00")
	encryptedMagic = []byte("k8s:enc:")
)

// Object is one admission object as found in etcd. A value that cannot be
// decoded is still an Object: DecodeError says why, Value holds the bytes.
type Object struct {
	Resource       kinds.Kind `json:"resource"`
	Kind           string     `json:"kind"`
	Name           string     `json:"name"`
	Key            string     `json:"key"`
	CreateRevision int64      `json:"createRevision"`
	ModRevision    int64      `json:"modRevision"`
	Version        int64      `json:"version"`
	Encoding       Encoding   `json:"encoding"`
	// EncryptionProvider is e.g. "aescbc:v1:key1" for an encrypted value.
	EncryptionProvider string `json:"encryptionProvider,omitempty"`
	// APIVersion is the version the value was stored as.
	APIVersion string `json:"apiVersion,omitempty"`
	// StoredKind is the kind the value says it is, when that kind does not
	// belong under the key's resource (the value is then not decoded).
	StoredKind string `json:"storedKind,omitempty"`
	// StoredName is the value's own metadata.name when it is not the name
	// in the key: kube-apiserver lists the object by it, but keeps it under
	// the key. breakglass backs it up and removes it by its key.
	StoredName string `json:"storedName,omitempty"`
	// Unreadable: an encrypted value no key reads, under any key of the
	// prefix (PlanUnreadable); Resource is empty, Name its path.
	Unreadable  bool        `json:"unreadable,omitempty"`
	DecodeError string      `json:"decodeError,omitempty"`
	Webhooks    []Webhook   `json:"webhooks,omitempty"`
	Policy      *PolicyInfo `json:"policy,omitempty"`
	// Decoded is the k8s.io/api object (nil when not decoded).
	Decoded runtime.Object `json:"object,omitempty"`
	// Value is the raw value, byte for byte.
	Value []byte `json:"value"`
}

// Decodable reports whether the value was decoded into a Kubernetes object.
func (o *Object) Decodable() bool { return o.Decoded != nil }

// Webhook is the part of one webhook that matters during an incident,
// with the API defaults applied (webhooks.Summary).
type Webhook = webhooks.Summary

// PolicyInfo summarizes an admission policy or policy binding.
type PolicyInfo struct {
	FailurePolicy     string                                   `json:"failurePolicy,omitempty"`
	ParamKind         *admissionregistrationv1.ParamKind       `json:"paramKind,omitempty"`
	MatchConstraints  *admissionregistrationv1.MatchResources  `json:"matchConstraints,omitempty"`
	MatchConditions   []admissionregistrationv1.MatchCondition `json:"matchConditions,omitempty"`
	Validations       int                                      `json:"validations,omitempty"`
	Mutations         int                                      `json:"mutations,omitempty"`
	PolicyName        string                                   `json:"policyName,omitempty"`
	ValidationActions []string                                 `json:"validationActions,omitempty"`
	ParamRef          *admissionregistrationv1.ParamRef        `json:"paramRef,omitempty"`
	MatchResources    *admissionregistrationv1.MatchResources  `json:"matchResources,omitempty"`
}

// codecs decode what kube-apiserver writes: every served version of
// admissionregistration is registered, since an old object keeps the
// version it was last written with.
var codecs = func() (c struct {
	scheme *runtime.Scheme
	pb     *protobuf.Serializer
	js     *kjson.Serializer
}) {
	c.scheme = runtime.NewScheme()
	utilruntime.Must(admissionregistrationv1.AddToScheme(c.scheme))
	utilruntime.Must(admissionregistrationv1beta1.AddToScheme(c.scheme))
	utilruntime.Must(admissionregistrationv1alpha1.AddToScheme(c.scheme))
	c.pb = protobuf.NewSerializer(c.scheme, c.scheme)
	c.js = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, c.scheme, c.scheme, kjson.SerializerOptions{})
	return c
}()

// decodeObject fills an Object from one key/value. It never fails: what
// cannot be decoded is described in the Object.
func decodeObject(r kinds.Kind, name, key string, value []byte, create, mod, version int64) Object {
	o := Object{
		Resource: r, Kind: r.Kind(), Name: name, Key: key,
		CreateRevision: create, ModRevision: mod, Version: version,
		Value: value,
	}
	def := storageVersions[r].WithKind(r.Kind())
	var (
		obj runtime.Object
		gvk *schema.GroupVersionKind
		err error
	)
	switch {
	case bytes.HasPrefix(value, encryptedMagic):
		o.Encoding = EncodingEncrypt
		o.EncryptionProvider = encryptionProvider(value)
		return o
	case bytes.HasPrefix(value, protobufMagic):
		o.Encoding = EncodingProtobuf
		obj, gvk, err = codecs.pb.Decode(value, &def, nil)
	case bytes.HasPrefix(bytes.TrimLeft(value, " \t\r\n"), []byte("{")):
		o.Encoding = EncodingJSON
		obj, gvk, err = codecs.js.Decode(value, &def, nil)
	default:
		o.Encoding = EncodingUnknown
		o.DecodeError = "value is neither protobuf (k8s\\x00), JSON nor encrypted (k8s:enc:)"
		return o
	}
	if gvk != nil && gvk.Version != "" {
		o.APIVersion = gvk.GroupVersion().String()
	}
	if gvk != nil && gvk.Kind != "" && gvk.Kind != r.Kind() {
		// Known to the scheme or not, the envelope says what it is.
		o.StoredKind = gvk.Kind
		o.DecodeError = fmt.Sprintf("stored kind %s does not belong under %s", gvk.Kind, r)
		return o
	}
	if err != nil {
		o.DecodeError = err.Error()
		return o
	}
	// The serializer leaves TypeMeta empty; set it so JSON output says what it is.
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	o.Decoded = obj
	if m, err := meta.Accessor(obj); err == nil && m.GetName() != name {
		o.StoredName = m.GetName()
	}
	if err := summarize(&o, gvk.Version); err != nil {
		o.DecodeError = err.Error()
	}
	return o
}

// encryptionProvider extracts "aescbc:v1:key1" from "k8s:enc:aescbc:v1:key1:<ciphertext>".
func encryptionProvider(v []byte) string {
	st := encryption.Classify(v)
	if st.Form != encryption.Encrypted && st.Form != encryption.KMSForm {
		return "unknown"
	}
	return fmt.Sprintf("%s:%s:%s", st.Provider, st.Version, st.Key)
}

// summarize reads the incident-relevant fields through JSON, which has the
// same field names in every version, instead of one accessor per Go type.
func summarize(o *Object, version string) error {
	raw, err := json.Marshal(o.Decoded)
	if err != nil {
		return err
	}
	var doc struct {
		Webhooks []struct {
			Webhook
			FailurePolicy  *string `json:"failurePolicy"`
			TimeoutSeconds *int32  `json:"timeoutSeconds"`
		} `json:"webhooks"`
		Spec struct {
			FailurePolicy     string                                   `json:"failurePolicy"`
			ParamKind         *admissionregistrationv1.ParamKind       `json:"paramKind"`
			MatchConstraints  *admissionregistrationv1.MatchResources  `json:"matchConstraints"`
			MatchConditions   []admissionregistrationv1.MatchCondition `json:"matchConditions"`
			Validations       []json.RawMessage                        `json:"validations"`
			Mutations         []json.RawMessage                        `json:"mutations"`
			PolicyName        string                                   `json:"policyName"`
			ValidationActions []string                                 `json:"validationActions"`
			ParamRef          *admissionregistrationv1.ParamRef        `json:"paramRef"`
			MatchResources    *admissionregistrationv1.MatchResources  `json:"matchResources"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("summarize %s: %w", o.Kind, err)
	}
	if strings.HasSuffix(o.Kind, "WebhookConfiguration") {
		// v1beta1 had other defaults than v1.
		defPolicy, defTimeout := webhooks.Defaults(version)
		o.Webhooks = make([]Webhook, 0, len(doc.Webhooks))
		for _, w := range doc.Webhooks {
			wh := w.Webhook
			wh.FailurePolicy, wh.TimeoutSeconds = defPolicy, defTimeout
			if w.FailurePolicy != nil {
				wh.FailurePolicy = *w.FailurePolicy
			}
			if w.TimeoutSeconds != nil {
				wh.TimeoutSeconds = *w.TimeoutSeconds
			}
			o.Webhooks = append(o.Webhooks, wh)
		}
		return nil
	}
	s := doc.Spec
	o.Policy = &PolicyInfo{
		FailurePolicy: s.FailurePolicy, ParamKind: s.ParamKind, MatchConstraints: s.MatchConstraints,
		MatchConditions: s.MatchConditions, Validations: len(s.Validations), Mutations: len(s.Mutations),
		PolicyName: s.PolicyName, ValidationActions: s.ValidationActions, ParamRef: s.ParamRef, MatchResources: s.MatchResources,
	}
	if o.Policy.FailurePolicy == "" && (o.Resource == kinds.ValidatingAdmissionPolicies || o.Resource == kinds.MutatingAdmissionPolicies) {
		o.Policy.FailurePolicy = "Fail"
	}
	return nil
}
