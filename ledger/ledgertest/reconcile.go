package ledgertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
	"dedup/ledger"
)

// testResolveFromJournal: reconcile's write is fenced on the row as read,
// touches only UNKNOWN and FAILED rows, and writes its reconcile event
// with the row's former state.
func testResolveFromJournal(t *testing.T, s suite) {
	l, db := s.fresh(t)
	s.insert(t, db, guid(1), "TRF00001", "UNKNOWN", "E901", []byte("r"), nil, 1, 600)
	s.insert(t, db, guid(2), "TRF00001", "FAILED", "E902", []byte("r"), nil, 2, 600)
	s.insert(t, db, guid(3), "TRF00001", "SENT", nil, []byte("r"), nil, 1, 600)
	s.insert(t, db, guid(4), "TRF00001", "DONE", "B201", []byte("r"), []byte("x"), 1, 600)
	read := func(g string) ledger.Row {
		r, err := l.Get(ctx, g)
		assert.NilError(t, err)
		return *r
	}
	out := ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("reply"), Detail: "date=20261129 line=2 ref=C1"}

	// A row that changed after it was read is left alone.
	stale := read(guid(1))
	s.Exec(t, db, "UPDATE tx SET updated_at=NOW WHERE guid=?", guid(1))
	ok, err := l.ResolveFromJournal(ctx, stale, out)
	assert.NilError(t, err)
	assert.Assert(t, !ok, "a stale read was written over")

	for _, g := range []string{guid(1), guid(2)} {
		before := read(g)
		ok, err := l.ResolveFromJournal(ctx, before, out)
		assert.NilError(t, err)
		assert.Assert(t, ok, g)
		after := read(g)
		assert.Check(t, is.Equal(after.State, dedup.StateDone))
		assert.Check(t, is.Equal(after.RspCode, "0000"))
		assert.Check(t, is.Equal(string(after.Response), "reply"))
		assert.Check(t, is.Equal(after.Attempts, before.Attempts), "the attempts changed")
		evs, err := l.Events(ctx, g)
		assert.NilError(t, err)
		assert.Assert(t, is.Len(evs, 1))
		assert.Check(t, is.Equal(evs[0].Action, ledger.ActionReconcile))
		assert.Check(t, is.Equal(evs[0].FromState, string(before.State)))
		assert.Check(t, is.Equal(evs[0].ToState, "DONE"))
		assert.Check(t, is.Equal(evs[0].Detail, out.Detail))
		// A second time, from the same read, changes nothing.
		ok, err = l.ResolveFromJournal(ctx, before, out)
		assert.NilError(t, err)
		assert.Check(t, !ok, "resolved twice")
	}
	// SENT and DONE rows are never reconcile's to change: a read of them
	// with its state changed to UNKNOWN matches no row.
	for _, g := range []string{guid(3), guid(4)} {
		r := read(g)
		r.State = dedup.StateUnknown
		ok, err := l.ResolveFromJournal(ctx, r, out)
		assert.NilError(t, err)
		assert.Check(t, !ok, "%s changed", g)
	}
}

// testGetMany: the rows that exist, of a batch of GUIDs.
func testGetMany(t *testing.T, s suite) {
	l, db := s.fresh(t)
	for i := 1; i <= 3; i++ {
		s.insert(t, db, guid(i), "TRF00001", "DONE", "0000", []byte("r"), []byte("x"), 1, 0)
	}
	rows, err := l.GetMany(ctx, []string{guid(1), guid(3), guid(9), guid(2)})
	assert.NilError(t, err)
	got := map[string]bool{}
	for _, r := range rows {
		got[r.GUID] = true
	}
	assert.DeepEqual(t, got, map[string]bool{guid(1): true, guid(2): true, guid(3): true})
	rows, err = l.GetMany(ctx, nil)
	assert.NilError(t, err)
	assert.Check(t, is.Len(rows, 0))
}

