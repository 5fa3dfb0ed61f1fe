package lab

// What a kube-apiserver binary accepts on its command line, asked of the
// binary itself (internal/apiserverargs has the method and the format).

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/internal/apiserverargs"
	"github.com/breakglass-dev/breakglass/talos/talostest"
)

// ArgCandidates are the names a recording asks a binary about.
type ArgCandidates struct {
	Flags         []string // without dashes
	Gates         []string
	GroupVersions []string // GROUP/VERSION, "v1" for the core group
}

// Names no binary knows, asked to learn the words of a refusal.
const (
	probeFlag  = "breakglass-probe-no-such-flag"
	probeGate  = "BreakglassProbeNoSuchGate"
	probeGroup = "breakglass-probe.example.com"
)

// pastArgs are names of flags and API versions some kube-apiserver once
// accepted that the sources of the lab's versions may no longer name: a
// cluster's extraArgs carry them from older minors.
var (
	pastFlags = []string{"address", "port", "insecure-port", "insecure-bind-address", "kubelet-https", "service-account-api-audiences",
		"master-service-namespace", "target-ram-mb", "deserialization-cache-size", "enable-swagger-ui", "basic-auth-file",
		"repair-malformed-updates", "storage-versions", "experimental-encryption-provider-config", "cloud-provider", "cloud-config",
		"kubelet-port", "kubelet-read-only-port", "default-watch-cache-size", "enable-logs-handler", "log-flush-frequency",
		"logtostderr", "alsologtostderr", "log-dir", "log-file", "log-file-max-size", "log-backtrace-at", "stderrthreshold",
		"skip-headers", "skip-log-headers", "add-dir-header", "one-output", "apiserver-count", "feature-gates", "runtime-config",
		"enable-aggregator-routing", "admission-control", "admission-control-config-file", "ssh-user", "ssh-keyfile",
		"allow-untagged-cloud", "pod-infra-container-image", "node-sync-period"}
	pastGroupVersions = []string{"extensions/v1beta1", "batch/v2alpha1", "policy/v1beta1", "autoscaling/v2beta1", "autoscaling/v2beta2",
		"flowcontrol.apiserver.k8s.io/v1alpha1", "flowcontrol.apiserver.k8s.io/v1beta1", "flowcontrol.apiserver.k8s.io/v1beta2",
		"flowcontrol.apiserver.k8s.io/v1beta3", "admissionregistration.k8s.io/v1alpha1", "admissionregistration.k8s.io/v1beta1",
		"resource.k8s.io/v1alpha2", "resource.k8s.io/v1alpha3", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2",
		"networking.k8s.io/v1alpha1", "networking.k8s.io/v1beta1", "storage.k8s.io/v1alpha1", "storagemigration.k8s.io/v1alpha1",
		"internal.apiserver.k8s.io/v1alpha1", "coordination.k8s.io/v1alpha2", "coordination.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha1",
		"apiextensions.k8s.io/v1beta1", "apiregistration.k8s.io/v1beta1", "certificates.k8s.io/v1alpha1", "certificates.k8s.io/v1beta1"}
)

// KubeHelp is what `kube-apiserver --help` lists.
type KubeHelp struct {
	Flags map[string]string   // name -> type ("" for a bool)
	Gates map[string]helpGate // the settable gates
}

type helpGate struct {
	Stage   string
	Default bool
}

var (
	helpFlagLine = regexp.MustCompile(`^\s+(?:-[a-zA-Z], )?--([a-z0-9][a-z0-9-]*)(?: (\S+))?(?:\s{2,}|$)`)
	helpGateLine = regexp.MustCompile(`^\s+(?:kube:)?([A-Za-z0-9]+)=true\|false \((ALPHA|BETA|GA|DEPRECATED) - default=(true|false)\)`)
)

