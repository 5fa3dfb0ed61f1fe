package configedit

import (
	"fmt"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"gopkg.in/yaml.v3"
)

// mergeArgs sets the two keys to want through the machinery strategic merge. A strategic merge
// replaces a key's value as a whole (so want carries the merged plugin list) and "$patch: delete"
// removes a key. It drops every comment and cannot read document kinds this machinery does not know.
func mergeArgs(config []byte, cur, want args) ([]byte, error) {
	return mergeKeys(config, []keyChange{{KeyDisable, cur.disable, want.disable}, {KeyEnable, cur.enable, want.enable}})
}

// mergeKeys sets the keys to their wanted values through the machinery strategic merge.
func mergeKeys(config []byte, changes []keyChange) ([]byte, error) {
	set := map[string]any{}
	del := map[string]any{}

	for _, k := range changes {
		switch {
		case k.want.equal(k.cur):
		case k.want.null:
			set[k.key] = nil
		case k.want.present && k.want.list:
			set[k.key] = k.want.items
		case k.want.present:
			set[k.key] = k.want.str
		case k.cur.present:
			del[k.key] = map[string]any{"$patch": "delete"}
		}
	}

	var patches []configpatcher.Patch

	for _, extra := range []map[string]any{set, del} {
		if len(extra) == 0 {
			continue
		}

		text, err := yaml.Marshal(map[string]any{"cluster": map[string]any{"apiServer": map[string]any{"extraArgs": extra}}})
		if err != nil {
			return nil, err
		}

		p, err := configpatcher.LoadPatch(text)
		if err != nil {
			return nil, fmt.Errorf("load patch: %w", err)
		}

		patches = append(patches, p)
	}

	out, err := configpatcher.Apply(configpatcher.WithBytes(config), patches)
	if err != nil {
		return nil, fmt.Errorf("apply patch: %w", err)
	}

	b, err := out.Bytes()
	if err != nil {
		return nil, fmt.Errorf("encode patched config: %w", err)
	}

	if _, err := configloader.NewFromBytes(b); err != nil {
		return nil, fmt.Errorf("machinery loader rejects the patched config: %w", err)
	}

	for _, k := range changes {
		got, err := readArg(b, k.key)
		if err != nil {
			return nil, fmt.Errorf("read patched config: %w", err)
		}

		if !got.sameMeaning(k.want) {
			return nil, fmt.Errorf("patched config does not hold the intended value of %s", k.key)
		}
	}

	return b, nil
}

// loaderCheck makes sure the machinery loader takes the output when it takes the input. An input it
// refuses (a document kind this machinery does not know, for one) is checked through its v1alpha1
// document alone.
func loaderCheck(in, out []byte) error {
	if _, err := configloader.NewFromBytes(in); err == nil {
		if _, err := configloader.NewFromBytes(out); err != nil {
			return fmt.Errorf("machinery loader rejects the edited config: %w", err)
		}

		return nil
	}

	inDoc, err := v1alpha1Text(in)
	if err != nil {
		return err
	}

	if _, err := configloader.NewFromBytes(inDoc); err != nil {
		return nil //nolint:nilerr // the input's own document does not load either: nothing to compare with
	}

	outDoc, err := v1alpha1Text(out)
	if err != nil {
		return err
	}

	if _, err := configloader.NewFromBytes(outDoc); err != nil {
		return fmt.Errorf("machinery loader rejects the edited v1alpha1 document: %w", err)
	}

	return nil
}

// v1alpha1Text re-encodes the v1alpha1 document alone.
func v1alpha1Text(b []byte) ([]byte, error) {
	root, err := v1alpha1Root(b)
	if err != nil {
		return nil, err
	}

	return yaml.Marshal(root)
}
