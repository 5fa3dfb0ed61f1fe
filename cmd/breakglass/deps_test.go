package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The binary carried during an incident links no test framework and none of
// the lab's real components (embedded etcd server, emulated Talos nodes):
// they belong in breakglass-lab.
func TestOnCallBinaryLinksNoTestOrLabCode(t *testing.T) {
	for _, binary := range []string{".", "../breakglass-lab"} {
		out, err := exec.Command("go", "list", "-deps", binary).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", binary, err, out)
		}
		deps := strings.Fields(string(out))
		forbidden := []string{"testing"}
		if binary == "." {
			forbidden = append(forbidden,
				"go.etcd.io/etcd/server/v3/embed",
				"github.com/breakglass-dev/breakglass/lab",
				"github.com/breakglass-dev/breakglass/etcd/etcdtest",
				"github.com/breakglass-dev/breakglass/talos/talostest",
			)
		}
		for _, dep := range deps {
			for _, f := range forbidden {
				if dep == f {
					t.Errorf("%s links %s", binary, dep)
				}
			}
		}
		if len(deps) < 50 {
			t.Fatalf("go list -deps %s listed only %d packages; the check would prove nothing", binary, len(deps))
		}
	}
}
