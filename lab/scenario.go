package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/breakglass-dev/breakglass/talos"
)

// Names of the scenario's objects, as Kyverno names them.
const (
	ScenarioKyvernoServiceCIDR = "kyverno-servicecidr"
	// ScenarioExcluded is the prevention: the same webhooks with a
	// matchCondition that leaves kube-apiserver's own requests alone. The
	// upgrade succeeds with the backend down the whole time.
	ScenarioExcluded = "kyverno-servicecidr-excluded"

	// ExcludeAPIServer is that matchCondition's CEL expression.
	ExcludeAPIServer = "request.userInfo.username != 'system:apiserver'"

	ValidatingWebhookConfig = "kyverno-resource-validating-webhook-cfg"
	MutatingWebhookConfig   = "kyverno-resource-mutating-webhook-cfg"

	// DeadlockCheck is the readyz check that never passes during the deadlock.
	DeadlockCheck = "poststarthook/start-kubernetes-service-cidr-controller"
	// DeadlockLogLine is what kube-apiserver logs, again and again, meanwhile.
	DeadlockLogLine = "The default ServiceCIDR can not be created"
)

// RecoveryPlugins are the plugins the recovery must disable in this
// scenario: the mutating webhook is fail-closed and catch-all too, so
// disabling ValidatingAdmissionWebhook alone leaves the ServiceCIDR blocked.
var RecoveryPlugins = []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"}

// Scenarios lists the scenario names `lab up --scenario` accepts.
func Scenarios() []string {
	return []string{ScenarioKyvernoServiceCIDR, ScenarioExcluded, ScenarioMutatingPolicy, ScenarioFlagsMultiCIDR, ScenarioFlagsCloudProvider, ScenarioEtcdNoSpace, ScenarioEtcdMemberLost, ScenarioEtcdQuorumLost, ScenarioEncryptionKeyRenamed, ScenarioEncryptionSecretRegenerated, ScenarioEncryptionProviderDropped}
}

// ErrUnknownScenario: no scenario by that name.
var ErrUnknownScenario = errors.New("unknown scenario")

// Deadlock is the evidence that the incident is reproduced.
type Deadlock struct {
	Node          string   `json:"node"`
	FailingChecks []string `json:"failingChecks"`
	LogLines      int      `json:"logLines"` // lines of the Talos Logs API output holding the scenario's log line (DeadlockLogLine, NoSpaceLogLine)
	LogSample     string   `json:"logSample"`
	// Alarms are the etcd alarms the node's member lists (etcd-nospace): "NOSPACE MEMBER-ID".
	Alarms []string `json:"alarms,omitempty"`
}

// RunScenario plays a scenario on a lab that runs OldVersion, recording its
// steps in tl, and returns once the incident is there
// (kyverno-servicecidr, mutating-policy-servicecidr, etcd-nospace: with
// its evidence) or once the upgrade
// succeeded although the backend was down (kyverno-servicecidr-excluded).
func RunScenario(ctx context.Context, l *Lab, name string, tl *Timeline) ([]Deadlock, error) {
	switch name {
	case ScenarioExcluded:
		return nil, runExcluded(ctx, l, tl)
	case ScenarioMutatingPolicy:
		return nil, runMutatingPolicy(ctx, l, tl)
	case ScenarioFlagsMultiCIDR, ScenarioFlagsCloudProvider:
		return nil, runFlagsScenario(ctx, l, name, tl)
	case ScenarioEtcdNoSpace:
		return runNoSpace(ctx, l, tl)
	case ScenarioEtcdMemberLost, ScenarioEtcdQuorumLost:
		return nil, runEtcdLoss(ctx, l, name, tl)
	case ScenarioEncryptionKeyRenamed:
		return nil, RunEncryptionKeyRenamed(ctx, l, tl)
	case ScenarioEncryptionSecretRegenerated:
		return nil, RunEncryptionSecretRegenerated(ctx, l, tl)
	case ScenarioEncryptionProviderDropped:
		return nil, RunEncryptionProviderDropped(ctx, l, tl)
	}
	if name != ScenarioKyvernoServiceCIDR {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownScenario, name, strings.Join(Scenarios(), ", "))
	}
	if err := startOnOld(ctx, l, tl); err != nil {
		return nil, err
	}
	kube, err := l.Kube(ctx)
	if err != nil {
		return nil, err
	}
	if err := tl.Step("install fail-closed Kyverno-like validating and mutating webhooks (url "+l.Webhook.URL("/")+")", func() error {
		return InstallWebhooks(ctx, kube, l.Webhook)
	}); err != nil {
		return nil, err
	}
	if err := tl.Step("webhook backend answers a review", func() error {
		return ProbeWebhook(ctx, kube, l.Webhook, "before-upgrade")
	}); err != nil {
		return nil, err
	}
	if err := upgradeStep(ctx, l, tl); err != nil {
		return nil, err
	}
	var ev []Deadlock
	err = tl.Step("deadlock observed: readyz fails on "+DeadlockCheck+", log says '"+DeadlockLogLine+"'", func() error {
		var err error
		ev, err = ObserveDeadlock(ctx, l, 3*time.Minute)
		return err
	})
	return ev, err
}

