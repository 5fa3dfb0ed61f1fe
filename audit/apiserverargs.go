package audit

// The other way an upgrade kills kube-apiserver: the cluster's own
// cluster.apiServer.extraArgs, carried from the old minor to the new one,
// which the new binary refuses at start (a feature gate locked or gone, a
// flag removed, a --runtime-config version it no longer registers). It
// exits at once, and the kubelet restarts it with back-off, forever. What
// each minor accepts was recorded from the lab's binaries
// (internal/apiserverargs); the reasons below are the binary's own words.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/internal/yamlnode"
)

// RiskWarning: the new minor starts with it, and prints a warning (a GA or
// deprecated gate, a deprecated flag). Not a risk to the start: exit 0.
const RiskWarning Risk = "warning"

// ExtraArgs are the cluster.apiServer.extraArgs of one machine config.
type ExtraArgs struct {
	Source string     // where they were read: a node, or a file
	Args   []ExtraArg // in the config's order
}

// ExtraArg is one key, its value as Talos renders it into flags: a string
// is one --KEY=VALUE, a list (Talos 1.13+) one --KEY=ITEM per item.
type ExtraArg struct {
	Key    string
	List   bool
	Values []string
}

// Items are the comma-separated items of every value, as kube-apiserver
// reads a list flag.
func (a ExtraArg) Items() []string { return flaglist.Split(a.Values...) }

// ErrNotMachineConfig: the input holds no Talos v1alpha1 document with a
// cluster section.
var ErrNotMachineConfig = errors.New("not a Talos machine config (no v1alpha1 document with a cluster section)")

// MachineConfigArgs reads cluster.apiServer.extraArgs from a Talos machine
// config (any document order; other documents are left alone). A config
// without extraArgs gives none; data that is not a machine config gives
// ErrNotMachineConfig.
func MachineConfigArgs(source string, data []byte) (ExtraArgs, error) {
	out := ExtraArgs{Source: source}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	found := false
	for n := 1; ; n++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		bad := func(err error) error { return &ParseError{Source: source, Document: n, Err: err, MachineConfig: true} }
		if err != nil {
			return out, bad(err)
		}
		if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}
		root := doc.Content[0]
		if _, k := yamlnode.Get(root, "kind"); k != nil {
			continue // a typed document (HostnameConfig, ...)
		}
		cluster := yamlnode.Resolve(yamlnode.Value(root, "cluster"))
		if cluster == nil || cluster.Kind != yaml.MappingNode {
			continue
		}
		found = true
		api := yamlnode.Resolve(yamlnode.Value(cluster, "apiServer"))
		if api == nil || api.Kind != yaml.MappingNode {
			continue
		}
		extra := yamlnode.Resolve(yamlnode.Value(api, "extraArgs"))
		if extra == nil || extra.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(extra.Content); i += 2 {
			k, v := extra.Content[i], yamlnode.Resolve(extra.Content[i+1])
			arg := ExtraArg{Key: k.Value}
			switch v.Kind {
			case yaml.ScalarNode:
				arg.Values = []string{scalarString(v)}
			case yaml.SequenceNode:
				arg.List = true
				for _, it := range v.Content {
					if it = yamlnode.Resolve(it); it.Kind != yaml.ScalarNode {
						return out, bad(fmt.Errorf("cluster.apiServer.extraArgs.%s: an item at line %d is not a string", k.Value, it.Line))
					}
					arg.Values = append(arg.Values, scalarString(it))
				}
			default:
				return out, bad(fmt.Errorf("cluster.apiServer.extraArgs.%s at line %d is neither a string nor a list of strings", k.Value, k.Line))
			}
			out.Args = append(out.Args, arg)
		}
	}
	if !found {
		return out, ErrNotMachineConfig
	}
	return out, nil
}

// scalarString is a scalar's string as Talos reads it into extraArgs: a
// null (~, null, nothing) is the empty string, not the text "~".
func scalarString(n *yaml.Node) string {
	if n.ShortTag() == "!!null" {
		return ""
	}
	return n.Value
}

// ArgFinding is the verdict on one extraArgs key, or one item of it (a
// feature gate, a --runtime-config entry).
type ArgFinding struct {
	Source string `json:"source"`
	Flag   string `json:"flag"`
	Item   string `json:"item,omitempty"`
	// Risk: deadlock (ToVersion refuses it and exits at once), warning
	// (accepted with a warning), unknown (the record cannot tell).
	Risk Risk `json:"risk"`
	// OnTo and OnFrom are what kube-apiserver of each version says to it, in
	// its own words ("" accepted silently).
	OnTo   string `json:"onTo"`
	OnFrom string `json:"onFrom"`
	// FromRefuses: the old minor refuses it too (the cluster cannot run it now).
	FromRefuses bool `json:"fromRefuses,omitempty"`
	// Recorded names the binaries whose answers these are.
	Recorded string `json:"recorded"`
	// Fix says what to change; FixedValue is the key's value with every
	// item ToVersion refuses taken out ("" with RemoveKey: the key goes).
	Fix        string `json:"fix,omitempty"`
	FixedValue string `json:"fixedValue,omitempty"`
	RemoveKey  bool   `json:"removeKey,omitempty"`
}

