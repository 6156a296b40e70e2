package postgres

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/poll"

	"dedup"
	"dedup/internal/testbed/pgtest"
	"dedup/ledger"
	"dedup/ledger/ledgertest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var ctx = context.Background()

var agoRE = regexp.MustCompile(`AGO\((\d+)\)`)

// dialect turns the suite's ?, NOW and AGO(n) into PostgreSQL's.
func dialect(q string) string {
	q = agoRE.ReplaceAllString(q, "(now() - make_interval(secs => $1))")
	return pgtest.Rebind(strings.ReplaceAll(q, "NOW", "now()"))
}

func connect(t *testing.T, db string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, db)
	assert.NilError(t, err)
	t.Cleanup(func() { c.Close(ctx) })
	return c
}

// Backend is the conformance suite's view of PostgreSQL: a fresh database
// per test in the test binary's throwaway cluster.
var Backend = ledgertest.Backend{
	New: func(t *testing.T) string { return pgtest.SharedDatabase(t) },
	Open: func(db string, opts ledger.Options) (ledger.Ledger, error) {
		return Open(db, opts)
	},
	Exec: func(t *testing.T, db, q string, args ...any) {
		t.Helper()
		_, err := connect(t, db).Exec(ctx, dialect(q), args...)
		assert.NilError(t, err)
	},
	QueryInt: func(t *testing.T, db, q string, args ...any) int64 {
		t.Helper()
		var n int64
		assert.NilError(t, connect(t, db).QueryRow(ctx, dialect(q), args...).Scan(&n))
		return n
	},
	Columns: func(t *testing.T, db string) []string {
		t.Helper()
		rows, err := connect(t, db).Query(ctx, "SELECT column_name FROM information_schema.columns WHERE table_name='tx' ORDER BY ordinal_position")
		assert.NilError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		assert.NilError(t, err)
		return names
	},
	HoldWriteLock: func(t *testing.T, db string) func() {
		t.Helper()
		c := connect(t, db)
		tx, err := c.Begin(ctx)
		assert.NilError(t, err)
		_, err = tx.Exec(ctx, "LOCK TABLE tx IN EXCLUSIVE MODE")
		assert.NilError(t, err)
		return func() { tx.Rollback(ctx) }
	},
}

func TestConformance(t *testing.T) { ledgertest.Exercise(t, Backend) }

func TestOpenErrorNamesHostNeverPassword(t *testing.T) {
	port, err := pgtest.FreePort("127.0.0.1")
	assert.NilError(t, err)
	dsn := fmt.Sprintf("postgres://relay:s3cret-pw@127.0.0.1:%d/dedup?sslmode=disable", port)
	_, err = Open(dsn, ledger.Options{})
	assert.ErrorContains(t, err, fmt.Sprintf("127.0.0.1:%d", port))
	assert.Assert(t, !strings.Contains(err.Error(), "s3cret-pw"), "the password leaked: %v", err)

	err = CheckURL("postgres://relay:s3cret-pw@host:notaport/dedup", false)
	assert.Assert(t, err != nil)
	assert.Assert(t, !strings.Contains(err.Error(), "s3cret-pw"), "the password leaked: %v", err)
}

// No URL form shows its password: not the user-info one, not password=,
// not sslpassword=, in Redact, in an open error, or in CheckURL's error.
func TestNoURLFormShowsItsPassword(t *testing.T) {
	port, err := pgtest.FreePort("127.0.0.1")
	assert.NilError(t, err)
	for _, dsn := range []string{
		fmt.Sprintf("postgres://relay:s3cret-pw@127.0.0.1:%d/dedup?sslmode=disable", port),
		fmt.Sprintf("postgres://relay@127.0.0.1:%d/dedup?sslmode=disable&password=s3cret-pw", port),
		fmt.Sprintf("postgresql://relay@127.0.0.1:%d/dedup?sslpassword=s3cret-pw&sslmode=disable", port),
		fmt.Sprintf("postgres://relay:s3cret-pw@127.0.0.1:%d,127.0.0.1:%d/dedup?password=s3cret-pw&sslmode=disable", port, port),
	} {
		t.Run(Redact(dsn), func(t *testing.T) {
			assert.Assert(t, CarriesPassword(dsn))
			assert.Assert(t, !strings.Contains(Redact(dsn), "s3cret"), Redact(dsn))
			assert.Assert(t, strings.Contains(Redact(dsn), "sslmode=disable"), Redact(dsn))
			_, err := Open(dsn, ledger.Options{})
			assert.Assert(t, err != nil)
			assert.Assert(t, !strings.Contains(err.Error(), "s3cret"), "the password leaked: %v", err)
		})
	}
	assert.Assert(t, !CarriesPassword("postgres://relay@db1/dedup?sslmode=verify-full"))
}

