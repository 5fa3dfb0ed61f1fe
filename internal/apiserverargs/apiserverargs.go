// Package apiserverargs is what each kube-apiserver binary of the lab
// (v1.32.13 to v1.37.2) accepts on its command line, recorded from the
// binaries themselves: its flags (hidden and deprecated ones included), its
// feature gates with their stage, default and lock, and the API group
// versions --runtime-config may name; and, for everything else, the words it
// refuses them with. The audit predicts with it which of a cluster's
// cluster.apiServer.extraArgs the next minor refuses at start, and the
// diagnosis reads the same words in a crash-looping kube-apiserver's log.
// It also holds the admission plugins kube-apiserver knows and the shape of
// a plugin name (plugins.go), for the command line and runbooks to check
// and the config edit to guard. It imports nothing of the project but
// internal/closest.
//
// # How it was recorded
//
// lab.RecordArgs (run by `go run ./lab/recordargs`, checked in CI by the lab's
// TestRecordedArgsMatchBinaries) ran each binary once per candidate:
//
//   - a flag: `kube-apiserver --NAME=VALUE --version`. pflag parses (and
//     sets, feature gates included) every flag before --version is acted on,
//     so the binary answers at once: it prints its version (accepted; a
//     deprecated flag also prints "Flag --NAME has been deprecated, ..."),
//     or "Error: unknown flag: --NAME";
//   - a feature gate: `--feature-gates=NAME=true --version`, then =false:
//     accepted (a GA or deprecated gate warns "Setting GA feature gate
//     NAME=true. It will be removed in a future release."), or refused in
//     the words of `"command failed" err="..."` (locked, unrecognized,
//     PreAlpha at the binary's version);
//   - a --runtime-config entry: `--runtime-config=GROUP/VERSION=true` with
//     the flags of a real start, loopback only, and an
//     --egress-selector-config-file that does not parse. kube-apiserver
//     checks the group (Validate: "unknown api groups G") and then the
//     version (building its config: "group version G/V that has not been
//     registered"), then reads the egress file: that error means accepted.
//     Groups served by the apiextensions and aggregator servers have their
//     versions checked later than the probe reaches: they are listed in
//     VersionsCheckedLater and their versions are not recorded.
//
// Candidates are the union of every lab binary's --help (flags and the gates
// it lists), the flags marked deprecated or hidden, the feature gates, and
// the API group versions in the k8s.io sources of each version in the module
// cache, and a few names of the past; what is recorded is what the binary
// answered. --help lists neither hidden flags nor GA and deprecated gates,
// which the binaries still accept: they are here.
//
// # Format
//
// recorded/VERSION.json, one JSON object per binary (the Binary type):
//
//	{"version": "v1.34.4",
//	 "words": {"unknownFlag": "Error: unknown flag: --%s", "unknownGate": "unrecognized feature gate: %s",
//	           "unknownGroup": "unknown api groups %s", "unregisteredVersion": "group version %s that has not been registered",
//	           "commandFailed": "\"command failed\" err=\"%s\""},
//	 "flags": [{"name": "cloud-config", "type": "string", "hidden": true, "warning": "Flag --cloud-config has been deprecated, ..."}, ...],
//	 "featureGates": [{"name": "MultiCIDRServiceAllocator", "stage": "GA", "default": true, "lockedTo": true,
//	                   "true": {"warning": "Setting GA feature gate MultiCIDRServiceAllocator=true. It will be removed in a future release."},
//	                   "false": {"refused": "cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true"}}, ...],
//	 "apiGroups": ["", "admissionregistration.k8s.io", ...],
//	 "groupVersions": ["v1", "admissionregistration.k8s.io/v1", ...],
//	 "versionsCheckedLater": ["apiextensions.k8s.io", "apiregistration.k8s.io"]}
//
// A flag or gate that is not listed is refused with the words' template
// (%s is its name); stage is ALPHA or BETA as --help says, GA or DEPRECATED
// as the binary's warning says, PREALPHA when it refuses both values as
// PreAlpha; default is --help's, or the value a locked gate is locked to.
package apiserverargs