// Subject is the flag, with its item.
func (f ArgFinding) Subject() string {
	if f.Item == "" {
		return "--" + f.Flag
	}
	return "--" + f.Flag + " " + f.Item
}

// CheckExtraArgs says, for each key and item of the extraArgs, what
// kube-apiserver `to` (a minor, "1.34") says to it at start, beside what
// `from` says. Only what is refused, warned about or cannot be told is
// reported.
func CheckExtraArgs(args []ExtraArgs, from, to string) ([]ArgFinding, error) {
	toRec, err := apiserverargs.For(to)
	if err != nil {
		var nr *apiserverargs.NotRecordedError
		if !errors.As(err, &nr) {
			return nil, err
		}
		var out []ArgFinding
		for _, ea := range args {
			if len(ea.Args) > 0 {
				out = append(out, ArgFinding{Source: ea.Source, Flag: "*", Risk: RiskUnknown, OnTo: err.Error()})
			}
		}
		return out, nil
	}
	fromRec, _ := apiserverargs.For(from) // nil: not recorded, said as such
	out := []ArgFinding{}
	for _, ea := range args {
		for _, a := range ea.Args {
			out = append(out, checkArg(ea.Source, a, fromRec, toRec)...)
		}
	}
	return out, nil
}

func checkArg(source string, a ExtraArg, from, to *apiserverargs.Binary) []ArgFinding {
	recorded := to.Version
	if from != nil && from != to {
		recorded = from.Version + " -> " + to.Version
	}
	minorOf := func(b *apiserverargs.Binary) string {
		if b == nil {
			return "the old minor"
		}
		m, _, _ := apiserverargs.ParseVersion(b.Version)
		return fmt.Sprintf("1.%d", m)
	}
	toName, fromName := minorOf(to), minorOf(from)
	ask := func(q func(*apiserverargs.Binary) apiserverargs.Answer) (onTo, onFrom apiserverargs.Answer, fromKnown bool) {
		onTo = q(to)
		if from != nil {
			return onTo, q(from), true
		}
		return onTo, apiserverargs.Answer{}, false
	}
	verdict := func(item string, onTo, onFrom apiserverargs.Answer, fromKnown bool) (ArgFinding, bool) {
		f := ArgFinding{Source: source, Flag: a.Key, Item: item, Recorded: recorded, FromRefuses: fromKnown && onFrom.Refused != ""}
		f.OnTo, f.OnFrom = said(onTo), said(onFrom)
		if !fromKnown {
			f.OnFrom = "not recorded"
		}
		switch {
		case onTo.Refused != "":
			f.Risk = RiskDeadlock
		case onTo.Unknown:
			f.Risk = RiskUnknown
		case onTo.Warning != "":
			f.Risk = RiskWarning
		default:
			return f, false
		}
		return f, true
	}

	var out []ArgFinding
	onTo, onFrom, fk := ask(func(b *apiserverargs.Binary) apiserverargs.Answer { return b.SetFlag(a.Key) })
	if f, ok := verdict("", onTo, onFrom, fk); ok {
		if f.Risk == RiskDeadlock {
			f.RemoveKey = true
			f.Fix = fmt.Sprintf("remove cluster.apiServer.extraArgs[%q]: kube-apiserver %s has no --%s", a.Key, toName, a.Key)
			if onFrom.Warning != "" {
				f.Fix += fmt.Sprintf(" (%s only warned: %s)", fromName, onFrom.Warning)
			}
		} else if f.Risk == RiskWarning {
			f.Fix = fmt.Sprintf("%s still accepts it; plan its removal before the flag goes", toName)
		}
		out = append(out, f)
		if f.Risk == RiskDeadlock {
			return out // pflag stops at the unknown flag: its value is never read
		}
	}
	items := a.Items()
	switch a.Key {
	case "feature-gates":
		for _, item := range items {
			name, value, ok := parseGateItem(item)
			if !ok {
				// Refused by kube-apiserver's parsing of the flag, the same
				// on every minor: on the old one too.
				const notGate = "not NAME=true|false: kube-apiserver refuses it (invalid value), in words the record does not hold"
				out = append(out, ArgFinding{Source: source, Flag: a.Key, Item: item, Risk: RiskUnknown, Recorded: recorded,
					OnTo: notGate, OnFrom: notGate, FromRefuses: true})
				continue
			}
			onTo, onFrom, fk := ask(func(b *apiserverargs.Binary) apiserverargs.Answer { return b.SetGate(name, value) })
			f, ok := verdict(item, onTo, onFrom, fk)
			if !ok {
				continue
			}
			g, known := to.Gate(name)
			switch {
			case f.Risk == RiskDeadlock && known && g.LockedTo != nil:
				f.Fix = fmt.Sprintf("remove %s from feature-gates: kube-apiserver %s locks %s to %t, so the gate can no longer be set otherwise", item, toName, name, *g.LockedTo)
				if !*g.LockedTo == value && onFrom.Refused == "" {
					f.Fix += fmt.Sprintf("; %s=%t works on both minors, but it is what %s does anyway (%s)", name, *g.LockedTo, toName, describeAnswer(to.SetGate(name, *g.LockedTo)))
				}
			case f.Risk == RiskDeadlock && !known:
				f.Fix = fmt.Sprintf("remove %s from feature-gates: kube-apiserver %s has no gate %s", item, toName, name)
			case f.Risk == RiskDeadlock:
				f.Fix = fmt.Sprintf("remove %s from feature-gates", item)
			case f.Risk == RiskWarning:
				f.Fix = fmt.Sprintf("%s accepts it; remove it before the gate goes", toName)
			}
			out = append(out, f)
		}
	case "runtime-config":
		for _, item := range items {
			key, _, _ := strings.Cut(item, "=")
			key = strings.TrimSpace(key)
			onTo, onFrom, fk := ask(func(b *apiserverargs.Binary) apiserverargs.Answer { return b.RuntimeConfig(key) })
			f, ok := verdict(item, onTo, onFrom, fk)
			if !ok {
				continue
			}
			switch f.Risk {
			case RiskDeadlock:
				f.Fix = fmt.Sprintf("remove %s from runtime-config: kube-apiserver %s does not register %s", item, toName, key)
				if g, _, _ := strings.Cut(key, "/"); len(servedVersions(to, g)) > 0 {
					f.Fix += fmt.Sprintf(" (it registers %s)", strings.Join(servedVersions(to, g), ", "))
				}
			case RiskUnknown:
				f.OnTo = fmt.Sprintf("the record cannot tell: kube-apiserver %s checks the versions of %s later than the recording reached", toName, key)
			}
			out = append(out, f)
		}
	}
	// What stays of the key once every item it refuses is taken out.
	var refused []string
	for _, f := range out {
		if f.Risk == RiskDeadlock && f.Item != "" {
			refused = append(refused, f.Item)
		}
	}
	if len(refused) > 0 {
		kept := slices.DeleteFunc(slices.Clone(items), func(s string) bool { return slices.Contains(refused, s) })
		for i := range out {
			if out[i].Risk == RiskDeadlock && out[i].Item != "" {
				out[i].FixedValue, out[i].RemoveKey = strings.Join(kept, ","), len(kept) == 0
			}
		}
	}
	return out
}

