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
// A Node composes four parts, each a package of its own under internal/ that is handed
// the node's host (its name and address, its COSI state, its event bus, machined's
// logs, its files and its clock: internal/host) and never the Node or the Cluster:
//
//   - apid (internal/apid): the gRPC server with mTLS, the roles, the routing to the
//     other nodes' apids;
//   - machined (internal/machined): the machine and cluster API services, the COSI
//     state, the config (apply, try, rollback) and the controllers that follow it, the
//     boot and the reset;
//   - machined's etcd service (internal/etcdsvc): a real member per control plane, a
//     process of its own;
//   - the kubelet (internal/kubelet), with the container runtime under it.
//
// What one part does to another goes through the state or the bus, as on a Talos
// node: machined renders the StaticPod resource and the kubelet fetches it at its
// polls; the kubelet writes the StaticPodStatus and machined's MachineStatus follows
// it; the etcd service writes its Service and Member resources and machined's static
// pod controller follows them. machined starts and stops its services through their
// small interfaces, as Talos's service runner does. A part that fails fails alone: an
// etcd member that panics or is killed is a service that reports the exit and
// restarts the member 5 s later, and the other nodes go on.
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
//     manages; a list value gives the flag once per item), and only while the node's
//     etcd is healthy (Node.SetEtcdHealthy): an apply meanwhile changes the configs but
//     not the StaticPod, which is rendered when etcd is healthy again.
//   - The kubelet, with the times of a real node (KubeletOptions; defaults in brackets):
//     it fetches the manifest every PollInterval [20s, kubelet's httpCheckFrequency],
//     so a re-rendered pod is noticed at the next poll, not at the apply. A changed
//     manifest is a new pod (new UID; the manifest carries the APIServerConfig's
//     version, talos.dev/config-version, so a change undone and done again before the
//     poll is a new pod too, with the same container): the old container gets SIGTERM (the runner's ctx is
//     cancelled) and the kubelet waits for it to exit, up to TerminationGrace [30s],
//     then kills it (Container.Kill is closed); only then does the new pod start, with
//     a new startTime and restart count 0. The pod has no probes, as on Talos: it is
//     Ready whenever its container runs; a hung container is never restarted. A
//     container that exits restarts in the same pod, the first time at once, then
//     after BackoffBase doubling to BackoffCap [10s, 5m], CrashLoopBackOff in between.
//     $(POD_IP) in the command is expanded to the node IP as kubelet does.
//     The poll has a phase: the first periodic fetch comes PollPhase, or a time
//     drawn from PollSeed and the node's name, after the kubelet's first start.
//     ServiceRestart of the kubelet is machined's APIRestart: the reply comes once
//     the service stopped [RestartStop 1s], the StaticPodStatus is torn down, the
//     containers run on, and RestartStart [3s] later the new kubelet fetches the
//     manifest at once, keeps the unchanged pod (or replaces a changed one) and polls
//     every PollInterval from then on; the status comes back at the next refresh. A
//     node that is not up answers Unavailable; a kubelet a reset stopped stays down.
//   - StaticPodStatus is what Talos reads from the kubelet's /pods every
//     StatusInterval [15s], so it lags the kubelet; none exists before the first
//     refresh. It is the pod's status as JSON (numbers are floats, times RFC 3339 in
//     whole seconds): phase, startTime, conditions (Ready), and the container's
//     containerID, state (running, or waiting CrashLoopBackOff with the back-off
//     message), restartCount, lastState.terminated (exit code, reason, containerID)
//     and started. A pod waiting for its predecessor to stop reports only
//     {"phase": "Pending"}. Node.FreezePodStatus(true) keeps the last values, as on a
//     node whose kubelet cannot authorize Talos's call while kube-apiserver is down.
//   - New pod or restart? A restart of the same pod keeps startTime, raises
//     restartCount by one, and its lastState.terminated.containerID is the previous
//     container. A new pod (the manifest changed) has a new startTime, restartCount 0
//     and no lastState until it restarts itself. A new containerID alone proves
//     nothing: the old pod may have restarted before the kubelet noticed the new
//     manifest. startTime has whole seconds: two pods started within the same second
//     look alike (rare on a node, frequent with scaled times). The CRI list below tells
//     pods apart at once by their UID (breakglass's wait reads it).
//   - CRI: Containers lists, live (the kubelet's state at the call, as machined asks
//     containerd at every call), each ready pod sandbox (its Id is its PodId; Uid is
//     the pod UID) followed by its containers, running and exited (the kubelet keeps
//     the newest exited one); pods, and the containers of a pod, in random order on
//     every call, as containerd lists them from maps. A replaced
//     pod's sandbox is stopped, so its containers are not listed, but the runtime has
//     them (and their logs) until the kubelet's garbage collection, every GCInterval
//     [1m]. Logs for "kube-system/kube-apiserver-<node>:kube-apiserver" reads the
//     first container the runtime lists, which may be an exited or an old pod's one;
//     with ":<id>" appended (any part of the ID, such as the 12 digits Containers
//     shows) exactly that container. An unknown one fails with machined's plain
//     error `container "..." not found` (gRPC Unknown, not NotFound).
//   - KubeletOptions.TimeScale multiplies every default time (0 or 1: real time);
//     times set explicitly are used as given; it scales the node's try-mode
//     rollback timer too (a TRY of 10m reverts after 6s at 0.01), so that tests pass
//     the flag values people use. Tests use TimeScale 0.01 (poll 200ms,
//     status 150ms, grace 300ms, back-off 100ms to 3s) and, to decide the order of
//     events themselves, very long times with Node.PollKubelet (the kubelet's poll,
//     now), Node.RefreshPodStatus (Talos's refresh, now), Node.CrashContainer (the
//     running container dies; a stopping one dies at once) and Node.WaitPod (wait for
//     the kubelet's live state, Node.Pod). StandIn.ShutdownDelay makes a container
//     slow to stop, StandIn.GiveUpAfter makes a hung one exit by itself as v1.34 does.
//   - Kubeconfig returns an admin kubeconfig for the cluster endpoint signed by the
//     cluster CA; EtcdSnapshot streams from ClusterOptions.EtcdSnapshot, else from the
//     node's member (EtcdMember), Unavailable without either. Both are control-plane only
//     (Unimplemented on a worker, as machined).
//   - etcd maintenance (internal/machined/etcd.go): with ClusterOptions.EtcdMember, EtcdStatus,
//     EtcdMemberList, EtcdAlarmList, EtcdAlarmDisarm and EtcdDefragment make a client of
//     the node's own real member and answer what it answers, in machined's words (NOSPACE
//     alarms with the member that raised them, sizes, a real defragmentation that blocks
//     the member while it runs, a disarm of every alarm); roles as machined's table
//     (disarm and defragment: admin and operator). Without it, status and members come
//     from the model (internal/machined/etcdmodel.go) and the others fail ("failed to create etcd client").
//   - ClusterService.HealthCheck (internal/machined/health.go), discovery Members and the runtime
//     MachineStatus (internal/machined/machinestatus.go), as described there: what the emulator cannot
//     check is said so, never passed.
//   - machined's etcd service (internal/etcdsvc), with ClusterOptions.Etcd: every
//     control plane runs a real etcd member as a process of its own (this executable
//     started again, as etcd runs in its container on a node), its data in the node's
//     EPHEMERAL (/var/lib/etcd, Node.HostPath), its certificates the node's
//     EtcdSecrets; the service's states and events as machined reports them (talosctl
//     service etcd), its health check (5 s, then every 20 s), a member that exits
//     (exit code 0 when removed, 1 when it cannot start, 2 when it panics, 137 when
//     killed) restarted every 5 s with the arguments its pre state computed, a node with an
//     empty data directory waiting to join (as a learner, promoted once caught up) or
//     to be bootstrapped; the Service and local Member resources follow it, and the
//     static pods are rendered only while it runs healthy and torn down while it does
//     not run. The membership and recovery calls (internal/machined/etcdcalls.go: Bootstrap with
//     RecoverEtcd, EtcdRecover, EtcdRemoveMemberByID, EtcdLeaveCluster,
//     EtcdForfeitLeadership; ServiceStart/Stop/Restart, which machined refuses for etcd),
//     Reset of EPHEMERAL with a reboot (internal/machined/boot.go: the reset sequence's events, which
//     talosctl reset follows, then a kexec boot on a VM's timeline), Copy and Read of
//     the node's /var and /system and of its boot ID (internal/machined/files.go), the runtime Events
//     (internal/host/bus.go), and Logs of "etcd" (the member's own log). Node.DestroyEtcdData and
//     Node.KillEtcd are what happens to a node (a lost disk, a killed process).
//
// Node.Stop takes the API off the network (connections refused) and Node.Start brings
// it back; the node's address stays reserved meanwhile (PortReservation), so nothing
// else can take its port. The kube-apiserver keeps running: the node is unreachable,
// not down.
//
// Not emulated: the machine-service methods not described here or in internal/machined/services.go
// (Unimplemented), the other control-plane static pods, the runtime validation of
// configs against node resources, the kubelet's restart through the API, a reset that
// wipes more than EPHEMERAL or shuts the node down (Unimplemented), and, after an
// apply in REBOOT mode, the reboot's effect on the pod and on etcd (the kubelet and
// the member keep running through it; a reset does reboot them). Without
// ClusterOptions.Etcd, etcd is a model (SetEtcdHealthy) or members handed over through
// ClusterOptions.EtcdMember, and the static pods are never torn down.
package talostest
