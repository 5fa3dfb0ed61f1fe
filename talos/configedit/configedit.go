// Package configedit turns kube-apiserver admission plugins off and on again in the text of a Talos
// machine config, and puts the original back byte for byte.
//
// Disable, Restore and RemovePlugins touch only "disable-admission-plugins" and "enable-admission-plugins"
// under cluster.apiServer.extraArgs of the v1alpha1 document; RemoveArgs and RestoreArgs take any other
// key, or items of its comma-separated value (a feature gate, a runtime-config entry), out and back in
// (argsedit.go). Everything else, comments and other documents included, keeps its bytes.
//
// Two methods exist:
//   - "text": a careful splice of the text of the extraArgs mapping, located through yaml.v3 node
//     positions and checked by parsing the result again. It handles block and flow style, quoted keys
//     and values, string and list values, missing or null extraArgs or apiServer keys, comments,
//     any indentation, other documents (of any kind, known to this machinery or not) and CRLF line
//     ends (when used throughout). It refuses what it does not understand (mixed line ends, anchors
//     and aliases, tags, multi-line scalars or flow collections, a value on the line after its key,
//     a last line without newline where it must insert, ...).
//   - "merge": the machinery strategic merge (configpatcher) used when the text edit refuses. It keeps
//     the meaning of every document but re-encodes them all and drops every comment, and it cannot read
//     document kinds this machinery does not know. A restore after a merge puts the values back but can
//     never give the original bytes.
//
// Every output is parsed again and compared, meaning for meaning, with the input plus the intended
// change, and checked with the machinery config loader when the input passes it. An input the loader
// refuses (one with a document kind unknown to this machinery, say) is checked through its v1alpha1
// document alone. The values are read with yaml.v3: a config it cannot parse is an error.
//
// The functions are pure: config text in, config text out; they never modify their input slice.
package configedit

import (
	"fmt"
	"slices"
)

// The two extraArgs keys this package reads and writes.
const (
	KeyDisable = "disable-admission-plugins"
	KeyEnable  = "enable-admission-plugins"
)

// Methods used to edit a config.
const (
	MethodText  = "text"
	MethodMerge = "merge"
)

// RecordVersion is the version of the Record layout written by this package.
const RecordVersion = 1

// Form of an extraArgs value in the config text.
// Talos 1.13+ accepts a string or a list of strings; Talos 1.11/1.12 accept strings only.
type Form string

// Forms of a value.
const (
	FormAbsent Form = "absent" // the key is not there
	FormString Form = "string" // "A,B" (comma-joined; spaces after commas allowed)
	FormList   Form = "list"   // [A, B]
)

// Options for Disable.
type Options struct {
	// Plugins to disable, e.g. ValidatingAdmissionWebhook. Names are letters and digits starting
	// with an upper-case letter; duplicates are ignored.
	Plugins []string
	// StringOnly is set for Talos < 1.13 nodes: a value must be a comma-joined string. A new key is
	// always written as a string; an existing list value in either key is an error
	// (ErrListOnStringOnly), because such a node could not hold it: the node is not what the caller
	// thinks it is.
	StringOnly bool
}

// PluginList is one of the two keys as seen by an operator.
type PluginList struct {
	Form    Form     `json:"form"`
	Plugins []string `json:"plugins,omitempty"`
}

// Args holds the two keys.
type Args struct {
	Disable PluginList `json:"disable"`
	Enable  PluginList `json:"enable"`
}

// Result of Disable.
type Result struct {
	Config  []byte // the new config; the input itself when nothing changed
	Changed bool   // false when every plugin was already disabled and none is in the enable list
	// Before and After show the two keys, for a plan.
	Before, After Args
	// Added lists the plugins added to the disable list.
	Added []string
	// RemovedFromEnable lists the plugins taken out of enable-admission-plugins: kube-apiserver
	// refuses to start when a plugin is both enabled and disabled.
	RemovedFromEnable []string
	// Record undoes the change with Restore. Store it (it is JSON-serialisable). When nothing
	// changed it is a record that restores nothing.
	Record Record
	// Method is MethodText or MethodMerge ("" when nothing changed).
	Method string
}

