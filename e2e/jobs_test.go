package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"

	"dedup/internal/channel"
	"dedup/lhstd"
)

// newLedger creates a ledger file with the schema, as a fresh relay would,
// and returns its path and a connection for positional inserts.
func newLedger(t *testing.T) (string, *ledgerDB) {
	t.Helper()
	path := tempDB(t)
	db := openDB(t, path)
	db.applySchema(t)
	return path, db
}

// insert writes a row with a plain positional INSERT, as operators' tools
// do; age is an SQLite modifier such as "-600 seconds".
func insert(t *testing.T, db *ledgerDB, guid, state string, rsp any, request, response any, attempts int, age string) {
	t.Helper()
	_, err := db.Exec("INSERT INTO tx VALUES(?, 'TRF00001', ?, ?, ?, ?, ?, datetime('now', ?))", guid, state, rsp, request, response, attempts, age)
	assert.NilError(t, err)
}

func runJob(t *testing.T, name string, args ...string) *icmd.Result {
	t.Helper()
	res := icmd.RunCmd(icmd.Command(bin(name), args...), icmd.WithTimeout(120*time.Second))
	t.Logf("%s %v: exit %d\nstdout: %s\nstderr: %s", name, args, res.ExitCode, res.Stdout(), res.Stderr())
	return res
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// rowsSnapshot returns every row, for "untouched" checks.
func rowsSnapshot(t *testing.T, db *ledgerDB) map[string]row {
	t.Helper()
	rs, err := db.Query("SELECT guid FROM tx")
	assert.NilError(t, err)
	var guids []string
	for rs.Next() {
		var g string
		assert.NilError(t, rs.Scan(&g))
		guids = append(guids, g)
	}
	rs.Close()
	out := map[string]row{}
	for _, g := range guids {
		out[g] = *getRow(t, db, g)
	}
	return out
}

// resolveFixture lays out one row of every kind resolve must or must not
// touch; applied is applied at the core directly.
type resolveFixture struct {
	applied, unseen, young, done, failed, sent, received string
	appliedReq                                           []byte
}

func layResolveFixture(t *testing.T, db *ledgerDB) resolveFixture {
	f := resolveFixture{applied: newGUID(), unseen: newGUID(), young: newGUID(), done: newGUID(), failed: newGUID(), sent: newGUID(), received: newGUID()}
	f.appliedReq = telegram(t, f.applied)
	insert(t, db, f.applied, "UNKNOWN", "E901", f.appliedReq, nil, 2, "-600 seconds")
	insert(t, db, f.unseen, "UNKNOWN", "E901", telegram(t, f.unseen), nil, 2, "-600 seconds")
	insert(t, db, f.young, "UNKNOWN", "E901", telegram(t, f.young), nil, 1, "-10 seconds")
	insert(t, db, f.done, "DONE", "0000", telegram(t, f.done), []byte("stored"), 1, "-600 seconds")
	insert(t, db, f.failed, "FAILED", "E902", telegram(t, f.failed), nil, 1, "-600 seconds")
	insert(t, db, f.sent, "SENT", nil, telegram(t, f.sent), nil, 1, "-600 seconds")
	insert(t, db, f.received, "RECEIVED", nil, telegram(t, f.received), nil, 0, "-600 seconds")
	return f
}

// Rule 5: resolve resolves only old UNKNOWN rows, only by inquiry, and only
// on proof; it never sends a transfer.
func TestResolveResolvesOldUnknownRowsByInquiryOnly(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	f := layResolveFixture(t, db)
	c.post(t, f.applied)
	before := rowsSnapshot(t, db)

	res := runJob(t, "resolve", "--db", path, "--core", c.url, "--min-age", "300")
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "resolve: candidates=2 done=1 failed=1 left=0")

	a := getRow(t, db, f.applied)
	assert.Check(t, is.Equal(a.State.String, "DONE"))
	assert.Check(t, is.Equal(a.RspCode.String, "0000"))
	assert.Check(t, is.Equal(string(a.Response), string(expectReply(f.appliedReq, "0000", coreBody(t, c, f.applied)))))
	assert.Check(t, is.Equal(a.Attempts, 2), "resolve changed attempts")
	u := getRow(t, db, f.unseen)
	assert.Check(t, is.Equal(u.State.String, "FAILED"))
	assert.Check(t, is.Equal(u.RspCode.String, "E902"))
	assert.Check(t, is.Equal(u.Attempts, 2))
	for _, g := range []string{f.young, f.done, f.failed, f.sent, f.received} {
		assert.Check(t, is.DeepEqual(*getRow(t, db, g), before[g]), "row %s was touched", g)
	}
	s := c.stats(t)
	assert.Check(t, is.Equal(s.Transfers, 1), "resolve sent a transfer")
	assert.Check(t, is.DeepEqual(s.ByGUID, map[string]int{f.applied: 1}))
	assert.Check(t, is.Equal(s.LookupsByGUID[f.young], 0), "a young UNKNOWN row was looked up")
}