// ReadKubeHelp runs `BIN --help` and reads its flags and gates.
func ReadKubeHelp(ctx context.Context, bin string) (*KubeHelp, error) {
	out, _ := runProbe(ctx, bin, "--help")
	h := &KubeHelp{Flags: map[string]string{}, Gates: map[string]helpGate{}}
	for _, l := range out {
		if m := helpFlagLine.FindStringSubmatch(l); m != nil {
			h.Flags[m[1]] = m[2]
		}
		if m := helpGateLine.FindStringSubmatch(l); m != nil {
			h.Gates[m[1]] = helpGate{Stage: m[2], Default: m[3] == "true"}
		}
	}
	if len(h.Flags) < 50 || len(h.Gates) < 10 {
		return nil, fmt.Errorf("%s --help lists %d flags and %d feature gates: not kube-apiserver's help", bin, len(h.Flags), len(h.Gates))
	}
	return h, nil
}

// KubeSourceDirs are the module cache directories of one Kubernetes
// version's sources that hold kube-apiserver's flags, gates and API groups,
// those present.
func KubeSourceDirs(modCache, version string) []string {
	staging := "v0." + strings.TrimPrefix(version, "v1.")
	var out []string
	for _, d := range []string{"kubernetes@" + version, "api@" + staging, "apiserver@" + staging, "apiextensions-apiserver@" + staging,
		"kube-aggregator@" + staging, "component-base@" + staging, "client-go@" + staging, "controller-manager@" + staging, "cloud-provider@" + staging} {
		p := filepath.Join(modCache, "k8s.io", d)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			out = append(out, p)
		}
	}
	return out
}

var (
	srcMarked   = regexp.MustCompile(`Mark(?:Deprecated|Hidden)\("([a-z0-9][a-z0-9-]*)"`)
	srcFlagDef  = regexp.MustCompile(`\.(?:Var|VarP|String|StringP|StringVar|StringVarP|Bool|BoolP|BoolVar|BoolVarP|Int|IntVar|IntVarP|Int32Var|Int64Var|UintVar|DurationVar|StringSliceVar|StringArrayVar|Float32Var|Float64Var|IPVar|IPNetVar|StringToStringVar)\([^"\n]*"([a-z][a-z0-9-]*)"`)
	srcGate     = regexp.MustCompile(`Feature\s*=\s*"([A-Za-z0-9]+)"`)
	srcGroup    = regexp.MustCompile(`GroupName\s*=\s*"([a-z0-9.-]*)"`)
	versionDir  = regexp.MustCompile(`^v\d+(?:(?:alpha|beta)\d+)?$`)
	flagSrcDirs = []string{"cmd/kube-apiserver", "pkg/kubeapiserver", "pkg/controlplane", "pkg/server/options", "pkg/admission", "logs", "cli",
		"featuregate", "version", "metrics", "tracing", "pkg/cmd"}
)

// SourceCandidates reads the names in the sources under dirs (from
// KubeSourceDirs).
func SourceCandidates(dirs []string) (ArgCandidates, error) {
	var c ArgCandidates
	for _, root := range dirs {
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if d.IsDir() {
				if d.Name() == "testdata" || d.Name() == "test" || d.Name() == "vendor" || strings.HasPrefix(rel, "staging") || strings.HasPrefix(rel, "third_party") {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, prefix := range flagSrcDirs {
				if strings.HasPrefix(filepath.ToSlash(rel), prefix) {
					for _, m := range srcMarked.FindAllSubmatch(b, -1) {
						c.Flags = append(c.Flags, string(m[1]))
					}
					for _, m := range srcFlagDef.FindAllSubmatch(b, -1) {
						c.Flags = append(c.Flags, string(m[1]))
					}
					break
				}
			}
			if strings.Contains(filepath.ToSlash(rel), "features") || strings.Contains(filepath.ToSlash(rel), "logs/api") {
				for _, m := range srcGate.FindAllSubmatch(b, -1) {
					c.Gates = append(c.Gates, string(m[1]))
				}
			}
			if d.Name() == "register.go" && versionDir.MatchString(filepath.Base(filepath.Dir(p))) {
				if m := srcGroup.FindSubmatch(b); m != nil {
					v := filepath.Base(filepath.Dir(p))
					if string(m[1]) == "" {
						c.GroupVersions = append(c.GroupVersions, v)
					} else {
						c.GroupVersions = append(c.GroupVersions, string(m[1])+"/"+v)
					}
				}
			}
			return nil
		})
		if err != nil {
			return c, err
		}
	}
	return c.sorted(), nil
}