// Record is everything Restore needs to undo Disable exactly. It holds only the original values of
// the two extraArgs keys (and, for the text method, the exact text of their lines, comments on them
// included), never other config content: the name of a neighbouring extraArgs key marks a position,
// no other value is kept.
type Record struct {
	Version int    `json:"version"`
	Method  string `json:"method"` // method Disable used
	// Added are the plugins Disable added to the disable list.
	Added []string `json:"added,omitempty"`
	// RemovedFromEnable are the plugins Disable took out of the enable list.
	RemovedFromEnable []string `json:"removedFromEnable,omitempty"`
	// CreatedAPIServer and CreatedExtraArgs tell which structure Disable created; Restore removes it
	// again when nothing else was put in it since.
	CreatedAPIServer bool `json:"createdAPIServer,omitempty"`
	CreatedExtraArgs bool `json:"createdExtraArgs,omitempty"`
	// WasNull tells that apiServer or extraArgs was there but null (text method); Restore makes it
	// null again.
	WasNull *NullMapping `json:"wasNull,omitempty"`
	// Disable and Enable are the original states of the two keys.
	Disable KeyRecord `json:"disable"`
	Enable  KeyRecord `json:"enable"`
}

// KeyRecord is the original state of one extraArgs key.
type KeyRecord struct {
	// Changed tells whether Disable changed this key; Restore leaves an unchanged key alone.
	Changed bool `json:"changed"`
	// Present tells whether the key existed; Form, Value and List give its value.
	Present bool     `json:"present"`
	Null    bool     `json:"null,omitempty"` // written as null or ~
	Form    Form     `json:"form,omitempty"`
	Value   string   `json:"value,omitempty"` // FormString
	List    []string `json:"list,omitempty"`  // FormList
	// Raw is the exact original text of the entry (text method only): whole lines in a block
	// mapping ("layout" block), "key: value" in a flow mapping ("layout" flow).
	Raw    string `json:"raw,omitempty"`
	Layout string `json:"layout,omitempty"`
	// Position tells where a key removed by Disable stood, to put it back in the same place.
	Position *Position `json:"position,omitempty"`
}

// NullMapping is a mapping that was written as null, and the text that said so: after the colon in
// a block mapping ("" for nothing, " ~", " null"), the token in a flow mapping ("null", "~").
type NullMapping struct {
	Key  string `json:"key"` // apiServer or extraArgs
	Text string `json:"text,omitempty"`
}

// Position of a removed entry in the extraArgs mapping as it was when the entry was removed.
type Position struct {
	After string `json:"after,omitempty"` // key of the entry before it ("" when it was the first)
	Skip  int    `json:"skip,omitempty"`  // block: comment or blank lines between that entry and it
	Sep   string `json:"sep,omitempty"`   // flow: separator text removed with it
}

// Disable adds opts.Plugins to cluster.apiServer.extraArgs["disable-admission-plugins"], keeping the
// form of the value (existing plugins first, then the new ones), and takes them out of
// "enable-admission-plugins" when they are there (dropping that key when it becomes empty). When every
// plugin is already disabled and none is enabled, it returns the input unchanged with Changed false.
func Disable(config []byte, opts Options) (Result, error) {
	plugins, err := validatePlugins(opts.Plugins)
	if err != nil {
		return Result{}, err
	}

	cur, err := readArgs(config)
	if err != nil {
		return Result{}, err
	}

	if opts.StringOnly && (cur.disable.list || cur.enable.list) {
		return Result{}, ErrListOnStringOnly
	}

	newDisable, added := cur.disable.withPlugins(plugins)
	newEnable, removed := cur.enable.withoutPlugins(plugins)

	res := Result{
		Before:            Args{Disable: cur.disable.pluginList(), Enable: cur.enable.pluginList()},
		Added:             added,
		RemovedFromEnable: removed,
	}

	if len(added) == 0 && len(removed) == 0 {
		res.Config = config
		res.After = res.Before
		res.Record = Record{Version: RecordVersion} // restores nothing

		return res, nil
	}

	want := cur
	want.disable = newDisable
	want.enable = newEnable
	res.After = Args{Disable: newDisable.pluginList(), Enable: newEnable.pluginList()}
	res.Changed = true

	var rec Record

	out, textErr := withLF(config, func(lf []byte) ([]byte, error) {
		var (
			b   []byte
			err error
		)

		b, rec, err = disableText(lf, cur, want, len(removed) > 0)

		return b, err
	})
	if textErr == nil {
		rec.Method = MethodText
		res.Method = MethodText
	} else {
		var mergeErr error

		out, mergeErr = mergeArgs(config, cur, want)
		if mergeErr != nil {
			return Result{}, &EditError{Op: "disable", Text: textErr, Merge: mergeErr}
		}

		rec = mergeRecord(cur, len(removed) > 0)
		rec.Method = MethodMerge
		res.Method = MethodMerge
	}

	rec.Version = RecordVersion
	rec.Added = added
	rec.RemovedFromEnable = removed
	res.Record = rec
	res.Config = out

	return res, nil
}

