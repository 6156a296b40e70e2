// Command reconcile proves a business day against the core's own journal
// (docs/reconcile.md): it finds every double debit, every channel told
// success for a transfer that never moved money, every FAILED row the core
// did apply; resolves the UNKNOWN and FAILED rows the journal proves
// applied; and leaves every other finding to a person (exit 3).
package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/alecthomas/kong"

	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/internal/coreapi"
	"dedup/internal/job"
	"dedup/internal/reconcile"
	"dedup/ledger"
)

type flags struct {
	connect.LedgerFlags
	Date    string `name:"date" placeholder:"YYYYMMDD" help:"The business date to reconcile (default: yesterday, this host's local time)."`
	Journal string `name:"journal" placeholder:"FILE" help:"Read the day's journal from this CSV file (owned by root or this user, writable by its owner only) instead of --core."`
	coreFlags
	DryRun bool `name:"dry-run" help:"Change nothing; report what would change."`
	job.JobFlags
	cli.Logging
}

// coreFlags are the core's flags as reconcile takes them: --core has no
// default (the journal comes from the one source named), and --timeout
// bounds each wait for the journal's next bytes.
type coreFlags struct {
	coreapi.Flags `set:"core_default=" set:"core_placeholder=URL" set:"timeout_help=Seconds to wait for the journal's next bytes from the core once connected; then the run fails." set:"connect_timeout_help=Seconds to obtain a connection to the core (TCP and TLS handshake); then the run fails."`
}

// Validate leaves the core's flags to flags.Validate, which checks them
// only when --core is given: with --journal, --core is empty.
func (coreFlags) Validate() error { return nil }

// Validate asks for a date that exists and exactly one of --core and
// --journal.
func (f *flags) Validate(kctx *kong.Context) error {
	if f.Date != "" {
		if err := cli.CheckDate("--date", f.Date); err != nil {
			return err
		}
	}
	coreGiven := false
	for _, p := range kctx.Path {
		if p.Flag != nil && p.Flag.Name == "core" {
			coreGiven = true
		}
	}
	switch {
	case coreGiven && f.Journal != "":
		return errors.New("give one of --core and --journal, not both")
	case !coreGiven && f.Journal == "":
		return errors.New("give one of --core (fetch the journal) and --journal (read it from a file)")
	case coreGiven:
		return f.Flags.Validate()
	}
	return nil
}

// memoryLimit is the heap reconcile's collector keeps under, unless
// GOMEMLIMIT says otherwise: a 10-million-line journal's keys take 160
// MiB, and the default collector would let garbage grow as much again
// beside them.
const memoryLimit = 384 << 20

func main() {
	if len(os.Args) > 1 && os.Args[1] == reconcile.CloseCommand {
		os.Exit(reconcile.CloseMain(os.Args[2:]))
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	f := flags{LedgerFlags: connect.LedgerFlags{Existing: true}}
	log := job.StartJob("reconcile", "Prove a business day against the core's journal: resolve what it proves, report the rest for a person.", &f,
		"3 the run completed and a finding is critical: a person must look")
	if f.Date == "" {
		f.Date = time.Now().AddDate(0, 0, -1).Format("20060102")
	}
	var src reconcile.Source = reconcile.FileSource{Path: f.Journal}
	if f.Journal != "" {
		// A journal file that cannot be used is refused before the
		// ledger is opened (or created); it is opened again to be read.
		j, err := src.Open(context.Background())
		if err != nil {
			cli.Fatal("reconcile", err)
		}
		j.Close()
	} else {
		src = reconcile.CoreSource{Client: f.MustCoreClient("reconcile"), URL: f.Core, Date: f.Date}
	}
	os.Exit(job.RunJob("reconcile", f.LedgerFlags, f.JobFlags, log, []any{"date", f.Date, "journal", src.String(), "dry_run", f.DryRun},
		func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (job.Summary, error) {
			return reconcile.Run(ctx, l, reconcile.Config{Date: f.Date, Source: src, DryRun: f.DryRun, Out: os.Stdout,
				JSON: f.SummaryFormat == "json", Log: log})
		}, reconcile.CheckDate(f.Date)))
}
