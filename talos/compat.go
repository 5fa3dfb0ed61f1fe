package talos

import (
	"errors"
	"fmt"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/compatibility/talos110"
	"github.com/siderolabs/talos/pkg/machinery/compatibility/talos111"
	"github.com/siderolabs/talos/pkg/machinery/compatibility/talos112"
	"github.com/siderolabs/talos/pkg/machinery/compatibility/talos113"
	"github.com/siderolabs/talos/pkg/machinery/compatibility/talos19"
)

// Talos's support matrix: the Kubernetes versions each Talos minor runs.
// It is the machinery's own table (github.com/siderolabs/talos/pkg/
// machinery/compatibility, talos1NN.MinimumKubernetesVersion and
// MaximumKubernetesVersion, in the version go.mod pins), the one `talosctl
// upgrade-k8s` checks every node against before it changes anything
// (pkg/cluster/kubernetes/compat.go VerifyVersionCompatibility), and the
// table the docs publish (talos.dev/vX.Y/introduction/support-matrix/).

// KubernetesSupport is what the table says of one Talos version and one
// Kubernetes version.
type KubernetesSupport struct {
	Talos, Kubernetes string
	// Known: the table has a row for this Talos minor; without one nothing
	// is said either way (a Talos newer than this breakglass's machinery).
	Known bool
	// Supported: Talos runs that Kubernetes (decided by the machinery's
	// SupportedWith, as talosctl decides it).
	Supported bool
	// Min and Max are the Talos minor's range ("1.31", "1.36").
	Min, Max string
	// Reason is the machinery's words when not supported.
	Reason string
}

// supportRows are the table's rows this breakglass prints ranges for
// (the Talos minors whose Kubernetes range reaches 1.32 and later).
var supportRows = []struct {
	minor    [2]uint64
	min, max semver.Version
}{
	{talos19.MajorMinor, talos19.MinimumKubernetesVersion, talos19.MaximumKubernetesVersion},
	{talos110.MajorMinor, talos110.MinimumKubernetesVersion, talos110.MaximumKubernetesVersion},
	{talos111.MajorMinor, talos111.MinimumKubernetesVersion, talos111.MaximumKubernetesVersion},
	{talos112.MajorMinor, talos112.MinimumKubernetesVersion, talos112.MaximumKubernetesVersion},
	{talos113.MajorMinor, talos113.MinimumKubernetesVersion, talos113.MaximumKubernetesVersion},
}

// NewestTalosInTable is the newest Talos minor the table knows, "1.13".
func NewestTalosInTable() string {
	r := supportRows[len(supportRows)-1].minor
	return fmt.Sprintf("%d.%d", r[0], r[1])
}

// SupportsKubernetes tells whether Talos talosVersion (as a node reports
// it, "v1.13.8") runs Kubernetes kubernetesVersion ("1.34", "v1.34.4").
func SupportsKubernetes(talosVersion, kubernetesVersion string) (KubernetesSupport, error) {
	s := KubernetesSupport{Talos: talosVersion, Kubernetes: kubernetesVersion}
	tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talosVersion})
	if err != nil {
		return s, fmt.Errorf("Talos version %q: %w", talosVersion, err)
	}
	kv, err := compatibility.ParseKubernetesVersion(kubernetesVersion)
	if err != nil {
		return s, fmt.Errorf("Kubernetes version %q: %w", kubernetesVersion, err)
	}
	parsed, _ := semver.ParseTolerant(talosVersion)
	for _, r := range supportRows {
		if r.minor == [2]uint64{parsed.Major, parsed.Minor} {
			s.Min, s.Max = fmt.Sprintf("%d.%d", r.min.Major, r.min.Minor), fmt.Sprintf("%d.%d", r.max.Major, r.max.Minor)
		}
	}
	err = kv.SupportedWith(tv)
	switch {
	case err == nil:
		s.Known, s.Supported = true, true
	case strings.Contains(err.Error(), "is not supported"):
		// "compatibility with version X is not supported": no row.
		s.Reason = err.Error()
	default:
		s.Known, s.Reason = true, err.Error()
	}
	if s.Known && s.Min == "" {
		return s, errors.New("talos: the support table's rows and the machinery's disagree for Talos " + talosVersion)
	}
	return s, nil
}
