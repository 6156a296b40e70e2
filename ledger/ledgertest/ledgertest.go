// Package ledgertest is the ledger conformance suite: every rule of
// docs/ledger.md that a backend must keep, written once and run by each
// backend's tests (Exercise), so that SQLite and PostgreSQL are proven by
// the same cases.
package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
	"dedup/ledger"
)

// Backend is what the suite needs of one backend.
type Backend struct {
	// New returns the --db value of a fresh, empty ledger.
	New func(t *testing.T) string
	// Open opens a handle on db; the suite closes it.
	Open func(db string, opts ledger.Options) (ledger.Ledger, error)
	// Exec runs one statement on db through a connection of its own, as
	// another tool would. The suite writes it with ? placeholders, NOW for
	// the database's current time and AGO(n) for n seconds before it; the
	// backend translates those into its dialect.
	Exec func(t *testing.T, db, query string, args ...any)
	// Query returns one int64 (a count) from db.
	QueryInt func(t *testing.T, db, query string, args ...any) int64
	// Columns lists tx's columns in table order.
	Columns func(t *testing.T, db string) []string
	// HoldWriteLock takes, from another connection, the lock that a claim
	// needs, and returns the function that releases it.
	HoldWriteLock func(t *testing.T, db string) (release func())
}

var ctx = context.Background()

func guid(i int) string { return fmt.Sprintf("20261129TST%021d", i) }

type suite struct {
	Backend
}

func (s suite) open(t *testing.T, db string, opts ledger.Options) ledger.Ledger {
	t.Helper()
	l, err := s.Open(db, opts)
	assert.NilError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

func (s suite) fresh(t *testing.T) (ledger.Ledger, string) {
	t.Helper()
	db := s.New(t)
	return s.open(t, db, ledger.Options{}), db
}

// insert writes a row positionally, as operators' tools do, ageSeconds old
// on the database's clock.
func (s suite) insert(t *testing.T, db, g string, txCode any, state string, rsp, request, response any, attempts, ageSeconds int) {
	t.Helper()
	s.Exec(t, db, fmt.Sprintf("INSERT INTO tx VALUES(?, ?, ?, ?, ?, ?, ?, AGO(%d))", ageSeconds), g, txCode, state, rsp, request, response, attempts)
}

// Exercise runs the conformance suite against b.
func Exercise(t *testing.T, b Backend) {
	s := suite{b}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, suite)
	}{
		{"SchemaColumnsInContractOrder", testSchema},
		{"OpenTwiceAppliesSchemaHarmlessly", testOpenTwice},
		{"ClaimWritesSentRow", testClaim},
		{"GetMissingIsNil", testGetMissing},
		{"ConcurrentClaimsOneWinnerAcrossHandles", testConcurrentClaims},
		{"Reclaim", testReclaim},
		{"ConcurrentReclaimOneWinnerAcrossHandles", testConcurrentReclaim},
		{"FinishIsFencedOnAttempt", testFinishFenced},
		{"ResolveIsFencedOnSelection", testResolveFenced},
		{"ResolveFromJournalIsFencedAndOnlyForUnknownOrFailed", testResolveFromJournal},
		{"GetManyReturnsTheRowsThatExist", testGetMany},
		{"DoneSliceReadsEachDoneRowOfTheDayOnce", testDoneSlice},
		{"ReconcileRunsKeepTheirCountsAndFindings", testReconcileRuns},
		{"CriticalFindingStaysOpenUntilAPersonClosesIt", testCriticalFindings},
		{"SelectionEdgesAndSweep", testSelections},
		{"PurgeDeletesOnlyOldDone", testPurge},
		{"RowsWrittenByOtherTools", testOtherTools},
		{"StatsAndSelectState", testStats},
		{"StatsBoundedByItsLimit", testStatsLimit},
		{"CountSliceCountsEveryRowOnceWithTies", testCountSlice},
		{"FailedCommitFailsEveryCaller", testFailedCommit},
		{"AmbiguousCommitIsNeverAClaim", testAmbiguousCommit},
		{"CommitRefusedAfterTheFactIsNotCommittedForAnyWrite", testRefusedAfterTheFact},
		{"FailedCommitRecordsNoOutcome", testFailedFinish},
		{"ClaimFailsWhileAnotherWriterHoldsTheLock", testLocked},
		{"WritesAfterCloseFail", testClosed},
		{"EveryConcurrentWriteIsReportedAsItCommitted", testGroupCommit},
		{"ReclaimIsJudgedByTheRowItReturns", testReclaimOddAttempts},
		{"ReclaimReturnsTheRequestAnotherHolderStored", testReclaimReturnsStored},
		{"ConfirmClaimReadsHolderAndAgeOnTheLedgersClock", testConfirmClaim},
		{"ConcurrentConfirmationsEachGetTheirOwnAnswer", testConcurrentConfirmations},
		{"NowIsTheLedgersClock", testNow},
		{"EveryChangeButTheFirstSendHasItsEvent", testEventsOnEveryChange},
		{"AChangeAndItsEventCommitTogether", testEventsCommitWithTheirChange},
		{"DecisionsAreFencedAndOneApprovalWins", testDecisions},
		{"PurgeEventsDeletesOnlyOldOnes", testPurgeEvents},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, s)
		})
	}
}

