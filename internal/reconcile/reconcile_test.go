package reconcile

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
	"dedup/ledger"
	"dedup/ledger/sqlite"
	"dedup/lhstd"
)

func request(t *testing.T, guid string, amount int64) []byte {
	t.Helper()
	req, err := lhstd.NewTransferRequest(guid, "MOB", "20261129093000", lhstd.Transfer{From: "11020030004001", To: "11020030004002", Amount: amount})
	assert.NilError(t, err)
	return req
}

func reply(t *testing.T, req []byte, ref string, processedAt string) []byte {
	t.Helper()
	body, err := lhstd.TransferResponseBody(ref, 99850000, processedAt)
	assert.NilError(t, err)
	return lhstd.Reply(req, dedup.CodeOK, body)
}

// Each class of docs/reconcile.md, judged from a row and its lines, in the
// order the classes are tried.
func TestClassifyTakesTheFirstClassThatApplies(t *testing.T) {
	const g = "20261129MOB000000000000000000001"
	req := request(t, g, 150000)
	line := Line{No: 2, GUID: g, Ref: "C1", From: "11020030004001", To: "11020030004002", Amount: 150000, Balance: 1, ProcessedAt: "20261129093001"}
	other := line
	other.No, other.Ref = 3, "C2"
	row := func(state dedup.State, code string, response []byte) *ledger.Row {
		return &ledger.Row{GUID: g, State: state, RspCode: code, Request: req, Response: response, Attempts: 1}
	}
	bigger := line
	bigger.Amount = 150001
	for _, tc := range []struct {
		name    string
		lines   []Line
		row     *ledger.Row
		want    dedup.Finding
		resolve bool
	}{
		{"two lines, DONE", []Line{line, other}, row(dedup.StateDone, "0000", reply(t, req, "C1", "20261129093001")), dedup.FindingAppliedTwice, false},
		{"two lines, UNKNOWN is resolved too", []Line{line, other}, row(dedup.StateUnknown, "E901", nil), dedup.FindingAppliedTwice, true},
		{"two lines, FAILED is resolved too", []Line{line, other}, row(dedup.StateFailed, "E902", nil), dedup.FindingAppliedTwice, true},
		{"two lines, no row", []Line{line, other}, nil, dedup.FindingAppliedTwice, false},
		{"one line whose ref is not the reply's", []Line{line}, row(dedup.StateDone, "0000", reply(t, req, "C9", "20261129093001")), dedup.FindingAppliedTwice, false},
		{"another amount", []Line{bigger}, row(dedup.StateDone, "0000", reply(t, req, "C1", "20261129093001")), dedup.FindingMismatch, false},
		{"another amount, FAILED is not resolved", []Line{bigger}, row(dedup.StateFailed, "E902", nil), dedup.FindingMismatch, false},
		{"no stored request", []Line{line}, &ledger.Row{GUID: g, State: dedup.StateUnknown, RspCode: "E901"}, dedup.FindingMismatch, false},
		{"FAILED", []Line{line}, row(dedup.StateFailed, "E902", nil), dedup.FindingAppliedButFailed, true},
		{"UNKNOWN", []Line{line}, row(dedup.StateUnknown, "E901", nil), dedup.FindingResolved, true},
		{"SENT", []Line{line}, row(dedup.StateSent, "", nil), dedup.FindingAppliedInFlight, false},
		{"RECEIVED", []Line{line}, row(dedup.StateReceived, "", nil), dedup.FindingAppliedInFlight, false},
		{"DONE E500", []Line{line}, row(dedup.StateDone, "E500", lhstd.Reply(req, "E500", nil)), dedup.FindingAppliedToldFailure, false},
		{"DONE B201", []Line{line}, row(dedup.StateDone, "B201", lhstd.Reply(req, "B201", nil)), dedup.FindingAppliedToldFailure, false},
		{"no row", []Line{line}, nil, dedup.FindingNotInLedger, false},
		{"DONE 0000, same ref", []Line{line}, row(dedup.StateDone, "0000", reply(t, req, "C1", "20261129093001")), dedup.FindingMatched, false},
		{"DONE 0000, reply unreadable", []Line{line}, row(dedup.StateDone, "0000", []byte("short")), dedup.FindingMismatch, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, resolve := classify(tc.lines, tc.row)
			assert.Check(t, is.Equal(got, tc.want))
			assert.Check(t, is.Equal(resolve, tc.resolve))
		})
	}
}