// testDoneSlice: slices of the DONE/0000 rows finished since two days
// before the day, each row once, ties kept together.
func testDoneSlice(t *testing.T, s suite) {
	l, db := s.fresh(t)
	for i := 1; i <= 5; i++ {
		s.insert(t, db, guid(i), "TRF00001", "DONE", "0000", []byte("r"), []byte("x"), 1, 60) // one tie
	}
	s.insert(t, db, guid(6), "TRF00001", "DONE", "0000", []byte("r"), []byte("x"), 1, 30)
	s.insert(t, db, guid(7), "TRF00001", "DONE", "B201", []byte("r"), nil, 1, 30)    // not a success
	s.insert(t, db, guid(8), "TRF00001", "UNKNOWN", "E901", []byte("r"), nil, 1, 30) // not DONE
	s.insert(t, db, guid(9), "TRF00001", "DONE", "0000", []byte("r"), []byte("x"), 1, 10*24*3600)
	now, err := l.Now(ctx)
	assert.NilError(t, err)
	day := now.UTC().Format("2006-01-02")
	seen := map[string]int{}
	var after *ledger.Mark
	slices := 0
	for {
		rows, next, err := l.DoneSlice(ctx, day, after, 2)
		assert.NilError(t, err)
		for _, r := range rows {
			seen[r.GUID]++
		}
		slices++
		assert.Assert(t, slices < 10, "DoneSlice does not end")
		if next == nil {
			break
		}
		after = next
	}
	want := map[string]int{guid(1): 1, guid(2): 1, guid(3): 1, guid(4): 1, guid(5): 1, guid(6): 1}
	assert.DeepEqual(t, seen, want)
}

// testReconcileRuns: a run and its findings kept together, read back newest
// first, critical findings first.
func testReconcileRuns(t *testing.T, s suite) {
	l, _ := s.fresh(t)
	counts := map[dedup.Finding]int64{}
	for i, c := range dedup.Findings {
		counts[c] = int64(i + 1)
	}
	run := ledger.ReconcileRun{Date: "20261129", Actor: "reconcile@host", Source: "journal.csv", Lines: 7, Amount: 1050000, Counts: counts,
		Findings: []ledger.ReconcileFinding{
			{Class: dedup.FindingResolved, GUID: guid(1), State: "UNKNOWN", Code: "E901", Refs: []string{"C1"}, Amount: 100, Resolved: true},
			{Class: dedup.FindingAppliedTwice, GUID: guid(2), State: "DONE", Code: "0000", Refs: []string{"C2", "C3"}, Amount: 200},
			{Class: dedup.FindingToldSuccessUnapplied, GUID: guid(3), State: "DONE", Code: "0000", Amount: 300},
		}}
	id1, err := l.AddReconcileRun(ctx, run)
	assert.NilError(t, err)
	run.Date = "20261130"
	id2, err := l.AddReconcileRun(ctx, run)
	assert.NilError(t, err)
	assert.Assert(t, id2 > id1)

	runs, err := l.ReconcileRuns(ctx, "", 10)
	assert.NilError(t, err)
	assert.Assert(t, is.Len(runs, 2))
	assert.Check(t, is.Equal(runs[0].ID, id2), "not newest first")
	assert.Check(t, is.DeepEqual(runs[1].Counts, counts))
	assert.Check(t, is.Equal(runs[1].Lines, int64(7)))
	assert.Check(t, is.Equal(runs[1].Amount, int64(1050000)))
	assert.Check(t, is.Equal(runs[1].Actor, "reconcile@host"))
	assert.Check(t, runs[1].At != "")
	runs, err = l.ReconcileRuns(ctx, "20261129", 10)
	assert.NilError(t, err)
	assert.Assert(t, is.Len(runs, 1))
	assert.Check(t, is.Equal(runs[0].ID, id1))

	fs, err := l.ReconcileFindings(ctx, id1)
	assert.NilError(t, err)
	assert.Assert(t, is.Len(fs, 3))
	assert.Check(t, fs[0].Class.Critical() && fs[1].Class.Critical() && !fs[2].Class.Critical(), "critical findings not first: %v", fs)
	assert.Check(t, is.DeepEqual(fs[2], run.Findings[0]))
	var twice ledger.ReconcileFinding
	for _, f := range fs {
		if f.Class == dedup.FindingAppliedTwice {
			twice = f
		}
	}
	assert.Check(t, is.DeepEqual(twice.Refs, []string{"C2", "C3"}))
}

