package lab

import (
	"crypto/sha512"
	"encoding/hex"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeKube is a kube-apiserver as far as the script asks: its --version.
func fakeKube(version string) []byte {
	return []byte("#!/bin/sh\necho Kubernetes " + version + "\n")
}

func sha512Hex(b []byte) string {
	sum := sha512.Sum512(b)
	return hex.EncodeToString(sum[:])
}

// releaseHost serves releases as dl.k8s.io does (VERSION/bin/linux/ARCH/
// kube-apiserver and its .sha512), on loopback; sums overrides a
// version's published checksum. It counts the requests.
type releaseHost struct {
	*httptest.Server
	requests atomic.Int32
}

func newReleaseHost(t *testing.T, versions []string, sums map[string]string) *releaseHost {
	h := &releaseHost{}
	mux := http.NewServeMux()
	for _, v := range versions {
		path := "/" + v + "/bin/linux/" + runtime.GOARCH + "/kube-apiserver"
		sum := sha512Hex(fakeKube(v))
		if s, ok := sums[v]; ok {
			sum = s
		}
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) { w.Write(fakeKube(v)) })
		mux.HandleFunc(path+".sha512", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(sum)) })
	}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(h.Close)
	return h
}

// kubeScript runs lab/scripts/build-kube-apiserver.sh on a cache of its own,
// with a home of its own (no setup-envtest binaries unless the test puts
// them there), the release host at releaseURL, and a `go` on PATH that
// "builds" a fake binary in no time and logs the versions it built.
type kubeScript struct {
	t                         *testing.T
	home, bin, goLog, release string
	env                       []string
}

func newKubeScript(t *testing.T, releaseURL string) *kubeScript {
	t.Helper()
	dir := t.TempDir()
	s := &kubeScript{t: t, home: filepath.Join(dir, "home"), bin: filepath.Join(dir, "cache"), goLog: filepath.Join(dir, "go.log"), release: releaseURL}
	fakeGo := filepath.Join(dir, "fakego")
	if err := os.MkdirAll(fakeGo, 0o755); err != nil {
		t.Fatal(err)
	}
	// version: for the build stamp; build: writes -o as a binary that says
	// the -X ...gitVersion the script gave.
	script := `#!/bin/sh
case "$1" in
version) echo "go version go0.0-fake linux/` + runtime.GOARCH + `" ;;
build)
  while [ $# -gt 0 ]; do
    case "$1" in
    -o) out=$2; shift ;;
    -ldflags) v=$(echo "$2" | sed -n 's/.*gitVersion=\([^ ]*\).*/\1/p'); shift ;;
    esac
    shift
  done
  printf '#!/bin/sh\necho Kubernetes %s\n' "$v" >"$out" && chmod +x "$out"
  echo "$v" >>"` + s.goLog + `" ;;
*) exit 2 ;;
esac
`
	if err := os.WriteFile(filepath.Join(fakeGo, "go"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "PATH", "HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "KUBEBUILDER_ASSETS", KubeBinDirEnv, "BREAKGLASS_KUBE_RELEASE_URL", "BREAKGLASS_BUILD_JOBS":
		default:
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env, "PATH="+fakeGo+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+s.home,
		KubeBinDirEnv+"="+s.bin, "BREAKGLASS_KUBE_RELEASE_URL="+releaseURL, "BREAKGLASS_BUILD_JOBS=1")
	return s
}

// run runs the script for versions with extra environment, and returns its
// output (both streams) and how long it took; it must exit 0.
func (s *kubeScript) run(extraEnv []string, versions ...string) (string, time.Duration) {
	s.t.Helper()
	cmd := exec.Command("bash", append([]string{"scripts/build-kube-apiserver.sh"}, versions...)...)
	cmd.Env = append(append([]string(nil), s.env...), extraEnv...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("build-kube-apiserver.sh %s: %v\n%s", strings.Join(versions, " "), err, out)
	}
	return string(out), time.Since(start)
}

func (s *kubeScript) stamp(v string) string {
	b, _ := os.ReadFile(filepath.Join(s.bin, v, "stamp"))
	return strings.TrimSpace(string(b))
}

func (s *kubeScript) built() string {
	b, _ := os.ReadFile(s.goLog)
	return strings.TrimSpace(string(b))
}

// The binary in the cache says its version.
func (s *kubeScript) says(v string) string {
	out, err := exec.Command(filepath.Join(s.bin, v, "kube-apiserver"), "--version").Output()
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(out))
}

