package lab

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// What a restore of etcd to a lower revision (Talos's bootstrap --recover-from, which
// bumps no revision) does to kube-apiserver v1.34.4 and to a client watching it
// (kubernetes/kubernetes#118501). One node; its kubelet does not poll by itself (the
// restore happens between two polls: the same kube-apiserver process runs across it).
//
//  1. Across the restore, kube-apiserver's watch cache keeps the world after the
//     snapshot: a LIST shows ConfigMaps etcd no longer holds (a GET of one says 404)
//     and misses one etcd holds again; the watch opened before is never told (no
//     event until a write after the old revision, no error); writes made after the
//     restore at revisions it had already passed never reach it, and the LIST stays
//     wrong as long as that kube-apiserver runs.
//  2. Restarted, kube-apiserver serves etcd's state; a client that comes back with the
//     resource version it last saw, ahead of etcd, is accepted and told nothing: its
//     watch waits until etcd passes that version, goes on from there, and never sees
//     the writes made in between.
func TestRestoreLowerRevisionWatchers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := startLabWith(t, Options{Nodes: 1, Version: NewVersion, Kubelet: talostest.KubeletOptions{PollInterval: time.Hour}})
	ip := l.Nodes()[0]
	n := l.Cluster.Node(ip)
	n.PollKubelet() // the pod with the lab's service CIDR; no poll after this
	if err := l.WaitReadyVersion(ctx, NewVersion, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	kube, err := l.Kube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const ns = "restore"
	path := "/api/v1/namespaces/" + ns + "/configmaps"
	create := func(namespace, name string) string {
		t.Helper()
		cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
		var out corev1.ConfigMap
		if err := kube.Do(ctx, "POST", "/api/v1/namespaces/"+namespace+"/configmaps", cm, &out); err != nil {
			t.Fatalf("create %s/%s: %v", namespace, name, err)
		}
		return out.ResourceVersion
	}
	list := func() (string, []string) {
		t.Helper()
		var l corev1.ConfigMapList
		if err := kube.Do(ctx, "GET", path, nil, &l); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, i := range l.Items {
			names = append(names, i.Name)
		}
		return l.ResourceVersion, names
	}
	exists := func(name string) bool {
		t.Helper()
		err := kube.Do(ctx, "GET", path+"/"+name, nil, nil)
		var api *APIError
		if errors.As(err, &api) && api.Code == 404 {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	}
	// writeUntil writes ConfigMaps in default until etcd's revision passes rev.
	writeUntil := func(rev int64) {
		t.Helper()
		for i := 0; ; i++ {
			if _, now := etcdData(t, l, ip, 0); now > rev {
				return
			}
			create("default", fmt.Sprintf("fill-%d-%d", rev, i))
		}
	}
	// until reads the watch until the event for name, and returns what came before.
	until := func(w *Watcher, name string) []WatchEvent {
		t.Helper()
		var seen []WatchEvent
		for {
			e, err := w.Next(time.Minute)
			if err != nil {
				t.Fatalf("watch ended before %s (%v); it saw %+v", name, err, seen)
			}
			if e.Name == name {
				return seen
			}
			seen = append(seen, e)
		}
	}

	if err := WriteConfigMaps(ctx, l, ns, 5); err != nil {
		t.Fatal(err)
	}
	snap, err := l.EtcdSnapshot(ctx, ip)
	if err != nil {
		t.Fatal(err)
	}
	_, snapRev := etcdData(t, l, ip, 0)
	listRV, _ := list()
	w, err := kube.Watch(ctx, path, listRV)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// after the snapshot: five ConfigMaps created, one deleted, and history enough
	// that the restarted kube-apiserver's own writes stay below it
	for i := 5; i < 10; i++ {
		create(ns, "cm-"+strconv.Itoa(i))
	}
	if err := kube.Do(ctx, "DELETE", path+"/cm-1", nil, nil); err != nil {
		t.Fatal(err)
	}
	writeUntil(snapRev + 200)
	lastSeen := until(w, "cm-1")
	_, beforeRev := etcdData(t, l, ip, 0)
	lastRV := strconv.FormatInt(beforeRev, 10)
	t.Logf("snapshot at revision %d; then cm-5..cm-9 created and cm-1 deleted (the watch saw them: %+v and the deletion), etcd at %d", snapRev, lastSeen, beforeRev)
	run := l.Current()[ip]

	if err := l.RestoreEtcdInPlace(ctx, ip, snap); err != nil {
		t.Fatal(err)
	}
	_, restoredRev := etcdData(t, l, ip, 0)
	if cur := l.Current()[ip]; cur.ID != run.ID || !cur.Exited.IsZero() {
		t.Fatalf("kube-apiserver did not run across the restore: %+v, was %+v", cur, run)
	}
	if restoredRev >= beforeRev {
		t.Fatalf("etcd at %d after the restore, %d before: not lower", restoredRev, beforeRev)
	}

	// 1. the running kube-apiserver: its LIST is the cache's, its GET etcd's
	rv, names := list()
	t.Logf("restored: etcd at revision %d (was %d); the same kube-apiserver lists %v at RV %s; GET cm-7: exists %v, cm-1: exists %v",
		restoredRev, beforeRev, names, rv, exists("cm-7"), exists("cm-1"))
	if !slices.Contains(names, "cm-7") || exists("cm-7") {
		t.Errorf("cm-7 (created after the snapshot): listed %v, exists %v; want listed from the stale cache, 404 from etcd", names, exists("cm-7"))
	}
	if slices.Contains(names, "cm-1") || !exists("cm-1") {
		t.Errorf("cm-1 (deleted after the snapshot, back in etcd): listed %v, exists %v; want missing from the list, there in etcd", names, exists("cm-1"))
	}
	lost := create(ns, "after-restore") // a revision the cache has passed already
	t.Logf("created after the restore at RV %s", lost)
	writeUntil(beforeRev + 5)
	marker := create(ns, "marker")
	seen := until(w, "marker")
	t.Logf("the watch opened before the restore, until the marker (RV %s): %+v", marker, seen)
	for _, e := range seen {
		if e.Name == "after-restore" || e.Name == "cm-1" || e.Type == "DELETED" || e.Type == "ERROR" {
			t.Errorf("the old watch was told something of the restore: %+v", e)
		}
	}
	if _, names := list(); !slices.Contains(names, "cm-7") || slices.Contains(names, "after-restore") {
		t.Errorf("the list after etcd passed the old revision: %v; want still stale (cm-7, no after-restore)", names)
	}

	// 2. kube-apiserver restarted (Talos's procedure resets every node: each
	// kube-apiserver starts again): the cache is etcd's; the client's resource version
	// from before is ahead of etcd
	if err := restoreAndRestart(t, l, ip, snap, n); err != nil {
		t.Fatal(err)
	}
	_, restoredRev = etcdData(t, l, ip, 0)
	rv, names = list()
	t.Logf("restored again and kube-apiserver restarted: etcd at %d; it lists %v at RV %s", restoredRev, names, rv)
	if slices.Contains(names, "cm-7") || !slices.Contains(names, "cm-1") {
		t.Errorf("list of the restarted kube-apiserver: %v; want etcd's (cm-1, no cm-7)", names)
	}
	ahead, err := kube.Watch(ctx, path, lastRV)
	if err != nil {
		t.Fatalf("watch from %s, ahead of etcd at %d: %v", lastRV, restoredRev, err)
	}
	defer ahead.Close()
	missed := create(ns, "missed")
	writeUntil(beforeRev + 5)
	marker = create(ns, "marker-2")
	seen = until(ahead, "marker-2")
	t.Logf("a watch from the last resource version seen, %s, opened with etcd at %d: accepted; %q created at RV %s; until the marker (RV %s) it saw %+v",
		lastRV, restoredRev, "missed", missed, marker, seen)
	for _, e := range seen {
		if e.Name == "missed" || e.Type == "ERROR" || e.Type == "DELETED" {
			t.Errorf("the watch from %s was told something: %+v", lastRV, e)
		}
	}
}

// restoreAndRestart restores the snapshot in place once more and restarts the node's
// kube-apiserver (its container dies; the kubelet starts it at once), as every node's
// reset does in Talos's procedure, and waits until it is ready.
func restoreAndRestart(t *testing.T, l *Lab, ip string, snap []byte, n *talostest.Node) error {
	t.Helper()
	if err := l.RestoreEtcdInPlace(t.Context(), ip, snap); err != nil {
		return err
	}
	before := l.Current()[ip]
	if err := n.CrashContainer(); err != nil {
		return err
	}
	return l.waitReadyRuns(t.Context(), 3*time.Minute, func(r ContainerRun) (bool, error) { return r.ID != before.ID, nil })
}