// changingLedger is a real ledger whose rows change right after reconcile
// reads them: change runs between GetMany and the fenced write.
type changingLedger struct {
	ledger.Ledger
	change func()
}

func (c *changingLedger) GetMany(ctx context.Context, guids []string) ([]ledger.Row, error) {
	rows, err := c.Ledger.GetMany(ctx, guids)
	if c.change != nil {
		c.change()
		c.change = nil
	}
	return rows, err
}

func journalFile(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.csv")
	assert.NilError(t, os.WriteFile(path, []byte(header+strings.Join(lines, "")), 0o600))
	return path
}

// A row that changes between reconcile's read and its write is left as
// the other writer made it, and reported as its new state is: here resolve
// got there first, so the row is matched and reconcile wrote nothing.
func TestARowChangedAfterTheReadIsLeftAlone(t *testing.T) {
	const g = "20261129MOB000000000000000000001"
	l, err := sqlite.Open(filepath.Join(t.TempDir(), "relay.db"), ledger.Options{Actor: "reconcile@test"})
	assert.NilError(t, err)
	defer l.Close()
	req := request(t, g, 150000)
	claimed, err := l.Claim(t.Context(), g, lhstd.TxTransfer, req)
	assert.NilError(t, err)
	assert.Assert(t, claimed)
	_, err = l.Finish(t.Context(), g, 1, ledger.Outcome{State: dedup.StateUnknown, RspCode: dedup.CodeUnknown})
	assert.NilError(t, err)

	resolvedByResolve := reply(t, req, "C000000000000042", "20261129093001")
	cl := &changingLedger{Ledger: l, change: func() {
		row, err := l.Get(t.Context(), g)
		assert.NilError(t, err)
		ok, err := l.Resolve(t.Context(), *row, ledger.Outcome{State: dedup.StateDone, RspCode: dedup.CodeOK, Response: resolvedByResolve})
		assert.NilError(t, err)
		assert.Assert(t, ok)
	}}
	var out bytes.Buffer
	sum, err := Run(t.Context(), cl, Config{Date: "20261129", Source: FileSource{Path: journalFile(t, good)}, Out: &out,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	assert.NilError(t, err)
	assert.Check(t, is.Equal(sum.Counts[dedup.FindingMatched], int64(1)), sum.String())
	assert.Check(t, is.Equal(sum.Counts[dedup.FindingResolved], int64(0)), sum.String())
	row, err := l.Get(t.Context(), g)
	assert.NilError(t, err)
	assert.Check(t, is.DeepEqual(row.Response, resolvedByResolve), "reconcile wrote over resolve's verdict")
	evs, err := l.Events(t.Context(), g)
	assert.NilError(t, err)
	for _, e := range evs {
		assert.Check(t, e.Action != ledger.ActionReconcile, "reconcile wrote an event for a row it did not change")
	}
}

// A dry run changes nothing, not even the record of runs, and counts what
// it would resolve.
func TestDryRunChangesNothing(t *testing.T) {
	const g = "20261129MOB000000000000000000001"
	l, err := sqlite.Open(filepath.Join(t.TempDir(), "relay.db"), ledger.Options{Actor: "reconcile@test"})
	assert.NilError(t, err)
	defer l.Close()
	_, err = l.Claim(t.Context(), g, lhstd.TxTransfer, request(t, g, 150000))
	assert.NilError(t, err)
	_, err = l.Finish(t.Context(), g, 1, ledger.Outcome{State: dedup.StateUnknown, RspCode: dedup.CodeUnknown})
	assert.NilError(t, err)
	before, err := l.Get(t.Context(), g)
	assert.NilError(t, err)
	var out bytes.Buffer
	sum, err := Run(t.Context(), l, Config{Date: "20261129", Source: FileSource{Path: journalFile(t, good)}, DryRun: true, Out: &out,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	assert.NilError(t, err)
	assert.Check(t, is.Equal(sum.WouldResolve, int64(1)))
	assert.Check(t, strings.HasSuffix(sum.String(), " would_resolve=1"), sum.String())
	after, err := l.Get(t.Context(), g)
	assert.NilError(t, err)
	assert.Check(t, is.DeepEqual(after, before))
	runs, err := l.ReconcileRuns(t.Context(), "", 10)
	assert.NilError(t, err)
	assert.Check(t, is.Len(runs, 0), "a dry run was kept")
}

// A row the journal proves applied but whose reply cannot be built (no
// stored request: another tool wrote it) is reported and left as it is,
// without a retry or an event.
func TestARowWithoutItsRequestIsReportedAndLeftAlone(t *testing.T) {
	const g = "20261129MOB000000000000000000001"
	l, err := sqlite.Open(filepath.Join(t.TempDir(), "relay.db"), ledger.Options{Actor: "reconcile@test"})
	assert.NilError(t, err)
	defer l.Close()
	_, err = l.Claim(t.Context(), g, lhstd.TxTransfer, nil)
	assert.NilError(t, err)
	_, err = l.Finish(t.Context(), g, 1, ledger.Outcome{State: dedup.StateUnknown, RspCode: dedup.CodeUnknown})
	assert.NilError(t, err)
	second := strings.Replace(good, "C000000000000042", "C000000000000043", 1)
	var out bytes.Buffer
	sum, err := Run(t.Context(), l, Config{Date: "20261129", Source: FileSource{Path: journalFile(t, good, second)}, Out: &out,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	assert.NilError(t, err)
	assert.Check(t, is.Equal(sum.Counts[dedup.FindingAppliedTwice], int64(1)), sum.String())
	assert.Check(t, is.Equal(out.String(), "applied_twice "+g+" ledger=UNKNOWN/E901 journal=C000000000000042,C000000000000043 amount=150000\n"))
	row, err := l.Get(t.Context(), g)
	assert.NilError(t, err)
	assert.Check(t, is.Equal(row.State, dedup.StateUnknown))
	evs, err := l.Events(t.Context(), g)
	assert.NilError(t, err)
	assert.Check(t, is.Len(evs, 0))
}

// The first pass keeps its keys in sorted chunks: the merge hands every key
// on in order, so a GUID whose two lines fell into different chunks is
// still seen twice in a row, and a lookup finds a key in any chunk.
func TestKeysAcrossChunksAreMergedInOrderAndFound(t *testing.T) {
	k := newKeyer()
	r := &run{keys: k}
	guids := []string{"A", "B", "C", "D", "E", "B"} // B in two chunks
	for i, g := range guids {
		if i%2 == 0 {
			r.journal = append(r.journal, nil)
		}
		r.journal[len(r.journal)-1] = append(r.journal[len(r.journal)-1], k.of(g))
	}
	for _, c := range r.journal {
		slices.SortFunc(c, compareKeys)
	}
	var merged []key
	mergeKeys(r.journal, func(x key) { merged = append(merged, x) })
	assert.Assert(t, is.Len(merged, len(guids)))
	assert.Check(t, slices.IsSortedFunc(merged, compareKeys), "the merge is not in order")
	twice := 0
	for i := 1; i < len(merged); i++ {
		if merged[i] == merged[i-1] {
			twice++
			assert.Check(t, is.Equal(merged[i], k.of("B")))
		}
	}
	assert.Check(t, is.Equal(twice, 1))
	for _, g := range guids {
		assert.Check(t, r.inJournal(g), g)
	}
	assert.Check(t, !r.inJournal("Z"))
}

// A --journal file is read again by the later passes, not copied: one that
// changed after it was checked is refused before any row is judged.
func TestAJournalFileThatChangedIsRefused(t *testing.T) {
	path := journalFile(t, good)
	r := &run{Config: Config{Date: "20261129", Source: FileSource{Path: path}}, keys: newKeyer()}
	assert.NilError(t, r.check(t.Context()))
	defer r.file.Close()
	judged := 0
	assert.NilError(t, r.lines(func(Line) error { judged++; return nil }))
	assert.Check(t, is.Equal(judged, 1))
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	assert.NilError(t, err)
	_, err = f.WriteString(strings.Replace(good, "001,C000000000000042", "002,C000000000000043", 1))
	assert.NilError(t, err)
	f.Close()
	judged = 0
	err = r.lines(func(Line) error { judged++; return nil })
	assert.Check(t, is.ErrorIs(err, errChanged))
	assert.Check(t, is.Equal(judged, 0), "lines of a changed journal were judged")
}