func testSchema(t *testing.T, s suite) {
	_, db := s.fresh(t)
	assert.DeepEqual(t, s.Columns(t, db), []string{"guid", "tx_code", "state", "rsp_code", "request", "response", "attempts", "updated_at"})
	// Defaults fill the columns a tool leaves out.
	s.Exec(t, db, "INSERT INTO tx(guid,state) VALUES('g1','DONE')")
	assert.Equal(t, s.QueryInt(t, db, "SELECT attempts FROM tx WHERE guid='g1'"), int64(0))
}

func testOpenTwice(t *testing.T, s suite) {
	l, db := s.fresh(t)
	_, err := l.Claim(ctx, guid(1), "TRF00001", []byte("req"))
	assert.NilError(t, err)
	l2 := s.open(t, db, ledger.Options{})
	r, err := l2.Get(ctx, guid(1))
	assert.NilError(t, err)
	assert.Equal(t, r.State, dedup.StateSent)
}

func testClaim(t *testing.T, s suite) {
	l, _ := s.fresh(t)
	ok, err := l.Claim(ctx, guid(1), "TRF00001", []byte("request-bytes"))
	assert.NilError(t, err)
	assert.Assert(t, ok)
	r, err := l.Get(ctx, guid(1))
	assert.NilError(t, err)
	assert.Check(t, is.Equal(r.State, dedup.StateSent))
	assert.Check(t, is.Equal(r.TxCode, "TRF00001"))
	assert.Check(t, is.Equal(r.RspCode, ""))
	assert.Check(t, is.Equal(string(r.Request), "request-bytes"))
	assert.Check(t, r.Response == nil)
	assert.Check(t, is.Equal(r.Attempts, 1))
	assert.Check(t, r.UpdatedAt != "")
	assert.Check(t, r.Age >= 0 && r.Age < time.Minute, "age %v", r.Age)

	ok, err = l.Claim(ctx, guid(1), "TRF00001", []byte("other"))
	assert.NilError(t, err)
	assert.Assert(t, !ok, "a second claim of the same GUID won")
	r, _ = l.Get(ctx, guid(1))
	assert.Equal(t, string(r.Request), "request-bytes", "a lost claim changed the row")
}

func testGetMissing(t *testing.T, s suite) {
	l, _ := s.fresh(t)
	r, err := l.Get(ctx, guid(9))
	assert.NilError(t, err)
	assert.Assert(t, r == nil)
}

