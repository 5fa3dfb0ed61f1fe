package runbooks

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/ctxfile"
)

// The version and kind every runbook file declares.
const (
	APIVersion  = "breakglass.dev/v1alpha1"
	KindRunbook = "Runbook"
)

const (
	maxFileSize    = 1 << 20 // a runbook is a page of YAML; refuse anything absurd before parsing it
	maxDescription = 4000    // characters
)

// Runbook is a named, ordered list of steps, each a built-in action with its
// parameters. Values come from Load (or Builtin/Get/LoadFile/Resolve) and are
// valid: every step's Params is non-nil and of its action's type.
type Runbook struct {
	APIVersion string   `json:"apiVersion" yaml:"apiVersion"`
	Kind       string   `json:"kind" yaml:"kind"`
	Metadata   Metadata `json:"metadata" yaml:"metadata"`
	Spec       Spec     `json:"spec" yaml:"spec"`

	// Source is where it was loaded from: a file path, or builtin/NAME.yaml.
	Source string `json:"source" yaml:"-"`
	// Builtin is true for the runbooks embedded in breakglass.
	Builtin bool `json:"builtin" yaml:"-"`
}

// Metadata names and explains a runbook.
type Metadata struct {
	Name string `json:"name" yaml:"name"`
	// Description is shown by `runbook show` and at the start of a run.
	Description string `json:"description" yaml:"description,omitempty"`
}

// Spec holds the steps.
type Spec struct {
	Steps []Step `json:"steps" yaml:"steps"`
}

// Step is one action of a runbook.
type Step struct {
	Name   string `json:"name"`
	Action Action `json:"action"`
	// Description says why the step exists; shown before it runs.
	Description string `json:"description"`
	// Confirm: ask before acting (unless --yes). Defaults to true for actions
	// that change the cluster, and cannot be false for them.
	Confirm bool `json:"confirm"`
	// Optional: the step is skipped when its inputs are absent, declining its
	// confirmation skips it, and its failure does not stop the run (README).
	Optional bool `json:"optional"`
	// Params are the step's `with`, defaults applied; the concrete type
	// matches Action (*AdmissionDisableParams for admission.disable, ...).
	Params Params `json:"with"`
	// Line is the step's line in its source, for error messages.
	Line int `json:"-"`
}

type stepYAML struct {
	Name        string `yaml:"name"`
	Action      Action `yaml:"action"`
	Description string `yaml:"description,omitempty"`
	Confirm     bool   `yaml:"confirm"`
	Optional    bool   `yaml:"optional"`
	With        Params `yaml:"with,omitempty"`
}

// MarshalYAML writes the step in the file format (no `with` for actions
// without parameters, which Load would refuse).
func (s Step) MarshalYAML() (any, error) {
	y := stepYAML{Name: s.Name, Action: s.Action, Description: s.Description, Confirm: s.Confirm, Optional: s.Optional}
	if a := lookupAction(s.Action); a != nil && len(a.params) > 0 {
		y.With = s.Params
	}
	return y, nil
}

// Marshal writes rb in the file format; Load reads it back to the same runbook.
func Marshal(rb *Runbook) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(rb); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Step returns the step called name, or nil.
func (rb *Runbook) Step(name string) *Step {
	for i := range rb.Spec.Steps {
		if rb.Spec.Steps[i].Name == name {
			return &rb.Spec.Steps[i]
		}
	}
	return nil
}

// Clone returns a deep copy of rb.
func (rb *Runbook) Clone() *Runbook {
	c := *rb
	c.Spec.Steps = make([]Step, len(rb.Spec.Steps))
	for i, s := range rb.Spec.Steps {
		s.Params = cloneParams(s.Params)
		c.Spec.Steps[i] = s
	}
	return &c
}

// Load reads one runbook from data. source names it in errors
// ("source:LINE: msg"). Decoding is strict: unknown fields, unknown actions,
// wrong types and out-of-range values are refused, as a *LoadError.
func Load(data []byte, source string) (*Runbook, error) {
	if source == "" {
		source = "runbook"
	}
	l := &loader{source: source}
	rb, err := l.load(data)
	if err != nil {
		return nil, err
	}
	rb.Source = source
	return rb, nil
}

