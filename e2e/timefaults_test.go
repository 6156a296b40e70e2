package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"

	"dedup/internal/channel"
	"dedup/internal/testbed/pgtest"
)

// Rule 14: while the ledger cannot be written (another process holds the
// write lock past the busy timeout: a backup, a long script; on
// PostgreSQL, LOCK TABLE as a failover's outage would) but can still be
// read, every known GUID is answered from its row exactly as the state
// table says; only a GUID without a row, or a FAILED row that cannot be
// reclaimed now, gets E902. Nothing is sent and no row changes.
func TestWriteOutageTellsKnownGUIDsTheTruth(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	r := startRelay(t, path, c.url)
	gU, gS, gD, gF, gX, gNew := newGUID(), newGUID(), newGUID(), newGUID(), newGUID(), newGUID()
	tgD := telegram(t, gD)
	assert.Equal(t, code(send(t, r.addr, tgD)), "0000")
	stored := getRow(t, db, gD).Response
	insert(t, db, gU, "UNKNOWN", "E901", telegram(t, gU), nil, 1, "-10 seconds")
	insert(t, db, gS, "SENT", nil, telegram(t, gS), nil, 1, "-1 seconds")
	insert(t, db, gF, "FAILED", "E902", telegram(t, gF), nil, 1, "-10 seconds")
	insert(t, db, gX, "UNKNOWN", "E901", telegram(t, gX), nil, 1, "-10 seconds")
	before := rowsSnapshot(t, db)
	sentBefore := c.stats(t).Transfers

	unlock := db.lock(t)
	cases := []struct {
		name string
		tg   []byte
		want string
	}{
		{"UNKNOWN", telegram(t, gU), "E901"},
		{"SENT", telegram(t, gS), "E903"},
		{"DONE", tgD, "0000"},
		{"another request under a known GUID", telegram(t, gX, amount(777)), "E904"},
		{"FAILED", telegram(t, gF), "E902"},
		{"a GUID with no row", telegram(t, gNew), "E902"},
	}
	replies := make([][]byte, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = send(t, r.addr, tc.tg)
		}()
	}
	wg.Wait()
	unlock()
	for i, tc := range cases {
		assert.Check(t, is.Equal(code(replies[i]), tc.want), tc.name)
		if tc.want == "0000" {
			assert.Check(t, is.Equal(string(replies[i]), string(stored)), "the DONE row's reply was not answered byte for byte")
		} else {
			assert.Check(t, is.Equal(string(replies[i]), string(expectReply(tc.tg, tc.want, nil))), tc.name)
		}
	}
	assert.Equal(t, c.stats(t).Transfers, sentBefore, "something was sent while the ledger could not be written")
	assert.DeepEqual(t, rowsSnapshot(t, db), before)
	r.waitLog(t, "answered from the row")
}

// docs/ledger.md, purge: nothing in a purge waits for readers while it
// holds or blocks the write lock. A reader keeps a snapshot open (a backup,
// inspect, a report) while purge deletes thousands of rows and channels
// keep sending: every transfer is applied and recorded DONE (a purge whose
// last checkpoint waited for the reader blocked every claim for the busy
// timeout: E902s and lost outcomes). The purged memos leave the WAL at a
// later checkpoint that waits for nobody: the next purge run, once the
// reader is gone.
func TestPurgeBesideAReaderStallsNoClaim(t *testing.T) {
	t.Parallel() // SQLite only: the PostgreSQL pass of scripts/test.sh leaves it out
	c := startCore(t, "--quiet")
	path := filepath.Join(t.TempDir(), "relay.db")
	db := openDB(t, path)
	db.applySchema(t)
	const n = 5000
	memo := []byte("PURGED-MEMO-5e1d")
	db.insertOldDone(t, n, append(make([]byte, 120), memo...), make([]byte, 109))
	r := startRelay(t, path, c.url)

	reader, err := db.DB.Conn(context.Background())
	assert.NilError(t, err)
	_, err = reader.ExecContext(context.Background(), "BEGIN")
	assert.NilError(t, err)
	var rows int
	assert.NilError(t, reader.QueryRowContext(context.Background(), "SELECT count(*) FROM tx").Scan(&rows))
	assert.Equal(t, rows, n)

	ctx, cancel := context.WithCancel(context.Background())
	loadDone := make(chan *channel.LoadReport, 1)
	go func() {
		rep, err := channel.Load(ctx, channel.LoadConfig{Relay: r.addr, Conns: 4, Duration: 10 * time.Minute,
			From: "11020030004001", To: "11020030004002", Amount: 1, Channel: "RDR"})
		assert.Check(t, err)
		loadDone <- rep
	}()
	res := runJob(t, "purge", "--db", path, "--days", "7")
	// Keep sending past the purge's end, where its checkpoint ran.
	time.Sleep(500 * time.Millisecond)
	cancel()
	rep := <-loadDone
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), fmt.Sprintf("purge: deleted=%d", n))
	assert.Assert(t, rep.Sent > 0)
	assert.DeepEqual(t, rep.ByCode, map[string]int{"0000": rep.Sent})
	assert.Equal(t, rep.Errors, 0)
	var notDone int
	assert.NilError(t, db.QueryRow("SELECT count(*) FROM tx WHERE state<>'DONE'").Scan(&notDone))
	assert.Equal(t, notDone, 0, "an outcome was lost while purge ran beside the reader")
	assert.Assert(t, strings.Contains(res.Stderr(), "could not be truncated"), "purge did not say that the reader kept the WAL")
	t.Logf("beside a reader: %d transfers during the purge, p50=%v p99=%v max=%v", rep.Sent, rep.P50, rep.P99, rep.Max)

	// The reader goes; the next run's checkpoint truncates the WAL.
	_, err = reader.ExecContext(context.Background(), "ROLLBACK")
	assert.NilError(t, err)
	reader.Close()
	assert.Equal(t, r.stop(t, 15), 0) // SIGTERM: no writer left to refill the WAL
	res = runJob(t, "purge", "--db", path, "--days", "7")
	res.Assert(t, icmd.Success)
	// The WAL only: SQLite's secure_delete zeroes deleted cells and freed
	// pages, but a B-tree page that split while the purged rows were new
	// may keep stale bytes in its unallocated gap, which only VACUUM
	// clears (docs/security.md says so).
	b, err := os.ReadFile(path + "-wal")
	if !os.IsNotExist(err) {
		assert.NilError(t, err)
		assert.Check(t, !strings.Contains(string(b), string(memo)), "a purged memo is still in the WAL")
	}
}

