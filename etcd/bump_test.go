package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/breakglass-dev/breakglass/etcd"
)

// A copy bumped before a restore: etcd restored from it (as Talos's bootstrap
// --recover-from does, with etcdutl and no bump of its own) starts at the
// copy's revision plus the bump, compacted up to it, every key of the copy
// byte for byte: a watch from a revision a client saw before the loss ends
// with "required revision has been compacted" instead of waiting in silence.
func TestBumpRevision(t *testing.T) {
	cl := newCluster(t)
	want := map[string]string{}
	var rev int64
	for i := range 5 {
		k, v := fmt.Sprintf("/registry/configmaps/ns/cm-%d", i), fmt.Sprintf("value %d", i)
		rev = cl.put(t, k, []byte(v))
		want[k] = v
	}
	dir := t.TempDir()
	snap := filepath.Join(dir, "etcd.snapshot")
	if _, err := cl.c.Snapshot(context.Background(), snap, etcd.RealWriter(cl.c)); err != nil {
		t.Fatal(err)
	}
	const bump = 1000
	bumped := filepath.Join(dir, "etcd.bumped.db")
	info, err := etcd.BumpRevision(snap, true, bumped, bump, etcd.RealWriter(nil))
	if err != nil {
		t.Fatal(err)
	}
	if info.From != rev || info.Revision != rev+bump {
		t.Fatalf("bumped %+v; the copy was at %d", info, rev)
	}
	if _, err := etcd.BumpRevision(snap, true, bumped, bump, etcd.RealWriter(nil)); !errors.As(err, new(*etcd.FileExistsError)) {
		t.Errorf("bump over an existing file: %v", err)
	}

	// Restored by etcdutl as Talos restores an uploaded database file, then started.
	data := filepath.Join(dir, "restored")
	peer := "http://127.0.0.1:" + freePort(t)
	if err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: bumped, Name: "restored", OutputDataDir: data, PeerURLs: []string{peer},
		InitialCluster: "restored=" + peer, SkipHashCheck: true,
	}); err != nil {
		t.Fatal(err)
	}
	c := startOn(t, data, peer)
	ctx := context.Background()
	resp, err := c.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != rev+bump {
		t.Errorf("restored etcd at revision %d, want %d", resp.Header.Revision, rev+bump)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("keys after the restore %v, want %v", got, want)
	}
	if _, err := c.Get(ctx, "/registry/configmaps/ns/cm-0", clientv3.WithRev(rev)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Errorf("a read at the copy's revision %d: %v, want compacted", rev, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w := <-c.Watch(wctx, "/registry/", clientv3.WithPrefix(), clientv3.WithRev(rev+bump/2))
	if w.CompactRevision != rev+bump {
		t.Errorf("a watch from %d (a revision seen before the loss): %+v, err %v; want compacted at %d", rev+bump/2, w, w.Err(), rev+bump)
	}
}

// An etcd where nothing was written (its key bucket empty) is bumped all the
// same.
func TestBumpRevisionNothingWritten(t *testing.T) {
	cl := newCluster(t)
	dir := t.TempDir()
	snap := filepath.Join(dir, "etcd.snapshot")
	if _, err := cl.c.Snapshot(context.Background(), snap, etcd.RealWriter(cl.c)); err != nil {
		t.Fatal(err)
	}
	info, err := etcd.BumpRevision(snap, true, filepath.Join(dir, "bumped.db"), 1000, etcd.RealWriter(nil))
	if err != nil || info.Revision != info.From+1000 {
		t.Fatalf("bumped %+v, %v", info, err)
	}
}

func TestBumpRevisionRefusesBadCopies(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.snapshot")
	if err := os.WriteFile(bad, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.db")
	for name, f := range map[string]func() error{
		"a snapshot whose hash does not match": func() error { _, err := etcd.BumpRevision(bad, true, out, 10, etcd.RealWriter(nil)); return err },
		"no database":                          func() error { _, err := etcd.BumpRevision(bad, false, out, 10, etcd.RealWriter(nil)); return err },
		"no bump":                              func() error { _, err := etcd.BumpRevision(bad, false, out, 0, etcd.RealWriter(nil)); return err },
	} {
		if err := f(); err == nil {
			t.Errorf("%s: bumped", name)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: a file was left: %v", name, err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".bump-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// startOn starts an etcd on a restored data directory, its client on loopback.
func startOn(t *testing.T, data, peer string) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "restored", data
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	curl, _ := url.Parse("http://127.0.0.1:" + freePort(t))
	purl, _ := url.Parse(peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	cfg.InitialCluster = "restored=" + peer
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("restored etcd not ready")
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{curl.String()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}
