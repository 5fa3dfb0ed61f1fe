package talostest

// SetApplyHook makes ApplyConfiguration call f while it holds the node's apply lock.
func SetApplyHook(o *ClusterOptions, f func(n *Node)) { o.applyHook = f }

// CollectGarbage runs the kubelet's container garbage collection now.
func CollectGarbage(n *Node) { n.kubelet.CollectGarbage() }
