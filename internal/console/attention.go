package console

// This file is the overview's first section: what needs a person, most
// urgent first, each with where to act. It judges by the alert rules'
// own numbers (deploy/prometheus/alerts.yml), written once here;
// TestConsoleAndAlertRulesAgree fails when the two disagree.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"dedup"
	"dedup/internal/settle"
	"dedup/ledger"
)

// threshold is an alert rule's number: past After, the rule named Alert
// fires (or, for a rule with a "for:", has waited that long), with its
// Severity.
type threshold struct {
	Alert    string
	After    time.Duration
	Severity string
}

// The thresholds the overview judges by: the alert rules'.
var (
	unknownTooOld   = threshold{"DedupUnknownTooOld", 15 * time.Minute, "page"}
	inFlightTooOld  = threshold{"DedupInFlightTooOld", 5 * time.Minute, "page"}
	ledgerClockSkew = threshold{"DedupLedgerClockSkew", 2500 * time.Millisecond, "page"}
	attemptsOut     = threshold{"DedupAttemptsExhausted", 0, "ticket"}
	openCritical    = threshold{"DedupReconcileCritical", 0, "page"}
	ledgerDamaged   = threshold{"DedupLedgerDamaged", 0, "page"}
	proposalWaiting = threshold{"DedupSettleProposalWaiting", 4 * time.Hour, "ticket"}
	// jobOverdue is, per job, how long after its last success its alert
	// fires (the timers run resolve and reprocess every 5 minutes, purge,
	// check and reconcile daily).
	jobOverdue = map[string]threshold{
		"resolve":   {"DedupResolveNotSucceeding", 30 * time.Minute, "page"},
		"reprocess": {"DedupReprocessNotSucceeding", 30 * time.Minute, "ticket"},
		"purge":     {"DedupPurgeNotSucceeding", 26 * time.Hour, "ticket"},
		"check":     {"DedupLedgerCheckNotSucceeding", 36 * time.Hour, "ticket"},
		"reconcile": {"DedupReconcileNotCompleted", 26 * time.Hour, "page"},
	}
	// jobNeverReported are the jobs whose alert fires when their
	// textfile has no success at all.
	jobNeverReported = map[string]threshold{
		"resolve":   {"DedupResolveNotReporting", 30 * time.Minute, "page"},
		"reconcile": {"DedupReconcileNotReporting", 26 * time.Hour, "page"},
	}
)

// proposalExpiresSoon is when a waiting proposal is said to be about to
// expire: its last 4 hours before settle.MaxAge.
const proposalExpiresSoon = settle.MaxAge - 4*time.Hour

// attentionRows bounds the rows read to count each kind of late row.
const attentionRows = 1000

// item is one thing that needs a person.
type item struct {
	ID       string // the element's id, for tests and links
	Severity string // page, ticket, or waiting (before any alert)
	Title    string
	Detail   string
	Act      string // where to act: the link's text
	Href     string
	Alert    string // the alert rule it mirrors ("" if none)
}

