package etcd

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// WriteText renders the report for a person: the space first (what the
// database holds and what would free it), then the top groups (the rest
// summed on one line), the most written and the largest keys, and the odd
// keys. Everything read from etcd is shown safely (internal/termsafe).
func (u *Usage) WriteText(w io.Writer, top int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "etcd cluster %s at revision %d, read in %s: %s under %s",
		u.Cluster.ClusterID, u.Cluster.Revision, u.Elapsed.Round(time.Millisecond), u.Total, termsafe.String(u.Prefix))
	if u.Outside.Keys > 0 {
		fmt.Fprintf(&b, ", %s outside it", u.Outside)
	}
	b.WriteString("\n")
	if !u.Consistent {
		b.WriteString("note: etcd compacted the revision while it was read: later keys were read at a newer one\n")
	}
	u.Space.write(&b)

	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tNAMESPACE\tKEYS\tBYTES\tSHARE")
	shown := u.Top(top)
	for _, g := range shown {
		ns := termsafe.String(g.Namespace)
		if g.Scope != ScopeNamespaced {
			ns = "(" + string(g.Scope) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.1f%%\n", termsafe.String(g.Resource), ns, g.Keys, FormatBytes(g.Bytes), g.Share)
	}
	var rest UsageCount
	var restShare float64
	for _, g := range u.Groups[len(shown):] {
		rest.Keys += g.Keys
		rest.Bytes += g.Bytes
		restShare += g.Share
	}
	if n := len(u.Groups) - len(shown); n > 0 {
		fmt.Fprintf(tw, "(%d more groups)\t\t%d\t%s\t%.1f%%\n", n, rest.Keys, FormatBytes(rest.Bytes), restShare)
	}
	if u.Ungrouped.Keys > 0 {
		fmt.Fprintf(tw, "(past %d groups)\t\t%d\t%s\t\n", MaxGroups, u.Ungrouped.Keys, FormatBytes(u.Ungrouped.Bytes))
	}
	fmt.Fprintf(tw, "total\t\t%d\t%s\t100.0%%\n", u.Total.Keys+u.Outside.Keys, FormatBytes(u.Total.Bytes+u.Outside.Bytes))
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(u.MostWritten) > 0 {
		b.WriteString("\nmost written keys (a controller rewriting a status in a loop shows here; its history, not its value, fills etcd):\n")
		for _, k := range u.MostWritten {
			fmt.Fprintf(&b, "  %s\n", k)
		}
	}
	if len(u.Largest) > 0 {
		b.WriteString("\nlargest keys:\n")
		for _, k := range u.Largest {
			fmt.Fprintf(&b, "  %s\n", k)
		}
	}
	var odd []string
	for _, g := range u.Groups {
		if g.Scope == ScopeOdd {
			for _, k := range g.Examples {
				odd = append(odd, "  "+termsafe.String(k))
			}
		}
	}
	if len(odd) > 0 {
		b.WriteString("\nodd keys (not shaped as kube-apiserver writes them; counted, not interpreted), for example:\n")
		b.WriteString(strings.Join(odd, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (s Space) write(b *strings.Builder) {
	if s.Fullest == "" {
		b.WriteString("space: no member answered its status\n")
		return
	}
	quota := "quota not reported (etcd before 3.6)"
	if s.Quota > 0 {
		quota = fmt.Sprintf("%.0f%% of its %s quota", float64(s.DBSize)*100/float64(s.Quota), FormatBytes(s.Quota))
	}
	fmt.Fprintf(b, "space: the fullest member, %s, has a database file of %s (%s), %s in use\n", s.Fullest, FormatBytes(s.DBSize), quota, FormatBytes(s.DBSizeInUse))
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  live keys\t%s\tabout %s as stored: only deleting what wrote them frees it\n", FormatBytes(s.Live), FormatBytes(s.AfterDefrag))
	fmt.Fprintf(tw, "  history\t%s\tolder versions: compaction frees them inside the file\n", FormatBytes(s.History))
	fmt.Fprintf(tw, "  free pages\t%s\tdefragmentation gives them back\n", FormatBytes(s.Fragmented))
	tw.Flush()
	fmt.Fprintf(b, "  after compaction and defragmentation of each member: about %s left, %s freed on the fullest (estimated)\n", FormatBytes(s.AfterDefrag), FormatBytes(s.Reclaimable))
	tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tID\tDB SIZE\tIN USE\tQUOTA\tREVISION\tLEADER\tERRORS")
	for _, m := range s.Members {
		if m.Error != "" {
			fmt.Fprintf(tw, "%s\t\t\t\t\t\t\t%s\n", m.Endpoint, termsafe.Text(m.Error))
			continue
		}
		quota, leader := "-", ""
		if m.Quota > 0 {
			quota = FormatBytes(m.Quota)
		}
		if m.IsLeader {
			leader = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.Endpoint, m.MemberID, FormatBytes(m.DBSize), FormatBytes(m.DBSizeInUse), quota, m.Revision, leader, termsafe.Text(strings.Join(m.Errors, ", ")))
	}
	tw.Flush()
}
