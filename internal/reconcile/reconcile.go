// Package reconcile is the reconcile job's logic: it proves a business day
// against the core's own journal (docs/reconcile.md). Every GUID of the
// day gets one class of finding; UNKNOWN and FAILED rows the journal
// proves applied are resolved DONE/0000, fenced, each with its reconcile
// event; every other finding is left to a person.
//
// The journal is streamed, never held in memory: a first pass checks every
// line (nothing is written before the whole journal is known to be
// sound) and keeps a 128-bit keyed hash of each GUID; later passes read the
// journal file again (checked again, and refused if it changed), or the
// private spool file a fetched journal was copied to. The ledger is read in
// batches (GetMany) and slices (DoneSlice), each a short read, so that a
// relay serving beside it keeps its write lock and its checkpoints.
package reconcile

import (
	"bufio"
	"cmp"
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"dedup"
	"dedup/internal/job"
	"dedup/internal/metrics"
	"dedup/ledger"
	"dedup/lhstd"
)

// batchSize is how many journal lines one ledger read covers.
const batchSize = 500

// sliceSize is how many DONE rows one read of the ledger's side covers.
const sliceSize = 5000

// maxRetries bounds how often a row that changed between its read and the
// fenced write is read again and judged anew.
const maxRetries = 3

// Config is one run's settings.
type Config struct {
	Date   string // the business date, YYYYMMDD
	Source Source
	DryRun bool
	// Out receives one line per finding (JSON objects if JSON).
	Out  io.Writer
	JSON bool
	Log  *slog.Logger
}

// Summary counts one run (docs/reconcile.md "Output").
type Summary struct {
	Date         string
	Lines        int64
	Amount       int64
	Counts       map[dedup.Finding]int64
	DryRun       bool
	WouldResolve int64
	RunID        int64 // the kept run's id; 0 for a dry run
	// OpenCritical counts the critical findings open in the ledger after
	// the run, this run's and earlier runs' (-1: not known, a dry run).
	OpenCritical int64
}

// String is the summary line reconcile prints last.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "reconcile: date=%s lines=%d amount=%d", s.Date, s.Lines, s.Amount)
	for _, c := range dedup.Findings {
		fmt.Fprintf(&b, " %s=%d", c, s.Counts[c])
	}
	if s.DryRun {
		fmt.Fprintf(&b, " would_resolve=%d", s.WouldResolve)
	}
	return b.String()
}

// IsDryRun tells the job's textfile that this run proved nothing.
func (s Summary) IsDryRun() bool { return s.DryRun }

// Labels puts the date first in the JSON summary.
func (s Summary) Labels() []job.Label { return []job.Label{{Name: "date", Value: s.Date}} }

// Fields are the summary's counts in order.
func (s Summary) Fields() []job.Field {
	f := []job.Field{{Name: "lines", Value: s.Lines}, {Name: "amount", Value: s.Amount}}
	for _, c := range dedup.Findings {
		f = append(f, job.Field{Name: string(c), Value: s.Counts[c]})
	}
	if s.DryRun {
		f = append(f, job.Field{Name: "would_resolve", Value: s.WouldResolve})
	}
	return f
}

// NeedsPerson reports a critical finding: the job exits 3.
func (s Summary) NeedsPerson() bool {
	for c, n := range s.Counts {
		if n > 0 && c.Critical() {
			return true
		}
	}
	return false
}

// Textfile is reconcile's own series for the metrics textfile: every
// class (0 included) and the journal's lines.
func (s Summary) Textfile() string {
	var b strings.Builder
	b.WriteString("# HELP dedup_reconcile_findings GUIDs of each class in the last reconciliation.\n# TYPE dedup_reconcile_findings gauge\n")
	for _, c := range dedup.Findings {
		fmt.Fprintf(&b, "dedup_reconcile_findings{class=%q} %d\n", c, s.Counts[c])
	}
	b.WriteString("# HELP dedup_reconcile_journal_lines Lines of the core's journal in the last reconciliation.\n# TYPE dedup_reconcile_journal_lines gauge\n")
	fmt.Fprintf(&b, "dedup_reconcile_journal_lines %d\n", s.Lines)
	if s.OpenCritical >= 0 {
		b.WriteString("# HELP " + metrics.OpenCriticalSeries + " Critical findings open in the ledger after the last reconciliation, of every run: each stays open until a person closes it.\n# TYPE " + metrics.OpenCriticalSeries + " gauge\n")
		fmt.Fprintf(&b, "%s %d\n", metrics.OpenCriticalSeries, s.OpenCritical)
	}
	return b.String()
}

