package upgradecheck

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Minor is a Kubernetes minor version, 34 for 1.34: what --to and --from
// name, parsed once where they enter (ParseMinor) and carried typed, and
// what the control planes' images and the kubelets report (minorOf). 0 is
// none.
type Minor int

// The minors breakglass knows: the lab's binaries, their recorded flags
// and start-up writes.
const MinKnown, MaxKnown Minor = 32, 37

// String is "1.34" ("" for none).
func (m Minor) String() string {
	if m == 0 {
		return ""
	}
	return "1." + strconv.Itoa(int(m))
}

// Known tells whether breakglass knows the minor.
func (m Minor) Known() bool { return m >= MinKnown && m <= MaxKnown }

// ParseMinor reads a version as talosctl upgrade-k8s takes it ("1.35",
// "1.35.0", "v1.35.0"); one breakglass does not know is refused.
func ParseMinor(v string) (Minor, error) {
	m, err := minorOf(v)
	if err != nil {
		return 0, err
	}
	if !m.Known() {
		return 0, fmt.Errorf("Kubernetes %s is outside what breakglass knows (%s to %s): its flags and start-up writes were never recorded", m, MinKnown, MaxKnown)
	}
	return m, nil
}

// minorOf is the minor of any 1.NN version ("1.34", "v1.34.4",
// "1.34.4-rc.1"): what is outside MinKnown to MaxKnown is the upgrade
// path's to judge.
func minorOf(v string) (Minor, error) {
	m := minorShape.FindStringSubmatch(strings.TrimSpace(v))
	if m == nil {
		return 0, fmt.Errorf("%q is not a Kubernetes version 1.NN or 1.NN.P", v)
	}
	n, err := strconv.Atoi(m[1])
	return Minor(n), err
}

var minorShape = regexp.MustCompile(`^v?1\.([0-9]{1,3})(?:\.[0-9]+(?:[-+][0-9A-Za-z.+-]*)?)?$`)