// testConcurrentClaims claims the same GUIDs from many goroutines through
// two independent handles, as two relay processes would: each GUID must
// have exactly one winner.
func testConcurrentClaims(t *testing.T, s suite) {
	l1, db := s.fresh(t)
	l2 := s.open(t, db, ledger.Options{})
	const guids, perGUID = 40, 16
	var wins [guids]atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < guids; g++ {
		for k := 0; k < perGUID; k++ {
			wg.Add(1)
			l := l1
			if k%2 == 1 {
				l = l2
			}
			go func() {
				defer wg.Done()
				<-start
				ok, err := l.Claim(ctx, guid(g), "TRF00001", []byte("r"))
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if ok {
					wins[g].Add(1)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	for g := range wins {
		assert.Check(t, is.Equal(wins[g].Load(), int32(1)), "guid %d", g)
	}
}

func testReclaim(t *testing.T, s suite) {
	l, db := s.fresh(t)
	orig := []byte("orig")
	s.insert(t, db, guid(1), "TRF00001", "FAILED", "E902", orig, nil, 1, 0)
	s.insert(t, db, guid(2), "TRF00001", "FAILED", "E999", orig, nil, 1, 0)
	s.insert(t, db, guid(3), nil, "FAILED", "E902", nil, nil, 1, 0)
	s.insert(t, db, guid(4), "TRF00001", "FAILED", "E902", orig, nil, 3, 0)
	s.insert(t, db, guid(5), "TRF00001", "FAILED", "E902", orig, nil, 2, 0)
	for _, st := range []string{"UNKNOWN", "DONE", "SENT", "RECEIVED"} {
		s.insert(t, db, "x"+st, "TRF00001", st, "E902", orig, nil, 1, 0)
	}
	for _, tc := range []struct {
		name        string
		guid        string
		req         []byte
		max         int
		wantAttempt int
		wantReq     string
	}{
		{"FAILED E902 is reclaimed, stored request kept", guid(1), []byte("new"), 0, 2, "orig"},
		{"FAILED with another rsp_code is not", guid(2), []byte("new"), 0, 0, "orig"},
		{"NULL request takes the received one", guid(3), []byte("new"), 0, 2, "new"},
		{"attempt limit holds at the limit", guid(4), nil, 3, 0, "orig"},
		{"attempt limit admits below it", guid(5), nil, 3, 3, "orig"},
		{"UNKNOWN is never reclaimed", "xUNKNOWN", nil, 0, 0, "orig"},
		{"DONE is never reclaimed", "xDONE", nil, 0, 0, "orig"},
		{"SENT is never reclaimed", "xSENT", nil, 0, 0, "orig"},
		{"RECEIVED is never reclaimed", "xRECEIVED", nil, 0, 0, "orig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempt, stored, ok, err := l.Reclaim(ctx, tc.guid, tc.req, tc.max)
			assert.NilError(t, err)
			assert.Equal(t, ok, tc.wantAttempt > 0)
			assert.Equal(t, attempt, tc.wantAttempt)
			if ok {
				assert.Equal(t, string(stored), tc.wantReq, "the reclaim did not return the request the row holds")
			}
			r, err := l.Get(ctx, tc.guid)
			assert.NilError(t, err)
			assert.Equal(t, string(r.Request), tc.wantReq)
			if ok {
				assert.Equal(t, r.State, dedup.StateSent)
				assert.Equal(t, r.RspCode, "")
				assert.Equal(t, r.Attempts, tc.wantAttempt)
			}
		})
	}
}

func testConcurrentReclaim(t *testing.T, s suite) {
	l1, db := s.fresh(t)
	l2 := s.open(t, db, ledger.Options{})
	s.insert(t, db, guid(1), "TRF00001", "FAILED", "E902", []byte("orig"), nil, 1, 0)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for k := 0; k < 16; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := l1
			if k%2 == 0 {
				l = l2
			}
			_, _, ok, err := l.Reclaim(ctx, guid(1), nil, 3)
			assert.Check(t, err)
			if ok {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, wins.Load(), int32(1))
}

func testFinishFenced(t *testing.T, s suite) {
	l, db := s.fresh(t)
	_, err := l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.NilError(t, err)

	ok, err := l.Finish(ctx, guid(1), 2, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
	assert.NilError(t, err)
	assert.Assert(t, !ok, "a holder with another attempt number finished the row")

	// The row is swept, resolved and reclaimed by someone else: the stale
	// holder of attempt 1 must not overwrite attempt 2.
	s.Exec(t, db, "UPDATE tx SET state='SENT', attempts=2 WHERE guid=?", guid(1))
	ok, err = l.Finish(ctx, guid(1), 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("stale")})
	assert.NilError(t, err)
	assert.Assert(t, !ok)

	ok, err = l.Finish(ctx, guid(1), 2, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("mine")})
	assert.NilError(t, err)
	assert.Assert(t, ok)
	r, _ := l.Get(ctx, guid(1))
	assert.Equal(t, string(r.Response), "mine")
	assert.Equal(t, r.State, dedup.StateDone)

	// A finished row is not finished twice.
	ok, err = l.Finish(ctx, guid(1), 2, ledger.Outcome{State: dedup.StateUnknown, RspCode: "E901"})
	assert.NilError(t, err)
	assert.Assert(t, !ok)
}

func testResolveFenced(t *testing.T, s suite) {
	l, db := s.fresh(t)
	s.insert(t, db, guid(1), "TRF00001", "UNKNOWN", "E901", []byte("r"), nil, 1, 600)
	rows, err := l.SelectUnknown(ctx, 300*time.Second)
	assert.NilError(t, err)
	assert.Equal(t, len(rows), 1)
	sel := rows[0]

	// Meanwhile the row went through a reprocess cycle and is UNKNOWN again
	// with another attempt: the stale selection must not settle it.
	s.Exec(t, db, "UPDATE tx SET attempts=2, updated_at=NOW WHERE guid=?", guid(1))
	ok, err := l.Resolve(ctx, sel, ledger.Outcome{State: dedup.StateFailed, RspCode: "E902"})
	assert.NilError(t, err)
	assert.Assert(t, !ok)
	// Same attempts, only updated_at changed: still fenced.
	s.Exec(t, db, "UPDATE tx SET attempts=1 WHERE guid=?", guid(1))
	ok, err = l.Resolve(ctx, sel, ledger.Outcome{State: dedup.StateFailed, RspCode: "E902"})
	assert.NilError(t, err)
	assert.Assert(t, !ok)

	fresh, err := l.Get(ctx, guid(1))
	assert.NilError(t, err)
	ok, err = l.Resolve(ctx, *fresh, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("reply")})
	assert.NilError(t, err)
	assert.Assert(t, ok)
	r, _ := l.Get(ctx, guid(1))
	assert.Equal(t, r.State, dedup.StateDone)
	assert.Equal(t, r.Attempts, 1, "settling changed attempts")
	// A resolved row is not resolved again by the same selection.
	ok, err = l.Resolve(ctx, *fresh, ledger.Outcome{State: dedup.StateFailed, RspCode: "E902"})
	assert.NilError(t, err)
	assert.Assert(t, !ok)
}

func names(rows []ledger.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.GUID)
	}
	return out
}

