package configedit

// RemoveArgs and RestoreArgs take flags out of cluster.apiServer.extraArgs
// and put them back, for any key: a whole key (--cloud-provider), or items
// of a comma-separated one (a gate of feature-gates, an entry of
// runtime-config), in string or list form. As for the admission plugins,
// only the lines of the keys change, and RestoreArgs(RemoveArgs(x)) == x
// byte for byte when nothing else changed since.

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/breakglass-dev/breakglass/internal/yamlnode"
)

// ArgsRecordVersion is the version of the ArgsRecord layout.
const ArgsRecordVersion = 1

// ArgRemoval is what to take out of one extraArgs key.
type ArgRemoval struct {
	Key string `json:"key"`
	// Items names the items of the key's comma-separated value to take out,
	// as NAME (any value) or NAME=VALUE. An item's name is its text before
	// "=" ("kube:" dropped, as kube-apiserver reads --feature-gates); NAME
	// also names what lies under it, as kube-apiserver names it in its
	// refusals (GROUP names GROUP/VERSION=..., GROUP/VERSION names
	// GROUP/VERSION/RESOURCE=...). Empty: the whole key goes.
	Items []string `json:"items,omitempty"`
}

// ArgValue is one extraArgs key as an operator sees it.
type ArgValue struct {
	Form   Form     `json:"form"`
	Values []string `json:"values,omitempty"` // the string, or the list's items
}

// ArgChange is the edit of one key, for a plan.
type ArgChange struct {
	Key    string   `json:"key"`
	Before ArgValue `json:"before"`
	After  ArgValue `json:"after"`
	// Removed are the items taken out (the whole value when the key goes).
	Removed []string `json:"removed"`
}

// ArgsResult is what RemoveArgs did.
type ArgsResult struct {
	Config  []byte // the new config; the input itself when nothing changed
	Changed bool
	Changes []ArgChange
	// NotFound are the removals with nothing to take out: the key is not in
	// extraArgs (Talos may render that flag itself), or no item of it matches.
	NotFound []ArgRemoval
	Record   ArgsRecord
	Method   string // MethodText or MethodMerge ("" when nothing changed)
}

// ArgsRecord is everything RestoreArgs needs: each changed key's original
// value and exact text, never other config content.
type ArgsRecord struct {
	Version int            `json:"version"`
	Method  string         `json:"method"`
	Keys    []ArgKeyRecord `json:"keys"`
	// ExtraArgs is the exact text of the whole extraArgs entry of apiServer
	// when the edit took its last key out (a block mapping cannot be left
	// empty), with where it stood; RestoreArgs puts it back whole.
	ExtraArgs *KeyRecord `json:"extraArgs,omitempty"`
}

// ArgKeyRecord is the original state of one key.
type ArgKeyRecord struct {
	Key string `json:"key"`
	KeyRecord
}

