package audit

import (
	"fmt"

	"github.com/breakglass-dev/breakglass/internal/startupwrites"
)

// What an upgrade's target writes at start is recorded from the real
// binaries for each pair internal/startupwrites holds (every minor after
// the one before it, 1.32 -> 1.33 to 1.36 -> 1.37, and the lab's 1.32 ->
// 1.34): those writes, and only those, are audited for that pair. A write a
// minor never makes on that upgrade (a FlowSchema it leaves alone, an
// APIService it already has, a Role in kube-system) is no reason to stop
// it: a gate that cries wolf is soon ignored. The catalogue
// (startupCatalogue) still says what each write does when it is refused
// (its effect, hook, deadline and source), and is the model of the pairs
// nobody recorded (a restart, a skipped minor).

// namesVaryPerCluster are the resources whose recorded names are the lab's
// own (an IPAddress per Service, the identity Lease per host, generated
// Event names): a condition on their name cannot be decided.
var namesVaryPerCluster = map[string]bool{"ipaddresses": true, "leases": true, "events": true}

// everyStartUnseen are the catalogue's writes that any start makes when
// the API server addresses change, which the recorder cannot see (its
// advertise address is loopback, never published): added to every
// recorded pair. A refusal of them is only logged.
var everyStartUnseen = []string{"endpoints-kubernetes", "endpointslice-kubernetes"}

// recordedRequests are the writes a recording holds, each described by
// its class in the catalogue, with the name, namespace, labels,
// annotations and field manager it was sent with; then the writes every
// start makes that the recorder cannot see, and those of an empty etcd
// (audited only with Options.IncludeNewCluster).
func recordedRequests(rec *startupwrites.Recording) ([]StartupRequest, error) {
	cat := startupCatalogue()
	pair := rec.From + " -> " + rec.To
	var out []StartupRequest
	for _, w := range rec.Writes {
		class, ok := classOf(cat, w)
		if !ok {
			return nil, fmt.Errorf("audit: the recording of %s holds %s, which the model does not describe", pair, w)
		}
		r := class
		r.Name, r.Namespace = w.Name, w.Namespace
		r.labels, r.annotations, r.fieldManager = copyMap(w.Labels), copyMap(w.Annotations), w.FieldManager
		r.unknownName = class.unknownName && namesVaryPerCluster[w.Resource]
		r.NewClusterOnly = false
		r.When = "sent by " + rec.To + " at its first start after " + rec.From + " (recorded)"
		r.Recorded = pair
		out = append(out, r)
	}
	for _, r := range cat {
		if r.NewClusterOnly {
			out = append(out, r)
		}
		for _, id := range everyStartUnseen {
			if r.ID == id {
				r.When += " (every start whose API server addresses changed; not seen by the recorder, whose address is loopback)"
				out = append(out, r)
			}
		}
	}
	// Fatal writes first, as in the catalogue.
	fatal := out[:0:0]
	var rest []StartupRequest
	for _, r := range out {
		if r.Fatal {
			fatal = append(fatal, r)
		} else {
			rest = append(rest, r)
		}
	}
	return append(fatal, rest...), nil
}

// classOf is the catalogue's description of a recorded write: the same
// operation, group, version, resource, subresource, kind and scope, the
// same namespace when the catalogue has one there.
func classOf(cat []StartupRequest, w startupwrites.Write) (StartupRequest, bool) {
	ms := modelFor(cat, w)
	if len(ms) == 0 {
		return StartupRequest{}, false
	}
	for _, m := range ms {
		if m.Namespace == w.Namespace {
			return m, true
		}
	}
	return ms[0], true
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// RecordedPair tells whether the writes of the upgrade from -> to (minor
// versions such as "1.34") come from a recording of the real binaries,
// and which binaries; false: from the catalogue's model.
func RecordedPair(from, to string) (string, bool) {
	f, t, err := parseVersions(from, to)
	if err != nil {
		return "", false
	}
	rec, ok := startupwrites.For(f, t)
	if !ok {
		return "", false
	}
	return rec.From + " -> " + rec.To, true
}