// Union is every name in any of the candidate sets, and in any help.
func UnionCandidates(sets []ArgCandidates, helps []*KubeHelp) ArgCandidates {
	var c ArgCandidates
	for _, s := range sets {
		c.Flags = append(c.Flags, s.Flags...)
		c.Gates = append(c.Gates, s.Gates...)
		c.GroupVersions = append(c.GroupVersions, s.GroupVersions...)
	}
	for _, h := range helps {
		for f := range h.Flags {
			c.Flags = append(c.Flags, f)
		}
		for g := range h.Gates {
			c.Gates = append(c.Gates, g)
		}
	}
	c.Flags = append(c.Flags, pastFlags...)
	c.GroupVersions = append(c.GroupVersions, pastGroupVersions...)
	return c.sorted()
}

func (c ArgCandidates) sorted() ArgCandidates {
	for _, l := range []*[]string{&c.Flags, &c.Gates, &c.GroupVersions} {
		sort.Strings(*l)
		*l = slices.Compact(*l)
	}
	return c
}

// RecordArgsOptions say which binary to record.
type RecordArgsOptions struct {
	Bin, Version string
	Candidates   ArgCandidates
	Workers      int    // parallel probes (default 2)
	Dir          string // working files; default a temporary directory
	Progress     func(done, total int)
}

// RecordArgs asks the binary about every candidate and returns what it
// accepts (see internal/apiserverargs for the method).
func RecordArgs(ctx context.Context, opts RecordArgsOptions) (*apiserverargs.Binary, error) {
	if err := CheckBinaryVersion(opts.Bin, opts.Version); err != nil {
		return nil, err
	}
	p, err := newArgsProber(ctx, opts.Bin, opts.Dir)
	if err != nil {
		return nil, err
	}
	defer p.close()
	help, err := ReadKubeHelp(ctx, opts.Bin)
	if err != nil {
		return nil, err
	}
	b := &apiserverargs.Binary{Version: opts.Version}
	if b.Words, err = p.words(ctx); err != nil {
		return nil, err
	}

	// Each group once with a version no binary has: unknown, known (the
	// version is refused), or versions checked later (accepted).
	groups := map[string]bool{}
	for _, gv := range opts.Candidates.GroupVersions {
		if g, _, ok := strings.Cut(gv, "/"); ok {
			groups[g] = true
		}
	}
	type job func(context.Context) error
	var mu sync.Mutex
	var jobs []job
	for g := range groups {
		jobs = append(jobs, func(ctx context.Context) error {
			a, err := p.runtimeConfig(ctx, g+"/v9999")
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case a.Refused == b.Words.UnknownGroupRefusal(g+"/v9999"):
			case a.Refused == fmt.Sprintf(b.Words.UnregisteredVersion, g+"/v9999"):
				b.APIGroups = append(b.APIGroups, g)
			case a.Refused == "":
				b.APIGroups = append(b.APIGroups, g)
				b.VersionsCheckedLater = append(b.VersionsCheckedLater, g)
			default:
				return fmt.Errorf("--runtime-config=%s/v9999=true: %s", g, a.Refused)
			}
			return nil
		})
	}
	for _, f := range opts.Candidates.Flags {
		jobs = append(jobs, func(ctx context.Context) error {
			fl, ok, err := p.flag(ctx, f, help.Flags)
			if err != nil || !ok {
				return err
			}
			mu.Lock()
			b.Flags = append(b.Flags, fl)
			mu.Unlock()
			return nil
		})
	}
	for _, g := range opts.Candidates.Gates {
		jobs = append(jobs, func(ctx context.Context) error {
			gate, ok, err := p.gate(ctx, g, b.Words, help.Gates)
			if err != nil || !ok {
				return err
			}
			mu.Lock()
			b.Gates = append(b.Gates, gate)
			mu.Unlock()
			return nil
		})
	}
	run := func(jobs []job) error {
		return parallel(ctx, opts.Workers, len(jobs), func(ctx context.Context, i int) error { return jobs[i](ctx) }, opts.Progress)
	}
	if err := run(jobs); err != nil {
		return nil, err
	}
	// Then the versions of the groups whose versions the probe can check.
	jobs = nil
	for _, gv := range opts.Candidates.GroupVersions {
		g, _, ok := strings.Cut(gv, "/")
		if !ok {
			g = "" // the core group's "v1"
		}
		if (ok && !slices.Contains(b.APIGroups, g)) || slices.Contains(b.VersionsCheckedLater, g) {
			continue
		}
		jobs = append(jobs, func(ctx context.Context) error {
			a, err := p.runtimeConfig(ctx, gv)
			if err != nil {
				return err
			}
			switch {
			case a.Refused == "":
				mu.Lock()
				b.GroupVersions = append(b.GroupVersions, gv)
				mu.Unlock()
			case a.Refused != fmt.Sprintf(b.Words.UnregisteredVersion, gv):
				return fmt.Errorf("--runtime-config=%s=true: %s", gv, a.Refused)
			}
			return nil
		})
	}
	if err := run(jobs); err != nil {
		return nil, err
	}
	if !slices.Contains(b.APIGroups, "") && slices.Contains(b.GroupVersions, "v1") {
		b.APIGroups = append(b.APIGroups, "")
	}
	b, err = apiserverargs.Decode(mustEncode(b)) // sorted, and checked as the package reads it
	if err != nil {
		return nil, err
	}
	// Every flag and gate --help lists must have been asked.
	for f := range help.Flags {
		if _, ok := b.Flag(f); !ok && f != "help" && f != "version" {
			return nil, fmt.Errorf("%s --help lists --%s, but the binary refused it when asked", opts.Bin, f)
		}
	}
	for g := range help.Gates {
		if _, ok := b.Gate(g); !ok {
			return nil, fmt.Errorf("%s --help lists the feature gate %s, but the binary does not recognise it when asked", opts.Bin, g)
		}
	}
	return b, nil
}