// testSelections proves the edges of every selection with rows whose ages
// are set by SQL on the database's own clock: resolve's <= admits a row
// exactly --min-age old, the sweep's < needs an age above --orphan-after.
func testSelections(t *testing.T, s suite) {
	l, db := s.fresh(t)
	ins := func(g, state string, rsp any, attempts, age int) {
		s.insert(t, db, g, "TRF00001", state, rsp, []byte("r"), nil, attempts, age)
	}
	ins("unknown-at-limit", "UNKNOWN", "E901", 1, 300)
	ins("unknown-old", "UNKNOWN", "E901", 1, 600)
	ins("unknown-young", "UNKNOWN", "E901", 1, 240) // a minute younger: a slow test must not age it past the edge
	ins("failed-1", "FAILED", "E902", 1, 1)
	ins("failed-2", "FAILED", "E902", 2, 1)
	ins("failed-3", "FAILED", "E902", 3, 1)
	ins("failed-4", "FAILED", "E902", 4, 1)
	ins("failed-other", "FAILED", "E999", 1, 1)
	ins("sent-old", "SENT", nil, 1, 62)
	ins("received-old", "RECEIVED", nil, 0, 62)
	ins("sent-young", "SENT", nil, 1, 30)
	ins("unknown-ancient", "UNKNOWN", "E901", 1, 30*86400)

	u, err := l.SelectUnknown(ctx, 300*time.Second)
	assert.NilError(t, err)
	assert.DeepEqual(t, names(u), []string{"unknown-ancient", "unknown-old", "unknown-at-limit"})
	for _, r := range u {
		assert.Check(t, r.Age >= 300*time.Second, "%s age %v", r.GUID, r.Age)
	}
	u0, err := l.SelectUnknown(ctx, 0)
	assert.NilError(t, err)
	assert.Equal(t, len(u0), 4, "--min-age 0 selects every UNKNOWN row")

	f, err := l.SelectFailed(ctx, 3)
	assert.NilError(t, err)
	assert.DeepEqual(t, names(f), []string{"failed-1", "failed-2"})
	n, err := l.CountExhausted(ctx, 3)
	assert.NilError(t, err)
	assert.Equal(t, n, 2)

	swept, err := l.SweepOrphans(ctx, 60*time.Second)
	assert.NilError(t, err)
	assert.Equal(t, swept, int64(2))
	for g, want := range map[string]dedup.State{"sent-old": dedup.StateUnknown, "received-old": dedup.StateUnknown, "sent-young": dedup.StateSent} {
		r, _ := l.Get(ctx, g)
		assert.Check(t, is.Equal(r.State, want), g)
		if want == dedup.StateUnknown {
			assert.Check(t, is.Equal(r.RspCode, "E901"), g)
			assert.Check(t, r.Response == nil, g)
			assert.Check(t, r.Age < 60*time.Second, "%s: the sweep did not renew updated_at", g)
		}
	}
	r, _ := l.Get(ctx, "sent-old")
	assert.Equal(t, r.Attempts, 1, "the sweep changed attempts")
}

func testPurge(t *testing.T, s suite) {
	l, db := s.fresh(t)
	day := 86400
	for _, st := range []string{"DONE", "UNKNOWN", "FAILED", "SENT", "RECEIVED"} {
		s.insert(t, db, st+"-ancient", "TRF00001", st, "0000", []byte("r"), nil, 1, 30*day)
	}
	s.insert(t, db, "done-at-limit", "TRF00001", "DONE", "0000", []byte("r"), []byte("x"), 1, 7*day)
	s.insert(t, db, "done-young", "TRF00001", "DONE", "0000", []byte("r"), []byte("x"), 1, 7*day-3600) // an hour younger: a slow test must not age it past the edge
	for i := 0; i < 25; i++ {
		s.insert(t, db, fmt.Sprintf("done-old-%02d", i), "TRF00001", "DONE", "0000", []byte("r"), []byte("x"), 1, 8*day)
	}
	n, err := l.CountPurgeable(ctx, 7)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(27))
	var total int64
	for {
		d, err := l.PurgeBatch(ctx, 7, 10)
		assert.NilError(t, err)
		assert.Assert(t, d <= 10, "a batch deleted %d rows, above its limit", d)
		total += d
		if d == 0 {
			break
		}
	}
	assert.Equal(t, total, int64(27))
	assert.Equal(t, s.QueryInt(t, db, "SELECT count(*) FROM tx"), int64(5))
	for _, g := range []string{"UNKNOWN-ancient", "FAILED-ancient", "SENT-ancient", "RECEIVED-ancient", "done-young"} {
		r, err := l.Get(ctx, g)
		assert.NilError(t, err)
		assert.Check(t, r != nil, "%s was purged", g)
	}
	// --days 0 deletes every DONE row, and nothing else.
	d, err := l.PurgeBatch(ctx, 0, 100)
	assert.NilError(t, err)
	assert.Equal(t, d, int64(1))
	assert.Equal(t, s.QueryInt(t, db, "SELECT count(*) FROM tx"), int64(4))
}

// testOtherTools: rows inserted positionally with NULLs where tools leave
// them are read, selected and reclaimed like the relay's own.
func testOtherTools(t *testing.T, s suite) {
	l, db := s.fresh(t)
	s.insert(t, db, guid(1), nil, "DONE", nil, nil, nil, 0, 5)
	s.insert(t, db, guid(2), nil, "RECEIVED", nil, nil, nil, 0, 120)
	s.insert(t, db, guid(3), nil, "UNKNOWN", "E901", nil, nil, 0, 600)
	r, err := l.Get(ctx, guid(1))
	assert.NilError(t, err)
	assert.Check(t, is.Equal(r.TxCode, ""))
	assert.Check(t, is.Equal(r.RspCode, ""))
	assert.Check(t, r.Request == nil && r.Response == nil)
	assert.Check(t, r.Age >= 5*time.Second, "age %v", r.Age)
	n, err := l.SweepOrphans(ctx, 60*time.Second)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(1))
	u, err := l.SelectUnknown(ctx, 300*time.Second)
	assert.NilError(t, err)
	assert.DeepEqual(t, names(u), []string{guid(3)})
	ok, err := l.Resolve(ctx, u[0], ledger.Outcome{State: dedup.StateFailed, RspCode: "E902"})
	assert.NilError(t, err)
	assert.Assert(t, ok)
	attempt, _, ok, err := l.Reclaim(ctx, guid(3), []byte("received"), 0)
	assert.NilError(t, err)
	assert.Assert(t, ok)
	assert.Equal(t, attempt, 1)
	r, _ = l.Get(ctx, guid(3))
	assert.Equal(t, string(r.Request), "received", "a reclaimed row without a request did not store the received one")
}

