package etcd

import (
	"errors"
	"fmt"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// Sentinels for the kinds of invalid backup files; *BackupFileError wraps one of them.
var (
	ErrMalformedBackup          = errors.New("malformed backup file")
	ErrUnsupportedBackupVersion = errors.New("unsupported backup file version")
	ErrChecksumMismatch         = errors.New("backup value does not match its sha256")
)

// ConfigError is an invalid connection configuration (flags), found before dialing.
type ConfigError struct {
	Reason string
	// Hint replaces the default hint about connection flags.
	Hint string
}

func (e *ConfigError) Error() string { return "etcd configuration: " + e.Reason }

// Hints implements the hint convention of cmd/breakglass.
func (e *ConfigError) Hints() []string {
	if e.Hint != "" {
		return []string{e.Hint}
	}
	return []string{
		"give --etcd-endpoints with --etcd-cacert, --etcd-cert and --etcd-key (etcdctl's names), or a plain http:// endpoint for an etcd without TLS",
	}
}

// UnreachableError means no endpoint answered a request, or TLS failed.
type UnreachableError struct {
	Endpoints []string
	// TLS is true when the cause looks like a certificate problem rather than the network.
	TLS bool
	Err error
}

func (e *UnreachableError) Error() string {
	what := "etcd unreachable"
	if e.TLS {
		what = "etcd refused the TLS connection"
	}
	if len(e.Endpoints) > 0 && strings.Contains(e.Err.Error(), e.Endpoints[0]) {
		return fmt.Sprintf("%s: %v", what, e.Err) // the cause names its endpoints already
	}
	return fmt.Sprintf("%s at %s: %v", what, strings.Join(e.Endpoints, ","), e.Err)
}

// Unwrap gives the cause and the category: a refused certificate is a
// credentials problem, anything else the network.
func (e *UnreachableError) Unwrap() []error {
	if e.TLS {
		return []error{e.Err, failure.Credentials}
	}
	return []error{e.Err, failure.Unreachable}
}

// Hints implements the hint convention of cmd/breakglass.
func (e *UnreachableError) Hints() []string {
	if e.TLS {
		return []string{
			"check that --etcd-cacert is the etcd CA (cluster.etcd.ca in the Talos machine config) and that the client certificate is signed by it and not expired",
			"without --etcd-cert/--etcd-key breakglass mints a one-hour client certificate from the etcd CA through the Talos API (needs os:admin)",
		}
	}
	return []string{
		"check the endpoint: on Talos, etcd listens on https://NODE:2379 of each control-plane node",
		"from a machine that can reach the node: talosctl -n NODE service etcd",
	}
}

// MissingName is one name that a delete or backup asked for and that does not exist.
type MissingName struct {
	Name    string `json:"name"`
	Closest string `json:"closest,omitempty"`
}

// NotFoundError means a name given on the command line matches no object of the selected kinds.
type NotFoundError struct {
	Missing   []MissingName
	Resources []kinds.Kind
	// Present lists the names that do exist under the selected kinds, sorted.
	Present []string
}

func (e *NotFoundError) Error() string {
	names := make([]string, len(e.Missing))
	for i, m := range e.Missing {
		names[i] = fmt.Sprintf("%q", m.Name)
	}
	present := "none"
	if len(e.Present) > 0 {
		present = safeList(e.Present) // names read from etcd: shown safely, "" for an empty one
	}
	return fmt.Sprintf("no %s named %s (present: %s)", resourceList(e.Resources), strings.Join(names, ", "), present)
}

// Hints implements the hint convention of cmd/breakglass.
func (e *NotFoundError) Hints() []string {
	var h []string
	for _, m := range e.Missing {
		if m.Closest != "" {
			h = append(h, fmt.Sprintf("did you mean %q instead of %q?", m.Closest, m.Name))
		}
	}
	return append(h, "breakglass etcd webhooks --kind all")
}

// AmbiguousNameError means a name exists under more than one selected resource.
type AmbiguousNameError struct {
	Name      string
	Resources []kinds.Kind
}

func (e *AmbiguousNameError) Error() string {
	return fmt.Sprintf("%q exists as %s: say which with --kind", e.Name, resourceList(e.Resources))
}

// Hints implements the hint convention of cmd/breakglass.
func (e *AmbiguousNameError) Hints() []string {
	h := make([]string, 0, len(e.Resources))
	for _, r := range e.Resources {
		h = append(h, fmt.Sprintf("--kind %s", r.Short()))
	}
	return h
}

// KeyChange is one key whose mod revision is no longer the one that was backed up.
type KeyChange struct {
	Key      string `json:"key"`
	Expected int64  `json:"expectedModRevision"`
	// Actual is 0 when the key no longer exists.
	Actual int64 `json:"actualModRevision"`
}

func (k KeyChange) String() string {
	if k.Actual == 0 {
		return fmt.Sprintf("%s was deleted (backed up at mod revision %d)", termsafe.String(k.Key), k.Expected)
	}
	return fmt.Sprintf("%s changed (mod revision %d, backed up at %d)", termsafe.String(k.Key), k.Actual, k.Expected)
}

// ChangedError means the guarded delete found a key changed since its backup: nothing was deleted.
type ChangedError struct {
	Changes []KeyChange
}

func (e *ChangedError) Error() string {
	parts := make([]string, len(e.Changes))
	for i, c := range e.Changes {
		parts[i] = c.String()
	}
	return "nothing deleted: " + strings.Join(parts, "; ")
}

// Hints implements the hint convention of cmd/breakglass.
func (e *ChangedError) Hints() []string {
	return []string{"someone wrote to these keys meanwhile: list again with breakglass etcd webhooks, then re-run the delete (it takes a fresh backup)"}
}

// FileExistsError means an output file already exists: breakglass never overwrites.
type FileExistsError struct {
	Path string
}

func (e *FileExistsError) Error() string {
	return fmt.Sprintf("%s already exists: refusing to overwrite", e.Path)
}

// Hints implements the hint convention of cmd/breakglass.
func (e *FileExistsError) Hints() []string {
	return []string{"choose another file name, or move the existing file away first"}
}

// BackupFileError is a backup file that cannot be trusted; it wraps
// ErrMalformedBackup, ErrUnsupportedBackupVersion or ErrChecksumMismatch.
type BackupFileError struct {
	Path string
	// Key is the etcd key concerned, if any.
	Key string
	Err error
}

func (e *BackupFileError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("backup %s: key %s: %v", e.Path, termsafe.String(e.Key), e.Err)
	}
	return fmt.Sprintf("backup %s: %v", e.Path, e.Err)
}