// testCriticalFindings: one finding per GUID and class across runs; a run
// that no longer sees it leaves it open; a person closes it once, with an
// event on the transfer; a later run that finds it again counts itself on
// the closed finding and does not reopen it.
func testCriticalFindings(t *testing.T, s suite) {
	l, db := s.fresh(t)
	s.insert(t, db, guid(2), "TRF00001", "DONE", "0000", []byte("r"), []byte("x"), 1, 60)
	twice := ledger.ReconcileFinding{Class: dedup.FindingAppliedTwice, GUID: guid(2), State: "DONE", Code: "0000", Refs: []string{"C2", "C3"}, Amount: 99_000_000}
	told := ledger.ReconcileFinding{Class: dedup.FindingToldSuccessUnapplied, GUID: guid(3), State: "DONE", Code: "0000", Amount: 300}
	resolved := ledger.ReconcileFinding{Class: dedup.FindingResolved, GUID: guid(1), State: "UNKNOWN", Code: "E901", Refs: []string{"C1"}, Amount: 100, Resolved: true}
	add := func(date string, fs ...ledger.ReconcileFinding) int64 {
		t.Helper()
		id, err := l.AddReconcileRun(ctx, ledger.ReconcileRun{Date: date, Actor: "reconcile@host", Source: "journal.csv", Counts: map[dedup.Finding]int64{}, Findings: fs})
		assert.NilError(t, err)
		return id
	}
	open := func() ([]ledger.CriticalFinding, int64) {
		t.Helper()
		fs, n, err := l.OpenFindings(ctx, 100)
		assert.NilError(t, err)
		return fs, n
	}
	run1 := add("20261129", resolved, twice, told)
	fs, n := open()
	assert.Assert(t, is.Len(fs, 2), "the resolved finding is not critical; the other two are")
	assert.Check(t, is.Equal(n, int64(2)))
	assert.Check(t, is.Equal(fs[0].GUID, guid(2)))
	assert.Check(t, is.Equal(fs[0].Class, dedup.FindingAppliedTwice))
	assert.Check(t, is.Equal(fs[0].Date, "20261129"))
	assert.Check(t, is.Equal(fs[0].Amount, int64(99_000_000)))
	assert.Check(t, fs[0].Open() && fs[0].OpenedAt != "" && fs[0].Age < time.Hour)
	id := fs[0].ID

	run2 := add("20261129", twice) // the same date again: the same finding
	add("20261129")                // a run that no longer sees either
	fs, n = open()
	assert.Assert(t, is.Len(fs, 2), "a later run closed or duplicated a finding")
	assert.Check(t, is.Equal(n, int64(2)))
	assert.Check(t, is.Equal(fs[0].Runs, int64(2)))
	assert.Check(t, is.Equal(fs[0].FirstRun, run1))
	assert.Check(t, is.Equal(fs[0].LastRun, run2))

	// Nothing but open findings are closed, and a refusal writes nothing.
	for _, bad := range []int64{id + 1000} {
		_, err := l.CloseFinding(ctx, bad, "settle:kim(sudo uid 1001)@host", "n/a")
		assert.Check(t, errors.Is(err, ledger.ErrRefused), "closing finding %d: %v", bad, err)
	}
	closed, err := l.CloseFinding(ctx, id, "settle:kim(sudo uid 1001)@host", "reversed in the core: REV-1; MOB told")
	assert.NilError(t, err)
	assert.Check(t, is.Equal(closed.GUID, guid(2)))
	_, err = l.CloseFinding(ctx, id, "settle:lee(sudo uid 1002)@host", "again")
	assert.Check(t, errors.Is(err, ledger.ErrRefused), "closed twice: %v", err)
	evs, err := l.Events(ctx, guid(2))
	assert.NilError(t, err)
	assert.Assert(t, is.Len(evs, 1), "one close, one event")
	assert.Check(t, is.Equal(evs[0].Action, ledger.ActionCloseFinding))
	assert.Check(t, is.Equal(evs[0].Actor, "settle:kim(sudo uid 1001)@host"))
	assert.Check(t, is.Equal(evs[0].FromState, "DONE"))
	assert.Check(t, is.Equal(evs[0].Detail, fmt.Sprintf(`{"finding":%d,"class":"applied_twice","note":"reversed in the core: REV-1; MOB told"}`, id)))
	row, err := l.Get(ctx, guid(2))
	assert.NilError(t, err)
	assert.Check(t, is.Equal(row.State, dedup.StateDone), "closing changed the row")

	add("20261129", twice) // found again: counted, not reopened
	fs, n = open()
	assert.Assert(t, is.Len(fs, 1))
	assert.Check(t, is.Equal(n, int64(1)))
	assert.Check(t, is.Equal(fs[0].GUID, guid(3)))
	f, err := l.Finding(ctx, id)
	assert.NilError(t, err)
	assert.Assert(t, f != nil)
	assert.Check(t, !f.Open(), "a later run reopened a closed finding")
	assert.Check(t, is.Equal(f.Runs, int64(3)))
	assert.Check(t, is.Equal(f.ClosedBy, "settle:kim(sudo uid 1001)@host"))
	assert.Check(t, is.Equal(f.Note, "reversed in the core: REV-1; MOB told"))
	none, err := l.Finding(ctx, id+1000)
	assert.NilError(t, err)
	assert.Check(t, none == nil)
}

