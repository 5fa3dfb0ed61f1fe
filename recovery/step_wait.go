package recovery

// The steps that wait for what a change brought about: kube-apiserver
// ready, the webhook backends answering, and the final verification. A
// dry run skips them, saying what they would have waited for.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

func init() {
	register((*run).waitRecovering)
	register((*run).waitWebhooks)
	register((*run).verify)
}

// HealthResult is what a wait saw last on each node.
type HealthResult struct {
	said
	Nodes map[string]string
}

func (h *HealthResult) JournalData() any { return h.Nodes }

// deadlockCheckEvery is how often the wait after disable looks at the logs
// for a deadlock that the disabled plugins do not end.
const deadlockCheckEvery = 5 * time.Second

// waitRecovering waits for the API server after the plugins were disabled,
// and meanwhile looks at its logs: when a webhook or policy whose plugin is
// still on keeps refusing the start-up writes, waiting out the timeout
// cannot help, and the run says so at once with the command that does.
func (r *run) waitRecovering(_ context.Context, _ Step, p *runbooks.APIServerWaitParams) (*Plan, error) {
	timeout := orDuration(p.Timeout.Std(), runbooks.DefaultWait)
	const ok = "the API server is ready on every node"
	return &Plan{DryRun: fmt.Sprintf("would wait up to %s for /readyz on every node", timeout), Apply: func(ctx context.Context) (Result, error) {
		if len(p.Disabled) == 0 {
			return r.waitReady(ctx, timeout, ok)
		}
		wctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		go func() {
			t := time.NewTicker(deadlockCheckEvery)
			defer t.Stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-t.C:
				}
				if err := r.persistingDeadlock(wctx, p.Disabled); err != nil {
					cancel(err)
					return
				}
			}
		}()
		res, err := r.waitReady(wctx, timeout, ok)
		if cause := context.Cause(wctx); err != nil && ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
			return res, cause
		}
		return res, err
	}}, nil
}

// persistingDeadlock reads the logs of the running containers (those of the
// new pods: the disable step waited for them) and tells whether admission
// still refuses start-up writes through a plugin the plan left on.
func (r *run) persistingDeadlock(ctx context.Context, plugins []string) error {
	ec, err := r.etcdClient(ctx)
	if err != nil {
		ec = nil
	}
	report, err := diagnose.Run(ctx, r.tc, ec, diagnose.Options{Tail: 200, EtcdError: err, LostAfter: -1})
	if err != nil || !report.AdmissionEvidence() {
		return nil
	}
	// Compared with what the rendered pods disable now (the plan's plugins,
	// plus any an operator turned off since): refusals through plugins that
	// are off are older lines.
	off := union(plugins, disabledEverywhere(report.Evidence.Nodes))
	missing := without(report.PluginNames(), off)
	if len(missing) == 0 {
		return nil
	}
	return &PersistingDeadlockError{Missing: missing, Why: reasonsOf(report, missing), Incident: r.journal.ID, Target: r.target}
}

// disabledEverywhere are the plugins every node's rendered pod disables.
func disabledEverywhere(nodes []diagnose.NodeEvidence) []string {
	if len(nodes) == 0 {
		return nil
	}
	out := slices.Clone(nodes[0].DisabledPlugins)
	for _, ne := range nodes[1:] {
		out = slices.DeleteFunc(out, func(p string) bool { return !slices.Contains(ne.DisabledPlugins, p) })
	}
	return out
}

// PersistingDeadlockError: with the planned plugins off, admission still
// refuses kube-apiserver's start-up writes through a plugin left on.
type PersistingDeadlockError struct {
	Missing  []string
	Why      string
	Incident string
	Target   Target // where the incident runs, for the commands
}

func (e *PersistingDeadlockError) Error() string {
	return fmt.Sprintf("the deadlock persists with the new flags: %s still on (%s)", strings.Join(e.Missing, ","), e.Why)
}

func (e *PersistingDeadlockError) Hints() []string {
	return []string{
		"turn it off too (restore undoes both): " + e.Target.NodesCmd("admission disable --plugins "+strings.Join(e.Missing, ",")),
		"then continue the recovery: " + e.Target.Cmd("resume "+e.Incident),
	}
}

func (e *PersistingDeadlockError) Unwrap() error { return ErrTimeout }

