package lab

// What a restore of etcd to a lower revision does to kube-apiserver and to the
// clients that watch it (kubernetes/kubernetes#118501): a watch as an informer holds
// one, and a restore under a running kube-apiserver through the Talos API.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// WatchEvent is one event of a Kubernetes watch, as a client reads it.
type WatchEvent struct {
	Type            string // ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
	Name            string
	ResourceVersion string
	// Code and Message are an ERROR event's Status (410 for "too old resource version").
	Code    int
	Message string
}

// Watcher is a watch open on kube-apiserver.
type Watcher struct {
	events chan WatchEvent
	done   chan struct{}
	err    error // why the stream ended, once done is closed
	cancel context.CancelFunc
}

// Watch opens a watch of the collection at path (e.g.
// /api/v1/namespaces/NS/configmaps) from resourceVersion ("" for now), with bookmarks,
// as client-go's reflector does. The answer to a watch kube-apiserver refuses at once
// (a resource version too large) is an error with its status.
func (k *KubeClient) Watch(ctx context.Context, path, resourceVersion string) (*Watcher, error) {
	ctx, cancel := context.WithCancel(ctx)

	url := k.Server + path + "?watch=1&allowWatchBookmarks=true"
	if resourceVersion != "" {
		url += "&resourceVersion=" + resourceVersion
	}

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()

		return nil, err
	}

	req.Header.Set("Accept", "application/json")

	streaming := *k.http
	streaming.Timeout = 0 // a watch lasts

	resp, err := streaming.Do(req)
	if err != nil {
		cancel()

		return nil, err
	}

	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		defer cancel()

		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))

		var st struct {
			Message string `json:"message"`
		}

		if json.Unmarshal(data, &st) != nil || st.Message == "" {
			st.Message = string(bytes.TrimSpace(data))
		}

		return nil, &APIError{Code: resp.StatusCode, Message: st.Message}
	}

	w := &Watcher{events: make(chan WatchEvent, 1024), done: make(chan struct{}), cancel: cancel}

	go w.read(resp.Body)

	return w, nil
}

func (w *Watcher) read(body io.ReadCloser) {
	defer close(w.done)
	defer body.Close()

	dec := json.NewDecoder(bufio.NewReader(body))

	for {
		var raw struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					Name            string `json:"name"`
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"object"`
		}

		if err := dec.Decode(&raw); err != nil {
			w.err = err

			return
		}

		w.events <- WatchEvent{
			Type: raw.Type, Name: raw.Object.Metadata.Name, ResourceVersion: raw.Object.Metadata.ResourceVersion,
			Code: raw.Object.Code, Message: raw.Object.Message,
		}
	}
}

// Next returns the next event other than a bookmark, waiting up to timeout; io.EOF
// (or the stream's error) once kube-apiserver ended the watch, ErrNoEvent when nothing
// came.
func (w *Watcher) Next(timeout time.Duration) (WatchEvent, error) {
	deadline := time.After(timeout)

	for {
		select {
		case e := <-w.events:
			if e.Type == "BOOKMARK" {
				continue
			}

			return e, nil
		case <-w.done:
			select {
			case e := <-w.events:
				if e.Type != "BOOKMARK" {
					return e, nil
				}

				continue
			default:
			}

			return WatchEvent{}, w.err
		case <-deadline:
			return WatchEvent{}, ErrNoEvent
		}
	}
}

// ErrNoEvent: the watch delivered nothing in the time given.
var ErrNoEvent = errors.New("no watch event")

// Close ends the watch.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
}

// EtcdSnapshot streams the node's member's snapshot through the Talos API
// (talosctl etcd snapshot).
func (l *Lab) EtcdSnapshot(ctx context.Context, ip string) ([]byte, error) {
	cl, err := l.machineryClient(ctx)
	if err != nil {
		return nil, err
	}
	defer cl.Close() //nolint:errcheck

	r, err := cl.EtcdSnapshot(client.WithNode(ctx, ip), &machine.EtcdSnapshotRequest{})
	if err != nil {
		return nil, err
	}

	b, err := io.ReadAll(r)

	return b, errors.Join(err, r.Close())
}

// RestoreEtcdInPlace replaces the node's etcd member, under its running
// kube-apiserver, by one restored from the snapshot: the member's disk is lost
// (DestroyEtcdData), the snapshot uploaded and bootstrapped from through the node's
// Talos API (EtcdRecover, Bootstrap with RecoverEtcd, no revision bump), and it waits
// until the member is healthy. Talos tears the static pods down while etcd does not
// run and renders them again once it runs healthy; a kubelet that did not poll in
// between (it polls every 20 s) never notices, and kube-apiserver goes on, on a
// database older than its watch cache. For a lab whose kubelet does not poll by
// itself meanwhile (KubeletOptions.PollInterval long), that is certain.
func (l *Lab) RestoreEtcdInPlace(ctx context.Context, ip string, snapshot []byte) error {
	if err := l.DestroyEtcdData(ip); err != nil {
		return err
	}

	cl, err := l.machineryClient(ctx)
	if err != nil {
		return err
	}
	defer cl.Close() //nolint:errcheck

	nctx := client.WithNode(ctx, ip)

	if _, err := cl.EtcdRecover(nctx, bytes.NewReader(snapshot)); err != nil {
		return fmt.Errorf("upload the snapshot to %s: %w", ip, err)
	}

	if err := cl.Bootstrap(nctx, &machine.BootstrapRequest{RecoverEtcd: true}); err != nil {
		return fmt.Errorf("bootstrap %s from the snapshot: %w", ip, err)
	}

	return l.WaitEtcd(ctx, ip, 2*time.Minute, "healthy", func(st talostest.EtcdServiceState) bool { return EtcdHealthy(st) })
}