// A bare 404 is no proof (a wrong --core URL answers it to everything), and
// a core that cannot be reached proves nothing either: rows stay as they
// are, and the job still exits 0.
func TestResolveWithoutProofLeavesRowsUntouched(t *testing.T) {
	t.Parallel()
	bare404 := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(bare404.Close)
	for _, tc := range []struct{ name, url string }{
		{"bare 404 everywhere", bare404.URL},
		{"core down", "http://" + freeAddr(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, db := newLedger(t)
			layResolveFixture(t, db)
			before := rowsSnapshot(t, db)
			res := runJob(t, "resolve", "--db", path, "--core", tc.url, "--min-age=300", "--connect-timeout", "0.5")
			res.Assert(t, icmd.Success)
			assert.Equal(t, lastLine(res.Stdout()), "resolve: candidates=2 done=0 failed=0 left=2")
			assert.DeepEqual(t, rowsSnapshot(t, db), before)
		})
	}
}

// Rule 6: reprocess sends only FAILED/E902 rows below the attempt limit,
// with their own GUID and stored request, and records the outcome.
func TestReprocessResendsOnlySurelyUnsentRows(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	g1, gLimit, gUnknown, gNoReq, gOther, gPoor := newGUID(), newGUID(), newGUID(), newGUID(), newGUID(), newGUID()
	req1 := telegram(t, g1, accounts("55500000000001", "55500000000002"), amount(1234))
	insert(t, db, g1, "FAILED", "E902", req1, nil, 1, "-60 seconds")
	insert(t, db, gLimit, "FAILED", "E902", telegram(t, gLimit), nil, 3, "-60 seconds")
	insert(t, db, gUnknown, "UNKNOWN", "E901", telegram(t, gUnknown), nil, 1, "-60 seconds")
	insert(t, db, gNoReq, "FAILED", "E902", nil, nil, 1, "-60 seconds")
	insert(t, db, gOther, "FAILED", "E999", telegram(t, gOther), nil, 1, "-60 seconds")
	poorReq := telegram(t, gPoor, amount(999_000_000))
	insert(t, db, gPoor, "FAILED", "E902", poorReq, nil, 2, "-60 seconds")

	res := runJob(t, "reprocess", "--db", path, "--core", c.url, "--max-attempts", "3")
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "reprocess: candidates=3 sent=2 done=2 unknown=0 failed=0 skipped=1 exhausted=1")

	r1 := getRow(t, db, g1)
	assert.Check(t, is.Equal(r1.State.String, "DONE"))
	assert.Check(t, is.Equal(r1.Attempts, 2))
	body := coreBody(t, c, g1)
	assert.Check(t, is.Equal(string(r1.Response), string(expectReply(req1, "0000", body))))
	tr, err := lhstd.ParseTransferResponseBody(body)
	assert.NilError(t, err)
	assert.Check(t, is.Equal(tr.Balance, int64(100_000_000-1234)), "the stored request's accounts and amount were not the ones sent")
	rp := getRow(t, db, gPoor)
	assert.Check(t, is.Equal(rp.State.String, "DONE"))
	assert.Check(t, is.Equal(rp.RspCode.String, "B201"))
	assert.Check(t, is.Equal(rp.Attempts, 3))
	assert.Check(t, is.Equal(string(rp.Response), string(expectReply(poorReq, "B201", nil))))

	s := c.stats(t)
	assert.Check(t, is.DeepEqual(s.ByGUID, map[string]int{g1: 1, gPoor: 1}), "only eligible rows may reach the core")
	assert.Check(t, is.Equal(getRow(t, db, gUnknown).State.String, "UNKNOWN"))
	assert.Check(t, is.Equal(getRow(t, db, gLimit).Attempts, 3))
	assert.Check(t, is.Equal(getRow(t, db, gNoReq).Attempts, 1), "a row without a request was reclaimed")
	assert.Check(t, is.Equal(getRow(t, db, gOther).State.String, "FAILED"))
}