// Restore is Undo's config.
func Restore(config []byte, rec Record) ([]byte, error) {
	u, err := Undo(config, rec)

	return u.Config, err
}

// Undone is what Undo made of a config.
type Undone struct {
	Config []byte
	// Drift lists the keys Disable changed that hold something else now than what Disable left
	// (someone's edit since): Undo then takes out only the plugins Disable added, and puts back
	// only those it took out, keeping the rest of what the key holds now.
	Drift []Drift
}

// Drift is one key that changed since Disable.
type Drift struct {
	Key   string   `json:"key"`
	Left  []string `json:"left"`  // the plugins Disable left in the key
	Now   []string `json:"now"`   // the plugins it holds now
	After []string `json:"after"` // the plugins it holds after Undo
}

// Undo removes exactly what Disable added and puts back exactly what it took out, leaving every other
// key as it is now (an operator may have changed other keys since). A key that still holds what
// Disable left gets its original text back: if nothing else changed and Disable used the text
// method, Undo(Disable(x).Config, rec).Config == x byte for byte. A key changed since (a plugin
// someone added to disable-admission-plugins during the incident) keeps that change, and Drift says
// so. After the merge method only the values come back: the comments the merge dropped do not.
func Undo(config []byte, rec Record) (Undone, error) {
	if rec.Version != RecordVersion {
		return Undone{}, fmt.Errorf("%w: version %d, want %d", ErrBadRecord, rec.Version, RecordVersion)
	}

	if err := rec.check(); err != nil {
		return Undone{}, err
	}

	if !rec.Disable.Changed && !rec.Enable.Changed {
		return Undone{Config: config}, nil
	}

	cur, err := readArgs(config)
	if err != nil {
		return Undone{}, err
	}

	plan := undoPlan(cur, rec)

	out, textErr := withLF(config, func(lf []byte) ([]byte, error) { return restoreText(lf, cur, rec, plan) })
	if textErr == nil {
		return Undone{Config: out, Drift: plan.drift}, nil
	}

	out, mergeErr := mergeArgs(config, cur, plan.want)
	if mergeErr != nil {
		return Undone{}, &EditError{Op: "restore", Text: textErr, Merge: mergeErr}
	}

	return Undone{Config: out, Drift: plan.drift}, nil
}

// undo is what Undo writes: the meaning of the two keys after it, and which of them get their
// recorded text back (exact) rather than a new value.
type undo struct {
	want                      args
	exactDisable, exactEnable bool
	drift                     []Drift
}

func undoPlan(cur args, rec Record) undo {
	u := undo{want: cur}

	if rec.Disable.Changed {
		orig := rec.Disable.value()
		left, _ := orig.withPlugins(rec.Added)
		after, _ := cur.disable.withoutPlugins(rec.Added)

		switch {
		case cur.disable.sameMeaning(left) || after.sameMeaning(orig):
			u.want.disable, u.exactDisable = orig, true
		default:
			u.want.disable = after
			u.drift = append(u.drift, Drift{Key: KeyDisable, Left: left.plugins(), Now: cur.disable.plugins(), After: after.plugins()})
		}
	}

	if rec.Enable.Changed {
		orig := rec.Enable.value()
		left, _ := orig.withoutPlugins(rec.RemovedFromEnable)
		// Never put back into the enable list a plugin someone disabled since: kube-apiserver refuses
		// the overlap (one that was there before Disable is put back as it was).
		wasDisabled := rec.Disable.value().plugins()
		if !rec.Disable.Changed {
			wasDisabled = cur.disable.plugins()
		}
		back := slices.DeleteFunc(slices.Clone(rec.RemovedFromEnable), func(p string) bool {
			return slices.Contains(u.want.disable.plugins(), p) && !slices.Contains(wasDisabled, p)
		})
		after, _ := cur.enable.withPlugins(back)

		switch {
		case (cur.enable.sameMeaning(left) || after.sameMeaning(orig)) && len(back) == len(rec.RemovedFromEnable):
			u.want.enable, u.exactEnable = orig, true
		default:
			u.want.enable = after
			u.drift = append(u.drift, Drift{Key: KeyEnable, Left: left.plugins(), Now: cur.enable.plugins(), After: after.plugins()})
		}
	}

	return u
}

