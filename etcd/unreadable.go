package etcd

// The last resort of an encryption drift: encrypted values no key reads,
// backed up byte for byte and removed by their keys. They may be anything
// under the prefix (Secrets, custom resources), so the backup marks them
// unreadable and takes only an encrypted value as one: an edited file can
// still not write a plain Secret.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/breakglass-dev/breakglass/internal/encryption"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// PlanUnreadable reads keys at one revision as the plan of a delete of
// values no key reads: each must be there, under the prefix, and
// encrypted. Its Objects are marked Unreadable and named by their path
// under the prefix (secrets/default/s1).
func (c *Client) PlanUnreadable(ctx context.Context, keys []string) (*Plan, error) {
	if len(keys) == 0 {
		return nil, &EmptyPlanError{}
	}
	p := &Plan{Prefix: c.prefix}
	for _, key := range keys {
		name, ok := unreadableName(c.prefix, key)
		if !ok {
			return nil, fmt.Errorf("%s is not a key under %s/", termsafe.String(key), c.prefix)
		}
		var opts []clientv3.OpOption
		if p.Cluster.Revision != 0 {
			opts = append(opts, clientv3.WithRev(p.Cluster.Revision))
		}
		resp, err := c.kv.Get(ctx, key, opts...)
		if err != nil {
			return nil, c.wrap(err)
		}
		if p.Cluster.Revision == 0 {
			p.Cluster = clusterInfo(resp.Header)
		}
		if len(resp.Kvs) == 0 {
			return nil, fmt.Errorf("%s is no longer in etcd", termsafe.String(key))
		}
		kv := resp.Kvs[0]
		if !bytes.HasPrefix(kv.Value, encryptedMagic) {
			return nil, fmt.Errorf("%s is not encrypted (any more): it is not an unreadable value", termsafe.String(key))
		}
		p.Objects = append(p.Objects, Object{
			Key: key, Name: name, Kind: "encrypted value",
			CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Version: kv.Version,
			Encoding: EncodingEncrypt, EncryptionProvider: encryptionProvider(kv.Value),
			Value: slices.Clone(kv.Value), Unreadable: true,
		})
	}
	return p, nil
}

// Split cuts a plan into plans of at most n objects each, at its one
// revision: etcd takes at most 128 operations in a transaction by default
// (--max-txn-ops), and Execute guards each key in one.
func (p *Plan) Split(n int) []*Plan {
	var out []*Plan
	for objs := p.Objects; len(objs) > 0; {
		k := min(n, len(objs))
		out = append(out, &Plan{Prefix: p.Prefix, Cluster: p.Cluster, Resources: p.Resources, Objects: objs[:k]})
		objs = objs[k:]
	}
	return out
}

// StorageKey tells whether key is one kube-apiserver could have written
// under prefix: PREFIX/RESOURCE/.../NAME, no empty or dot segment.
func StorageKey(prefix, key string) bool {
	_, ok := unreadableName(prefix, key)
	return ok
}

// unreadableName is the key's path under the prefix, when the key is one
// kube-apiserver could have written: PREFIX/RESOURCE/.../NAME, no empty
// or dot segment.
func unreadableName(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"/")
	if !ok {
		return "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 {
		return "", false
	}
	for _, s := range parts {
		if s == "" || s == "." || s == ".." {
			return "", false
		}
	}
	return rest, true
}

// checkUnreadable is validate's rule for a key marked unreadable.
func checkUnreadable(prefix string, k *BackupKey, raw []byte) error {
	name, ok := unreadableName(prefix, k.Key)
	switch {
	case !ok:
		return fmt.Errorf("not a key under %s", prefix)
	case k.Resource != "" || k.Name != name:
		return fmt.Errorf("an unreadable value's resource must be empty and its name %q", name)
	case k.Encoding != EncodingEncrypt || !bytes.HasPrefix(raw, encryptedMagic):
		return fmt.Errorf("marked unreadable but its value is not encrypted (k8s:enc:)")
	case encryption.Classify(raw).Form != encryption.Encrypted && encryption.Classify(raw).Form != encryption.KMSForm:
		return fmt.Errorf("marked unreadable but its value is not one a provider wrote")
	case k.StoredKind != "" || k.StoredName != "":
		return fmt.Errorf("an unreadable value has no storedKind or storedName (its content is not read)")
	}
	return nil
}
