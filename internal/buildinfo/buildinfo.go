// Package buildinfo says what a breakglass binary was built from: the
// version, commit and build date a release build stamps in (make build,
// make dist), else what the Go toolchain recorded (go install
// ...@version records the module version; a build in a git checkout the
// commit and its date).
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is what `version` prints.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	BuildDate string `json:"buildDate"` // the commit's date, never the clock's: builds are reproducible
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"` // GOOS/GOARCH
}

// Unknown is said of what neither the stamp nor the toolchain recorded.
const Unknown = "unknown"

// Read is the stamped values (main.version, main.commit, main.buildDate,
// set with -ldflags -X; "" or "dev" when not stamped), completed from
// the build information the toolchain embeds.
func Read(version, commit, date string) Info {
	info := Info{Version: version, Commit: commit, BuildDate: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		fill(&info, bi)
	}
	for _, f := range []*string{&info.Version, &info.Commit, &info.BuildDate} {
		if *f == "" {
			*f = Unknown
		}
	}
	return info
}

func fill(info *Info, bi *debug.BuildInfo) {
	if (info.Version == "" || info.Version == "dev") && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		info.Version = bi.Main.Version // go install ...@v1.2.3
	}
	fromVCS, modified := false, false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if info.Commit == "" {
				info.Commit, fromVCS = s.Value, true
			}
		case "vcs.time":
			if info.BuildDate == "" {
				info.BuildDate = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if fromVCS && modified {
		info.Commit += "-dirty" // a stamped commit says so itself (git describe --dirty)
	}
}

// Text is the human form: NAME VERSION, then one line each.
func (i Info) Text(name string) string {
	return fmt.Sprintf("%s %s\n  commit:     %s\n  build date: %s\n  go:         %s %s\n", name, i.Version, i.Commit, i.BuildDate, i.GoVersion, i.Platform)
}
