package etcd

import (
	"bytes"
	"encoding/json"
	"regexp"

	"google.golang.org/protobuf/encoding/protowire"
)

// NodeInfo is what a stored Node says of its machine: its name, its
// InternalIP, and what its kubelet last reported (status.nodeInfo): the
// kubelet's version and the OS image, "Talos (v1.13.8)" on Talos.
type NodeInfo struct {
	Name           string `json:"name"`
	InternalIP     string `json:"internalIP,omitempty"`
	KubeletVersion string `json:"kubeletVersion,omitempty"`
	OSImage        string `json:"osImage,omitempty"`
}

// TalosVersion is the Talos version in the OS image ("v1.13.8"), or "".
func (n NodeInfo) TalosVersion() string {
	if m := talosImage.FindStringSubmatch(n.OSImage); m != nil {
		return m[1]
	}
	return ""
}

var talosImage = regexp.MustCompile(`^Talos \((v\d+\.\d+\.\d+[^)]*)\)$`)

// NodesResource is the key segment kube-apiserver stores Nodes under.
const NodesResource = "minions"

// ReadNode reads one stored Node (protobuf or JSON) by the field numbers
// of k8s.io/api/core/v1's generated.proto (see kubeletVersion); false:
// not a Node, or encrypted or undecodable.
func ReadNode(v []byte) (NodeInfo, bool) {
	if bytes.HasPrefix(bytes.TrimLeft(v, " \t\r\n"), []byte("{")) {
		var n struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Status struct {
				Addresses []struct{ Type, Address string } `json:"addresses"`
				NodeInfo  struct {
					KubeletVersion string `json:"kubeletVersion"`
					OSImage        string `json:"osImage"`
				} `json:"nodeInfo"`
			} `json:"status"`
		}
		if json.Unmarshal(v, &n) != nil || n.Kind != "Node" || n.APIVersion != "v1" {
			return NodeInfo{}, false
		}
		out := NodeInfo{Name: n.Metadata.Name, KubeletVersion: n.Status.NodeInfo.KubeletVersion, OSImage: n.Status.NodeInfo.OSImage}
		for _, a := range n.Status.Addresses {
			if a.Type == "InternalIP" && out.InternalIP == "" {
				out.InternalIP = a.Address
			}
		}
		return out, true
	}
	unknown, ok := bytes.CutPrefix(v, protobufMagic)
	if !ok {
		return NodeInfo{}, false
	}
	typeMeta, ok := protoField(unknown, 1)
	if !ok {
		return NodeInfo{}, false
	}
	apiVersion, _ := protoField(typeMeta, 1)
	kind, _ := protoField(typeMeta, 2)
	raw, ok := protoField(unknown, 2)
	if string(apiVersion) != "v1" || string(kind) != "Node" || !ok {
		return NodeInfo{}, false
	}
	var out NodeInfo
	if meta, ok := protoField(raw, 1); ok { // Node.metadata
		name, _ := protoField(meta, 1) // ObjectMeta.name
		out.Name = string(name)
	}
	status, ok := protoField(raw, 3) // Node.status
	if !ok {
		return out, true
	}
	for _, addr := range protoFields(status, 5) { // NodeStatus.addresses
		typ, _ := protoField(addr, 1)
		ip, _ := protoField(addr, 2)
		if string(typ) == "InternalIP" && out.InternalIP == "" {
			out.InternalIP = string(ip)
		}
	}
	if info, ok := protoField(status, 7); ok { // NodeStatus.nodeInfo
		kv, _ := protoField(info, 7)  // NodeSystemInfo.kubeletVersion
		img, _ := protoField(info, 5) // NodeSystemInfo.osImage
		out.KubeletVersion, out.OSImage = string(kv), string(img)
	}
	return out, true
}

// protoFields are every value of a repeated length-delimited field, in order.
func protoFields(msg []byte, field protowire.Number) [][]byte {
	var out [][]byte
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return out
		}
		msg = msg[n:]
		if num == field && typ == protowire.BytesType {
			val, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return out
			}
			out = append(out, val)
			msg = msg[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, msg)
		if m < 0 {
			return out
		}
		msg = msg[m:]
	}
	return out
}