// key is a GUID's 128-bit keyed hash: two independent seeds, chosen at
// random for each run, so that two GUIDs of one run share a key with a
// probability of about 2^-128 per pair (10 million GUIDs: below 10^-24).
type key struct{ a, b uint64 }

type keyer struct{ s1, s2 maphash.Seed }

func newKeyer() keyer { return keyer{maphash.MakeSeed(), maphash.MakeSeed()} }

func (k keyer) of(guid string) key {
	return key{maphash.String(k.s1, guid), maphash.String(k.s2, guid)}
}

func compareKeys(x, y key) int {
	if c := cmp.Compare(x.a, y.a); c != 0 {
		return c
	}
	return cmp.Compare(x.b, y.b)
}

// run is one reconciliation in progress.
type run struct {
	Config
	l    ledger.Ledger
	keys keyer
	// journal holds every line's GUID key, in chunks of keyChunk (one
	// slice grown by appending would hold up to twice the keys at its
	// last doubling), each chunk sorted after the first pass.
	journal [][]key
	// file is a --journal file, kept open and read again by later passes;
	// stat is what it was when opened, so that a change is seen.
	file *os.File
	stat os.FileInfo
	// spool is the copy of a journal fetched from the core.
	spool               *os.File
	sum                 Summary
	kept                []ledger.ReconcileFinding
	critKept, otherKept int
}

// Run reconciles cfg.Date against cfg.Source on l. A journal that is not
// sound changes nothing and returns its *LineError (or the read error of a
// source that ended early). The summary so far comes with any error.
func Run(ctx context.Context, l ledger.Ledger, cfg Config) (Summary, error) {
	r := &run{Config: cfg, l: l, keys: newKeyer(),
		sum: Summary{Date: cfg.Date, DryRun: cfg.DryRun, Counts: map[dedup.Finding]int64{}, OpenCritical: -1}}
	for _, c := range dedup.Findings {
		r.sum.Counts[c] = 0
	}
	defer func() {
		if r.spool != nil {
			r.spool.Close()
			os.Remove(r.spool.Name())
		}
		if r.file != nil {
			r.file.Close()
		}
	}()
	if err := r.check(ctx); err != nil {
		// Nothing was written: the journal, not the ledger, is at fault.
		return r.sum, job.InputError{Err: err}
	}
	cfg.Log.Info("reconcile: journal checked", "date", cfg.Date, "source", cfg.Source.String(), "lines", r.sum.Lines, "amount", r.sum.Amount)
	multi, err := r.applications()
	if err != nil {
		return r.sum, err
	}
	if err := r.judgeJournal(ctx, multi); err != nil {
		return r.sum, err
	}
	if err := r.judgeLedgerSide(ctx); err != nil {
		return r.sum, err
	}
	if r.sum.Lines == 0 && r.sum.Counts[dedup.FindingToldSuccessUnapplied] == 0 {
		cfg.Log.Warn("no journal lines and no ledger rows for "+cfg.Date, "date", cfg.Date, "source", cfg.Source.String())
	}
	if !cfg.DryRun {
		ledgerRun := ledger.ReconcileRun{Date: cfg.Date, Actor: ledger.Actor("reconcile"), Source: cfg.Source.String(),
			Lines: r.sum.Lines, Amount: r.sum.Amount, Counts: r.sum.Counts, Findings: r.kept}
		id, err := l.AddReconcileRun(ctx, ledgerRun)
		if err != nil {
			return r.sum, err
		}
		r.sum.RunID = id
		cfg.Log.Info("reconcile: run kept in the ledger", "date", cfg.Date, "run", id, "findings_kept", len(ledgerRun.Findings))
		_, open, err := l.OpenFindings(ctx, 0)
		if err != nil {
			return r.sum, err
		}
		r.sum.OpenCritical = open
		if open > 0 {
			cfg.Log.Warn("reconcile: critical findings stay open until a person closes each (inspect --reconcile lists them; reconcile close --finding ID --note TEXT)",
				"open_critical", open)
		}
	}
	return r.sum, nil
}

