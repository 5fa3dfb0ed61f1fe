// Package startupwrites is what each kube-apiserver minor writes at its
// first start on the data of the minor before it, recorded from the lab's
// real binaries, one recording per upgrade pair: v1.32.13 -> v1.33.13 up to
// v1.36.3 -> v1.37.2 (every pair talosctl upgrade-k8s accepts, one minor at
// a time), and v1.32.13 -> v1.34.4 (the lab's incident, which skips a
// minor). The audit judges admission objects against them: a write a
// minor never makes on that upgrade is no reason to stop it. Nothing here
// is carried from one pair to another: each file is what that pair's
// target sent. It imports nothing of the project.
//
// # How it was recorded
//
// lab.RecordStartup, run by `go run ./lab/recordstartup` (and again, live,
// by the lab's TestStartupRecordings, which fails when a binary's fatal
// writes differ from its file): an embedded etcd 3.6 with TLS and client
// certificates, kube-apiserver FROM started on it (loopback only, the flags
// listed in each file), a recording validating webhook installed through it
// (clientConfig.url on 127.0.0.1, failurePolicy Ignore, matchPolicy Exact,
// every operation, group, version and resource with its subresources),
// FROM kept running until it had what a cluster running it has (the
// default/kubernetes Service, from 1.33 its IPAddress), stopped with
// SIGTERM, then TO started on the same etcd and every AdmissionReview it
// sent recorded, until it was ready and had sent nothing new for 8 s (at
// most 25 s). What TO wrote to etcd meanwhile (puts and bytes, keys and
// values, from etcd's own history) is recorded beside.
//
// Not seen because of the recorder's flags: the default/kubernetes
// Endpoints and EndpointSlice (a loopback advertise address is never
// published; 1.37 refuses one, so it runs with
// --endpoint-reconciler-type=none) and kube-system/extension-apiserver-
// authentication (no request-header flags). Those are written on every
// start whose addresses or certificates changed, not because of the
// upgrade, and a refusal of them is only logged.
//
// # Format
//
// recorded/FROM-to-TO.json, one object per pair (Recording): from, to,
// recorded (the date), command, flags, readyAfter, etcdPuts, etcdBytes,
// and writes, one distinct admission request per line in the order first
// seen (Write: operation, group, version, resource, subResource, kind,
// namespace, name, username, groups, extra, labels, annotations, options,
// fieldManager).
package startupwrites

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Write is one admission request kube-apiserver sent itself while it
// started, as the webhook received it.
type Write struct {
	Operation   string              `json:"operation"`
	Group       string              `json:"group"`
	Version     string              `json:"version"`
	Resource    string              `json:"resource"`
	SubResource string              `json:"subResource"`
	Kind        string              `json:"kind"`
	Namespace   string              `json:"namespace"`
	Name        string              `json:"name"`
	Username    string              `json:"username"`
	Groups      []string            `json:"groups"`
	Extra       map[string][]string `json:"extra"`
	// Labels and Annotations are the object's (the old object's for a
	// DELETE), what selectors and conditions see.
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Options is the kind of the options object (CreateOptions, ...).
	Options      string `json:"options"`
	FieldManager string `json:"fieldManager"`
}

// String is a short form: "CREATE networking.k8s.io/v1 servicecidrs/ /kubernetes".
func (w Write) String() string {
	return w.Operation + " " + w.Group + "/" + w.Version + " " + w.Resource + "/" + w.SubResource + " " + w.Namespace + "/" + w.Name
}

// Recording is what one upgrade's target sent at its first start.
type Recording struct {
	From     string `json:"from"`     // the binary that ran first, vX.Y.Z
	To       string `json:"to"`       // the binary recorded, vX.Y.Z
	Recorded string `json:"recorded"` // the date, YYYY-MM-DD
	Command  string `json:"command"`  // what re-records it
	// Flags are TO's command line (paths and ports as placeholders).
	Flags []string `json:"flags"`
	// ReadyAfter is TO's first /readyz 200 after its start.
	ReadyAfter string `json:"readyAfter"`
	// EtcdPuts and EtcdBytes are what TO wrote to etcd while recorded:
	// puts, and their keys' and values' bytes.
	EtcdPuts  int     `json:"etcdPuts"`
	EtcdBytes int64   `json:"etcdBytes"`
	Writes    []Write `json:"writes"`
}

// recordingJSON is Recording with its writes as the file holds them.
type recordingJSON struct {
	From       string   `json:"from"`
	To         string   `json:"to"`
	Recorded   string   `json:"recorded"`
	Command    string   `json:"command"`
	Flags      []string `json:"flags"`
	ReadyAfter string   `json:"readyAfter"`
	EtcdPuts   int      `json:"etcdPuts"`
	EtcdBytes  int64    `json:"etcdBytes"`
	Writes     []Write  `json:"writes"`
}