// gaveUpAfter is how many seconds the script says it tried the release host.
func gaveUpAfter(t *testing.T, out string) int {
	t.Helper()
	m := regexp.MustCompile(`no release from \S+ after (\d+) s`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no 'no release from URL after N s' line:\n%s", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// Issue 36, item 6: the lab takes the released kube-apiserver where the
// release host answers, only with the published sha512, and keys it by
// version and checksum; it falls back to building quickly when the host
// does not answer; setup-envtest's binaries are a source too.
func TestKubeBinariesScriptSources(t *testing.T) {
	t.Parallel()
	const v = "v1.34.4"

	t.Run("release", func(t *testing.T) {
		t.Parallel()
		host := newReleaseHost(t, []string{v}, nil)
		s := newKubeScript(t, host.URL)
		out, _ := s.run(nil, v)
		url := host.URL + "/" + v + "/bin/linux/" + runtime.GOARCH + "/kube-apiserver"
		if !strings.Contains(out, "kube-apiserver "+v+": downloaded and verified") || s.built() != "" ||
			s.stamp(v) != "sha512:"+sha512Hex(fakeKube(v))+" "+url || s.says(v) != "Kubernetes "+v {
			t.Fatalf("stamp %q, built %q, says %q, output:\n%s", s.stamp(v), s.built(), s.says(v), out)
		}
		// Keyed by version and checksum: up to date without asking the host,
		// fetched again once the binary no longer has its checksum.
		asked := host.requests.Load()
		if out, _ := s.run(nil, v); !strings.Contains(out, "kube-apiserver "+v+": up to date") || host.requests.Load() != asked {
			t.Errorf("second run asked the host %d more times:\n%s", host.requests.Load()-asked, out)
		}
		f, err := os.OpenFile(filepath.Join(s.bin, v, "kube-apiserver"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("# changed\n")
		f.Close()
		if out, _ := s.run(nil, v); !strings.Contains(out, "downloaded and verified") || host.requests.Load() != asked+2 {
			t.Errorf("a changed binary was not fetched again (%d requests):\n%s", host.requests.Load()-asked, out)
		}
	})

	t.Run("wrong sha512", func(t *testing.T) {
		t.Parallel()
		host := newReleaseHost(t, []string{v}, map[string]string{v: sha512Hex([]byte("another binary"))})
		s := newKubeScript(t, host.URL)
		out, _ := s.run(nil, v)
		if !strings.Contains(out, "does not match its published sha512") || !strings.Contains(out, "kube-apiserver "+v+": built in") ||
			s.built() != v || strings.HasPrefix(s.stamp(v), "sha512:") || s.says(v) != "Kubernetes "+v {
			t.Errorf("stamp %q, built %q, output:\n%s", s.stamp(v), s.built(), out)
		}
		if _, err := os.Stat(filepath.Join(s.bin, v, "kube-apiserver.download")); err == nil {
			t.Error("the refused download was left in the cache")
		}
	})

	t.Run("no such release", func(t *testing.T) {
		t.Parallel()
		host := newReleaseHost(t, nil, nil) // answers 404
		s := newKubeScript(t, host.URL)
		out, _ := s.run(nil, "v1.32.13", v)
		// A host that answers is asked for every version.
		if strings.Count(out, "no release from") != 2 || host.requests.Load() != 2 || s.built() != "v1.32.13\n"+v {
			t.Errorf("%d requests, built %q, output:\n%s", host.requests.Load(), s.built(), out)
		}
	})

	// Nothing listens: refused at once (not after the 5 s connect timeout);
	// asked once for the whole run.
	t.Run("host refuses", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		s := newKubeScript(t, "http://"+addr+"/release")
		out, took := s.run(nil, "v1.32.13", v)
		if strings.Count(out, "no release from") != 1 || gaveUpAfter(t, out) > 3 || s.built() != "v1.32.13\n"+v {
			t.Errorf("took %s, built %q, output:\n%s", took, s.built(), out)
		}
	})

	// A host that accepts and never answers: given up after the checksum
	// request's 10 s (said in whole seconds, on a loaded machine), not a hang.
	t.Run("host silent", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		s := newKubeScript(t, "http://"+l.Addr().String()+"/release")
		out, took := s.run(nil, "v1.32.13", v)
		if strings.Count(out, "no release from") != 1 || gaveUpAfter(t, out) > 15 || s.built() != "v1.32.13\n"+v {
			t.Errorf("took %s, built %q, output:\n%s", took, s.built(), out)
		}
	})

	t.Run("setup-envtest", func(t *testing.T) {
		t.Parallel()
		host := newReleaseHost(t, []string{v}, nil)
		s := newKubeScript(t, host.URL)
		envtest := filepath.Join(s.home, ".local", "share", "kubebuilder-envtest", "k8s", strings.TrimPrefix(v, "v")+"-linux-"+runtime.GOARCH, "kube-apiserver")
		if err := os.MkdirAll(filepath.Dir(envtest), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(envtest, fakeKube(v), 0o755); err != nil {
			t.Fatal(err)
		}
		out, _ := s.run(nil, v)
		if !strings.Contains(out, "kube-apiserver "+v+": taken from setup-envtest's "+envtest) || host.requests.Load() != 0 ||
			s.stamp(v) != "sha512:"+sha512Hex(fakeKube(v))+" "+envtest {
			t.Errorf("%d requests, stamp %q, output:\n%s", host.requests.Load(), s.stamp(v), out)
		}
	})

	// $KUBEBUILDER_ASSETS holds one version: taken for that one only.
	t.Run("KUBEBUILDER_ASSETS", func(t *testing.T) {
		t.Parallel()
		host := newReleaseHost(t, nil, nil)
		s := newKubeScript(t, host.URL)
		assets := t.TempDir()
		if err := os.WriteFile(filepath.Join(assets, "kube-apiserver"), fakeKube(v), 0o755); err != nil {
			t.Fatal(err)
		}
		out, _ := s.run([]string{"KUBEBUILDER_ASSETS=" + assets}, "v1.32.13", v)
		if !strings.Contains(out, "kube-apiserver "+v+": taken from setup-envtest's "+assets) || s.built() != "v1.32.13" ||
			s.says("v1.32.13") != "Kubernetes v1.32.13" {
			t.Errorf("built %q, output:\n%s", s.built(), out)
		}
	})
}
