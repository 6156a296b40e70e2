package postgres

import (
	"errors"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"

	"dedup/internal/testbed/pgtest"
	"dedup/ledger"
)

// ownCluster starts a cluster for this test alone (its settings change
// under the ledger) and returns it with the URL of a database in it.
func ownCluster(t *testing.T) (*pgtest.Cluster, string) {
	t.Helper()
	pg, err := pgtest.Start(pgtest.Options{})
	assert.NilError(t, err)
	t.Cleanup(pg.Remove)
	name, err := pg.NewDatabase()
	assert.NilError(t, err)
	return pg, pg.URL(name)
}

// waitSyncRep waits until a dedup session waits for the synchronous
// standby and returns its backend's pid.
func waitSyncRep(t *testing.T, admin string) int {
	t.Helper()
	var pid int
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		err := connect(t, admin).QueryRow(ctx, `SELECT pid FROM pg_stat_activity
WHERE application_name='dedup' AND wait_event='SyncRep' LIMIT 1`).Scan(&pid)
		if err != nil {
			return poll.Continue("no session waits for the standby yet: %v", err)
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(20*time.Millisecond))
	return pid
}

// A claim whose COMMIT waited for a synchronous standby and was cancelled
// (PostgreSQL then commits locally and says so in a WARNING) is not a
// claim: the caller gets ErrNotCommitted and sends nothing, although the
// row exists on this server. The same for one with no answer by its
// deadline. On every write path: a lone autocommit statement, an explicit
// transaction (the test hooks), a group commit.
func TestCommitNotReplicatedIsNotAClaim(t *testing.T) {
	pg, db := ownCluster(t)
	admin := pg.URL("postgres")
	l0, err := Open(db, ledger.Options{}) // the schema, before commits start to wait
	assert.NilError(t, err)
	l0.Close()
	// A standby that never comes: every commit waits for it.
	pgtest.Exec(t, admin, "ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
	pgtest.Exec(t, admin, "SELECT pg_reload_conf()")
	for _, tc := range []struct {
		name string
		opts ledger.Options
	}{
		{"autocommit statement", ledger.Options{MaxBatch: 1}},
		{"explicit transaction", ledger.Options{MaxBatch: 1, Faults: &ledger.Faults{}}},
		{"group commit", ledger.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The relay counts what OnNotCommitted is told in
			// dedup_ledger_not_committed_total{reason}.
			reasons := make(chan string, 16)
			tc.opts.OnNotCommitted = func(r string) { reasons <- r }
			l, err := Open(db, tc.opts)
			assert.NilError(t, err)
			defer l.Close()
			g := guidFor(tc.name)
			type result struct {
				ok  bool
				err error
			}
			done := make(chan result, 1)
			go func() {
				ok, err := l.Claim(ctx, g, "TRF00001", []byte("r"))
				done <- result{ok, err}
			}()
			pid := waitSyncRep(t, admin)
			pgtest.Exec(t, admin, "SELECT pg_cancel_backend($1)", pid)
			r := <-done
			assert.Assert(t, errors.Is(r.err, ledger.ErrNotCommitted), "%v", r.err)
			assert.Assert(t, !r.ok, "a claim committed only locally was reported as mine")
			row, err := l.Get(ctx, g)
			assert.NilError(t, err)
			assert.Assert(t, row != nil, "the row was not committed locally: the test did not exercise the warning")
			assert.Equal(t, len(reasons), 1, "OnNotCommitted was not told exactly once")
			assert.Equal(t, <-reasons, ledger.NotCommittedWarning)
		})
	}

	l, err := Open(db, ledger.Options{MaxBatch: 1})
	assert.NilError(t, err)
	defer l.Close()
	start := time.Now()
	ok, err := l.Claim(ctx, "20261129TST000000000000000000999", "TRF00001", []byte("r"))
	assert.Assert(t, err != nil && !ok, "a claim with no answer by its deadline was reported as mine")
	assert.Assert(t, time.Since(start) < ledger.BusyTimeout+5*time.Second, "the deadline did not bound the wait")

	// The standby is no longer required: writes commit again.
	pgtest.Exec(t, admin, "ALTER SYSTEM RESET synchronous_standby_names")
	pgtest.Exec(t, admin, "SELECT pg_reload_conf()")
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		ok, err := l.Claim(ctx, "20261129TST000000000000000000998", "TRF00001", []byte("r"))
		if err != nil || !ok {
			return poll.Continue("claim: %v %v", ok, err)
		}
		return poll.Success()
	}, poll.WithTimeout(30*time.Second), poll.WithDelay(100*time.Millisecond))
}