import (
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Binary is what one kube-apiserver binary accepts.
type Binary struct {
	Version string `json:"version"` // vX.Y.Z, as `kube-apiserver --version` says
	Words   Words  `json:"words"`
	Flags   []Flag `json:"flags"`
	Gates   []Gate `json:"featureGates"`
	// APIGroups are the groups --runtime-config may name ("" is the core
	// group), GroupVersions the versions of them it accepts ("v1" is core).
	APIGroups     []string `json:"apiGroups"`
	GroupVersions []string `json:"groupVersions"`
	// VersionsCheckedLater are groups whose versions the binary checks only
	// once its extension servers are configured, later than the probe reaches.
	VersionsCheckedLater []string `json:"versionsCheckedLater,omitempty"`
}

// Words are the binary's refusals of names it does not know; %s is the name.
type Words struct {
	UnknownFlag  string `json:"unknownFlag"`  // a whole line of its output
	UnknownGate  string `json:"unknownGate"`  // an error, inside CommandFailed
	UnknownGroup string `json:"unknownGroup"` // an error, inside CommandFailed
	// UnknownGroupByVersion: UnknownGroup names GROUP/VERSION (1.36 and
	// later), not the group alone.
	UnknownGroupByVersion bool   `json:"unknownGroupByVersion,omitempty"`
	UnregisteredVersion   string `json:"unregisteredVersion"` // an error, inside CommandFailed
	// CommandFailed is how its log line carries an error, after the klog header.
	CommandFailed string `json:"commandFailed"`
}

// Flag is one accepted flag.
type Flag struct {
	Name string `json:"name"`
	Type string `json:"type,omitempty"` // pflag's type name, as --help or its parse error says; empty for a bool
	// Hidden: accepted, but not listed by --help (deprecated or hidden).
	Hidden bool `json:"hidden,omitempty"`
	// Warning is what setting it prints (a deprecated flag's notice).
	Warning string `json:"warning,omitempty"`
}

// Gate is one feature gate the binary knows.
type Gate struct {
	Name     string `json:"name"`
	Stage    string `json:"stage,omitempty"`
	Default  *bool  `json:"default,omitempty"`
	LockedTo *bool  `json:"lockedTo,omitempty"`
	True     Answer `json:"true"`
	False    Answer `json:"false"`
}

// Answer is what the binary said to one setting.
type Answer struct {
	// Refused is the error it exits with, in its own words; empty: accepted.
	Refused string `json:"refused,omitempty"`
	// Warning is what it prints when it accepts.
	Warning string `json:"warning,omitempty"`
	// Unknown: the record cannot tell (a group whose versions are checked
	// later than the probe reaches).
	Unknown bool `json:"unknown,omitempty"`
}

// Stages of a gate.
const (
	StageAlpha      = "ALPHA"
	StageBeta       = "BETA"
	StageGA         = "GA"
	StageDeprecated = "DEPRECATED"
	StagePreAlpha   = "PREALPHA"
)

//go:embed recorded/*.json
var recorded embed.FS

var (
	loadOnce sync.Once
	binaries map[string]*Binary
	loadErr  error
)

func load() (map[string]*Binary, error) {
	loadOnce.Do(func() {
		binaries = map[string]*Binary{}
		entries, err := recorded.ReadDir("recorded")
		if err != nil {
			loadErr = err
			return
		}
		for _, e := range entries {
			b, err := Decode(mustRead(path.Join("recorded", e.Name())))
			if err != nil {
				loadErr = fmt.Errorf("%s: %w", e.Name(), err)
				return
			}
			if e.Name() != b.Version+".json" {
				loadErr = fmt.Errorf("%s holds the record of %s", e.Name(), b.Version)
				return
			}
			binaries[b.Version] = b
		}
	})
	return binaries, loadErr
}

func mustRead(name string) []byte {
	b, err := recorded.ReadFile(name)
	if err != nil {
		panic(err) // embedded: listed by ReadDir a moment ago
	}
	return b
}

// Decode reads one record, strictly, and indexes it.
func Decode(data []byte) (*Binary, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var b Binary
	if err := dec.Decode(&b); err != nil {
		return nil, err
	}
	if _, _, err := ParseVersion(b.Version); err != nil {
		return nil, err
	}
	for _, w := range []string{b.Words.UnknownFlag, b.Words.UnknownGate, b.Words.UnknownGroup, b.Words.UnregisteredVersion, b.Words.CommandFailed} {
		if strings.Count(w, "%s") != 1 {
			return nil, fmt.Errorf("words: %q has no single %%s", w)
		}
	}
	b.sort()
	return &b, nil
}

// Encode writes the record as the files hold it: sorted, indented.
func (b *Binary) Encode() ([]byte, error) {
	b.sort()
	out, err := json.MarshalIndent(b, "", " ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func (b *Binary) sort() {
	sort.Slice(b.Flags, func(i, j int) bool { return b.Flags[i].Name < b.Flags[j].Name })
	sort.Slice(b.Gates, func(i, j int) bool { return b.Gates[i].Name < b.Gates[j].Name })
	sort.Strings(b.APIGroups)
	sort.Strings(b.GroupVersions)
	sort.Strings(b.VersionsCheckedLater)
}

// Versions lists the recorded binaries, oldest first.
func Versions() []string {
	bs, _ := load()
	out := make([]string, 0, len(bs))
	for v := range bs {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return less(out[i], out[j]) })
	return out
}

func less(a, b string) bool {
	am, ap, _ := ParseVersion(a)
	bm, bp, _ := ParseVersion(b)
	if am != bm {
		return am < bm
	}
	return ap < bp
}

// ParseVersion reads "v1.34.4" (or "1.34.4") as minor 34, patch 4.
func ParseVersion(v string) (minor, patch int, err error) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) != 3 || parts[0] != "1" {
		return 0, 0, fmt.Errorf("%q is not a Kubernetes version vX.Y.Z", v)
	}
	if minor, err = strconv.Atoi(parts[1]); err != nil {
		return 0, 0, fmt.Errorf("%q is not a Kubernetes version vX.Y.Z", v)
	}
	if patch, err = strconv.Atoi(parts[2]); err != nil {
		return 0, 0, fmt.Errorf("%q is not a Kubernetes version vX.Y.Z", v)
	}
	return minor, patch, nil
}

