// Package diagnose tells why kube-apiserver does not come up, without
// changing anything: it reads each control-plane node's kube-apiserver
// static pod (status, restarts, admission flags) and its last log lines
// through the Talos API, /readyz?verbose when a probe is given, and the
// admission objects in etcd when a client is given; then it matches known
// signatures (the Signatures table) and concludes with one of four
// verdicts, the objects to blame and the exact next command.
//
// Dependencies point one way: recovery imports diagnose, never the other
// way round. The readyz probe therefore comes in as Options.Health (an
// adapter over recovery.CheckHealth), and Gather takes small interfaces
// (Nodes, Objects) that *talos.Client and *etcd.Client satisfy, so the
// evidence can also be gathered by other means and handed to Analyze.
//
// # Verdicts
//
//	healthy             kube-apiserver is ready on every node
//	admission-deadlock  a webhook or policy refuses (or cannot answer) kube-apiserver's own
//	                    start-up writes, and kube-apiserver is not ready
//	other-failure       not ready, for a known reason that is not admission
//	                    (flags overlap, etcd unreachable, certificates, or 1.34+
//	                    with the MutatingAdmissionPolicy gate on and only its
//	                    v1alpha1 API enabled: every write is refused "not yet
//	                    ready to handle request", and the next command is the
//	                    runtime-config change, never an etcd delete)
//	flags-refused       kube-apiserver refuses its own flags at start and exits at once (a
//	                    feature gate locked or gone, a flag removed, a --runtime-config version
//	                    it no longer registers): the kubelet restarts it with back-off; the
//	                    flags are in each node's machine config (cluster.apiServer.extraArgs),
//	                    the runbook apiserver-flags takes them out (see flags.go)
//	unknown             some node could not be read, or no known signature explains it
//
// Admission objects in etcd are audited together (audit: a policy
// with its bindings) and each carries the worst risk as startupRisk. A
// policy's denial of the default ServiceCIDR is not logged at default
// verbosity: when start-up is stuck and no log line names a culprit, the
// bindings whose policy the audit says deadlocks are the culprits
// (suspected: true), and the next command deletes those bindings.
//
// A node is ready when /readyz says so; when readyz was not asked or could
// not be reached, when kubelet reports the pod Ready and running. Healthy
// needs every node read and ready: a node that could not be read makes the
// verdict unknown, never healthy.
//
// # JSON
//
// The Report marshals with these stable field names (new fields may be
// added; none is renamed or removed without a major version):
//
//	{
//	  "verdict":  "healthy" | "admission-deadlock" | "flags-refused" | "other-failure" | "unknown",
//	  "summary":  "one sentence: what is wrong",
//	  "culprits": [{                      // admission-deadlock only
//	    "kind": "ValidatingWebhookConfiguration",   // or Mutating..., ...AdmissionPolicy
//	    "name": "kyverno-resource-validating-webhook-cfg", // empty when etcd was not read
//	    "webhook": "validate.kyverno.svc-fail",         // for a policy: "binding"
//	    "failurePolicy": "Fail", "target": "https://...",
//	    "key": "/registry/validatingwebhookconfigurations/...",
//	    "plugin": "ValidatingAdmissionWebhook", "foundInEtcd": true }],
//	  "findings": [{                      // causes first (class admission, failure, symptom, info)
//	    "signature": "webhook-failing-closed", "class": "admission",
//	    "subject": "validate.kyverno.svc-fail", "detail": "(a policy's binding)", "meaning": "...",
//	    "nodes": ["127.0.0.11"], "count": 773,
//	    "lines": [{"nodes": ["127.0.0.11"], "source": "log" | "readyz", "text": "W1129 ...", "count": 773}] }],
//	  "flags": [{                         // flags-refused only
//	    "flag": "feature-gates", "item": "MultiCIDRServiceAllocator=false", "name": "MultiCIDRServiceAllocator",
//	    "refusal": "cannot set feature gate MultiCIDRServiceAllocator to false, feature is locked to true",
//	    "nodes": ["127.0.0.11"], "source": "log" | "flags" }],
//	  "next":  ["breakglass recover --delete NAME", "breakglass admission disable --plugins ..."],
//	           // recover --runbook mutating-webhook-deadlock / policy-deadlock for those kinds
//	  "notes": ["..."],
//	  "evidence": {
//	    "nodes": [{ "node", "nodeName", "pod": {"found","ready","running","restarts","waitingReason","startedAt"},
//	                "image", "enabledPlugins", "disabledPlugins", "featureGates", "runtimeConfig",
//	                "readyz": {"node","ready","failingChecks","error"}, "logLinesRead", "errors" }],
//	    "etcd": { "asked", "endpoints", "error", "revision",
//	              "objects": [{"kind","name","key","encoding","webhooks":[{"name","failurePolicy","target","rules","matchConditions"}],
//	                           "policy","failurePolicy","undecoded"}] },
//	    "healthAsked": true, "healthError": "..." }
//	}
//
// Evidence lines are deduplicated across nodes, ignoring the klog time
// stamp, the process id and grpc channel numbers; "count" says how often
// each occurred in the lines read, "nodes" where.
package diagnose