var argKeyName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,99}$`)

// CurrentArg reports one extraArgs key.
func CurrentArg(config []byte, key string) (ArgValue, error) {
	v, err := readArg(config, key)
	if err != nil {
		return ArgValue{}, err
	}

	return v.argValue(), nil
}

func (v argValue) argValue() ArgValue {
	out := ArgValue{Form: v.form()}

	switch {
	case !v.present:
	case v.list:
		out.Values = slices.Clone(v.items)
	default:
		out.Values = []string{v.str}
	}

	return out
}

// RemoveArgs takes the removals out of cluster.apiServer.extraArgs, keeping
// every other byte of the config (the text edit), or, when the text edit
// refuses the config's shape, through the machinery strategic merge.
func RemoveArgs(config []byte, removals []ArgRemoval) (ArgsResult, error) {
	if len(removals) == 0 {
		return ArgsResult{}, fmt.Errorf("%w: nothing named to remove", ErrBadValue)
	}

	extra, _, _, err := readExtraArgs(config)
	if err != nil {
		return ArgsResult{}, err
	}

	res := ArgsResult{Config: config, Record: ArgsRecord{Version: ArgsRecordVersion}}

	var changes []keyChange

	for _, rm := range removals {
		if !argKeyName.MatchString(rm.Key) {
			return ArgsResult{}, fmt.Errorf("%w: %q is not a kube-apiserver flag name", ErrBadValue, rm.Key)
		}

		if slices.ContainsFunc(changes, func(c keyChange) bool { return c.key == rm.Key }) {
			return ArgsResult{}, fmt.Errorf("%w: %s named twice", ErrBadValue, rm.Key)
		}

		var cur argValue
		if extra != nil {
			if cur, err = argValueOf(extra, rm.Key); err != nil {
				return ArgsResult{}, err
			}
		}

		want, removed := cur.without(rm.Items)
		if !cur.present || len(removed) == 0 {
			res.NotFound = append(res.NotFound, rm)

			continue
		}

		changes = append(changes, keyChange{key: rm.Key, cur: cur, want: want})
		res.Changes = append(res.Changes, ArgChange{Key: rm.Key, Before: cur.argValue(), After: want.argValue(), Removed: removed})
	}

	if len(changes) == 0 {
		return res, nil
	}

	res.Changed = true

	out, rec, textErr := withLFRecord(config, func(lf []byte) ([]byte, ArgsRecord, error) { return removeArgsText(lf, changes) })
	if textErr == nil {
		rec.Version, rec.Method = ArgsRecordVersion, MethodText
		res.Config, res.Record, res.Method = out, rec, MethodText

		return res, nil
	}

	out, mergeErr := mergeKeys(config, changes)
	if mergeErr != nil {
		return ArgsResult{}, &EditError{Op: "remove flags from", Text: textErr, Merge: mergeErr}
	}

	rec = ArgsRecord{Version: ArgsRecordVersion, Method: MethodMerge}
	for _, c := range changes {
		rec.Keys = append(rec.Keys, ArgKeyRecord{Key: c.key, KeyRecord: keyRecordOf(c.cur, true)})
	}

	res.Config, res.Record, res.Method = out, rec, MethodMerge

	return res, nil
}

// RestoreArgs puts back the recorded values exactly, leaving every other key
// as it is now. After the text method, RestoreArgs(RemoveArgs(x).Config,
// rec) == x byte for byte when nothing else changed.
func RestoreArgs(config []byte, rec ArgsRecord) ([]byte, error) {
	if rec.Version != ArgsRecordVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrBadRecord, rec.Version, ArgsRecordVersion)
	}

	if len(rec.Keys) == 0 {
		return config, nil
	}

	var changes []keyChange

	for _, k := range rec.Keys {
		if !argKeyName.MatchString(k.Key) {
			return nil, fmt.Errorf("%w: key %q", ErrBadRecord, k.Key)
		}

		cur, err := readArg(config, k.Key)
		if err != nil {
			return nil, err
		}

		changes = append(changes, keyChange{key: k.Key, cur: cur, want: k.value()})
	}

	for _, k := range rec.Keys {
		if err := (Record{Disable: k.KeyRecord}).check(); err != nil {
			return nil, err
		}
	}

	out, textErr := withLF(config, func(lf []byte) ([]byte, error) { return restoreArgsText(lf, rec, changes) })
	if textErr == nil {
		return out, nil
	}

	out, mergeErr := mergeKeys(config, changes)
	if mergeErr != nil {
		return nil, &EditError{Op: "restore flags in", Text: textErr, Merge: mergeErr}
	}

	return out, nil
}

// withLFRecord is withLF for an edit that also returns its record.
func withLFRecord(config []byte, edit func([]byte) ([]byte, ArgsRecord, error)) ([]byte, ArgsRecord, error) {
	var rec ArgsRecord

	out, err := withLF(config, func(lf []byte) ([]byte, error) {
		var (
			b   []byte
			err error
		)

		b, rec, err = edit(lf)

		return b, err
	})

	return out, rec, err
}

// removeArgsText edits the keys one after another.
func removeArgsText(config []byte, changes []keyChange) ([]byte, ArgsRecord, error) {
	var rec ArgsRecord

	b := config
	structure := keptStructure

	for _, c := range changes {
		t, err := parseText(b)
		if err != nil {
			return nil, rec, err
		}

		i := -1
		if t.extra != nil {
			i = yamlnode.Index(t.extra, c.key)
		}

		if i < 0 {
			return nil, rec, refuse("%s not found in the text", c.key)
		}

		kr := ArgKeyRecord{Key: c.key, KeyRecord: keyRecordOf(c.cur, true)}
		if kr.Raw, kr.Layout, err = t.entryRaw(t.extra, i); err != nil {
			return nil, rec, err
		}

		switch {
		case c.want.present:
			b, err = t.setValue(t.extra, i, c.want)
		case len(t.extra.Content) > 2 || t.extra.Style&yaml.FlowStyle != 0:
			b, kr.Position, err = t.deleteEntry(t.extra, t.extraKey, i)
		default:
			// The last key of a block extraArgs: the whole entry goes, and
			// its text is kept to put back.
			j := yamlnode.Index(t.api, "extraArgs")

			whole := KeyRecord{Changed: true, Present: true}
			if whole.Raw, whole.Layout, err = t.entryRaw(t.api, j); err != nil {
				return nil, rec, err
			}

			if t.api.Style&yaml.FlowStyle == 0 && len(t.api.Content) <= 2 {
				return nil, rec, refuse("extraArgs is the only key of apiServer")
			}

			b, whole.Position, err = t.deleteEntry(t.api, t.apiKey, j)
			rec.ExtraArgs, structure = &whole, removedExtraArgs
		}

		if err != nil {
			return nil, rec, err
		}

		rec.Keys = append(rec.Keys, kr)
	}

	if err := verifyKeys(config, b, changes, structure); err != nil {
		return nil, rec, err
	}

	return b, rec, nil
}

// restoreArgsText undoes removeArgsText, last key first.
func restoreArgsText(config []byte, rec ArgsRecord, changes []keyChange) ([]byte, error) {
	b := config

	t, err := parseText(b)
	if err != nil {
		return nil, err
	}

	keys := rec.Keys

	if rec.ExtraArgs != nil && t.api != nil && t.extra == nil && t.extraNull == nil {
		// extraArgs is still gone: its text comes back whole, as it was
		// before the last key went (the one that emptied it).
		whole := *rec.ExtraArgs
		if b, err = t.insertAt(t.api, t.apiKey, whole.Position, rawRenderer(whole)); err != nil {
			return nil, err
		}

		keys = keys[:len(keys)-1]
	}

	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]

		if t, err = parseText(b); err != nil {
			return nil, err
		}

		r := recordRenderer(k.Key, k.KeyRecord)

		j := -1
		if t.extra != nil {
			j = yamlnode.Index(t.extra, k.Key)
		}

		switch {
		case !k.Present && j < 0:
			continue
		case !k.Present:
			b, _, err = t.dropKey(j, false, false, nil)
		default:
			b, err = t.putRecorded(j, k.Position, r)
		}

		if err != nil {
			return nil, err
		}
	}

	if err := verifyKeys(config, b, changes, keptStructure); err != nil {
		return nil, err
	}

	return b, nil
}

// rawRenderer puts back recorded text where it fits; it has no value to
// write anew, so elsewhere it refuses (an empty entry fails the check).
func rawRenderer(k KeyRecord) renderer {
	return func(layout, indent string, _ int) string {
		if k.Layout == layout && (layout == layoutFlow || strings.HasPrefix(k.Raw, indent)) {
			return k.Raw
		}

		return ""
	}
}

// without takes the named items out of v (all of v when names is empty).
func (v argValue) without(names []string) (argValue, []string) {
	if !v.present {
		return v, nil
	}

	if len(names) == 0 {
		if v.list {
			return argValue{}, slices.Clone(v.items)
		}

		return argValue{}, []string{v.str}
	}

	match := func(item string) bool {
		for _, n := range names {
			if itemMatches(item, n) {
				return true
			}
		}

		return false
	}

	if !v.list {
		s, removed := dropMatching(v.str, match)
		if len(removed) == 0 {
			return v, nil
		}

		if s == "" {
			return argValue{}, removed
		}

		return argValue{present: true, str: s}, removed
	}

	var (
		items   []string
		removed []string
	)

	for _, it := range v.items {
		s, r := dropMatching(it, match)
		removed = append(removed, r...)

		switch {
		case len(r) == 0:
			items = append(items, it)
		case s != "":
			items = append(items, s)
		}
	}

	if len(removed) == 0 {
		return v, nil
	}

	if len(items) == 0 {
		return argValue{}, removed
	}

	return argValue{present: true, list: true, items: items}, removed
}

// dropMatching removes the comma-separated parts that match, keeping the
// others as written.
func dropMatching(s string, match func(string) bool) (string, []string) {
	parts := strings.Split(s, ",")
	kept := parts[:0:0]

	var removed []string

	for _, p := range parts {
		if t := strings.TrimSpace(p); t != "" && match(t) {
			removed = append(removed, t)

			continue
		}

		kept = append(kept, p)
	}

	if len(removed) == 0 {
		return s, nil
	}

	out := strings.TrimSpace(strings.Join(kept, ","))
	out = strings.TrimRight(strings.TrimLeft(out, ", "), ", ")

	return out, removed
}

// itemMatches tells whether an item (NAME=VALUE, or NAME) is named by name
// (NAME or NAME=VALUE; see ArgRemoval.Items).
func itemMatches(item, name string) bool {
	ik, iv, iHas := strings.Cut(item, "=")
	nk, nv, nHas := strings.Cut(name, "=")
	ik = strings.TrimPrefix(strings.TrimSpace(ik), "kube:")
	nk = strings.TrimPrefix(strings.TrimSpace(nk), "kube:")

	if ik != nk && !strings.HasPrefix(ik, nk+"/") {
		return false
	}

	if !nHas {
		return true
	}

	if !iHas {
		return false
	}

	a, errA := strconv.ParseBool(strings.TrimSpace(iv))
	b, errB := strconv.ParseBool(strings.TrimSpace(nv))

	if errA == nil && errB == nil {
		return a == b
	}

	return strings.TrimSpace(iv) == strings.TrimSpace(nv)
}
