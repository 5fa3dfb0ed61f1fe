package main

// The checks every command gets before its action runs: unknown commands,
// argument counts and every flag value. A bad command line must be refused
// (exit 2, with the accepted values and the next step) before anything is
// dialled or written.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
	"github.com/breakglass-dev/breakglass/internal/closest"
	"github.com/breakglass-dev/breakglass/internal/command"
	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/internal/kinds"
	"github.com/breakglass-dev/breakglass/internal/termsafe"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
)

// commandSpec is what the checks below know of one command beyond its
// flags. Each command declares its own beside its definition (declare, in
// an init function of the command's file); a command that declares none
// gets the checks every command gets.
type commandSpec struct {
	// args is how many arguments it takes; nil: it checks its own (etcd
	// delete, etcd restore, runbook show|run).
	args *argSpec
	// required is a FILE flag it needs: checked here, after the arguments,
	// rather than by urfave/cli (Required), which would refuse first and
	// without a hint.
	required string
	// outputs are its -o values, when not text and json.
	outputs []string
	// state is how it uses the state directory.
	state stateUse
	// journaled: it changes the cluster and keeps an incident journal.
	journaled bool
	// talos is whether it reads the talosconfig.
	talos talosUse
	// newFile is the hint for its --out, which must name a new file (an
	// empty --out is the command's to fill in).
	newFile string
	// backupDir: its --backup-dir must be a directory, or creatable.
	backupDir bool
}

// argSpec is how many positional arguments a command takes.
type argSpec struct {
	min, max int    // max -1: any number
	msg      string // what it takes, when the count is wrong
	hint     string
}

// takes is an argSpec.
func takes(min, max int, msg, hint string) *argSpec { return &argSpec{min, max, msg, hint} }

type stateUse int

const (
	stateNone  stateUse = iota
	stateRead           // reads its records
	stateWrite          // writes journals, records or backups there
)

type talosUse int

const (
	talosNone    talosUse = iota
	talosAlways           // every run reads the talosconfig
	talosForEtcd          // when its etcd flags need it (recovery.EtcdOptions.NeedsTalos)
)

// commandSpecs are the declared specs, by command path ("etcd delete").
var commandSpecs = map[string]commandSpec{}

// declare records the spec of the command at path; called from init
// functions only, beside the command's definition.
func declare(path string, spec commandSpec) {
	if _, dup := commandSpecs[path]; dup {
		panic("command spec declared twice: " + path)
	}
	commandSpecs[path] = spec
}

// durationRanges are the accepted ranges of the duration flags.
var durationRanges = map[string][2]time.Duration{
	"revert-after":    {runbooks.MinRevertAfter, 24 * time.Hour},
	"wait-timeout":    {time.Second, 24 * time.Hour},
	"timeout":         {time.Second, 24 * time.Hour},
	"slow-timeout":    {time.Second, 30 * time.Second}, // a webhook's timeoutSeconds is 1 to 30
	"connect-timeout": {time.Second, 5 * time.Minute},
}

// intRanges are the accepted ranges of the count flags.
var intRanges = map[string][2]int{
	"tail": {1, runbooks.MaxTailLines},
	"top":  {1, 1000},
}

// enumValues are the accepted values of the enum flags; --kind is checked
// by kinds.Parse, which also takes resource and kind names.
var enumValues = map[string][]string{
	"fix-format": {"manifest", "json-patch", "strategic-patch"},
	"fix-style":  {"apiserver", "kinds"},
	"format":     {"text", "markdown"},
}

// instrument gives every command of app the checks above and makes an
// unknown command or a flag parse error a usage error naming the next step.
func instrument(app *cli.App) {
	if app.Metadata == nil {
		app.Metadata = map[string]any{}
	}
	app.Action = unknownCommand(nil, app.Commands)
	app.OnUsageError = usageHint("breakglass --help")
	for _, c := range app.Commands {
		instrumentCommand(c, c.Name)
	}
}

func instrumentCommand(c *cli.Command, path string) {
	if c.SkipFlagParsing {
		return // handed over to another program (lab)
	}
	c.OnUsageError = usageHint("breakglass " + path + " --help")
	if len(c.Subcommands) > 0 {
		if c.Action == nil {
			c.Action = unknownCommand(&path, c.Subcommands)
		}
		for _, sub := range c.Subcommands {
			instrumentCommand(sub, path+" "+sub.Name)
		}
		return
	}
	if c.Action == nil {
		return
	}
	action := c.Action
	c.Action = func(ctx *cli.Context) error {
		ctx.App.Metadata[commandPathKey] = path // for what an interruption says
		if err := checkCommandLine(ctx, path); err != nil {
			return err
		}
		return action(ctx)
	}
}

