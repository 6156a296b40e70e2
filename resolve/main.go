// Command resolve settles UNKNOWN ledger rows by asking the core whether it
// applied them (GET /v1/transfers/{guid}). It never sends a transfer.
package main

import (
	"context"
	"log/slog"
	"os"

	"dedup/batch"
	"dedup/cli"
	"dedup/command"
	"dedup/ledger"
)

type flags struct {
	command.LedgerFlags
	MinAge cli.Seconds `name:"min-age" default:"300" help:"Only UNKNOWN rows at least this many seconds old (longer than the core's longest processing time)."`
	command.CoreFlags
	command.ClockFlags
	command.JobFlags
	cli.Logging
}

func main() {
	var f flags
	log := command.StartJob("resolve", "Settle UNKNOWN rows by inquiry: 200 -> DONE, 404 NOT_FOUND -> FAILED, anything else -> left as is.", &f)
	core := f.MustCoreClient("resolve")
	os.Exit(command.RunJob("resolve", f.LedgerFlags, f.JobFlags, log, []any{"core", f.Core, "core_roots", f.CoreRoots(), "min_age_s", f.MinAge.D().Seconds()},
		func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (batch.Summary, error) {
			return batch.Resolve(ctx, l, core, f.MinAge.D(), f.MaxClockSkew.D(), log)
		}))
}
