package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/internal/encryption"
)

// The shapes of issue 37: Secrets written under one encryption
// configuration, kube-apiserver restarted under another that no longer
// reads them.
var EncryptionShapes = []encryption.Shape{
	{Name: "key-renamed", What: "the secretbox key renamed (Talos 1.14.0-beta.0's generator named key1 what 1.13 rendered key2): data under key1, the configuration names key2",
		Before: specs(sbox("key1", "secretbox"), identity), After: specs(sbox("key2", "secretbox"), identity), Cause: encryption.CauseKeyMissing},
	{Name: "secret-regenerated", What: "the same name with another secret (a regenerated secrets bundle): data under secretbox key2, the configuration's key2 is another key",
		Before: specs(sbox("key2", "secretbox"), identity), After: specs(sbox("key2", "secretbox regenerated"), identity), Cause: encryption.CauseWrongSecret},
	{Name: "aescbc-secret-regenerated", What: "the same with AES-CBC: data under aescbc key1, the configuration's key1 is another key",
		Before: specs(cbc("key1", "aescbc"), identity), After: specs(cbc("key1", "aescbc regenerated"), identity), Cause: encryption.CauseWrongSecret},
	{Name: "aescbc-key-renamed", What: "an AES-CBC key renamed: data under aescbc key1, the configuration names the same secret key2",
		Before: specs(cbc("key1", "aescbc"), identity), After: specs(cbc("key2", "aescbc"), identity), Cause: encryption.CauseKeyMissing},
	{Name: "aesgcm-secret-regenerated", What: "an AES-GCM key regenerated (a KubeEtcdEncryptionConfig may name any provider): data under aesgcm key1, the configuration's key1 is another key",
		Before: specs(gcm("key1", "aesgcm"), identity), After: specs(gcm("key1", "aesgcm regenerated"), identity), Cause: encryption.CauseWrongSecret},
	{Name: "provider-dropped", What: "a provider dropped: data under aescbc key1, the configuration has secretbox and identity only",
		Before: specs(cbc("key1", "aescbc"), identity), After: specs(sbox("key2", "secretbox"), identity), Cause: encryption.CauseNoProvider},
	{Name: "aescbc-bundle-1.14", What: "an AES-CBC cluster (created before Talos 1.3) whose config is regenerated with the 1.14 contract: its generator (v1.14.0-rc.1, main) puts the AES-CBC secret under secretbox key1 and no identity",
		Before: specs(cbc("key1", "aescbc"), identity), After: specs(sbox("key1", "aescbc")), Cause: encryption.CauseNoProvider},
	{Name: "identity-missing", What: "identity missing: unencrypted Secrets, the configuration has secretbox only",
		Before: specs(identity), After: specs(sbox("key2", "secretbox")), Cause: encryption.CauseNoProvider},
}

var identity = encryption.ProviderSpec{Provider: encryption.Identity}

func specs(ps ...encryption.ProviderSpec) []encryption.ProviderSpec { return ps }

func sbox(name, label string) encryption.ProviderSpec {
	return encryption.ProviderSpec{Provider: encryption.Secretbox, Keys: []encryption.KeySpec{{Name: name, Label: label}}}
}

func gcm(name, label string) encryption.ProviderSpec {
	return encryption.ProviderSpec{Provider: encryption.AESGCM, Keys: []encryption.KeySpec{{Name: name, Label: label}}}
}

func cbc(name, label string) encryption.ProviderSpec {
	return encryption.ProviderSpec{Provider: encryption.AESCBC, Keys: []encryption.KeySpec{{Name: name, Label: label}}}
}

// RecordEncryptionCommand re-records internal/encryption/testdata/recorded.
const RecordEncryptionCommand = "go run ./lab/recordencryption"

// EncryptionRecordOptions describe one version's recording.
type EncryptionRecordOptions struct {
	BinDir  string // holds VERSION/kube-apiserver ("": the lab's binaries, Binaries)
	Version string
	Shapes  []encryption.Shape // nil: EncryptionShapes
	// Window bounds each restart under the new configuration (default
	// 60 s); once ready it is watched Settle longer (default 8 s).
	Window, Settle time.Duration
	Dir            string    // working files
	Log            io.Writer // both processes' output; nil discards it
}

