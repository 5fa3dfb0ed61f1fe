// Package recordcmd is the main of the lab's recorders (lab/recordargs,
// lab/recordstartup, lab/recordencryption): their flags and the context
// an interrupt cancels.
package recordcmd

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
)

// Run runs record under a context that SIGINT or SIGTERM cancels, and
// exits 1 with its error logged, if any.
func Run(record func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := record(ctx); err != nil {
		log.Fatal(err)
	}
}

// Main parses -out (the directory of the records, out by default) and
// -workers (how many are recorded at once, 2 by default), each with its
// usage, then runs record with them and the command line's other
// arguments as Run does.
func Main(out, outUsage, workersUsage string, record func(ctx context.Context, out string, workers int, only []string) error) {
	dir := flag.String("out", out, outUsage)
	workers := flag.Int("workers", 2, workersUsage)
	flag.Parse()
	Run(func(ctx context.Context) error { return record(ctx, *dir, *workers, flag.Args()) })
}
