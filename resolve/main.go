// Command resolve settles UNKNOWN ledger rows by asking the core whether it
// applied them (GET /v1/transfers/{guid}). It never sends a transfer.
package main

import (
	"context"
	"log/slog"
	"os"

	"dedup/batch"
	"dedup/cli"
	"dedup/coreapi"
	"dedup/ledger"
)

type flags struct {
	cli.LedgerFlags
	MinAge cli.Seconds `name:"min-age" default:"300" help:"Only UNKNOWN rows at least this many seconds old (longer than the core's longest processing time)."`
	cli.CoreFlags
	cli.JobFlags
	cli.Logging
}

func main() {
	var f flags
	cli.Parse("resolve", "Settle UNKNOWN rows by inquiry: 200 -> DONE, 404 NOT_FOUND -> FAILED, anything else -> left as is.", &f, os.Args[1:])
	core, err := coreapi.New(coreapi.Config{BaseURL: f.Core, ConnectTimeout: f.ConnectTimeout.D(), Timeout: f.Timeout.D()})
	if err != nil {
		cli.Fatal("resolve", err)
	}
	os.Exit(cli.RunJob("resolve", f.DB, f.JobFlags, f.Logger(os.Stderr), []any{"core", f.Core, "min_age_s", f.MinAge.D().Seconds()},
		func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (cli.Summary, error) {
			return batch.Resolve(ctx, l, core, f.MinAge.D(), log)
		}))
}
