package audit

import (
	"errors"
	"strings"
	"testing"
)

func ids(t *testing.T, from, to string) map[string]bool {
	t.Helper()
	reqs, err := ModelledStartupRequests(from, to)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, r := range reqs {
		out[r.ID] = true
	}
	return out
}

// The catalogue's model: the default ServiceCIDR and its IPAddresses are
// created by the first 1.33+ start only: an upgrade from 1.33 or later
// finds them there.
func TestStartupRequestsKeyedByBothVersions(t *testing.T) {
	once := []string{"servicecidr-create", "ipaddress-create", "servicecidr-status", "event-servicecidr-create"}
	for _, tc := range []struct {
		from, to string
		want     bool
	}{
		{"1.32", "1.33", true},
		{"1.32", "1.34", true},
		{"v1.32.13", "v1.37.2", true},
		{"1.32", "1.32", false},
		{"1.33", "1.34", false},
		{"1.33", "1.33", false},
		{"1.34", "1.35", false},
		{"1.36", "1.37", false},
	} {
		got := ids(t, tc.from, tc.to)
		for _, id := range once {
			if got[id] != tc.want {
				t.Errorf("%s -> %s: %s sent %v, want %v", tc.from, tc.to, id, got[id], tc.want)
			}
		}
		// The RBAC bootstrap reconciliation runs on every start.
		if !got["clusterrole-update"] || !got["clusterrole-create"] {
			t.Errorf("%s -> %s: no RBAC bootstrap writes", tc.from, tc.to)
		}
	}
}

func TestAuditFromTo(t *testing.T) {
	cfgs := parseFile(t, "incident-kyverno-like.yaml")
	blocksServiceCIDR := func(rep Report) bool {
		for _, f := range rep.Findings {
			for _, b := range f.Blocks {
				if b.ID == "servicecidr-create" {
					return true
				}
			}
		}
		return false
	}
	rep, err := Audit(cfgs, Options{FromVersion: "1.33", ToVersion: "1.34"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FromVersion != "1.33" || rep.ToVersion != "1.34" || rep.KubernetesVersion != "1.34" {
		t.Errorf("versions %q %q %q", rep.FromVersion, rep.ToVersion, rep.KubernetesVersion)
	}
	if blocksServiceCIDR(rep) || rep.Risk != RiskDeadlock { // still deadlocks on RBAC
		t.Errorf("1.33 -> 1.34: risk %s, ServiceCIDR blocked %v", rep.Risk, blocksServiceCIDR(rep))
	}
	rep, err = Audit(cfgs, Options{FromVersion: "1.32", ToVersion: "1.33"})
	if err != nil || !blocksServiceCIDR(rep) {
		t.Errorf("1.32 -> 1.33: %v, ServiceCIDR blocked %v", err, blocksServiceCIDR(rep))
	}
	// Today's default and the old field name.
	for _, o := range []Options{{}, {KubernetesVersion: "1.34"}, {ToVersion: "v1.34.4", KubernetesVersion: "1.34"}} {
		rep, err := Audit(cfgs, o)
		if err != nil || rep.FromVersion != "1.32" || rep.ToVersion != "1.34" || !blocksServiceCIDR(rep) {
			t.Errorf("%+v: %v %q -> %q", o, err, rep.FromVersion, rep.ToVersion)
		}
	}
	for _, o := range []Options{{FromVersion: "1.35", ToVersion: "1.34"}, {FromVersion: "1.31", ToVersion: "1.32"},
		{ToVersion: "1.38"}, {ToVersion: "1.35", KubernetesVersion: "1.34"}} {
		_, err := Audit(cfgs, o)
		if !errors.Is(err, ErrInvalidInput) {
			t.Errorf("%+v: err %v", o, err)
		}
	}
	var oe *VersionOrderError
	if _, err := StartupRequests("1.36", "1.35"); !errors.As(err, &oe) {
		t.Errorf("downgrade: %v", err)
	}
	if v, err := NextVersion("v1.36.3"); err != nil || v != "1.37" {
		t.Errorf("next of 1.36: %q %v", v, err)
	}
	if _, err := NextVersion("1.37"); err == nil {
		t.Error("next of 1.37 is not modelled")
	}
}

// Issue 29: a version is read whole. --to v1.34.x and --to
// 1.34.99999999999999999999 were taken as 1.34: the patch was never read.
// Each is refused, saying what is wrong with it; a real patch, a
// pre-release or a build tag (as an image or /version says it) is read.
func TestVersionReadWhole(t *testing.T) {
	for _, c := range []struct{ v, reason string }{
		{"v1.34.x", `its patch "x" is not a number`},
		{"1.34.99999999999999999999", `its patch "99999999999999999999" is out of range`},
		{"1.34.", `want 1.NN or 1.NN.P`},
		{"1.+34", `want 1.NN or 1.NN.P`},
		{"1.034", `its minor "034" has a leading zero`},
		{"1.34.04", `its patch "04" has a leading zero`},
		{"1.34.4.1", `want 1.NN or 1.NN.P`},
		{"v1.34.4-", `want 1.NN or 1.NN.P`},
		{" 1.34 x", `want 1.NN or 1.NN.P`},
	} {
		_, err := NormalizeVersion(c.v)
		var uv *UnsupportedVersionError
		if !errors.As(err, &uv) || !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("NormalizeVersion(%q): %v, want refused: %s", c.v, err, c.reason)
		}
		if _, _, err := (Options{ToVersion: c.v}).Versions(); err == nil {
			t.Errorf("--to %q accepted", c.v)
		}
	}
	for v, want := range map[string]string{"1.34": "1.34", "v1.34.4": "1.34", "1.34.0": "1.34", "v1.33.13": "1.33",
		"v1.34.4-rc.1": "1.34", "v1.34.4+k3s1": "1.34", "v1.35.0-alpha.2.123+abcdef": "1.35", " v1.36.3 ": "1.36"} {
		if got, err := NormalizeVersion(v); err != nil || got != want {
			t.Errorf("NormalizeVersion(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
}