// RemovePlugins is a restore without a record (disable ran elsewhere): it removes just the named
// plugins from the disable list and drops the key when the list becomes empty (and a block-style
// extraArgs, then apiServer, when they become empty; an emptied flow mapping stays as "{}"). What cannot be known without a record, and is therefore not
// done: whether a plugin was already disabled before (it is removed anyway), which plugins were taken
// out of enable-admission-plugins (they stay out), the original form and spelling of the value, and
// whether extraArgs or apiServer existed before.
func RemovePlugins(config []byte, plugins []string) ([]byte, error) {
	plugins, err := validatePlugins(plugins)
	if err != nil {
		return nil, err
	}

	cur, err := readArgs(config)
	if err != nil {
		return nil, err
	}

	newDisable, removed := cur.disable.withoutPlugins(plugins)
	if len(removed) == 0 {
		return config, nil
	}

	want := cur
	want.disable = newDisable

	out, textErr := withLF(config, func(lf []byte) ([]byte, error) { return removeText(lf, cur, want) })
	if textErr == nil {
		return out, nil
	}

	out, mergeErr := mergeArgs(config, cur, want)
	if mergeErr != nil {
		return nil, &EditError{Op: "remove plugins", Text: textErr, Merge: mergeErr}
	}

	return out, nil
}

// Disabled reports the plugins in cluster.apiServer.extraArgs["disable-admission-plugins"].
func Disabled(config []byte) ([]string, error) {
	cur, err := readArgs(config)
	if err != nil {
		return nil, err
	}

	return cur.disable.plugins(), nil
}

// CurrentArgs reports both keys, for status and plans.
func CurrentArgs(config []byte) (Args, error) {
	cur, err := readArgs(config)
	if err != nil {
		return Args{}, err
	}

	return Args{Disable: cur.disable.pluginList(), Enable: cur.enable.pluginList()}, nil
}

func (r Record) check() error {
	for _, k := range []KeyRecord{r.Disable, r.Enable} {
		if !k.Changed || !k.Present {
			continue
		}

		switch k.Form {
		case FormString, FormList:
		default:
			return fmt.Errorf("%w: form %q", ErrBadRecord, k.Form)
		}

		switch k.Layout {
		case "", layoutBlock, layoutFlow:
		default:
			return fmt.Errorf("%w: layout %q", ErrBadRecord, k.Layout)
		}
	}

	return nil
}

func (k KeyRecord) value() argValue {
	if !k.Present {
		return argValue{}
	}

	if k.Form == FormList {
		return argValue{present: true, list: true, items: slices.Clone(k.List)}
	}

	return argValue{present: true, null: k.Null, str: k.Value}
}

func keyRecordOf(v argValue, changed bool) KeyRecord {
	k := KeyRecord{Changed: changed, Present: v.present, Null: v.null}
	if !v.present {
		return k
	}

	k.Form = v.form()
	if v.list {
		k.List = slices.Clone(v.items)
		if k.List == nil {
			k.List = []string{}
		}
	} else {
		k.Value = v.str
	}

	return k
}

func mergeRecord(cur args, enableChanged bool) Record {
	return Record{
		CreatedAPIServer: !cur.hasAPIServer,
		CreatedExtraArgs: !cur.hasExtraArgs,
		Disable:          keyRecordOf(cur.disable, true),
		Enable:           keyRecordOf(cur.enable, enableChanged),
	}
}