func mustEncode(b *apiserverargs.Binary) []byte {
	out, err := b.Encode()
	if err != nil {
		panic(err)
	}
	return out
}

// parallel runs fn for 0..n-1 on workers goroutines; the first error stops it.
func parallel(ctx context.Context, workers, n int, fn func(context.Context, int) error, progress func(done, total int)) error {
	if workers <= 0 {
		workers = 2
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
				mu.Lock()
				done++
				if progress != nil {
					progress(done, n)
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && err != context.Canceled {
		return err
	}
	return nil
}

// argsProber runs one binary with the flags of a real start for
// --runtime-config, everything on loopback.
type argsProber struct {
	bin  string
	dir  string
	tmp  bool
	base []string
}

func newArgsProber(ctx context.Context, bin, dir string) (*argsProber, error) {
	p := &argsProber{bin: bin}
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "breakglass-args-"); err != nil {
			return nil, err
		}
		p.tmp = true
	}
	p.dir = dir
	pki, err := newRecordPKI(dir)
	if err != nil {
		p.close()
		return nil, err
	}
	egress := filepath.Join(dir, "egress-does-not-parse.yaml")
	if err := os.WriteFile(egress, []byte("this: [is not\n"), 0o600); err != nil {
		p.close()
		return nil, err
	}
	closed, err := talostest.ReservePort("127.0.0.1", 0) // nothing ever listens here
	if err != nil {
		p.close()
		return nil, err
	}
	closed.Close()
	p.base = []string{
		"--etcd-servers=https://" + closed.Addr(), "--service-cluster-ip-range=" + ServiceCIDR,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--permit-port-sharing=true",
		"--cert-dir=" + filepath.Join(dir, "certs"), "--tls-cert-file=" + pki.serverCert, "--tls-private-key-file=" + pki.serverKey,
		"--client-ca-file=" + pki.caFile, "--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + pki.saPub, "--service-account-signing-key-file=" + pki.saKey,
		"--authorization-mode=RBAC", "--egress-selector-config-file=" + egress,
	}
	return p, nil
}

