package recovery

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// RenderDeletePlan is an etcd.delete step's plan, as the operator reads it
// before confirming. Names, keys and targets read from etcd are shown
// safely (internal/termsafe), an empty name as "".
func RenderDeletePlan(w io.Writer, endpoints []string, p *etcd.Plan, opts etcd.ExecuteOptions) {
	fmt.Fprintf(w, "Plan: delete %d key(s) from etcd cluster %s (%s), read at revision %d\n", len(p.Objects), p.Cluster.ClusterID, strings.Join(endpoints, ","), p.Cluster.Revision)
	for _, o := range p.Objects {
		fmt.Fprintf(w, "  %s %s\n    key %s, mod revision %d, %s\n", o.Kind, termsafe.String(o.Name), termsafe.String(o.Key), o.ModRevision, EncodingNote(o))
		if n := KeyNote(o); n != "" {
			fmt.Fprintf(w, "    %s\n", n)
		}
		for _, wh := range o.Webhooks {
			fmt.Fprintf(w, "    webhook %s: failurePolicy %s, %s\n", termsafe.String(wh.Name), wh.FailurePolicy, termsafe.String(wh.Target()))
		}
	}
	where := opts.BackupDir
	if opts.BackupPath != "" {
		where = opts.BackupPath
	}
	if opts.Snapshot {
		fmt.Fprintf(w, "  first: full etcd snapshot into %s\n", opts.BackupDir)
	}
	fmt.Fprintf(w, "  backup into %s (written, read back and verified before the delete)\n", where)
	fmt.Fprintln(w, "  one transaction, each key deleted only if its mod revision is unchanged")
}

// safeJoin lists keys or names read from etcd, each shown safely.
func safeJoin(items []string) string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = termsafe.String(it)
	}
	return strings.Join(s, ", ")
}

// EncodingNote says how an object is stored in etcd.
func EncodingNote(o etcd.Object) string {
	switch {
	case o.Encoding == etcd.EncodingEncrypt:
		return "encrypted (" + termsafe.String(o.EncryptionProvider) + "), not decoded"
	case o.DecodeError != "":
		return string(o.Encoding) + ", NOT DECODABLE: " + termsafe.Text(o.DecodeError)
	}
	return string(o.Encoding) + " " + o.APIVersion
}

// KeyNote says what is odd about an object whose value does not match its
// key (another name, another kind), and how to look at it; "" otherwise.
// breakglass backs such an object up and removes it by its key.
func KeyNote(o etcd.Object) string {
	look := "look at it with etcdctl (same endpoints and certificates): etcdctl get " + termsafe.String(o.Key) + " --print-value-only | strings"
	switch {
	case o.StoredKind != "":
		return "NOTE: its value is a " + termsafe.String(o.StoredKind) + ", which does not belong under this key: kube-apiserver cannot read it; it is backed up and removed by its key, and a restore will not put it back; " + look
	case o.StoredName != "":
		return "NOTE: its value names the object " + termsafe.String(o.StoredName) + ": kube-apiserver lists it by that name but keeps it under this key, so it is backed up and removed by its key; " + look
	}
	return ""
}

// RenderRestore is a restore's plan (with its header: what the backup is)
// or its outcome, key by key; the keys, read from the file, shown safely.
func RenderRestore(w io.Writer, b *etcd.Backup, r *etcd.RestoreResult, header bool) {
	if header {
		fmt.Fprintf(w, "backup %s: %d key(s) from etcd cluster %s at revision %d, taken %s by breakglass %s\n",
			r.Path, len(b.Keys), b.ClusterID, b.Revision, b.Time.Format("2006-01-02 15:04:05Z"), b.ToolVersion)
		if b.ClusterID != r.Cluster.ClusterID {
			fmt.Fprintf(w, "WARNING: this etcd is cluster %s (--force-cluster)\n", r.Cluster.ClusterID)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  KEY\tSTATUS")
	for _, it := range r.Items {
		fmt.Fprintf(tw, "  %s\t%s\n", termsafe.String(it.Key), it.Status)
	}
	tw.Flush()
}