// RecordEncryption records, for each shape, on a fresh embedded etcd (TLS,
// loopback): the version's kube-apiserver writes three Secrets under the
// shape's Before configuration, stops (SIGTERM), and starts again under
// After; what it then logs about the Secrets, whether /readyz passes, and
// what a GET and a LIST of Secrets answer are recorded.
func RecordEncryption(ctx context.Context, opts EncryptionRecordOptions) (*encryption.Recording, error) {
	if opts.Shapes == nil {
		opts.Shapes = EncryptionShapes
	}
	if opts.Window <= 0 {
		opts.Window = time.Minute
	}
	if opts.Settle <= 0 {
		opts.Settle = 8 * time.Second
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	var err error
	if opts.BinDir, err = Binaries(ctx, opts.BinDir, opts.Log, opts.Version); err != nil {
		return nil, err
	}
	rec := &encryption.Recording{Version: opts.Version, Recorded: time.Now().UTC().Format("2006-01-02"),
		Command: RecordEncryptionCommand, Keys: encryption.RecordingKeys}
	for _, s := range opts.Shapes {
		got, err := recordShape(ctx, opts, s)
		if err != nil {
			return nil, fmt.Errorf("record %s, %s: %w", opts.Version, s.Name, err)
		}
		rec.Shapes = append(rec.Shapes, got)
	}
	return rec, nil
}

func recordShape(ctx context.Context, opts EncryptionRecordOptions, s encryption.Shape) (encryption.Shape, error) {
	rig, err := newRecordRig(opts.Dir, "kas-")
	if err != nil {
		return s, err
	}
	defer rig.close()
	dir, etcd, api := rig.dir, rig.etcd, rig.api
	encFile := filepath.Join(dir, "encryptionconfig.yaml")
	args := rig.args(opts.Version, "--encryption-provider-config="+encFile)
	bin := filepath.Join(opts.BinDir, opts.Version, "kube-apiserver")

	// Before: write the Secrets.
	if err := writeEncryptionConfig(encFile, s.Before); err != nil {
		return s, err
	}
	before, err := startAPIServer(ctx, bin, args, opts.Log)
	if err != nil {
		return s, err
	}
	if _, err := api.waitReady(ctx, before, 3*time.Minute); err != nil {
		before.kill()
		return s, fmt.Errorf("before: %w", err)
	}
	for i := range 3 {
		secret := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": fmt.Sprintf("s%d", i)},
			"stringData": map[string]string{"password": "recorded"}}
		if err := api.post(ctx, "/api/v1/namespaces/default/secrets", secret); err != nil {
			before.kill()
			return s, fmt.Errorf("before: write a Secret: %w", err)
		}
	}
	before.stop(30 * time.Second)
	kv, err := etcd.Client()
	if err != nil {
		return s, err
	}
	defer kv.Close()
	s.StoredKey = "/registry/secrets/default/s0"
	got, err := kv.Get(ctx, s.StoredKey)
	if err != nil || len(got.Kvs) != 1 {
		return s, fmt.Errorf("read %s from etcd: %v (%d keys)", s.StoredKey, err, len(got.Kvs))
	}
	s.StoredValue = got.Kvs[0].Value
	if t := encryption.Specs(s.Before).Read("secrets", s.StoredKey, s.StoredValue); t.Outcome != encryption.Decrypts || t.Provider != s.Before[0].Provider {
		return s, fmt.Errorf("%s is %s, not written by the first provider of %s: %s", s.StoredKey, t.Stored, encryption.Specs(s.Before), t.Why)
	}

	// After: restart under the other configuration and watch.
	if err := writeEncryptionConfig(encFile, s.After); err != nil {
		return s, err
	}
	logs := &lockedBuffer{}
	after, err := startAPIServer(ctx, bin, args, io.MultiWriter(opts.Log, logs))
	if err != nil {
		return s, err
	}
	defer after.kill()
	var readyAt time.Duration
	deadline := time.Now().Add(opts.Window)
watch:
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-after.done:
			s.Exited = fmt.Sprintf("after %s: %v", time.Since(after.started).Round(100*time.Millisecond), after.err)
			break watch
		case <-time.After(250 * time.Millisecond):
		}
		if readyAt == 0 {
			if code, _, err := api.do(ctx, http.MethodGet, "/readyz", nil); err == nil && code == http.StatusOK {
				readyAt = time.Since(after.started)
				deadline = time.Now().Add(opts.Settle)
			}
		}
	}
	if readyAt > 0 {
		s.Ready, s.ReadyAfter = true, readyAt.Round(100*time.Millisecond).String()
	}
	if s.Exited == "" {
		s.Failing = failingChecks(ctx, api)
		s.Get = apiAnswer(api.do(ctx, http.MethodGet, "/api/v1/namespaces/default/secrets/s0", nil))
		s.List = apiAnswer(api.do(ctx, http.MethodGet, "/api/v1/secrets", nil))
		after.stop(30 * time.Second)
	}
	s.Lines = encryptionLines(logs.String(), dir)
	return s, nil
}

// writeEncryptionConfig writes the configuration as Talos writes it.
func writeEncryptionConfig(path string, ps []encryption.ProviderSpec) error {
	f, err := encryption.Specs(ps).File()
	if err != nil {
		return err
	}
	return os.WriteFile(path, f, 0o600)
}

// failingChecks are the /readyz?verbose checks that fail.
func failingChecks(ctx context.Context, api *recordClient) []string {
	_, body, err := api.do(ctx, http.MethodGet, "/readyz?verbose", nil)
	if err != nil {
		return []string{"no answer: " + err.Error()}
	}
	var out []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "[-]") {
			out = append(out, strings.TrimPrefix(l, "[-]"))
		}
	}
	return out
}

// apiAnswer is an API answer as "CODE: the Status message".
func apiAnswer(code int, body []byte, err error) string {
	if err != nil {
		return "no answer: " + err.Error()
	}
	var st struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		return fmt.Sprintf("%d: %s", code, st.Message)
	}
	return fmt.Sprintf("%d: %s", code, st.Kind)
}

// klogHeader is klog's header: severity, date, time, thread, file:line.
var klogHeader = regexp.MustCompile(`^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ([^\]]+\])\s?`)

// encryptionWords pick the log lines about stored data that does not
// decrypt.
var encryptionWords = regexp.MustCompile(`(?i)decrypt|transform|matching key|matching prefix|padding|pkcs7|base64|output array|authentication failed|identity|encrypt|core\.Secret|/secrets`)

// encryptionLines are the log's lines about encryption, each once in the
// order first seen, klog's header cut to its severity and source line, the
// working directory written DIR.
func encryptionLines(log, dir string) []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range strings.Split(log, "\n") {
		if !encryptionWords.MatchString(l) {
			continue
		}
		l = klogHeader.ReplaceAllString(strings.TrimSpace(l), "$1 $2 ")
		l = strings.ReplaceAll(l, dir, "DIR")
		if !seen[l] && len(out) < 40 {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// lockedBuffer is a log read while the process writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
