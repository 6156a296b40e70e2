// Command reprocess resends, under their own GUIDs, the transfers the ledger
// knows surely never reached the core (FAILED/E902), up to --max-attempts
// attempts in all. It never touches UNKNOWN rows.
package main

import (
	"context"
	"log/slog"
	"os"

	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/internal/coreapi"
	"dedup/internal/job"
	"dedup/internal/reprocess"
	"dedup/internal/send"
	"dedup/ledger"
	"dedup/ledger/backend"
)

type flags struct {
	connect.LedgerFlags
	MaxAttempts cli.Whole `name:"max-attempts" default:"3" help:"Attempts in all (the relay's own included) after which a row is left for an operator."`
	DryRun      bool      `name:"dry-run" help:"Change nothing; report which rows a real run would send."`
	coreapi.Flags
	job.JobFlags
	cli.Logging
}

// Validate checks that --max-attempts is at least 1.
func (f *flags) Validate() error {
	return f.MaxAttempts.AtLeastOne("--max-attempts")
}

func main() {
	var f flags
	log := job.StartJob("reprocess", "Resend FAILED/E902 rows (surely not sent) with their own GUID and stored request.", &f)
	core := f.MustCoreClient("reprocess")
	os.Exit(job.RunJob("reprocess", f.LedgerFlags, f.JobFlags, log, []any{"core", f.Core, "core_roots", f.CoreRoots(), "max_attempts", int(f.MaxAttempts), "dry_run", f.DryRun},
		func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (job.Summary, error) {
			sender := &send.Sender{Ledger: l, Core: core, Lease: ledger.Bounds{ConnectTimeout: f.ConnectTimeout.D(), Timeout: f.Timeout.D()}.Lease(), Confirm: backend.Shared(f.DB)}
			sum, err := reprocess.Run(ctx, l, sender, int(f.MaxAttempts), f.DryRun, log)
			if sum.Exhausted > 0 {
				log.Warn("reprocess: rows at the attempt limit need an operator", "exhausted", sum.Exhausted)
			}
			return sum, err
		}))
}