// InstallWebhooks creates the two fail-closed, catch-all webhook
// configurations through kube-apiserver. Their clientConfig is a URL on
// loopback: never a service reference (that would dial the service CIDR).
func InstallWebhooks(ctx context.Context, kube *KubeClient, b *WebhookBackend, conds ...admissionregistrationv1.MatchCondition) error {
	fail := admissionregistrationv1.Fail
	sideEffects := admissionregistrationv1.SideEffectClassNoneOnDryRun
	equivalent := admissionregistrationv1.Equivalent
	timeout := int32(10)
	scope := admissionregistrationv1.AllScopes
	ifNeeded := admissionregistrationv1.IfNeededReinvocationPolicy
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}, Scope: &scope},
	}}
	labels := map[string]string{"webhook.kyverno.io/managed-by": "kyverno"}
	url := func(p string) *string { s := b.URL(p); return &s }
	vwc := admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ValidatingWebhookConfig, Labels: labels},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "validate.kyverno.svc-fail",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: url("/validate/fail"), CABundle: b.CABundle},
			Rules:                   rules,
			FailurePolicy:           &fail,
			MatchPolicy:             &equivalent,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions:         conds,
		}},
	}
	mwc := admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: MutatingWebhookConfig, Labels: labels},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "mutate.kyverno.svc-fail",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: url("/mutate/fail"), CABundle: b.CABundle},
			Rules:                   rules,
			FailurePolicy:           &fail,
			MatchPolicy:             &equivalent,
			SideEffects:             &sideEffects,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			ReinvocationPolicy:      &ifNeeded,
			MatchConditions:         conds,
		}},
	}
	if err := kube.Do(ctx, "POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", vwc, nil); err != nil {
		return fmt.Errorf("create %s: %w", ValidatingWebhookConfig, err)
	}
	if err := kube.Do(ctx, "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", mwc, nil); err != nil {
		return fmt.Errorf("create %s: %w", MutatingWebhookConfig, err)
	}
	return nil
}

// ProbeWebhook writes a ConfigMap and checks that the backend answered
// reviews for it: both webhooks were called and allowed it. Webhook
// configurations take a moment to reach kube-apiserver's cache; it retries
// for a few seconds.
func ProbeWebhook(ctx context.Context, kube *KubeClient, b *WebhookBackend, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		before := b.AnsweredKind("ConfigMap")
		cm := corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lab-probe-%s-%d-%d", name, time.Now().UnixNano()%1e6, i), Namespace: "default"},
			Data:       map[string]string{"purpose": "breakglass lab: prove the webhook is called"},
		}
		err := kube.Do(ctx, "POST", "/api/v1/namespaces/default/configmaps", cm, nil)
		if err == nil && b.AnsweredKind("ConfigMap") >= before+2 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("webhook probe: %w", err)
			}
			return fmt.Errorf("webhook probe: the backend answered %d reviews for the ConfigMap, want 2 (validating and mutating)", b.AnsweredKind("ConfigMap")-before)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Upgrade applies, on every node at once, its running config with
