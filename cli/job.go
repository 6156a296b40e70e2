package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"dedup/ledger"
	"dedup/ledger/backend"
)

// Summary is a batch job's result: its String is the job's last stdout line
// (cli.md fixes it); Fields are the same counts, in the same order, for
// --summary-format json and the metrics textfile.
type Summary interface {
	String() string
	Fields() []Field
}

// Field is one count of a summary.
type Field struct {
	Name  string
	Value int64
}

// JobFlags are the flags every batch job has for its reporting
// (operations.md "Batch jobs").
type JobFlags struct {
	MetricsTextfile string `name:"metrics-textfile" placeholder:"PATH" help:"At exit, write node_exporter textfile metrics to PATH (atomically)."`
	SummaryFormat   string `name:"summary-format" enum:"text,json" default:"text" help:"The last stdout line: text or json."`
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
func RunJob(name, db string, jf JobFlags, log *slog.Logger, startAttrs []any, job Job) int {
	start := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	status, sum := runJob(ctx, name, db, jf, log, startAttrs, job)
	if jf.MetricsTextfile != "" {
		if err := WriteJobTextfile(jf.MetricsTextfile, name, start, time.Since(start), status == ExitOK, sum); err != nil {
			fmt.Fprintf(os.Stderr, "%s: error: metrics textfile: %v\n", name, err)
			if status == ExitOK {
				status = ExitRuntime
			}
		}
	}
	return status
}

func runJob(ctx context.Context, name, db string, jf JobFlags, log *slog.Logger, startAttrs []any, job Job) (int, Summary) {
	l, err := backend.Open(db, ledger.Options{Warn: log.Warn})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: error: %v\n", name, err)
		return ExitRuntime, nil
	}
	shown := backend.Describe(db)
	log.Info(name+" started", append([]any{"db", shown}, startAttrs...)...)
	sum, err := job(ctx, l, log)
	if cerr := l.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		err = fmt.Errorf("ledger %s: %w", shown, err)
	}
	if err != nil {
		log.Info(name + " stopped before its end")
	} else {
		log.Info(name + " finished")
	}
	if sum != nil {
		fmt.Fprintln(os.Stdout, FormatSummary(name, sum, jf.SummaryFormat))
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: error: %v\n", name, err)
		return ExitRuntime, sum
	}
	return ExitOK, sum
}

// FormatSummary is the job's last stdout line: the text cli.md fixes, or a
// JSON object {"job": name, count: value, ...} with the same counts.
func FormatSummary(name string, sum Summary, format string) string {
	if format != "json" {
		return sum.String()
	}
	var b strings.Builder
	b.WriteString(`{"job":`)
	j, _ := json.Marshal(name)
	b.Write(j)
	for _, f := range sum.Fields() {
		fmt.Fprintf(&b, `,%q:%d`, f.Name, f.Value)
	}
	b.WriteString("}")
	return b.String()
}

const lastSuccessMetric = "dedup_job_last_success_timestamp_seconds"

// WriteJobTextfile writes the node_exporter textfile of one job run to path,
// atomically (a temporary file in the same directory, then rename). The
// last-success timestamp advances only if ok; otherwise the previous
// file's value is kept.
func WriteJobTextfile(path, job string, start time.Time, took time.Duration, ok bool, sum Summary) error {
	label := fmt.Sprintf(`{job=%q}`, job)
	lastSuccess := ""
	if ok {
		lastSuccess = strconv.FormatFloat(float64(time.Now().UnixMilli())/1000, 'f', 3, 64)
	} else {
		lastSuccess = previousValue(path, lastSuccessMetric+label)
	}
	var b strings.Builder
	gauge := func(name, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
	}
	gauge("dedup_job_last_run_timestamp_seconds", "When the job last ran (Unix time), whatever its outcome.")
	fmt.Fprintf(&b, "dedup_job_last_run_timestamp_seconds%s %.3f\n", label, float64(start.UnixMilli())/1000)
	if lastSuccess != "" {
		gauge(lastSuccessMetric, "When the job last ran to its end with exit status 0 (Unix time).")
		fmt.Fprintf(&b, "%s%s %s\n", lastSuccessMetric, label, lastSuccess)
	}
	gauge("dedup_job_duration_seconds", "How long the job's last run took.")
	fmt.Fprintf(&b, "dedup_job_duration_seconds%s %.3f\n", label, took.Seconds())
	if sum != nil {
		gauge("dedup_job_rows", "The counts of the job's last summary line, by outcome.")
		for _, f := range sum.Fields() {
			fmt.Fprintf(&b, "dedup_job_rows{job=%q,outcome=%q} %d\n", job, f.Name, f.Value)
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(b.String()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// previousValue returns the value of series in the textfile at path, or "".
func previousValue(path, series string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
