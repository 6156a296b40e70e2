// Command purge deletes DONE ledger rows older than the retention period, in
// small batches. Every other state is kept whatever its age.
package main

import (
	"context"
	"log/slog"
	"os"

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
	if f.Days == 0 {
		log.Warn("purge --days 0 forgets every finished transaction: a retransmission of one would be sent to the core again")
	}
	os.Exit(cli.RunJob("purge", f.DB, log, []any{"days", int(f.Days)},
		func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (cli.Summary, error) {
			return batch.Purge(ctx, l, int(f.Days), log)
		}))
}