// NotRecordedError: no binary of that version, or minor, was recorded.
type NotRecordedError struct{ Version string }

func (e *NotRecordedError) Error() string {
	return fmt.Sprintf("no kube-apiserver %s was recorded (recorded: %s)", e.Version, strings.Join(Versions(), ", "))
}

// For returns the record of a version: vX.Y.Z exactly, or a minor ("1.34",
// "v1.34") for the one binary of that minor the lab records.
func For(version string) (*Binary, error) {
	bs, err := load()
	if err != nil {
		return nil, err
	}
	if b, ok := bs["v"+strings.TrimPrefix(version, "v")]; ok {
		return b, nil
	}
	minor := strings.TrimPrefix(version, "v")
	if strings.Count(minor, ".") == 1 {
		var found *Binary
		for v, b := range bs {
			if strings.HasPrefix(v, "v"+minor+".") {
				if found != nil {
					return nil, fmt.Errorf("two kube-apiserver %s binaries are recorded: name the patch version", minor)
				}
				found = b
			}
		}
		if found != nil {
			return found, nil
		}
	}
	return nil, &NotRecordedError{Version: version}
}

// Flag returns the flag of that name (without dashes).
func (b *Binary) Flag(name string) (Flag, bool) {
	i, ok := slices.BinarySearchFunc(b.Flags, name, func(f Flag, n string) int { return strings.Compare(f.Name, n) })
	if !ok {
		return Flag{}, false
	}
	return b.Flags[i], true
}

// Gate returns the gate of that name.
func (b *Binary) Gate(name string) (Gate, bool) {
	i, ok := slices.BinarySearchFunc(b.Gates, name, func(g Gate, n string) int { return strings.Compare(g.Name, n) })
	if !ok {
		return Gate{}, false
	}
	return b.Gates[i], true
}

// SetFlag is what the binary says to --NAME.
func (b *Binary) SetFlag(name string) Answer {
	f, ok := b.Flag(name)
	if !ok {
		return Answer{Refused: fmt.Sprintf(b.Words.UnknownFlag, name)}
	}
	return Answer{Warning: f.Warning}
}

// SetGate is what the binary says to --feature-gates=NAME=VALUE.
func (b *Binary) SetGate(name string, value bool) Answer {
	g, ok := b.Gate(name)
	if !ok {
		return Answer{Refused: fmt.Sprintf(b.Words.UnknownGate, name)}
	}
	if value {
		return g.True
	}
	return g.False
}

// RuntimeConfig is what the binary says to one --runtime-config key:
// GROUP/VERSION or GROUP/VERSION/RESOURCE, "v1" (the core group), or one of
// the api/all, api/ga, api/beta, api/alpha, api/legacy switches.
func (b *Binary) RuntimeConfig(key string) Answer {
	switch key {
	case "v1", "api/v1", "api/all", "api/ga", "api/beta", "api/alpha", "api/legacy":
		return Answer{}
	}
	tokens := strings.Split(key, "/")
	if len(tokens) < 2 || len(tokens) > 3 || tokens[0] == "" || tokens[1] == "" {
		return Answer{Unknown: true} // refused in words the record does not hold
	}
	group := tokens[0]
	if !slices.Contains(b.APIGroups, group) {
		return Answer{Refused: b.Words.UnknownGroupRefusal(group + "/" + tokens[1])}
	}
	if slices.Contains(b.VersionsCheckedLater, group) {
		return Answer{Unknown: true}
	}
	gv := group + "/" + tokens[1]
	if !slices.Contains(b.GroupVersions, gv) {
		return Answer{Refused: fmt.Sprintf(b.Words.UnregisteredVersion, gv)}
	}
	return Answer{}
}

// UnknownGroupRefusal is the refusal of GROUP/VERSION whose group the
// binary does not know.
func (w Words) UnknownGroupRefusal(groupVersion string) string {
	if w.UnknownGroupByVersion {
		return fmt.Sprintf(w.UnknownGroup, groupVersion)
	}
	g, _, _ := strings.Cut(groupVersion, "/")
	return fmt.Sprintf(w.UnknownGroup, g)
}

// LogLine is how an error of CommandFailed appears after the klog header.
func (b *Binary) LogLine(err string) string {
	return fmt.Sprintf(b.Words.CommandFailed, strings.ReplaceAll(err, `"`, `\"`))
}