func testStats(t *testing.T, s suite) {
	l, db := s.fresh(t)
	s.insert(t, db, "u1", "TRF00001", "UNKNOWN", "E901", nil, nil, 1, 900)
	s.insert(t, db, "u2", "TRF00001", "UNKNOWN", "E901", nil, nil, 1, 10)
	s.insert(t, db, "d1", "TRF00001", "DONE", "0000", nil, nil, 1, 5)
	st, err := l.Stats(ctx, 0)
	assert.NilError(t, err)
	got := map[dedup.State]ledger.StateStat{}
	for _, x := range st {
		got[x.State] = x
	}
	assert.Equal(t, len(st), len(ledger.States))
	assert.Equal(t, got[dedup.StateUnknown].Rows, int64(2))
	assert.Assert(t, got[dedup.StateUnknown].Oldest >= 900*time.Second && got[dedup.StateUnknown].Oldest < 960*time.Second, "%v", got[dedup.StateUnknown].Oldest)
	assert.Equal(t, got[dedup.StateDone].Rows, int64(1))
	assert.Equal(t, got[dedup.StateSent].Rows, int64(0))
	assert.Equal(t, got[dedup.StateSent].Oldest, time.Duration(0))

	rows, err := l.SelectState(ctx, dedup.StateUnknown, 600*time.Second, 0)
	assert.NilError(t, err)
	assert.DeepEqual(t, names(rows), []string{"u1"})
	rows, err = l.SelectState(ctx, dedup.StateUnknown, 0, 1)
	assert.NilError(t, err)
	assert.DeepEqual(t, names(rows), []string{"u1"})
}

// testStatsLimit: a bounded count stops at its limit and says so, and the
// oldest age is still the state's oldest row.
func testStatsLimit(t *testing.T, s suite) {
	l, db := s.fresh(t)
	for i, age := range []int{30, 900, 10} {
		s.insert(t, db, fmt.Sprintf("u%d", i), "TRF00001", "UNKNOWN", "E901", nil, nil, 1, age)
	}
	s.insert(t, db, "d1", "TRF00001", "DONE", "0000", nil, nil, 1, 5)
	for _, tc := range []struct {
		limit   int64
		rows    int64
		atLeast bool
	}{{0, 3, false}, {2, 2, true}, {3, 3, true}, {4, 3, false}} {
		st, err := l.Stats(ctx, tc.limit)
		assert.NilError(t, err)
		got := map[dedup.State]ledger.StateStat{}
		for _, x := range st {
			got[x.State] = x
		}
		u := got[dedup.StateUnknown]
		assert.Check(t, is.Equal(u.Rows, tc.rows), "limit %d", tc.limit)
		assert.Check(t, is.Equal(u.AtLeast, tc.atLeast), "limit %d", tc.limit)
		assert.Check(t, u.Oldest >= 900*time.Second && u.Oldest < 960*time.Second, "limit %d: the oldest age %v is not the oldest row's", tc.limit, u.Oldest)
		assert.Check(t, is.Equal(got[dedup.StateDone].Rows, int64(1)))
		assert.Check(t, !got[dedup.StateDone].AtLeast || tc.limit == 1)
	}
}

// testCountSlice: slices of every size sum to the state's rows, rows that
// share an updated_at are counted once, other states never, and the last
// slice says so.
func testCountSlice(t *testing.T, s suite) {
	l, db := s.fresh(t)
	ages := []int{500, 400, 400, 400, 300, 200, 200, 100, 50, 10}
	for i, age := range ages {
		s.insert(t, db, fmt.Sprintf("d%02d", i), "TRF00001", "DONE", "0000", nil, nil, 1, age)
	}
	s.insert(t, db, "u1", "TRF00001", "UNKNOWN", "E901", nil, nil, 1, 450)
	s.insert(t, db, "f1", "TRF00001", "FAILED", "E902", nil, nil, 1, 350)
	for _, limit := range []int{1, 2, 3, 4, 10, 11, 1000} {
		var total int64
		var after *ledger.Mark
		slices := 0
		for {
			n, next, err := l.CountSlice(ctx, dedup.StateDone, after, limit)
			assert.NilError(t, err)
			total += n
			slices++
			assert.Assert(t, slices <= len(ages)+1, "limit %d: the slices do not end", limit)
			if next == nil {
				break
			}
			assert.Check(t, n >= int64(limit), "limit %d: a slice that is not the last counted %d rows", limit, n)
			after = next
		}
		assert.Check(t, is.Equal(total, int64(len(ages))), "limit %d: the slices summed to %d DONE rows", limit, total)
	}
	n, next, err := l.CountSlice(ctx, dedup.StateReceived, nil, 10)
	assert.NilError(t, err)
	assert.Check(t, is.Equal(n, int64(0)))
	assert.Check(t, next == nil)
}

