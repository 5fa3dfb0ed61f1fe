package recovery

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// NodeHealth is one look at a node's kube-apiserver: its /readyz checks and
// what kubelet reports of the static pod.
type NodeHealth struct {
	Node          string          `json:"node"`
	NodeName      string          `json:"nodeName"`
	URL           string          `json:"url"`
	Ready         bool            `json:"ready"`
	FailingChecks []string        `json:"failingChecks,omitempty"`
	ProbeError    string          `json:"probeError,omitempty"` // readyz could not be asked (connection refused, ...)
	Pod           talos.PodStatus `json:"pod"`
	ReadyAt       *time.Time      `json:"readyAt,omitempty"`
}

// Summary is a one-line account of what is still wrong.
func (h NodeHealth) Summary() string {
	switch {
	case h.Ready:
		return "ready"
	case h.ProbeError != "":
		s := "not answering: " + h.ProbeError
		if h.Pod.WaitingReason != "" {
			s += fmt.Sprintf(" (pod %s, %d restarts)", h.Pod.WaitingReason, h.Pod.RestartCount)
		}
		return s
	default:
		return fmt.Sprintf("not ready: failing %s (%d restarts)", strings.Join(h.FailingChecks, ", "), h.Pod.RestartCount)
	}
}

// HealthOptions tune WaitReady.
type HealthOptions struct {
	Timeout  time.Duration // 0: 5 minutes
	Interval time.Duration // 0: 100ms; readiness is noticed within one interval
	// Progress is called for a node when what is failing changes, not on every poll.
	Progress func(NodeHealth)
}

// apiserverProber asks each node's kube-apiserver for /readyz?verbose over
// HTTPS, verified against the cluster CA, as the cluster admin. The
// credentials come from the Talos API, so no kubeconfig is needed.
type apiserverProber struct {
	tc     *talos.Client
	client *http.Client
}

func newProber(ctx context.Context, tc *talos.Client) (*apiserverProber, error) {
	nodes := tc.Nodes()
	if len(nodes) == 0 {
		return nil, invalidInput("name the control-plane nodes with -n NODE[,NODE...]", "no target nodes: the talosconfig context names none")
	}
	kc, err := tc.AdminKubeconfig(ctx, nodes[0])
	if err != nil {
		return nil, err
	}
	parsed, err := ParseKubeconfig(kc)
	if err != nil {
		return nil, talos.NewNodeError(nodes[0], "read admin kubeconfig", err)
	}
	tr := &http.Transport{
		TLSClientConfig:     parsed.TLS,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		TLSHandshakeTimeout: 2 * time.Second,
		MaxIdleConnsPerHost: 2,
	}
	return &apiserverProber{tc: tc, client: &http.Client{Transport: tr, Timeout: 3 * time.Second}}, nil
}

// probe looks once at one node.
func (p *apiserverProber) probe(ctx context.Context, node, nodeName string) NodeHealth {
	h := NodeHealth{Node: node, NodeName: nodeName}
	pod, err := p.tc.ReadAPIServerPod(ctx, node)
	if err != nil {
		h.ProbeError = err.Error()
		return h
	}
	port, ok := pod.Flag("secure-port")
	if !ok || port == "" {
		port = "6443"
	}
	h.URL = "https://" + net.JoinHostPort(node, port) + "/readyz?verbose"
	if st, err := p.tc.ReadAPIServerStatus(ctx, node, nodeName); err == nil {
		h.Pod = st
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
	resp, err := p.client.Do(req)
	if err != nil {
		h.ProbeError = shortNetError(err)
		return h
	}
	defer resp.Body.Close()
	h.Ready = resp.StatusCode == http.StatusOK
	h.FailingChecks = failingChecks(resp.Body)
	if !h.Ready && len(h.FailingChecks) == 0 {
		h.FailingChecks = []string{fmt.Sprintf("HTTP %d", resp.StatusCode)}
	}
	return h
}

// failingChecks reads the "[-]name failed: ..." lines of /readyz?verbose.
func failingChecks(r io.Reader) []string {
	var out []string
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "[-]"); ok {
			name, _, _ := strings.Cut(rest, " ")
			out = append(out, name)
		}
	}
	return out
}

func shortNetError(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer in time"
	}
	return err.Error()
}

// CheckHealth looks once at every target node. A node that cannot be read
// is reported as such; the others are still looked at.
func CheckHealth(ctx context.Context, tc *talos.Client) ([]NodeHealth, error) {
	p, err := newProber(ctx, tc)
	if err != nil {
		return nil, err
	}
	out, _ := talos.EachNode(tc.Nodes(), func(node string) (NodeHealth, error) {
		name, err := tc.NodeName(ctx, node)
		if err != nil {
			return NodeHealth{Node: node, ProbeError: err.Error()}, nil
		}
		return p.probe(ctx, node, name), nil
	})
	return out, nil
}

// WaitReady polls every target node until all are ready or the timeout
// passes, reporting changes as they happen. Readiness is noticed within one
// interval: no fixed multi-second sleeps.
func WaitReady(ctx context.Context, tc *talos.Client, opts HealthOptions) ([]NodeHealth, error) {
	if opts.Timeout == 0 {
		opts.Timeout = runbooks.DefaultWait
	}
	if opts.Interval == 0 {
		opts.Interval = 100 * time.Millisecond
	}
	p, err := newProber(ctx, tc)
	if err != nil {
		return nil, err
	}
	names, err := nodeNames(ctx, tc)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(opts.Timeout)
	nodes := tc.Nodes()
	out, _ := talos.EachNode(nodes, func(node string) (NodeHealth, error) {
		return waitNode(ctx, p, node, names[slices.Index(nodes, node)], deadline, opts), nil
	})
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	var failed []error
	for _, h := range out {
		if !h.Ready {
			failed = append(failed, talos.NewNodeError(h.Node, "wait for kube-apiserver", fmt.Errorf("%w after %s: %s", ErrTimeout, opts.Timeout, h.Summary()),
				"see why: talosctl -n "+h.Node+" logs -k kube-system/kube-apiserver-"+h.NodeName+":kube-apiserver --tail 50",
				"wait longer: breakglass apiserver wait --timeout 10m"))
		}
	}
	return out, failures(failed, len(out)-len(failed))
}

func waitNode(ctx context.Context, p *apiserverProber, node, nodeName string, deadline time.Time, opts HealthOptions) NodeHealth {
	var last NodeHealth
	var lastSummary string
	for {
		h := p.probe(ctx, node, nodeName)
		if h.Ready {
			now := time.Now()
			h.ReadyAt = &now
		}
		if s := changeKey(h); s != lastSummary && opts.Progress != nil {
			opts.Progress(h)
			lastSummary = s
		}
		last = h
		if h.Ready || time.Now().After(deadline) || ctx.Err() != nil {
			return last
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(opts.Interval):
		}
	}
}

// changeKey is what, when it changes, is worth a progress line.
func changeKey(h NodeHealth) string {
	checks := slices.Clone(h.FailingChecks)
	slices.Sort(checks)
	return fmt.Sprintf("%v|%s|%s|%d", h.Ready, h.ProbeError, strings.Join(checks, ","), h.Pod.RestartCount)
}

func nodeNames(ctx context.Context, tc *talos.Client) ([]string, error) {
	var out []string
	for _, n := range tc.Nodes() {
		name, err := tc.NodeName(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, nil
}
