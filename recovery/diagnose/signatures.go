package diagnose

import (
	"regexp"
	"strings"
)

// Source says where a signature is looked for.
type Source string

// Evidence sources.
const (
	SourceLog    Source = "log"    // kube-apiserver log lines (Talos Logs API)
	SourceReadyz Source = "readyz" // names of failing /readyz?verbose checks
	// SourceFlags marks evidence read from the rendered static pod's flags
	// (a plugin both enabled and disabled), reported under the log
	// signature admission-plugins-overlapped.
	SourceFlags Source = "flags"
)

// Class says what a matched signature tells about the failure.
type Class string

// Signature classes.
const (
	// ClassAdmission: an admission webhook or policy refused or could not
	// answer kube-apiserver's own writes. Together with a kube-apiserver
	// that is not ready it is the admission deadlock.
	ClassAdmission Class = "admission"
	// ClassFailure: a cause of failure that is not admission (flags, etcd,
	// certificates).
	ClassFailure Class = "failure"
	// ClassSymptom: kube-apiserver did not finish its start-up; says what
	// is stuck, not why.
	ClassSymptom Class = "symptom"
	// ClassInfo: worth showing, changes nothing (a webhook failing open).
	ClassInfo Class = "info"
)

// Signature is one known line pattern: what it means and what to run next.
// The first capture group of Pattern, when there is one, is the subject
// (a webhook, hook, policy or plugin list, an etcd address).
type Signature struct {
	ID      string
	Source  Source
	Class   Class
	Pattern *regexp.Regexp
	// Unless excludes lines that a more specific signature explains (an
	// x509 error inside a webhook call is the webhook's problem).
	Unless *regexp.Regexp
	// Literals: a line can only match if it holds one of them; a cheap
	// test before the regexp (most log lines match nothing).
	Literals []string
	Meaning  string
	// Next is the next command; {node}, {nodeName}, {subject} are filled in.
	Next string
	// Multi: every match in a line counts (kube-apiserver aggregates its
	// refusals into one line: err="[cannot set ..., cannot set ...]").
	Multi bool
}

// quoted matches a Go-quoted name inside a log line, whether or not klog
// escaped the quotes (err="... \"NAME\" ...").
const quoted = `\\?"([^"\\]+)\\?"`

