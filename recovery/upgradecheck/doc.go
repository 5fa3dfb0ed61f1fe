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
// The checks are one table (check.go), a file each (check_ID.go): what
// each reads and judges, when it is a no-go or a warning, the fix of its
// no-go and what it needs read. `breakglass upgrade-check --help` and the
// README's table are written from it (ChecksHelp, ChecksMarkdown). What the
// gate reads of the cluster is in gather.go (the nodes, etcd, the
// admission objects and flags), membership.go (which control planes the
// cluster has: etcd's member list, matched to them both ways; Talos
// discovery and the Node objects) and snapshot.go (the rollback point).
//
// A check that could not run (the cluster not reached, a role too weak) is
// a no-go with NotChecked set: a gate that says go for what it did not
// check is worse than none. With Strict a warning is a no-go too.
package upgradecheck