// usageHint turns urfave/cli's parse errors into usage errors whose hint is
// the command's help.
func usageHint(help string) cli.OnUsageErrorFunc {
	return func(c *cli.Context, err error, _ bool) error {
		return failure.Input("see: "+help, "%s", command.ExplainParseError(c, strings.TrimPrefix(err.Error(), "breakglass: ")))
	}
}

// unknownCommand is the action of the app and of command groups: a word
// that names no command is a usage error with the closest command.
func unknownCommand(group *string, commands []*cli.Command) cli.ActionFunc {
	return func(c *cli.Context) error {
		if !c.Args().Present() {
			return cli.ShowSubcommandHelp(c)
		}
		prefix, help := "", "breakglass --help"
		if group != nil {
			prefix, help = *group+" ", "breakglass "+*group+" --help"
		}
		word := c.Args().First()
		if word == "help" {
			// "breakglass help [COMMAND]", "breakglass admission help", as cli's own help command.
			if group != nil || c.Args().Len() == 1 {
				return cli.ShowSubcommandHelp(c)
			}
			if word = c.Args().Get(1); c.App.Command(word) != nil {
				return cli.ShowCommandHelp(c, word)
			}
		}
		var names []string
		for _, cmd := range commands {
			if !cmd.Hidden {
				names = append(names, cmd.Name)
			}
		}
		hint := "see the commands: " + help
		if m := closest.Typo(word, names); m != "" {
			hint = "did you mean: breakglass " + prefix + m + "?"
		}
		return failure.Input(hint, "unknown command %q", prefix+word)
	}
}

// checkCommandLine checks the command's arguments and flag values.
func checkCommandLine(c *cli.Context, path string) error {
	spec := commandSpecs[path]
	if a := spec.args; a != nil {
		if n := c.Args().Len(); n < a.min || (a.max >= 0 && n > a.max) {
			// A file given without -f: the hint names it with -f.
			return failure.Input(strings.ReplaceAll(a.hint, "ARG", c.Args().First()), "%s", a.msg)
		}
	}
	if f := spec.required; f != "" && c.String(f) == "" {
		return failure.Input(fmt.Sprintf("breakglass %s --%s FILE", path, f), "%s needs --%s FILE", path, f)
	}
	if err := checkOutput(c, spec.outputs); err != nil {
		return err
	}
	if err := checkFlagValues(c); err != nil {
		return err
	}
	if err := etcdOptions(c).Check(); err != nil {
		return err
	}
	if err := checkAddresses(c); err != nil {
		return err
	}
	if spec.state != stateNone {
		dir := c.String("state-dir")
		if dir == "" {
			dir = defaultStateDir()
		}
		if err := checkStateDir(dir, spec.state == stateWrite); err != nil {
			return err
		}
	}
	if err := checkDestination(c, spec); err != nil {
		return err
	}
	warnLooseTalosconfig(c, spec.talos)
	return nil
}

// checkDestination refuses, before a journal is opened or etcd dialled,
// a backup or snapshot destination that cannot be written: a --backup-dir
// that is a file or lies under one, an --out that exists already (nothing
// is ever overwritten) or lies under a file. A missing directory is fine:
// it is created when the file is written.
func checkDestination(c *cli.Context, spec commandSpec) error {
	if d := c.String("backup-dir"); spec.backupDir && d != "" {
		const hint = "give --backup-dir a directory (it is created when absent), or leave it out for the state directory's (STATE-DIR/etcd/CLUSTER-ID/backups)"
		switch file, err := fileInPath(d); {
		case err != nil:
			return failure.Input(hint, "backup directory %s cannot be used: %v", d, err)
		case file == d:
			return failure.Input(hint, "backup directory %s is not a directory", d)
		case file != "":
			return failure.Input(hint, "backup directory %s cannot be created: %s is a file", d, file)
		}
	}
	if out := c.String("out"); spec.newFile != "" && out != "" {
		hint := spec.newFile
		if st, err := os.Lstat(out); err == nil {
			if st.IsDir() {
				return failure.Input(hint, "--out %s is a directory", out)
			}
			return &etcd.FileExistsError{Path: out}
		}
		switch file, err := fileInPath(filepath.Dir(out)); {
		case err != nil:
			return failure.Input(hint, "--out %s cannot be used: %v", out, err)
		case file != "":
			return failure.Input(hint, "--out %s cannot be created: %s is a file", out, file)
		}
	}
	return nil
}

// fileInPath is the first of dir and its parents that exists and is not a
// directory, "" when dir is one or could be created, or why it cannot be
// looked at (e.g. permission denied).
func fileInPath(dir string) (string, error) {
	for p := dir; ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		switch {
		case err == nil && st.IsDir():
			return "", nil
		case err == nil:
			return p, nil
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			return "", errors.Unwrap(err)
		}
		if filepath.Dir(p) == p {
			return "", nil
		}
	}
}