func (p *argsProber) close() {
	if p.tmp {
		os.RemoveAll(p.dir)
	}
}

// egressRefusal is the error that tells a --runtime-config probe got past
// every check of the entry.
const egressRefusal = "failed to read egress selector config"

// words learns how the binary refuses what it does not know, and checks
// that it answers before acting on --version.
func (p *argsProber) words(ctx context.Context) (apiserverargs.Words, error) {
	var w apiserverargs.Words
	out, _ := runProbe(ctx, p.bin, "--"+probeFlag+"=1", "--version")
	for _, l := range out {
		if strings.Contains(l, "--"+probeFlag) {
			w.UnknownFlag = strings.Replace(l, probeFlag, "%s", 1)
		}
	}
	out, _ = runProbe(ctx, p.bin, "--feature-gates="+probeGate+"=true", "--version")
	line, e := commandFailed(out)
	w.CommandFailed = strings.Replace(line, e, "%s", 1)
	w.UnknownGate = strings.Replace(e, probeGate, "%s", 1)
	a, err := p.runtimeConfig(ctx, probeGroup+"/v1")
	if err != nil {
		return w, err
	}
	w.UnknownGroup = strings.Replace(a.Refused, probeGroup+"/v1", "%s", 1)
	if w.UnknownGroupByVersion = w.UnknownGroup != a.Refused; !w.UnknownGroupByVersion {
		w.UnknownGroup = strings.Replace(a.Refused, probeGroup, "%s", 1)
	}
	if a, err = p.runtimeConfig(ctx, "apps/v9999"); err != nil {
		return w, err
	}
	w.UnregisteredVersion = strings.Replace(a.Refused, "apps/v9999", "%s", 1)
	if a, err = p.runtimeConfig(ctx, "api/all"); err != nil || a.Refused != "" {
		return w, fmt.Errorf("%s with --runtime-config=api/all=true did not reach the egress selector config: %v %s", p.bin, err, a.Refused)
	}
	for name, s := range map[string]string{"unknown flag": w.UnknownFlag, "unknown gate": w.UnknownGate, "command failed": w.CommandFailed,
		"unknown group": w.UnknownGroup, "unregistered version": w.UnregisteredVersion} {
		if strings.Count(s, "%s") != 1 {
			return w, fmt.Errorf("%s: cannot learn how it refuses an %s (%q): does it act on --version before parsing every flag?", p.bin, name, s)
		}
	}
	return w, nil
}

// sampleValues are values each pflag type parses, for asking about a flag.
var sampleValues = map[string]string{
	"": "true", "string": "x", "strings": "x", "stringArray": "x", "int": "1", "int32": "1", "int64": "1", "uint": "1",
	"duration": "1s", "float": "1", "float32": "1", "float64": "1", "quantity": "1", "ip": "127.0.0.1", "mapStringString": "a=b",
	"stringToString": "a=b", "mapStringBool": "a=true", "portRange": "30000-32767", "namedCertKey": "a.crt,a.key",
	"colonSeparatedMultimapStringString": "kube:AllAlpha=false", "pattern=N,...": "x=1", "Level": "1", "cidrs": "10.0.0.0/24",
	"ipNet": "10.0.0.0/24", "ipSlice": "127.0.0.1", "severity": "INFO", "traceLocation": "x.go:1",
}

// parseRefusal tells from a parse error which value a flag takes.
var parseRefusal = []struct {
	re    *regexp.Regexp
	typ   string
	value string
}{
	{regexp.MustCompile(`ParseBool`), "bool", "true"},
	{regexp.MustCompile(`time: `), "duration", "1s"},
	{regexp.MustCompile(`ParseFloat`), "float", "1"},
	{regexp.MustCompile(`Parse(?:Int|Uint)|Atoi`), "int", "1"},
	{regexp.MustCompile(`(?i)invalid (?:string being converted to )?IP`), "ip", "127.0.0.1"},
	{regexp.MustCompile(`(?i)CIDR`), "cidr", "10.0.0.0/24"},
	{regexp.MustCompile(`key=value|=`), "mapStringString", "a=b"},
}

