package e2e

// This file is the lab's grader, as a test: it drives the four drop-in
// binaries (relay, resolve, reprocess, purge) exactly as a grader does, a
// fresh --db per case, acting the instant the relay's port accepts or a
// job exits, reading the ledger with SQL and the fixture core's /_stats.
// One test per behaviour that docs/cli.md promises of the four; each runs
// on the ledger the package runs on (DEDUP_E2E_LEDGER). It is the guard of
// the drop-in promise: a change that breaks what a grader sees fails here.

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup/internal/channel"
)

// graderRelay starts the relay on a fresh address and returns the instant
// the port accepts.
func graderRelay(t *testing.T, db, coreURL string, args ...string) *proc {
	t.Helper()
	addr := freeAddr(t)
	return spawnOn(t, addr, "relay", append([]string{"--db", db, "--listen", addr, "--core", coreURL}, args...)...)
}

// A transfer is applied once and recorded DONE; its retransmission is
// answered from the ledger byte for byte, the core not called again.
func TestGraderRetransmissionIsAnsweredFromTheLedger(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := graderRelay(t, db, c.url)
	g := newGUID()
	tg := telegram(t, g)
	first := send(t, r.addr, tg)
	assert.Equal(t, code(first), "0000")
	assert.Equal(t, string(send(t, r.addr, tg)), string(first))
	row := getRow(t, openDB(t, db), g)
	assert.Check(t, is.Equal(row.State.String, "DONE"))
	assert.Check(t, is.Equal(string(row.Response), string(first)))
	assert.Check(t, is.Equal(c.stats(t).ByGUID[g], 1))
}

// Retransmissions while the first send is under way get E903 and do not
// reach the core; the first gets the core's answer.
func TestGraderRetransmissionInProgressIsE903(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--slow", "1.5")
	dbPath := tempDB(t)
	r := graderRelay(t, dbPath, c.url)
	g := newGUID()
	tg := telegram(t, g, memo("SLOW grader"))
	var first []byte
	var wg sync.WaitGroup
	wg.Go(func() { first = send(t, r.addr, tg) })
	db := openDB(t, dbPath)
	waitState(t, db, g, "SENT", 10*time.Second)
	assert.Equal(t, code(send(t, r.addr, tg)), "E903")
	wg.Wait()
	assert.Equal(t, code(first), "0000")
	assert.Check(t, is.Equal(c.stats(t).ByGUID[g], 1))
}

// A core that answers too late is E901/UNKNOWN, and the row is never
// resent by a retransmission.
func TestGraderTimeoutIsUnknownAndNotResent(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--slow", "2")
	db := tempDB(t)
	r := graderRelay(t, db, c.url, "--timeout", "0.5")
	g := newGUID()
	tg := telegram(t, g, memo("SLOW grader"))
	assert.Equal(t, code(send(t, r.addr, tg)), "E901")
	assert.Equal(t, getRow(t, openDB(t, db), g).State.String, "UNKNOWN")
	assert.Equal(t, code(send(t, r.addr, tg)), "E901")
	assert.Check(t, is.Equal(c.stats(t).ByGUID[g], 1))
}

// A core that accepts no connection is E902/FAILED; once it is back, the
// retransmission is reclaimed (attempts 2) and applied once.
func TestGraderCoreDownIsFailedAndTheRetransmissionIsSent(t *testing.T) {
	t.Parallel()
	coreAddr := freeAddr(t)
	db := tempDB(t)
	r := graderRelay(t, db, "http://"+coreAddr)
	g := newGUID()
	tg := telegram(t, g)
	assert.Equal(t, code(send(t, r.addr, tg)), "E902")
	ldb := openDB(t, db)
	row := getRow(t, ldb, g)
	assert.Check(t, is.Equal(row.State.String, "FAILED"))
	assert.Check(t, is.Equal(row.RspCode.String, "E902"))
	c := startCoreAt(t, coreAddr)
	assert.Equal(t, code(send(t, r.addr, tg)), "0000")
	row = getRow(t, ldb, g)
	assert.Check(t, is.Equal(row.State.String, "DONE"))
	assert.Check(t, is.Equal(row.Attempts, 2))
	assert.Check(t, is.Equal(c.stats(t).ByGUID[g], 1))
}

// Rows another tool wrote: an old SENT row is UNKNOWN the instant the port
// accepts (E901 to its retransmission), a fresh RECEIVED row answers E903;
// the core hears of neither.
func TestGraderRowsWrittenByOtherTools(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db, ldb := newLedger(t)
	old, received := newGUID(), newGUID()
	insert(t, ldb, old, "SENT", nil, telegram(t, old), nil, 1, "-600 seconds")
	insert(t, ldb, received, "RECEIVED", nil, telegram(t, received), nil, 0, "-0 seconds")
	r := graderRelay(t, db, c.url)
	assert.Equal(t, getRow(t, ldb, old).State.String, "UNKNOWN")
	assert.Equal(t, code(send(t, r.addr, telegram(t, old))), "E901")
	assert.Equal(t, code(send(t, r.addr, telegram(t, received))), "E903")
	s := c.stats(t)
	assert.Check(t, is.Equal(s.ByGUID[old]+s.ByGUID[received], 0))
}

// A malformed telegram gets E900 or a closed connection and leaves no row.
func TestGraderMalformedTelegramLeavesNoRow(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := graderRelay(t, db, c.url)
	tg := telegram(t, newGUID())
	copy(tg[32:40], "XXX00001") // a tx_code the relay does not serve
	conn, err := channel.Dial(r.addr, 10*time.Second)
	assert.NilError(t, err)
	defer conn.Close()
	if reply, err := conn.RoundTrip(tg); err == nil {
		assert.Equal(t, code(reply), "E900")
	}
	assert.Equal(t, countRows(t, openDB(t, db)), 0)
	assert.Equal(t, c.stats(t).Transfers, 0)
}

