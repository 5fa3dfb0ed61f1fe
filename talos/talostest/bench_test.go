package talostest_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// BenchmarkDisableRestoreCycle measures one NO_REBOOT apply of a .cluster change plus
// the wait for the re-rendered pod to be ready, then the same back to the original
// config, through the real client (stand-in runner ready after 50ms).
func BenchmarkDisableRestoreCycle(b *testing.B) {
	c, err := talostest.NewCluster(b.Context(), talostest.ClusterOptions{Dir: b.TempDir(), Kubelet: fastKubelet()})
	if err != nil {
		b.Fatal(err)
	}

	b.Cleanup(c.Close)

	cl := newClient(b, c, role.Admin)
	n := c.Nodes[0]
	orig := n.RunningConfig()
	edited := withExtraArg(b, orig, "disable-admission-plugins", "ValidatingAdmissionWebhook")

	wait := func(want bool) {
		deadline := time.Now().Add(10 * time.Second)

		for {
			p := n.Pod()
			if p.Ready && talostest.FlagHas(p.Config, "disable-admission-plugins", "ValidatingAdmissionWebhook") == want {
				return
			}

			if time.Now().After(deadline) {
				b.Fatal("pod not ready in time")
			}

			time.Sleep(time.Millisecond) //nolint:forbidigo
		}
	}

	for b.Loop() {
		if _, err := apply(b.Context(), cl, n.IP, edited, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
			b.Fatal(err)
		}

		wait(true)

		if _, err := apply(b.Context(), cl, n.IP, orig, machine.ApplyConfigurationRequest_NO_REBOOT, false, 0); err != nil {
			b.Fatal(err)
		}

		wait(false)
	}
}

// BenchmarkNewCluster measures generating secrets and configs and starting three nodes.
func BenchmarkNewCluster(b *testing.B) {
	for b.Loop() {
		c, err := talostest.NewCluster(b.Context(), talostest.ClusterOptions{ControlPlanes: 3, Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}

		c.Close()
	}
}