// CheckDate refuses a date after the ledger's today, on the ledger's clock
// in this host's time zone (the business day's): no journal of it can be
// complete, and an empty one would prove a day that has not happened. It
// is a job.Check, run before the job starts.
func CheckDate(date string) job.Check {
	return func(ctx context.Context, l ledger.Ledger) error {
		now, err := l.Now(ctx)
		if err != nil {
			return fmt.Errorf("read the ledger's clock: %w", err)
		}
		if today := now.In(time.Local).Format("20060102"); date > today {
			return job.UsageError{Err: fmt.Errorf("--date %s is after the ledger's today (%s): that day has no journal yet", date, today)}
		}
		return nil
	}
}

// check is the first pass: every line read and checked, copied to the
// spool, its GUID's key kept. Nothing is written to the ledger before it
// returns nil.
func (r *run) check(ctx context.Context) error {
	src, err := r.Source.Open(ctx)
	if err != nil {
		return err
	}
	var w *bufio.Writer
	var written, synced int64
	if f, ok := src.(*os.File); ok {
		// A file is read again by the later passes: nothing to copy.
		r.file = f
		if r.stat, err = f.Stat(); err != nil {
			return fmt.Errorf("--journal: %w", err)
		}
	} else {
		defer src.Close()
		if r.spool, err = os.CreateTemp("", "dedup-reconcile-*.journal"); err != nil {
			return fmt.Errorf("spool for the journal: %w", err)
		}
		w = bufio.NewWriterSize(r.spool, 1<<16)
	}
	err = readJournal(src, r.Date, func(l Line) error {
		if n := len(r.journal); n == 0 || len(r.journal[n-1]) == keyChunk {
			// The first chunk grows with the journal (a small day does
			// not clear 16 MiB); once one is full, the day is large and
			// each next chunk is allocated whole.
			size := keyChunk
			if n == 0 {
				size = firstChunk
			}
			r.journal = append(r.journal, make([]key, 0, size))
		}
		r.journal[len(r.journal)-1] = append(r.journal[len(r.journal)-1], r.keys.of(l.GUID))
		r.sum.Lines++
		r.sum.Amount += l.Amount
		if w == nil {
			return nil
		}
		n, err := fmt.Fprintf(w, "%d,%s,%s,%s,%s,%d,%d,%s\n", l.No, l.GUID, l.Ref, l.From, l.To, l.Amount, l.Balance, l.ProcessedAt)
		if written += int64(n); err == nil && written-synced >= spoolSync {
			// Written out as it goes: a gigabyte of dirty pages flushed at
			// once would hold a serving relay's fsyncs behind it.
			if err = w.Flush(); err == nil {
				err = r.spool.Sync()
			}
			synced = written
		}
		return err
	})
	if err != nil {
		return err
	}
	if w != nil {
		if err := w.Flush(); err != nil {
			return fmt.Errorf("spool for the journal: %w", err)
		}
	}
	for _, c := range r.journal {
		slices.SortFunc(c, compareKeys)
	}
	return nil
}

// keyChunk is how many keys the first pass keeps in one allocation (16
// MiB).
const keyChunk = 1 << 20

// firstChunk is the first chunk's first capacity; append grows it.
const firstChunk = 1 << 10

// spoolSync is how much of the spool is written before it is synced.
const spoolSync = 16 << 20

// errChanged is a journal file that changed while reconcile read it.
var errChanged = errors.New("the journal file changed while reconcile read it; run it again on a journal that no one writes")