var errInjected = errors.New("injected commit failure")

// testFailedCommit makes commits fail: no caller may believe its claim
// happened, and no row may exist.
func testFailedCommit(t *testing.T, s suite) {
	db := s.New(t)
	var failing atomic.Bool
	failing.Store(true)
	l := s.open(t, db, ledger.Options{Faults: &ledger.Faults{BeforeCommit: func() error {
		if failing.Load() {
			return errInjected
		}
		return nil
	}}})
	var wg sync.WaitGroup
	var succeeded atomic.Int32
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := l.Claim(ctx, guid(i), "TRF00001", []byte("r"))
			if err == nil || ok {
				succeeded.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, succeeded.Load(), int32(0), "a caller believed a failed commit happened")
	assert.Equal(t, s.QueryInt(t, db, "SELECT count(*) FROM tx"), int64(0), "rows exist after failed commits")
	failing.Store(false)
	ok, err := l.Claim(ctx, guid(0), "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok, "the ledger did not recover after a failed commit")
}

// testAmbiguousCommit: a claim whose commit happened but whose
// acknowledgement was lost reports an error (the caller sends nothing); the
// committed row then answers every later claim as taken, and the sweep
// hands it to resolve: it is never claimed twice.
func testAmbiguousCommit(t *testing.T, s suite) {
	db := s.New(t)
	var failing atomic.Bool
	failing.Store(true)
	l := s.open(t, db, ledger.Options{Faults: &ledger.Faults{AfterCommit: func() error {
		if failing.Load() {
			return errInjected
		}
		return nil
	}}})
	ok, err := l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.Assert(t, err != nil && !ok, "an unacknowledged claim was reported as mine")
	failing.Store(false)
	ok, err = l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, !ok, "a GUID whose claim committed was claimed again")
	s.Exec(t, db, "UPDATE tx SET updated_at=AGO(120) WHERE guid=?", guid(1))
	n, err := l.SweepOrphans(ctx, 60*time.Second)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(1))
	r, _ := l.Get(ctx, guid(1))
	assert.Equal(t, r.State, dedup.StateUnknown)
}

// testRefusedAfterTheFact: for every conditional write (claim, reclaim,
// finish, settle), a commit that happened but is then refused (as a
// PostgreSQL COMMIT acknowledged without its synchronous standby is) is
// reported as an error, never as "mine" or "recorded": the caller acts as
// if it had not happened.
func testRefusedAfterTheFact(t *testing.T, s suite) {
	db := s.New(t)
	var refusing atomic.Bool
	l := s.open(t, db, ledger.Options{Faults: &ledger.Faults{AfterCommit: func() error {
		if refusing.Load() {
			return errInjected
		}
		return nil
	}}})
	s.insert(t, db, guid(2), "TRF00001", "FAILED", "E902", []byte("r"), nil, 1, 10)
	s.insert(t, db, guid(3), "TRF00001", "SENT", nil, []byte("r"), nil, 1, 10)
	s.insert(t, db, guid(4), "TRF00001", "UNKNOWN", "E901", []byte("r"), nil, 1, 600)
	unknown, err := l.SelectUnknown(ctx, time.Minute)
	assert.NilError(t, err)
	assert.Equal(t, len(unknown), 1)
	refusing.Store(true)
	ok, err := l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.Check(t, err != nil && !ok, "claim: %v %v", ok, err)
	_, _, ok, err = l.Reclaim(ctx, guid(2), nil, 3)
	assert.Check(t, err != nil && !ok, "reclaim: %v %v", ok, err)
	ok, err = l.Finish(ctx, guid(3), 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
	assert.Check(t, err != nil && !ok, "finish: %v %v", ok, err)
	ok, err = l.Resolve(ctx, unknown[0], ledger.Outcome{State: dedup.StateFailed, RspCode: "E902"})
	assert.Check(t, err != nil && !ok, "settle: %v %v", ok, err)
}

// testFailedFinish: an outcome whose commit fails is not recorded (the
// holder answers by rule 10); the row stays SENT, and a later finish of the
// same claim records it exactly once.
func testFailedFinish(t *testing.T, s suite) {
	db := s.New(t)
	var failing atomic.Bool
	l := s.open(t, db, ledger.Options{Faults: &ledger.Faults{BeforeCommit: func() error {
		if failing.Load() {
			return errInjected
		}
		return nil
	}}})
	ok, err := l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok)
	failing.Store(true)
	recorded, err := l.Finish(ctx, guid(1), 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
	failing.Store(false)
	assert.Assert(t, err != nil && !recorded)
	r, _ := l.Get(ctx, guid(1))
	assert.Equal(t, r.State, dedup.StateSent)
	recorded, err = l.Finish(ctx, guid(1), 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
	assert.NilError(t, err)
	assert.Assert(t, recorded)
	recorded, err = l.Finish(ctx, guid(1), 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("y")})
	assert.NilError(t, err)
	assert.Assert(t, !recorded, "an outcome was recorded twice")
}

// testLocked holds the write lock from another connection past the busy
// timeout: the claim must fail with ErrBusy (the relay answers E902 and
// sends nothing) within a bounded time and leave no row.
func testLocked(t *testing.T, s suite) {
	l, db := s.fresh(t)
	release := s.HoldWriteLock(t, db)
	_, err := l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.Assert(t, errors.Is(err, ledger.ErrBusy), "got %v", err)
	release()
	r, err := l.Get(ctx, guid(1))
	assert.NilError(t, err)
	assert.Assert(t, r == nil)
	ok, err := l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok, "the claim did not succeed once the lock was released")
}

