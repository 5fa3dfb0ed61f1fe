package lab

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// newEtcdLoss is a 3-node lab in etcd-member-lost or etcd-quorum-lost;
// before, when given, runs on the lab ready before the loss.
func newEtcdLoss(t *testing.T, scenario string, before func(*Lab)) *guided {
	t.Helper()
	l := startLabWith(t, Options{Nodes: EtcdScenarioNodes})
	if before != nil {
		if err := l.WaitReady(t.Context(), 3*time.Minute); err != nil {
			t.Fatal(err)
		}
		before(l)
	}
	if _, err := RunScenario(context.Background(), l, scenario, NewTimeline(testWriter{t})); err != nil {
		t.Fatalf("scenario: %v", err)
	}
	return guidedOn(t, l)
}

// membersBack checks that every member is healthy, kube-apiserver ready on
// every node, and every key of before back byte for byte (kube-apiserver's
// own writes and lapsed leases aside).
func (g *guided) membersBack(before map[string]string) {
	g.t.Helper()
	ctx := withTimeout(g.t, context.Background(), 5*time.Minute)
	for _, ip := range g.l.Nodes() {
		if err := g.l.WaitEtcd(ctx, ip, 3*time.Minute, "healthy", EtcdHealthy); err != nil {
			g.t.Errorf("node %s: etcd not healthy after the recovery: %v", ip, err)
		}
	}
	if err := g.l.WaitReady(ctx, 3*time.Minute); err != nil {
		g.t.Errorf("kube-apiserver not ready after the recovery: %v", err)
	}
	gone, changed := DiffKeys(before, g.keysNow()).Lost()
	if len(gone) > 0 || len(changed) > 0 {
		g.t.Errorf("keys lost %q, changed %q", gone, changed)
	}
}

// As an on-call engineer meets them: diagnose names the lost member (exit
// 31) or the lost quorum (exit 32), and recover --yes with no expert flag
// brings three healthy members and kube-apiserver back at the kubelet's
// and Talos's real pace, every key written before the loss byte for byte.
// The time it took is logged (the issue asks under 2 minutes for a member,
// under 3 for a quorum): measured, not asserted. After the quorum's restore,
// a client that watched before the loss is told: its watch ends with the
// kube-apiserver the reset restarted, and the watch it opens again from the
// last resource version it saw gets 410 Gone (etcd's revision bumped past
// it and compacted), so that it lists again instead of waiting in silence
// with objects etcd no longer holds.
func TestRecoverEtcdLossAsTyped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		scenario string
		code     int
	}{{ScenarioEtcdMemberLost, 31}, {ScenarioEtcdQuorumLost, 32}} {
		t.Run(tc.scenario, func(t *testing.T) {
			t.Parallel()
			var watched *watchedBefore
			g := newEtcdLoss(t, tc.scenario, func(l *Lab) {
				if tc.scenario == ScenarioEtcdQuorumLost {
					watched = watchBefore(t, l)
				}
			})
			r := g.run("", "diagnose")
			if r.code != tc.code || !strings.Contains(r.stdout, "verdict: "+tc.scenario) {
				t.Fatalf("diagnose: exit %d, want %d naming %s\n%s%s", r.code, tc.code, tc.scenario, r.stdout, r.stderr)
			}
			before := g.keysNow()
			t0 := time.Now()
			r = g.run("", append([]string{"recover", "--yes"}, g.etcdFlags()...)...)
			took := time.Since(t0)
			if r.code != 0 {
				t.Fatalf("recover --yes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			t.Logf("recover --yes on %s: %s\n%s", tc.scenario, round(took), r.stdout)
			g.membersBack(before)
			if watched != nil {
				watched.toldOfTheRestore(t)
			}
		})
	}
}

// Killed with SIGKILL at a random instant of recover, then of resume, and
// resumed to the end: it converges, for a lost member and a lost quorum.
func TestRecoverEtcdLossKilledAndResumed(t *testing.T) {
	t.Parallel()
	for _, scenario := range []string{ScenarioEtcdMemberLost, ScenarioEtcdQuorumLost} {
		t.Run(scenario, func(t *testing.T) {
			t.Parallel()
			g := newEtcdLoss(t, scenario, nil)
			before := g.keysNow()
			// Its changes span about a minute (a reset and reboot each):
			// a kill lands anywhere in it.
			g.killedAndResumed(2*time.Second, 50*time.Second, 10*time.Minute)
			g.membersBack(before)
		})
	}
}

// watchedBefore is a client's watch opened before the loss, and the last
// resource version it saw.
type watchedBefore struct {
	kube   *KubeClient
	path   string
	w      *Watcher
	lastRV string
}

// watchBefore opens a watch on a namespace's ConfigMaps as an informer
// does (a LIST, then a watch from its resource version) and sees one
// create through it.
func watchBefore(t *testing.T, l *Lab) *watchedBefore {
	t.Helper()
	ctx := t.Context()
	if err := WriteConfigMaps(ctx, l, "watched", 1); err != nil {
		t.Fatal(err)
	}
	kube, err := l.Kube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wb := &watchedBefore{kube: kube, path: "/api/v1/namespaces/watched/configmaps"}
	var list corev1.ConfigMapList
	if err := kube.Do(ctx, "GET", wb.path, nil, &list); err != nil {
		t.Fatal(err)
	}
	if wb.w, err = kube.Watch(ctx, wb.path, list.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wb.w.Close)
	cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "seen", Namespace: "watched"}}
	if err := kube.Do(ctx, "POST", wb.path, cm, nil); err != nil {
		t.Fatal(err)
	}
	for {
		e, err := wb.w.Next(time.Minute)
		if err != nil {
			t.Fatalf("the watch never saw the create: %v", err)
		}
		if e.Name == "seen" {
			wb.lastRV = e.ResourceVersion
			return wb
		}
	}
}