// A host that is not loopback needs verified TLS: an absent sslmode,
// prefer or require is refused (naming the fix) unless insecure is given.
func TestNonLoopbackHostNeedsVerifiedTLS(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	for _, tc := range []struct {
		dsn string
		ok  bool
	}{
		{"postgres://relay@db1.bank:5432/dedup", false},
		{"postgres://relay@db1.bank:5432/dedup?sslmode=prefer", false},
		{"postgres://relay@db1.bank:5432/dedup?sslmode=require", false},
		{"postgres://relay@10.1.2.3:5432/dedup?sslmode=disable", false},
		{"postgres://relay@127.0.0.1:5432,db2.bank:5432/dedup?sslmode=require&target_session_attrs=read-write", false},
		{"postgres://relay@db1.bank:5432/dedup?sslmode=verify-full", true},
		{"postgres://relay@db1.bank:5432/dedup?sslmode=verify-ca", true},
		{"postgres://relay@127.0.0.1:5432/dedup", true},
		{"postgres://relay@localhost:5432/dedup?sslmode=disable", true},
		{"postgres://relay@[::1]:5432/dedup?sslmode=disable", true},
		{"postgres://relay@/dedup?host=/var/run/postgresql", true},
	} {
		t.Run(tc.dsn, func(t *testing.T) {
			err := CheckURL(tc.dsn, false)
			if tc.ok {
				assert.NilError(t, err)
				return
			}
			assert.ErrorContains(t, err, "sslmode=verify-full")
			assert.NilError(t, CheckURL(tc.dsn, true), "--db-insecure did not allow it")
		})
	}
}

// A URL with several hosts must ask for the writable primary: without
// target_session_attrs=read-write (or primary) a relay may settle on a
// standby and answer E902 to every new GUID. --db-insecure does not lift it.
func TestMultiHostURLNeedsReadWrite(t *testing.T) {
	const hosts = "postgres://relay@127.0.0.1:5432,127.0.0.2:5432,127.0.0.3:5432/dedup?sslmode=disable"
	for _, tc := range []struct {
		dsn string
		ok  bool
	}{
		{hosts, false},
		{hosts + "&target_session_attrs=any", false},
		{hosts + "&target_session_attrs=read-only", false},
		{hosts + "&target_session_attrs=read-write", true},
		{hosts + "&target_session_attrs=primary", true},
		{"postgres://relay@127.0.0.1:5432/dedup?sslmode=disable", true},
		{"postgres://relay@127.0.0.1:5432/dedup", true}, // prefer: one host tried twice is still one host
	} {
		t.Run(tc.dsn, func(t *testing.T) {
			for _, insecure := range []bool{false, true} {
				err := CheckURL(tc.dsn, insecure)
				if tc.ok {
					assert.NilError(t, err)
					continue
				}
				assert.ErrorContains(t, err, "target_session_attrs=read-write")
			}
		})
	}
}

// A password file that group or others can read is refused, naming it.
func TestLoosePassfileIsRefused(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(dir, "pgpass")
	assert.NilError(t, os.WriteFile(pass, []byte("*:*:*:relay:pw\n"), 0o644))
	assert.NilError(t, os.Chmod(pass, 0o644))
	_, err := Open("postgres://relay@127.0.0.1:1/dedup?sslmode=disable&passfile="+pass, ledger.Options{})
	assert.ErrorContains(t, err, "passfile "+pass+" has mode 0644")
	t.Setenv("PGPASSFILE", pass)
	_, err = Open("postgres://relay@127.0.0.1:1/dedup?sslmode=disable", ledger.Options{})
	assert.ErrorContains(t, err, "passfile "+pass+" has mode 0644")
	assert.NilError(t, os.Chmod(pass, 0o600))
	_, err = Open("postgres://relay@127.0.0.1:1/dedup?sslmode=disable", ledger.Options{})
	assert.Assert(t, err != nil && !strings.Contains(err.Error(), "passfile"), "a 0600 passfile was refused: %v", err)
}

