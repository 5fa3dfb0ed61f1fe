package etcd

import (
	"bytes"
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// maxNodesForVersion bounds the Node objects read to tell the version:
// their values are large, and a few hundred say as much as all of them.
const maxNodesForVersion = 200

var nodeCodecs = func() (c struct {
	pb *protobuf.Serializer
	js *kjson.Serializer
}) {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	c.pb = protobuf.NewSerializer(s, s)
	c.js = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, s, s, kjson.SerializerOptions{})
	return c
}()

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
		var obj runtime.Object
		def := corev1.SchemeGroupVersion.WithKind("Node")
		switch v := kv.Value; {
		case bytes.HasPrefix(v, protobufMagic):
			obj, _, err = nodeCodecs.pb.Decode(v, &def, nil)
		case bytes.HasPrefix(bytes.TrimLeft(v, " \t\r\n"), []byte("{")):
			obj, _, err = nodeCodecs.js.Decode(v, &def, nil)
		default:
			continue // encrypted or unknown: not evidence
		}
		n, ok := obj.(*corev1.Node)
		if err != nil || !ok {
			continue
		}
		if v := n.Status.NodeInfo.KubeletVersion; v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}

// KeyExists tells whether PREFIX/RESOURCE/NAME is stored, e.g.
// servicecidrs/kubernetes, which every kube-apiserver 1.33+ creates.
func (c *Client) KeyExists(ctx context.Context, resource, name string) (bool, error) {
	resp, err := c.kv.Get(ctx, resourcePrefix(c.prefix, Resource(resource))+name, clientv3.WithCountOnly())
	if err != nil {
		return false, c.wrap(err)
	}
	return resp.Count > 0, nil
}