func testClosed(t *testing.T, s suite) {
	db := s.New(t)
	l, err := s.Open(db, ledger.Options{})
	assert.NilError(t, err)
	assert.NilError(t, l.Close())
	_, err = l.Claim(ctx, guid(1), "TRF00001", nil)
	assert.Assert(t, errors.Is(err, ledger.ErrClosed), "got %v", err)
}

// testGroupCommit drives one handle with many concurrent writers while
// every third commit fails and, at the end, Close races with the last
// writes. Whatever batches form, each caller's answer must match the
// database: a claim reported taken has its row, a claim reported failed has
// none, an outcome reported recorded is there, and Close neither loses a
// queued write nor leaves a caller waiting.
func testGroupCommit(t *testing.T, s suite) {
	db := s.New(t)
	var commits, acknowledged atomic.Int64
	l, err := s.Open(db, ledger.Options{
		Faults: &ledger.Faults{BeforeCommit: func() error {
			if commits.Add(1)%3 == 0 {
				return errInjected
			}
			return nil
		}},
		OnCommit: func(_ time.Duration, writes int) { acknowledged.Add(int64(writes)) },
	})
	assert.NilError(t, err)

	const writers, each = 24, 12
	type result struct {
		claimed, claimErr, finished bool
	}
	results := make([][]result, writers)
	var succeeded atomic.Int64
	var wg sync.WaitGroup
	closing, halfway := make(chan struct{}), make(chan struct{})
	var progress atomic.Int64
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if w%2 == 1 && i == each/2 {
					<-closing // half the writers go on while Close runs
				}
				g := guid(w*1000 + i)
				var r result
				ok, err := l.Claim(ctx, g, "TRF00001", []byte("r"))
				r.claimed, r.claimErr = ok && err == nil, err != nil
				if r.claimed {
					succeeded.Add(1)
					done, err := l.Finish(ctx, g, 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
					r.finished = done && err == nil
					if r.finished {
						succeeded.Add(1)
					}
				}
				results[w] = append(results[w], r)
				if progress.Add(1) == writers*each/4 {
					close(halfway)
				}
			}
		}()
	}
	<-halfway // batches have formed; Close now races with the rest
	close(closing)
	assert.NilError(t, l.Close())
	wg.Wait()

	var finished, unfinished, failed []any
	for w := range results {
		assert.Equal(t, len(results[w]), each)
		for i, r := range results[w] {
			g := guid(w*1000 + i)
			switch {
			case r.finished:
				finished = append(finished, g)
			case r.claimed:
				unfinished = append(unfinished, g)
			case r.claimErr:
				failed = append(failed, g)
			default:
				t.Errorf("%s: a fresh GUID was reported as already claimed", g)
			}
		}
	}
	count := func(set []any, cond string) int64 {
		if len(set) == 0 {
			return 0
		}
		in := strings.TrimSuffix(strings.Repeat("?,", len(set)), ",")
		return s.QueryInt(t, db, "SELECT count(*) FROM tx WHERE guid IN ("+in+") AND "+cond, set...)
	}
	assert.Equal(t, count(finished, "state='DONE'"), int64(len(finished)), "outcomes reported recorded are not all DONE")
	assert.Equal(t, count(unfinished, "state='SENT'"), int64(len(unfinished)), "claims reported taken (outcome failed) are not all SENT")
	assert.Equal(t, count(failed, "1=1"), int64(0), "claims reported failed have rows")
	sawFailure := len(failed) > 0
	assert.Assert(t, sawFailure, "no write failed: neither the injected faults nor Close were exercised")
	assert.Equal(t, acknowledged.Load(), succeeded.Load(), "writes reported committed by OnCommit differ from the callers' successes")
}

