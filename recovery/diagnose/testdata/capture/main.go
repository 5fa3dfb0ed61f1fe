// Command capture runs the real kube-apiserver binaries (built by
// lab/scripts) against an embedded etcd in the failure modes diagnose
// recognises, and writes their logs and /readyz?verbose to
// recovery/diagnose/testdata/real/. It is how the test excerpts were taken:
//
//	go run ./recovery/diagnose/testdata/capture -bin .cache/kube-apiserver/v1.34.4/kube-apiserver -out recovery/diagnose/testdata/real
//
// Everything listens on loopback; the webhook URL points at a closed
// loopback port.
//
// -only nospace (issue 23) runs etcd with a 6 MiB quota (the lab's
// etcd-nospace scenario's) and fills it through kube-apiserver, a ConfigMap
// of 256 KiB rewritten until kube-apiserver answers "etcdserver: mvcc:
// database space exceeded": nospace-running is -bin started fresh, filled,
// then left running 25 s on the full etcd; nospace-restart is -bin started
// again on it (its bootstrap objects exist: ready); nospace-upgrade is -old
// filled, then -bin started on the full etcd for 45 s (the upgrade: never
// ready, exits on rbac/bootstrap-roles). testdata/logs/etcd-nospace-*.log
// and testdata/readyz-nospace.txt are excerpts of these.
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/breakglass-dev/breakglass/etcd/etcdtest"
)

func main() {
	bin := flag.String("bin", ".cache/kube-apiserver/v1.34.4/kube-apiserver", "kube-apiserver binary")
	out := flag.String("out", "recovery/diagnose/testdata/real", "output directory")
	only := flag.String("only", "", "comma-separated scenarios (default all)")
	flag.StringVar(&oldBin, "old", ".cache/kube-apiserver/v1.32.13/kube-apiserver", "kube-apiserver binary of the version before the upgrade")
	flag.StringVar(&prevBin, "prev", ".cache/kube-apiserver/v1.33.13/kube-apiserver", "kube-apiserver binary of the minor before -bin (flags it only warns about)")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		log.Fatal(err)
	}
	scenarios := []struct {
		name string
		run  func(bin, out string) error
	}{
		{"overlapped", overlapped},
		{"fresh", deadlock},
		{"upgrade", upgrade},
		{"etcd-down", etcdDown},
		{"etcd-x509", etcdX509},
		{"poststarthook", postStartHook},
		{"flags", refusedFlags},
		{"nospace", noSpace},
	}
	for _, s := range scenarios {
		if *only != "" && !strings.Contains(","+*only+",", ","+s.name+",") {
			continue
		}
		log.Printf("scenario %s", s.name)
		if err := s.run(*bin, filepath.Join(*out, s.name)); err != nil {
			log.Printf("scenario %s: %v", s.name, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func webhook(conditions ...admissionregistrationv1.MatchCondition) *admissionregistrationv1.ValidatingWebhookConfiguration {
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "kyverno-resource-validating-webhook-cfg", UID: "0b6f3a1e-1", Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "validate.kyverno.svc-fail",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr("https://127.0.0.1:" + strconv.Itoa(closedPort()) + "/validate/fail")},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*"}, Scope: ptr(admissionregistrationv1.AllScopes)},
			}},
			FailurePolicy:           ptr(admissionregistrationv1.Fail),
			MatchPolicy:             ptr(admissionregistrationv1.Equivalent),
			NamespaceSelector:       &metav1.LabelSelector{},
			ObjectSelector:          &metav1.LabelSelector{},
			SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:          ptr(int32(10)),
			AdmissionReviewVersions: []string{"v1"},
			MatchConditions:         conditions,
		}},
	}
}

func closedPort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// base writes service-account keys and a token file into dir and returns the common flags.
func base(dir string, port int) []string {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
	os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
	os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte("admintoken,admin,1,system:masters\n"), 0o600)
	os.MkdirAll(filepath.Join(dir, "certs"), 0o700)
	return []string{
		"--service-cluster-ip-range=10.1.0.0/20", "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--advertise-address=127.0.0.1", "--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"), "--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC", "--anonymous-auth=true",
	}
}

// runFor runs the binary for at most d, writing its output to out+".log",
// and /readyz?verbose to out+".readyz" shortly before stopping it.
func runFor(bin, out string, port int, d time.Duration, args ...string) error {
	f, err := os.Create(out + ".log")
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	readyzAt := time.After(d - 3*time.Second)
	for {
		select {
		case err := <-done:
			fmt.Fprintf(f, "# exited: %v\n", err)
			return nil
		case <-readyzAt:
			readyz(port, out+".readyz")
		}
	}
}