// waitWebhooks waits until the backends of the fail-closed webhooks left in
// etcd accept connections again, where that can be told from here: a URL
// backend can be dialled; a service backend cannot without the cluster's
// network, and is reported as such.
func (r *run) waitWebhooks(ctx context.Context, _ Step, p *runbooks.WebhookWaitParams) (*Plan, error) {
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return nil, skip("cannot tell: etcd is unreachable (%s)", shortErr(err))
	}
	l, err := ec.List(ctx, []kinds.Kind{kinds.ValidatingWebhookConfigurations, kinds.MutatingWebhookConfigurations})
	if err != nil {
		return nil, err
	}
	targets := map[string]string{} // host:port -> webhook
	var untellable []string
	for _, o := range l.Objects {
		for _, w := range o.Webhooks {
			if w.FailurePolicy != "Fail" {
				continue
			}
			if w.ClientConfig.URL == nil {
				untellable = append(untellable, w.Name)
				continue
			}
			u, err := url.Parse(*w.ClientConfig.URL)
			if err != nil || u.Host == "" {
				untellable = append(untellable, w.Name)
				continue
			}
			host := u.Host
			if u.Port() == "" {
				host = net.JoinHostPort(u.Hostname(), "443")
			}
			targets[host] = w.Name
		}
	}
	if len(targets) == 0 {
		if len(untellable) > 0 {
			return nil, skip("cannot tell from here whether %s answer(s): service backends need the cluster network", strings.Join(untellable, ", "))
		}
		return nil, skip("no fail-closed webhook left")
	}
	wait := func(ctx context.Context) (Result, error) {
		deadline := time.Now().Add(p.Timeout.Std())
		pending := map[string]string{}
		for k, v := range targets {
			pending[k] = v
			r.progress("webhook", fmt.Sprintf("waiting for %s (%s)", v, k))
		}
		for len(pending) > 0 {
			for addr, name := range pending {
				c, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
				if err == nil {
					c.Close()
					delete(pending, addr)
					r.progress("webhook", name+" answers at "+addr)
				}
			}
			if len(pending) == 0 {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				var left []string
				for _, n := range pending {
					left = append(left, n)
				}
				sort.Strings(left)
				return nil, fmt.Errorf("%w: webhook backend(s) still not answering: %s; the API server can run without them now that its bootstrap objects exist", ErrTimeout, strings.Join(left, ", "))
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		msg := fmt.Sprintf("%d webhook backend(s) answer", len(targets))
		if len(untellable) > 0 {
			msg += fmt.Sprintf("; cannot tell for %s (service backends)", strings.Join(untellable, ", "))
		}
		return said(msg), nil
	}
	return &Plan{DryRun: fmt.Sprintf("would wait for %d webhook backend(s)", len(targets)), Apply: wait}, nil
}

// waitReady waits for /readyz on every node.
func (r *run) waitReady(ctx context.Context, timeout time.Duration, okMsg string) (Result, error) {
	start := time.Now()
	health, err := WaitReady(ctx, r.tc, HealthOptions{Timeout: timeout, Progress: func(h NodeHealth) { r.progress(h.Node, h.Summary()) }})
	if health == nil {
		return nil, err
	}
	res := &HealthResult{Nodes: map[string]string{}}
	for _, h := range health {
		res.Nodes[h.Node] = h.Summary()
	}
	if err != nil {
		return res, err
	}
	res.said = said(fmt.Sprintf("%s (%s)", okMsg, time.Since(start).Round(time.Millisecond)))
	return res, nil
}

// verify waits for /readyz on every node, then checks that the admission
// plugins are back as they were before the incident.
func (r *run) verify(_ context.Context, _ Step, _ *runbooks.VerifyParams) (*Plan, error) {
	if r.opts.KeepDisabled {
		return nil, skip("--keep-disabled: nothing to verify yet")
	}
	return &Plan{DryRun: fmt.Sprintf("would wait up to %s for /readyz on every node", runbooks.DefaultWait), Apply: func(ctx context.Context) (Result, error) {
		out, err := r.waitReady(ctx, runbooks.DefaultWait, "the API server is ready on every node")
		if err != nil {
			return out, err
		}
		res := out.(*HealthResult)
		status, err := AdmissionStatus(ctx, r.tc, r.st, time.Now())
		if err != nil {
			return res, err
		}
		for _, n := range status {
			if n.Recorded {
				return res, talos.NewNodeError(n.Node, "verify", errors.New("breakglass still holds a record of disabled plugins: the restore did not finish"), r.target.NodesCmd("admission restore"))
			}
			if !sameSet(n.ConfigDisabled, n.RunningDisabled) {
				return res, talos.NewNodeError(n.Node, "verify", fmt.Errorf("the running kube-apiserver has disable-admission-plugins=%v but the config says %v", n.RunningDisabled, n.ConfigDisabled))
			}
		}
		res.said += ", with the admission plugins as they were before the incident"
		return res, nil
	}}, nil
}