func (e *BackupFileError) Unwrap() []error { return []error{e.Err, failure.Verification} }

// Hints implements the hint convention of cmd/breakglass.
func (e *BackupFileError) Hints() []string {
	return []string{"the file is corrupt or was edited: use another copy of the backup, or an etcd snapshot"}
}

// ForeignClusterError means a backup was taken from another etcd cluster.
type ForeignClusterError struct {
	BackupCluster ID
	LiveCluster   ID
}

func (e *ForeignClusterError) Error() string {
	return fmt.Sprintf("backup is from etcd cluster %s, this is cluster %s", e.BackupCluster, e.LiveCluster)
}

// Hints implements the hint convention of cmd/breakglass.
func (e *ForeignClusterError) Hints() []string {
	return []string{"if etcd was restored from a snapshot its cluster ID changed: restore anyway with --force-cluster"}
}

// PrefixMismatchError means a backup was taken under another key prefix than the one in use.
type PrefixMismatchError struct {
	BackupPrefix string
	Prefix       string
}

func (e *PrefixMismatchError) Error() string {
	return fmt.Sprintf("backup was taken under prefix %s, connected with prefix %s", e.BackupPrefix, e.Prefix)
}

// Hints implements the hint convention of cmd/breakglass.
func (e *PrefixMismatchError) Hints() []string {
	return []string{"--etcd-prefix " + e.BackupPrefix}
}

// ConflictError means a restore found keys present with other values; they were left alone.
type ConflictError struct {
	Keys []string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%d key(s) present with a different value, left alone: %s", len(e.Keys), safeList(e.Keys))
}

// Hints implements the hint convention of cmd/breakglass.
func (e *ConflictError) Hints() []string {
	return []string{"the object was re-created since the backup: compare with breakglass etcd webhooks -o json, delete it first if the backup should win"}
}

// SnapshotError is a snapshot stream that fails the size or sha256-trailer check.
type SnapshotError struct {
	Reason string
}

func (e *SnapshotError) Error() string { return "invalid etcd snapshot: " + e.Reason }

// Hints implements the hint convention of cmd/breakglass.
func (e *SnapshotError) Hints() []string {
	return []string{"nothing was kept; take the snapshot again (from another node if this one keeps failing)"}
}

// KeyShapeError is an object listed in etcd whose key is not
// PREFIX/RESOURCE/NAME: its name is empty or holds a slash. kube-apiserver
// writes no such key; breakglass lists it (etcd webhooks) but backs up,
// deletes and restores none, as it could not say what it is.
type KeyShapeError struct {
	// Keys are the keys, Names what follows PREFIX/RESOURCE/ in each.
	Keys, Names []string
	// Under is the range the first key was listed under, PREFIX/RESOURCE/.
	Under string
}

func (e *KeyShapeError) Error() string {
	parts := make([]string, len(e.Keys))
	for i, k := range e.Keys {
		why := "an empty name"
		if e.Names[i] != "" {
			why = "the name " + termsafe.String(e.Names[i]) + " holds a slash"
		}
		parts[i] = fmt.Sprintf("%s (%s)", termsafe.String(k), why)
	}
	if len(e.Keys) == 1 {
		return fmt.Sprintf("etcd key %s is not shaped PREFIX/RESOURCE/NAME: kube-apiserver writes no such key, and breakglass leaves it alone", parts[0])
	}
	return fmt.Sprintf("etcd holds %d keys not shaped PREFIX/RESOURCE/NAME: %s; kube-apiserver writes no such key, and breakglass leaves them alone",
		len(e.Keys), strings.Join(parts, ", "))
}