func readyz(port int, path string) {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, _ := http.NewRequest("GET", "https://127.0.0.1:"+strconv.Itoa(port)+"/readyz?verbose", nil)
	req.Header.Set("Authorization", "Bearer admintoken")
	resp, err := c.Do(req)
	if err != nil {
		os.WriteFile(path, []byte("# error: "+err.Error()+"\n"), 0o644)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	os.WriteFile(path, append([]byte(fmt.Sprintf("# HTTP %d\n", resp.StatusCode)), b...), 0o644)
}

func withEtcd(tlsOn bool, fn func(srv *etcdtest.Server, dir string) error, more ...etcdtest.Option) error {
	dir, err := os.MkdirTemp("", "capture")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts := more
	if !tlsOn {
		opts = append(opts, etcdtest.Plain())
	}
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
		return err
	}
	srv, err := etcdtest.Start(filepath.Join(dir, "etcd"), opts...)
	if err != nil {
		return err
	}
	defer srv.Close()
	return fn(srv, dir)
}

func put(srv *etcdtest.Server, key string, val []byte) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Put(context.Background(), key, string(val))
	return err
}

func seedWebhook(srv *etcdtest.Server, conds ...admissionregistrationv1.MatchCondition) error {
	v, err := etcdtest.EncodeProtobuf(webhook(conds...), admissionregistrationv1.SchemeGroupVersion)
	if err != nil {
		return err
	}
	return put(srv, "/registry/validatingwebhookconfigurations/kyverno-resource-validating-webhook-cfg", v)
}

func deadlock(bin, out string) error {
	return withEtcd(false, func(srv *etcdtest.Server, dir string) error {
		if err := seedWebhook(srv); err != nil {
			return err
		}
		port := closedPort()
		return runFor(bin, out, port, 25*time.Second, append(base(dir, port), "--etcd-servers="+srv.Endpoints[0])...)
	})
}

// postStartHook is the upgrade with the incident's kind exclusions: the
// ServiceCIDR is created, the RBAC bootstrap roles are not (LAB.md).
func postStartHook(bin, out string) error {
	return upgradeWith(bin, out, 120*time.Second,
		admissionregistrationv1.MatchCondition{Name: "not-servicecidr", Expression: `!(request.kind.kind == "ServiceCIDR")`},
		admissionregistrationv1.MatchCondition{Name: "not-ipaddress", Expression: `!(request.kind.kind == "IPAddress")`})
}

func overlapped(bin, out string) error {
	dir, err := os.MkdirTemp("", "capture")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	port := closedPort()
	return runFor(bin, out, port, 15*time.Second, append(base(dir, port), "--etcd-servers=http://127.0.0.1:"+strconv.Itoa(closedPort()),
		"--enable-admission-plugins=NodeRestriction,ValidatingAdmissionWebhook", "--disable-admission-plugins=ValidatingAdmissionWebhook")...)
}

func etcdDown(bin, out string) error {
	dir, err := os.MkdirTemp("", "capture")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	port := closedPort()
	return runFor(bin, out, port, 30*time.Second, append(base(dir, port), "--etcd-servers=https://127.0.0.1:"+strconv.Itoa(closedPort()))...)
}

// etcdX509 gives kube-apiserver a client certificate from another CA.
func etcdX509(bin, out string) error {
	return withEtcd(true, func(srv *etcdtest.Server, dir string) error {
		other, err := etcdtest.NewCA()
		if err != nil {
			return err
		}
		crt, key, err := other.IssueClient("kube-apiserver", time.Hour)
		if err != nil {
			return err
		}
		os.WriteFile(filepath.Join(dir, "other.crt"), crt, 0o600)
		os.WriteFile(filepath.Join(dir, "other.key"), key, 0o600)
		os.WriteFile(filepath.Join(dir, "other-ca.crt"), other.CertPEM, 0o600)
		port := closedPort()
		return runFor(bin, out, port, 30*time.Second, append(base(dir, port), "--etcd-servers="+srv.Endpoints[0],
			"--etcd-cafile="+filepath.Join(dir, "other-ca.crt"), "--etcd-certfile="+filepath.Join(dir, "other.crt"), "--etcd-keyfile="+filepath.Join(dir, "other.key"))...)
	})
}

var oldBin string

// upgrade is the incident: the old version creates its bootstrap objects,
// the webhook is added, then the new version starts on the same etcd.
func upgrade(bin, out string) error { return upgradeWith(bin, out, 30*time.Second) }

func upgradeWith(bin, out string, d time.Duration, conds ...admissionregistrationv1.MatchCondition) error {
	return withEtcd(false, func(srv *etcdtest.Server, dir string) error {
		port := closedPort()
		args := append(base(dir, port), "--etcd-servers="+srv.Endpoints[0])
		if err := runFor(oldBin, out+"-old", port, 15*time.Second, args...); err != nil {
			return err
		}
		os.Remove(out + "-old.log")
		os.Remove(out + "-old.readyz")
		if err := seedWebhook(srv, conds...); err != nil {
			return err
		}
		return runFor(bin, out, port, d, args...)
	})
}

var prevBin string

