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