// attention gathers what needs a person, most urgent first: a damaged
// ledger file, transfers in doubt past their alert, open critical
// findings, a ledger clock that is off, FAILED rows out of attempts,
// proposals waiting for a second person, jobs late or never heard of.
func (s *Server) attention(ctx context.Context, skew *time.Duration, open []settle.Open, jobs jobReport) ([]item, error) {
	var items []item
	if jobs.Damaged > 0 {
		items = append(items, item{ID: "att-damaged", Severity: ledgerDamaged.Severity, Alert: ledgerDamaged.Alert,
			Title:  "The ledger file is damaged (the daily check)",
			Detail: "Stop the relay, restore the ledger from the last backup, and follow the runbook's \"The ledger file is damaged\"."})
	}
	late := func(st dedup.State, th threshold, id, act string) error {
		rows, err := s.l.SelectState(ctx, st, th.After, attentionRows)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		n := strconv.Itoa(len(rows))
		if len(rows) == attentionRows {
			n = "≥ " + n
		}
		items = append(items, item{ID: id, Severity: th.Severity, Alert: th.Alert,
			Title:  fmt.Sprintf("%s %s for over %s", n, plural(len(rows), "transfer", "transfers")+" "+string(st), fmtSpan(th.After)),
			Detail: fmt.Sprintf("The oldest, %s, has been %s for %s. %s", rows[0].GUID, st, fmtAge(rows[0].Age), act),
			Act:    "Open them", Href: fmt.Sprintf("/doubt?state=%s&min_age=%d", st, int(th.After.Seconds()))})
		return nil
	}
	if err := late(dedup.StateUnknown, unknownTooOld, "att-unknown",
		"resolve asks the core every 5 minutes; what it cannot prove, the core's team answers and two people decide."); err != nil {
		return nil, err
	}
	for _, st := range []dedup.State{dedup.StateSent, dedup.StateReceived} {
		if err := late(st, inFlightTooOld, "att-"+strings.ToLower(string(st)),
			"A relay's orphan sweep should have made it UNKNOWN: is a relay running on this ledger, and are the clocks right?"); err != nil {
			return nil, err
		}
	}
	findings, total, err := s.l.OpenFindings(ctx, 1)
	if err != nil {
		return nil, err
	}
	if total > 0 {
		f := findings[0]
		items = append(items, item{ID: "att-findings", Severity: openCritical.Severity, Alert: openCritical.Alert,
			Title: fmt.Sprintf("%d critical reconciliation %s open", total, plural(int(total), "finding", "findings")),
			Detail: fmt.Sprintf("The oldest, %s of %s: %s, open for %s. Each stays open until a person deals with it and closes it with a note.",
				f.GUID, f.Date, strings.ToLower(f.Class.Words()[:1])+f.Class.Words()[1:], fmtAge(f.Age)),
			Act: "Open the findings", Href: "/reconcile#open"})
	}
	if skew != nil && (*skew > ledgerClockSkew.After || *skew < -ledgerClockSkew.After) {
		items = append(items, item{ID: "att-clock", Severity: ledgerClockSkew.Severity, Alert: ledgerClockSkew.Alert,
			Title:  fmt.Sprintf("The ledger's clock is %+.1f s off this host's", skew.Seconds()),
			Detail: "At --max-clock-skew (5 s by default) the relay stops sweeping orphans and resolve and purge refuse to decide by age. Check chrony on this host and on every database node."})
	}
	exhausted, err := s.l.CountExhausted(ctx, s.opts.MaxAttempts)
	if err != nil {
		return nil, err
	}
	if exhausted > 0 {
		items = append(items, item{ID: "att-exhausted", Severity: attemptsOut.Severity, Alert: attemptsOut.Alert,
			Title:  fmt.Sprintf("%d FAILED %s out of attempts", exhausted, plural(exhausted, "transfer", "transfers")),
			Detail: fmt.Sprintf("At %d attempts nothing sends them again. Propose a decision on each (abandoned: the channel gets E905).", s.opts.MaxAttempts),
			Act:    "Open them", Href: "/doubt?state=FAILED&sort=attempts"})
	}
	if len(open) > 0 {
		oldest := open[0]
		it := item{ID: "att-proposals", Severity: "waiting",
			Title:  fmt.Sprintf("%d %s waiting for a second person", len(open), plural(len(open), "proposal", "proposals")),
			Detail: fmt.Sprintf("The oldest, #%d (%s, by %s), has waited %s.", oldest.ID, oldest.As, oldest.By, fmtAge(oldest.Age)),
			Act:    "Decide", Href: "/proposals"}
		if oldest.Age > proposalWaiting.After {
			it.Severity, it.Alert = proposalWaiting.Severity, proposalWaiting.Alert
		}
		if oldest.Age > proposalExpiresSoon {
			it.Detail += fmt.Sprintf(" It expires in %s: approve or reject it before then, or it must be proposed again.", fmtAge(settle.MaxAge-oldest.Age))
		}
		items = append(items, it)
	}
	items = append(items, jobs.late()...)
	return items, nil
}

