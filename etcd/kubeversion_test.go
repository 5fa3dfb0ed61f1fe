package etcd_test

import (
	"bytes"
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
)

// The kubelet versions come from Node objects stored as protobuf (what
// kube-apiserver writes) or JSON; other values are not evidence.
func TestKubeletVersionsAndKeyExists(t *testing.T) {
	srv := etcdtest.StartPlain(t)
	ctx := context.Background()
	c, err := etcd.Connect(ctx, etcd.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	node := func(name, version string) *corev1.Node {
		return &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: version}}}
	}
	encode := func(obj runtime.Object) string {
		var pb bytes.Buffer
		if err := protobuf.NewSerializer(s, s).Encode(obj, &pb); err != nil {
			t.Fatal(err)
		}
		return pb.String()
	}
	cp1 := encode(node("cp1", "v1.33.5"))
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Name: "v1.30.0"}}
	for k, v := range map[string]string{
		"/registry/minions/cp1":             cp1,
		"/registry/minions/cp1-again":       encode(node("cp1-again", "v1.33.5")),
		"/registry/minions/cp4":             encode(node("cp4", "")), // no version: not evidence
		"/registry/minions/cp5":             cp1[:len(cp1)-3],        // truncated
		"/registry/minions/cp6":             encode(pod),             // not a Node
		"/registry/minions/cp7":             `{"apiVersion":"v1","kind":"Pod","status":{"nodeInfo":{"kubeletVersion":"v1.30.0"}}}`,
		"/registry/minions/cp2":             `{"apiVersion":"v1","kind":"Node","metadata":{"name":"cp2"},"status":{"nodeInfo":{"kubeletVersion":"v1.32.9"}}}`,
		"/registry/minions/cp3":             "k8s:enc:secretbox:v1:key1:xxxx",
		"/registry/servicecidrs/kubernetes": "{}",
		"/registry/minionsextra/not-a-node": `{"apiVersion":"v1","kind":"Node","status":{"nodeInfo":{"kubeletVersion":"v9.9.9"}}}`,
	} {
		if _, err := c.KV().Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.KubeletVersions(ctx)
	if err != nil || !reflect.DeepEqual(got, []string{"v1.33.5", "v1.32.9"}) {
		t.Errorf("KubeletVersions: %v %v", got, err)
	}
	for name, want := range map[string]bool{"kubernetes": true, "other": false} {
		if ok, err := c.KeyExists(ctx, "servicecidrs", name); err != nil || ok != want {
			t.Errorf("KeyExists servicecidrs/%s: %v %v", name, ok, err)
		}
	}
}
