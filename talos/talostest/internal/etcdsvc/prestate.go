package etcdsvc

// The service's pre state (machined's Etcd.PreFunc for a control plane): the member's
// certificates on its disk, then, when its data directory is empty, the snapshot
// restored (a recovery), a new cluster of its own (a bootstrap), or a join as a
// learner through the other members, promoted once caught up.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/siderolabs/talos/pkg/machinery/constants"

	"github.com/breakglass-dev/breakglass/talos/talostest/internal/etcdclient"
)

// writeSecrets puts the node's etcd certificates where the member reads them
// (/system/secrets/etcd on a node), from its EtcdSecrets.
func (s *Service) writeSecrets(ctx context.Context) error {
	certs, root, err := etcdclient.Secrets(ctx, s.host.State)
	if err != nil {
		return err
	}

	dir := s.host.Path("/system/secrets/etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}

	s.files = etcdFiles{
		ca: filepath.Join(dir, "ca.crt"), cert: filepath.Join(dir, "server.crt"), key: filepath.Join(dir, "server.key"),
		peerCert: filepath.Join(dir, "peer.crt"), peerKey: filepath.Join(dir, "peer.key"),
	}

	for path, b := range map[string][]byte{
		s.files.ca: root.Crt, s.files.cert: certs.Etcd.Crt, s.files.key: certs.Etcd.Key,
		s.files.peerCert: certs.EtcdPeer.Crt, s.files.peerKey: certs.EtcdPeer.Key,
	} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
	}

	return nil
}

// memberConfig is the member's command line, as PreFunc computed it.
type memberConfig struct {
	initialCluster, state string // "" when the data directory was not empty
}

// preFunc is machined's Etcd.PreFunc for a control plane (argsForControlPlane).
func (s *Service) preFunc(ctx context.Context, mode Mode) (memberConfig, uint64, error) {
	if err := s.writeSecrets(ctx); err != nil {
		return memberConfig{}, 0, err
	}

	if mode.Recover {
		if err := s.recoverFromSnapshot(mode.SkipHashCheck); err != nil {
			return memberConfig{}, 0, err
		}
	}

	empty, err := dirEmpty(s.dataDir())
	if err != nil {
		return memberConfig{}, 0, err
	}

	if !empty {
		return memberConfig{}, 0, nil
	}

	switch {
	case mode.Formation != "":
		return memberConfig{initialCluster: mode.Formation, state: embed.ClusterStateFlagNew}, 0, nil
	case mode.Bootstrap:
		return memberConfig{initialCluster: s.host.Name + "=" + s.peerURL, state: embed.ClusterStateFlagNew}, 0, nil
	}

	initial, learner, err := s.buildInitialCluster(ctx)
	if err != nil {
		return memberConfig{}, 0, fmt.Errorf("failed to build initial etcd cluster: %w", err)
	}

	return memberConfig{initialCluster: initial, state: embed.ClusterStateFlagExisting}, learner, nil
}

// dirEmpty is machined's IsDirEmpty (an error when the directory does not exist).
func dirEmpty(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close() //nolint:errcheck

	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}

	return false, err
}

// recoverFromSnapshot is machined's: the uploaded snapshot restored into the empty data
// directory as a cluster of this member alone (no revision bump), then removed.
func (s *Service) recoverFromSnapshot(skipHashCheck bool) error {
	path := s.host.Path(constants.EtcdRecoverySnapshotPath)
	manager := snapshot.NewV3(s.logger())

	st, err := manager.Status(path)
	if err != nil {
		return fmt.Errorf("error verifying snapshot: %w", err)
	}

	s.host.Logf("recovering etcd from snapshot: hash %08x, revision %d, total keys %d, total size %d", st.Hash, st.Revision, st.TotalKey, st.TotalSize)

	if err := manager.Restore(snapshot.RestoreConfig{
		SnapshotPath:   path,
		Name:           s.host.Name,
		OutputDataDir:  s.dataDir(),
		PeerURLs:       []string{s.peerURL},
		InitialCluster: s.host.Name + "=" + s.peerURL,
		SkipHashCheck:  skipHashCheck,
	}); err != nil {
		return fmt.Errorf("error recovering from the snapshot: %w", err)
	}

	if err := os.Remove(path); err != nil {
		return fmt.Errorf("error deleting snapshot: %w", err)
	}

	return nil
}

