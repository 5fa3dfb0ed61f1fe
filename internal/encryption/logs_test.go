package encryption

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
)

func TestMatchLog(t *testing.T) {
	for line, want := range map[string]Cause{
		// siderolabs/talos#13885, Talos v1.14.0-beta.0, Kubernetes v1.36.2
		`E0727 16:22:15.775506       1 transformer.go:164] "failed to decrypt data" err="no matching key was found for the provided Secretbox transformer"`:              CauseKeyMissing,
		`E0727 16:22:15.775581       1 watcher.go:575] failed to prepare current and previous objects: no matching key was found for the provided Secretbox transformer`: CauseKeyMissing,
		`E transformer.go:164] "failed to decrypt data" err="invalid padding on input"`:                                                                                  CauseWrongSecret,
		`unable to transform key "/registry/secrets/a/b": no matching prefix found`:                                                                                      CauseNoProvider,
		`E cacher.go:480] cacher (secrets): unexpected ListAndWatch error: failed to list *core.Secret: unable to transform key "/registry/secrets/default/s0": x`:       CauseUnreadable,
		`I "Starting controller" name="client-ca-bundle"`:                                                                                                                "",
	} {
		w, ok := MatchLog(line)
		if w.Cause != want || ok != (want != "") {
			t.Errorf("MatchLog(%q) = %q, %v; want %q", line, w.Cause, ok, want)
		}
	}
}

// TestRecordedWordings holds the wordings to what the real binaries said
// (testdata/recorded/): each line a wording matches was recorded from a version the
// wording lists, each wording listed for a version was recorded from it,
// and each shape's lines tell its cause. And the value each real
// kube-apiserver stored is read as it read it: Before's configuration
// decrypts it, After's does not, with the words kube-apiserver logged.
func TestRecordedWordings(t *testing.T) {
	recs, err := readRecordings(os.DirFS("testdata"), "recorded")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatal("no recording under testdata/recorded/ (go run ./lab/recordencryption)")
	}
	for _, r := range recs {
		seen := map[string]bool{}
		for _, s := range r.Shapes {
			told := false
			for _, l := range s.Lines {
				for _, w := range Wordings {
					if strings.Contains(l, w.Text) {
						seen[w.Text] = true
						if !w.Recorded(r.Version) {
							t.Errorf("%s %s: %q says %q, a wording not listed for %s", r.Version, s.Name, l, w.Text, r.Version)
						}
					}
				}
				w, ok := MatchLog(l)
				if !ok {
					continue
				}
				switch {
				case w.Cause == s.Cause:
					told = true
				case w.Cause != CauseUnreadable:
					t.Errorf("%s %s (%s): %q tells %s", r.Version, s.Name, s.Cause, l, w.Cause)
				}
			}
			if !told {
				t.Errorf("%s %s: no log line tells %s: %q", r.Version, s.Name, s.Cause, s.Lines)
			}

			before := Specs(s.Before).Read("secrets", s.StoredKey, s.StoredValue)
			if before.Outcome != Decrypts || before.Provider != s.Before[0].Provider {
				t.Errorf("%s %s: the value kube-apiserver stored under %s: %s: %s", r.Version, s.Name, Specs(s.Before), before.Outcome, before.Why)
			}
			after := Specs(s.After).Read("secrets", s.StoredKey, s.StoredValue)
			if after.Outcome != DoesNotDecrypt || after.Cause() != s.Cause {
				t.Errorf("%s %s: under %s: %s (%s): %s", r.Version, s.Name, Specs(s.After), after.Outcome, after.Cause(), after.Why)
			}
			if !slices.ContainsFunc(s.Lines, func(l string) bool { return strings.Contains(l, after.APIServer) }) {
				t.Errorf("%s %s: kube-apiserver never said %q, the words predicted for the value: %q", r.Version, s.Name, after.APIServer, s.Lines)
			}
		}
		for _, w := range Wordings {
			if w.Recorded(r.Version) && !seen[w.Text] {
				t.Errorf("%q is listed for %s but was not recorded from it", w.Text, r.Version)
			}
		}
	}
}

// readRecordings reads dir's VERSION.json files, in version order.
func readRecordings(fsys fs.FS, dir string) ([]Recording, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Recording
	for _, n := range names {
		raw, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		var r Recording
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Recording) int { return compareVersions(a.Version, b.Version) })
	return out, nil
}

// compareVersions orders vMAJOR.MINOR.PATCH by number.
func compareVersions(a, b string) int {
	var x, y [3]int
	fmt.Sscanf(a, "v%d.%d.%d", &x[0], &x[1], &x[2]) //nolint:errcheck
	fmt.Sscanf(b, "v%d.%d.%d", &y[0], &y[1], &y[2]) //nolint:errcheck
	return slices.Compare(x[:], y[:])
}