// ExerciseUpgrade checks that a ledger made before critical findings were
// kept across runs gains them when a binary of this version first opens
// it: each GUID and class its kept runs found critical is an open finding,
// counted once per run, and opening it again adds none. forget turns db
// back into such a ledger (its critical_finding table dropped, and
// whatever makes the next open apply the schema again).
func ExerciseUpgrade(t *testing.T, b Backend, forget func(t *testing.T, db string)) {
	s := suite{b}
	db := s.New(t)
	l, err := s.Open(db, ledger.Options{})
	assert.NilError(t, err)
	twice := ledger.ReconcileFinding{Class: dedup.FindingAppliedTwice, GUID: guid(2), State: "DONE", Code: "0000", Amount: 200}
	told := ledger.ReconcileFinding{Class: dedup.FindingToldSuccessUnapplied, GUID: guid(3), State: "DONE", Code: "0000", Amount: 300}
	resolved := ledger.ReconcileFinding{Class: dedup.FindingResolved, GUID: guid(1), State: "UNKNOWN", Code: "E901", Amount: 100, Resolved: true}
	for _, fs := range [][]ledger.ReconcileFinding{{resolved, twice, told}, {twice}} {
		_, err := l.AddReconcileRun(ctx, ledger.ReconcileRun{Date: "20261129", Actor: "reconcile@host", Source: "journal.csv", Counts: map[dedup.Finding]int64{}, Findings: fs})
		assert.NilError(t, err)
	}
	assert.NilError(t, l.Close())
	forget(t, db)
	for i := 0; i < 2; i++ {
		l := s.open(t, db, ledger.Options{})
		fs, n, err := l.OpenFindings(ctx, 10)
		assert.NilError(t, err)
		assert.Assert(t, is.Len(fs, 2), "open %d after the upgrade", i+1)
		assert.Check(t, is.Equal(n, int64(2)))
		assert.Check(t, is.Equal(fs[0].GUID, guid(2)))
		assert.Check(t, is.Equal(fs[0].Runs, int64(2)))
		assert.Check(t, is.Equal(fs[0].Date, "20261129"))
		assert.Check(t, is.Equal(fs[1].Class, dedup.FindingToldSuccessUnapplied))
		l.Close()
	}
}
