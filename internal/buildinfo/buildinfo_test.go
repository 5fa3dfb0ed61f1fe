package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFill(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name                  string
		version, commit, date string
		bi                    debug.BuildInfo
		want                  Info
	}{
		{"stamped by make", "v1.2.0", "def456", "2026-11-30T09:00:00Z", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			Info{Version: "v1.2.0", Commit: "def456", BuildDate: "2026-11-30T09:00:00Z"}},
		{"go install ...@v1.2.0", "dev", "", "", debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}},
			Info{Version: "v1.2.0"}},
		{"go build in a changed checkout", "dev", "", "", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			Info{Version: "dev", Commit: "abc123-dirty", BuildDate: "2026-12-01T10:00:00Z"}},
	} {
		got := Info{Version: tc.version, Commit: tc.commit, BuildDate: tc.date}
		fill(&got, &tc.bi)
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestRead(t *testing.T) {
	i := Read("dev", "", "")
	if i.Version != "dev" || i.Commit != Unknown || i.BuildDate != Unknown || i.GoVersion != runtime.Version() || i.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("%+v", i)
	}
	if got, want := i.Text("breakglass"), "breakglass dev\n  commit:     unknown\n  build date: unknown\n  go:         "+runtime.Version()+" "+i.Platform+"\n"; got != want {
		t.Errorf("text %q, want %q", got, want)
	}
}
