package upgradecheck

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/breakglass-dev/breakglass/internal/errwriter"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// TextOptions tune the table.
type TextOptions struct {
	// Verbose also prints each check's evidence.
	Verbose bool
	// Width cuts summaries to a terminal's width (0: never cut; fixes,
	// commands to copy, are never cut).
	Width int
}

// WriteText prints each cluster's checks, the no-gos first, each not-go
// check with its fix; then, for several clusters, one line per cluster.
func WriteText(w io.Writer, fl *Fleet, o TextOptions) error {
	ew := &errwriter.Writer{W: w}
	for i, r := range fl.Clusters {
		if i > 0 {
			ew.Printf("\n")
		}
		writeCluster(ew, r, o)
	}
	if len(fl.Clusters) > 1 {
		ew.Printf("\n")
		writeSummary(ew, fl)
	}
	return ew.Err
}

// upgrade is "1.33 -> 1.34", "? -> 1.34" when the running one is unknown.
func (r *Report) upgrade() string {
	from := r.From
	if from == "" {
		from = "?"
	}
	return from + " -> " + r.To
}

func (r *Report) counts() string {
	return fmt.Sprintf("%d no-go, %d warn, %d go", r.Count(NoGo), r.Count(Warn), r.Count(Go))
}

func verdictWord(v Verdict, strict bool) string {
	if strict && v == NoGo {
		return "NO-GO (strict)"
	}
	return strings.ToUpper(string(v))
}

func writeCluster(ew *errwriter.Writer, r *Report, o TextOptions) {
	name := termsafe.String(r.Cluster)
	if name == "" {
		name = "(current context)"
	}
	ew.Printf("upgrade-check %s: Kubernetes %s: %s (%s, %s)\n\n", name, r.upgrade(), verdictWord(r.Verdict, r.Strict && r.Count(NoGo) == 0), r.counts(), r.Elapsed.Round(100*time.Millisecond))
	ew.Printf("%-7s  %-15s  %s\n", "VERDICT", "CHECK", "SUMMARY")
	for i := 0; i < len(r.Checks); i++ {
		c := r.Checks[i]
		ids := []string{c.ID}
		// Checks not run for the same reason are said once.
		for c.NotChecked && i+1 < len(r.Checks) && r.Checks[i+1].NotChecked && r.Checks[i+1].Summary == c.Summary {
			i++
			ids = append(ids, r.Checks[i].ID)
		}
		line := fmt.Sprintf("%-7s  %-15s  %s", c.Verdict, strings.Join(ids, ", "), c.Summary)
		if len(ids) > 1 {
			line = fmt.Sprintf("%-7s  %s: %s", c.Verdict, strings.Join(ids, ", "), c.Summary)
		}
		ew.Printf("%s\n", cut(line, o.Width))
		if o.Verbose {
			for _, e := range c.Evidence {
				ew.Printf("           %s\n", e)
			}
		}
		if c.Verdict != Go {
			for _, fx := range c.Fix {
				ew.Printf("           fix: %s\n", fx)
			}
		}
	}
}

// cut shortens a line to width runes, with an ellipsis.
func cut(s string, width int) string {
	if width <= 0 {
		return s
	}
	r := []rune(s)
	if len(r) <= width {
		return s
	}
	return string(r[:width-1]) + "…"
}

func writeSummary(ew *errwriter.Writer, fl *Fleet) {
	tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tVERDICT\tUPGRADE\tNO-GO\tWARN\tFIRST CAUSE")
	for _, r := range fl.Clusters {
		cause := "-"
		if len(r.Checks) > 0 && r.Checks[0].Verdict != Go {
			cause = r.Checks[0].ID + ": " + cut(r.Checks[0].Summary, 70)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", termsafe.String(r.Cluster), r.Verdict, r.upgrade(), r.Count(NoGo), r.Count(Warn), cause)
	}
	tw.Flush()
	ew.Printf("\n%d cluster(s): %s\n", len(fl.Clusters), verdictWord(fl.Verdict, false))
}

// WriteJSON prints the fleet (one cluster is a fleet of one) as indented
// JSON: {clusters: [Report], verdict, strict, to, elapsedNanoseconds}.
func WriteJSON(w io.Writer, fl *Fleet) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(fl)
}

