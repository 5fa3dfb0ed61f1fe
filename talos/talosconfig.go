package talos

// Reading a talosconfig, and saying in plain words what is wrong with one:
// at 3 a.m. "EOF" or "cannot construct !!seq" does not tell anyone that
// TALOSCONFIG points at a kubeconfig.

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/breakglass-dev/breakglass/internal/ctxfile"
	"io/fs"
	"os"
	"slices"
	"strings"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"gopkg.in/yaml.v3"
)

// talosconfigError is a talosconfig breakglass cannot use, with the next step.
type talosconfigError struct {
	msg  string
	hint string
}

func (e *talosconfigError) Error() string   { return e.msg }
func (e *talosconfigError) Unwrap() error   { return ErrConfig }
func (e *talosconfigError) Hints() []string { return []string{e.hint} }

const freshTalosconfig = "check it with: talosctl config info (or get a fresh one: talosctl config merge, omnictl talosconfig)"

// readTalosconfig reads the talosconfig at path and the context to use
// (name, or its current one). It never creates the file. A FIFO with no
// writer does not keep ctx's cancellation waiting.
func readTalosconfig(ctx context.Context, path, name string) (*clientconfig.Config, string, error) {
	raw, err := ctxfile.ReadFile(ctx, path, 0)
	switch {
	case ctx.Err() != nil:
		return nil, "", err
	case errors.Is(err, fs.ErrNotExist):
		return nil, "", &talosconfigError{fmt.Sprintf("cannot read talosconfig %s: no such file", path), "pass --talosconfig PATH or set TALOSCONFIG"}
	case err != nil && isDir(path):
		return nil, "", &talosconfigError{fmt.Sprintf("talosconfig %s is a directory, not a file", path), "pass the file: --talosconfig PATH (usually ~/.talos/config)"}
	case err != nil:
		return nil, "", &talosconfigError{fmt.Sprintf("cannot read talosconfig %s: %v", path, errors.Unwrap(err)), "pass --talosconfig PATH or set TALOSCONFIG"}
	case strings.TrimSpace(string(raw)) == "":
		return nil, "", &talosconfigError{fmt.Sprintf("talosconfig %s is empty", path), "get one with: talosctl config merge FILE (or omnictl talosconfig), then pass --talosconfig PATH"}
	case isKubeconfig(raw):
		return nil, "", &talosconfigError{fmt.Sprintf("%s is a kubeconfig, not a talosconfig", path),
			"breakglass talks to the Talos API: pass the talosconfig (talosctl config info shows it), e.g. --talosconfig ~/.talos/config"}
	}
	cfg, err := clientconfig.FromBytes(raw)
	if err != nil {
		return nil, "", &talosconfigError{fmt.Sprintf("talosconfig %s is not valid: %s", path, firstLine(err.Error())), freshTalosconfig}
	}
	names := make([]string, 0, len(cfg.Contexts))
	for n := range cfg.Contexts {
		names = append(names, n)
	}
	slices.Sort(names)
	choose := "choose one with --context NAME"
	if len(names) > 0 {
		choose = "choose one: --context " + names[0]
	}
	if name == "" {
		name = cfg.Context
		if name == "" {
			return nil, "", &talosconfigError{fmt.Sprintf("talosconfig %s has no current context (it has: %s)", path, listOrNone(names)), choose}
		}
	}
	tctx, ok := cfg.Contexts[name]
	if !ok || tctx == nil {
		return nil, "", &talosconfigError{fmt.Sprintf("talosconfig %s has no context %q (it has: %s)", path, name, listOrNone(names)), choose}
	}
	for _, f := range []struct{ field, value, kind string }{{"ca", tctx.CA, "certificate"}, {"crt", tctx.Crt, "certificate"}, {"key", tctx.Key, "private key"}} {
		if f.value == "" {
			continue
		}
		pemBytes, err := base64.StdEncoding.DecodeString(f.value)
		if err != nil {
			return nil, "", &talosconfigError{fmt.Sprintf("talosconfig %s, context %q: its %s is not base64", path, name, f.field), freshTalosconfig}
		}
		if block, _ := pem.Decode(pemBytes); block == nil {
			return nil, "", &talosconfigError{fmt.Sprintf("talosconfig %s, context %q: its %s is not a PEM %s", path, name, f.field, f.kind), freshTalosconfig}
		}
	}
	return cfg, name, nil
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// isKubeconfig recognises a kubeconfig: kind Config with clusters.
func isKubeconfig(raw []byte) bool {
	var doc struct {
		Kind     string `yaml:"kind"`
		Clusters []any  `yaml:"clusters"`
	}
	return yaml.Unmarshal(raw, &doc) == nil && (doc.Kind == "Config" || len(doc.Clusters) > 0)
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// LooseKeyWarning warns, as ssh does, when the talosconfig at path holds a
// private key and group or others may read it; "" otherwise.
func LooseKeyWarning(path string) string {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o077 == 0 {
		return ""
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	cfg, err := clientconfig.FromBytes(raw)
	if err != nil {
		return ""
	}
	for _, c := range cfg.Contexts {
		if c != nil && c.Key != "" {
			return fmt.Sprintf("talosconfig %s holds a private key and is readable by others (mode %04o)", path, st.Mode().Perm())
		}
	}
	return ""
}
