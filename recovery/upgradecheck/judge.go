package upgradecheck

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
)

// etcdUnread says why etcd's keys were not read ("" when they were).
func (f *facts) etcdUnread() string {
	switch {
	case f.etcdErr != nil:
		return "etcd was not reached (see access)"
	case f.quorumLost:
		return "etcd has lost its quorum, and serves no read of its keys (see etcd-members)"
	}
	return ""
}

// configsUnread names the control planes whose machine config was not read.
func configsUnread(f *facts) []string {
	var out []string
	for _, n := range controlPlanes(f.nodes) {
		if n.Config == nil {
			out = append(out, n.label())
		}
	}
	return out
}

// answered are the nodes whose Talos API answered.
func answered(ns []*nodeFacts) []*nodeFacts {
	var out []*nodeFacts
	for _, n := range ns {
		if n.TalosErr == nil {
			out = append(out, n)
		}
	}
	return out
}

func controlPlanes(ns []*nodeFacts) []*nodeFacts {
	var out []*nodeFacts
	for _, n := range ns {
		if n.ControlPlane {
			out = append(out, n)
		}
	}
	return out
}

// errLine is an error for one line of evidence, safe for a terminal.
func errLine(err error) string { return termsafe.Text(err.Error()) }

// hintsOf are an error's hints, as fix lines.
func hintsOf(err error) []string {
	var out []string
	for _, h := range failure.Hints(err) {
		out = append(out, termsafe.Text(h))
	}
	return out
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

func orUnknown(s string) string {
	if s == "" {
		return "(no image tag)"
	}
	return s
}

func firstFew(names []string, n int) string {
	sort.Strings(names)
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}

// contextFlag is how a printed command names the cluster.
func contextFlag(f *facts) string {
	if f.cluster == "" {
		return ""
	}
	return "--context " + f.cluster + " "
}

func notChecked(c Check, why string) Check {
	c.Verdict, c.NotChecked, c.Summary = NoGo, true, "not checked: "+why
	return c
}

// unread is the check of something that could not be read: a no-go, not
// checked, saying what and why, with the error's hints.
func unread(what string, err error) Check {
	return Check{Verdict: NoGo, NotChecked: true, Summary: what + ": " + errLine(err), Fix: hintsOf(err)}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string(nil), s[:n]...), fmt.Sprintf("and %d more", len(s)-n))
}
