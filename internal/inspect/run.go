package inspect

// This file is the inspect binary's flags and modes: Main parses the
// command line (docs/cli.md), opens the ledger (never creating one) and
// shows what was asked: a GUID's story, the rows of a state, a summary,
// the events of a period, the reconciliations kept, or the whole-file
// check as a batch job. inspect/ calls Main.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/internal/job"
	"dedup/ledger"
	"dedup/ledger/backend"
	"dedup/lhstd"
)

// ExitNotFound is the exit status when a GUID asked for has no row.
const ExitNotFound = 3

// Flags are the inspect binary's command line.
type Flags struct {
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
	Reconcile bool        `name:"reconcile" help:"The open critical findings of every run first, then the last reconciliations against the core's journal (--limit of them), newest first; with --date, that date's last run and its findings."`
	Date      string      `name:"date" placeholder:"YYYYMMDD" help:"With --reconcile: the business date whose last run to show with its findings."`
	Check     bool        `name:"check" help:"Check the whole ledger file's structure (SQLite PRAGMA quick_check: reads every page; run daily by dedup-check.timer). Exit 1 if damaged."`
	job.JobFlags
	cli.Logging
}

// Validate asks for exactly one of GUIDs, --state and --summary.
func (f *Flags) Validate() error {
	n := 0
	if len(f.GUIDs) > 0 {
		n++
	}
	if f.State != "" {
		n++
		if _, err := ParseState(f.State); err != nil {
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

// Main runs inspect with args (without the program name) and returns its
// exit status.
func Main(args []string) int {
	var f Flags
	f.Existing = true // inspect only reads: a missing ledger is a mistake, not a new one
	cli.Parse("inspect", "Show ledger rows for a person: a GUID's story, rows by state and age, a summary per state.", &f, args,
		"3 a GUID asked for has no row")
	if f.Check {
		return check(&f)
	}
	l, err := f.Open(f.Options(nil, ledger.Actor("inspect")), nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "inspect: error: %v\n", err)
		return cli.ExitRuntime
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := view{f: &f, l: l, out: os.Stdout}
	var status int
	switch {
	case f.Reconcile:
		status, err = v.reconciliations(ctx)
	case f.Events:
		err = v.events(ctx)
	case f.Summary:
		err = v.summary(ctx)
	case f.State != "":
		err = v.state(ctx)
	default:
		status, err = v.guids(ctx)
	}
	var werr writeError
	switch {
	case errors.As(err, &werr):
		// An output that cannot be written (a closed pipe, a full disk)
		// is a runtime error, never a silent half answer.
		fmt.Fprintf(os.Stderr, "inspect: error: writing the output: %v\n", werr.err)
		return cli.ExitRuntime
	case err != nil:
		fmt.Fprintf(os.Stderr, "inspect: error: ledger %s: %v\n", backend.Describe(f.DB), err)
		return cli.ExitRuntime
	}
	return status
}

// view is one run of inspect's reading modes over an open ledger.
type view struct {
	f   *Flags
	l   ledger.Ledger
	out io.Writer
}

// writeError is an output that could not be written.
type writeError struct{ err error }

func (e writeError) Error() string { return e.err.Error() }

// written wraps an error of writing the output as a writeError.
func written(err error) error {
	if err != nil {
		return writeError{err}
	}
	return nil
}

// rows prints rows as --format asks.
func (v view) rows(rows []Row) error {
	if v.f.Format == "json" {
		return written(WriteJSON(v.out, rows))
	}
	return written(WriteText(v.out, rows))
}

// reconciliations shows the last runs, or one date's last run with its
// findings (ExitNotFound if none is kept).
func (v view) reconciliations(ctx context.Context) (int, error) {
	f := v.f
	runs, err := v.l.ReconcileRuns(ctx, f.Date, max(int(f.Limit), 1))
	if err != nil {
		return 0, err
	}
	if f.Date != "" && len(runs) > 1 {
		runs = runs[:1]
	}
	openFs, total, err := v.l.OpenFindings(ctx, maxOpenShown)
	if err != nil {
		return 0, err
	}
	open := OpenFindings(openFs)
	if f.Format == "json" {
		err = WriteOpenJSON(v.out, open)
	} else {
		err = WriteOpenText(v.out, open, total)
	}
	if err != nil {
		return 0, written(err)
	}
	out := Runs(runs)
	if f.Date != "" && len(out) == 1 {
		fs, err := v.l.ReconcileFindings(ctx, out[0].ID)
		if err != nil {
			return 0, err
		}
		out[0].Findings = Findings(fs)
	}
	if f.Format == "json" {
		err = WriteRunsJSON(v.out, out)
	} else {
		err = WriteRunsText(v.out, out)
	}
	if err != nil {
		return 0, written(err)
	}
	if f.Date != "" && len(out) == 0 {
		fmt.Fprintf(os.Stderr, "inspect: no reconciliation of %s kept in this ledger\n", f.Date)
		return ExitNotFound, nil
	}
	return cli.ExitOK, nil
}

// events is the auditor's report: every event of a period.
func (v view) events(ctx context.Context) error {
	f := v.f
	since, _ := parseTime(f.Since)
	var until time.Time
	if f.Until != "" {
		until, _ = parseTime(f.Until)
	}
	evs, err := v.l.EventsBetween(ctx, since, until)
	if err != nil {
		return err
	}
	out := Events(evs)
	switch f.Format {
	case "json":
		return written(WriteEventsJSON(v.out, out))
	case "csv":
		return written(WriteEventsCSV(v.out, out))
	}
	return written(WriteEventsPeriodText(v.out, out))
}

// summary counts every row per state, with the oldest age.
func (v view) summary(ctx context.Context) error {
	stats, err := v.l.Stats(ctx, 0) // every row: an operator asked for the count
	if err != nil {
		return err
	}
	sums := Summaries(stats)
	if v.f.Format == "json" || v.f.SummaryFormat == "json" {
		return written(WriteSummaryJSON(v.out, sums))
	}
	return written(WriteSummaryText(v.out, sums))
}

// state lists the rows of one state, oldest first.
func (v view) state(ctx context.Context) error {
	f := v.f
	st, _ := ParseState(f.State)
	rows, err := v.l.SelectState(ctx, st, f.OlderThan.D(), int(f.Limit))
	if err != nil {
		return err
	}
	out := make([]Row, 0, len(rows))
	for _, r := range rows {
		out = append(out, Decode(r))
	}
	if err := v.rows(out); err != nil {
		return err
	}
	if f.Format == "text" {
		age := ""
		if f.OlderThan > 0 {
			age = fmt.Sprintf(" not updated for %gs", f.OlderThan.D().Seconds())
		}
		fmt.Fprintf(os.Stderr, "inspect: %d %s rows%s, oldest first (limit %d)\n", len(rows), st, age, f.Limit)
	}
	return nil
}

// guids tells each GUID's story (ExitNotFound if one has no row).
func (v view) guids(ctx context.Context) (int, error) {
	status := cli.ExitOK
	var out []Row
	for _, g := range v.f.GUIDs {
		r, err := v.l.Get(ctx, g)
		if err != nil {
			return 0, err
		}
		evs, err := v.l.Events(ctx, g)
		if err != nil {
			return 0, err
		}
		if r == nil {
			fmt.Fprintf(os.Stderr, "inspect: %s: no row in the ledger (never seen, or purged)\n", g)
			status = ExitNotFound
			if len(evs) > 0 && v.f.Format == "text" {
				// A purged row's events stay: its story goes on.
				WriteEventsText(v.out, Events(evs))
			}
			continue
		}
		row := Decode(*r)
		row.Events = Events(evs)
		out = append(out, row)
	}
	return status, v.rows(out)
}

// checkTimeout bounds inspect --check: the whole file is read, at the
// daily timer's idle I/O priority.
const checkTimeout = 6 * time.Hour

// check runs the whole-file check (ledger.Checker) as a batch job: its
// start and end logged, a summary line (check: ok=1 damaged=0), the
// textfile, exit 1 if the file is damaged or cannot be read.
func check(f *Flags) int {
	log := f.Logger(os.Stderr)
	return job.RunJob("check", f.LedgerFlags, f.JobFlags, log, nil,
		func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (job.Summary, error) {
			c, ok := l.(ledger.Checker)
			if !ok {
				log.Info("check: a PostgreSQL ledger: the server checks its own pages (run it with data checksums; amcheck checks its indexes); nothing to do here")
				return CheckSummary{OK: 1}, nil
			}
			ctx, cancel := context.WithTimeout(ctx, checkTimeout)
			defer cancel()
			start := time.Now()
			if err := c.Check(ctx); err != nil {
				if ctx.Err() != nil {
					return CheckSummary{}, err
				}
				log.Error("check: the ledger file is damaged: stop the relay and restore it from a backup (docs: the runbook)", "error", err)
				return CheckSummary{Damaged: 1}, err
			}
			log.Info("check: the ledger file is sound", "took_s", time.Since(start).Seconds())
			return CheckSummary{OK: 1}, nil
		})
}
