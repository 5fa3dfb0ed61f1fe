package etcd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/breakglass-dev/breakglass/internal/kinds"
)

// Backup file identity; see BACKUP_FORMAT.md.
const (
	BackupAPIVersion = "breakglass.dev/v1"
	BackupKind       = "EtcdBackup"
)

// maxBackupSize bounds what ReadBackup loads: admission objects are small.
const maxBackupSize = 256 << 20

// Backup is the content of a backup file.
type Backup struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	ClusterID  ID     `json:"clusterID"`
	MemberID   ID     `json:"memberID"`
	// Revision is the etcd revision the values were read at.
	Revision    int64       `json:"revision"`
	Time        time.Time   `json:"time"`
	ToolVersion string      `json:"toolVersion"`
	Prefix      string      `json:"prefix"`
	Keys        []BackupKey `json:"keys"`
}

// BackupKey is one key, its exact value and its metadata.
type BackupKey struct {
	Key            string     `json:"key"`
	Resource       kinds.Kind `json:"resource"`
	Name           string     `json:"name"`
	Value          string     `json:"value"`  // base64 (standard, padded) of the raw bytes
	SHA256         string     `json:"sha256"` // hex sha256 of the raw bytes
	CreateRevision int64      `json:"createRevision"`
	ModRevision    int64      `json:"modRevision"`
	Version        int64      `json:"version"`
	Encoding       Encoding   `json:"encoding"`
	// StoredKind, StoredName: what etcd held under the key was a value of
	// another kind, or one named otherwise (Object's fields of the same
	// names). Recorded, so that the file's check (the value belongs under
	// its key) tells an object found that way from an edited file.
	StoredKind string `json:"storedKind,omitempty"`
	StoredName string `json:"storedName,omitempty"`
	// Unreadable: an encrypted value no key read when it was backed up
	// (the last resort of an encryption drift), under any key of the
	// prefix. Resource is then empty and Name the key's path under it.
	Unreadable bool `json:"unreadable,omitempty"`
	// Object is the decoded object, for human eyes only: restore never reads it.
	Object json.RawMessage `json:"object,omitempty"`
}

// RawValue decodes Value; ReadBackup has already checked it against SHA256.
func (k *BackupKey) RawValue() ([]byte, error) { return base64.StdEncoding.DecodeString(k.Value) }

// NewBackup builds a backup of objs read at cluster (all from one listing).
func NewBackup(prefix string, cluster ClusterInfo, objs []Object, toolVersion string, now time.Time) (*Backup, error) {
	b := &Backup{
		APIVersion: BackupAPIVersion, Kind: BackupKind,
		ClusterID: cluster.ClusterID, MemberID: cluster.MemberID, Revision: cluster.Revision,
		Time: now.UTC().Truncate(time.Second), ToolVersion: toolVersion, Prefix: prefix,
		Keys: make([]BackupKey, 0, len(objs)),
	}
	for _, o := range objs {
		sum := sha256.Sum256(o.Value)
		k := BackupKey{
			Key: o.Key, Resource: o.Resource, Name: o.Name,
			Value: base64.StdEncoding.EncodeToString(o.Value), SHA256: hex.EncodeToString(sum[:]),
			CreateRevision: o.CreateRevision, ModRevision: o.ModRevision, Version: o.Version,
			Encoding: o.Encoding, StoredKind: o.StoredKind, StoredName: o.StoredName, Unreadable: o.Unreadable,
		}
		if o.Decoded != nil {
			raw, err := json.Marshal(o.Decoded)
			if err != nil {
				return nil, fmt.Errorf("encode %s for the backup: %w", o.Key, err)
			}
			k.Object = raw
		}
		b.Keys = append(b.Keys, k)
	}
	if err := b.validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// BackupResult says what a backup wrote (or, dry, would write).
type BackupResult struct {
	Path   string  `json:"path"`
	DryRun bool    `json:"dryRun"`
	Backup *Backup `json:"backup"`
}

// BackupObjects backs up the named objects (all objects of resources when
// names is empty) to path, through w, and returns once the file is verified.
func (c *Client) BackupObjects(ctx context.Context, names []string, resources []kinds.Kind, path, toolVersion string, w Writer) (*BackupResult, error) {
	var (
		objs    []Object
		cluster ClusterInfo
	)
	if len(names) == 0 {
		l, err := c.List(ctx, resources)
		if err != nil {
			return nil, err
		}
		objs, cluster = l.Objects, l.Cluster
	} else {
		p, err := c.PlanDelete(ctx, names, resources)
		if err != nil {
			return nil, err
		}
		objs, cluster = p.Objects, p.Cluster
	}
	if len(objs) == 0 {
		return nil, &EmptyPlanError{}
	}
	if err := checkKeyShapes(c.prefix, objs); err != nil {
		return nil, err
	}
	b, err := NewBackup(c.prefix, cluster, objs, toolVersion, time.Now())
	if err != nil {
		return nil, err
	}
	if err := writeBackup(w, path, b); err != nil {
		return nil, err
	}
	return &BackupResult{Path: path, DryRun: w.DryRun(), Backup: b}, nil
}

// BackupFileName is the name Execute gives a backup in a backup directory.
func BackupFileName(now time.Time, objs []Object) string {
	name := "etcd-backup-" + now.UTC().Format("20060102T150405Z")
	if len(objs) > 0 {
		name += "-" + sanitize(objs[0].Name)
	}
	return name + ".json"
}

func sanitize(s string) string {
	s = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '_'
	}, s)
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// writeBackup writes b to path through w and, for a real write, reads the
// file back and checks that it parses, every sha256 holds and it says what
// b says.
func writeBackup(w Writer, path string, b *Backup) error {
	data, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	return w.CreateFile(path, func(f io.Writer) error {
		_, err := f.Write(data)
		return err
	}, func(path string) error {
		got, err := ReadBackup(path)
		if err != nil {
			return fmt.Errorf("backup written but failed verification: %w", err)
		}
		if len(got.Keys) != len(b.Keys) || got.ClusterID != b.ClusterID || got.Revision != b.Revision {
			return &BackupFileError{Path: path, Err: fmt.Errorf("%w: read back differs from what was written", ErrMalformedBackup)}
		}
		for i := range got.Keys {
			if got.Keys[i].Key != b.Keys[i].Key || got.Keys[i].SHA256 != b.Keys[i].SHA256 || got.Keys[i].ModRevision != b.Keys[i].ModRevision {
				return &BackupFileError{Path: path, Key: b.Keys[i].Key, Err: fmt.Errorf("%w: read back differs from what was written", ErrMalformedBackup)}
			}
		}
		return nil
	})
}