// flag asks about --name; ok is false when the binary does not know it.
func (p *argsProber) flag(ctx context.Context, name string, help map[string]string) (apiserverargs.Flag, bool, error) {
	f := apiserverargs.Flag{Name: name}
	typ, listed := help[name]
	f.Hidden, f.Type = !listed, typ
	switch name {
	case "help", "h", "version":
		return f, listed, nil // acted on, not parsed into anything
	}
	value, known := sampleValues[typ]
	if !listed || !known {
		value = "x"
	}
	for try := 0; try < 3; try++ {
		out, _ := runProbe(ctx, p.bin, "--"+name+"="+value, "--version")
		if err := ctx.Err(); err != nil {
			return f, false, err
		}
		var said []string
		version, refusal, failed := false, "", false
		for _, l := range out {
			switch {
			case strings.HasPrefix(l, "Kubernetes v"):
				version = true
			case strings.HasPrefix(l, "Error: "):
				refusal = l
			case strings.Contains(l, `"command failed" err=`):
				failed = true
			case l != "":
				said = append(said, stripKlog(l))
			}
		}
		switch {
		case version || failed:
			// Parsed (a value some later check refuses is still a known flag).
			f.Warning = strings.Join(said, "\n")
			return f, true, nil
		case strings.Contains(refusal, "unknown flag: --"+name):
			return f, false, nil
		case strings.Contains(refusal, `--`+name+`" flag`):
			// Known, but not with this value: the parse error says its type.
			next := ""
			for _, pr := range parseRefusal {
				if pr.re.MatchString(refusal) {
					if f.Type == "" && !listed {
						f.Type = pr.typ
					}
					next = pr.value
					break
				}
			}
			if next == "" || next == value {
				f.Warning = ""
				return f, true, nil // known; no value tried parses
			}
			value = next
		default:
			return f, false, fmt.Errorf("--%s=%s --version: unexpected answer: %s", name, value, strings.Join(out, " | "))
		}
	}
	return f, true, nil
}

// gate asks about --feature-gates=name=true and =false.
func (p *argsProber) gate(ctx context.Context, name string, w apiserverargs.Words, help map[string]helpGate) (apiserverargs.Gate, bool, error) {
	g := apiserverargs.Gate{Name: name}
	for _, v := range []bool{true, false} {
		out, _ := runProbe(ctx, p.bin, "--feature-gates="+name+"="+strconv.FormatBool(v), "--version")
		if err := ctx.Err(); err != nil {
			return g, false, err
		}
		var a apiserverargs.Answer
		version := false
		for _, l := range out {
			switch {
			case strings.HasPrefix(l, "Kubernetes v"):
				version = true
			case strings.Contains(l, "feature gate "+name+"=") || strings.Contains(l, `featureGate="`+name+`"`):
				// "Setting GA feature gate NAME=true. ..." up to 1.35;
				// structured from 1.36: "Warning: setting GA feature gate. ..." featureGate="NAME" value=true
				a.Warning = stripKlog(l)
			}
		}
		if !version {
			_, a.Refused = commandFailed(out)
			if a.Refused == "" {
				return g, false, fmt.Errorf("--feature-gates=%s=%t --version: unexpected answer: %s", name, v, strings.Join(out, " | "))
			}
		}
		if a.Refused == fmt.Sprintf(w.UnknownGate, name) {
			return g, false, nil
		}
		if v {
			g.True = a
		} else {
			g.False = a
		}
	}
	h, listed := help[name]
	switch {
	case listed:
		g.Stage, g.Default = h.Stage, &h.Default
	case strings.Contains(strings.ToLower(g.True.Warning+g.False.Warning), "setting ga feature gate"):
		g.Stage = apiserverargs.StageGA
	case strings.Contains(strings.ToLower(g.True.Warning+g.False.Warning), "setting deprecated feature gate"):
		g.Stage = apiserverargs.StageDeprecated
	case strings.Contains(g.True.Refused, "PreAlpha") && strings.Contains(g.False.Refused, "PreAlpha"):
		g.Stage = apiserverargs.StagePreAlpha
	}
	for _, lock := range []struct {
		refused string
		to      bool
	}{{g.False.Refused, true}, {g.True.Refused, false}} {
		if strings.Contains(lock.refused, "feature is locked to "+strconv.FormatBool(lock.to)) {
			to := lock.to
			g.LockedTo, g.Default = &to, &to
		}
	}
	if g.LockedTo != nil && g.Stage != apiserverargs.StageGA && g.Stage != apiserverargs.StageDeprecated {
		// Only GA and deprecated gates are locked: their warning was not read.
		return g, false, fmt.Errorf("gate %s is locked to %t, but its stage was not read from the warning %q%q: did the binary's words change?", name, *g.LockedTo, g.True.Warning, g.False.Warning)
	}
	return g, true, nil
}

