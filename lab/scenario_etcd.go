package lab

// The etcd-member-lost and etcd-quorum-lost scenarios (issue 30): on three nodes, one
// member's disk is lost (quorum holds), or two of the three (quorum lost). What a node
// does then is its etcd service's (talostest.EtcdOptions): the member restarts every
// 5 s and fails each time, its node's kube-apiserver pod is torn down, the survivors
// keep theirs. The way back is Talos's disaster-recovery guide, through the Talos API:
// remove the member and reset its node's EPHEMERAL (it joins again), or take a
// snapshot of the survivor, reset every node's EPHEMERAL and bootstrap one from the
// snapshot (the others join).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

const (
	// ScenarioEtcdMemberLost is one member's data destroyed, quorum holding.
	ScenarioEtcdMemberLost = "etcd-member-lost"
	// ScenarioEtcdQuorumLost is two members' data destroyed of three.
	ScenarioEtcdQuorumLost = "etcd-quorum-lost"

	// EtcdScenarioNodes is how many nodes both scenarios need.
	EtcdScenarioNodes = 3
	// EtcdDataNamespace holds the objects written before the loss, to find again after.
	EtcdDataNamespace = "before-the-loss"
)

// isEtcdLossScenario tells the etcd-member-lost and etcd-quorum-lost scenarios.
func isEtcdLossScenario(name string) bool {
	return name == ScenarioEtcdMemberLost || name == ScenarioEtcdQuorumLost
}

// lostNodes are the nodes whose members a scenario destroys: the last one, or the last
// two (the first node, the cluster endpoint, survives).
func lostNodes(l *Lab, scenario string) []string {
	ips := l.Nodes()
	if scenario == ScenarioEtcdQuorumLost {
		return ips[len(ips)-2:]
	}

	return ips[len(ips)-1:]
}

// runEtcdLoss plays etcd-member-lost or etcd-quorum-lost.
func runEtcdLoss(ctx context.Context, l *Lab, name string, tl *Timeline) error {
	if n := len(l.Nodes()); n != EtcdScenarioNodes {
		return fmt.Errorf("lab: scenario %s needs %d nodes, the lab has %d (--nodes %d)", name, EtcdScenarioNodes, n, EtcdScenarioNodes)
	}

	if err := startOnOld(ctx, l, tl); err != nil {
		return err
	}

	if err := tl.Step("write ConfigMaps in namespace "+EtcdDataNamespace+" through kube-apiserver", func() error {
		return WriteConfigMaps(ctx, l, EtcdDataNamespace, 5)
	}); err != nil {
		return err
	}

	lost := lostNodes(l, name)

	for _, ip := range lost {
		if err := tl.Step("destroy the etcd member's data on "+ip, func() error { return l.DestroyEtcdData(ip) }); err != nil {
			return err
		}
	}

	for _, ip := range lost {
		if err := tl.Step("etcd on "+ip+" restarts and fails (Waiting), its kube-apiserver pod torn down", func() error {
			if err := l.WaitEtcd(ctx, ip, time.Minute, "restarting", func(st talostest.EtcdServiceState) bool {
				return st.State == talostest.ServiceWaiting && strings.Contains(st.LastEvent, "going to restart")
			}); err != nil {
				return err
			}

			return l.WaitPodGone(ctx, ip, time.Minute)
		}); err != nil {
			return err
		}
	}

	survivor := l.Nodes()[0]

	if name == ScenarioEtcdQuorumLost {
		return tl.Step("etcd on "+survivor+" runs without a quorum: its health check fails", func() error {
			return l.WaitEtcd(ctx, survivor, 2*time.Minute, "unhealthy", func(st talostest.EtcdServiceState) bool {
				return st.State == talostest.ServiceRunning && st.HealthKnown && !st.Healthy
			})
		})
	}

	return tl.Step("the other members keep the quorum: kube-apiserver ready on "+survivor, func() error {
		return l.waitReadyOn(ctx, survivor, time.Minute)
	})
}

// WriteConfigMaps creates the namespace and n ConfigMaps in it through kube-apiserver
// (the cluster endpoint), data that a recovery must bring back. A kube-apiserver that
// restarts meanwhile (the kubelet replaces the lab's first pod at its first poll) is
// waited for; a create it made before going away is taken as made.
func WriteConfigMaps(ctx context.Context, l *Lab, namespace string, n int) error {
	kube, err := l.Kube(ctx)
	if err != nil {
		return err
	}

	create := func(what, path string, obj any) error {
		for deadline := time.Now().Add(time.Minute); ; {
			err := kube.Do(ctx, "POST", path, obj, nil)

			var api *APIError

			switch {
			case err == nil, errors.As(err, &api) && api.Code == http.StatusConflict:
				return nil
			case !restarting(err) || time.Now().After(deadline):
				return fmt.Errorf("create %s: %w", what, err)
			}

			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
		}
	}

	ns := corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := create("namespace "+namespace, "/api/v1/namespaces", ns); err != nil {
		return err
	}

	for i := range n {
		cm := corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: namespace},
			Data:       map[string]string{"written": "before the loss", "index": fmt.Sprint(i)},
		}
		if err := create("configmap "+namespace+"/"+cm.Name, "/api/v1/namespaces/"+namespace+"/configmaps", cm); err != nil {
			return err
		}
	}

	return nil
}

