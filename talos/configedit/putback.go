package configedit

// PutBackArgs undoes RemoveArgs on today's config: it re-inserts only what
// the removal took out, so that a colleague's edit made since stays.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/breakglass-dev/breakglass/internal/yamlnode"
)

// PutBack is what PutBackArgs did.
type PutBack struct {
	Config []byte // the new config; the input itself when nothing changes
	// Changes are the keys it changes: Before is today's value, After the
	// value put back, Removed... here the items it puts back.
	Changes []ArgChange
	// Kept says what of today's values the put-back leaves as it is: items
	// added since, and removed items someone set again meanwhile.
	Kept []string
	// Exact: no key was touched since the removal, and the recorded text
	// came back, byte for byte.
	Exact  bool
	Method string // MethodText or MethodMerge ("" when nothing changes)
}

// PutBackArgs puts back into cluster.apiServer.extraArgs what RemoveArgs
// took out, as its record and changes tell it. Where no key was touched
// since, the recorded text comes back exactly (RestoreArgs). Otherwise each
// removed item goes back into today's value at its old place; today's other
// items, a colleague's among them, stay; an item someone set again by name
// meanwhile is left as it is; a key taken out whole that someone wrote again
// keeps today's value; one still absent comes back whole.
func PutBackArgs(config []byte, rec ArgsRecord, changes []ArgChange) (PutBack, error) {
	if rec.Version != ArgsRecordVersion {
		return PutBack{}, fmt.Errorf("%w: version %d, want %d", ErrBadRecord, rec.Version, ArgsRecordVersion)
	}

	extra, _, _, err := readExtraArgs(config)
	if err != nil {
		return PutBack{}, err
	}

	cur := make([]argValue, len(changes))
	untouched := true

	for i, c := range changes {
		if !argKeyName.MatchString(c.Key) {
			return PutBack{}, fmt.Errorf("%w: key %q", ErrBadRecord, c.Key)
		}

		if extra != nil {
			if cur[i], err = argValueOf(extra, c.Key); err != nil {
				return PutBack{}, err
			}
		}

		untouched = untouched && sameArg(cur[i].argValue(), c.After)
	}

	if untouched {
		return putBackExact(config, rec, changes)
	}

	res := PutBack{Config: config}

	var edits []keyChange

	for i, c := range changes {
		orig := argValue{}
		if k := slices.IndexFunc(rec.Keys, func(k ArgKeyRecord) bool { return k.Key == c.Key }); k >= 0 {
			orig = rec.Keys[k].value()
		}

		want, back, kept := putBackItems(cur[i], orig, c)
		res.Kept = append(res.Kept, kept...)

		if want.equal(cur[i]) {
			continue
		}

		edits = append(edits, keyChange{key: c.Key, cur: cur[i], want: want})
		res.Changes = append(res.Changes, ArgChange{Key: c.Key, Before: cur[i].argValue(), After: want.argValue(), Removed: back})
	}

	if len(edits) == 0 {
		return res, nil
	}

	out, textErr := withLF(config, func(lf []byte) ([]byte, error) { return setArgsText(lf, edits) })
	if textErr == nil {
		res.Config, res.Method = out, MethodText

		return res, nil
	}

	out, mergeErr := mergeKeys(config, edits)
	if mergeErr != nil {
		return PutBack{}, &EditError{Op: "put flags back into", Text: textErr, Merge: mergeErr}
	}

	res.Config, res.Method = out, MethodMerge

	return res, nil
}

// putBackExact is PutBackArgs where nothing changed since the removal.
func putBackExact(config []byte, rec ArgsRecord, changes []ArgChange) (PutBack, error) {
	out, err := RestoreArgs(config, rec)
	if err != nil {
		return PutBack{}, err
	}

	res := PutBack{Config: out, Exact: true, Method: rec.Method}
	for _, c := range changes {
		res.Changes = append(res.Changes, ArgChange{Key: c.Key, Before: c.After, After: c.Before, Removed: c.Removed})
	}

	return res, nil
}

// sameArg tells whether a key is still what an edit left it.
func sameArg(a, b ArgValue) bool {
	return a.Form == b.Form && slices.Equal(a.Values, b.Values)
}

// putBackItems is today's value cur with what change c took out back in:
// the value to write, the items it puts back, and what it keeps of today's
// that the removal did not leave.
func putBackItems(cur, orig argValue, c ArgChange) (argValue, []string, []string) {
	if c.After.Form == FormAbsent {
		// The whole key went.
		if cur.present {
			return cur, nil, []string{c.Key + ": written again since it was taken out; today's value stays"}
		}

		return orig, c.Removed, nil
	}

	after := splitItems(c.After.Values)

	var kept []string

	for _, it := range cur.parts() {
		if !slices.Contains(after, it) {
			kept = append(kept, c.Key+" "+it+" (not there after the removal: kept)")
		}
	}

	items := cur.parts()

	var back []string

	before := splitItems(c.Before.Values)

	for _, r := range c.Removed {
		name, _, _ := strings.Cut(r, "=")
		if slices.ContainsFunc(items, func(it string) bool { return itemMatches(it, name) }) {
			kept = append(kept, c.Key+" "+name+" set again since the removal: today's value stays")

			continue
		}

		items = insertAfterPrevious(items, before, r)
		back = append(back, r)
	}

	if len(back) == 0 {
		return cur, nil, kept
	}

	switch {
	case cur.list || !cur.present && c.Before.Form == FormList:
		return argValue{present: true, list: true, items: items}, back, kept
	}

	sep := ","
	if strings.Contains(cur.str, ", ") || !cur.present && strings.Contains(strings.Join(c.Before.Values, ""), ", ") {
		sep = ", "
	}

	return argValue{present: true, str: strings.Join(items, sep)}, back, kept
}

// parts are the value's items: the string's comma-separated parts, or the
// list's items (each split the same way).
func (v argValue) parts() []string {
	if !v.present {
		return nil
	}

	if v.list {
		return splitItems(v.items)
	}

	return splitItems([]string{v.str})
}

// splitItems splits each value at its commas, dropping empty parts.
func splitItems(values []string) []string {
	var out []string

	for _, v := range values {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}

	return out
}

// insertAfterPrevious inserts item into items after the nearest item that
// stood before it in before and is still there; first when none is.
func insertAfterPrevious(items, before []string, item string) []string {
	i := slices.Index(before, item)
	for j := i - 1; j >= 0; j-- {
		if k := slices.Index(items, before[j]); k >= 0 {
			return slices.Insert(items, k+1, item)
		}
	}

	if i < 0 {
		return append(items, item)
	}

	return slices.Insert(items, 0, item)
}

// setArgsText sets each key to its wanted value by text edit: a new key is
// inserted (extraArgs and apiServer created when missing), a value
// rewritten in place, a key with nothing left deleted; every other byte
// stays, which the edit then checks.
func setArgsText(config []byte, changes []keyChange) ([]byte, error) {
	b := config

	for _, c := range changes {
		t, err := parseText(b)
		if err != nil {
			return nil, err
		}

		switch {
		case c.want.present:
			b, err = t.putKey(c.key, c.want, &KeyRecord{}, &Record{})
		case t.extra != nil && yamlnode.Index(t.extra, c.key) >= 0:
			b, _, err = t.dropKey(yamlnode.Index(t.extra, c.key), false, false, nil)
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
