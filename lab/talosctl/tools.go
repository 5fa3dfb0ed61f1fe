//go:build tools

// Package tools pins talosctl so that "go build" can build it from this module.
package tools

import _ "github.com/siderolabs/talos/cmd/talosctl"
