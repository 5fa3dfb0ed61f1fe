package etcd_test

import (
	"bytes"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/breakglass-dev/breakglass/etcd"
)

// encodeStored encodes obj as kube-apiserver's storage codec does, with
// the real protobuf serializer (the tally reads it by field numbers).
func encodeStored(t *testing.T, obj runtime.Object, gv schema.GroupVersion) []byte {
	t.Helper()
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(appsv1.AddToScheme(s))
	enc := serializer.NewCodecFactory(s).EncoderForVersion(protobuf.NewSerializer(s, s), gv)
	var buf bytes.Buffer
	if err := enc.Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestVersionTally(t *testing.T) {
	applied := `{"apiVersion":"extensions/v1beta1","kind":"Deployment","metadata":{"name":"web"}}`
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop",
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b", etcd.LastAppliedAnnotation: applied, "z": "y"}}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "shop"}, Data: map[string]string{"k": "v"}}
	tally := etcd.NewVersionTally("/registry")
	for _, kv := range [][2]string{
		{"/registry/deployments/shop/web", string(encodeStored(t, dep, appsv1.SchemeGroupVersion))},
		{"/registry/configmaps/shop/plain", string(encodeStored(t, cm, corev1.SchemeGroupVersion))},
		{"/registry/configmaps/shop/other", string(encodeStored(t, cm, corev1.SchemeGroupVersion))},
		{"/registry/horizontalpodautoscalers/shop/web", `{"apiVersion":"autoscaling/v2beta2","kind":"HorizontalPodAutoscaler","metadata":{"name":"web","annotations":{"` + etcd.LastAppliedAnnotation + `":"{\"apiVersion\":\"autoscaling/v2beta2\",\"kind\":\"HorizontalPodAutoscaler\"}"}}}`},
		{"/registry/secrets/shop/token", "k8s:enc:secretbox:v1:key1:\x00\x01\x02"},
		{"/registry/pods/shop/broken", "k8s\x00\xff\xff"},
		{"/registry/odd", "whatever"},
		{"compact_rev_key", "1"},
	} {
		tally.Add([]byte(kv[0]), []byte(kv[1]))
	}
	got := tally.Result()
	want := []etcd.StoredVersion{
		{Resource: "configmaps", APIVersion: "v1", Kind: "ConfigMap", Count: 2, Example: "/registry/configmaps/shop/plain"},
		{Resource: "deployments", APIVersion: "apps/v1", Kind: "Deployment", Count: 1, Example: "/registry/deployments/shop/web"},
		{Resource: "horizontalpodautoscalers", APIVersion: "autoscaling/v2beta2", Kind: "HorizontalPodAutoscaler", Count: 1, Example: "/registry/horizontalpodautoscalers/shop/web"},
	}
	if len(got.Stored) != len(want) {
		t.Fatalf("stored %+v", got.Stored)
	}
	for i := range want {
		if got.Stored[i] != want[i] {
			t.Errorf("stored[%d] = %+v, want %+v", i, got.Stored[i], want[i])
		}
	}
	if len(got.Applied) != 2 || got.Applied[0].APIVersion != "extensions/v1beta1" || got.Applied[0].Resource != "deployments" ||
		got.Applied[1].APIVersion != "autoscaling/v2beta2" {
		t.Errorf("applied %+v", got.Applied)
	}
	if got.Encrypted["secrets"] != 1 || got.Unreadable != 1 || got.Keys != 6 {
		t.Errorf("encrypted %v, unreadable %d, keys %d", got.Encrypted, got.Unreadable, got.Keys)
	}
	if etcd.GroupOf("v1") != "" || etcd.GroupOf("apps/v1") != "apps" {
		t.Error("etcd.GroupOf")
	}
}

// The tally rides on Usage's one pass (etcd.UsageOptions.Visit) over a real etcd.
func TestUsageVisitsEveryKey(t *testing.T) {
	cl := newCluster(t)
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}}
	for _, k := range []string{"/registry/configmaps/default/a", "/registry/configmaps/default/b"} {
		cl.put(t, k, encodeStored(t, cm, corev1.SchemeGroupVersion))
	}
	tally := etcd.NewVersionTally("/registry")
	u, err := cl.c.Usage(ctx, etcd.UsageOptions{Visit: tally.Add})
	if err != nil {
		t.Fatal(err)
	}
	got := tally.Result()
	if got.Keys != 2 || len(got.Stored) != 1 || got.Stored[0].Count != 2 || u.Total.Keys < 2 {
		t.Errorf("tally %+v, usage total %+v", got, u.Total)
	}
}

// A stored Node says its name, InternalIP, kubelet version and Talos
// version (its OS image), read by field numbers from the real encoding.
func TestReadNode(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Labels: map[string]string{"a": "b"}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "worker-1"}, {Type: corev1.NodeInternalIP, Address: "10.5.0.7"}, {Type: corev1.NodeInternalIP, Address: "fd00::7"}},
			NodeInfo:  corev1.NodeSystemInfo{KubeletVersion: "v1.33.4", OSImage: "Talos (v1.11.2)", KernelVersion: "6.12"},
		}}
	want := etcd.NodeInfo{Name: "worker-1", InternalIP: "10.5.0.7", KubeletVersion: "v1.33.4", OSImage: "Talos (v1.11.2)"}
	got, ok := etcd.ReadNode(encodeStored(t, n, corev1.SchemeGroupVersion))
	if !ok || got != want || got.TalosVersion() != "v1.11.2" {
		t.Errorf("protobuf: %+v %v (%q)", got, ok, got.TalosVersion())
	}
	js := `{"apiVersion":"v1","kind":"Node","metadata":{"name":"worker-1"},"status":{"addresses":[{"type":"InternalIP","address":"10.5.0.7"}],"nodeInfo":{"kubeletVersion":"v1.33.4","osImage":"Talos (v1.11.2)"}}}`
	if got, ok := etcd.ReadNode([]byte(js)); !ok || got != want {
		t.Errorf("json: %+v %v", got, ok)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	for _, v := range [][]byte{encodeStored(t, cm, corev1.SchemeGroupVersion), []byte("k8s:enc:aescbc:v1:k:xxx"), []byte(`{"apiVersion":"v1","kind":"Pod"}`)} {
		if _, ok := etcd.ReadNode(v); ok {
			t.Errorf("read %.20q as a Node", v)
		}
	}
	if (etcd.NodeInfo{OSImage: "Ubuntu 24.04"}).TalosVersion() != "" {
		t.Error("a Talos version in Ubuntu")
	}
}
