package diagnose

import (
	"fmt"
	"io"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// An evidence line longer than maxText is shown as its head and tail (the
// error is often at the end); the JSON report has it whole.
const (
	maxText  = 400
	headText = 220
	tailText = 170
)

// WriteText prints the report for a person: the verdict and what to blame
// first, the evidence after, the next commands last (where the eye lands).
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	b.WriteString(Brief(r))
	b.WriteString(EvidenceText(r))
	if len(r.Next) > 0 {
		b.WriteString("\nnext:\n")
		for _, c := range r.Next {
			fmt.Fprintf(&b, "  %s\n", termsafe.String(c))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Brief is the verdict, its summary and the culprits: what a recovery shows
// of its diagnosis before its plan.
func Brief(r *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "verdict: %s\n%s\n", r.Verdict, r.Summary)
	for _, c := range r.Culprits {
		b.WriteString("\n")
		switch {
		case c.Name != "" && c.FoundInEtcd:
			fmt.Fprintf(&b, "culprit: %s %s\n", c.Kind, termsafe.String(c.Name))
		case c.Name != "":
			fmt.Fprintf(&b, "culprit: %s %s (not found in etcd)\n", c.Kind, termsafe.String(c.Name))
		default:
			fmt.Fprintf(&b, "culprit: webhook %q (its configuration is not known: etcd not read, or no configuration holds it)\n", c.Webhook)
		}
		if c.Webhook != "" && c.Name != "" {
			fmt.Fprintf(&b, "  webhook %s, failurePolicy %s, %s\n", termsafe.String(c.Webhook), orDash(c.FailurePolicy), termsafe.String(orDash(c.Target)))
		}
		if c.Key != "" {
			fmt.Fprintf(&b, "  etcd key %s\n", termsafe.String(c.Key))
		}
		if c.Plugin != "" {
			fmt.Fprintf(&b, "  admission plugin %s\n", c.Plugin)
		}
	}
	writeRefusedFlags(&b, r)
	if r.Verdict == EtcdNoSpace && r.Evidence != nil {
		writeSpace(&b, r.Evidence.Space)
	}
	if (r.Verdict == EtcdMemberLost || r.Verdict == EtcdQuorumLost) && r.Evidence != nil {
		writeMembers(&b, r.Evidence.Members)
	}
	if r.Verdict == EncryptionDrift && r.Evidence != nil {
		writeEncryption(&b, r.Evidence.Encryption)
	}
	return b.String()
}

// EvidenceText is what the verdict rests on: each node's state, what etcd
// holds, the log signatures and the notes.
func EvidenceText(r *Report) string {
	var b strings.Builder
	if ev := r.Evidence; ev != nil {
		if r.Verdict != EtcdNoSpace {
			writeSpace(&b, ev.Space)
		}
		if r.Verdict != EtcdMemberLost && r.Verdict != EtcdQuorumLost {
			writeMembers(&b, ev.Members)
		}
		b.WriteString("\nnodes:\n")
		for _, ne := range ev.Nodes {
			fmt.Fprintf(&b, "  %s: %s\n", nodeLabel(ne), nodeText(ne, ev.HealthAsked))
		}
		if ev.Etcd.Asked {
			if ev.Etcd.Error != "" {
				fmt.Fprintf(&b, "  etcd: not read: %s\n", ev.Etcd.Error)
			} else {
				fmt.Fprintf(&b, "  etcd: %d admission objects at revision %d (%s)\n", len(ev.Etcd.Objects), ev.Etcd.Revision, strings.Join(ev.Etcd.Endpoints, ","))
			}
		}
	}
	if len(r.Findings) > 0 {
		b.WriteString("\nevidence:\n")
		for _, f := range r.Findings {
			subject := ""
			if f.Subject != "" {
				subject = " " + f.Subject
			}
			fmt.Fprintf(&b, "  [%s]%s: %s (%d on %s)\n", f.Signature, subject, f.Meaning, f.Count, strings.Join(f.Nodes, ", "))
			for _, l := range f.Lines {
				fmt.Fprintf(&b, "    %dx on %s: %s\n", l.Count, strings.Join(l.Nodes, ","), clip(l.Text))
			}
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nnote: %s", termsafe.Text(n)) // notes and commands name objects read from etcd
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

func nodeLabel(ne NodeEvidence) string {
	if ne.NodeName != "" {
		return fmt.Sprintf("%s (%s)", ne.Node, ne.NodeName)
	}
	return ne.Node
}

func nodeText(ne NodeEvidence, healthAsked bool) string {
	var parts []string
	switch ne.state() {
	case stateReady:
		parts = append(parts, "ready")
	case stateNotReady:
		parts = append(parts, "not ready")
	case stateUnchecked:
		parts = append(parts, "readiness unknown")
	default:
		parts = append(parts, "state unknown")
	}
	if p := ne.Pod; p != nil {
		switch {
		case !p.Found:
			parts = append(parts, "pod not reported by kubelet")
		case p.WaitingReason != "":
			parts = append(parts, fmt.Sprintf("pod %s, %d restarts", p.WaitingReason, p.Restarts))
		case p.Running:
			parts = append(parts, fmt.Sprintf("pod running, %d restarts", p.Restarts))
		default:
			parts = append(parts, fmt.Sprintf("pod not running, %d restarts", p.Restarts))
		}
	}
	if r := ne.Readyz; r != nil {
		switch {
		case r.Error != "":
			parts = append(parts, "readyz unreachable: "+r.Error)
		case !r.Ready:
			parts = append(parts, "readyz failing "+strings.Join(r.FailingChecks, ", "))
		}
	} else if healthAsked {
		parts = append(parts, "no readyz answer")
	}
	if len(ne.DisabledPlugins) > 0 {
		parts = append(parts, "disabled plugins "+strings.Join(ne.DisabledPlugins, ","))
	}
	parts = append(parts, fmt.Sprintf("%d log lines read", ne.LogLinesRead))
	for _, e := range ne.Errors {
		parts = append(parts, "error: "+e)
	}
	return strings.Join(parts, "; ")
}

func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	return s[:headText] + " ... " + s[len(s)-tailText:]
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
