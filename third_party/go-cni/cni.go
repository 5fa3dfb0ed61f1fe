// Package cni stands in for github.com/containerd/go-cni in breakglass's
// build. Talos machinery's constants package imports go-cni for one constant
// (DefaultCNIDir, part of the node's PATH); the real module ships a non-test
// file that imports package testing, which would link the test framework into
// the on-call binary. breakglass never runs CNI, so this module carries only
// the constant, with the value go-cni v1.1.13 gives it on Linux.
package cni

// DefaultCNIDir is where CNI plugin binaries live on a node.
const DefaultCNIDir = "/opt/cni/bin"