// refusedFlags is kube-apiserver refusing its own command line, as an
// upgrade carries extraArgs the new minor no longer takes (issue 22): each
// exits at once. flags-warning is the minor before, which only warns, then
// fails on the closed etcd port like any start without etcd.
func refusedFlags(bin, out string) error {
	for _, c := range []struct {
		name string
		bin  string
		args []string
		d    time.Duration
	}{
		{"gate-locked", bin, []string{"--feature-gates=MultiCIDRServiceAllocator=false"}, 10 * time.Second},
		{"gates-locked", bin, []string{"--feature-gates=MultiCIDRServiceAllocator=false,ConsistentListFromCache=false"}, 10 * time.Second},
		{"gate-unknown", bin, []string{"--feature-gates=NoSuchGate=true"}, 10 * time.Second},
		{"flag-unknown", bin, []string{"--cloud-provider=external"}, 10 * time.Second},
		{"runtime-config", bin, []string{"--runtime-config=networking.k8s.io/v1alpha1=true"}, 10 * time.Second},
		{"group-unknown", bin, []string{"--runtime-config=foo.example.com/v1=true"}, 10 * time.Second},
		{"warning", prevBin, []string{"--feature-gates=MultiCIDRServiceAllocator=false"}, 8 * time.Second},
		{"warning-ga", bin, []string{"--feature-gates=MultiCIDRServiceAllocator=true"}, 8 * time.Second},
	} {
		dir, err := os.MkdirTemp("", "capture")
		if err != nil {
			return err
		}
		port := closedPort()
		args := append(base(dir, port), "--etcd-servers=https://127.0.0.1:"+strconv.Itoa(closedPort()))
		err = runFor(c.bin, out+"-"+c.name, port, c.d, append(args, c.args...)...)
		os.RemoveAll(dir)
		if err != nil {
			return err
		}
	}
	return nil
}

// noSpaceQuota is the lab's etcd-nospace quota (lab.NoSpaceQuota).
const noSpaceQuota = 6 << 20

// noSpace is etcd full (issue 23): a running kube-apiserver whose writes
// start failing, the same binary restarted on the full etcd, and the
// upgrade from -old to -bin on it.
func noSpace(bin, out string) error {
	err := withEtcd(false, func(srv *etcdtest.Server, dir string) error {
		port := closedPort()
		args := append(base(dir, port), "--etcd-servers="+srv.Endpoints[0])
		if err := runDuring(bin, out+"-running", port, 25*time.Second, func() error { return fillThrough(port) }, args...); err != nil {
			return err
		}
		return runFor(bin, out+"-restart", port, 20*time.Second, args...)
	}, etcdtest.WithQuota(noSpaceQuota))
	if err != nil {
		return err
	}
	return withEtcd(false, func(srv *etcdtest.Server, dir string) error {
		port := closedPort()
		args := append(base(dir, port), "--etcd-servers="+srv.Endpoints[0])
		if err := runDuring(oldBin, out+"-upgrade-old", port, 0, func() error { return fillThrough(port) }, args...); err != nil {
			return err
		}
		// readyz while it hangs: it exits at about 33 s, before runFor's own
		go func() { time.Sleep(20 * time.Second); readyz(port, out+"-upgrade.readyz") }()
		return runFor(bin, out+"-upgrade", port, 45*time.Second, args...)
	}, etcdtest.WithQuota(noSpaceQuota))
}

// runDuring starts the binary, waits until it is ready, runs during, lets
// it run for after, writes /readyz?verbose to out+".readyz" and stops it;
// its output goes to out+".log".
func runDuring(bin, out string, port int, after time.Duration, during func() error, args ...string) error {
	f, err := os.Create(out + ".log")
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	for deadline := time.Now().Add(time.Minute); ; {
		if code, _ := adminRequest(port, "GET", "/readyz", nil); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within a minute", bin)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := during(); err != nil {
		return err
	}
	time.Sleep(after)
	readyz(port, out+".readyz")
	return nil
}

// fillThrough rewrites a ConfigMap of 256 KiB through kube-apiserver until
// it answers etcd's NOSPACE refusal.
func fillThrough(port int) error {
	for i := 0; i < 1000; i++ {
		method, path := "PUT", "/api/v1/namespaces/default/configmaps/status-loop"
		if i == 0 {
			method, path = "POST", "/api/v1/namespaces/default/configmaps"
		}
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"status-loop","namespace":"default"},"data":{"status":"%d %s"}}`, i, strings.Repeat("x", 256<<10))
		code, answer := adminRequest(port, method, path, strings.NewReader(body))
		if strings.Contains(answer, "database space exceeded") {
			log.Printf("etcd full after %d writes: HTTP %d %s", i, code, answer)
			return nil
		}
		if code/100 != 2 {
			return fmt.Errorf("write %d: HTTP %d %s", i, code, answer)
		}
	}
	return fmt.Errorf("etcd still takes writes")
}

// adminRequest sends a request as the token file's admin and returns the status and body.
func adminRequest(port int, method, path string, body io.Reader) (int, string) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	req, _ := http.NewRequest(method, "https://127.0.0.1:"+strconv.Itoa(port)+path, body)
	req.Header.Set("Authorization", "Bearer admintoken")
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