func guidFor(name string) string {
	g := []byte("20261129TST000000000000000000000")
	for i := 0; i < len(name) && i < 21; i++ {
		g[11+i] = "0123456789"[int(name[i])%10]
	}
	return string(g)
}

// A pooled session whose server is no longer the primary (read-only, as a
// demoted primary or a standby is) carries no claim: the write fails with
// ErrNotCommitted, the pool drops its sessions, and with a multi-host URL
// (target_session_attrs=read-write) the next claim goes to the writable
// server; the failed claim exists nowhere.
func TestDemotedServerIsLeftForThePrimary(t *testing.T) {
	a, dbA := ownCluster(t)
	b, dbB := ownCluster(t)
	_ = dbA
	name := "dedup_ha"
	for _, c := range []*pgtest.Cluster{a, b} {
		// The same database and schema on both, as replication keeps them.
		pgtest.Exec(t, c.URL("postgres"), "CREATE DATABASE "+name)
		l, err := Open(c.URL(name), ledger.Options{})
		assert.NilError(t, err)
		l.Close()
	}
	url := "postgres://postgres@" + hostPort(a) + "," + hostPort(b) + "/" + name + "?sslmode=disable&target_session_attrs=read-write"
	_ = dbB
	reasons := make(chan string, 16)
	l, err := Open(url, ledger.Options{MaxBatch: 1, OnNotCommitted: func(r string) { reasons <- r }})
	assert.NilError(t, err)
	defer l.Close()
	ok, err := l.Claim(ctx, "20261129TST000000000000000000001", "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok)
	assert.Equal(t, countRows(t, a.URL(name)), int64(1), "the first claim did not go to the first host")

	// A is demoted: read-only from its next statement on.
	pgtest.Exec(t, a.URL("postgres"), "ALTER SYSTEM SET default_transaction_read_only = on")
	pgtest.Exec(t, a.URL("postgres"), "SELECT pg_reload_conf()")
	var failed string
	for i := 2; ; i++ {
		assert.Assert(t, i < 200, "the pooled session never saw its server read-only")
		g := guidFor(string(rune('a'+i%26)) + string(rune('a'+i/26)))
		ok, err := l.Claim(ctx, g, "TRF00001", []byte("r"))
		if err != nil {
			assert.Assert(t, errors.Is(err, ledger.ErrNotCommitted), "%v", err)
			assert.Assert(t, !ok)
			assert.Equal(t, len(reasons), 1, "OnNotCommitted was not told exactly once")
			assert.Equal(t, <-reasons, ledger.NotCommittedNotPrimary)
			failed = g
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ok, err = l.Claim(ctx, "20261129TST000000000000000000777", "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok, "the next claim did not find the writable server")
	assert.Equal(t, countWhere(t, b.URL(name), "20261129TST000000000000000000777"), int64(1), "the claim did not go to the primary")
	assert.Equal(t, countWhere(t, a.URL(name), failed)+countWhere(t, b.URL(name), failed), int64(0), "the failed claim exists somewhere")
}

func hostPort(c *pgtest.Cluster) string { return c.Host + ":" + itoa(c.Port) }

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func countRows(t *testing.T, url string) int64 {
	t.Helper()
	var n int64
	assert.NilError(t, connect(t, url).QueryRow(ctx, "SELECT count(*) FROM tx").Scan(&n))
	return n
}

func countWhere(t *testing.T, url, g string) int64 {
	t.Helper()
	var n int64
	assert.NilError(t, connect(t, url).QueryRow(ctx, "SELECT count(*) FROM tx WHERE guid=$1", g).Scan(&n))
	return n
}
