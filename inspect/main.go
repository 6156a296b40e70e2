// Command inspect tells a GUID's story without SQL: its ledger row decoded
// for a person (accounts masked, memo never shown), lists of rows by state
// and age, and a summary per state. It only reads. See README "inspect".
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/internal/inspect"
	"dedup/internal/job"
	"dedup/ledger"
	"dedup/ledger/backend"
	"dedup/lhstd"
)

// ExitNotFound is the exit status when a GUID asked for has no row.
const ExitNotFound = 3

type flags struct {
	connect.LedgerFlags
	GUIDs     []string    `arg:"" optional:"" name:"guid" help:"GUIDs to show, one block each."`
	State     string      `name:"state" placeholder:"STATE" help:"List rows in this state (RECEIVED, SENT, DONE, UNKNOWN, FAILED)."`
	OlderThan cli.Seconds `name:"older-than" default:"0" help:"With --state: only rows not updated for this many seconds."`
	Limit     cli.Whole   `name:"limit" default:"100" help:"With --state: at most this many rows, oldest first (0: all)."`
	Summary   bool        `name:"summary" help:"Rows and the oldest age per state."`
	Events    bool        `name:"events" help:"List every event of a period (--since, --until): the auditor's report."`
	Since     string      `name:"since" placeholder:"TIME" help:"With --events: from this time (UTC, YYYY-MM-DD or YYYY-MM-DDThh:mm:ss), included."`
	Until     string      `name:"until" placeholder:"TIME" help:"With --events: up to this time, excluded (default: now)."`
	Format    string      `name:"format" enum:"text,json,csv" default:"text" help:"text, json (one object per line), or csv (--events only)."`
	Reconcile bool        `name:"reconcile" help:"The last reconciliations against the core's journal (--limit of them), newest first; with --date, that date's last run and its findings."`
	Date      string      `name:"date" placeholder:"YYYYMMDD" help:"With --reconcile: the business date whose last run to show with its findings."`
	Check     bool        `name:"check" help:"Check the whole ledger file's structure (SQLite PRAGMA quick_check: reads every page; run daily by dedup-check.timer). Exit 1 if damaged."`
	job.JobFlags
	cli.Logging
}

// Validate asks for exactly one of GUIDs, --state and --summary.
func (f *flags) Validate() error {
	n := 0
	if len(f.GUIDs) > 0 {
		n++
	}
	if f.State != "" {
		n++
		if _, err := inspect.ParseState(f.State); err != nil {
			return fmt.Errorf("--state: %v", err)
		}
	}
	if f.Summary {
		n++
	}
	if f.Events {
		n++
		if f.Since == "" {
			return errors.New("--events needs --since")
		}
		for _, t := range []struct{ name, v string }{{"--since", f.Since}, {"--until", f.Until}} {
			if _, err := parseTime(t.v); t.v != "" && err != nil {
				return fmt.Errorf("%s: %v", t.name, err)
			}
		}
	} else if f.Since != "" || f.Until != "" {
		return errors.New("--since and --until go with --events")
	}
	if f.Format == "csv" && !f.Events {
		return errors.New("--format csv goes with --events")
	}
	if f.Check {
		n++
	}
	if f.Reconcile {
		n++
		if f.Date != "" {
			if err := cli.CheckDate("--date", f.Date); err != nil {
				return err
			}
		}
	} else if f.Date != "" {
		return errors.New("--date goes with --reconcile")
	}
	if !f.Check && f.MetricsTextfile != "" {
		return errors.New("--metrics-textfile goes with --check")
	}
	if !f.Check && !f.Summary && f.SummaryFormat != "text" {
		return errors.New("--summary-format goes with --check or --summary")
	}
	if f.MetricsTextfile != "" && !strings.HasSuffix(f.MetricsTextfile, ".prom") {
		// Run through sudo as the ledger's owner, inspect must not be a
		// way to replace the owner's files with a textfile.
		return fmt.Errorf("--metrics-textfile %s: the name must end in .prom", f.MetricsTextfile)
	}
	if n != 1 {
		return errors.New("give GUIDs, or --state, or --summary, or --events, or --reconcile, or --check (one of them)")
	}
	for _, g := range f.GUIDs {
		if !lhstd.IsGUID(g) {
			return fmt.Errorf("%q is not a GUID (32 of [0-9A-Za-z])", g)
		}
	}
	return nil
}