// Hints implements the hint convention of cmd/breakglass.
func (e *KeyShapeError) Hints() []string {
	return []string{
		"inspect it with etcdctl (same endpoints and certificates): etcdctl get --prefix --keys-only " + e.Under,
		"back up or delete the other objects by name: breakglass etcd webhooks lists them",
	}
}

// WrongKindError: a backup holds, as etcd held it, a value of another kind
// under an admission key (etcd webhooks lists it as not decodable).
// kube-apiserver cannot read it there; restore does not put it back.
type WrongKindError struct {
	Key, Kind, Belongs string
	Path               string // the backup file, when restored from one
}

func (e *WrongKindError) Error() string {
	return fmt.Sprintf("the backup holds under %s a %s, as etcd held it: only a %s belongs there, kube-apiserver cannot read it, and breakglass does not put it back (nothing was restored)",
		termsafe.String(e.Key), termsafe.String(e.Kind), e.Belongs)
}

// Hints implements the hint convention of cmd/breakglass.
func (e *WrongKindError) Hints() []string {
	file := e.Path
	if file == "" {
		file = "FILE"
	}
	key := termsafe.String(e.Key)
	return []string{
		"to restore the other keys: copy the file without this key's entry, and restore the copy",
		fmt.Sprintf("to put this value back anyway, by hand, with etcdctl (same endpoints and certificates): jq -r '.keys[] | select(.key == %q) | .value' %s | base64 -d | etcdctl put %s", key, file, key),
	}
}

// EmptyPlanError is a delete or backup asked for no objects.
type EmptyPlanError struct{}

func (e *EmptyPlanError) Error() string { return "no objects named" }

// safeList joins names or keys read from etcd or a backup file so that
// they cannot drive the terminal (internal/termsafe); an empty one is "".
func safeList(names []string) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = termsafe.String(n)
	}
	return strings.Join(s, ", ")
}

func resourceList(rs []kinds.Kind) string {
	if len(rs) == 0 || len(rs) == len(kinds.All) {
		return "admission object"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = string(r)
	}
	return strings.Join(s, "/")
}

// The categories of the errors above (the exit codes).
func (e *ConfigError) Unwrap() error         { return failure.BadInput }
func (e *NotFoundError) Unwrap() error       { return failure.BadInput }
func (e *AmbiguousNameError) Unwrap() error  { return failure.BadInput }
func (e *EmptyPlanError) Unwrap() error      { return failure.BadInput }
func (e *FileExistsError) Unwrap() error     { return failure.BadInput }
func (e *ChangedError) Unwrap() error        { return failure.Conflict }
func (e *ConflictError) Unwrap() error       { return failure.Conflict }
func (e *SnapshotError) Unwrap() error       { return failure.Verification }
func (e *ForeignClusterError) Unwrap() error { return failure.Refused }
func (e *PrefixMismatchError) Unwrap() error { return failure.Refused }
func (e *KeyShapeError) Unwrap() error       { return failure.Refused }
func (e *WrongKindError) Unwrap() error      { return failure.Refused }

// NoSpaceError is etcd refusing a write because a member's database file
// reached its space quota: the NOSPACE alarm is raised and every write
// (put, transaction with a put, lease grant) is refused until the space is
// freed and the alarm disarmed. Reads, deletes, compaction and
// defragmentation still work. The write that crossed the quota may have
// been applied all the same (etcd applies it, then answers NOSPACE): read
// back before concluding it was not.
type NoSpaceError struct {
	Err error
}

func (e *NoSpaceError) Error() string {
	return "etcd refused the write, its space quota is used up (NOSPACE alarm): " + e.Err.Error()
}

// Unwrap gives the cause and the category: etcd refused.
func (e *NoSpaceError) Unwrap() []error { return []error{e.Err, failure.Refused} }

// Hints implements the hint convention of cmd/breakglass.
func (e *NoSpaceError) Hints() []string {
	return []string{
		"etcd is full: take a snapshot first, find what filled it (the usage report), compact, defragment each member one at a time, then disarm the alarm",
	}
}

// StillFullError means a NOSPACE alarm was not disarmed because a member's
// database file is still at or above its quota: etcd would raise the alarm
// again at the next write. Nothing was disarmed.
type StillFullError struct {
	Members []MemberStatus
}

func (e *StillFullError) Error() string {
	parts := make([]string, len(e.Members))
	for i, m := range e.Members {
		parts[i] = fmt.Sprintf("member %s (%s) database %s of its %s quota", m.MemberID, m.Endpoint, FormatBytes(m.DBSize), FormatBytes(m.Quota))
	}
	return "nothing disarmed: still full: " + strings.Join(parts, "; ")
}

func (e *StillFullError) Unwrap() error { return failure.Refused }

// Hints implements the hint convention of cmd/breakglass.
func (e *StillFullError) Hints() []string {
	return []string{"compact the history, then defragment each full member one at a time (talosctl -n NODE etcd defrag), then disarm again"}
}
