package talos

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

func TestSupportsListArgs(t *testing.T) {
	for v, want := range map[string]bool{
		"v1.13.8": true, "v1.13.0": true, "v1.14.1": true, "v2.0.0": true,
		"v1.12.4": false, "v1.11.0": false, "": false, "garbage": false, "v1": false,
	} {
		if got := SupportsListArgs(v); got != want {
			t.Errorf("SupportsListArgs(%q) = %v, want %v", v, got, want)
		}
	}
}

// The node's gRPC codes become the kinds the commands map to exit codes.
func TestNodeErrorKinds(t *testing.T) {
	cases := []struct {
		err  error
		want error
		hint string
	}{
		{status.Error(codes.PermissionDenied, "not authorized"), ErrPermission, "needs os:admin"},
		{status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.11:50000: connect: connection refused"`), ErrUnreachable, "talosctl -n 127.0.0.11 version"},
		{status.Error(codes.InvalidArgument, "this config change can't be applied in immediate mode\ndiff: ..."), ErrNeedsReboot, ""},
		{status.Error(codes.InvalidArgument, "1 error occurred:\n\t* unknown keys found during decoding"), ErrRejected, ""},
		{status.Error(codes.FailedPrecondition, "another apply is in progress"), ErrBusy, "run the same command again"},
	}
	for _, c := range cases {
		err := nodeError("127.0.0.11", "apply config", c.err, "os:operator")
		if !errors.Is(err, c.want) {
			t.Errorf("%v: got %v, want kind %v", c.err, err, c.want)
		}
		if !strings.Contains(err.Error(), "node 127.0.0.11: apply config") {
			t.Errorf("the node is not named: %v", err)
		}
		var ne *NodeError
		if !errors.As(err, &ne) {
			t.Fatalf("not a *NodeError: %T", err)
		}
		if c.hint != "" && (len(ne.Hints()) == 0 || !strings.Contains(ne.Hints()[0], c.hint)) {
			t.Errorf("%v: hints %q, want one containing %q", c.err, ne.Hints(), c.hint)
		}
	}
	if nodeError("n", "op", nil, "") != nil {
		t.Error("nil error must stay nil")
	}
}

// A log read of a container the node no longer has is ErrNoContainer, in
// the node's words (gRPC Unknown, as machined and the emulator answer);
// other failures are not.
func TestLogsOfAGoneContainer(t *testing.T) {
	c := &Client{}
	const words = `container "kube-system/kube-apiserver-cp1:kube-apiserver:0123abcd" not found`
	for _, gone := range []error{status.Error(codes.Unknown, words), errors.New(words)} {
		err := c.logsError(t.Context(), "127.0.0.11", gone)
		if !errors.Is(err, ErrNoContainer) || err.Error() != "node 127.0.0.11: read kube-apiserver logs: "+words {
			t.Errorf("%v: got %v", gone, err)
		}
	}
	for _, other := range []error{status.Error(codes.Unknown, "stream closed"), status.Error(codes.PermissionDenied, "not found")} {
		if err := c.logsError(t.Context(), "127.0.0.11", other); errors.Is(err, ErrNoContainer) {
			t.Errorf("%v: taken for a gone container", other)
		}
	}
}

// ReadFacts reads the v1alpha1 document and ignores documents of kinds it
// does not know (a config from a newer Talos).
func TestReadFacts(t *testing.T) {
	cfg := `version: v1alpha1
machine:
  type: controlplane
cluster:
  clusterName: prod
  apiServer:
    image: registry.k8s.io/kube-apiserver:v1.34.4
  etcd:
    ca:
      crt: ` + "TFMwdExTMUNSVWRKVGlCRFJWSlVTVVpKUTBGVVJTMHRMUzB0Q2c9PQ==" + `
      key: ""
---
apiVersion: v1alpha1
kind: FutureConfig
machine:
  type: worker
`
	f, err := ReadFacts([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if !f.IsControlPlane() || f.ClusterName != "prod" || !strings.HasSuffix(f.APIServerImage, ":v1.34.4") || len(f.EtcdCACert) == 0 || f.EtcdCAKey != nil {
		t.Errorf("facts %+v", f)
	}
	if _, err := ReadFacts([]byte("apiVersion: v1alpha1\nkind: HostnameConfig\n")); err == nil {
		t.Error("a config without a v1alpha1 document must be an error")
	}
}

func TestParsePodStatus(t *testing.T) {
	ps := map[string]any{
		"conditions": []any{map[string]any{"type": "Ready", "status": "False"}},
		"containerStatuses": []any{map[string]any{
			"name": "kube-apiserver", "restartCount": float64(4), "containerID": "containerd://abc",
			"state": map[string]any{"waiting": map[string]any{"reason": "CrashLoopBackOff"}},
		}},
	}
	st := parsePodStatus(ps)
	if !st.Found || st.Ready || st.Running || st.RestartCount != 4 || st.WaitingReason != "CrashLoopBackOff" || st.ContainerID != "containerd://abc" {
		t.Errorf("status %+v", st)
	}
}

// A control-plane node's CRI list as machined sends it: every ready sandbox
// followed by its containers, pods in map order, other pods between. Two
// kube-apiserver sandboxes share the pod name; each container goes with the
// sandbox before it.
func TestAPIServerPodsFromTheCRIList(t *testing.T) {
	const pod = "kube-system/kube-apiserver-cp1"
	sandbox := func(podID, id, uid string) *machine.ContainerInfo {
		return &machine.ContainerInfo{Namespace: "k8s.io", Id: podID, Name: podID, PodId: podID, InternalId: id, Uid: uid, Status: "SANDBOX_READY"}
	}
	ctr := func(podID, name, id, st string) *machine.ContainerInfo {
		return &machine.ContainerInfo{Namespace: "k8s.io", Id: podID + ":" + name + ":" + id[:4], Name: name, PodId: podID, InternalId: id, Status: st}
	}
	list := []*machine.ContainerInfo{
		sandbox("kube-system/kube-scheduler-cp1", "s1", "u1"),
		ctr("kube-system/kube-scheduler-cp1", "kube-scheduler", "c1aaaa", "CONTAINER_RUNNING"),
		sandbox(pod, "s2", "old"),
		ctr(pod, "kube-apiserver", "c2aaaa", "CONTAINER_EXITED"),
		ctr(pod, "kube-apiserver", "c3aaaa", "CONTAINER_RUNNING"),
		sandbox("kube-system/kube-apiserver-cp10", "s9", "other"), // another node name that starts alike
		ctr("kube-system/kube-apiserver-cp10", "kube-apiserver", "c9aaaa", "CONTAINER_RUNNING"),
		sandbox("kube-system/kube-flannel-xyz", "s3", "u3"),
		ctr("kube-system/kube-flannel-xyz", "kube-apiserver", "c4aaaa", "CONTAINER_RUNNING"), // a container of that name elsewhere
		sandbox(pod, "s5", ""), // a Talos before 1.9: no UID
		ctr(pod, "kube-apiserver", "c5aaaa", "CONTAINER_CREATED"),
	}
	got := apiServerPods(list, "cp1")
	want := []RuntimePod{
		{UID: "old", SandboxID: "s2", Containers: []RuntimeContainer{{ID: "c2aaaa"}, {ID: "c3aaaa", Running: true}}},
		{SandboxID: "s5", Containers: []RuntimeContainer{{ID: "c5aaaa"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pods %+v\nwant %+v", got, want)
	}
	if c, ok := got[0].Running(); !ok || c.ID != "c3aaaa" || got[0].Key() != "old" {
		t.Errorf("first pod: running %v %v, key %q", c, ok, got[0].Key())
	}
	if _, ok := got[1].Running(); ok || got[1].Key() != "s5" {
		t.Errorf("second pod: a created container is not running; key %q (want the sandbox ID without a UID)", got[1].Key())
	}
}
