package recovery

import (
	"context"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// BenchmarkDisableRestoreCycle measures breakglass's own cost of a whole
// disable and restore (plan with the nodes' dry runs, record, apply, wait
// for the re-rendered pod, restore byte-exact) against emulated nodes whose
// stand-in kube-apiserver is ready 1ms after start, so that what is timed
// is breakglass and the Talos API, not kube-apiserver, plus the wait for the
// kubelet's next manifest poll (every 1.2s here: 0.6s per apply on average).
//
//	go test -run '^$' -bench DisableRestoreCycle -benchtime 20x ./recovery
func BenchmarkDisableRestoreCycle(b *testing.B) {
	for _, nodes := range []int{1, 3} {
		b.Run(map[int]string{1: "1-node", 3: "3-nodes"}[nodes], func(b *testing.B) {
			ctx := context.Background()
			// The kubelet and Talos a thousand times faster than on a node, but
			// the manifest poll over a second: a pod's startTime has whole
			// seconds, and the pod that replaces another starts in a later one.
			kubelet := talostest.KubeletOptions{TimeScale: 0.001, PollInterval: 1200 * time.Millisecond}
			c, tc, st := realNodes(b, nodes, kubelet, talostest.StandIn{ReadyAfter: 1})
			before := c.Nodes[0].RunningConfig()
			opts := AdmissionOptions{Wait: true}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, plan := range []func(context.Context, *talos.Client, State, AdmissionOptions) (*AdmissionPlan, error){planDisable, planRestore} {
					p, err := plan(ctx, tc, st, opts)
					if err != nil {
						b.Fatal(err)
					}
					if err := p.execute(ctx, tc, tc, st); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			if string(c.Nodes[0].RunningConfig()) != string(before) {
				b.Fatal("the config is not byte-identical after the cycles")
			}
		})
	}
}