// The JUnit XML CI systems read: a test suite per cluster, a test case per
// check, a no-go a failure (a warning too with --strict), a check not run
// an error.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Errors    int         `xml:"errors,attr"`
	Time      string      `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Cases     []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	SystemOut *junitText    `xml:"system-out,omitempty"`
}

type junitProblem struct {
	Type    string `xml:"type,attr"`
	Message string `xml:"message,attr"`
	Text    string `xml:",cdata"`
}

type junitText struct {
	Text string `xml:",cdata"`
}

// WriteJUnit prints the fleet as JUnit XML.
func WriteJUnit(w io.Writer, fl *Fleet) error {
	out := junitSuites{Name: "breakglass upgrade-check", Time: seconds(fl.Elapsed)}
	for _, r := range fl.Clusters {
		name := termsafe.String(r.Cluster)
		s := junitSuite{Name: name + ": Kubernetes " + r.upgrade(), Time: seconds(r.Elapsed), Timestamp: r.Started.UTC().Format(time.RFC3339)}
		for _, c := range r.Checks {
			tc := junitCase{Name: c.ID, Classname: "upgrade-check." + name, Time: "0"}
			body := detail(c)
			switch {
			case c.NotChecked:
				tc.Error = &junitProblem{Type: "not-checked", Message: c.Summary, Text: body}
				s.Errors++
			case c.Verdict == NoGo, c.Verdict == Warn && r.Strict:
				tc.Failure = &junitProblem{Type: string(c.Verdict), Message: c.Summary, Text: body}
				s.Failures++
			default:
				tc.SystemOut = &junitText{Text: string(c.Verdict) + ": " + c.Summary + "\n" + body}
			}
			s.Cases = append(s.Cases, tc)
		}
		s.Tests = len(s.Cases)
		out.Tests, out.Failures, out.Errors = out.Tests+s.Tests, out.Failures+s.Failures, out.Errors+s.Errors
		out.Suites = append(out.Suites, s)
	}
	ew := &errwriter.Writer{W: w}
	ew.Printf("%s", xml.Header)
	enc := xml.NewEncoder(ew)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	ew.Printf("\n")
	return ew.Err
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }

// detail is a check's evidence and fix, as lines.
func detail(c Check) string {
	var b strings.Builder
	for _, e := range c.Evidence {
		b.WriteString("evidence: " + e + "\n")
	}
	for _, f := range c.Fix {
		b.WriteString("fix: " + f + "\n")
	}
	return b.String()
}

// WriteMarkdown prints the fleet for a change ticket: per cluster, the
// verdict, a table of the checks and the detail of each that is not go.
func WriteMarkdown(w io.Writer, fl *Fleet) error {
	ew := &errwriter.Writer{W: w}
	for i, r := range fl.Clusters {
		if i > 0 {
			ew.Printf("\n")
		}
		ew.Printf("## Upgrade check: %s, Kubernetes %s: **%s**\n\n", md(r.Cluster), r.upgrade(), verdictWord(r.Verdict, r.Strict && r.Count(NoGo) == 0))
		ew.Printf("Checked %s by `breakglass upgrade-check` on %d node(s); %s.\n\n", r.Started.UTC().Format("2006-01-02 15:04 MST"), len(r.Nodes), r.counts())
		ew.Printf("| Check | Verdict | Summary |\n| --- | --- | --- |\n")
		for _, c := range r.Checks {
			ew.Printf("| %s | %s | %s |\n", c.ID, verdictCell(c.Verdict), md(c.Summary))
		}
		for _, c := range r.Checks {
			if c.Verdict == Go {
				continue
			}
			ew.Printf("\n### %s: %s\n\n%s\n", c.ID, c.Verdict, md(c.Summary))
			if len(c.Evidence) > 0 {
				ew.Printf("\nEvidence:\n\n")
				for _, e := range c.Evidence {
					ew.Printf("- %s\n", md(e))
				}
			}
			if len(c.Fix) > 0 {
				ew.Printf("\nFix:\n\n")
				for _, f := range c.Fix {
					ew.Printf("- %s\n", mdFix(f))
				}
			}
		}
	}
	if len(fl.Clusters) > 1 {
		ew.Printf("\n## Summary: **%s**\n\n| Cluster | Verdict | Upgrade | No-go | Warn |\n| --- | --- | --- | --- | --- |\n", verdictWord(fl.Verdict, false))
		for _, r := range fl.Clusters {
			ew.Printf("| %s | %s | %s | %d | %d |\n", md(r.Cluster), verdictCell(r.Verdict), r.upgrade(), r.Count(NoGo), r.Count(Warn))
		}
	}
	return ew.Err
}

func verdictCell(v Verdict) string {
	if v == Go {
		return "go"
	}
	return "**" + string(v) + "**"
}

// md makes text safe in a markdown table cell or line.
func md(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;").Replace(termsafe.Text(s))
}

// mdFix shows a fix that starts with a command as code.
func mdFix(s string) string {
	for _, cmd := range []string{"breakglass ", "talosctl ", "kubectl "} {
		if strings.HasPrefix(s, cmd) {
			cmdPart, rest, found := strings.Cut(s, " (")
			if found {
				return "`" + strings.ReplaceAll(cmdPart, "`", "'") + "` (" + md(rest)
			}
			return "`" + strings.ReplaceAll(s, "`", "'") + "`"
		}
	}
	return md(s)
}
