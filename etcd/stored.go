package etcd

import (
	"context"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/encryption"
)

// StoredGroup is every value of one resource stored the same way: under one
// encryption prefix (provider, version and key name), or unencrypted in one
// form. Sample is one of its values, kept in memory only for a trial
// decryption: never printed, never written anywhere.
type StoredGroup struct {
	Resource string            `json:"resource"`
	Stored   encryption.Stored `json:"-"`
	// What says it: "secretbox key key2", "unencrypted (protobuf)".
	What    string   `json:"what"`
	Count   int      `json:"count"`
	Example string   `json:"example"` // one etcd key, e.g. /registry/secrets/default/s0
	Keys    []string `json:"-"`       // every etcd key of the group
	Sample  []byte   `json:"-"`
	// SampleKey is the etcd key Sample was read under (AES-GCM
	// authenticates it).
	SampleKey string `json:"-"`
	// Class is what StoredSplit's split said of the group's values.
	Class string `json:"-"`
}

// storedPage is how many keys one read of Stored asks for.
const storedPage = 500

// Stored reads every value stored under the resource (PREFIX/RESOURCE/) and
// groups them by how each is stored (encryption.Classify), in pages, at one
// revision. Nothing is decrypted or kept but one value per group.
func (c *Client) Stored(ctx context.Context, resource string) ([]StoredGroup, error) {
	return c.StoredSplit(ctx, resource, nil)
}

// StoredSplit is Stored with each group split further by what split says
// of each value (nil: not split): one prefix may hold values written with
// two secrets of one key name (a secrets bundle regenerated, some values
// written again since), and a group's one sample speaks for its values only
// when split tells them apart (which key decrypts it, say). Class holds
// what split said of the group's values.
func (c *Client) StoredSplit(ctx context.Context, resource string, split func(etcdKey string, value []byte) string) ([]StoredGroup, error) {
	var groups []StoredGroup
	err := c.EachValue(ctx, resource, func(key string, value []byte) {
		st := encryption.Classify(value)
		class := ""
		if split != nil {
			class = split(key, value)
		}
		i := slices.IndexFunc(groups, func(g StoredGroup) bool { return g.Stored == st && g.Class == class })
		if i < 0 {
			groups = append(groups, StoredGroup{Resource: resource, Stored: st, Class: class, What: st.String(), Example: key,
				Sample: slices.Clone(value), SampleKey: key})
			i = len(groups) - 1
		}
		groups[i].Count++
		groups[i].Keys = append(groups[i].Keys, key)
	})
	return groups, err
}

// EachValue calls each with every key and value stored under the resource
// (PREFIX/RESOURCE/; "" for everything under PREFIX/), in pages, at one
// revision. value is valid during the call only.
func (c *Client) EachValue(ctx context.Context, resource string, each func(key string, value []byte)) error {
	prefix := resourcePrefix(c.prefix, resource)
	if resource == "" {
		prefix = c.prefix + "/" // custom resources and some built-ins are not under their resource's name
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	var rev int64
	from := prefix
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(storedPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := c.kv.Get(ctx, from, opts...)
		if err != nil {
			return c.wrap(err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			each(string(kv.Key), kv.Value)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