// fmtSpan is a threshold as a person reads it: 15 min, 26 h, 2.5 s.
func fmtSpan(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

func plural[N int | int64](n N, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// jobReport is what the textfile directory says of the jobs.
type jobReport struct {
	Dir   string   // the directory read ("" when none is configured)
	Error string   // why it could not be read
	Files []string // the textfiles that carry a job's series
	Runs  []jobRun
	// Damaged is the daily check's count of damage (inspect --check).
	Damaged int64
}

// jobRun is a job's last success as its textfile says.
type jobRun struct {
	Job     string
	File    string
	Success string
	Ago     time.Duration
	Late    bool
}

// late returns the jobs past their alert: late, or never heard of.
func (j jobReport) late() []item {
	if j.Dir == "" || j.Error != "" {
		return nil
	}
	var items []item
	seen := map[string]bool{}
	for _, r := range j.Runs {
		seen[r.Job] = true
		if th, ok := jobOverdue[r.Job]; ok && r.Ago > th.After {
			items = append(items, item{ID: "att-job-" + r.Job, Severity: th.Severity, Alert: th.Alert,
				Title:  fmt.Sprintf("%s has not succeeded for %s", r.Job, fmtAge(r.Ago)),
				Detail: fmt.Sprintf("Its alert fires after %s. Is dedup-%s.timer enabled, and what does its log say (journalctl -u dedup-%s)?", fmtSpan(th.After), r.Job, r.Job)})
		}
	}
	names := make([]string, 0, len(jobNeverReported))
	for job := range jobNeverReported {
		names = append(names, job)
	}
	sort.Strings(names)
	for _, job := range names {
		if !seen[job] {
			th := jobNeverReported[job]
			items = append(items, item{ID: "att-job-" + job, Severity: th.Severity, Alert: th.Alert,
				Title:  fmt.Sprintf("%s has never reported a success", job),
				Detail: fmt.Sprintf("No textfile in %s has its last success. Is dedup-%s.timer enabled, and can it write its --metrics-textfile there?", j.Dir, job)})
		}
	}
	return items
}

// lastSuccessSeries and damagedSeries are the jobs' series the console
// reads.
const (
	lastSuccessSeries = "dedup_job_last_success_timestamp_seconds{"
	damagedSeries     = `dedup_job_rows{job="check",outcome="damaged"}`
)

// readJobs reads every *.prom file of the textfile directory for the
// jobs' last successes: whatever the files are named, any line of the
// series counts (the package's timers write dedup_JOB.prom).
func (s *Server) readJobs() jobReport {
	j := jobReport{Dir: s.opts.TextfileDir}
	if j.Dir == "" {
		return j
	}
	files, err := filepath.Glob(filepath.Join(j.Dir, "*.prom"))
	if err == nil && len(files) == 0 {
		if _, err = os.Stat(j.Dir); err == nil {
			j.Error = "it holds no *.prom file"
		}
	}
	if err != nil {
		j.Error = err.Error()
		return j
	}
	now := s.opts.Now()
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		found := false
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, damagedSeries+" "); ok {
				if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
					j.Damaged += n
				}
				continue
			}
			if !strings.HasPrefix(line, lastSuccessSeries) {
				continue
			}
			_, rest, ok := strings.Cut(line, `job="`)
			if !ok {
				continue
			}
			job, _, _ := strings.Cut(rest, `"`)
			fields := strings.Fields(line)
			v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err != nil || v <= 0 {
				continue
			}
			found = true
			at := time.UnixMilli(int64(v * 1000))
			r := jobRun{Job: job, File: filepath.Base(f), Success: at.UTC().Format("2006-01-02 15:04:05"), Ago: now.Sub(at)}
			if th, ok := jobOverdue[job]; ok {
				r.Late = r.Ago > th.After
			}
			j.Runs = append(j.Runs, r)
		}
		fh.Close()
		if found {
			j.Files = append(j.Files, filepath.Base(f))
		}
	}
	if len(files) > 0 && len(j.Files) == 0 {
		j.Error = "none of its *.prom files has a dedup job's last success"
	}
	sort.Slice(j.Runs, func(a, b int) bool { return j.Runs[a].Job < j.Runs[b].Job })
	return j
}

// ledgerSkew is the ledger's clock minus this host's, or nil if it could
// not be read.
func (s *Server) ledgerSkew(ctx context.Context) *time.Duration {
	now, err := s.l.Now(ctx)
	if err != nil {
		return nil
	}
	d := now.Sub(s.opts.Now())
	return &d
}

// openFindings reads the open critical findings for the pages.
func (s *Server) openFindings(ctx context.Context) ([]ledger.CriticalFinding, int64, error) {
	return s.l.OpenFindings(ctx, 200)
}
