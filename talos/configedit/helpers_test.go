package configedit

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

var generated = sync.OnceValues(func() ([]byte, error) {
	vc := config.TalosVersionCurrent

	bundle, err := secrets.NewBundle(secrets.NewFixedClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), vc)
	if err != nil {
		return nil, err
	}

	in, err := generate.NewInput("lab", "https://10.5.0.2:6443", constants.DefaultKubernetesVersion,
		generate.WithVersionContract(vc), generate.WithSecretsBundle(bundle))
	if err != nil {
		return nil, err
	}

	cfg, err := in.Config(machine.TypeControlPlane)
	if err != nil {
		return nil, err
	}

	return cfg.Bytes()
})

// generatedConfig is a realistic Talos 1.13 control-plane config (two documents, with comments).
func generatedConfig(tb testing.TB) []byte {
	tb.Helper()

	b, err := generated()
	if err != nil {
		tb.Fatal(err)
	}

	return b
}

// disableVAW is Disable of ValidatingAdmissionWebhook, the incident's plugin.
func disableVAW(tb testing.TB, in []byte) Result {
	tb.Helper()

	res, err := Disable(in, Options{Plugins: []string{vaw}})
	if err != nil {
		tb.Fatal(err)
	}

	return res
}

func mustLoad(tb testing.TB, b []byte) {
	tb.Helper()

	if _, err := configloader.NewFromBytes(b); err != nil {
		tb.Fatalf("machinery loader rejects the config: %v\n%s", err, b)
	}
}

// changedLines counts the lines between the common head and the common tail of a and b (the larger side).
func changedLines(a, b []byte) int {
	al := strings.SplitAfter(string(a), "\n")
	bl := strings.SplitAfter(string(b), "\n")

	i := 0
	for i < len(al) && i < len(bl) && al[i] == bl[i] {
		i++
	}

	j := 0
	for j < len(al)-i && j < len(bl)-i && al[len(al)-1-j] == bl[len(bl)-1-j] {
		j++
	}

	return max(len(al)-i-j, len(bl)-i-j)
}

// diffLines counts the lines deleted plus the lines inserted between a and b (longest common subsequence).
func diffLines(a, b []byte) int {
	al := strings.SplitAfter(string(a), "\n")
	bl := strings.SplitAfter(string(b), "\n")

	prev := make([]int, len(bl)+1)
	cur := make([]int, len(bl)+1)

	for i := 1; i <= len(al); i++ {
		for j := 1; j <= len(bl); j++ {
			switch {
			case al[i-1] == bl[j-1]:
				cur[j] = prev[j-1] + 1
			case prev[j] >= cur[j-1]:
				cur[j] = prev[j]
			default:
				cur[j] = cur[j-1]
			}
		}

		prev, cur = cur, prev
	}

	return len(al) + len(bl) - 2*prev[len(bl)]
}
