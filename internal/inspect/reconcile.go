package inspect

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"dedup"
	"dedup/ledger"
)

// Run is one kept reconciliation as inspect and the console show it.
type Run struct {
	ID       int64            `json:"id"`
	Date     string           `json:"date"`
	At       string           `json:"at"`
	Actor    string           `json:"actor"`
	Source   string           `json:"source"`
	Lines    int64            `json:"lines"`
	Amount   int64            `json:"amount"`
	Counts   map[string]int64 `json:"counts"`
	Critical int64            `json:"critical"`
	Findings []Finding        `json:"findings,omitempty"`
}

// Finding is one kept finding of a run.
type Finding struct {
	Class    string   `json:"class"`
	Critical bool     `json:"critical"`
	GUID     string   `json:"guid"`
	Ledger   string   `json:"ledger"`
	Journal  []string `json:"journal"`
	Amount   int64    `json:"amount"`
	Resolved bool     `json:"resolved"`
}

// OpenFinding is an open critical finding as inspect and the console show
// it: a critical finding of any run that no person has closed yet.
type OpenFinding struct {
	ID       int64  `json:"finding"`
	GUID     string `json:"guid"`
	Class    string `json:"class"`
	Words    string `json:"words"`
	Action   string `json:"action"`
	Date     string `json:"date"`
	Runs     int64  `json:"runs"`
	LastRun  int64  `json:"last_run"`
	Amount   int64  `json:"amount"`
	OpenedAt string `json:"opened_at"`
	AgeS     int64  `json:"age_s"`
}

// maxOpenShown bounds the open findings listed; the count is always whole.
const maxOpenShown = 1000

// OpenFindings converts the ledger's open critical findings.
func OpenFindings(fs []ledger.CriticalFinding) []OpenFinding {
	out := make([]OpenFinding, 0, len(fs))
	for _, f := range fs {
		out = append(out, OpenFinding{ID: f.ID, GUID: f.GUID, Class: string(f.Class), Words: f.Class.Words(), Action: f.Class.Action(),
			Date: f.Date, Runs: f.Runs, LastRun: f.LastRun, Amount: f.Amount, OpenedAt: f.OpenedAt, AgeS: int64(f.Age.Seconds())})
	}
	return out
}

// WriteOpenText writes the open critical findings, oldest first, and how
// many are open in all.
func WriteOpenText(w io.Writer, open []OpenFinding, total int64) error {
	bw := bufio.NewWriter(w)
	if total == 0 {
		fmt.Fprintln(bw, "no open critical finding")
	}
	for _, f := range open {
		fmt.Fprintf(bw, "open finding %d: %s %s date=%s runs=%d amount=%d opened %s UTC\n", f.ID, f.Class, esc(f.GUID), esc(f.Date), f.Runs, f.Amount, esc(f.OpenedAt))
	}
	if total > int64(len(open)) {
		fmt.Fprintf(bw, "and %d more open findings\n", total-int64(len(open)))
	}
	if total > 0 {
		fmt.Fprintf(bw, "%d open critical findings: each stays open until a person closes it (reconcile close --finding ID --note TEXT)\n", total)
	}
	return bw.Flush()
}

// WriteOpenJSON writes one JSON object per open critical finding, one per
// line (each has "finding", its id; a run's object has "id").
func WriteOpenJSON(w io.Writer, open []OpenFinding) error {
	enc := json.NewEncoder(w)
	for _, f := range open {
		if err := enc.Encode(f); err != nil {
			return err
		}
	}
	return nil
}

// Runs converts the ledger's runs.
func Runs(rs []ledger.ReconcileRun) []Run {
	out := make([]Run, 0, len(rs))
	for _, r := range rs {
		run := Run{ID: r.ID, Date: r.Date, At: r.At, Actor: r.Actor, Source: r.Source, Lines: r.Lines, Amount: r.Amount, Counts: map[string]int64{}}
		for _, c := range dedup.Findings {
			run.Counts[string(c)] = r.Counts[c]
			if c.Critical() {
				run.Critical += r.Counts[c]
			}
		}
		out = append(out, run)
	}
	return out
}

// Findings converts a run's kept findings.
func Findings(fs []ledger.ReconcileFinding) []Finding {
	out := make([]Finding, 0, len(fs))
	for _, f := range fs {
		out = append(out, Finding{Class: string(f.Class), Critical: f.Class.Critical(), GUID: f.GUID, Ledger: f.State + "/" + f.Code,
			Journal: f.Refs, Amount: f.Amount, Resolved: f.Resolved})
	}
	return out
}

// WriteRunsText writes one line per run, newest first, with its findings
// (if loaded) under it: reconcile's own summary line and finding lines.
func WriteRunsText(w io.Writer, runs []Run) error {
	bw := bufio.NewWriter(w)
	if len(runs) == 0 {
		fmt.Fprintln(bw, "no reconciliation kept in this ledger")
	}
	for _, r := range runs {
		fmt.Fprintf(bw, "run %d at %s UTC by %s from %s: date=%s lines=%d amount=%d", r.ID, esc(r.At), esc(r.Actor), esc(r.Source), esc(r.Date), r.Lines, r.Amount)
		for _, c := range dedup.Findings {
			fmt.Fprintf(bw, " %s=%d", c, r.Counts[string(c)])
		}
		fmt.Fprintf(bw, " critical=%d\n", r.Critical)
		for _, f := range r.Findings {
			resolved := ""
			if f.Resolved {
				resolved = " resolved=DONE/0000"
			}
			fmt.Fprintf(bw, "  %s %s ledger=%s journal=%s amount=%d%s\n", f.Class, esc(f.GUID), esc(f.Ledger), esc(strings.Join(f.Journal, ",")), f.Amount, resolved)
		}
	}
	return bw.Flush()
}

// WriteRunsJSON writes one JSON object per run, one per line.
func WriteRunsJSON(w io.Writer, runs []Run) error {
	enc := json.NewEncoder(w)
	for _, r := range runs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
