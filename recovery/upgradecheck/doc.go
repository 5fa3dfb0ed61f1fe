// Package upgradecheck is the go/no-go before `talosctl upgrade-k8s`:
// every known way the upgrade to the next Kubernetes minor can kill
// kube-apiserver, checked on a live cluster through the Talos API and etcd
// only (a kube-apiserver need not run), one verdict per check (go, warn,
// no-go), each with its evidence and its fix. Several clusters
// (talosconfig contexts) are checked side by side (RunFleet); each is
// bounded by its own connect timeout, and one that cannot be reached is a
// no-go for it, never a wait for the others.
//
// # Checks
//
//	access           the Talos API of every node the context names and of every control
//	                 plane the cluster's membership names (etcd's member list, Talos
//	                 discovery: membership.go), their machine configs (os:admin), and
//	                 etcd (a client certificate minted from the etcd CA, or the one
//	                 given; endpoints given must be the members the Talos API reports)
//	upgrade-path     from -> to is one minor, or a patch (talosctl upgrade-k8s refuses
//	                 anything else: github.com/siderolabs/go-kubernetes
//	                 kubernetes/upgrade/path.go IsSupported); from is the lowest minor
//	                 the control planes' kube-apiserver images name, as talosctl detects it;
//	                 a --from they contradict is no-go
//	talos-support    Talos on every node runs the target (the machinery's support matrix,
//	                 talos.SupportsKubernetes: the table upgrade-k8s checks; the nodes
//	                 the talosconfig does not name by the OS image their kubelet
//	                 reported), and every kubelet is within the skew the target allows
//	                 (up to three minors older, never newer)
//	admission        audit.Audit of every webhook configuration, admission policy and
//	                 binding in etcd, and of the static manifests (KEP-5793, 1.36+) the
//	                 control planes' machine configs put in a staticManifestsDir
//	                 (static.go), against what the target writes at its first start
//	                 after from, recorded from the real binaries for the pair
//	                 (internal/startupwrites): deadlock or undecidable is no-go,
//	                 slow-start warn; a staticManifestsDir whose files are not in the
//	                 machine config is warn (not audited)
//	apiserver-flags  every control plane's cluster.apiServer.extraArgs against what the
//	                 target's binary accepts (audit.CheckExtraArgs, the recorded flags):
//	                 refused is no-go, a warning is warn; the fix is the talosctl patch
//	etcd-members     the margin counted on the control planes: healthy voters minus
//	                 quorum, where a control plane without a voting member, a learner and
//	                 a member down each count as not healthy; no margin with 3+ control
//	                 planes no-go, two control planes warn (by design), one go; quorum
//	                 lost no-go (within seconds: what needs etcd's keys is not read);
//	                 the member list, discovery and the Node objects disagreeing warn
//	etcd-alarms      no alarm (NOSPACE, CORRUPT)
//	etcd-space       each member's database under its quota by the room the upgrade
//	                 needs: what the pair's target wrote to etcd when recorded, times the
//	                 control planes, and etcd's largest request (2 MiB; etcd refuses a
//	                 write that would reach the quota); over 80% after it is warn. The
//	                 evidence says what compaction and defragmentation would free
//	                 (etcd.Usage's estimates)
//	stored-versions  every built-in object stored at an API version the target's binary
//	                 registers (it cannot read the others: no-go), and the manifests
//	                 kubectl last applied (kubent's source) in served versions (warn)
//	rollback-point   a snapshot of this cluster taken now (--snapshot), or the newest one
//	                 named (--last-snapshot) younger than a day: read as etcd's database
//	                 and its kube-system UID and revision checked against the cluster's
//	                 (snapshot.go); none is warn
//	replay           optional: the upgrade replayed on the lab's real binaries with this
//	                 cluster's admission objects and flags (breakglass-lab replay,
//	                 handed over by the command); it settles an admission verdict the
//	                 audit could not decide offline
//
// A check that could not run (the cluster not reached, a role too weak) is
// a no-go with NotChecked set: a gate that says go for what it did not
// check is worse than none. With Strict a warning is a no-go too.
package upgradecheck