// WaitPodGone waits until the node's kube-apiserver container has exited and none
// runs (the kubelet stopped the pod Talos tore down).
func (l *Lab) WaitPodGone(ctx context.Context, ip string, timeout time.Duration) error {
	n := l.Cluster.Node(ip)
	if n == nil {
		return fmt.Errorf("lab: no node %s", ip)
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	if _, err := n.WaitPod(ctx, func(p talostest.PodState) bool { return !p.Present && !p.Terminating }); err != nil {
		return fmt.Errorf("lab: node %s: kube-apiserver pod still there after %s: %w", ip, timeout, err)
	}

	return nil
}

// waitReadyOn waits until the node's latest kube-apiserver is ready.
func (l *Lab) waitReadyOn(ctx context.Context, ip string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)

	for {
		changed := l.runner.changed()
		if r, ok := l.Current()[ip]; ok && !r.Ready.IsZero() && r.Exited.IsZero() {
			return nil
		}

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(deadline)):
			return fmt.Errorf("%w after %s on %s", ErrNotReady, timeout, ip)
		case <-changed:
		}
	}
}

// etcdLossNext is what the lab prints to try after an etcd scenario: Talos's
// disaster-recovery guide, command by command, each node through its own endpoint (a
// reset takes the node's API away, and with it a talosconfig's other endpoints' way
// to it).
func etcdLossNext(l *Lab, scenario, tc, sd string) []string {
	survivor := l.Nodes()[0]
	lost := lostNodes(l, scenario)
	on := func(ip string) string { return fmt.Sprintf("talosctl %s -e %s -n %s", tc, l.talosEndpoint(ip), ip) }

	cmds := []string{
		fmt.Sprintf("breakglass %s %s diagnose", tc, sd),
		"or by hand, Talos's disaster-recovery guide:",
		on(lost[0]) + " service etcd   # Waiting: restarting, each start fails",
		on(lost[0]) + " logs etcd",
	}

	if scenario == ScenarioEtcdMemberLost {
		id := "MEMBER-ID"
		if m, err := l.memberIDOf(lost[0]); err == nil {
			id = m
		}

		return append(cmds,
			on(survivor)+" etcd members   # still lists "+l.Cluster.Node(lost[0]).Name+" ("+id+")",
			on(survivor)+" etcd remove-member "+id,
			on(lost[0])+" reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL",
			on(lost[0])+" service etcd   # Preparing, then Running: it joins as a learner, promoted once caught up",
			on(survivor)+" etcd members",
		)
	}

	snapshot := filepath.Join(l.Dir, "db.snapshot")
	cmds = append(cmds,
		on(survivor)+" etcd status   # no leader",
		on(survivor)+" etcd snapshot "+snapshot+"   # or: cp /var/lib/etcd/member/snap/db "+l.Dir+", then bootstrap with --recover-skip-hash-check",
	)

	for _, ip := range l.Nodes() {
		cmds = append(cmds, on(ip)+" reset --graceful=false --reboot --system-labels-to-wipe=EPHEMERAL")
	}

	for _, ip := range l.Nodes() {
		cmds = append(cmds, on(ip)+" service etcd   # Preparing: waiting to join or to be bootstrapped")
	}

	return append(cmds,
		on(survivor)+" bootstrap --recover-from="+snapshot,
		on(survivor)+" etcd members   # the others join, one by one",
		fmt.Sprintf("breakglass %s %s apiserver wait", tc, sd),
	)
}

// memberIDOf is the ID of the node's member, as a healthy member lists it.
func (l *Lab) memberIDOf(ip string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	tc, err := l.TalosClient(ctx)
	if err != nil {
		return "", err
	}
	defer tc.Close()

	members, err := tc.EtcdMembers(ctx, l.Nodes()[0])
	if err != nil {
		return "", err
	}

	name := l.Cluster.Node(ip).Name
	for _, m := range members {
		if m.Hostname == name {
			return talos.MemberIDString(m.ID), nil
		}
	}

	return "", fmt.Errorf("no member %s", name)
}

// talosEndpoint is the node's Talos API as talosctl's -e takes it: the address alone
// on Talos's port (50000), else with the lab's port.
func (l *Lab) talosEndpoint(ip string) string {
	addr := l.Cluster.Node(ip).Addr
	if strings.HasSuffix(addr, ":50000") {
		return ip
	}

	return addr
}