// docs/ledger.md "Clocks": a PostgreSQL server whose clock runs 600 s
// ahead of the hosts' (libfaketime in the server only), as after a
// failover to a node with a fast clock. Rows were written with true
// timestamps. resolve resolves nothing and exits 1, purge deletes nothing
// and exits 1, each naming both clocks; the relay sweeps nothing, keeps
// serving new transfers and exports the difference.
func TestFastLedgerClockDecidesNothingByAge(t *testing.T) {
	t.Parallel() // its own cluster: the PostgreSQL pass of scripts/test.sh leaves it out
	env, err := pgtest.FakeClock("+600")
	assert.NilError(t, err)
	pg, err := pgtest.Start(pgtest.Options{Env: env})
	assert.NilError(t, err)
	t.Cleanup(pg.Remove)
	name, err := pg.NewDatabase()
	assert.NilError(t, err)
	url := pg.URL(name)
	db := openDB(t, url)
	var skew float64
	assert.NilError(t, db.DB.QueryRow("SELECT extract(epoch FROM clock_timestamp()) - $1::float8", float64(time.Now().UnixMicro())/1e6).Scan(&skew))
	assert.Assert(t, skew > 590 && skew < 610, "the server's clock is not 600 s ahead (%v): is libfaketime working?", skew)
	db.applySchema(t)
	// Rows written by hosts with true clocks.
	at := func(ago time.Duration) string {
		return time.Now().Add(-ago).UTC().Format("2006-01-02 15:04:05.999999+00")
	}
	gU, gS, gD := newGUID(), newGUID(), newGUID()
	for _, r := range []struct {
		guid, state string
		rsp         any
		ago         time.Duration
	}{
		{gU, "UNKNOWN", "E901", 20 * time.Second},
		{gS, "SENT", nil, 30 * time.Second},
		{gD, "DONE", "0000", 7*24*time.Hour - 5*time.Minute},
	} {
		_, err := db.DB.Exec("INSERT INTO tx VALUES($1, 'TRF00001', $2, $3, $4, NULL, 1, $5::timestamptz)", r.guid, r.state, r.rsp, telegram(t, r.guid), at(r.ago))
		assert.NilError(t, err)
	}
	before := rowsSnapshot(t, db)
	c := startCore(t)

	res := runJob(t, "resolve", "--db", url, "--core", c.url, "--min-age", "300")
	assert.Equal(t, res.ExitCode, 1)
	assert.Check(t, strings.Contains(res.Stderr(), "the ledger's clock and this host's disagree"), res.Stderr())
	assert.Check(t, strings.Contains(res.Stderr(), "ledger 20") && strings.Contains(res.Stderr(), "host 20"), "the line does not name both clocks: %s", res.Stderr())
	assert.Equal(t, c.stats(t).LookupsByGUID[gU], 0, "resolve asked the core about a young row")

	res = runJob(t, "purge", "--db", url, "--days", "7")
	assert.Equal(t, res.ExitCode, 1)
	assert.Check(t, strings.Contains(res.Stderr(), "difference +"), res.Stderr())

	r := startRelay(t, url, c.url, "--orphan-after", "60", "--metrics-listen", "127.0.0.1:0")
	g := newGUID()
	assert.Equal(t, code(send(t, r.addr, telegram(t, g))), "0000", "the relay stopped serving new transfers")
	assert.Equal(t, code(send(t, r.addr, telegram(t, g))), "0000")
	m, _ := scrape(t, r.metricsAddr)
	assert.Check(t, m["dedup_ledger_clock_skew_seconds"] > 590, "skew exported: %v", m["dedup_ledger_clock_skew_seconds"])
	assert.Check(t, m[`dedup_age_decisions_skipped_total{what="sweep"}`] >= 1, "no sweep counted as skipped")
	assert.Check(t, m[`dedup_age_decisions_skipped_total{what="lease"}`] >= 1, "no lease check counted as skipped")
	r.waitLog(t, "the ledger's clock and this host's disagree")
	assert.Equal(t, r.stop(t, 15), 0)

	after := rowsSnapshot(t, db)
	for _, g := range []string{gU, gS, gD} {
		assert.Check(t, is.DeepEqual(after[g], before[g]), "%s changed although no age may be judged", g)
	}
	_ = sql.ErrNoRows
}