// toldOfTheRestore checks what the client meets after the restore.
func (wb *watchedBefore) toldOfTheRestore(t *testing.T) {
	t.Helper()
	for {
		e, err := wb.w.Next(time.Minute)
		if errors.Is(err, ErrNoEvent) {
			t.Fatal("the watch opened before the loss still waits, told nothing")
		}
		if err != nil {
			break // ended: its kube-apiserver went with the reset
		}
		if e.Type != "ERROR" {
			t.Errorf("the watch opened before the loss got %+v after the restore", e)
		}
	}
	w, err := wb.kube.Watch(t.Context(), wb.path, wb.lastRV)
	var api *APIError
	switch {
	case errors.As(err, &api) && api.Code == http.StatusGone:
		t.Logf("a watch from resource version %s (seen before the loss): refused, 410", wb.lastRV)
		return
	case err != nil:
		t.Fatalf("a watch from resource version %s: %v", wb.lastRV, err)
	}
	defer w.Close()
	e, err := w.Next(time.Minute)
	if err != nil || e.Type != "ERROR" || e.Code != http.StatusGone {
		t.Fatalf("a watch from resource version %s (seen before the loss): %+v, %v; want 410 Gone, so that its client lists again", wb.lastRV, e, err)
	}
	t.Logf("a watch from resource version %s (seen before the loss): %s", wb.lastRV, e.Message)
}

// lab rehearse --scenario etcd-quorum-lost: the scenario, recover --yes
// through recovery.Recover, and every check holds (three healthy members,
// every kube-apiserver started after the restore, every key back).
func TestRehearseQuorumLost(t *testing.T) {
	t.Parallel()
	bin := needBinaries(t, OldVersion, NewVersion)
	var out strings.Builder
	rep, err := Rehearse(context.Background(), RehearseOptions{Scenario: ScenarioEtcdQuorumLost, KubeBinDir: bin, Out: &out, ToolVersion: "test",
		Lab: Options{FirstIP: labFirstIP()}})
	t.Logf("%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Recovery <= 0 || len(rep.Checks) < 5 {
		t.Errorf("recovery %s, checks %+v", rep.Recovery, rep.Checks)
	}
	t.Logf("guided recovery of a lost quorum on the lab: %s", rep.Recovery.Round(time.Millisecond))
}
