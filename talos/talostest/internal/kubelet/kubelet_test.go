package kubelet_test

import (
	"context"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/state"

	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/host"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/kubelet"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/machined"
	"github.com/breakglass-dev/breakglass/talos/talostest/internal/staticpod"
)

// The kubelet needs nothing of its node but its host: it runs what the StaticPod
// resource of the node's state says, at its own polls, and reports the pod in the
// StaticPodStatus resource.
func TestKubeletFollowsTheStaticPodResource(t *testing.T) {
	ctx := t.Context()

	st, err := machined.NewState(ctx)
	if err != nil {
		t.Fatal(err)
	}

	h := &host.Host{Name: "cp-1", IP: "127.0.0.11", State: st, Events: host.NewBus(), Logs: host.NewLogs(), Dir: t.TempDir(), Life: ctx}
	k := kubelet.New(h, kubelet.StandIn{}, kubelet.Options{TimeScale: 0.01, PollInterval: time.Hour})

	k.Start()
	t.Cleanup(k.Wait)

	render := func(image string) {
		pod, err := staticpod.Manifest(staticpod.ContainerConfig{Image: image, Command: []string{staticpod.Binary, "--v=1"}}, image)
		if err != nil {
			t.Fatal(err)
		}

		if err := st.Modify(ctx, k8s.NewStaticPod(k8s.NamespaceName, k8s.APIServerID), func(r resource.Resource) error {
			r.(*k8s.StaticPod).TypedSpec().Pod = pod

			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	wait := func(what string, cond func(kubelet.PodState) bool) kubelet.PodState {
		t.Helper()

		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()

		p, err := k.WaitPod(wctx, cond)
		if err != nil {
			t.Fatalf("%s: %v (%+v)", what, err, p)
		}

		return p
	}

	k.Poll() // its start's fetch is done: no manifest, no pod
	render("registry.k8s.io/kube-apiserver:v1.34.4")

	if p := k.Pod(); p.Present {
		t.Fatalf("a pod before the kubelet's poll: %+v", p)
	}

	k.Poll()
	first := wait("the pod running", func(p kubelet.PodState) bool { return p.Running })

	k.RefreshStatus()

	md := k8s.NewStaticPodStatus(k8s.NamespaceName, "kube-system/kube-apiserver-cp-1").Metadata()
	if _, err := st.Get(ctx, md); err != nil {
		t.Fatalf("StaticPodStatus after a refresh: %v", err)
	}

	// the manifest removed (etcd stopped running): the pod goes at the next poll
	if err := st.Destroy(ctx, k8s.NewStaticPod(k8s.NamespaceName, k8s.APIServerID).Metadata()); err != nil {
		t.Fatal(err)
	}

	k.Poll()
	wait("the pod gone", func(p kubelet.PodState) bool { return !p.Present && !p.Terminating })

	render("registry.k8s.io/kube-apiserver:v1.34.4")
	k.Poll()

	if p := wait("a new pod", func(p kubelet.PodState) bool { return p.Running }); p.UID == first.UID {
		t.Errorf("the same pod again: %+v", p)
	}

	k.Stop()

	if _, err := st.Get(ctx, md); !state.IsNotFoundError(err) {
		t.Errorf("StaticPodStatus once the kubelet stopped: %v", err)
	}

	if p := k.Pod(); !p.Running {
		t.Errorf("a stopped kubelet's containers keep running: %+v", p)
	}
}
