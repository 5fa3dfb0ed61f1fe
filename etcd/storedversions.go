package etcd

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// The API versions objects are stored at, read from etcd with no API
// server: what kubent and pluto ask a live one. Two things are read of
// each value, without decoding the object (the Go types of every API
// group would add megabytes to the on-call binary for two strings):
//
//   - the version it is stored at: the envelope's apiVersion and kind
//     (protobuf "k8s\x00" + runtime.Unknown.typeMeta, or a JSON value's own
//     fields). kube-apiserver decodes a stored object only in a version its
//     scheme registers: an object stored at one the next minor dropped
//     cannot be read by it;
//   - the version its manifest was written in, when kubectl apply left its
//     kubectl.kubernetes.io/last-applied-configuration annotation: the
//     next `kubectl apply` of that manifest fails once the version is gone
//     (kubent's source). In protobuf, ObjectMeta is field 1 of every
//     top-level object and its annotations field 12 (k8s.io/apimachinery's
//     generated.proto; field numbers never change).
//
// Encrypted values (k8s:enc:, Secrets on Talos) cannot be read: counted.

// LastAppliedAnnotation is where kubectl apply keeps the manifest it applied.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// StoredVersion is how many objects of one resource are stored at one API version.
type StoredVersion struct {
	Resource   string `json:"resource"` // as the key spells it (see KeyParts.Resource)
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Count      int    `json:"count"`
	Example    string `json:"example"` // one of their keys
}

// StoredVersions is the tally of a whole keyspace.
type StoredVersions struct {
	// Stored are the versions objects are stored at, by resource.
	Stored []StoredVersion `json:"stored"`
	// Applied are the versions of the manifests kubectl last applied
	// (Resource is the resource the object is stored under).
	Applied []StoredVersion `json:"applied"`
	// Encrypted counts the values encrypted at rest, by resource.
	Encrypted map[string]int `json:"encrypted,omitempty"`
	// Unreadable counts the values under the prefix that are neither.
	Unreadable int `json:"unreadable"`
	Keys       int `json:"keys"`
}

// VersionTally counts what StoredVersions says, key by key; memory stays
// one entry per resource and version.
type VersionTally struct {
	prefix  string
	stored  map[[3]string]*StoredVersion
	applied map[[3]string]*StoredVersion
	out     StoredVersions
}

// NewVersionTally tallies the keys under kube-apiserver's prefix.
func NewVersionTally(prefix string) *VersionTally {
	return &VersionTally{prefix: normalizePrefix(prefix), stored: map[[3]string]*StoredVersion{}, applied: map[[3]string]*StoredVersion{},
		out: StoredVersions{Encrypted: map[string]int{}}}
}

// Add counts one key and its value; keys outside the prefix are not objects.
func (t *VersionTally) Add(key, value []byte) {
	p := ParseKey(t.prefix, string(key))
	if p.Scope == ScopeOutside || p.Scope == ScopeOdd {
		return
	}
	t.out.Keys++
	if bytes.HasPrefix(value, encryptedMagic) {
		t.out.Encrypted[p.Resource]++
		return
	}
	apiVersion, kind, applied, ok := readVersions(value)
	if !ok {
		t.out.Unreadable++
		return
	}
	count(t.stored, p.Resource, apiVersion, kind, string(key))
	if applied != "" {
		var m struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if json.Unmarshal([]byte(applied), &m) == nil && m.APIVersion != "" {
			count(t.applied, p.Resource, m.APIVersion, m.Kind, string(key))
		}
	}
}

func count(m map[[3]string]*StoredVersion, resource, apiVersion, kind, key string) {
	k := [3]string{resource, apiVersion, kind}
	v := m[k]
	if v == nil {
		v = &StoredVersion{Resource: resource, APIVersion: apiVersion, Kind: kind, Example: key}
		m[k] = v
	}
	v.Count++
}

// Result is the tally so far, each list by resource then version.
func (t *VersionTally) Result() *StoredVersions {
	out := t.out
	out.Stored, out.Applied = sorted(t.stored), sorted(t.applied)
	return &out
}

func sorted(m map[[3]string]*StoredVersion) []StoredVersion {
	out := make([]StoredVersion, 0, len(m))
	for _, v := range m {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b StoredVersion) int {
		return cmp.Or(cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.APIVersion, b.APIVersion), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

// readVersions reads the stored version, kind and last-applied manifest
// of one value; false: neither protobuf nor JSON with an apiVersion.
func readVersions(v []byte) (apiVersion, kind, lastApplied string, ok bool) {
	if bytes.HasPrefix(bytes.TrimLeft(v, " \t\r\n"), []byte("{")) {
		var o struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if json.Unmarshal(v, &o) != nil || o.APIVersion == "" {
			return "", "", "", false
		}
		return o.APIVersion, o.Kind, o.Metadata.Annotations[LastAppliedAnnotation], true
	}
	unknown, found := bytes.CutPrefix(v, protobufMagic)
	if !found {
		return "", "", "", false
	}
	typeMeta, found := protoField(unknown, 1) // runtime.Unknown.typeMeta
	if !found {
		return "", "", "", false
	}
	av, _ := protoField(typeMeta, 1)
	k, _ := protoField(typeMeta, 2)
	if len(av) == 0 {
		return "", "", "", false
	}
	if raw, found := protoField(unknown, 2); found { // runtime.Unknown.raw: the object
		if meta, found := protoField(raw, 1); found { // its ObjectMeta
			lastApplied = annotation(meta, LastAppliedAnnotation)
		}
	}
	return string(av), string(k), lastApplied, true
}

// annotation is ObjectMeta.annotations[name] (field 12, map entries of
// key 1 and value 2), "" when absent or unreadable.
func annotation(meta []byte, name string) string {
	for len(meta) > 0 {
		num, typ, n := protowire.ConsumeTag(meta)
		if n < 0 {
			return ""
		}
		meta = meta[n:]
		if num == 12 && typ == protowire.BytesType {
			entry, m := protowire.ConsumeBytes(meta)
			if m < 0 {
				return ""
			}
			meta = meta[m:]
			if k, _ := protoField(entry, 1); string(k) == name {
				v, _ := protoField(entry, 2)
				return string(v)
			}
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, meta)
		if m < 0 {
			return ""
		}
		meta = meta[m:]
	}
	return ""
}

// GroupOf is the API group of an apiVersion ("" for the core group's "v1").
func GroupOf(apiVersion string) string {
	g, _, found := strings.Cut(apiVersion, "/")
	if !found {
		return ""
	}
	return g
}
