package etcdtest

import (
	"bytes"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1alpha1 "k8s.io/api/admissionregistration/v1alpha1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

var (
	scheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		utilruntime.Must(admissionregistrationv1.AddToScheme(s))
		utilruntime.Must(admissionregistrationv1beta1.AddToScheme(s))
		utilruntime.Must(admissionregistrationv1alpha1.AddToScheme(s))
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

// EncodeJSON encodes obj as JSON in version gv (--storage-media-type=application/json).
func EncodeJSON(obj runtime.Object, gv schema.GroupVersion) ([]byte, error) {
	enc := codecs.EncoderForVersion(kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{}), gv)
	var buf bytes.Buffer
	if err := enc.Encode(obj, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
