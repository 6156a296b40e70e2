package metrics

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// JobCount is one count of a batch job's summary line (its outcome label
// and rows), as the textfile exports it.
type JobCount struct {
	Outcome string
	Rows    int64
}

const lastSuccessMetric = "dedup_job_last_success_timestamp_seconds"

// CheckTextfile reports, before a job changes anything, a textfile path
// whose file WriteJobTextfile could not write: a directory that does not
// exist, is not one, or refuses a new file. It creates and removes one
// temporary file there, as the write will.
func CheckTextfile(path string) error {
	dir := filepath.Dir(path)
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".check*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	tmp.Close()
	return os.Remove(tmp.Name())
}

// WriteJobTextfile writes the node_exporter textfile of one job run to path,
// atomically (a temporary file in the same directory, then rename). The
// last-success timestamp advances only if ok; otherwise the previous
// file's value is kept. extra, if not empty, is appended as it is: a
// job's own series.
func WriteJobTextfile(path, job string, start time.Time, took time.Duration, ok bool, counts []JobCount, extra string) error {
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
		gauge(lastSuccessMetric, "When the job last ran to its end (exit status 0, or 3: a complete report that needs a person) (Unix time).")
		fmt.Fprintf(&b, "%s%s %s\n", lastSuccessMetric, label, lastSuccess)
	}
	gauge("dedup_job_duration_seconds", "How long the job's last run took.")
	fmt.Fprintf(&b, "dedup_job_duration_seconds%s %.3f\n", label, took.Seconds())
	if counts != nil {
		gauge("dedup_job_rows", "The counts of the job's last summary line, by outcome.")
		for _, c := range counts {
			fmt.Fprintf(&b, "dedup_job_rows{job=%q,outcome=%q} %d\n", job, c.Outcome, c.Rows)
		}
	}
	b.WriteString(extra)
	return replaceTextfile(path, b.String())
}

// replaceTextfile writes text to path atomically: a temporary file in the
// same directory, readable by node_exporter, then rename.
func replaceTextfile(path, text string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(text); err != nil {
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

// KeptSeries returns the lines of the textfile at path that belong to a
// job's own series (reconcile's findings), with the job's rows counts:
// everything but the run's time, success time and duration, which
// WriteJobTextfile writes anew. A dry run writes them back unchanged.
func KeptSeries(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var b strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		name := line
		if c, ok := strings.CutPrefix(line, "# HELP "); ok {
			name = c
		} else if c, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name = c
		}
		if i := strings.IndexAny(name, "{ "); i >= 0 {
			name = name[:i]
		}
		switch name {
		case "dedup_job_last_run_timestamp_seconds", lastSuccessMetric, "dedup_job_duration_seconds":
			continue
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// OpenCriticalSeries is reconcile's count of the critical findings open in
// the ledger, on which the page alert fires (docs/reconcile.md "Open
// findings"): reconcile writes it, and a close by a person sets it anew.
const OpenCriticalSeries = "dedup_reconcile_open_critical"

// SetSeries sets the value of series (a name with its labels, if any) in
// the existing textfile at path, atomically, and leaves every other line
// as it is: how a person's action between two runs of a job (a finding
// closed) reaches the job's alert without waiting for its next run. A
// file without the series is left alone (ok false).
func SetSeries(path, series, value string) (ok bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	lines := strings.SplitAfter(string(data), "\n")
	for i, line := range lines {
		if strings.HasPrefix(line, series+" ") {
			lines[i] = series + " " + value + "\n"
			ok = true
		}
	}
	if !ok {
		return false, nil
	}
	return true, replaceTextfile(path, strings.Join(lines, ""))
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
