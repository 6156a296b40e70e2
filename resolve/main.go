// Command resolve settles UNKNOWN ledger rows by asking the core whether it
// applied them (GET /v1/transfers/{guid}). It never sends a transfer.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"dedup/batch"
	"dedup/cli"
	"dedup/coreapi"
	"dedup/ledger"
)

type flags struct {
	DB     string      `name:"db" default:"relay.db" help:"Ledger path."`
	MinAge cli.Seconds `name:"min-age" default:"300" help:"Only UNKNOWN rows at least this many seconds old (longer than the core's longest processing time)."`
	cli.CoreFlags
	cli.Logging
}

func main() {
	var f flags
	cli.Parse("resolve", "Settle UNKNOWN rows by inquiry: 200 -> DONE, 404 NOT_FOUND -> FAILED, anything else -> left as is.", &f, os.Args[1:])
	log := f.Logger(os.Stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	l, err := ledger.Open(f.DB, ledger.Options{})
	if err != nil {
		cli.Fatal("resolve", err)
	}
	defer l.Close()
	core, err := coreapi.New(coreapi.Config{BaseURL: f.Core, ConnectTimeout: f.ConnectTimeout.D(), Timeout: f.Timeout.D()})
	if err != nil {
		cli.Fatal("resolve", err)
	}
	log.Info("resolve started", "db", f.DB, "core", f.Core, "min_age_s", f.MinAge.D().Seconds())
	sum, err := batch.Resolve(ctx, l, core, f.MinAge.D(), log)
	if err != nil {
		err = fmt.Errorf("ledger %s: %w", f.DB, err)
	}
	log.Info("resolve finished", "candidates", sum.Candidates, "done", sum.Done, "failed", sum.Failed, "left", sum.Left)
	l.Close()
	os.Exit(cli.FinishJob("resolve", sum, err))
}