// cluster.apiServer.image naming version: what `talosctl upgrade-k8s` or an
// edited config does for kube-apiserver.
func Upgrade(ctx context.Context, l *Lab, version string) error {
	if _, err := Binaries(ctx, l.KubeBinDir, l.log, version); err != nil {
		return err
	}
	return l.onEveryNode(ctx, func(tc *talos.Client, ip string) error { return upgradeNode(ctx, tc, ip, version) })
}

// onEveryNode runs change on every node at once through one Talos client,
// as an operator's parallel talosctl runs would, and joins the errors.
func (l *Lab) onEveryNode(ctx context.Context, change func(tc *talos.Client, ip string) error) error {
	tc, err := l.TalosClient(ctx)
	if err != nil {
		return err
	}
	defer tc.Close()
	nodes := l.Nodes()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, ip := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = change(tc, ip)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func upgradeNode(ctx context.Context, tc *talos.Client, ip, version string) error {
	cfg, facts, err := tc.ReadConfigFacts(ctx, ip)
	if err != nil {
		return err
	}
	old := facts.APIServerImage
	i := strings.LastIndex(old, ":")
	if i < 0 {
		return fmt.Errorf("node %s: image %q has no tag", ip, old)
	}
	img := old[:i+1] + version
	// a text edit, as an operator would do it: every other byte stays
	if bytes.Count(cfg.Bytes, []byte("image: "+old)) != 1 {
		return fmt.Errorf("node %s: cannot find cluster.apiServer.image in the config", ip)
	}
	next := bytes.Replace(cfg.Bytes, []byte("image: "+old), []byte("image: "+img), 1)
	_, err = tc.Apply(ctx, ip, talos.ApplyRequest{Config: next, Mode: talos.NoReboot})
	return err
}

// ObserveDeadlock waits until every node's kube-apiserver fails readyz on
// DeadlockCheck and the Talos Logs API shows DeadlockLogLine.
func ObserveDeadlock(ctx context.Context, l *Lab, timeout time.Duration) ([]Deadlock, error) {
	kube, api, err := l.watchers(ctx)
	if err != nil {
		return nil, err
	}
	defer api.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]Deadlock, len(l.Nodes()))
	servers := l.APIServers()
	for i, ip := range l.Nodes() {
		d := Deadlock{Node: ip}
		k := kube.WithServer(servers[i])
		for {
			if d.LogLines == 0 || !slices.Contains(d.FailingChecks, DeadlockCheck) {
				ready, failing, err := k.Readyz(ctx)
				if err == nil && !ready {
					d.FailingChecks = failing
				}
				if ready {
					d.FailingChecks = nil
				}
				logs, err := ReadAPIServerLogs(ctx, api, ip, l.Cluster.Nodes[i].Name, 0)
				if err == nil {
					d.LogLines = strings.Count(logs, DeadlockLogLine)
					if j := strings.Index(logs, DeadlockLogLine); j >= 0 {
						start := strings.LastIndexByte(logs[:j], '\n') + 1
						end := strings.IndexByte(logs[j:], '\n')
						if end < 0 {
							end = len(logs) - j
						}
						d.LogSample = logs[start : j+end]
					}
				}
			}
			if d.LogLines > 0 && slices.Contains(d.FailingChecks, DeadlockCheck) {
				break
			}
			select {
			case <-ctx.Done():
				return out, fmt.Errorf("node %s: no deadlock within %s: failing checks %v, %d log lines %q", ip, timeout, d.FailingChecks, d.LogLines, DeadlockLogLine)
			case <-time.After(200 * time.Millisecond):
			}
		}
		out[i] = d
	}
	return out, nil
}

// watchers are what an observation of the nodes reads through: the
// Kubernetes client of the Talos kubeconfig (readyz) and a raw Talos
// client (logs), which the caller closes.
func (l *Lab) watchers(ctx context.Context) (*KubeClient, *client.Client, error) {
	kube, err := l.Kube(ctx)
	if err != nil {
		return nil, nil, err
	}
	api, err := l.machineryClient(ctx)
	return kube, api, err
}

