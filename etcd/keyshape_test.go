package etcd_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/failure"
)

// A key under PREFIX/RESOURCE/ that is not PREFIX/RESOURCE/NAME (an empty
// name, a name with a slash) is what is in etcd: a backup of everything,
// or a delete naming it, is refused with a *KeyShapeError (exit 9), never
// reported as a malformed backup file, and nothing is written.
func TestOddKeysRefusedAsSuch(t *testing.T) {
	cl := newCluster(t)
	cl.put(t, "/registry/validatingwebhookconfigurations/"+vwcName, mustProtobuf(t, validatingWebhook(vwcName)))
	cl.put(t, "/registry/validatingwebhookconfigurations/", mustProtobuf(t, validatingWebhook("x")))
	cl.put(t, "/registry/mutatingwebhookconfigurations/ns/nested", mustProtobuf(t, mutatingWebhook("x")))
	rev := cl.revision(t)
	dir := t.TempDir()

	check := func(t *testing.T, err error, keys ...string) {
		t.Helper()
		var ks *etcd.KeyShapeError
		if !errors.As(err, &ks) {
			t.Fatalf("got %v, want *KeyShapeError", err)
		}
		var bf *etcd.BackupFileError
		if errors.As(err, &bf) || errors.Is(err, etcd.ErrMalformedBackup) {
			t.Errorf("reported as a backup file problem: %v", err)
		}
		if got := failure.Code(err); got != int(failure.Refused) {
			t.Errorf("exit code %d, want %d", got, failure.Refused)
		}
		for _, k := range keys {
			if !strings.Contains(err.Error(), k) {
				t.Errorf("%q does not name %s", err, k)
			}
		}
		if cl.revision(t) != rev {
			t.Error("etcd changed")
		}
	}

	_, err := cl.c.BackupObjects(ctx, nil, nil, filepath.Join(dir, "all.json"), "test", etcd.RealWriter(cl.c))
	check(t, err, "/registry/validatingwebhookconfigurations/ (an empty name)", "/registry/mutatingwebhookconfigurations/ns/nested (the name ns/nested holds a slash)")
	_, err = cl.c.PlanDelete(ctx, []string{"ns/nested"}, nil)
	check(t, err, "/registry/mutatingwebhookconfigurations/ns/nested")
	_, err = cl.c.PlanDelete(ctx, []string{""}, nil)
	check(t, err, "/registry/validatingwebhookconfigurations/ (an empty name)")
	var ks *etcd.KeyShapeError
	if errors.As(err, &ks) && !strings.Contains(strings.Join(ks.Hints(), "\n"), "etcdctl get --prefix --keys-only /registry/validatingwebhookconfigurations/") {
		t.Errorf("no hint says how to look at it: %q", ks.Hints())
	}

	// The others are still backed up and deleted by name.
	res, err := cl.c.BackupObjects(ctx, []string{vwcName}, nil, filepath.Join(dir, "one.json"), "test", etcd.RealWriter(cl.c))
	if err != nil || len(res.Backup.Keys) != 1 {
		t.Fatalf("backup by name: %+v %v", res, err)
	}
	if _, err := cl.c.Delete(ctx, []string{vwcName}, nil, etcd.RealWriter(cl.c), etcd.ExecuteOptions{BackupDir: dir}); err != nil {
		t.Fatalf("delete by name: %v", err)
	}
}
