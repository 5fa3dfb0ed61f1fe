// Package audit decides, for every admission webhook, whether it can block
// kube-apiserver's own start-up writes, and generates the matchConditions
// that keep those writes away from it. It is a pure library: no network, no
// cluster access; feed it manifests (ParseWebhookConfigurations) or decoded
// objects (FromObjects).
//
// # The model
//
// StartupRequests(from, to) lists the writes kube-apiserver `to` (1.32 to
// 1.37) sends to itself on its first start on the data of a cluster that ran
// `from`, each as the admission request the webhook dispatcher builds:
// user system:apiserver, groups system:authenticated and system:masters
// (the loopback token, k8s.io/apiserver/pkg/server/config.go), operation,
// group/version/resource, subresource, namespace, name, the object's labels
// and annotations, and the options object. Each is marked Fatal when its
// rejection stops start-up, with the post-start hook or boot check that
// fails (as /readyz?verbose names it) and how long kube-apiserver keeps
// trying.
//
// For every upgrade talosctl upgrade-k8s accepts (one minor at a time,
// 1.32 -> 1.33 to 1.36 -> 1.37) and for the lab's 1.32 -> 1.34, the writes
// are those the real binaries sent, recorded (internal/startupwrites, `go
// run ./lab/recordstartup`; the lab's TestStartupRecordings records them
// again and fails when a binary's fatal writes differ): what a minor does
// not write on that upgrade is not held against a webhook (1.35 writes no
// APF object, no APIService and no Role after 1.34). The catalogue
// (startupCatalogue, read from the v1.34.4 sources: the Source field names
// the file) describes what each recorded write's refusal does, and models
// the pairs nobody recorded (a restart, a skipped minor:
// ModelledStartupRequests), checked against the requests real binaries sent
// on a fresh start and on a restart (testdata/observed); the lab observed
// the fatal ones failing (DESIGN.md). 1.32 sends no ServiceCIDR or
// IPAddress; 1.33+ creates the default ServiceCIDR and the IPAddresses
// once, so an upgrade from 1.33 or later does not send them.
// kube-system/kube-root-ca.crt is not among them: kube-controller-manager
// writes it, and the fix check treats it as an ordinary request.
//
// Audit assumes the webhook's backend is unreachable (the incident: the
// backend needs the service network the start-up writes create) and that
// the start is the upgrade Options.FromVersion -> Options.ToVersion (default
// 1.32 -> 1.34, the incident's), which makes every write modelled for that
// pair happen; a plain restart of the same version sends a subset
// (observed: only its identity Lease), so a webhook reported deadlock may
// let a restart through and still stop the next upgrade.
// Writes that happen only on an empty etcd (immortal namespaces, system
// PriorityClasses) are left out unless Options.IncludeNewCluster.
//
// Matching follows k8s.io/apiserver v0.34.4, re-implemented because the
// module does not resolve against this repository's dependencies without
// upgrading shared ones:
//   - admission/plugin/webhook/predicates/rules/rules.go (operations, groups,
//     versions, resource/subresource with "*", scope; a Namespace is
//     cluster-scoped but carries its own name as namespace),
//   - admission/plugin/webhook/predicates/namespace/matcher.go (never skips
//     cluster-scoped objects; a Namespace is matched on its own labels;
//     system namespaces carry kubernetes.io/metadata.name),
//   - admission/plugin/webhook/predicates/object/matcher.go (object or old
//     object labels),
//   - admission/plugin/webhook/generic/webhook.go ShouldCallHook (order of
//     checks, matchPolicy Equivalent against the equivalent resources
//     kube-apiserver serves, keyed by storage),
//   - admission/plugin/webhook/matchconditions/matcher.go (any false skips;
//     otherwise an error applies the failure policy: Fail rejects the
//     request, Ignore skips the webhook),
//   - admission/plugin/cel (the variables object, oldObject, request,
//     namespaceObject, authorizer, authorizer.requestResource; request is the
//     unstructured AdmissionRequest, so request.namespace of a cluster-scoped
//     object is a "no such key" error, as in Kubernetes),
//   - pkg/apis/admissionregistration/v1/defaults.go (failurePolicy Fail,
//     matchPolicy Equivalent, timeoutSeconds 10, scope "*").
//
// matchConditions are evaluated with cel-go and partial evaluation: the
// authorizer, object fields other than apiVersion, kind and the modelled
// metadata, per-cluster names and the loopback UID are unknown, so a
// condition that depends on them gives RiskUnknown, never RiskNone. A
// condition that does not compile here (Kubernetes-only CEL libraries such
// as url() or quantity(), or params) is unknown too. The evaluator was
// checked against the real one (see cel_test.go).
//
// # Verdicts
//
//   - deadlock: failurePolicy Fail and a fatal start-up write is rejected
//     (the call fails, or a matchCondition errors).
//   - slow-start: failurePolicy Ignore, timeoutSeconds >= Options.SlowTimeout
//     (DefaultSlowTimeout, 5 s) and a fatal write matches: it waits for the
//     timeout on every call.
//   - unknown: the same, but a matchCondition that decides it cannot be evaluated.
//   - none: otherwise (non-fatal writes may still be listed in blocks).
//
// # JSON
//
// Report (WriteJSON): kubernetesVersion (= toVersion), fromVersion,
// toVersion, slowTimeoutSeconds, risk (the worst),
// findings. Each Finding: configuration, webhook, kind (validating|mutating),
// risk (deadlock|slow-start|none|unknown), failurePolicy, timeoutSeconds,
// blocks, reasons, fix (the matchCondition expression to add, when at risk).
// Each element of blocks: id, description, request (short form), operation,
// group, version, resource, subresource, kind, namespace, name, fatal,
// effect (exit|not-ready|degraded), hook, deadline, when, source,
// newClusterOnly, outcome (rejected|rejected-condition-error|delayed|unknown)
// and why (the rule, selectors and conditions that decided it).
//
// # Fix
//
// PlanFix adds request.userInfo.username != 'system:apiserver' (or, flagged
// partial, the incident's ServiceCIDR and IPAddress kind exclusions) to each
// webhook at risk, keeps existing conditions and the limit of 64, audits the
// result, and checks that ordinary requests (users, controllers, nodes,
// cluster admins) match exactly as before. Render gives the input documents
// back with only matchConditions added, RFC 6902 patches (each webhook's
// position guarded by a test of its name), or strategic merge patches
// (webhooks and conditions merged by name), each with its kubectl command.
package audit