// The messages below are kube-apiserver v1.34's own, checked against its
// sources and against logs of the real binary (testdata/real):
//   - default_servicecidr_controller.go: event "The default ServiceCIDR can not be created",
//     logged by the event broadcaster as `"Event occurred" ... message="..."`;
//   - webhook dispatchers: `Failed calling webhook, failing closed NAME: failed calling webhook "NAME": ...`
//     (or "failing open" for failurePolicy Ignore), `rejected by webhook "NAME"`,
//     and the API error `admission webhook "NAME" denied the request`;
//   - validating policy plugin: `ValidatingAdmissionPolicy 'NAME' with binding 'B' denied request: ...`;
//   - apiserver hooks.go: klog.Fatalf(`PostStartHook %q failed: %v`);
//   - apiserver admission options: `[PLUGINS] in enable-admission-plugins and disable-admission-plugins overlapped`;
//   - etcd: grpc `addrConn.createTransport failed to connect to {Addr: "HOST:PORT" ...`,
//     and `Error creating leases: error creating storage factory: context deadline exceeded`.
var Signatures = []Signature{
	{
		ID: "webhook-failing-closed", Source: SourceLog, Class: ClassAdmission,
		Literals: []string{"failed calling webhook"},
		// Only a refused request: "failing closed", or the API error it
		// becomes. A webhook failing open logs the bare error too.
		Pattern: regexp.MustCompile(`(?:failing closed [^:\s]+: |Internal error occurred: )failed calling webhook ` + quoted),
		Meaning: "a webhook with failurePolicy Fail cannot be reached, so every request it matches is refused, including kube-apiserver's own start-up writes",
		Next:    "breakglass recover --delete CONFIGURATION (the configuration holding webhook {subject})",
	},
	{
		ID: "webhook-denied", Source: SourceLog, Class: ClassAdmission,
		Literals: []string{"admission webhook", "rejected by webhook"},
		Pattern:  regexp.MustCompile(`(?:admission webhook|rejected by webhook) ` + quoted),
		Meaning:  "a webhook answered and denied a request",
		Next:     "breakglass recover --delete CONFIGURATION (the configuration holding webhook {subject})",
	},
	{
		ID: "policy-denied", Source: SourceLog, Class: ClassAdmission,
		Literals: []string{"AdmissionPolicy '"},
		Pattern:  regexp.MustCompile(`(?:Validating|Mutating)AdmissionPolicy '([^']+)'(?: with binding '([^']+)')? denied request`),
		Meaning:  "an admission policy denied a request (a denial, or an evaluation error with failurePolicy Fail)",
		Next:     "breakglass admission disable --plugins ValidatingAdmissionPolicy",
	},
	{
		ID: "webhook-failing-open", Source: SourceLog, Class: ClassInfo,
		Literals: []string{"failing open"},
		Pattern:  regexp.MustCompile(`Failed calling webhook, failing open ([^\s:]+)`),
		Meaning:  "a webhook with failurePolicy Ignore cannot be reached: requests pass, each after waiting for its timeout",
		Next:     "",
	},
	{
		ID: "default-servicecidr", Source: SourceLog, Class: ClassSymptom,
		Literals: []string{"default ServiceCIDR"},
		Pattern:  regexp.MustCompile(`The default ServiceCIDR can not be created|error creating default ServiceCIDR`),
		Meaning:  "kube-apiserver 1.33+ cannot create the default ServiceCIDR, so it never becomes ready",
		Next:     "",
	},
	{
		ID: "poststarthook-failed", Source: SourceLog, Class: ClassSymptom,
		Literals: []string{"PostStartHook"},
		Pattern:  regexp.MustCompile(`PostStartHook "([^"]+)" failed`),
		Meaning:  "a start-up hook failed and kube-apiserver exited: kubelet restarts it, in a crash loop while the cause stays",
		Next:     "",
	},
	{
		ID: "admission-plugins-overlapped", Source: SourceLog, Class: ClassFailure,
		Literals: []string{"overlapped"},
		Pattern:  regexp.MustCompile(`\[([^\]]*)\] in enable-admission-plugins and disable-admission-plugins overlapped`),
		Meaning:  "kube-apiserver refuses to start: a plugin is both in --enable-admission-plugins and --disable-admission-plugins",
		Next:     "breakglass admission status",
	},
	{
		ID: "etcd-certificate", Source: SourceLog, Class: ClassFailure,
		Literals: []string{"createTransport"},
		Pattern:  regexp.MustCompile(`createTransport failed to connect to \{Addr: "([^"]+)".*(?:x509: |tls: |authentication handshake failed)`),
		// A handshake cut short because kube-apiserver dropped the dial (it
		// logs these while it starts, restarts and shuts down) says nothing
		// of certificates; an x509 or tls error in the same line still does.
		Unless:  regexp.MustCompile(`authentication handshake failed: (?:context canceled|operation was canceled)"?\s*$`),
		Meaning: "kube-apiserver and etcd do not accept each other's certificates",
		Next:    "talosctl -n {node} logs etcd --tail 50",
	},
	{
		ID: "etcd-unreachable", Source: SourceLog, Class: ClassFailure,
		Literals: []string{"createTransport"},
		// Only dial errors that mean "not there": every healthy start also
		// logs a few of these lines ("operation was canceled", "use of
		// closed network connection") as grpc drops spare connections.
		Pattern: regexp.MustCompile(`createTransport failed to connect to \{Addr: "([^"]+)".*(?:connection refused|i/o timeout|no route to host|network is unreachable|connection reset by peer|context deadline exceeded)`),
		Unless:  regexp.MustCompile(`x509: |tls: |authentication handshake failed`),
		Meaning: "kube-apiserver cannot connect to etcd",
		Next:    "talosctl -n {node} service etcd",
	},
	{
		// etcd's words, relayed by kube-apiserver on every refused write.
		ID: "etcd-nospace", Source: SourceLog, Class: ClassFailure,
		Literals: []string{"database space exceeded"},
		Pattern:  regexp.MustCompile(`mvcc: database space exceeded`),
		Meaning:  "etcd is full (its NOSPACE alarm): it refuses every write, kube-apiserver's start-up writes too",
		Next:     "breakglass recover   # runbook etcd-nospace: snapshot, compact, defragment, disarm",
	},
	{
		ID: "etcd-storage-timeout", Source: SourceLog, Class: ClassFailure,
		Literals: []string{"storage factory"},
		Pattern:  regexp.MustCompile(`error creating storage factory: (.*)`),
		Meaning:  "kube-apiserver gave up waiting for etcd and exited",
		Next:     "talosctl -n {node} service etcd",
	},
	{
		ID: "certificate", Source: SourceLog, Class: ClassFailure,
		Literals: []string{"x509: "},
		Pattern:  regexp.MustCompile(`x509: ([^"\\]+)`),
		Unless:   regexp.MustCompile(`failed calling webhook|createTransport failed to connect`),
		Meaning:  "a certificate is refused (expired, wrong CA or wrong name)",
		Next:     "talosctl -n {node} logs -k kube-system/kube-apiserver-{nodeName}:kube-apiserver --tail 200",
	},
	{
		ID: "readyz-service-cidr", Source: SourceReadyz, Class: ClassSymptom,
		Pattern: regexp.MustCompile(`^poststarthook/(start-kubernetes-service-cidr-controller)$`),
		Meaning: "the default ServiceCIDR is not created yet",
	},
	{
		ID: "readyz-ip-repair", Source: SourceReadyz, Class: ClassSymptom,
		Pattern: regexp.MustCompile(`^poststarthook/(start-service-ip-repair-controllers)$`),
		Meaning: "Service IP addresses are not repaired yet (waits for the ServiceCIDR)",
	},
	{
		ID: "readyz-rbac-bootstrap", Source: SourceReadyz, Class: ClassSymptom,
		Pattern: regexp.MustCompile(`^poststarthook/(rbac/bootstrap-roles)$`),
		Meaning: "the RBAC bootstrap roles and bindings are not written yet",
	},
	{
		ID: "readyz-priority-classes", Source: SourceReadyz, Class: ClassSymptom,
		Pattern: regexp.MustCompile(`^poststarthook/(scheduling/bootstrap-system-priority-classes)$`),
		Meaning: "the system PriorityClasses are not written yet",
	},
	{
		ID: "readyz-autoregister", Source: SourceReadyz, Class: ClassSymptom,
		Pattern: regexp.MustCompile(`^(autoregister-completion)$`),
		Meaning: "the APIServices of the built-in groups are not registered yet",
	},
	{
		ID: "readyz-etcd", Source: SourceReadyz, Class: ClassFailure,
		Pattern: regexp.MustCompile(`^(etcd|etcd-readiness)$`),
		Meaning: "kube-apiserver reports etcd unhealthy",
		Next:    "talosctl -n {node} service etcd",
	},
	{
		ID: "readyz-failing", Source: SourceReadyz, Class: ClassSymptom,
		Pattern: regexp.MustCompile(`^(.+)$`),
		Meaning: "a readiness check fails",
	},
}