// LoadFile reads a runbook file.
func LoadFile(path string) (*Runbook, error) { return LoadFileContext(context.Background(), path) }

// LoadFileContext is LoadFile stopped by ctx, with its cause: a FIFO or a
// stalled pipe named as the runbook does not keep Ctrl-C waiting.
func LoadFileContext(ctx context.Context, path string) (*Runbook, error) {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &NotFoundError{Name: path, File: true, Known: BuiltinNames(), Err: err}
	}
	if err == nil && st.IsDir() {
		return nil, (&LoadError{Source: path, Msg: "is a directory, not a runbook file"}).hint("give a runbook file (DIR/NAME.yaml) or a builtin name: breakglass runbook list")
	}
	data, err := ctxfile.ReadFile(ctx, path, maxFileSize+1)
	switch {
	case ctx.Err() != nil:
		return nil, err
	case errors.Is(err, fs.ErrNotExist):
		return nil, &NotFoundError{Name: path, File: true, Known: BuiltinNames(), Err: err}
	case errors.Is(err, fs.ErrPermission):
		return nil, (&LoadError{Source: path, Msg: "cannot be read: permission denied"}).hint("make it readable to this user (ls -l " + path + "), or copy it somewhere that is")
	case err != nil:
		return nil, fmt.Errorf("read runbook: %w", err)
	}
	return Load(data, path)
}

// Resolve finds a runbook by builtin name or by file path. A runbook name is
// a DNS label, so anything else (a '/', a '.', ".yaml") is taken as a path:
// which file is read never depends on the current directory's contents.
func Resolve(nameOrPath string) (*Runbook, error) {
	return ResolveContext(context.Background(), nameOrPath)
}

// ResolveContext is Resolve with a file read stopped by ctx.
func ResolveContext(ctx context.Context, nameOrPath string) (*Runbook, error) {
	if !ValidName(nameOrPath) {
		return LoadFileContext(ctx, nameOrPath)
	}
	return Get(nameOrPath)
}

//go:embed builtin/*.yaml
var builtinFS embed.FS

// builtinOrder puts the common incident first in listings.
var builtinOrder = []string{"webhook-deadlock", "mutating-webhook-deadlock", "policy-deadlock"}

// BuiltinNames lists the embedded runbooks' names, the common incident first.
func BuiltinNames() []string {
	entries, _ := fs.Glob(builtinFS, "builtin/*.yaml")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(path.Base(e), ".yaml"))
	}
	rank := func(n string) int {
		if i := slices.Index(builtinOrder, n); i >= 0 {
			return i
		}
		return len(builtinOrder)
	}
	slices.SortStableFunc(names, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return names
}

// Builtin returns fresh copies of the embedded runbooks (callers may change
// them, e.g. with WithOverrides). The tests guarantee they load.
func Builtin() []*Runbook {
	var out []*Runbook
	for _, n := range BuiltinNames() {
		rb, err := Get(n)
		if err != nil {
			panic("runbooks: embedded runbook does not load: " + err.Error())
		}
		out = append(out, rb)
	}
	return out
}

// Get returns a fresh copy of the builtin runbook called name.
func Get(name string) (*Runbook, error) {
	if !slices.Contains(BuiltinNames(), name) {
		return nil, &NotFoundError{Name: name, Known: BuiltinNames()}
	}
	file := "builtin/" + name + ".yaml"
	data, err := builtinFS.ReadFile(file)
	if err != nil {
		return nil, err
	}
	rb, err := Load(data, file)
	if err != nil {
		return nil, err
	}
	rb.Builtin = true
	return rb, nil
}

// YAML is rb in the file format, to start a custom runbook from: a builtin's
// own file, with its comments; any other runbook as Marshal writes it (a
// user's file is loaded and re-encoded, never echoed). Load reads it back.
func YAML(rb *Runbook) ([]byte, error) {
	if rb.Builtin && slices.Contains(BuiltinNames(), rb.Metadata.Name) {
		return builtinFS.ReadFile("builtin/" + rb.Metadata.Name + ".yaml")
	}
	return Marshal(rb)
}