// A session whose commits are not durable is refused unless the operator
// accepts that with --synchronous normal.
func TestNonDurableSessionIsRefused(t *testing.T) {
	db := pgtest.SharedDatabase(t)
	for _, sc := range []string{"off", "local", "remote_write"} {
		dsn := db + "&options=-c%20synchronous_commit%3D" + sc
		_, err := Open(dsn, ledger.Options{})
		assert.ErrorContains(t, err, "synchronous_commit is \""+sc+"\"")
		l, err := Open(dsn, ledger.Options{Synchronous: "normal"})
		assert.NilError(t, err)
		l.Close()
	}
}

// A server that does not fsync, or does not write full pages, can lose or
// tear commits at a power cut: refused like a non-durable session, and
// accepted under --synchronous normal with one warning naming the setting.
func TestServerWithoutFsyncOrFullPagesIsRefused(t *testing.T) {
	for _, setting := range []string{"fsync", "full_page_writes"} {
		t.Run(setting, func(t *testing.T) {
			pg, err := pgtest.Start(pgtest.Options{Settings: []string{setting + "=off"}})
			assert.NilError(t, err)
			defer pg.Remove()
			name, err := pg.NewDatabase()
			assert.NilError(t, err)
			db := pg.URL(name)
			_, err = Open(db, ledger.Options{})
			assert.Check(t, is.ErrorContains(err, "the server's "+setting+" is \"off\""))
			var warnings []string
			l, err := Open(db, ledger.Options{Synchronous: "normal", Warn: func(msg string, args ...any) {
				warnings = append(warnings, fmt.Sprint(msg, args))
			}})
			assert.NilError(t, err)
			l.Close()
			assert.Check(t, len(warnings) == 1 && strings.Contains(warnings[0], setting), "want one warning naming %s: %v", setting, warnings)
		})
	}
}

