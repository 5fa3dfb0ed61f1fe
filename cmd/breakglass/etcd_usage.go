package main

import (
	"context"

	"github.com/breakglass-dev/breakglass/third_party/forked/urfave/cli"

	"github.com/breakglass-dev/breakglass/etcd"
)

func init() {
	declare("etcd usage", commandSpec{args: takes(0, 0, "etcd usage takes no arguments", "show more groups with --top N"), talos: talosForEtcd})
}

func etcdUsageCommand(s streams, withConn func(...cli.Flag) []cli.Flag) *cli.Command {
	return &cli.Command{
		Name:  "usage",
		Usage: "what fills etcd: keys and bytes by resource and namespace, and how much compaction and defragmentation would free",
		Description: "Reads every key at one revision, page by page (memory stays a few pages whatever the size\n" +
			"of the database), and counts keys and bytes (key and value) by resource and namespace, largest\n" +
			"first, with the keys written most often and the largest keys. Beside it, each member's database\n" +
			"size, the part in use and its quota, and an estimate of the file once compacted and\n" +
			"defragmented: what a compaction frees (history), what a defragmentation frees (free pages),\n" +
			"and the live data that only deleting its source frees. Read-only; works on a full etcd\n" +
			"(NOSPACE) too.\n\n" + exitCodeHelp(),
		Flags: withConn(&cli.IntFlag{Name: "top", Value: 20, Usage: "how many of the largest groups to show (1 to 1000)"}),
		Action: func(c *cli.Context) error {
			return withEtcd(c, func(ctx context.Context, g globalOptions, ec *etcd.Client) error {
				u, err := ec.Usage(ctx, etcd.UsageOptions{})
				if err != nil {
					return err
				}
				if g.json() {
					return writeJSON(s.Out, u)
				}
				return u.WriteText(s.Out, c.Int("top"))
			})
		},
	}
}
