package etcd

import (
	"context"
	"encoding/json"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// Listing is every admission object of the selected resources, read at one revision.
type Listing struct {
	Prefix    string       `json:"prefix"`
	Cluster   ClusterInfo  `json:"cluster"`
	Resources []kinds.Kind `json:"resources"`
	Objects   []Object     `json:"objects"`
}

// List reads and decodes every object under PREFIX/RESOURCE/ for each
// selected resource (nil means all). It issues one read-only transaction of
// range requests on exactly those prefixes, so its cost does not depend on
// the rest of the keyspace, and all resources are seen at the same revision.
func (c *Client) List(ctx context.Context, resources []kinds.Kind) (*Listing, error) {
	if len(resources) == 0 {
		resources = kinds.All
	}
	ops := make([]clientv3.Op, len(resources))
	for i, r := range resources {
		if !r.Valid() {
			return nil, &ConfigError{Reason: "unknown resource " + string(r)}
		}
		ops[i] = clientv3.OpGet(resourcePrefix(c.prefix, r.Resource()), clientv3.WithPrefix())
	}
	resp, err := c.kv.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, c.wrap(err)
	}
	l := &Listing{Prefix: c.prefix, Cluster: clusterInfo(resp.Header), Resources: resources}
	for i, r := range resources {
		for _, kv := range resp.Responses[i].GetResponseRange().Kvs {
			key := string(kv.Key)
			_, name, ok := splitKey(c.prefix, key)
			if !ok {
				// PREFIX/RESOURCE/a/b: not something kube-apiserver writes; keep it visible.
				name = key[len(resourcePrefix(c.prefix, r.Resource())):]
			}
			l.Objects = append(l.Objects, decodeObject(r, name, key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version))
		}
	}
	// Keys come sorted per resource already; keep resource order, then name.
	sort.SliceStable(l.Objects, func(i, j int) bool {
		return resourceIndex(l.Objects[i].Resource) < resourceIndex(l.Objects[j].Resource)
	})
	return l, nil
}

func resourceIndex(r kinds.Kind) int {
	for i, x := range kinds.All {
		if x == r {
			return i
		}
	}
	return len(kinds.All)
}

// Manifest is the decoded objects as one JSON List (apiVersion and kind
// set on each), for tools that read manifests; Unreadable are those it
// leaves out (encrypted, or undecodable), to be named to the user.
func (l *Listing) Manifest() (data []byte, unreadable []Object, err error) {
	items := []json.RawMessage{}
	for _, o := range l.Objects {
		if o.Decoded == nil {
			unreadable = append(unreadable, o)
			continue
		}
		b, err := json.Marshal(o.Decoded)
		if err != nil {
			return nil, nil, err
		}
		items = append(items, b)
	}
	data, err = json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	return data, unreadable, err
}
