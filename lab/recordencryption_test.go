package lab

import (
	"os"
	"testing"
	"time"
)

// TestRecordEncryptionShape records one shape on one real kube-apiserver:
// the recorder itself works (its Before values are checked inside).
func TestRecordEncryptionShape(t *testing.T) {
	dir := needKubeBinaries(t, NewVersion)
	opts := EncryptionRecordOptions{BinDir: dir, Version: NewVersion, Shapes: EncryptionShapes[:1], Window: 90 * time.Second, Dir: t.TempDir()}
	if testing.Verbose() {
		opts.Log = os.Stderr
	}
	rec, err := RecordEncryption(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	s := rec.Shapes[0]
	t.Logf("%+v", s)
	if len(s.Lines) == 0 {
		t.Errorf("no log line about the Secrets that do not decrypt")
	}
}
