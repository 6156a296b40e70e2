package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
)

var ctx = context.Background()

func openTemp(t *testing.T) (*Ledger, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path, Options{})
	assert.NilError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, path
}

// rawDB opens the ledger file the way another tool would.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", path+"?_busy_timeout=5000")
	assert.NilError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

func exec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	_, err := db.Exec(q, args...)
	assert.NilError(t, err)
}

func guid(i int) string { return fmt.Sprintf("20261129TST%021d", i) }

func TestSchemaColumnsInContractOrder(t *testing.T) {
	_, path := openTemp(t)
	db := rawDB(t, path)
	rows, err := db.Query("SELECT name FROM pragma_table_info('tx') ORDER BY cid")
	assert.NilError(t, err)
	var names []string
	for rows.Next() {
		var n string
		assert.NilError(t, rows.Scan(&n))
		names = append(names, n)
	}
	assert.DeepEqual(t, names, []string{"guid", "tx_code", "state", "rsp_code", "request", "response", "attempts", "updated_at"})
	var idx int
	assert.NilError(t, db.QueryRow("SELECT count(*) FROM sqlite_master WHERE type='index' AND name='tx_state_updated'").Scan(&idx))
	assert.Equal(t, idx, 1)
	// A positional insert with defaults works, and the state CHECK holds.
	exec(t, db, "INSERT INTO tx(guid,state) VALUES('g1','DONE')")
	_, err = db.Exec("INSERT INTO tx(guid,state) VALUES('g2','BOGUS')")
	assert.ErrorContains(t, err, "CHECK")
}

func TestOpenTwiceAppliesSchemaHarmlessly(t *testing.T) {
	l, path := openTemp(t)
	_, err := l.Claim(ctx, guid(1), "TRF00001", []byte("req"))
	assert.NilError(t, err)
	l2, err := Open(path, Options{})
	assert.NilError(t, err)
	defer l2.Close()
	r, err := l2.Get(ctx, guid(1))
	assert.NilError(t, err)
	assert.Equal(t, r.State, dedup.StateSent)
}

func TestOpenErrorNamesPathAndCause(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "ledger.db")
	_, err := Open(path, Options{})
	assert.ErrorContains(t, err, path)
	assert.ErrorContains(t, err, "no such file or directory")
}

func TestOpenRejectsInMemory(t *testing.T) {
	_, err := Open(":memory:", Options{})
	assert.ErrorContains(t, err, "plain file")
}

