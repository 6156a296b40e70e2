package reconcile

// This file is `reconcile close`: a person closes an open critical finding
// with a note saying what was done (docs/reconcile.md "Open findings").
// The person is found as settle finds one (sudo on the ledger's host, the
// role on PostgreSQL), before the ledger is opened; one person suffices,
// since closing changes no money and no row.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/internal/metrics"
	"dedup/internal/settle"
	"dedup/ledger"
	"dedup/ledger/backend"
)

// CloseCommand is the first argument that makes reconcile close a finding
// instead of running: `reconcile close --finding ID --note TEXT`. It is
// taken apart from the run's flags before anything is parsed, so that no
// flag of close can start a run (sudoers lets operators run
// `reconcile close *` as the ledger's owner, never a run).
const CloseCommand = "close"

type closeFlags struct {
	connect.LedgerFlags
	Finding         int64  `name:"finding" required:"" placeholder:"ID" help:"The open critical finding's id (inspect --reconcile, the console's Reconciliation page)."`
	Note            string `name:"note" required:"" placeholder:"TEXT" help:"What was done: the reversal's reference in the core, the channel told. Required; kept in the finding and in the transfer's event."`
	MetricsTextfile string `name:"metrics-textfile" placeholder:"PATH" help:"reconcile's textfile (its name ends in .prom): its dedup_reconcile_open_critical is set to the findings still open, so that the page alert clears now rather than at the next run."`
	cli.Logging
}

// Validate refuses an empty note and a textfile that is not one.
func (f *closeFlags) Validate() error {
	if strings.TrimSpace(f.Note) == "" {
		return errors.New("--note: say what was done (the reversal's reference, the channel told)")
	}
	if f.Finding <= 0 {
		return errors.New("--finding: a finding's id is a whole number above 0")
	}
	if f.MetricsTextfile != "" && !strings.HasSuffix(f.MetricsTextfile, ".prom") {
		// Run through sudo as the ledger's owner, close must not be a way
		// to rewrite the owner's other files.
		return fmt.Errorf("--metrics-textfile %s: the name must end in .prom", f.MetricsTextfile)
	}
	return nil
}

// CloseMain runs `reconcile close` with args (those after "close") and
// returns the exit status: 0 closed; 1 refused (no such finding, closed
// already, no authenticated person) or a runtime error; 2 a usage error.
func CloseMain(args []string) int {
	f := closeFlags{LedgerFlags: connect.LedgerFlags{Existing: true}}
	cli.Parse("reconcile close", "Close an open critical finding of reconcile, with a note saying what was done: one person, on the record.", &f, args,
		"1 also when refused (no such finding, closed already, no authenticated person)")
	log := f.Logger(os.Stderr)
	f.WarnInsecure(log)
	postgres := backend.IsPostgresURL(f.DB)
	if !postgres {
		if err := f.CheckExists(); err != nil {
			return closeFailed(err)
		}
	}
	who, err := settle.WhoDecides("reconcile close", f.DB, postgres)
	if err != nil {
		return closeFailed(err)
	}
	l, err := f.LedgerFlags.Open(f.LedgerFlags.Options(log.Warn, ledger.Actor("reconcile")), log)
	if err != nil {
		return closeFailed(err)
	}
	defer l.Close()
	ctx := context.Background()
	closed, err := settle.DeskFor(l).CloseFinding(ctx, f.Finding, who, f.Note)
	if err != nil {
		return closeFailed(err)
	}
	log.Info("reconcile: finding closed", "finding", f.Finding, "guid", closed.GUID, "class", closed.Class, "by", closed.ClosedBy, "note", f.Note)
	fmt.Printf("reconcile: closed finding=%d guid=%s class=%s\n", f.Finding, closed.GUID, closed.Class)
	if f.MetricsTextfile != "" {
		_, open, err := l.OpenFindings(ctx, 0)
		if err == nil {
			var ok bool
			ok, err = metrics.SetSeries(f.MetricsTextfile, metrics.OpenCriticalSeries, strconv.FormatInt(open, 10))
			if err == nil && !ok {
				err = fmt.Errorf("it has no %s series yet (reconcile's next run writes it)", metrics.OpenCriticalSeries)
			}
		}
		if err != nil {
			// Closed all the same: the alert clears at the next run.
			log.Warn("reconcile: the textfile was not updated: the page alert follows at reconcile's next run", "textfile", f.MetricsTextfile, "error", err)
		}
	}
	return cli.ExitOK
}

// closeFailed prints err as one line and returns its exit status.
func closeFailed(err error) int {
	switch {
	case errors.Is(err, ledger.ErrUsage):
		fmt.Fprintf(os.Stderr, "reconcile close: usage error: %s\n", strings.TrimPrefix(err.Error(), ledger.ErrUsage.Error()+": "))
		return cli.ExitUsage
	case errors.Is(err, ledger.ErrRefused):
		fmt.Fprintf(os.Stderr, "reconcile close: refused: %s\n", strings.TrimPrefix(err.Error(), ledger.ErrRefused.Error()+": "))
		return cli.ExitRuntime
	}
	fmt.Fprintf(os.Stderr, "reconcile close: error: %v\n", err)
	return cli.ExitRuntime
}
