// Package talostest emulates Talos Linux nodes for tests and for the lab.
//
// A Cluster is N control-plane (and optional worker) nodes generated from ONE
// secrets bundle with the machinery config generator. Every node serves the Talos
// API on its own loopback address (127.0.0.11, .12, ... by default) over gRPC with
// mutual TLS: a server certificate signed by the cluster's OS CA with the node's IPs
// as SANs, client certificates required and verified, the caller's roles read from
// the client certificate's Subject Organization. The tool talks to it with the real
// machinery client, exactly as to a node:
//
//	c, err := talostest.NewCluster(ctx, talostest.ClusterOptions{ControlPlanes: 3, Dir: t.TempDir()})
//	path, err := c.Talosconfig(role.Admin)
//	cfg, err := clientconfig.Open(path)
//	cl, err := client.New(ctx, client.WithConfig(cfg))
//	cl.Version(client.WithNode(ctx, c.Nodes[1].IP))
//
// What is emulated, and how faithfully (sources: siderolabs/talos v1.13.8):
//
//   - apid: a call with "node" metadata is forwarded to that node (in-process), with
//     "nodes" metadata fanned out to each and the replies stamped with the node in
//     their metadata (failures become messages carrying the error); COSI calls with
//     "nodes" are refused with InvalidArgument. A stopped or unknown node answers
//     Unavailable with the dial error apid would report.
//   - machined's authorization: its per-method role table and, for COSI reads, its
//     resource access filter (read-only verbs; unknown types or namespaces refused;
//     sensitive types such as MachineConfig, APIServerConfig and the etcd secrets only
//     for os:admin, others get PermissionDenied "not authorized").
//   - The COSI state (github.com/cosi-project/runtime in-memory state behind its
//     protobuf server): MachineConfigs v1alpha1 (running) and persistent (on disk),
//     holding the submitted bytes verbatim; MachineTypes; Nodenames; the
//     controlplane APIServerConfigs derived from the running config; the k8s
//     StaticPods kube-apiserver rendered from it; StaticPodStatuses from the kubelet;
//     secrets EtcdRootSecrets and EtcdSecrets. Get, List and Watch work with the
//     client's typed and raw reads.
//   - ApplyConfiguration follows machined's handler: os:admin only; one apply at a
//     time (FailedPrecondition); config loaded and validated with the machinery
//     loader (InvalidArgument with its message); NO_REBOOT and TRY refused with
//     InvalidArgument "this config change can't be applied in immediate mode" unless
//     the v1alpha1 document is unchanged outside the sections machined applies live
//     (.cluster, .debug and its list of .machine keys: the same Go comparison);
//     AUTO picks NO_REBOOT or REBOOT the same way; STAGED writes the persistent config
//     only; TRY changes only the running config and arms a rollback to the config
//     running at the moment of the call, cancelled by any later non-TRY request (even
//     a dry run or an invalid one, as in machined); REBOOT writes the persistent
//     config, then the node's API goes away for RebootDuration and comes back running
//     it. A dry run answers machined's "Dry run summary" with the config diff and
//     changes nothing. The try-mode timer lives in machined's memory on a real node;
//     Node.RollbackPending exposes it here.
//   - Versions: a node reports its TalosVersion. Nodes before v1.13 refuse list values
//     in extraArgs (their loader has map[string]string), and their APIServerConfig
//     reads with no extraArgs through a v1.13 client (the field moved).
//     NodeOptions.ExtraDocuments appends documents of kinds this machinery does not
//     know; such a node accepts them (the typed MachineConfig read then fails on the
//     client, the raw read works). Its dry-run diff covers the known documents only.
//   - The kube-apiserver static pod: flags rendered as Talos renders them (its base
//     flags, or ClusterOptions.BaseArgs; extraArgs merged with its policies: overwrite,
//     additive for enable-admission-plugins and a few others, refusal of the flags it
//     manages; a list value gives the flag once per item). A kubelet-like loop runs
//     the container through a PodRunner: a changed pod replaces the container (a new
//     pod, restart count back to 0); an exit or failed liveness probe (when the runner
//     is a Prober) restarts it after a back-off doubling from BackoffBase to
//     BackoffCap, counting restarts, CrashLoopBackOff in between. $(POD_IP) in the
//     command is expanded to the node IP as kubelet does. Logs (CRI log lines) and
//     Containers serve the current and the previous container.
//   - Kubeconfig returns an admin kubeconfig for the cluster endpoint signed by the
//     cluster CA; EtcdSnapshot streams from ClusterOptions.EtcdSnapshot, Unavailable
//     without it. Both are control-plane only (Unimplemented on a worker, as machined).
//
// Not emulated: every other machine-service method (Unimplemented), the other
// control-plane static pods, etcd itself, the runtime validation of configs against
// node resources, and Node.Stop does not stop the node's kube-apiserver (the node is
// unreachable, not down).
package talostest