// parseTime reads a period's bound: a UTC date or date and time.
func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not YYYY-MM-DD or YYYY-MM-DDThh:mm:ss (UTC)", s)
}

func main() {
	var f flags
	cli.Parse("inspect", "Show ledger rows for a person: a GUID's story, rows by state and age, a summary per state.", &f, os.Args[1:],
		"3 a GUID asked for has no row")
	os.Exit(run(&f))
}

func run(f *flags) int {
	if f.Check {
		return check(f)
	}
	if !backend.IsPostgresURL(f.DB) {
		// inspect only reads: a missing file is a mistake, not a new ledger.
		if _, err := os.Stat(f.DB); err != nil {
			fmt.Fprintf(os.Stderr, "inspect: error: no ledger at %s: %v\n", f.DB, err)
			return cli.ExitRuntime
		}
	}
	l, err := backend.Open(f.DB, f.LedgerFlags.Options(nil, ledger.Actor("inspect")))
	if err != nil {
		fmt.Fprintf(os.Stderr, "inspect: error: %v\n", err)
		return cli.ExitRuntime
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "inspect: error: ledger %s: %v\n", backend.Describe(f.DB), err)
		return cli.ExitRuntime
	}
	// write prints rows; an output that cannot be written (a closed pipe,
	// a full disk) is a runtime error, never a silent half answer.
	write := func(rows []inspect.Row) error {
		if f.Format == "json" {
			return inspect.WriteJSON(os.Stdout, rows)
		}
		return inspect.WriteText(os.Stdout, rows)
	}
	failWrite := func(err error) int {
		fmt.Fprintf(os.Stderr, "inspect: error: writing the output: %v\n", err)
		return cli.ExitRuntime
	}
	switch {
	case f.Reconcile:
		runs, err := l.ReconcileRuns(ctx, f.Date, max(int(f.Limit), 1))
		if err != nil {
			return fail(err)
		}
		if f.Date != "" && len(runs) > 1 {
			runs = runs[:1]
		}
		out := inspect.Runs(runs)
		if f.Date != "" && len(out) == 1 {
			fs, err := l.ReconcileFindings(ctx, out[0].ID)
			if err != nil {
				return fail(err)
			}
			out[0].Findings = inspect.Findings(fs)
		}
		var werr error
		if f.Format == "json" {
			werr = inspect.WriteRunsJSON(os.Stdout, out)
		} else {
			werr = inspect.WriteRunsText(os.Stdout, out)
		}
		if werr != nil {
			return failWrite(werr)
		}
		if f.Date != "" && len(out) == 0 {
			fmt.Fprintf(os.Stderr, "inspect: no reconciliation of %s kept in this ledger\n", f.Date)
			return ExitNotFound
		}
	case f.Events:
		since, _ := parseTime(f.Since)
		var until time.Time
		if f.Until != "" {
			until, _ = parseTime(f.Until)
		}
		evs, err := l.EventsBetween(ctx, since, until)
		if err != nil {
			return fail(err)
		}
		out := inspect.Events(evs)
		var werr error
		switch f.Format {
		case "json":
			werr = inspect.WriteEventsJSON(os.Stdout, out)
		case "csv":
			werr = inspect.WriteEventsCSV(os.Stdout, out)
		default:
			werr = inspect.WriteEventsPeriodText(os.Stdout, out)
		}
		if werr != nil {
			return failWrite(werr)
		}
	case f.Summary:
		stats, err := l.Stats(ctx, 0) // every row: an operator asked for the count
		if err != nil {
			return fail(err)
		}
		sums := inspect.Summaries(stats)
		var werr error
		if f.Format == "json" || f.SummaryFormat == "json" {
			werr = inspect.WriteSummaryJSON(os.Stdout, sums)
		} else {
			werr = inspect.WriteSummaryText(os.Stdout, sums)
		}
		if werr != nil {
			return failWrite(werr)
		}
	case f.State != "":
		st, _ := inspect.ParseState(f.State)
		rows, err := l.SelectState(ctx, st, f.OlderThan.D(), int(f.Limit))
		if err != nil {
			return fail(err)
		}
		out := make([]inspect.Row, 0, len(rows))
		for _, r := range rows {
			out = append(out, inspect.Decode(r))
		}
		if err := write(out); err != nil {
			return failWrite(err)
		}
		if f.Format == "text" {
			age := ""
			if f.OlderThan > 0 {
				age = fmt.Sprintf(" not updated for %gs", f.OlderThan.D().Seconds())
			}
			fmt.Fprintf(os.Stderr, "inspect: %d %s rows%s, oldest first (limit %d)\n", len(rows), st, age, f.Limit)
		}
	default:
		status := cli.ExitOK
		var out []inspect.Row
		for _, g := range f.GUIDs {
			r, err := l.Get(ctx, g)
			if err != nil {
				return fail(err)
			}
			evs, err := l.Events(ctx, g)
			if err != nil {
				return fail(err)
			}
			if r == nil {
				fmt.Fprintf(os.Stderr, "inspect: %s: no row in the ledger (never seen, or purged)\n", g)
				status = ExitNotFound
				if len(evs) > 0 && f.Format == "text" {
					// A purged row's events stay: its story goes on.
					inspect.WriteEventsText(os.Stdout, inspect.Events(evs))
				}
				continue
			}
			row := inspect.Decode(*r)
			row.Events = inspect.Events(evs)
			out = append(out, row)
		}
		if err := write(out); err != nil {
			return failWrite(err)
		}
		return status
	}
	return cli.ExitOK
}