// lines reads the journal from its start again, calling each with every
// line: the --journal file, checked again and refused if it changed since
// it was opened, or the spool of a fetched one.
func (r *run) lines(each func(Line) error) error {
	if r.file != nil {
		if fi, err := r.file.Stat(); err != nil || fi.Size() != r.stat.Size() || !fi.ModTime().Equal(r.stat.ModTime()) {
			return errChanged
		}
		if _, err := r.file.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("--journal: %w", err)
		}
		n := int64(0)
		err := readJournal(r.file, r.Date, func(l Line) error { n++; return each(l) })
		var le *LineError
		if errors.As(err, &le) || (err == nil && n != r.sum.Lines) {
			return errChanged
		}
		return err
	}
	if _, err := r.spool.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("spool for the journal: %w", err)
	}
	sc := bufio.NewScanner(bufio.NewReaderSize(r.spool, 1<<16))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		no, _ := strconv.Atoi(f[0])
		amount, _ := strconv.ParseInt(f[5], 10, 64)
		balance, _ := strconv.ParseInt(f[6], 10, 64)
		if err := each(Line{No: no, GUID: f[1], Ref: f[2], From: f[3], To: f[4], Amount: amount, Balance: balance, ProcessedAt: f[7]}); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("spool for the journal: %w", err)
	}
	return nil
}

// inJournal reports whether guid has a line in the journal.
func (r *run) inJournal(guid string) bool {
	k := r.keys.of(guid)
	for _, c := range r.journal {
		if _, found := slices.BinarySearchFunc(c, k, compareKeys); found {
			return true
		}
	}
	return false
}

// applications finds the GUIDs the journal has more than one line of: the
// keys that repeat, then those GUIDs' lines, compared exactly.
func (r *run) applications() (map[string][]Line, error) {
	repeated := map[key]bool{}
	var prev key
	first := true
	mergeKeys(r.journal, func(k key) {
		if !first && k == prev {
			repeated[k] = true
		}
		prev, first = k, false
	})
	multi := map[string][]Line{}
	if len(repeated) == 0 {
		return multi, nil
	}
	err := r.lines(func(l Line) error {
		if repeated[r.keys.of(l.GUID)] {
			multi[l.GUID] = append(multi[l.GUID], l)
		}
		return nil
	})
	for g, ls := range multi {
		if len(ls) < 2 {
			delete(multi, g)
		}
	}
	return multi, err
}