func TestClaimWritesSentRow(t *testing.T) {
	l, _ := openTemp(t)
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
	assert.Check(t, regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`).MatchString(r.UpdatedAt), r.UpdatedAt)

	ok, err = l.Claim(ctx, guid(1), "TRF00001", []byte("other"))
	assert.NilError(t, err)
	assert.Assert(t, !ok, "a second claim of the same GUID won")
	r, _ = l.Get(ctx, guid(1))
	assert.Equal(t, string(r.Request), "request-bytes", "a lost claim changed the row")
}

func TestGetMissingIsNil(t *testing.T) {
	l, _ := openTemp(t)
	r, err := l.Get(ctx, guid(9))
	assert.NilError(t, err)
	assert.Assert(t, r == nil)
}

// TestConcurrentClaimsOneWinnerAcrossHandles claims the same GUIDs from many
// goroutines through two independent ledger handles on one file, as two
// relay processes would: each GUID must have exactly one winner.
func TestConcurrentClaimsOneWinnerAcrossHandles(t *testing.T) {
	l1, path := openTemp(t)
	l2, err := Open(path, Options{})
	assert.NilError(t, err)
	defer l2.Close()
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

func TestReclaim(t *testing.T) {
	l, path := openTemp(t)
	db := rawDB(t, path)
	exec(t, db, "INSERT INTO tx VALUES(?, 'TRF00001', 'FAILED', 'E902', 'orig', NULL, 1, datetime('now'))", guid(1))
	exec(t, db, "INSERT INTO tx VALUES(?, 'TRF00001', 'FAILED', 'E999', 'orig', NULL, 1, datetime('now'))", guid(2))
	exec(t, db, "INSERT INTO tx VALUES(?, NULL, 'FAILED', 'E902', NULL, NULL, 1, datetime('now'))", guid(3))
	exec(t, db, "INSERT INTO tx VALUES(?, 'TRF00001', 'FAILED', 'E902', 'orig', NULL, 3, datetime('now'))", guid(4))
	for _, st := range []string{"UNKNOWN", "DONE", "SENT", "RECEIVED"} {
		exec(t, db, "INSERT INTO tx VALUES(?, 'TRF00001', ?, 'E902', 'orig', NULL, 1, datetime('now'))", "x"+st, st)
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
		{"attempt limit holds", guid(4), nil, 3, 0, "orig"},
		{"UNKNOWN is never reclaimed", "xUNKNOWN", nil, 0, 0, "orig"},
		{"DONE is never reclaimed", "xDONE", nil, 0, 0, "orig"},
		{"SENT is never reclaimed", "xSENT", nil, 0, 0, "orig"},
		{"RECEIVED is never reclaimed", "xRECEIVED", nil, 0, 0, "orig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempt, ok, err := l.Reclaim(ctx, tc.guid, tc.req, tc.max)
			assert.NilError(t, err)
			assert.Equal(t, ok, tc.wantAttempt > 0)
			assert.Equal(t, attempt, tc.wantAttempt)
			r, err := l.Get(ctx, tc.guid)
			assert.NilError(t, err)
			assert.Equal(t, string(r.Request), tc.wantReq)
			if ok {
				assert.Equal(t, r.State, dedup.StateSent)
				assert.Equal(t, r.RspCode, "")
			}
		})
	}
}

func TestConcurrentReclaimOneWinner(t *testing.T) {
	l1, path := openTemp(t)
	l2, err := Open(path, Options{})
	assert.NilError(t, err)
	defer l2.Close()
	db := rawDB(t, path)
	exec(t, db, "INSERT INTO tx VALUES(?, 'TRF00001', 'FAILED', 'E902', 'orig', NULL, 1, datetime('now'))", guid(1))
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
			_, ok, err := l.Reclaim(ctx, guid(1), nil, 3)
			assert.Check(t, err)
			if ok {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, wins.Load(), int32(1))
}

func TestFinishIsFencedOnAttempt(t *testing.T) {
	l, path := openTemp(t)
	db := rawDB(t, path)
	_, err := l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.NilError(t, err)

	ok, err := l.Finish(ctx, guid(1), 2, Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
	assert.NilError(t, err)
	assert.Assert(t, !ok, "a holder with another attempt number finished the row")

	// The row is swept, settled and reclaimed by someone else: the stale
	// holder of attempt 1 must not overwrite attempt 2.
	exec(t, db, "UPDATE tx SET state='SENT', attempts=2 WHERE guid=?", guid(1))
	ok, err = l.Finish(ctx, guid(1), 1, Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("stale")})
	assert.NilError(t, err)
	assert.Assert(t, !ok)

	ok, err = l.Finish(ctx, guid(1), 2, Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("mine")})
	assert.NilError(t, err)
	assert.Assert(t, ok)
	r, _ := l.Get(ctx, guid(1))
	assert.Equal(t, string(r.Response), "mine")
	assert.Equal(t, r.State, dedup.StateDone)

	// A finished row is not finished twice.
	ok, err = l.Finish(ctx, guid(1), 2, Outcome{State: dedup.StateUnknown, RspCode: "E901"})
	assert.NilError(t, err)
	assert.Assert(t, !ok)
}

func TestSettleIsFencedOnSelection(t *testing.T) {
	l, path := openTemp(t)
	db := rawDB(t, path)
	exec(t, db, "INSERT INTO tx VALUES(?, 'TRF00001', 'UNKNOWN', 'E901', 'r', NULL, 1, datetime('now','-600 seconds'))", guid(1))
	rows, err := l.SelectUnknown(ctx, 300*time.Second)
	assert.NilError(t, err)
	assert.Equal(t, len(rows), 1)
	sel := rows[0]

	// Meanwhile the row went through a reprocess cycle and is UNKNOWN again
	// with another attempt: the stale selection must not settle it.
	exec(t, db, "UPDATE tx SET attempts=2, updated_at=datetime('now') WHERE guid=?", guid(1))
	ok, err := l.Settle(ctx, sel, Outcome{State: dedup.StateFailed, RspCode: "E902"})
	assert.NilError(t, err)
	assert.Assert(t, !ok)
	// Same attempts, only updated_at changed: still fenced.
	exec(t, db, "UPDATE tx SET attempts=1 WHERE guid=?", guid(1))
	ok, err = l.Settle(ctx, sel, Outcome{State: dedup.StateFailed, RspCode: "E902"})
	assert.NilError(t, err)
	assert.Assert(t, !ok)

	fresh, err := l.Get(ctx, guid(1))
	assert.NilError(t, err)
	ok, err = l.Settle(ctx, *fresh, Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("reply")})
	assert.NilError(t, err)
	assert.Assert(t, ok)
	r, _ := l.Get(ctx, guid(1))
	assert.Equal(t, r.State, dedup.StateDone)
	assert.Equal(t, r.Attempts, 1, "settling changed attempts")
}

func TestSelectionsAndSweep(t *testing.T) {
	l, path := openTemp(t)
	db := rawDB(t, path)
	ins := func(g, state, rsp string, attempts int, age string) {
		exec(t, db, "INSERT INTO tx VALUES(?, 'TRF00001', ?, ?, 'r', NULL, ?, datetime('now', ?))", g, state, rsp, attempts, age)
	}
	ins("unknown-old", "UNKNOWN", "E901", 1, "-600 seconds")
	ins("unknown-young", "UNKNOWN", "E901", 1, "-10 seconds")
	ins("failed-1", "FAILED", "E902", 1, "-1 seconds")
	ins("failed-3", "FAILED", "E902", 3, "-1 seconds")
	ins("failed-other", "FAILED", "E999", 1, "-1 seconds")
	ins("sent-old", "SENT", "", 1, "-120 seconds")
	ins("received-old", "RECEIVED", "", 0, "-120 seconds")
	ins("sent-young", "SENT", "", 1, "-5 seconds")
	ins("done-old", "DONE", "0000", 1, "-8 days")
	ins("done-young", "DONE", "0000", 1, "-6 days")
	ins("unknown-ancient", "UNKNOWN", "E901", 1, "-30 days")
	ins("failed-ancient", "FAILED", "E902", 1, "-30 days")
	ins("sent-ancient", "SENT", "", 1, "-30 days")

	names := func(rows []Row) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r.GUID)
		}
		return out
	}
	u, err := l.SelectUnknown(ctx, 300*time.Second)
	assert.NilError(t, err)
	assert.DeepEqual(t, names(u), []string{"unknown-ancient", "unknown-old"})
	f, err := l.SelectFailed(ctx, 3)
	assert.NilError(t, err)
	assert.DeepEqual(t, names(f), []string{"failed-ancient", "failed-1"})
	n, err := l.CountExhausted(ctx, 3)
	assert.NilError(t, err)
	assert.Equal(t, n, 1)

	swept, err := l.SweepOrphans(ctx, 60*time.Second)
	assert.NilError(t, err)
	assert.Equal(t, swept, int64(3))
	for g, want := range map[string]dedup.State{"sent-old": dedup.StateUnknown, "received-old": dedup.StateUnknown, "sent-ancient": dedup.StateUnknown, "sent-young": dedup.StateSent} {
		r, _ := l.Get(ctx, g)
		assert.Check(t, is.Equal(r.State, want), g)
		if want == dedup.StateUnknown {
			assert.Check(t, is.Equal(r.RspCode, "E901"), g)
		}
	}

	deleted, err := l.PurgeBatch(ctx, 7, 1000)
	assert.NilError(t, err)
	assert.Equal(t, deleted, int64(1))
	var left int
	assert.NilError(t, db.QueryRow("SELECT count(*) FROM tx").Scan(&left))
	assert.Equal(t, left, 12)
	r, _ := l.Get(ctx, "done-old")
	assert.Assert(t, r == nil)
}

// TestFailedCommitFailsEveryCallerInTheBatch makes the batch's COMMIT fail:
// no caller may believe its claim happened, and no row may exist.
func TestFailedCommitFailsEveryCallerInTheBatch(t *testing.T) {
	l, _ := openTemp(t)
	commitHook = func() error { return errors.New("injected commit failure") }
	defer func() { commitHook = nil }()
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
	assert.Equal(t, succeeded.Load(), int32(0), "a caller believed a failed batch committed")
	for i := 0; i < 32; i++ {
		r, err := l.Get(ctx, guid(i))
		assert.NilError(t, err)
		assert.Assert(t, r == nil, "row %d exists after a failed commit", i)
	}
	commitHook = nil
	ok, err := l.Claim(ctx, guid(0), "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok, "the writer did not recover after a failed batch")
}

// TestClaimFailsWhileAnotherWriterHoldsTheLock holds the write lock from
// another connection past the busy timeout: the claim must fail (the relay
// answers E902 and sends nothing) and leave no row.
func TestClaimFailsWhileAnotherWriterHoldsTheLock(t *testing.T) {
	l, path := openTemp(t)
	db := rawDB(t, path)
	conn, err := db.Conn(ctx)
	assert.NilError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	assert.NilError(t, err)
	_, err = l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.Assert(t, IsBusy(err), "got %v", err)
	_, err = conn.ExecContext(ctx, "ROLLBACK")
	assert.NilError(t, err)
	r, err := l.Get(ctx, guid(1))
	assert.NilError(t, err)
	assert.Assert(t, r == nil)
}

func TestWritesAfterCloseFail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path, Options{})
	assert.NilError(t, err)
	assert.NilError(t, l.Close())
	_, err = l.Claim(ctx, guid(1), "TRF00001", nil)
	assert.Assert(t, errors.Is(err, ErrClosed))
}

// TestFailedCommitRecordsNoOutcome: finishes in a batch whose commit fails
// are not recorded (the holder answers by rule 10); the row stays SENT, and
// a later finish of the same claim records it exactly once.
func TestFailedCommitRecordsNoOutcome(t *testing.T) {
	l, _ := openTemp(t)
	ok, err := l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok)
	commitHook = func() error { return errors.New("injected commit failure") }
	recorded, err := l.Finish(ctx, guid(1), 1, Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
	commitHook = nil
	assert.Assert(t, err != nil && !recorded)
	r, _ := l.Get(ctx, guid(1))
	assert.Equal(t, r.State, dedup.StateSent)
	recorded, err = l.Finish(ctx, guid(1), 1, Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
	assert.NilError(t, err)
	assert.Assert(t, recorded)
	recorded, err = l.Finish(ctx, guid(1), 1, Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("y")})
	assert.NilError(t, err)
	assert.Assert(t, !recorded, "an outcome was recorded twice")
}
