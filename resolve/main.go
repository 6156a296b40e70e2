// Command resolve resolves UNKNOWN ledger rows by asking the core whether it
// applied them (GET /v1/transfers/{guid}). It never sends a transfer.
package main

import (
	"context"
	"log/slog"
	"os"

	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/internal/coreapi"
	"dedup/internal/job"
	"dedup/internal/resolve"
	"dedup/ledger"
)

type flags struct {
	connect.LedgerFlags
	MinAge        cli.Seconds `name:"min-age" default:"300" help:"Only UNKNOWN rows at least this many seconds old (longer than the core's longest processing time)."`
	coreapi.Flags `set:"timeout_help=Seconds for each inquiry once connected; then the row is left as it is." set:"connect_timeout_help=Seconds to obtain a connection to the core (TCP and TLS handshake); then the row is left as it is."`
	connect.ClockFlags
	job.JobFlags
	cli.Logging
}

func main() {
	var f flags
	log := job.StartJob("resolve", "Resolve UNKNOWN rows by inquiry: 200 -> DONE, 404 NOT_FOUND -> FAILED, anything else -> left as is.", &f)
	core := f.MustCoreClient("resolve")
	os.Exit(job.RunJob("resolve", f.LedgerFlags, f.JobFlags, log, []any{"core", f.Core, "core_roots", f.CoreRoots(), "min_age_s", f.MinAge.D().Seconds()},
		func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (job.Summary, error) {
			return resolve.Run(ctx, l, core, f.MinAge.D(), f.MaxClockSkew.D(), log)
		}))
}