func said(a apiserverargs.Answer) string {
	switch {
	case a.Refused != "":
		return a.Refused
	case a.Warning != "":
		return a.Warning
	case a.Unknown:
		return "cannot tell"
	}
	return ""
}

func describeAnswer(a apiserverargs.Answer) string {
	if a.Warning != "" {
		return "it warns: " + a.Warning
	}
	if a.Refused != "" {
		return "refused: " + a.Refused
	}
	return "accepted"
}

// parseGateItem reads NAME=VALUE or kube:NAME=VALUE as kube-apiserver does
// (strconv.ParseBool).
func parseGateItem(item string) (string, bool, bool) {
	k, v, ok := strings.Cut(item, "=")
	if !ok {
		return "", false, false
	}
	k = strings.TrimPrefix(strings.TrimSpace(k), "kube:")
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil || k == "" {
		return "", false, false
	}
	return k, b, true
}

func servedVersions(b *apiserverargs.Binary, group string) []string {
	var out []string
	for _, gv := range b.GroupVersions {
		if g, v, ok := strings.Cut(gv, "/"); ok && g == group {
			out = append(out, v)
		}
	}
	return out
}

// argsRisk is the worst risk of the findings (a warning is none).
func argsRisk(fs []ArgFinding) Risk {
	worst := RiskNone
	for _, f := range fs {
		if f.Risk.severity() > worst.severity() {
			worst = f.Risk
		}
	}
	return worst
}
