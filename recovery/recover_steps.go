package recovery

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
)

func ioPipe() (*io.PipeReader, *io.PipeWriter) { return io.Pipe() }

var failedWebhook = regexp.MustCompile(`failed calling webhook \\?"([^"\\]+)\\?"`)

// diagnose looks, changing nothing: readiness, restarts, the webhooks the
// log says fail, and which configuration in etcd holds them.
func (r *run) diagnose(ctx context.Context, s Step) (string, map[string]any, error) {
	tail := s.TailLines
	if tail <= 0 {
		tail = 200
	}
	health, err := CheckHealth(ctx, r.tc)
	if err != nil {
		return "", nil, err
	}
	failing := map[string]int{}
	ready := 0
	for _, h := range health {
		r.progress(h.Node, h.Summary())
		if h.Ready {
			ready++
		}
		lines, err := r.tc.APIServerLogs(ctx, h.Node, h.NodeName, tail)
		if err != nil {
			r.progress(h.Node, "logs unavailable: "+shortErr(err))
			continue
		}
		for _, l := range lines {
			if m := failedWebhook.FindStringSubmatch(l); m != nil {
				failing[m[1]]++
			}
		}
	}
	data := map[string]any{"readyNodes": ready, "failingWebhooks": failing}
	if len(failing) == 0 {
		return fmt.Sprintf("%d of %d node(s) ready; no failing webhook call in the last %d log lines", ready, len(health), tail), data, nil
	}
	names := make([]string, 0, len(failing))
	for n := range failing {
		names = append(names, n)
	}
	sort.Strings(names)
	owners := map[string]string{}
	if ec, err := r.etcd(ctx); err == nil {
		if l, err := ec.List(ctx, []etcd.Resource{etcd.ValidatingWebhookConfigurations, etcd.MutatingWebhookConfigurations}); err == nil {
			for _, o := range l.Objects {
				for _, w := range o.Webhooks {
					owners[w.Name] = o.Kind + " " + o.Name
				}
			}
		}
	}
	var parts []string
	for _, n := range names {
		p := fmt.Sprintf("webhook %q failed %d time(s)", n, failing[n])
		if o := owners[n]; o != "" {
			p += " (" + o + ")"
		}
		parts = append(parts, p)
	}
	data["owners"] = owners
	return fmt.Sprintf("%d of %d node(s) ready; %s", ready, len(health), strings.Join(parts, "; ")), data, nil
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