func TestReprocessWithCoreStillDownRecordsFailedWithAttemptPlusOne(t *testing.T) {
	t.Parallel()
	path, db := newLedger(t)
	g := newGUID()
	insert(t, db, g, "FAILED", "E902", telegram(t, g), nil, 1, "-60 seconds")
	res := runJob(t, "reprocess", "--db", path, "--core", "http://"+freeAddr(t), "--connect-timeout", "0.5")
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "reprocess: candidates=1 sent=1 done=0 unknown=0 failed=1 skipped=0 exhausted=0")
	r := getRow(t, db, g)
	assert.Equal(t, r.State.String, "FAILED")
	assert.Equal(t, r.RspCode.String, "E902")
	assert.Equal(t, r.Attempts, 2)
}

// Two reprocess runs started at the same moment send each row once
// between them: the reclaim is atomic across processes.
func TestConcurrentReprocessRunsSendEachRowOnce(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	var guids []string
	for i := 0; i < 40; i++ {
		g := newGUID()
		guids = append(guids, g)
		insert(t, db, g, "FAILED", "E902", telegram(t, g, amount(int64(i+1))), nil, 1, "-60 seconds")
	}
	var wg sync.WaitGroup
	results := make([]*icmd.Result, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = icmd.RunCmd(icmd.Command(bin("reprocess"), "--db", path, "--core", c.url))
		}()
	}
	wg.Wait()
	sent := 0
	for _, r := range results {
		r.Assert(t, icmd.Success)
		var s struct{ cand, sent, done, unk, failed, skipped, exh int }
		_, err := fmt.Sscanf(lastLine(r.Stdout()), "reprocess: candidates=%d sent=%d done=%d unknown=%d failed=%d skipped=%d exhausted=%d",
			&s.cand, &s.sent, &s.done, &s.unk, &s.failed, &s.skipped, &s.exh)
		assert.NilError(t, err)
		sent += s.sent
	}
	assert.Equal(t, sent, len(guids), "the two runs together must send every row exactly once")
	st := c.stats(t)
	for _, g := range guids {
		assert.Check(t, is.Equal(st.ByGUID[g], 1), g)
		assert.Check(t, is.Equal(getRow(t, db, g).State.String, "DONE"))
	}
}

// Rule 7: purge deletes exactly the DONE rows older than the retention.
func TestPurgeDeletesOnlyOldDoneRows(t *testing.T) {
	t.Parallel()
	path, db := newLedger(t)
	old, young := newGUID(), newGUID()
	insert(t, db, old, "DONE", "0000", nil, nil, 1, "-8 days")
	insert(t, db, young, "DONE", "0000", nil, nil, 1, "-6 days")
	keep := []string{young}
	for _, st := range []string{"UNKNOWN", "FAILED", "SENT", "RECEIVED"} {
		g := newGUID()
		insert(t, db, g, st, nil, nil, nil, 1, "-400 days")
		keep = append(keep, g)
	}
	res := runJob(t, "purge", "--db", path, "--days", "7")
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "purge: deleted=1")
	assert.Assert(t, getRow(t, db, old) == nil)
	for _, g := range keep {
		assert.Check(t, getRow(t, db, g) != nil, "purge deleted %s", g)
	}
	res = runJob(t, "purge", "--db", path, "--days=0")
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "purge: deleted=1")
	assert.Assert(t, strings.Contains(res.Stderr(), "forgets every finished transaction"))
	assert.Equal(t, countRows(t, db), 4)
}

// Purging a large backlog while a relay serves transfers on the same
// ledger: the purge completes and no transfer fails. The worst latency is
// logged for the record (measured, not asserted: no wall-clock thresholds).
func TestPurgeOfLargeBacklogWhileRelayServes(t *testing.T) {
	t.Parallel()
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	c := startCore(t, "--quiet")
	path, db := newLedger(t)
	db.insertOldDone(t, n, make([]byte, 127), make([]byte, 109))
	r := startRelay(t, path, c.url)

	ctx, cancel := context.WithCancel(context.Background())
	loadDone := make(chan *channel.LoadReport, 1)
	go func() {
		rep, err := channel.Load(ctx, channel.LoadConfig{Relay: r.addr, Conns: 8, Duration: 10 * time.Minute,
			From: "11020030004001", To: "11020030004002", Amount: 1, Channel: "PRG"})
		assert.Check(t, err)
		loadDone <- rep
	}()
	res := runJob(t, "purge", "--db", path, "--days", "7")
	cancel()
	rep := <-loadDone
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), fmt.Sprintf("purge: deleted=%d", n))
	assert.Assert(t, rep.Sent > 0)
	assert.DeepEqual(t, rep.ByCode, map[string]int{"0000": rep.Sent})
	assert.Equal(t, rep.Errors, 0)
	t.Logf("purge of %d rows under load: %d transfers meanwhile, latency p50=%v p99=%v max=%v", n, rep.Sent, rep.P50, rep.P99, rep.Max)
}

