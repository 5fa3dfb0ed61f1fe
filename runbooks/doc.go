// Package runbooks holds breakglass's runbooks: versioned YAML files
// (apiVersion breakglass.dev/v1alpha1, kind Runbook) that sequence built-in
// recovery actions, the embedded defaults (webhook-deadlock,
// mutating-webhook-deadlock, policy-deadlock), and their strict loader.
//
// It is data only: package recovery interprets a *Runbook, switching on each
// step's Action (or the type of its Params), and cmd renders it. The file
// format, the actions and what `optional` means are documented in README.md.
package runbooks
