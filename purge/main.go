// Command purge deletes DONE ledger rows older than the retention period, in
// small batches. Every other state is kept whatever its age.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"dedup/batch"
	"dedup/cli"
	"dedup/ledger"
)

type flags struct {
	DB   string    `name:"db" default:"relay.db" help:"Ledger path."`
	Days cli.Whole `name:"days" default:"7" help:"Delete DONE rows not updated for this many days; must exceed the longest channel retransmission window."`
	cli.Logging
}

func main() {
	var f flags
	cli.Parse("purge", "Delete DONE rows older than --days days; keep every other state.", &f, os.Args[1:])
	log := f.Logger(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if f.Days == 0 {
		log.Warn("purge --days 0 forgets every finished transaction: a retransmission of one would be sent to the core again")
	}
	l, err := ledger.Open(f.DB, ledger.Options{})
	if err != nil {
		cli.Fatal("purge", err)
	}
	defer l.Close()
	log.Info("purge started", "db", f.DB, "days", int(f.Days))
	sum, err := batch.Purge(ctx, l, int(f.Days), log)
	if err != nil {
		err = fmt.Errorf("ledger %s: %w", f.DB, err)
	}
	log.Info("purge finished", "deleted", sum.Deleted)
	l.Close()
	os.Exit(cli.FinishJob("purge", sum, err))
}
