// Package job is how a batch job (resolve, reprocess, purge, reconcile,
// inspect --check) runs: its start-up line, the ledger it opens, its exit
// status, its last stdout line (the summary) and its metrics textfile.
// Each job's own logic lives in the package of its name.
package job

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/internal/metrics"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/ledger/backend"
)

// JobFlags are the flags every batch job has for its reporting
// (docs/operations.md, "The batch jobs").
type JobFlags struct {
	MetricsTextfile string `name:"metrics-textfile" placeholder:"PATH" help:"At exit, write node_exporter textfile metrics to PATH (atomically)."`
	SummaryFormat   string `name:"summary-format" enum:"text,json" default:"text" help:"The last stdout line: text or json."`
}

// JobCommandLine is a batch job's flags: its logging and its --db.
type JobCommandLine interface {
	Logger(w io.Writer) *slog.Logger
	WarnInsecure(log *slog.Logger)
}

// StartJob parses a batch job's command line into f (exit 2 on a usage
// error) and returns its logger, having warned of what --db exposes.
// moreExits are the job's own exit statuses, for --help.
func StartJob(name, description string, f JobCommandLine, moreExits ...string) *slog.Logger {
	cli.Parse(name, description, f, os.Args[1:], moreExits...)
	log := f.Logger(os.Stderr)
	f.WarnInsecure(log)
	return log
}

// Job is one run of a batch job against an open ledger. ctx ends on SIGINT
// or SIGTERM; a job stops between rows and returns its summary so far.
type Job func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (Summary, error)

// RunJob runs a batch job the way every batch binary does: it opens the
// ledger at db (applying the schema), runs job, logs its start and end,
// prints the summary as the last line on stdout (once: the log does not
// repeat it), writes the metrics textfile if asked, and returns the exit
// status: 0 if the job ran to its end, 1 (one line on stderr naming the
// ledger and the cause) if it could not.
//
// Each of checks runs on the open ledger before the job's start is logged:
// a check that finds a flag unusable (a UsageError) ends the run with that
// one line, before anything is changed.
func RunJob(name string, lf connect.LedgerFlags, jf JobFlags, log *slog.Logger, startAttrs []any, job Job, checks ...Check) int {
	start := time.Now()
	// A textfile that could not be written at the end is found before the
	// job changes anything.
	if jf.MetricsTextfile != "" {
		if err := metrics.CheckTextfile(jf.MetricsTextfile); err != nil {
			fmt.Fprintf(os.Stderr, "%s: error: --metrics-textfile %s: %v\n", name, jf.MetricsTextfile, err)
			return cli.ExitRuntime
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	status, sum := runJob(ctx, name, lf, jf, log, startAttrs, job, checks)
	if jf.MetricsTextfile != "" {
		var counts []metrics.JobCount
		if sum != nil {
			for _, f := range sum.Fields() {
				counts = append(counts, metrics.JobCount{Outcome: f.Name, Rows: f.Value})
			}
		}
		extra := ""
		if m, ok := sum.(Metered); ok {
			extra = m.Textfile()
		}
		completed := status == cli.ExitOK || status == cli.ExitNeedsPerson
		if r, ok := sum.(Rehearsal); ok && r.IsDryRun() {
			// A dry run proves nothing: the last real run's success
			// time, counts and series stay as they were.
			completed, counts, extra = false, nil, metrics.KeptSeries(jf.MetricsTextfile)
		}
		if err := metrics.WriteJobTextfile(jf.MetricsTextfile, name, start, time.Since(start), completed, counts, extra); err != nil {
			fmt.Fprintf(os.Stderr, "%s: error: metrics textfile: %v\n", name, err)
			if completed {
				status = cli.ExitRuntime
			}
		}
	}
	return status
}

// Check is a test of a job's flags against its open ledger (reconcile's
// --date against the ledger's clock), run before the job starts.
type Check func(ctx context.Context, l ledger.Ledger) error

func runJob(ctx context.Context, name string, lf connect.LedgerFlags, jf JobFlags, log *slog.Logger, startAttrs []any, job Job, checks []Check) (int, Summary) {
	db := lf.DB
	tp, err := tracing.Start(ctx, name, cli.VersionString(), log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: error: %v\n", name, err)
		return cli.ExitRuntime, nil
	}
	defer tracing.Flush(log, tp)
	l, err := lf.Open(lf.Options(log.Warn, ledger.Actor(name)), log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: error: %v\n", name, err)
		return cli.ExitRuntime, nil
	}
	shown := backend.Describe(db)
	for _, check := range checks {
		if err := check(ctx, l); err != nil {
			l.Close()
			var usage UsageError
			if errors.As(err, &usage) {
				fmt.Fprintf(os.Stderr, "%s: usage error: %v (see --help)\n", name, err)
				return cli.ExitUsage, nil
			}
			fmt.Fprintf(os.Stderr, "%s: error: ledger %s: %v\n", name, shown, err)
			return cli.ExitRuntime, nil
		}
	}
	log.Info(name+" started", append([]any{"db", shown}, startAttrs...)...)
	sum, err := job(ctx, l, log)
	if cerr := l.Close(); err == nil && cerr != nil {
		err = cerr
	}
	var input InputError
	isInput := errors.As(err, &input)
	if err != nil && !errors.Is(err, context.Canceled) && !isInput {
		err = fmt.Errorf("ledger %s: %w", shown, err)
	}
	if err != nil {
		log.Info(name + " stopped before its end")
	} else {
		log.Info(name + " finished")
	}
	if sum != nil && !isInput {
		fmt.Fprintln(os.Stdout, FormatSummary(name, sum, jf.SummaryFormat))
	}
	if isInput {
		// Nothing was done: no counts for the textfile either.
		fmt.Fprintf(os.Stderr, "%s: error: %v\n", name, err)
		return cli.ExitRuntime, nil
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: error: %v\n", name, err)
		return cli.ExitRuntime, sum
	}
	if p, ok := sum.(NeedsPerson); ok && p.NeedsPerson() {
		return cli.ExitNeedsPerson, sum
	}
	return cli.ExitOK, sum
}

// FormatSummary is the job's last stdout line: the text docs/cli.md fixes, or a
// JSON object {"job": name, count: value, ...} with the same counts.
func FormatSummary(name string, sum Summary, format string) string {
	if format != "json" {
		return sum.String()
	}
	var b strings.Builder
	b.WriteString(`{"job":`)
	j, _ := json.Marshal(name)
	b.Write(j)
	if l, ok := sum.(Labeled); ok {
		for _, f := range l.Labels() {
			v, _ := json.Marshal(f.Value)
			fmt.Fprintf(&b, `,%q:%s`, f.Name, v)
		}
	}
	for _, f := range sum.Fields() {
		fmt.Fprintf(&b, `,%q:%d`, f.Name, f.Value)
	}
	b.WriteString("}")
	return b.String()
}