// checkTimeout bounds inspect --check: the whole file is read, at the
// daily timer's idle I/O priority.
const checkTimeout = 6 * time.Hour

// check runs the whole-file check (ledger.Checker) as a batch job: its
// start and end logged, a summary line (check: ok=1 damaged=0), the
// textfile, exit 1 if the file is damaged or cannot be read.
func check(f *flags) int {
	log := f.Logger(os.Stderr)
	if !backend.IsPostgresURL(f.DB) {
		if _, err := os.Stat(f.DB); err != nil {
			fmt.Fprintf(os.Stderr, "inspect: error: no ledger at %s: %v\n", f.DB, err)
			return cli.ExitRuntime
		}
	}
	return job.RunJob("check", f.LedgerFlags, f.JobFlags, log, nil,
		func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (job.Summary, error) {
			c, ok := l.(ledger.Checker)
			if !ok {
				log.Info("check: a PostgreSQL ledger: the server checks its own pages (run it with data checksums; amcheck checks its indexes); nothing to do here")
				return inspect.CheckSummary{OK: 1}, nil
			}
			ctx, cancel := context.WithTimeout(ctx, checkTimeout)
			defer cancel()
			start := time.Now()
			if err := c.Check(ctx); err != nil {
				if ctx.Err() != nil {
					return inspect.CheckSummary{}, err
				}
				log.Error("check: the ledger file is damaged: stop the relay and restore it from a backup (docs: the runbook)", "error", err)
				return inspect.CheckSummary{Damaged: 1}, err
			}
			log.Info("check: the ledger file is sound", "took_s", time.Since(start).Seconds())
			return inspect.CheckSummary{OK: 1}, nil
		})
}