// SignatureByID returns the signature with this id.
func SignatureByID(id string) (Signature, bool) {
	for _, s := range Signatures {
		if s.ID == id {
			return s, true
		}
	}
	return Signature{}, false
}

// Match is one signature found in one line.
type Match struct {
	ID      string `json:"signature"`
	Subject string `json:"subject,omitempty"`
	// Detail is the second capture group, when there is one (a policy's binding).
	Detail string `json:"detail,omitempty"`
}

// MatchLine returns the log signatures a kube-apiserver log line shows, in
// table order. One line can show several (a post-start hook that failed
// because a webhook could not be called).
func MatchLine(line string) []Match {
	return match(SourceLog, line)
}

// MatchReadyzCheck returns the signature of one failing /readyz check name
// (readyz-failing when no specific one applies).
func MatchReadyzCheck(name string) Match {
	m := match(SourceReadyz, name)
	if len(m) == 0 {
		return Match{}
	}
	return m[0]
}

func match(src Source, line string) []Match {
	var out []Match
	for _, s := range Signatures {
		if s.Source != src || !holdsAny(line, s.Literals) {
			continue
		}
		subs := [][]string{s.Pattern.FindStringSubmatch(line)}
		if s.Multi {
			subs = s.Pattern.FindAllStringSubmatch(line, -1)
		}
		if len(subs) == 0 || subs[0] == nil || (s.Unless != nil && s.Unless.MatchString(line)) {
			continue
		}
		for _, sub := range subs {
			m := Match{ID: s.ID}
			for _, g := range sub[1:] {
				if g == "" {
					continue
				}
				if m.Subject == "" {
					m.Subject = strings.TrimSpace(g)
				} else if m.Detail == "" {
					m.Detail = strings.TrimSpace(g)
				}
			}
			out = append(out, m)
		}
		if src == SourceReadyz {
			break // the first (most specific) readyz signature only
		}
	}
	return out
}

func holdsAny(line string, literals []string) bool {
	if len(literals) == 0 {
		return true
	}
	for _, l := range literals {
		if strings.Contains(line, l) {
			return true
		}
	}
	return false
}

// klogHeader is "E1129 22:01:02.123456   12345 file.go:123] ".
var klogHeader = regexp.MustCompile(`^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ ([^\]]+)\] `)

// grpcChannel numbers each connection attempt ("[Channel #7 SubChannel #9]").
var grpcChannel = regexp.MustCompile(`#\d+`)

// lineKey is what makes two log lines the same evidence: the line without
// its time stamp, process id and grpc channel numbers.
func lineKey(line string) string {
	if m := klogHeader.FindStringSubmatchIndex(line); m != nil {
		line = line[m[2]:m[3]] + " " + line[m[4]:m[5]] + "] " + line[m[1]:]
	}
	return grpcChannel.ReplaceAllString(line, "#")
}