// runtimeConfig asks about --runtime-config=key=true: accepted when the
// binary gets as far as its egress selector config.
func (p *argsProber) runtimeConfig(ctx context.Context, key string) (apiserverargs.Answer, error) {
	for try := 0; ; try++ {
		port, err := talostest.ReservePort("127.0.0.1", 0)
		if err != nil {
			return apiserverargs.Answer{}, err
		}
		args := append(slices.Clone(p.base), "--secure-port="+strconv.Itoa(port.Port()), "--runtime-config="+key+"=true")
		out, _ := runProbe(ctx, p.bin, args...)
		port.Close()
		if err := ctx.Err(); err != nil {
			return apiserverargs.Answer{}, err
		}
		_, e := commandFailed(out)
		switch {
		case strings.Contains(e, egressRefusal):
			return apiserverargs.Answer{}, nil
		case strings.Contains(e, "address already in use") && try < 3:
			continue
		case e == "":
			return apiserverargs.Answer{}, fmt.Errorf("--runtime-config=%s=true: no error from %s: %s", key, p.bin, strings.Join(out, " | "))
		}
		return apiserverargs.Answer{Refused: e}, nil
	}
}

var klogPrefix = regexp.MustCompile(`^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ [^\]]+\] `)

func stripKlog(l string) string { return klogPrefix.ReplaceAllString(l, "") }

// commandFailed finds kube-apiserver's `"command failed" err="..."` line
// and returns it (klog header stripped) and the error in it, unquoted.
func commandFailed(out []string) (line, err string) {
	for _, l := range out {
		l = stripKlog(l)
		i := strings.Index(l, `"command failed" err=`)
		if i < 0 {
			continue
		}
		q := l[i+len(`"command failed" err=`):]
		s, uerr := strconv.Unquote(q)
		if uerr != nil {
			s = strings.Trim(q, `"`)
		}
		return l, sortAggregate(s)
	}
	return "", ""
}

// sortAggregate puts the parts of an aggregated error, "[a, b]", in order:
// kube-apiserver lists them from a map, in any order.
func sortAggregate(s string) string {
	if !strings.HasPrefix(s, "[") || !strings.HasSuffix(s, "]") {
		return s
	}
	var parts []string
	depth, start := 0, 1
	for i := 1; i < len(s)-1; i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 && i+1 < len(s) && s[i+1] == ' ' {
				parts = append(parts, s[start:i])
				start = i + 2
			}
		}
	}
	parts = append(parts, s[start:len(s)-1])
	sort.Strings(parts)
	return "[" + strings.Join(parts, ", ") + "]"
}

// runProbe runs the binary briefly and returns its output lines.
func runProbe(ctx context.Context, bin string, args ...string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir()}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return strings.Split(strings.TrimRight(buf.String(), "\n"), "\n"), err
}
