package startupwrites

import (
	"bytes"
	"strings"
	"testing"
)

// Each file decodes strictly, is named after its pair, and encodes back to
// its own bytes (what `go run ./lab/recordstartup` writes is what is read).
func TestRecordingsRoundTrip(t *testing.T) {
	entries, err := recorded.ReadDir("recorded")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no recordings: %v", err)
	}
	for _, e := range entries {
		data, err := recorded.ReadFile("recorded/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		r, err := Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if r.FileName() != e.Name() {
			t.Errorf("%s holds %s", e.Name(), r.FileName())
		}
		again, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, data) {
			t.Errorf("%s: encodes to other bytes", e.Name())
		}
		if r.EtcdPuts <= 0 || r.EtcdBytes <= 0 || r.ReadyAfter == "never" || r.Command == "" || len(r.Flags) == 0 {
			t.Errorf("%s: incomplete header %+v", e.Name(), r)
		}
		for _, w := range r.Writes {
			if w.Username != "system:apiserver" {
				t.Errorf("%s: %s sent as %q", e.Name(), w, w.Username)
			}
		}
	}
}

func TestFor(t *testing.T) {
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(all); i++ {
		if !less(all[i-1].From, all[i].From) && all[i-1].From != all[i].From {
			t.Errorf("not sorted: %s before %s", all[i-1].From, all[i].From)
		}
	}
	for to := 33; to <= 37; to++ {
		r, ok := For(to-1, to)
		if !ok {
			t.Errorf("1.%d -> 1.%d not recorded", to-1, to)
			continue
		}
		if !strings.HasPrefix(r.To, "v1."+itoa(to)+".") {
			t.Errorf("1.%d -> 1.%d is %s", to-1, to, r.FileName())
		}
	}
	if _, ok := For(33, 35); ok {
		t.Error("1.33 -> 1.35 recorded")
	}
}

func itoa(n int) string { return string(rune('0'+n/10)) + string(rune('0'+n%10)) }

func TestDecodeRefuses(t *testing.T) {
	for _, bad := range []string{
		`{"from":"v1.34.4","to":"v1.35.4","writes":[]}`,
		`{"from":"1.34.4","to":"v1.35.4","writes":[{"operation":"CREATE","version":"v1","resource":"x"}]}`,
		`{"from":"v1.34.4","to":"v1.35.4","surprise":1,"writes":[{"operation":"CREATE","version":"v1","resource":"x"}]}`,
		`{"from":"v1.34.4","to":"v1.35.4","writes":[{"operation":"","version":"v1","resource":"x"}]}`,
	} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}