// FileName is the recording's file under recorded/.
func (r *Recording) FileName() string { return r.From + "-to-" + r.To + ".json" }

// Encode writes the recording as the files hold it: the header indented,
// one write per line (a new write is one line of a diff).
func (r *Recording) Encode() ([]byte, error) {
	head := recordingJSON{From: r.From, To: r.To, Recorded: r.Recorded, Command: r.Command, Flags: r.Flags,
		ReadyAfter: r.ReadyAfter, EtcdPuts: r.EtcdPuts, EtcdBytes: r.EtcdBytes}
	b, err := json.MarshalIndent(head, "", " ")
	if err != nil {
		return nil, err
	}
	// Replace the empty writes with one line each.
	b = bytes.TrimSuffix(b, []byte("\n \"writes\": null\n}"))
	var out bytes.Buffer
	out.Write(b)
	out.WriteString("\n \"writes\": [")
	for i, w := range r.Writes {
		line, err := json.Marshal(w)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out.WriteString(",")
		}
		out.WriteString("\n  ")
		out.Write(line)
	}
	out.WriteString("\n ]\n}\n")
	return out.Bytes(), nil
}

// Decode reads one recording, strictly.
func Decode(data []byte) (*Recording, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var j recordingJSON
	if err := dec.Decode(&j); err != nil {
		return nil, err
	}
	for _, v := range []string{j.From, j.To} {
		if _, _, err := parseVersion(v); err != nil {
			return nil, err
		}
	}
	if len(j.Writes) == 0 {
		return nil, fmt.Errorf("%s -> %s: no writes", j.From, j.To)
	}
	for i, w := range j.Writes {
		if w.Operation == "" || w.Resource == "" || w.Version == "" {
			return nil, fmt.Errorf("%s -> %s: write %d has no operation, version or resource", j.From, j.To, i+1)
		}
	}
	return &Recording{From: j.From, To: j.To, Recorded: j.Recorded, Command: j.Command, Flags: j.Flags,
		ReadyAfter: j.ReadyAfter, EtcdPuts: j.EtcdPuts, EtcdBytes: j.EtcdBytes, Writes: j.Writes}, nil
}

//go:embed recorded/*.json
var recorded embed.FS

var (
	loadOnce   sync.Once
	recordings []*Recording
	loadErr    error
)

func load() ([]*Recording, error) {
	loadOnce.Do(func() {
		entries, err := recorded.ReadDir("recorded")
		if err != nil {
			loadErr = err
			return
		}
		for _, e := range entries {
			data, err := recorded.ReadFile(path.Join("recorded", e.Name()))
			if err != nil {
				loadErr = err
				return
			}
			r, err := Decode(data)
			if err != nil {
				loadErr = fmt.Errorf("%s: %w", e.Name(), err)
				return
			}
			if e.Name() != r.FileName() {
				loadErr = fmt.Errorf("%s holds the recording of %s -> %s", e.Name(), r.From, r.To)
				return
			}
			recordings = append(recordings, r)
		}
		sort.Slice(recordings, func(i, j int) bool {
			a, b := recordings[i], recordings[j]
			if a.From != b.From {
				return less(a.From, b.From)
			}
			return less(a.To, b.To)
		})
	})
	return recordings, loadErr
}

// All lists the recordings, by their from then to version.
func All() ([]*Recording, error) { return load() }

// For returns the recording of the upgrade from minor `from` to minor `to`
// (34 for 1.34), and false when that pair was not recorded.
func For(from, to int) (*Recording, bool) {
	rs, err := load()
	if err != nil {
		panic(err) // embedded, and checked by this package's tests
	}
	for _, r := range rs {
		f, _, _ := parseVersion(r.From)
		t, _, _ := parseVersion(r.To)
		if f == from && t == to {
			return r, true
		}
	}
	return nil, false
}

func less(a, b string) bool {
	am, ap, _ := parseVersion(a)
	bm, bp, _ := parseVersion(b)
	if am != bm {
		return am < bm
	}
	return ap < bp
}

// parseVersion reads "v1.34.4" as minor 34, patch 4.
func parseVersion(v string) (minor, patch int, err error) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) != 3 || parts[0] != "1" || !strings.HasPrefix(v, "v") {
		return 0, 0, fmt.Errorf("%q is not a Kubernetes release vX.Y.Z", v)
	}
	if minor, err = strconv.Atoi(parts[1]); err != nil {
		return 0, 0, fmt.Errorf("%q is not a Kubernetes release vX.Y.Z", v)
	}
	if patch, err = strconv.Atoi(parts[2]); err != nil {
		return 0, 0, fmt.Errorf("%q is not a Kubernetes release vX.Y.Z", v)
	}
	return minor, patch, nil
}