// Every session is bounded like SQLite's busy timeout.
func TestSessionsAreBounded(t *testing.T) {
	db := pgtest.SharedDatabase(t)
	l, err := Open(db, ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	c, err := l.pool.Acquire(ctx)
	assert.NilError(t, err)
	defer c.Release()
	for _, p := range []string{"lock_timeout", "statement_timeout"} {
		var v string
		assert.NilError(t, c.QueryRow(ctx, "SHOW "+p).Scan(&v))
		assert.Equal(t, v, "5s", p)
	}
}

// The database stopped and started again: writes fail while it is down
// (the relay answers E902) and succeed again without reopening the ledger.
func TestLedgerOutlivesADatabaseRestart(t *testing.T) {
	c, err := pgtest.Start(pgtest.Options{})
	assert.NilError(t, err)
	defer c.Remove()
	name, err := c.NewDatabase()
	db := c.URL(name)
	assert.NilError(t, err)
	l, err := Open(db, ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	ok, err := l.Claim(ctx, "G1", "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok)
	assert.NilError(t, c.StopServer("immediate"))
	_, err = l.Claim(ctx, "G2", "TRF00001", []byte("r"))
	assert.Assert(t, err != nil, "a claim succeeded while the database was down")
	assert.NilError(t, c.StartServer())
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err = l.Claim(ctx, "G3", "TRF00001", []byte("r"))
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	assert.NilError(t, err)
	assert.Assert(t, ok)
	r, err := l.Get(ctx, "G1")
	assert.NilError(t, err)
	assert.Assert(t, r != nil, "a committed claim was lost across the restart")
	r, err = l.Get(ctx, "G2")
	assert.NilError(t, err)
	assert.Assert(t, r == nil, "a claim reported as failed exists")
}

// One write's failure is that write's alone: a batch in which one
// statement fails (here a CHECK violation: an outcome with a state the
// table refuses) commits every other write, and each caller gets its own
// result. Driven through runBatch directly, so that the batch is exactly
// these writes.
func TestOneFailingStatementFailsOnlyItsOwnWrite(t *testing.T) {
	db := pgtest.SharedDatabase(t)
	l, err := Open(db, ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	g := func(i int) string { return fmt.Sprintf("20261129BAT%021d", i) }
	for i := 1; i <= 2; i++ {
		ok, err := l.Claim(ctx, g(i), "TRF00001", []byte("r"))
		assert.NilError(t, err)
		assert.Assert(t, ok)
	}
	ops := []*wop{
		{key: g(3), sql: ledger.SQL.Claim.Postgres, args: []any{g(3), "TRF00001", []byte("r")}},
		{key: g(2), sql: ledger.SQL.Finish.Postgres, args: []any{"BOGUS", "0000", []byte("x"), g(2), 1}}, // violates tx's CHECK
		{key: g(1), sql: ledger.SQL.Finish.Postgres, args: []any{"DONE", "0000", []byte("x"), g(1), 1}},
		{key: g(4), sql: ledger.SQL.Claim.Postgres, args: []any{g(4), "TRF00001", []byte("r")}},
	}
	for _, o := range ops {
		o.done = make(chan error, 1)
	}
	l.runBatch(ops)
	for i, o := range ops {
		err := <-o.done
		if i == 1 {
			assert.Check(t, err != nil, "the failing statement was reported committed")
			continue
		}
		assert.Check(t, err, "write %d failed for another write's statement", i)
		assert.Check(t, is.Equal(o.n, int64(1)), "write %d affected %d rows", i, o.n)
	}
	for i, want := range map[int]dedup.State{1: dedup.StateDone, 2: dedup.StateSent, 3: dedup.StateSent, 4: dedup.StateSent} {
		r, err := l.Get(ctx, g(i))
		assert.NilError(t, err)
		assert.Assert(t, r != nil, "%s has no row", g(i))
		assert.Check(t, is.Equal(r.State, want), g(i))
	}
}

// TestABatchStalledOnARowLockHoldsUpOnlyItsOwnWrites: another session
// (a person in psql, a tool's transaction) holds a row's lock, so the
// batch carrying that row's finish waits, for up to the lock timeout.
// New claims meanwhile must commit through the other writer, before the
// lock is released; with one writer they would all queue behind the
// stalled batch.
func TestABatchStalledOnARowLockHoldsUpOnlyItsOwnWrites(t *testing.T) {
	db := pgtest.SharedDatabase(t)
	l, err := Open(db, ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	const locked = "20261206LCK000000000000000000001"
	ok, err := l.Claim(ctx, locked, "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok)

	holder := connect(t, db)
	tx, err := holder.Begin(ctx)
	assert.NilError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SELECT 1 FROM tx WHERE guid = $1 FOR UPDATE", locked)
	assert.NilError(t, err)

	stalled := make(chan error, 1)
	go func() {
		_, err := l.Finish(ctx, locked, 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
		stalled <- err
	}()
	// The finish is waiting on the lock once a session of the ledger's
	// waits on a transaction lock.
	watch := connect(t, db)
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		var n int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			return poll.Error(err)
		}
		if n == 0 {
			return poll.Continue("the finish is not waiting on the row lock yet")
		}
		return poll.Success()
	}, poll.WithTimeout(ledger.BusyTimeout/2))

	for i := 0; i < 20; i++ {
		g := fmt.Sprintf("20261206NEW%021d", i)
		ok, err := l.Claim(ctx, g, "TRF00001", []byte("r"))
		assert.NilError(t, err, "claim %s behind the stalled batch", g)
		assert.Check(t, ok, g)
	}
	select {
	case err := <-stalled:
		t.Fatalf("the finish ended (%v) before the lock was released: the claims did not run beside a stalled batch", err)
	default:
	}

	assert.NilError(t, tx.Rollback(ctx))
	assert.NilError(t, <-stalled, "the finish once the lock was released")
	r, err := l.Get(ctx, locked)
	assert.NilError(t, err)
	assert.Check(t, is.Equal(r.State, dedup.StateDone))
}

// TestOneQueryAnswersEachConfirmationForItsOwnGUIDAndAttempt drives confirmMany with
// a batch built by hand, so that the batched path runs whatever the
// scheduler does: the same GUID asked with two attempts, GUIDs without a
// row between held ones, and a finished row. A mix-up of positions gives
// a holder its neighbour's answer.
func TestOneQueryAnswersEachConfirmationForItsOwnGUIDAndAttempt(t *testing.T) {
	db := pgtest.SharedDatabase(t)
	l, err := Open(db, ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	g := func(i int) string { return fmt.Sprintf("20261201CNF%021d", i) }
	for _, i := range []int{1, 3, 4} {
		ok, err := l.Claim(ctx, g(i), "TRF00001", []byte("r"))
		assert.NilError(t, err)
		assert.Assert(t, ok)
	}
	ok, err := l.Finish(ctx, g(4), 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("x")})
	assert.NilError(t, err)
	assert.Assert(t, ok)
	batch := []*confirmation{
		{guid: g(2), attempt: 1}, // no row
		{guid: g(1), attempt: 2}, // another attempt
		{guid: g(1), attempt: 1}, // held
		{guid: g(4), attempt: 1}, // finished
		{guid: g(5), attempt: 1}, // no row
		{guid: g(3), attempt: 1}, // held
	}
	want := []bool{false, false, true, false, false, true}
	for _, c := range batch {
		c.done = make(chan struct{})
	}
	l.confirmMany(batch)
	for i, c := range batch {
		<-c.done
		assert.NilError(t, c.err)
		assert.Check(t, is.Equal(c.chk.Held, want[i]), "position %d (%s, attempt %d)", i, c.guid, c.attempt)
		if want[i] {
			assert.Check(t, c.chk.Age >= 0 && c.chk.Age < 10*time.Second, "age %v", c.chk.Age)
			assert.Check(t, !c.chk.Now.IsZero(), "position %d: no clock read", i)
		}
	}
}

// TestRecurringReadsUseTheIndexOnceTheTableGrew: a relay that starts on an
// almost empty ledger runs its recurring statements (a confirmation of
// many claims, of one, a retransmission's read, the orphan sweep) while the
// table is small. PostgreSQL keeps a prepared statement's generic plan
// after five runs; one fixed then as a sequential scan (as `= ANY($1)` was
// on a table of a few dozen pages) would read the whole table on every run
// as the ledger grew, until the next ANALYZE. Each must stay a lookup in an
// index in the same session however the table grew.
func TestRecurringReadsUseTheIndexOnceTheTableGrew(t *testing.T) {
	db := pgtest.SharedDatabase(t) // a database of its own: its counts are this test's
	l, err := Open(db, ledger.Options{Conns: 1})
	assert.NilError(t, err)
	closed := false
	defer func() {
		if !closed {
			l.Close()
		}
	}()
	g := func(i int) string { return fmt.Sprintf("20261201PLN%021d", i) }
	run := func(from int) {
		batch := make([]*confirmation, 8)
		for i := range batch {
			batch[i] = &confirmation{guid: g(from + i), attempt: 1, done: make(chan struct{})}
		}
		l.confirmMany(batch)
		for _, c := range batch {
			<-c.done
			assert.NilError(t, c.err)
		}
		_, err := l.confirmOne(ctx, g(from), 1)
		assert.NilError(t, err)
		_, err = l.Get(ctx, g(from))
		assert.NilError(t, err)
		_, err = l.SweepOrphans(ctx, time.Hour)
		assert.NilError(t, err)
	}
	c := connect(t, db)
	grow := func(from, to int) {
		_, err := c.Exec(ctx, `INSERT INTO tx(guid,tx_code,state,attempts,updated_at)
SELECT format('20261201PLN%s', lpad(i::text, 21, '0')), 'TRF00001', 'DONE', 1, now() FROM generate_series($1::int, $2::int) i`, from, to)
		assert.NilError(t, err)
	}
	grow(1000000, 1001999)    // a relay's first seconds: a few dozen pages
	for i := 0; i < 10; i++ { // past the five custom plans
		run(i * 8)
	}
	grow(1000, 200999)
	for i := 0; i < 10; i++ { // the same session, the table grown
		run(1000 + i*8)
	}
	// A session's table counts reach pg_stat_user_tables when it ends.
	l.Close()
	closed = true
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		var n int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'dedup'").Scan(&n); err != nil {
			return poll.Error(err)
		}
		if n > 0 {
			return poll.Continue("%d ledger sessions still open", n)
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second))
	var read int64
	assert.NilError(t, c.QueryRow(ctx, "SELECT seq_tup_read FROM pg_stat_user_tables WHERE relname = 'tx'").Scan(&read))
	// On the small table a sequential scan may be the right plan: 40
	// statements read at most 80,000 rows. One on the grown table reads
	// all 202,000.
	assert.Assert(t, read < 202000, "a recurring read scanned the whole grown table row by row (%d rows read): its plan was fixed while the table was small", read)
}

// TestGatherTakesWhatWaitsUpToTheBatchLimit: the first item is waited for,
// the ones queued behind it are taken without waiting, never more than
// max; a closed quit ends the loop.
func TestGatherTakesWhatWaitsUpToTheBatchLimit(t *testing.T) {
	ch := make(chan int, 10)
	quit := make(chan struct{})
	for i := 1; i <= 5; i++ {
		ch <- i
	}
	batch, open := gather(ch, quit, nil, 3)
	assert.Assert(t, open)
	assert.DeepEqual(t, batch, []int{1, 2, 3})
	batch, open = gather(ch, quit, batch, 3)
	assert.Assert(t, open)
	assert.DeepEqual(t, batch, []int{4, 5}) // afresh, and without waiting for a sixth
	close(quit)
	_, open = gather(ch, quit, batch, 3)
	assert.Assert(t, !open, "gather went on after quit was closed")
}

// backendsOf counts the server processes of db's database that a dedup
// pool opened (application_name dedup), seen from another session.
func backendsOf(t *testing.T, db string) int64 {
	t.Helper()
	var n int64
	assert.NilError(t, connect(t, db).QueryRow(ctx,
		"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'dedup'").Scan(&n))
	return n
}

// A relay's Open with WarmAtOpen has every connection of its pool open
// before it returns (so that its first claims do not each wait for a new
// server process); without it, Open leaves only the one it used.
func TestWarmAtOpenOpensThePoolsConnectionsBeforeOpenReturns(t *testing.T) {
	db := pgtest.SharedDatabase(t)
	cold, err := Open(db, ledger.Options{Conns: 6})
	assert.NilError(t, err)
	assert.Equal(t, cold.pool.Stat().TotalConns(), int32(1))
	assert.NilError(t, cold.Close())

	var rep ledger.WarmReport
	var warmErr error
	calls := 0
	l, err := Open(db, ledger.Options{Conns: 6, WarmAtOpen: func(r ledger.WarmReport, err error) { rep, warmErr, calls = r, err, calls+1 }})
	assert.NilError(t, err)
	defer l.Close()
	assert.Equal(t, calls, 1)
	assert.NilError(t, warmErr)
	assert.Equal(t, rep.Conns, 6)
	assert.Equal(t, rep.Pages+rep.Leaves, 0)
	assert.Equal(t, l.pool.Stat().TotalConns(), int32(6))
	assert.Equal(t, l.pool.Stat().IdleConns(), int32(6))
	// The server has them too (at least: the cold pool's one may not have
	// exited yet).
	assert.Assert(t, backendsOf(t, db) >= 6)
}

// A server that refuses some of the connections (a role's CONNECTION
// LIMIT) ends the warming with an error that says so; the ledger opens and
// writes all the same with the connections it has.
func TestWarmAtOpenThatCannotOpenEveryConnectionStillOpensTheLedger(t *testing.T) {
	db := pgtest.SharedDatabase(t)
	owner, err := Open(db, ledger.Options{})
	assert.NilError(t, err) // the schema, applied by its owner
	assert.NilError(t, owner.Close())
	role := fmt.Sprintf("warm_limit_%d", time.Now().UnixNano())
	pgtest.Exec(t, db, "CREATE ROLE "+role+" LOGIN CONNECTION LIMIT 3")
	pgtest.Exec(t, db, "GRANT SELECT, INSERT, UPDATE, DELETE ON tx, tx_event TO "+role)
	pgtest.Exec(t, db, "GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO "+role)
	u, err := url.Parse(db)
	assert.NilError(t, err)
	u.User = url.User(role)

	var warmErr error
	var rep ledger.WarmReport
	l, err := Open(u.String(), ledger.Options{Conns: 6, WarmAtOpen: func(r ledger.WarmReport, err error) { rep, warmErr = r, err }})
	assert.NilError(t, err)
	defer l.Close()
	assert.ErrorContains(t, warmErr, "open connection")
	assert.Equal(t, rep.Conns, 3)
	assert.Equal(t, l.pool.Stat().IdleConns(), int32(3))
	won, err := l.Claim(ctx, "20261205WRM000000000000000000001", "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, won)
}

// TestUpgradeOpensTheCriticalFindingsOfTheRunsKept: a ledger of an older
// schema version (no critical_finding table) gains its open findings when
// the owner's binary applies this version's schema, once.
func TestUpgradeOpensTheCriticalFindingsOfTheRunsKept(t *testing.T) {
	ledgertest.ExerciseUpgrade(t, Backend, func(t *testing.T, db string) {
		pgtest.Exec(t, db, "DROP TABLE critical_finding")
		pgtest.Exec(t, db, "COMMENT ON FUNCTION "+approveFunction+" IS 'dedup schema older'")
	})
}