// machineryClient is a raw Talos machinery client, for the calls the talos
// package does not wrap (logs).
func (l *Lab) machineryClient(ctx context.Context) (*client.Client, error) {
	cfg, err := clientconfig.Open(l.Talosconfig)
	if err != nil {
		return nil, err
	}
	return client.New(ctx, client.WithConfig(cfg))
}

// ReadAPIServerLogs reads the kube-apiserver container's log through the
// Talos Logs API (what `talosctl logs -k` shows); tail 0 means all.
func ReadAPIServerLogs(ctx context.Context, api *client.Client, node, nodeName string, tail int32) (string, error) {
	return readLogs(ctx, api, node, "kube-system/kube-apiserver-"+nodeName+":kube-apiserver", tail)
}

// readContainerLogs reads the whole log of one kube-apiserver container
// (talosctl logs -k kube-system/kube-apiserver-NODE:kube-apiserver:ID).
func readContainerLogs(ctx context.Context, api *client.Client, node, nodeName, containerID string) (string, error) {
	return readLogs(ctx, api, node, "kube-system/kube-apiserver-"+nodeName+":kube-apiserver:"+containerID, 0)
}

func readLogs(ctx context.Context, api *client.Client, node, id string, tail int32) (string, error) {
	if tail == 0 {
		tail = -1
	}
	stream, err := api.Logs(client.WithNode(ctx, node), "k8s.io", common.ContainerDriver_CRI, id, false, tail)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for {
		data, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return b.String(), nil
		}
		if err != nil {
			if b.Len() > 0 && strings.Contains(err.Error(), "EOF") {
				return b.String(), nil
			}
			return b.String(), err
		}
		b.Write(data.GetBytes())
	}
}

// upgradeStep is every scenario's upgrade, as a step of the timeline.
func upgradeStep(ctx context.Context, l *Lab, tl *Timeline) error {
	return tl.Step("upgrade to "+NewVersion+": apply cluster.apiServer.image through the Talos API (mode NO_REBOOT)", func() error {
		return Upgrade(ctx, l, NewVersion)
	})
}

// startOnOld is every scenario's start: the binary it upgrades to is
// there, and kube-apiserver OldVersion is ready on every node.
func startOnOld(ctx context.Context, l *Lab, tl *Timeline) error {
	if _, err := Binaries(ctx, l.KubeBinDir, l.log, NewVersion); err != nil {
		return err
	}
	return tl.Step(fmt.Sprintf("kube-apiserver %s ready on %d node(s)", OldVersion, len(l.Nodes())), func() error {
		return l.WaitReady(ctx, 3*time.Minute)
	})
}

// runExcluded: the webhooks exclude kube-apiserver's own identity; the
// backend is held down from before the upgrade until v1.34.4 is ready on
// every node, so that nothing but the exclusion can explain the success.
func runExcluded(ctx context.Context, l *Lab, tl *Timeline) error {
	if err := startOnOld(ctx, l, tl); err != nil {
		return err
	}
	kube, err := l.Kube(ctx)
	if err != nil {
		return err
	}
	cond := admissionregistrationv1.MatchCondition{Name: "exclude-kube-apiserver", Expression: ExcludeAPIServer}
	if err := tl.Step("install the fail-closed webhooks with matchCondition "+ExcludeAPIServer, func() error {
		return InstallWebhooks(ctx, kube, l.Webhook, cond)
	}); err != nil {
		return err
	}
	if err := tl.Step("webhook backend answers a review", func() error {
		return ProbeWebhook(ctx, kube, l.Webhook, "before-upgrade")
	}); err != nil {
		return err
	}
	l.Webhook.Hold(true)
	defer l.Webhook.Hold(false)
	if err := tl.Step("webhook backend held down (connections refused)", func() error {
		for l.Webhook.Serving() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		return nil
	}); err != nil {
		return err
	}
	if err := upgradeStep(ctx, l, tl); err != nil {
		return err
	}
	return tl.Step("kube-apiserver "+NewVersion+" ready with the backend down: no deadlock", func() error {
		return l.WaitReadyVersion(ctx, NewVersion, 3*time.Minute)
	})
}