// judgeJournal is the journal's side: every GUID with a line, in the
// journal's order, read from the ledger a batch at a time.
func (r *run) judgeJournal(ctx context.Context, multi map[string][]Line) error {
	done := map[string]bool{} // GUIDs of several lines already judged
	var batch [][]Line
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		guids := make([]string, len(batch))
		for i, ls := range batch {
			guids[i] = ls[0].GUID
		}
		rows, err := r.l.GetMany(ctx, guids)
		if err != nil {
			return err
		}
		byGUID := make(map[string]*ledger.Row, len(rows))
		for i := range rows {
			byGUID[rows[i].GUID] = &rows[i]
		}
		for _, ls := range batch {
			if err := r.judge(ctx, ls, byGUID[ls[0].GUID]); err != nil {
				return err
			}
		}
		batch = batch[:0]
		return nil
	}
	err := r.lines(func(l Line) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		ls := []Line{l}
		if m, ok := multi[l.GUID]; ok {
			if done[l.GUID] {
				return nil
			}
			done[l.GUID], ls = true, m
		}
		batch = append(batch, ls)
		if len(batch) == batchSize {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// classify is the class of a GUID with lines in the journal and row in
// the ledger (nil: none), and whether the row is to be resolved from the
// first line (docs/reconcile.md, "Findings": the first class that applies).
func classify(lines []Line, row *ledger.Row) (dedup.Finding, bool) {
	resolvable := row != nil && (row.State == dedup.StateUnknown || row.State == dedup.StateFailed)
	if len(lines) > 1 {
		return dedup.FindingAppliedTwice, resolvable
	}
	if row == nil {
		return dedup.FindingNotInLedger, false
	}
	l := lines[0]
	reply, readable := storedReply(row.Response)
	if row.State == dedup.StateDone && row.RspCode == dedup.CodeOK && readable && reply.Ref != l.Ref {
		return dedup.FindingAppliedTwice, false
	}
	req, err := lhstd.ParseRequest(row.Request)
	if err != nil || req.Transfer.From != l.From || req.Transfer.To != l.To || req.Transfer.Amount != l.Amount {
		return dedup.FindingMismatch, false
	}
	switch row.State {
	case dedup.StateFailed:
		return dedup.FindingAppliedButFailed, true
	case dedup.StateUnknown:
		return dedup.FindingResolved, true
	case dedup.StateSent, dedup.StateReceived:
		return dedup.FindingAppliedInFlight, false
	}
	if row.RspCode != dedup.CodeOK {
		return dedup.FindingAppliedToldFailure, false
	}
	if !readable {
		// A DONE/0000 row whose stored reply cannot be read: its
		// reference cannot be compared, so a person looks.
		return dedup.FindingMismatch, false
	}
	return dedup.FindingMatched, false
}

// storedReply reads a stored 0000 reply's body: the core's reference,
// balance and processed_at (whose date is the reply's business date).
func storedReply(reply []byte) (lhstd.TransferReply, bool) {
	if len(reply) != lhstd.HeaderLen+lhstd.TransferResponseBodyLen {
		return lhstd.TransferReply{}, false
	}
	r, err := lhstd.ParseTransferResponseBody(reply[lhstd.HeaderLen:])
	return r, err == nil
}

// judge classifies one GUID, resolves its row if the journal proves it
// applied, and reports the finding. A row that changed between its read
// and the fenced write is read again and judged as it is now.
func (r *run) judge(ctx context.Context, lines []Line, row *ledger.Row) error {
	class, resolve := classify(lines, row)
	resolved := false
	for try := 0; resolve && try < maxRetries; try++ {
		if r.DryRun {
			r.sum.WouldResolve++
			break
		}
		ok, err := r.resolve(ctx, lines[0], *row)
		if errors.Is(err, errNoRequest) {
			break // logged: left for an operator
		}
		if err != nil {
			return err
		}
		if ok {
			resolved = true
			break
		}
		if row, err = r.l.Get(ctx, lines[0].GUID); err != nil {
			return err
		}
		r.Log.Warn("reconcile: row changed since it was read; judged again as it is now", "guid", lines[0].GUID)
		class, resolve = classify(lines, row)
	}
	r.report(lines, row, class, resolved)
	return nil
}

// errNoRequest is a row the journal proves applied whose reply cannot be
// built: it has no stored request (a row another tool wrote).
var errNoRequest = errors.New("no stored request to build the reply from")

// resolve turns row DONE/0000 from journal line l, fenced on the row as
// read, with its reconcile event.
func (r *run) resolve(ctx context.Context, l Line, row ledger.Row) (bool, error) {
	if len(row.Request) < lhstd.HeaderLen {
		r.Log.Error("reconcile: the journal proves it applied, but the row has no stored request to build the reply from; left for an operator",
			"guid", row.GUID, "state", row.State, "line", l.No, "ref", l.Ref)
		return false, errNoRequest
	}
	body, err := lhstd.TransferResponseBody(l.Ref, l.Balance, l.ProcessedAt)
	if err != nil { // checked with the line: cannot happen
		return false, fmt.Errorf("reply for %s: %w", row.GUID, err)
	}
	out := ledger.Outcome{State: dedup.StateDone, RspCode: dedup.CodeOK, Response: lhstd.Reply(row.Request, dedup.CodeOK, body),
		Detail: fmt.Sprintf("journal date=%s line=%d ref=%s", r.Date, l.No, l.Ref)}
	ok, err := r.l.ResolveFromJournal(ctx, row, out)
	if err != nil || !ok {
		return ok, err
	}
	r.Log.Info("reconcile: resolved", "guid", row.GUID, "state", string(row.State)+"->DONE", "code", dedup.CodeOK,
		"attempts", row.Attempts, "line", l.No, "ref", l.Ref)
	return true, nil
}

// judgeLedgerSide finds the DONE/0000 rows of the day with no journal line:
// the channel was told the transfer succeeded, and no money moved.
func (r *run) judgeLedgerSide(ctx context.Context) error {
	day := r.Date[:4] + "-" + r.Date[4:6] + "-" + r.Date[6:]
	var after *ledger.Mark
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		rows, next, err := r.l.DoneSlice(ctx, day, after, sliceSize)
		if err != nil {
			return err
		}
		for i := range rows {
			row := &rows[i]
			if reply, ok := storedReply(row.Response); !ok || reply.ProcessedAt[:8] != r.Date || r.inJournal(row.GUID) {
				continue
			}
			r.report(nil, row, dedup.FindingToldSuccessUnapplied, false)
		}
		if next == nil {
			return nil
		}
		after = next
	}
}

// report counts a finding and prints it (all but matched and
// not_in_ledger), keeping it for the run's record.
func (r *run) report(lines []Line, row *ledger.Row, class dedup.Finding, resolved bool) {
	r.sum.Counts[class]++
	if class == dedup.FindingMatched || class == dedup.FindingNotInLedger {
		return
	}
	f := ledger.ReconcileFinding{Class: class, Resolved: resolved}
	for _, l := range lines {
		f.GUID = l.GUID
		f.Refs = append(f.Refs, l.Ref)
	}
	if len(lines) > 0 {
		f.Amount = lines[0].Amount
	}
	if row != nil {
		f.GUID, f.State, f.Code = row.GUID, string(row.State), row.RspCode
		if len(lines) == 0 {
			if req, err := lhstd.ParseRequest(row.Request); err == nil {
				f.Amount = req.Transfer.Amount
			}
		}
	}
	if class.Critical() {
		r.Log.Warn("reconcile: critical finding", "class", class, "guid", f.GUID, "ledger", f.State+"/"+f.Code, "journal", strings.Join(f.Refs, ","))
		if r.critKept < ledger.MaxKeptFindings {
			r.critKept++
			r.kept = append(r.kept, f)
		}
	} else if r.otherKept < ledger.MaxKeptFindings {
		r.otherKept++
		r.kept = append(r.kept, f)
	}
	r.print(f)
}

// print writes one finding's line on Out.
func (r *run) print(f ledger.ReconcileFinding) {
	ledgerSide := f.State + "/" + f.Code
	refs := strings.Join(f.Refs, ",")
	if !r.JSON {
		fmt.Fprintf(r.Out, "%s %s ledger=%s journal=%s amount=%d\n", f.Class, f.GUID, ledgerSide, refs, f.Amount)
		return
	}
	b, _ := json.Marshal(struct {
		Class   dedup.Finding `json:"class"`
		GUID    string        `json:"guid"`
		Ledger  string        `json:"ledger"`
		Journal string        `json:"journal"`
		Amount  int64         `json:"amount"`
	}{f.Class, f.GUID, ledgerSide, refs, f.Amount})
	fmt.Fprintf(r.Out, "%s\n", b)
}

// mergeKeys calls each with every key of the sorted chunks, in order (a
// k-way merge: equal keys of different chunks come one after the other).
func mergeKeys(chunks [][]key, each func(key)) {
	h := &cursors{}
	for _, c := range chunks {
		if len(c) > 0 {
			h.s = append(h.s, c)
		}
	}
	heap.Init(h)
	for h.Len() > 0 {
		c := h.s[0]
		each(c[0])
		if len(c) == 1 {
			heap.Pop(h)
		} else {
			h.s[0] = c[1:]
			heap.Fix(h, 0)
		}
	}
}

// cursors is a heap of sorted chunks' remainders, by their first key.
type cursors struct{ s [][]key }

func (h *cursors) Len() int           { return len(h.s) }
func (h *cursors) Less(i, j int) bool { return compareKeys(h.s[i][0], h.s[j][0]) < 0 }
func (h *cursors) Swap(i, j int)      { h.s[i], h.s[j] = h.s[j], h.s[i] }
func (h *cursors) Push(x any)         { h.s = append(h.s, x.([]key)) }
func (h *cursors) Pop() any {
	x := h.s[len(h.s)-1]
	h.s = h.s[:len(h.s)-1]
	return x
}