// buildInitialCluster is machined's: until a quorum answers (30 minutes at most), add
// this node as a learner through any control plane's member (removing a member of the
// same name first: its old self), asking for a bootstrap every 30 s meanwhile.
func (s *Service) buildInitialCluster(ctx context.Context) (string, uint64, error) {
	deadline := time.Now().Add(s.attemptsFor(etcdJoinTimeout))

	var lastNag time.Time

	for {
		if time.Since(lastNag) > s.host.Scaled(etcdJoinNag) {
			lastNag = time.Now()

			s.host.Logf("etcd is waiting to join the cluster, if this node is the first node in the cluster, please run `talosctl bootstrap` against one of the following IPs:")
			s.host.Logf("[%s]", s.host.IP)
		}

		attempt, cancel := context.WithTimeout(ctx, s.attemptTimeout())
		initial, id, err := s.addMember(attempt)

		cancel()

		if err == nil {
			return initial, id, nil
		}

		if ctx.Err() != nil {
			return "", 0, ctx.Err()
		}

		if time.Now().After(deadline) {
			return "", 0, fmt.Errorf("failed to build cluster arguments: time limit exceeded: %w", err)
		}

		s.host.Logf("retrying error: %v", err)

		select {
		case <-ctx.Done():
			return "", 0, ctx.Err()
		case <-time.After(s.host.Scaled(etcdJoinRetry) + rand.N(s.host.Scaled(time.Second))):
		}
	}
}

// addMember is machined's addMember.
func (s *Service) addMember(ctx context.Context) (string, uint64, error) {
	tlsConf, err := etcdclient.AdminTLS(ctx, s.host.State)
	if err != nil {
		return "", 0, err
	}

	cli, err := etcdclient.Any(ctx, s.rt.Peers(), tlsConf)
	if err != nil {
		return "", 0, err
	}
	defer cli.Close() //nolint:errcheck

	ctx = clientv3.WithRequireLeader(ctx)

	list, err := cli.MemberList(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("error getting etcd member list: %w", err)
	}

	for _, m := range list.Members {
		if m.Name == s.host.Name {
			if _, err := cli.MemberRemove(ctx, m.ID); err != nil {
				return "", 0, fmt.Errorf("error removing self from the member list: %w", err)
			}
		}
	}

	add, err := cli.MemberAddAsLearner(ctx, []string{s.peerURL})
	if err != nil {
		return "", 0, fmt.Errorf("error adding member: %w", err)
	}

	if list, err = cli.MemberList(ctx); err != nil {
		return "", 0, fmt.Errorf("error getting second etcd member list: %w", err)
	}

	var conf []string

	for _, m := range list.Members {
		for _, u := range m.PeerURLs {
			name := m.Name
			if m.ID == add.Member.ID {
				name = s.host.Name
			}

			conf = append(conf, name+"="+u)
		}
	}

	return strings.Join(conf, ","), add.Member.ID, nil
}

// promote is machined's promoteMember: attempts every 15 s (10 minutes at most), each
// of 30 s at most going through the control planes' members in turn (one that does not
// answer takes the rest of the attempt), until the learner caught up and is promoted.
func (s *Service) promote(ctx context.Context, id uint64) {
	deadline := time.Now().Add(s.attemptsFor(etcdPromoteFor))
	idx := 0

	for {
		attempt, cancel := context.WithTimeout(ctx, s.attemptTimeout())

		var err error

		peers := s.rt.Peers()
		for range peers {
			peer := peers[idx%len(peers)]
			idx++

			if err = s.promoteVia(attempt, peer, id); err == nil {
				break
			}
		}

		cancel()

		if err == nil {
			s.host.Logf("successfully promoted etcd member")

			return
		}

		if ctx.Err() != nil {
			return
		}

		s.host.Logf("retrying error: %v", err)

		if time.Now().After(deadline) {
			s.host.Logf("failed promoting member: %v", err)

			return
		}

		select {
		case <-ctx.Done():
			return
		case <-time.After(s.host.Scaled(etcdPromoteRetry) + rand.N(s.host.Scaled(time.Second))):
		}
	}
}

func (s *Service) promoteVia(ctx context.Context, endpoint string, id uint64) error {
	cli, err := s.client(ctx, endpoint)
	if err != nil {
		return err
	}
	defer cli.Close() //nolint:errcheck

	_, err = cli.MemberPromote(ctx, id)

	return err
}

// attemptTimeout is the 30 s machined gives one attempt to join or promote a member,
// scaled, but never under 5 s: the attempt's work is etcd's, which does not scale.
func (s *Service) attemptTimeout() time.Duration {
	return max(s.host.Scaled(machinedAttempt), 5*time.Second)
}

const machinedAttempt = 30 * time.Second

// attemptsFor is how long machined keeps trying (10 minutes to promote, 30 to join),
// scaled, but never fewer attempts than machined makes: scaled alone, 10 minutes
// would be 6 s at 0.01, gone in one attempt that a member not answering holds for 5 s
// (seen in CI on a loaded machine: a learner never promoted).
func (s *Service) attemptsFor(d time.Duration) time.Duration {
	return max(s.host.Scaled(d), time.Duration(d/machinedAttempt)*s.attemptTimeout())
}
