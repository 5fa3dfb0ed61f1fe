// Command recordencryption records what each kube-apiserver version of the
// lab does when the Secrets it wrote no longer decrypt (the shapes of
// lab.EncryptionShapes), from the real binaries on a real etcd, into
// internal/encryption/testdata/recorded/VERSION.json:
//
//	go run ./lab/recordencryption                     # every version built
//	go run ./lab/recordencryption v1.32.13 v1.34.4    # just these
//
// The binaries come from `make kube-apiserver` ($BREAKGLASS_KUBE_BIN_DIR,
// else the user's cache). About a minute a shape on an idle machine.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/breakglass-dev/breakglass/lab"
	"github.com/breakglass-dev/breakglass/lab/internal/recordcmd"
)

func main() {
	out := flag.String("out", "internal/encryption/testdata/recorded", "directory of the recordings")
	verbose := flag.Bool("v", false, "show kube-apiserver's output")
	shape := flag.String("shape", "", "record only this shape, to stdout (no file written)")
	flag.Parse()
	recordcmd.Run(func(ctx context.Context) error { return run(ctx, *out, *shape, *verbose, flag.Args()) })
}

func run(ctx context.Context, out, shape string, verbose bool, versions []string) error {
	if len(versions) == 0 {
		for _, v := range lab.Versions {
			if _, err := lab.Binaries(ctx, "", nil, v); err == nil {
				versions = append(versions, v)
			}
		}
		if len(versions) == 0 {
			_, err := lab.Binaries(ctx, "", nil, lab.Versions...)
			return err
		}
	}
	for _, v := range versions {
		start := time.Now()
		opts := lab.EncryptionRecordOptions{Version: v}
		if verbose {
			opts.Log = os.Stderr
		}
		for _, s := range lab.EncryptionShapes {
			if s.Name == shape {
				opts.Shapes = append(opts.Shapes, s)
			}
		}
		if shape != "" && opts.Shapes == nil {
			return fmt.Errorf("no shape %q", shape)
		}
		rec, err := lab.RecordEncryption(ctx, opts)
		if err != nil {
			return err
		}
		data, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			return err
		}
		path := filepath.Join(out, v+".json")
		if shape != "" {
			path = "standard output"
			os.Stdout.Write(append(data, '\n')) //nolint:errcheck
		} else if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			return err
		}
		for _, s := range rec.Shapes {
			state := "not ready"
			switch {
			case s.Exited != "":
				state = "exited " + s.Exited
			case s.Ready:
				state = "ready after " + s.ReadyAfter
			}
			fmt.Printf("%s %-26s %s, %d log lines, GET %s\n", v, s.Name, state, len(s.Lines), s.Get)
		}
		log.Printf("%s: %d shapes -> %s (%s)", v, len(rec.Shapes), path, time.Since(start).Round(time.Second))
	}
	return nil
}
