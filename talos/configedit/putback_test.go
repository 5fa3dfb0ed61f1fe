package configedit

import (
	"bytes"
	"strings"
	"testing"
)

// PutBackArgs after RemoveArgs: untouched, the config comes back byte for
// byte; edited since, only what the removal took goes back into today's
// value, and the colleague's edit stays. A second put-back changes nothing.
func TestPutBackArgs(t *testing.T) {
	for _, tc := range []struct {
		name     string
		extra    string // the extraArgs entry before the removal (after argsHead)
		removals []ArgRemoval
		edit     func(string) string // a colleague's edit after the removal; nil: none
		want     string              // the extraArgs entry after the put-back
		exact    bool                // the removed keys' recorded text came back
		same     bool                // the whole config is what it was before the removal
		kept     string              // a word the Kept lines must hold
	}{
		{name: "untouched: byte for byte",
			extra:    "        extraArgs:\n            feature-gates: MutatingAdmissionPolicy=true,MultiCIDRServiceAllocator=false # carried\n            audit-log-maxage: \"30\"\n",
			removals: []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false"}}},
			want:     "        extraArgs:\n            feature-gates: MutatingAdmissionPolicy=true,MultiCIDRServiceAllocator=false # carried\n            audit-log-maxage: \"30\"\n",
			exact:    true, same: true},
		{name: "a gate added since stays, the refused one goes back at its place",
			extra:    "        extraArgs:\n            feature-gates: MutatingAdmissionPolicy=true,MultiCIDRServiceAllocator=false # carried\n",
			removals: []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false"}}},
			edit: func(s string) string {
				return strings.Replace(s, "feature-gates: MutatingAdmissionPolicy=true", "feature-gates: MutatingAdmissionPolicy=true,APIResponseCompression=true", 1)
			},
			want: "        extraArgs:\n            feature-gates: MutatingAdmissionPolicy=true,MultiCIDRServiceAllocator=false,APIResponseCompression=true # carried\n",
			kept: "APIResponseCompression=true"},
		{name: "list form: the colleague's item stays",
			extra:    "        extraArgs:\n            feature-gates:\n                - MultiCIDRServiceAllocator=false\n                - MutatingAdmissionPolicy=true\n",
			removals: []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false"}}},
			edit: func(s string) string {
				return strings.Replace(s, "                - MutatingAdmissionPolicy=true\n", "                - MutatingAdmissionPolicy=true\n                - APIResponseCompression=true\n", 1)
			},
			want: "        extraArgs:\n            feature-gates:\n                - MultiCIDRServiceAllocator=false\n                - MutatingAdmissionPolicy=true\n                - APIResponseCompression=true\n",
			kept: "APIResponseCompression=true"},
		{name: "the gate set again since: today's value stays",
			extra:    "        extraArgs:\n            feature-gates: A=true,MultiCIDRServiceAllocator=false\n",
			removals: []ArgRemoval{{Key: "feature-gates", Items: []string{"MultiCIDRServiceAllocator=false"}}},
			edit: func(s string) string {
				return strings.Replace(s, "feature-gates: A=true", "feature-gates: A=true,MultiCIDRServiceAllocator=true", 1)
			},
			want: "        extraArgs:\n            feature-gates: A=true,MultiCIDRServiceAllocator=true\n",
			kept: "set again"},
		{name: "a whole key comes back at its place while another key was edited",
			extra:    "        extraArgs:\n            cloud-provider: external\n            feature-gates: A=true\n",
			removals: []ArgRemoval{{Key: "cloud-provider"}},
			edit: func(s string) string {
				return strings.Replace(s, "feature-gates: A=true", "feature-gates: A=true,B=true", 1)
			},
			want: "        extraArgs:\n            cloud-provider: external\n            feature-gates: A=true,B=true\n", exact: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(argsHead + tc.extra)
			rm, err := RemoveArgs(in, tc.removals)
			if err != nil {
				t.Fatal(err)
			}
			now := string(rm.Config)
			if tc.edit != nil {
				if now = tc.edit(now); now == string(rm.Config) {
					t.Fatal("the colleague's edit changed nothing: fix the test")
				}
			}
			pb, err := PutBackArgs([]byte(now), rm.Record, rm.Changes)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimPrefix(string(pb.Config), argsHead); got != tc.want {
				t.Errorf("put back:\n%s\nwant:\n%s", got, tc.want)
			}
			if pb.Exact != tc.exact || bytes.Equal(pb.Config, in) != tc.same {
				t.Errorf("exact %v, want %v; the same as before: %v, want %v", pb.Exact, tc.exact, bytes.Equal(pb.Config, in), tc.same)
			}
			if tc.kept != "" && !strings.Contains(strings.Join(pb.Kept, "\n"), tc.kept) {
				t.Errorf("kept %q, want it to name %q", pb.Kept, tc.kept)
			}
			for _, c := range pb.Changes {
				if c.Before.Form == FormAbsent && c.After.Form == FormAbsent {
					t.Errorf("a change from nothing to nothing: %+v", c)
				}
			}
			again, err := PutBackArgs(pb.Config, rm.Record, rm.Changes)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again.Config, pb.Config) || len(again.Changes) != 0 {
				t.Errorf("a second put-back changed the config: %+v", again.Changes)
			}
		})
	}
}
