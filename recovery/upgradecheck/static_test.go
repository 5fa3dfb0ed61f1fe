package upgradecheck

import (
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/client/config"
)

const staticWebhook = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: deny-all.static.k8s.io}
webhooks:
- name: deny-all.example.com
  clientConfig: {url: "https://127.0.0.1:1/validate"}
  rules: [{operations: ["*"], apiGroups: ["*"], apiVersions: ["*"], resources: ["*"]}]
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: [v1]
`

// staticPatch is what puts a static webhook manifest on a Talos node: the
// plugin's staticManifestsDir, the host directory mounted there, the file;
// and a policy directory no file of the config fills.
func staticPatch(cfg string) string {
	indent := func(s, by string) string {
		return by + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+by)
	}
	plugins := `            - name: ValidatingAdmissionWebhook
              configuration:
                  apiVersion: apiserver.config.k8s.io/v1
                  kind: WebhookAdmissionConfiguration
                  staticManifestsDir: /etc/kubernetes/static-admission
            - name: MutatingAdmissionPolicy
              configuration:
                  apiVersion: apiserver.config.k8s.io/v1
                  kind: MutatingAdmissionPolicyConfiguration
                  staticManifestsDir: /etc/kubernetes/static-policies
`
	volumes := `        extraVolumes:
            - hostPath: /var/lib/static-admission
              mountPath: /etc/kubernetes/static-admission
              readonly: true
`
	if strings.Contains(cfg, "\n        admissionControl:\n") { // the generated config has PodSecurity's
		cfg = strings.Replace(cfg, "\n        admissionControl:\n", "\n        admissionControl:\n"+plugins, 1)
		cfg = strings.Replace(cfg, "\n    apiServer:\n", "\n    apiServer:\n"+volumes, 1)
	} else {
		cfg = strings.Replace(cfg, "\n    apiServer:\n", "\n    apiServer:\n        admissionControl:\n"+plugins+volumes, 1)
	}
	return strings.Replace(cfg, "\nmachine:\n", "\nmachine:\n    files:\n        - path: /var/lib/static-admission/deny-all.yaml\n          permissions: 0o644\n          op: create\n          content: |\n"+indent(staticWebhook, "            ")+"\n", 1)
}

func TestReadStaticManifests(t *testing.T) {
	cfg := staticPatch("version: v1alpha1\nmachine:\n    type: controlplane\ncluster:\n    apiServer:\n        image: registry.k8s.io/kube-apiserver:v1.36.3\n")
	m := readStaticManifests("10.5.0.2", []byte(cfg))
	if len(m.Files) != 1 || m.Files[0].Path != "/var/lib/static-admission/deny-all.yaml" || !strings.Contains(string(m.Files[0].Content), "deny-all.static.k8s.io") {
		t.Fatalf("files %+v\n%s", m.Files, cfg)
	}
	if len(m.Unseen) != 1 || m.Unseen[0] != "/etc/kubernetes/static-policies" {
		t.Errorf("unseen %v", m.Unseen)
	}
	cfgs, unseen, err := staticConfigurations([]staticManifests{m})
	if err != nil || len(cfgs) != 1 || cfgs[0].Name() != "deny-all.static.k8s.io" || len(unseen) != 1 {
		t.Errorf("%v %v %v", cfgs, unseen, err)
	}
	if m := readStaticManifests("n", []byte("version: v1alpha1\nmachine: {type: controlplane}\n")); len(m.Files)+len(m.Unseen) != 0 {
		t.Errorf("no admissionControl: %+v", m)
	}
}

// A static manifest on a node, not in etcd: the gate reads it from the
// machine config and names its fix there.
func TestStaticManifestOnANode(t *testing.T) {
	t.Parallel()
	tc := newTestCluster(t, clusterSpec{kubernetes: "1.36.3"})
	node := tc.cluster.Nodes[0]
	// machine.files are written at boot: the change needs a reboot, as on a node.
	cfg, err := config.Open(tc.talosconfig)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(t.Context(), client.WithConfig(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.ApplyConfiguration(client.WithNode(t.Context(), node.IP), &machine.ApplyConfigurationRequest{
		Data: []byte(staticPatch(string(node.RunningConfig()))), Mode: machine.ApplyConfigurationRequest_REBOOT}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		_, err := cl.Version(client.WithNode(t.Context(), node.IP))
		if err == nil && strings.Contains(string(node.RunningConfig()), "static-admission") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the node is not back after its reboot: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	o := tc.options("1.37")
	o.Timeout = time.Minute
	c := mustCheck(t, Run(t.Context(), o), CheckAdmission)
	ev, fix := strings.Join(c.Evidence, "\n"), strings.Join(c.Fix, "\n")
	if c.Verdict != NoGo || !strings.Contains(c.Summary, "deny-all.static.k8s.io") || !strings.Contains(ev, node.IP+":/var/lib/static-admission/deny-all.yaml") ||
		!strings.Contains(fix, "machine.files") || !strings.Contains(ev, "static manifests not in the machine config, not audited: node "+node.IP+": /etc/kubernetes/static-policies") {
		t.Errorf("%s: %s\n%s\n%s", c.Verdict, c.Summary, ev, fix)
	}
}