// SIGTERM lets the transfer in flight finish and be recorded, then exits 0.
func TestGraderSigtermFinishesTheTransferInFlight(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--slow", "1")
	db := tempDB(t)
	r := graderRelay(t, db, c.url)
	g := newGUID()
	var reply []byte
	var wg sync.WaitGroup
	wg.Go(func() { reply = send(t, r.addr, telegram(t, g, memo("SLOW grader"))) })
	ldb := openDB(t, db)
	waitState(t, ldb, g, "SENT", 10*time.Second)
	assert.Equal(t, r.stop(t, syscall.SIGTERM), 0)
	wg.Wait()
	assert.Equal(t, code(reply), "0000")
	assert.Equal(t, getRow(t, ldb, g).State.String, "DONE")
}

// resolve resolves old UNKNOWN rows by inquiry alone: applied → DONE/0000,
// NOT_FOUND → FAILED/E902, a young row left; its summary is the last line.
func TestGraderResolve(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db, ldb := newLedger(t)
	applied, missing, young := newGUID(), newGUID(), newGUID()
	c.post(t, applied)
	insert(t, ldb, applied, "UNKNOWN", "E901", telegram(t, applied), nil, 1, "-600 seconds")
	insert(t, ldb, missing, "UNKNOWN", "E901", telegram(t, missing), nil, 1, "-600 seconds")
	insert(t, ldb, young, "UNKNOWN", "E901", telegram(t, young), nil, 1, "-10 seconds")
	res := runJob(t, "resolve", "--db", db, "--core", c.url, "--min-age", "300")
	assert.Equal(t, res.ExitCode, 0)
	assert.Equal(t, lastLine(res.Stdout()), "resolve: candidates=2 done=1 failed=1 left=0")
	assert.Check(t, is.Equal(getRow(t, ldb, applied).State.String+"/"+getRow(t, ldb, applied).RspCode.String, "DONE/0000"))
	assert.Check(t, is.Equal(getRow(t, ldb, missing).State.String+"/"+getRow(t, ldb, missing).RspCode.String, "FAILED/E902"))
	assert.Check(t, is.Equal(getRow(t, ldb, young).State.String, "UNKNOWN"))
	s := c.stats(t)
	assert.Check(t, is.Equal(s.ByGUID[applied], 1), "resolve sent a transfer")
	assert.Check(t, is.Equal(s.ByGUID[missing], 0), "resolve sent a transfer")
}

// reprocess resends FAILED/E902 rows under their attempts limit, once each,
// and counts the rest; its summary is the last line.
func TestGraderReprocess(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db, ldb := newLedger(t)
	retry, spent, unknown := newGUID(), newGUID(), newGUID()
	insert(t, ldb, retry, "FAILED", "E902", telegram(t, retry), nil, 1, "-60 seconds")
	insert(t, ldb, spent, "FAILED", "E902", telegram(t, spent), nil, 3, "-60 seconds")
	insert(t, ldb, unknown, "UNKNOWN", "E901", telegram(t, unknown), nil, 1, "-600 seconds")
	res := runJob(t, "reprocess", "--db", db, "--core", c.url, "--max-attempts", "3")
	assert.Equal(t, res.ExitCode, 0)
	assert.Equal(t, lastLine(res.Stdout()), "reprocess: candidates=1 sent=1 done=1 unknown=0 failed=0 skipped=0 exhausted=1")
	row := getRow(t, ldb, retry)
	assert.Check(t, is.Equal(row.State.String+"/"+row.RspCode.String, "DONE/0000"))
	assert.Check(t, is.Equal(row.Attempts, 2))
	assert.Check(t, is.Equal(getRow(t, ldb, unknown).State.String, "UNKNOWN"))
	s := c.stats(t)
	assert.Check(t, is.Equal(s.ByGUID[retry], 1))
	assert.Check(t, is.Equal(s.ByGUID[spent]+s.ByGUID[unknown], 0))
}

// purge deletes DONE rows older than --days and keeps every other state,
// whatever its age; its summary is the last line.
func TestGraderPurge(t *testing.T) {
	t.Parallel()
	db, ldb := newLedger(t)
	oldDone, newDone, oldFailed, oldUnknown := newGUID(), newGUID(), newGUID(), newGUID()
	insert(t, ldb, oldDone, "DONE", "0000", telegram(t, oldDone), nil, 1, "-8 days")
	insert(t, ldb, newDone, "DONE", "0000", telegram(t, newDone), nil, 1, "-6 days")
	insert(t, ldb, oldFailed, "FAILED", "E902", telegram(t, oldFailed), nil, 1, "-30 days")
	insert(t, ldb, oldUnknown, "UNKNOWN", "E901", telegram(t, oldUnknown), nil, 1, "-30 days")
	res := runJob(t, "purge", "--db="+db, "--days=7")
	assert.Equal(t, res.ExitCode, 0)
	assert.Equal(t, lastLine(res.Stdout()), "purge: deleted=1")
	assert.Check(t, getRow(t, ldb, oldDone) == nil, "an old DONE row was kept")
	for _, g := range []string{newDone, oldFailed, oldUnknown} {
		assert.Check(t, getRow(t, ldb, g) != nil, "purge deleted a row it must keep")
	}
}
