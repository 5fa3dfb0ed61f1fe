package etcd

import (
	"bytes"
	"context"
	"encoding/json"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// maxNodesForVersion bounds the Node objects read to tell the version:
// their values are large, and a few hundred say as much as all of them.
const maxNodesForVersion = 200

// KubeletVersions returns status.nodeInfo.kubeletVersion of the Node
// objects stored in etcd (at most 200, by key order), each once. etcd keeps
// no record of the API server's own version; the kubelets' is the nearest
// stored evidence of the version the cluster runs.
func (c *Client) KubeletVersions(ctx context.Context) ([]string, error) {
	resp, err := c.kv.Get(ctx, resourcePrefix(c.prefix, "minions"), clientv3.WithPrefix(), clientv3.WithLimit(maxNodesForVersion))
	if err != nil {
		return nil, c.wrap(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, kv := range resp.Kvs {
		if v, ok := kubeletVersion(kv.Value); ok && v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}

// KeyExists tells whether PREFIX/RESOURCE/NAME is stored, e.g.
// servicecidrs/kubernetes, which every kube-apiserver 1.33+ creates.
func (c *Client) KeyExists(ctx context.Context, resource, name string) (bool, error) {
	resp, err := c.kv.Get(ctx, resourcePrefix(c.prefix, resource)+name, clientv3.WithCountOnly())
	if err != nil {
		return false, c.wrap(err)
	}
	return resp.Count > 0, nil
}

// kubeletVersion reads status.nodeInfo.kubeletVersion of one stored Node,
// protobuf ("k8s\x00" + runtime.Unknown) or JSON, by the field numbers of
// k8s.io/api/core/v1's generated.proto, which never change: the Go types
// would add 4 MB to the on-call binary for one string. false: not a Node,
// or encrypted or undecodable (not evidence).
func kubeletVersion(v []byte) (string, bool) {
	if bytes.HasPrefix(bytes.TrimLeft(v, " \t\r\n"), []byte("{")) {
		var n struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Status     struct {
				NodeInfo struct {
					KubeletVersion string `json:"kubeletVersion"`
				} `json:"nodeInfo"`
			} `json:"status"`
		}
		if json.Unmarshal(v, &n) != nil || n.Kind != "Node" || n.APIVersion != "v1" {
			return "", false
		}
		return n.Status.NodeInfo.KubeletVersion, true
	}
	unknown, ok := bytes.CutPrefix(v, protobufMagic)
	if !ok {
		return "", false
	}
	typeMeta, ok := protoField(unknown, 1) // runtime.Unknown.typeMeta
	if !ok {
		return "", false
	}
	apiVersion, _ := protoField(typeMeta, 1)
	kind, _ := protoField(typeMeta, 2)
	raw, ok := protoField(unknown, 2) // runtime.Unknown.raw: the Node
	if string(apiVersion) != "v1" || string(kind) != "Node" || !ok {
		return "", false
	}
	version := raw
	for _, field := range []protowire.Number{3, 7, 7} { // Node.status, NodeStatus.nodeInfo, NodeSystemInfo.kubeletVersion
		if version, ok = protoField(version, field); !ok {
			return "", true // unset: a Node that says no version
		}
	}
	return string(version), true
}

// protoField is the last value of a length-delimited field (a message,
// string or bytes) in a protobuf message; false if it is absent or the
// message does not parse.
func protoField(msg []byte, field protowire.Number) ([]byte, bool) {
	var out []byte
	found := false
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return nil, false
		}
		msg = msg[n:]
		if num == field && typ == protowire.BytesType {
			val, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return nil, false
			}
			out, found = val, true
			msg = msg[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, msg)
		if m < 0 {
			return nil, false
		}
		msg = msg[m:]
	}
	return out, found
}
