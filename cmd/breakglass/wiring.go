package main

// How a command reaches the cluster, in one place: the Talos API, etcd
// (recovery decides when etcd needs Talos), what a run may change (the
// effects), and the guided run. Commands read their flags, make one call
// through here into recovery, and render.

import (
	"context"
	"fmt"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/etcd"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/recovery"
	"github.com/breakglass-dev/breakglass/talos"
)

// talosOptions are the global flags' Talos connection.
func (o globalOptions) talosOptions() talos.Options {
	return talos.Options{Talosconfig: o.Talosconfig, Context: o.Context, Endpoints: o.Endpoints, Nodes: o.Nodes,
		ConnectTimeout: o.ConnectTimeout, Progress: o.progress}
}

func connectTalos(ctx context.Context, g globalOptions) (*talos.Client, error) {
	return talos.Connect(ctx, g.talosOptions())
}

// withTalos reads the global flags and connects to the Talos API for one
// command.
func withTalos(c *cli.Context, fn func(globalOptions, *talos.Client) error) error {
	g, err := readGlobals(c)
	if err != nil {
		return err
	}
	tc, err := connectTalos(c.Context, g)
	if err != nil {
		return err
	}
	defer tc.Close()
	return fn(g, tc)
}

// etcdConnFlags are etcdctl's connection flags, prefixed as in issue 3.
func etcdConnFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "etcd-endpoints", EnvVars: []string{"ETCDCTL_ENDPOINTS"}, Usage: "etcd client URLs (default: https://NODE:2379 for the target nodes); http:// for an etcd without TLS"},
		&cli.StringFlag{Name: "etcd-cacert", EnvVars: []string{"ETCDCTL_CACERT"}, Usage: "etcd CA certificate file (etcdctl --cacert)"},
		&cli.StringFlag{Name: "etcd-cert", EnvVars: []string{"ETCDCTL_CERT"}, Usage: "etcd client certificate file (etcdctl --cert); without it one is minted from the Talos etcd CA, in memory, for one hour"},
		&cli.StringFlag{Name: "etcd-key", EnvVars: []string{"ETCDCTL_KEY"}, Usage: "etcd client key file (etcdctl --key)"},
		&cli.StringFlag{Name: "etcd-prefix", Value: etcd.DefaultPrefix, Usage: "kube-apiserver's --etcd-prefix"},
	}
}

// etcdOptions are the etcd connection flags; all empty for a command
// without them (ETCDCTL_* count as given).
func etcdOptions(c *cli.Context) recovery.EtcdOptions {
	return recovery.EtcdOptions{Endpoints: flaglist.Split(c.StringSlice("etcd-endpoints")...),
		CACert: c.String("etcd-cacert"), Cert: c.String("etcd-cert"), Key: c.String("etcd-key"), Prefix: c.String("etcd-prefix")}
}

// withEtcd reads the flags, connects to etcd (through Talos only when it
// must), runs fn and closes.
func withEtcd(c *cli.Context, fn func(context.Context, globalOptions, *etcd.Client) error) error {
	g, err := readGlobals(c)
	if err != nil {
		return err
	}
	ec, err := recovery.DialEtcd(c.Context, etcdOptions(c), g.talosOptions())
	if err != nil {
		return err
	}
	defer ec.Close()
	return fn(c.Context, g, ec)
}

// withEtcdChange runs a change of etcd through the engine: with a Talos
// connection only when reaching etcd needs one (to mint a certificate).
func withEtcdChange(c *cli.Context, s streams, change recovery.EtcdChange,
	run func(context.Context, *talos.Client, recovery.State, recovery.Effects, recovery.UI, recovery.EtcdChange) (*recovery.RecoverResult, error)) (globalOptions, *recovery.RecoverResult, error) {
	g, err := readGlobals(c)
	if err != nil {
		return g, nil, err
	}
	tc, o, err := recovery.TalosForEtcd(c.Context, etcdOptions(c), g.talosOptions())
	if err != nil {
		return g, nil, err
	}
	if tc != nil {
		defer tc.Close()
	}
	change.Etcd, change.ToolVersion, change.CommandLine = o, version, typedCommand(c, tc)
	res, err := run(c.Context, tc, recovery.State{Dir: g.StateDir}, effects(g, tc), newChangeUI(s, g), change)
	if res != nil {
		fmt.Fprintf(s.Err, "journal: breakglass journal show %s\n", res.Incident)
	}
	return g, res, withIncident(err, res)
}

// effects are what a run may change: nothing on --dry-run.
func effects(g globalOptions, tc *talos.Client) recovery.Effects {
	if g.DryRun {
		return recovery.Effects{}
	}
	return recovery.Live(tc)
}

// runGuided connects, runs a guided flow and renders its result.
func runGuided(c *cli.Context, s streams, fn func(globalOptions, recovery.UI, *talos.Client) (*recovery.RecoverResult, error)) error {
	return withTalos(c, func(g globalOptions, tc *talos.Client) error {
		return guided(s, g, tc, fn)
	})
}

func guided(s streams, g globalOptions, tc *talos.Client, fn func(globalOptions, recovery.UI, *talos.Client) (*recovery.RecoverResult, error)) error {
	res, err := fn(g, newTerminalUI(s, g), tc)
	if res == nil {
		return err
	}
	err = withIncident(err, res)
	if g.json() {
		if werr := writeJSON(s.Out, res); werr != nil {
			return either(err, werr)
		}
	} else {
		// Its steps were just told, one by one, on the same terminal: the
		// recap says them in a line.
		renderRecoverResult(s.Out, res, isTerminal(s.Err) && !g.Verbose)
	}
	return err
}
