package runbooks

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// The README's example must load, and its action table must name every
// action and parameter the code has.
func TestReadme(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	_, rest, ok := strings.Cut(text, "## A complete example\n\n```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("README has no complete example")
	}
	rb, err := Load([]byte(example), "README.md example")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[Action]bool{}
	for _, s := range rb.Spec.Steps {
		seen[s.Action] = true
	}
	_, table, _ := strings.Cut(text, "## Actions\n")
	table, _, _ = strings.Cut(table, "\n\n")
	for _, a := range Actions() {
		// webhook.wait is optional in the example's incident; extraargs.remove
		// and the etcd space and member actions belong to other incidents
		// (builtin/apiserver-flags.yaml, builtin/etcd-nospace.yaml,
		// builtin/etcd-member-lost.yaml, builtin/etcd-quorum-lost.yaml).
		if !seen[a.Name] && !slices.Contains([]Action{ActionWebhookWait, ActionExtraArgsRemove, ActionEncryptionKeyAdd, ActionEncryptionUnreadableRemove, ActionEtcdUsage, ActionEtcdCompact, ActionEtcdDefragment, ActionEtcdDisarm,
			ActionEtcdCopy, ActionEtcdMemberRemove, ActionEtcdReset, ActionEtcdBootstrap, ActionEtcdWait}, a.Name) {
			t.Errorf("the README example does not use %s", a.Name)
		}
		row := ""
		for _, line := range strings.Split(table, "\n") {
			if strings.HasPrefix(line, "| `"+string(a.Name)+"` |") {
				row = line
			}
		}
		if row == "" {
			t.Errorf("README action table lacks %s", a.Name)
			continue
		}
		if changes := strings.Contains(row, "` | yes |"); changes != a.ChangesCluster {
			t.Errorf("README says %s changes the cluster: %v", a.Name, changes)
		}
		for _, p := range a.Params {
			if !strings.Contains(row, "`"+p.Name+"`") || (p.Default != "" && !strings.Contains(row, p.Default)) {
				t.Errorf("README row for %s lacks %s (default %q)", a.Name, p.Name, p.Default)
			}
		}
	}
}
