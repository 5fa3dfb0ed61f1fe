package recovery

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/recovery/diagnose"
	"github.com/breakglass-dev/breakglass/talos"
)

func ioPipe() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }

// diagnose looks, changing nothing, and names the culprit: readiness,
// restarts, log signatures, and the admission objects in etcd.
func (r *run) diagnose(ctx context.Context, s Step) (string, map[string]any, error) {
	opts := diagnose.Options{Tail: s.TailLines, Health: ReadyzForDiagnose(r.tc)}
	ec, err := r.etcd(ctx)
	if err != nil {
		opts.EtcdError = err // not fatal: the logs still name the webhook
		ec = nil
	}
	report, err := diagnose.Run(ctx, r.tc, ec, opts)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	if err := diagnose.WriteText(&b, report); err == nil {
		r.ui.Show(b.String())
	}
	data := map[string]any{"verdict": string(report.Verdict), "culprits": report.Culprits}
	return fmt.Sprintf("verdict %s: %s", report.Verdict, report.Summary), data, nil
}

// ReadyzForDiagnose adapts CheckHealth to diagnose, which cannot import
// this package (this package imports it).
func ReadyzForDiagnose(tc *talos.Client) func(context.Context) ([]diagnose.Readyz, error) {
	return func(ctx context.Context) ([]diagnose.Readyz, error) {
		hs, err := CheckHealth(ctx, tc)
		out := make([]diagnose.Readyz, 0, len(hs))
		for _, h := range hs {
			out = append(out, diagnose.Readyz{Node: h.Node, Ready: h.Ready, FailingChecks: h.FailingChecks, Error: h.ProbeError})
		}
		return out, err
	}
}

// waitWebhooks waits until the backends of the fail-closed webhooks left in
// etcd accept connections again, where that can be told from here: a URL
// backend can be dialled; a service backend cannot without the cluster's
// network, and is reported as such.
func (r *run) waitWebhooks(ctx context.Context, s Step) (string, map[string]any, error) {
	ec, err := r.etcd(ctx)
	if err != nil {
		return "", nil, skip("cannot tell: etcd is unreachable (%s)", shortErr(err))
	}
	l, err := ec.List(ctx, []etcd.Resource{etcd.ValidatingWebhookConfigurations, etcd.MutatingWebhookConfigurations})
	if err != nil {
		return "", nil, err
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
			return "", nil, skip("cannot tell from here whether %s answer(s): service backends need the cluster network", strings.Join(untellable, ", "))
		}
		return "", nil, skip("no fail-closed webhook left")
	}
	if r.opts.DryRun {
		return "", nil, skip("dry run: would wait for %d webhook backend(s)", len(targets))
	}
	deadline := time.Now().Add(orDuration(s.Timeout, 2*time.Minute))
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
			return "", nil, fmt.Errorf("%w: webhook backend(s) still not answering: %s; the API server can run without them now that its bootstrap objects exist", ErrTimeout, strings.Join(left, ", "))
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
	return msg, nil, nil
}