// testReclaimOddAttempts: a FAILED/E902 row whose attempts another tool left
// at 0 or below is reclaimed, and the caller is told it owns it (a reclaim
// judged by the attempt number would report it lost: nothing sent, the
// row stuck in SENT until swept).
func testReclaimOddAttempts(t *testing.T, s suite) {
	l, db := s.fresh(t)
	for i, attempts := range []int{-1, 0} {
		g := guid(10 + i)
		s.insert(t, db, g, "TRF00001", "FAILED", "E902", []byte("orig"), nil, attempts, 0)
		attempt, stored, ok, err := l.Reclaim(ctx, g, nil, 0)
		assert.NilError(t, err)
		assert.Check(t, ok, "attempts %d: a reclaim that changed the row was reported lost", attempts)
		assert.Check(t, is.Equal(attempt, attempts+1))
		assert.Check(t, is.Equal(string(stored), "orig"))
		recorded, err := l.Finish(ctx, g, attempt, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
		assert.NilError(t, err)
		assert.Check(t, recorded, "attempts %d: the reclaim's holder could not record its outcome", attempts)
	}
}

// testReclaimReturnsStored: a FAILED row without a request is given one by
// a reclaim; it goes back to FAILED, and the next reclaim, which carries
// another request, is told the stored one: that is what must be sent.
func testReclaimReturnsStored(t *testing.T, s suite) {
	l, db := s.fresh(t)
	s.insert(t, db, guid(1), nil, "FAILED", "E902", nil, nil, 1, 0)
	attempt, stored, ok, err := l.Reclaim(ctx, guid(1), []byte("first"), 0)
	assert.NilError(t, err)
	assert.Assert(t, ok)
	assert.Equal(t, string(stored), "first")
	recorded, err := l.Finish(ctx, guid(1), attempt, ledger.Outcome{State: dedup.StateFailed, RspCode: "E902"})
	assert.NilError(t, err)
	assert.Assert(t, recorded)
	_, stored, ok, err = l.Reclaim(ctx, guid(1), []byte("second"), 0)
	assert.NilError(t, err)
	assert.Assert(t, ok)
	assert.Equal(t, string(stored), "first", "the reclaim returned the request it was given, not the one the row holds")
}

// testConfirmClaim: ConfirmClaim says whether the row is still the
// holder's claim and how old it is on the ledger's clock, and writes
// nothing.
func testConfirmClaim(t *testing.T, s suite) {
	l, db := s.fresh(t)
	ok, err := l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok)
	c, err := l.ConfirmClaim(ctx, guid(1), 1)
	assert.NilError(t, err)
	assert.Check(t, c.Held)
	assert.Check(t, c.Age >= 0 && c.Age < 10*time.Second, "age %v", c.Age)
	c, err = l.ConfirmClaim(ctx, guid(1), 2)
	assert.NilError(t, err)
	assert.Check(t, !c.Held, "another attempt's claim was confirmed")
	s.insert(t, db, guid(2), "TRF00001", "SENT", nil, []byte("r"), nil, 1, 120)
	c, err = l.ConfirmClaim(ctx, guid(2), 1)
	assert.NilError(t, err)
	assert.Check(t, c.Held)
	assert.Check(t, c.Age >= 119*time.Second && c.Age < 130*time.Second, "age %v of a row written 120 s ago", c.Age)
	n, err := l.SweepOrphans(ctx, time.Minute)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(1))
	c, err = l.ConfirmClaim(ctx, guid(2), 1)
	assert.NilError(t, err)
	assert.Check(t, !c.Held, "a swept claim was confirmed")
	c, err = l.ConfirmClaim(ctx, guid(3), 1)
	assert.NilError(t, err)
	assert.Check(t, !c.Held, "a GUID without a row was confirmed")
	r, err := l.Get(ctx, guid(1))
	assert.NilError(t, err)
	assert.Check(t, is.Equal(r.State, dedup.StateSent))
}

// testConcurrentConfirmations: 96 holders confirm at once (a backend may
// answer them with one query): each gets the answer for its own GUID and
// attempt, never a neighbour's. A third of the GUIDs are held, a third
// finished, a third have no row; every other holder asks with the wrong
// attempt.
func testConcurrentConfirmations(t *testing.T, s suite) {
	l, _ := s.fresh(t)
	const n = 96
	for i := 0; i < n; i++ {
		if i%3 == 2 {
			continue // no row
		}
		ok, err := l.Claim(ctx, guid(i), "TRF00001", []byte("r"))
		assert.NilError(t, err)
		assert.Assert(t, ok)
		if i%3 == 1 {
			ok, err := l.Finish(ctx, guid(i), 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("ok")})
			assert.NilError(t, err)
			assert.Assert(t, ok)
		}
	}
	for round := 0; round < 5; round++ {
		var wg sync.WaitGroup
		got := make([]ledger.ClaimCheck, n)
		errs := make([]error, n)
		start := make(chan struct{})
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got[i], errs[i] = l.ConfirmClaim(ctx, guid(i), 1+i%2)
			}()
		}
		close(start)
		wg.Wait()
		for i := 0; i < n; i++ {
			assert.NilError(t, errs[i])
			want := i%3 == 0 && i%2 == 0 // held, asked with attempt 1
			assert.Check(t, got[i].Held == want, "round %d: %s asked with attempt %d: held=%v, want %v", round, guid(i), 1+i%2, got[i].Held, want)
			if want {
				assert.Check(t, got[i].Age >= 0 && got[i].Age < 10*time.Second, "age %v", got[i].Age)
				assert.Check(t, !got[i].Now.IsZero(), "%s: no ledger clock read", guid(i))
			}
		}
	}
}

// testNow: the ledger's clock, read against this host's, agrees with it
// (the test's database runs on this host).
func testNow(t *testing.T, s suite) {
	l, _ := s.fresh(t)
	r, err := ledger.MeasureClock(ctx, l)
	assert.NilError(t, err)
	assert.Check(t, r.Check(time.Second), "skew %v", r.Skew)
	assert.Check(t, !r.Ledger.IsZero())
}