// ReadBackup reads and verifies a backup file: strict JSON (unknown fields
// refused), known apiVersion and kind, every key well-formed and under the
// file's prefix, no duplicates, and every value matching its sha256.
// Failures are *BackupFileError.
func ReadBackup(path string) (*Backup, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxBackupSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxBackupSize {
		return nil, &BackupFileError{Path: path, Err: fmt.Errorf("%w: larger than %d bytes", ErrMalformedBackup, maxBackupSize)}
	}
	b, err := ParseBackup(data)
	if err != nil {
		if bf, ok := err.(*BackupFileError); ok {
			bf.Path = path
		}
		return nil, err
	}
	return b, nil
}

// ParseBackup is ReadBackup on bytes.
func ParseBackup(data []byte) (*Backup, error) {
	// Read apiVersion first so a future format is reported as such, not as unknown fields.
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) && syn.Offset >= int64(len(data)) {
			return nil, &BackupFileError{Err: fmt.Errorf("%w: truncated: the file ends after %d bytes, before the backup does", ErrMalformedBackup, len(data))}
		}
		return nil, &BackupFileError{Err: fmt.Errorf("%w: %v", ErrMalformedBackup, err)}
	}
	if head.APIVersion != BackupAPIVersion || head.Kind != BackupKind {
		return nil, &BackupFileError{Err: fmt.Errorf("%w: apiVersion %q kind %q (this breakglass reads %s %s)",
			ErrUnsupportedBackupVersion, head.APIVersion, head.Kind, BackupAPIVersion, BackupKind)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var b Backup
	if err := dec.Decode(&b); err != nil {
		return nil, &BackupFileError{Err: fmt.Errorf("%w: %v", ErrMalformedBackup, err)}
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &BackupFileError{Err: fmt.Errorf("%w: data after the backup object", ErrMalformedBackup)}
	}
	if err := b.validate(); err != nil {
		return nil, err
	}
	if err := b.checkValues(); err != nil {
		return nil, err
	}
	return &b, nil
}

func (b *Backup) validate() error {
	bad := func(key, format string, args ...any) error {
		return &BackupFileError{Key: key, Err: fmt.Errorf("%w: "+format, append([]any{ErrMalformedBackup}, args...)...)}
	}
	if b.Prefix == "" || b.Prefix != normalizePrefix(b.Prefix) {
		return bad("", "prefix %q is not a normalized key prefix", b.Prefix)
	}
	if b.ClusterID == 0 || b.Revision <= 0 {
		return bad("", "missing cluster ID or revision")
	}
	if len(b.Keys) == 0 {
		return bad("", "no keys")
	}
	seen := make(map[string]bool, len(b.Keys))
	for i := range b.Keys {
		k := &b.Keys[i]
		if !k.Unreadable {
			r, name, ok := splitKey(b.Prefix, k.Key)
			if !ok {
				return bad(k.Key, "not an admission object key under %s", b.Prefix)
			}
			if r != k.Resource || name != k.Name {
				return bad(k.Key, "resource %q name %q do not match the key", k.Resource, k.Name)
			}
		}
		if seen[k.Key] {
			return bad(k.Key, "listed twice")
		}
		seen[k.Key] = true
		if k.CreateRevision <= 0 || k.ModRevision < k.CreateRevision || k.Version <= 0 || k.ModRevision > b.Revision {
			return bad(k.Key, "impossible revisions (create %d, mod %d, version %d, file revision %d)", k.CreateRevision, k.ModRevision, k.Version, b.Revision)
		}
		raw, err := k.RawValue()
		if err != nil {
			return bad(k.Key, "value is not base64: %v", err)
		}
		want, err := hex.DecodeString(k.SHA256)
		if err != nil || len(want) != sha256.Size {
			return bad(k.Key, "sha256 is not 64 hex digits")
		}
		if got := sha256.Sum256(raw); !bytes.Equal(got[:], want) {
			return &BackupFileError{Key: k.Key, Err: ErrChecksumMismatch}
		}
		if k.Unreadable {
			if err := checkUnreadable(b.Prefix, k, raw); err != nil {
				return bad(k.Key, "%v", err)
			}
		}
	}
	return nil
}

// defaultBackupPath places a backup in dir (default: the current directory).
func defaultBackupPath(dir string, now time.Time, objs []Object) string {
	if dir == "" {
		dir = "."
	}
	return filepath.Join(dir, BackupFileName(now, objs))
}
