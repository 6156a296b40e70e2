// Command purge deletes DONE ledger rows older than the retention period, in
// small batches. Every other state is kept whatever its age.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/internal/job"
	"dedup/internal/purge"
	"dedup/ledger"
)

type flags struct {
	connect.LedgerFlags
	Days      cli.Whole `name:"days" default:"7" help:"Delete DONE rows not updated for this many days; must exceed the longest channel retransmission window."`
	DryRun    bool      `name:"dry-run" help:"Delete nothing; report how many rows a real run would delete."`
	EventDays cli.Whole `name:"event-days" default:"1830" help:"Delete events (tx_event) older than this many days (five years by default); at least 1."`
	connect.ClockFlags
	job.JobFlags
	cli.Logging
}

// Validate checks that --event-days is at least 1: the events are the
// record of who decided what, and a bank must keep them for years.
func (f *flags) Validate() error {
	return f.EventDays.AtLeastOne("--event-days")
}

func main() {
	var f flags
	log := job.StartJob("purge", "Delete DONE rows older than --days days; keep every other state.", &f)
	if f.Days == 0 {
		log.Warn("purge --days 0 forgets every finished transaction: a retransmission of one would be sent to the core again")
	}
	// Progress on a terminal only: cron's logs stay one line per event.
	var progress func(deleted, total int64)
	if cli.IsTerminal(os.Stderr) {
		progress = func(deleted, total int64) {
			fmt.Fprintf(os.Stderr, "\rpurge: deleted %d of %d", deleted, total)
		}
	}
	os.Exit(job.RunJob("purge", f.LedgerFlags, f.JobFlags, log, []any{"days", int(f.Days), "dry_run", f.DryRun},
		func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (job.Summary, error) {
			sum, err := purge.Run(ctx, l, int(f.Days), int(f.EventDays), f.MaxClockSkew.D(), f.DryRun, progress, log)
			if progress != nil && !f.DryRun {
				fmt.Fprintln(os.Stderr)
			}
			return sum, err
		}))
}