// Flags: both forms, exact numbers, one-line usage errors with exit 2,
// --help and --version with exit 0, and exit 1 naming the path when the
// ledger cannot be opened.
func TestJobFlags(t *testing.T) {
	t.Parallel()
	fresh := filepath.Join(t.TempDir(), "fresh.db")
	for _, tc := range []struct {
		bin      string
		args     []string
		exit     int
		contains string
	}{
		{"resolve", []string{"--db", fresh, "--core", "http://" + freeAddr(t), "--min-age", "0"}, 0, "resolve: candidates=0 done=0 failed=0 left=0"},
		{"resolve", []string{"--db=" + fresh, "--min-age=2.5"}, 0, "resolve: candidates=0"},
		{"reprocess", []string{"--db", fresh}, 0, "reprocess: candidates=0 sent=0 done=0 unknown=0 failed=0 skipped=0 exhausted=0"},
		{"purge", []string{"--db", fresh}, 0, "purge: deleted=0"},
		{"resolve", []string{"--db", fresh, "--min-age", "-1"}, 2, "--min-age"},
		{"resolve", []string{"--db", fresh, "--min-age", "NaN"}, 2, "--min-age"},
		{"resolve", []string{"--db", fresh, "--min-age", "Inf"}, 2, "--min-age"},
		{"resolve", []string{"--db", fresh, "--min-age", "1e3"}, 2, "--min-age"},
		{"resolve", []string{"--db", fresh, "--min-age="}, 2, "--min-age"},
		{"resolve", []string{"--db", fresh, "--timeout", "0"}, 2, "--timeout"},
		{"reprocess", []string{"--db", fresh, "--max-attempts", "0"}, 2, "--max-attempts"},
		{"reprocess", []string{"--db", fresh, "--max-attempts", "2.5"}, 2, "--max-attempts"},
		{"reprocess", []string{"--db", fresh, "--connect-timeout", "abc"}, 2, "--connect-timeout"},
		{"purge", []string{"--db", fresh, "--days", "1.5"}, 2, "--days"},
		{"purge", []string{"--db", fresh, "--days=-3"}, 2, "--days"},
		{"purge", []string{"--bogus"}, 2, "--bogus"},
		{"relay", []string{"--timeout", "-1"}, 2, "--timeout"},
		{"relay", []string{"--orphan-after", "10"}, 2, "--orphan-after"},
		{"relay", []string{"--synchronous", "off"}, 2, "--synchronous"},
		{"resolve", []string{"--help"}, 0, "--min-age"},
		{"purge", []string{"--version"}, 0, "purge"},
		{"relay", []string{"--version"}, 0, "relay"},
		{"purge", []string{"--db", "/nonexistent-dir/x.db"}, 1, "/nonexistent-dir/x.db"},
		{"relay", []string{"--db", "/nonexistent-dir/x.db"}, 1, "/nonexistent-dir/x.db"},
	} {
		t.Run(tc.bin+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			res := icmd.RunCmd(icmd.Command(bin(tc.bin), tc.args...), icmd.WithTimeout(30*time.Second))
			assert.Equal(t, res.ExitCode, tc.exit, "stdout %s\nstderr %s", res.Stdout(), res.Stderr())
			assert.Assert(t, strings.Contains(res.Combined(), tc.contains), res.Combined())
			if tc.exit == 2 || tc.exit == 1 {
				assert.Equal(t, strings.Count(strings.TrimSpace(res.Stderr()), "\n"), 0, "want one line on stderr: %s", res.Stderr())
			}
		})
	}
}

// Rule 11 for resolve: while resolve waits for the core's answer, the row
// goes through another cycle (reclaimed, sent, UNKNOWN again with attempts
// 2). The inquiry answered for the old selection must not settle the new
// attempt.
func TestResolveDoesNotResolveARowChangedSinceItWasSelected(t *testing.T) {
	t.Parallel()
	path, db := newLedger(t)
	g := newGUID()
	insert(t, db, g, "UNKNOWN", "E901", telegram(t, g), nil, 1, "-600 seconds")
	core := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := db.Exec("UPDATE tx SET attempts=2, updated_at=datetime('now') WHERE guid=?", g)
		assert.Check(t, err)
		w.WriteHeader(404)
		w.Write([]byte(`{"code":"NOT_FOUND"}`))
	}))
	t.Cleanup(core.Close)
	res := runJob(t, "resolve", "--db", path, "--core", core.URL, "--min-age", "300")
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "resolve: candidates=1 done=0 failed=0 left=1")
	r := getRow(t, db, g)
	assert.Equal(t, r.State.String, "UNKNOWN", "a stale inquiry resolved the new attempt")
	assert.Equal(t, r.Attempts, 2)
}
