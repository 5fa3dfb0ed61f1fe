package lab

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/breakglass-dev/breakglass/audit"
)

// The upgrade killed by its own flags, replayed on the real binaries: each
// refused flag never starts kube-apiserver TO, the replay reports the
// binary's own line, and the audit predicted that very line. The extraArgs
// come from a machine config (-f) and from --apiserver-arg.
func TestReplayRefusedFlags(t *testing.T) {
	for _, tc := range []struct {
		name, from, to string
		args           map[string]string
		machineConfig  string
		want           string
	}{
		{name: "gate locked", from: "v1.33.13", to: "v1.34.4", args: map[string]string{"feature-gates": "MultiCIDRServiceAllocator=false"},
			want: `"command failed" err="cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true"`},
		{name: "flag removed", from: "v1.32.13", to: "v1.34.4", machineConfig: "../audit/testdata/machineconfig/cloud-provider-1.32.yaml",
			want: "Error: unknown flag: --cloud-provider"},
		{name: "version not registered", from: "v1.33.13", to: "v1.34.4", args: map[string]string{"runtime-config": "networking.k8s.io/v1alpha1=true"},
			want: "group version networking.k8s.io/v1alpha1 that has not been registered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bin := needBinaries(t, tc.from, tc.to)
			opts := ReplayOptions{From: tc.from, To: tc.to, APIServerArgs: tc.args, KubeBinDir: bin, Log: testWriter{t}}
			if tc.machineConfig != "" {
				data, err := os.ReadFile(tc.machineConfig)
				if err != nil {
					t.Fatal(err)
				}
				opts.Sources = []ReplaySource{{Name: tc.machineConfig, Data: data}}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			rep, err := Replay(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			run := rep.Runs[0]
			t.Logf("%s -> %s: %s in %s: %s", tc.from, tc.to, run.Outcome, run.Elapsed, run.ExitReason)
			if run.Outcome != OutcomeDeadlock || !run.NeverStarts || !strings.Contains(run.ExitReason, tc.want) {
				t.Errorf("outcome %s, never starts %t, exit %q; want never starts with %q", run.Outcome, run.NeverStarts, run.ExitReason, tc.want)
			}
			if !run.Agrees || run.Prediction.Risk != audit.RiskDeadlock {
				t.Errorf("the audit did not predict it: %+v, %s", run.Prediction, run.Mismatch)
			}
			if rep.Err() == nil {
				t.Error("a deadlock reported as a success")
			}
			var text strings.Builder
			if err := WriteReplay(&text, rep); err != nil || !strings.Contains(text.String(), "NEVER STARTS") || !strings.Contains(text.String(), tc.want) {
				t.Errorf("rendered: %v\n%s", err, text.String())
			}
		})
	}
}