// warnLooseTalosconfig warns, as ssh does, about a talosconfig whose
// private key others can read; the command goes on.
func warnLooseTalosconfig(c *cli.Context, use talosUse) {
	if use == talosNone || use == talosForEtcd && !etcdOptions(c).NeedsTalos() {
		return
	}
	file := c.String("talosconfig")
	if file == "" {
		file = defaultTalosconfig()
	}
	if w := talos.LooseKeyWarning(file); w != "" {
		fmt.Fprintf(c.App.ErrWriter, "breakglass: warning: %s\nhint: chmod 600 %s\n", w, file)
	}
}

func checkOutput(c *cli.Context, allowed []string) error {
	o := c.String("output")
	if allowed == nil {
		allowed = []string{"text", "json"}
	}
	if o == "" || slices.Contains(allowed, o) {
		return nil
	}
	var opts []string
	for _, a := range allowed {
		opts = append(opts, "-o "+a)
	}
	hint := "use " + strings.Join(opts[:len(opts)-1], ", ") + " or " + opts[len(opts)-1]
	return failure.Input(hint, "unknown output format %q", o)
}

// checkFlagValues checks every duration, count, enum and plugin flag the
// command has, whether given or defaulted.
func checkFlagValues(c *cli.Context) error {
	for _, name := range c.FlagNames() {
		if r, ok := durationRanges[name]; ok && c.IsSet(name) {
			if d := c.Duration(name); d < r[0] || d > r[1] {
				return failure.Input(fmt.Sprintf("give --%s a value from %s to %s, e.g. --%s %s", name, r[0], r[1], name, min(10*r[0], r[1])), "--%s %s is out of range: from %s to %s", name, d, r[0], r[1])
			}
		}
		if r, ok := intRanges[name]; ok {
			if n := c.Int(name); n < r[0] || n > r[1] {
				return failure.Input(fmt.Sprintf("give --%s a value from %d to %d, e.g. --%s 500", name, r[0], r[1], name), "--%s %d is out of range: from %d to %d", name, n, r[0], r[1])
			}
		}
		if values, ok := enumValues[name]; ok {
			if v := c.String(name); !slices.Contains(values, v) {
				return enumError(name, v, values)
			}
		}
		switch name {
		case "kind":
			if v := c.String(name); v != "" {
				if _, err := kinds.Parse(v); err != nil {
					return enumError(name, v, kinds.Values)
				}
			}
		case "plugins":
			if c.IsSet(name) {
				if err := checkPlugins(c.StringSlice(name)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func enumError(name, v string, values []string) error {
	var each []string
	for _, x := range values {
		each = append(each, "--"+name+" "+x)
	}
	hint := "give one of: " + strings.Join(each, ", ")
	if m := closest.Typo(v, values); m != "" {
		hint = fmt.Sprintf("did you mean --%s %s?", name, m)
	}
	return failure.Input(hint, "--%s %q is not one of: %s", name, v, strings.Join(values, ", "))
}

// checkPlugins refuses a --plugins that names nothing or names something
// kube-apiserver does not know: it would refuse to start.
func checkPlugins(values []string) error {
	plugins := flaglist.Split(values...)
	if len(plugins) == 0 {
		return failure.Input("name them as kube-apiserver does, comma-separated: --plugins ValidatingAdmissionWebhook,MutatingAdmissionWebhook", "--plugins names no plugin")
	}
	for _, p := range plugins {
		var pe *apiserverargs.PluginError
		if errors.As(apiserverargs.CheckPlugin(p), &pe) {
			return failure.Input(pe.Hint(), "%s", pe.Error())
		}
	}
	return nil
}

// checkAddresses refuses a -n or -e value that no address or host name can
// be (a control character, a space): sent as gRPC metadata it would split
// the output of every line that names the node.
func checkAddresses(c *cli.Context) error {
	for _, flag := range []string{"nodes", "endpoints"} {
		for _, v := range flaglist.Split(c.StringSlice(flag)...) {
			if strings.IndexFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f || !unicode.IsPrint(r) }) >= 0 {
				return failure.Input("give addresses or host names, comma-separated: --"+flag+" 10.5.0.2,10.5.0.3", "--%s %s: not an address or host name (it holds a control character or a space)", flag, termsafe.String(v))
			}
		}
	}
	return nil
}

// checkStateDir refuses a state directory that cannot be one; a missing
// one is created when first needed.
func checkStateDir(dir string, write bool) error {
	if dir == "" {
		return nil
	}
	st, err := os.Stat(dir)
	switch {
	case err == nil && !st.IsDir():
		return failure.Input("give --state-dir a directory (or set BREAKGLASS_STATE_DIR)", "state directory %s is not a directory", dir)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return failure.Input("give --state-dir a directory you can write (or set BREAKGLASS_STATE_DIR)", "state directory %s cannot be used: %v", dir, errors.Unwrap(err))
	}
	// What breakglass keeps there (README, State directory) must be directories too.
	dirs := []string{dir}
	for _, sub := range []string{"incidents", "clusters", "etcd"} {
		p := filepath.Join(dir, sub)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return failure.Input(fmt.Sprintf("move %s away, or give another --state-dir (or BREAKGLASS_STATE_DIR)", p), "state directory %s cannot be used: %s is not a directory", dir, p)
		} else if err == nil {
			dirs = append(dirs, p)
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		// Created when first needed: where it will be made must take it
		// (a read-only or full file system is said now, not mid-run).
		if !write {
			return nil
		}
		parent := filepath.Dir(dir)
		for _, err := os.Stat(parent); errors.Is(err, os.ErrNotExist) && parent != filepath.Dir(parent); _, err = os.Stat(parent) {
			parent = filepath.Dir(parent)
		}
		if err := writableDir(parent); err != nil {
			return failure.Input(recovery.StateDirHint(parent, err), "state directory %s cannot be created: %v", dir, err)
		}
		return nil
	}
	// Readable, and writable by a command that writes there: found now, not
	// as a raw system error once a journal is half written.
	for _, d := range dirs {
		err := readableDir(d)
		if err == nil && write {
			err = writableDir(d)
		}
		if err != nil {
			return failure.Input(recovery.StateDirHint(d, err), "state directory %s cannot be used: %v", dir, err)
		}
	}
	return nil
}

// readableDir lists one entry of d.
func readableDir(d string) error {
	f, err := os.Open(d)
	if err != nil {
		return errors.Unwrap(err)
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w", d, errors.Unwrap(err))
	}
	return nil
}

// writableDir creates a file in d, writes a byte to the disk and removes
// it: the one test of write permission that holds for every user, file
// system and ACL, and of space (a full disk still makes an empty file).
func writableDir(d string) error {
	f, err := os.CreateTemp(d, ".breakglass-write-check-*")
	if err != nil {
		return errors.Unwrap(err)
	}
	name := f.Name()
	defer os.Remove(name)
	_, err = f.Write([]byte{'\n'})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", d, errors.Unwrap(err))
	}
	return nil
}

// checkDurations is kept for the commands that still call it; every
// command's flags are checked before its action (checkCommandLine).
func checkDurations(c *cli.Context) error { return checkFlagValues(c) }

// startsAsBackup tells whether data, JSON that does not parse, begins as a
// breakglass backup does: an object whose first fields name its apiVersion
// or kind (what a truncated or damaged backup still has).
func startsAsBackup(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	for {
		key, err := dec.Token()
		if err != nil {
			return false
		}
		var val any
		if err := dec.Decode(&val); err != nil {
			return false
		}
		switch key {
		case "apiVersion":
			return val == etcd.BackupAPIVersion
		case "kind":
			return val == etcd.BackupKind
		}
	}
}

// checkBackupFile refuses, as bad input, a FILE that is no breakglass
// backup at all (absent, a directory, empty, not JSON, not ours) before
// anything is dialled; a backup that fails its checks is the engine's to
// refuse (exit 10). The file's content is never echoed.
func checkBackupFile(path string) error {
	const hint = "give a file written by etcd backup or etcd delete (under the state directory: etcd/CLUSTER-ID/backups)"
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return failure.Input(hint, "backup file %s: no such file", path)
	case err != nil:
		return failure.Input(hint, "backup file %s cannot be read: %v", path, errors.Unwrap(err))
	case st.IsDir():
		return failure.Input(hint, "backup file %s is a directory", path)
	case st.Size() == 0:
		return failure.Input(hint, "backup file %s is empty", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return failure.Input(hint, "backup file %s cannot be read: %v", path, errors.Unwrap(err))
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(data, &head); err != nil && startsAsBackup(data) {
		// Ours, cut short or damaged: a backup that fails verification (exit 10).
		_, err = etcd.ReadBackup(path)
		return err
	} else if err != nil || (head.APIVersion == "" && head.Kind == "") {
		return failure.Input(hint, "%s is not a breakglass backup file (want JSON of kind %s)", path, etcd.BackupKind)
	}
	// A backup that fails verification (checksums, keys, names) is refused
	// here too, before an incident is opened: exit 10.
	_, err = etcd.ReadBackup(path)
	return err
}
