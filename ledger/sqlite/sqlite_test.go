package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
	"dedup/ledger"
	"dedup/ledger/ledgertest"
)

var ctx = context.Background()

// rawDB opens the ledger file the way another tool would.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", path+"?_busy_timeout=5000")
	assert.NilError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

var agoRE = regexp.MustCompile(`AGO\((\d+)\)`)

// dialect turns the suite's NOW and AGO(n) into SQLite's.
func dialect(q string) string {
	q = agoRE.ReplaceAllString(q, "datetime('now', '-$1 seconds')")
	return strings.ReplaceAll(q, "NOW", "datetime('now')")
}

// Backend is the conformance suite's view of SQLite: a fresh file per test.
var Backend = ledgertest.Backend{
	New: func(t *testing.T) string { return filepath.Join(t.TempDir(), "ledger.db") },
	Open: func(db string, opts ledger.Options) (ledger.Ledger, error) {
		return Open(db, opts)
	},
	Exec: func(t *testing.T, db, q string, args ...any) {
		t.Helper()
		_, err := rawDB(t, db).Exec(dialect(q), args...)
		assert.NilError(t, err)
	},
	QueryInt: func(t *testing.T, db, q string, args ...any) int64 {
		t.Helper()
		var n int64
		assert.NilError(t, rawDB(t, db).QueryRow(dialect(q), args...).Scan(&n))
		return n
	},
	Columns: func(t *testing.T, db string) []string {
		t.Helper()
		rows, err := rawDB(t, db).Query("SELECT name FROM pragma_table_info('tx') ORDER BY cid")
		assert.NilError(t, err)
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			assert.NilError(t, rows.Scan(&n))
			names = append(names, n)
		}
		return names
	},
	HoldWriteLock: func(t *testing.T, db string) func() {
		t.Helper()
		conn, err := rawDB(t, db).Conn(ctx)
		assert.NilError(t, err)
		_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		assert.NilError(t, err)
		return func() {
			conn.ExecContext(ctx, "ROLLBACK")
			conn.Close()
		}
	},
}

func TestConformance(t *testing.T) { ledgertest.Exercise(t, Backend) }

// withoutRowidTx is tx as another build may declare it (docs/ledger.md):
// no statement of ours may depend on a rowid.
const withoutRowidTx = `CREATE TABLE tx (
    guid TEXT NOT NULL PRIMARY KEY, tx_code TEXT,
    state TEXT NOT NULL CHECK (state IN ('RECEIVED','SENT','DONE','UNKNOWN','FAILED')),
    rsp_code TEXT, request BLOB, response BLOB, attempts INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT NOT NULL DEFAULT (datetime('now'))) WITHOUT ROWID`

// TestConformanceWithoutRowid runs the whole suite on ledgers whose tx is
// WITHOUT ROWID.
func TestConformanceWithoutRowid(t *testing.T) {
	b := Backend
	b.New = func(t *testing.T) string {
		path := filepath.Join(t.TempDir(), "ledger.db")
		_, err := rawDB(t, path).Exec(withoutRowidTx)
		assert.NilError(t, err)
		return path
	}
	ledgertest.Exercise(t, b)
}

func TestOpenErrorNamesPathAndCause(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no-such-dir", "ledger.db")
	_, err := Open(path, ledger.Options{})
	assert.ErrorContains(t, err, path)
	assert.ErrorContains(t, err, "no such file or directory")
}

func TestOpenRejectsInMemory(t *testing.T) {
	_, err := Open(":memory:", ledger.Options{})
	assert.ErrorContains(t, err, "plain file")
}

// A damaged file is refused at start with its name, not one claim at a time.
func TestOpenRefusesACorruptFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path, ledger.Options{})
	assert.NilError(t, err)
	for i := 0; i < 50; i++ {
		_, err := l.Claim(ctx, fmt.Sprintf("G%031d", i), "TRF00001", make([]byte, 200))
		assert.NilError(t, err)
	}
	assert.NilError(t, l.Close())
	os.Remove(path + "-wal")
	os.Remove(path + "-shm")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	assert.NilError(t, err)
	_, err = f.WriteAt([]byte(strings.Repeat("garbage!", 512)), 0)
	assert.NilError(t, err)
	f.Close()
	_, err = Open(path, ledger.Options{})
	assert.ErrorContains(t, err, path)
	assert.ErrorContains(t, err, "not a usable SQLite ledger")
}

func TestUpdatedAtIsSQLiteUTCText(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	_, err = l.Claim(ctx, "G1", "TRF00001", []byte("r"))
	assert.NilError(t, err)
	r, err := l.Get(ctx, "G1")
	assert.NilError(t, err)
	assert.Assert(t, regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`).MatchString(r.UpdatedAt), r.UpdatedAt)
}

// A ledger created by an older build or another tool, whose tx is a rowid
// table declared without the index, keeps working: the schema adds the
// index, and purge deletes by guid.
func TestLedgerFromAnOlderBuildKeepsWorking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db := rawDB(t, path)
	_, err := db.Exec(`CREATE TABLE tx (guid TEXT NOT NULL PRIMARY KEY, tx_code TEXT,
state TEXT NOT NULL CHECK (state IN ('RECEIVED','SENT','DONE','UNKNOWN','FAILED')), rsp_code TEXT,
request BLOB, response BLOB, attempts INTEGER NOT NULL DEFAULT 0, updated_at TEXT NOT NULL DEFAULT (datetime('now')));
INSERT INTO tx VALUES('old-done','TRF00001','DONE','0000',x'00',x'00',1,datetime('now','-30 days'));
INSERT INTO tx VALUES('old-failed','TRF00001','FAILED','E902',x'00',NULL,1,datetime('now','-30 days'));`)
	assert.NilError(t, err)
	l, err := Open(path, ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	n, err := l.PurgeBatch(ctx, 7, 100)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(1))
	_, _, ok, err := l.Reclaim(ctx, "old-failed", nil, 3)
	assert.NilError(t, err)
	assert.Assert(t, ok)
	ok, err = l.Claim(ctx, "new", "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok)
	r, err := l.Get(ctx, "new")
	assert.NilError(t, err)
	assert.Equal(t, r.State, dedup.StateSent)
}

// A fresh ledger and its -wal and -shm are 0600 under umask 022; an
// existing file others can read is warned about, not changed.
func TestLedgerFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "relay.db")
	l, err := Open(path, ledger.Options{})
	assert.NilError(t, err)
	ok, err := l.Claim(ctx, "g1", "TRF00001", []byte("request"))
	assert.NilError(t, err)
	assert.Assert(t, ok)
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(f)
		assert.NilError(t, err)
		assert.Equal(t, fi.Mode().Perm(), os.FileMode(0o600), f)
	}
	assert.NilError(t, l.Close())

	assert.NilError(t, os.Chmod(path, 0o644))
	var warned []string
	l, err = Open(path, ledger.Options{Warn: func(msg string, args ...any) { warned = append(warned, fmt.Sprint(msg, args)) }})
	assert.NilError(t, err)
	defer l.Close()
	assert.Equal(t, len(warned), 1)
	assert.Assert(t, strings.Contains(warned[0], path) && strings.Contains(warned[0], "0644"), warned[0])
}

// doneRowsWithMemo claims and finishes n DONE rows (GUIDs prefix00,
// prefix01, ...) whose request and reply both carry memo.
func doneRowsWithMemo(t *testing.T, l *Ledger, prefix string, n int, memo string) {
	t.Helper()
	for i := 0; i < n; i++ {
		g := fmt.Sprintf("%s%02d", prefix, i)
		ok, err := l.Claim(ctx, g, "TRF00001", []byte("request with "+memo))
		assert.NilError(t, err)
		assert.Assert(t, ok)
		_, err = l.Finish(ctx, g, 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("reply " + memo)})
		assert.NilError(t, err)
	}
}

// A purged request's bytes (its memo) are in neither the file nor its WAL
// after the purge: secure_delete overwrites them, the last purge call
// checkpoints and empties the WAL.
func TestPurgedMemoIsNotInTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	l, err := Open(path, ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	memo := "SECRET-MEMO-4711"
	doneRowsWithMemo(t, l, "g", 50, memo)
	// Force the rows into the main file first, as a long-running ledger has them.
	_, err = rawDB(t, path).Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	assert.NilError(t, err)
	_, err = rawDB(t, path).Exec("UPDATE tx SET updated_at = datetime('now', '-30 days')")
	assert.NilError(t, err)
	for {
		n, err := l.PurgeBatch(ctx, 7, 10)
		assert.NilError(t, err)
		if n == 0 {
			break
		}
	}
	for _, f := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		assert.NilError(t, err)
		assert.Assert(t, !bytes.Contains(b, []byte(memo)), "the purged memo is still in %s", f)
	}
}

// autoCheckpointOf is the write connection's wal_autocheckpoint: the
// pages past which its commits checkpoint (0: off, as during a purge).
func autoCheckpointOf(t *testing.T, l *Ledger) int {
	t.Helper()
	var pages int
	assert.NilError(t, l.conn.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&pages))
	return pages
}

// A purge batch's commit runs no automatic checkpoint (its pause would
// count it as time the batch held the write lock): the write connection's
// wal_autocheckpoint is off while the purge runs and as it was once the
// last batch ended, and each batch that deleted rows checkpoints in the
// background instead, so the purged pages reach the file after the batch
// and before the next (the WAL here is far below the automatic
// checkpoint's 1000 pages: only that background checkpoint copies them).
func TestPurgeBatchCheckpointsInItsPauseNotInItsCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.db")
	l, err := Open(path, ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	assert.Equal(t, autoCheckpointOf(t, l), 1000)
	memo := "PAUSE-MEMO-0815"
	doneRowsWithMemo(t, l, "p", 20, memo)
	raw := rawDB(t, path)
	_, err = raw.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	assert.NilError(t, err)
	_, err = raw.Exec("UPDATE tx SET updated_at = datetime('now', '-30 days')")
	assert.NilError(t, err)
	_, err = raw.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	assert.NilError(t, err)
	inFile := func() bool {
		b, err := os.ReadFile(path)
		assert.NilError(t, err)
		return bytes.Contains(b, []byte(memo))
	}
	assert.Assert(t, inFile(), "the rows were not in the file before the purge")

	n, err := l.PurgeBatch(ctx, 7, 100)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(20))
	assert.Equal(t, autoCheckpointOf(t, l), 0, "the purge's commits would run the automatic checkpoint")
	l.checkpoints.Wait()
	assert.Assert(t, !inFile(), "no checkpoint after the batch: the purged pages are still only in the WAL")

	n, err = l.PurgeBatch(ctx, 7, 100)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(0))
	assert.Equal(t, autoCheckpointOf(t, l), 1000, "the automatic checkpoint stayed off after the purge")
}

// A purge that ends early, by a batch that fails or by being interrupted,
// turns the write connection's automatic checkpoint back on all the same:
// batch.Purge stops at the error, and the relay's writes through this
// connection must checkpoint as before.
func TestPurgeThatEndsEarlyTurnsTheAutomaticCheckpointBackOn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(t *testing.T, raw *sql.DB) context.Context
	}{
		{"a batch whose delete fails", func(t *testing.T, raw *sql.DB) context.Context {
			_, err := raw.Exec(`CREATE TRIGGER purge_fails BEFORE DELETE ON tx BEGIN SELECT RAISE(ABORT, 'disk on fire'); END`)
			assert.NilError(t, err)
			return ctx
		}},
		{"a purge interrupted before its last batch", func(t *testing.T, raw *sql.DB) context.Context {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "relay.db")
			l, err := Open(path, ledger.Options{})
			assert.NilError(t, err)
			defer l.Close()
			doneRowsWithMemo(t, l, "e", 20, "EARLY-END")
			raw := rawDB(t, path)
			_, err = raw.Exec("UPDATE tx SET updated_at = datetime('now', '-30 days')")
			assert.NilError(t, err)

			n, err := l.PurgeBatch(ctx, 7, 10)
			assert.NilError(t, err)
			assert.Equal(t, n, int64(10))
			assert.Equal(t, autoCheckpointOf(t, l), 0)

			n, err = l.PurgeBatch(tc.fault(t, raw), 7, 10)
			assert.Assert(t, err != nil, "the faulted batch reported no error")
			assert.Equal(t, n, int64(0))
			assert.Equal(t, autoCheckpointOf(t, l), 1000, "the automatic checkpoint stayed off after the purge ended early")
			var left int
			assert.NilError(t, raw.QueryRow("SELECT count(*) FROM tx").Scan(&left))
			assert.Equal(t, left, 10, "the faulted batch deleted rows")
		})
	}
}

// One write's failure is that write's alone: a batch in which one
// statement is refused by a constraint (an outcome with a state the
// table's CHECK refuses) commits every other write, and each caller gets
// its own result. Driven through commitEach directly, so that the batch is
// exactly these writes.
func TestOneFailingStatementFailsOnlyItsOwnWrite(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "relay.db"), ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	g := func(i int) string { return fmt.Sprintf("20261129BAT%021d", i) }
	for i := 1; i <= 2; i++ {
		ok, err := l.Claim(ctx, g(i), "TRF00001", []byte("r"))
		assert.NilError(t, err)
		assert.Assert(t, ok)
	}
	var n [4]int64
	exec := func(k int, stmt func(*writeStmts) *sql.Stmt, args ...any) *op {
		return &op{run: func(ctx context.Context, s *writeStmts) error {
			res, err := stmt(s).ExecContext(ctx, args...)
			if err != nil {
				return err
			}
			n[k], err = res.RowsAffected()
			return err
		}}
	}
	claim := func(s *writeStmts) *sql.Stmt { return s.claim }
	finish := func(s *writeStmts) *sql.Stmt { return s.finish }
	batch := []*op{
		exec(0, claim, g(3), "TRF00001", []byte("r")),
		exec(1, finish, "BOGUS", "0000", []byte("x"), g(2), 1), // violates tx's CHECK
		exec(2, finish, "DONE", "0000", []byte("x"), g(1), 1),
		exec(3, claim, g(4), "TRF00001", []byte("r")),
	}
	errs, committed := l.commitEach(batch)
	assert.Check(t, errs[1] != nil, "the failing statement was reported committed")
	for _, i := range []int{0, 2, 3} {
		assert.Check(t, errs[i], "write %d failed for another write's statement", i)
		assert.Check(t, n[i] == 1, "write %d affected %d rows", i, n[i])
	}
	assert.Equal(t, committed, 3)
	for i, want := range map[int]dedup.State{1: dedup.StateDone, 2: dedup.StateSent, 3: dedup.StateSent, 4: dedup.StateSent} {
		r, err := l.Get(ctx, g(i))
		assert.NilError(t, err)
		assert.Assert(t, r != nil, "%s has no row", g(i))
		assert.Check(t, r.State == want, "%s is %s, want %s", g(i), r.State, want)
	}
}

// damagedInside writes a ledger of 2,000 rows and overwrites pages in the
// middle of the file: the header, the schema and the journal mode still
// read fine, so only the structural check finds the damage.
func damagedInside(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path, ledger.Options{})
	assert.NilError(t, err)
	for i := 0; i < 2000; i++ {
		_, err := l.Claim(ctx, fmt.Sprintf("G%031d", i), "TRF00001", make([]byte, 200))
		assert.NilError(t, err)
	}
	assert.NilError(t, l.Close())
	st, err := os.Stat(path)
	assert.NilError(t, err)
	assert.Assert(t, st.Size() > 64*4096, "the ledger is only %d bytes", st.Size())
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	assert.NilError(t, err)
	_, err = f.WriteAt([]byte(strings.Repeat("garbage!", 4*4096/8)), st.Size()/2/4096*4096)
	assert.NilError(t, err)
	assert.NilError(t, f.Close())
	return path
}

// Open reads no more than the header, the journal mode and the schema
// (its cost does not grow with the ledger), so a file damaged inside opens;
// the whole-file check (Check: inspect --check) finds the damage.
func TestOpenReadsNoWholeFileAndCheckFindsDamageInside(t *testing.T) {
	path := damagedInside(t)
	l, err := Open(path, ledger.Options{})
	assert.NilError(t, err, "Open read past the header and the schema")
	defer l.Close()
	err = l.Check(ctx)
	assert.ErrorContains(t, err, "integrity check")
}

// The scrub walks every b-tree, each in slices: the tx table, its primary
// key and its state index once per row, the events' table and two of its
// indexes once per event.
func TestScrubReadsEveryEntryOfEveryTree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := Open(path, ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	const rows = 3*scrubSlice + 17 // several slices and a short last one
	for i := 0; i < rows; i++ {
		_, err := l.Claim(ctx, fmt.Sprintf("G%031d", i), "TRF00001", make([]byte, 200))
		assert.NilError(t, err)
	}
	// Ten reclaim events (FAILED/E902 rows taken back).
	for i := 0; i < 10; i++ {
		g := fmt.Sprintf("G%031d", i)
		_, err := l.Finish(ctx, g, 1, ledger.Outcome{State: dedup.StateFailed, RspCode: dedup.CodeNotSent})
		assert.NilError(t, err)
		_, _, ok, err := l.Reclaim(ctx, g, nil, 0)
		assert.NilError(t, err)
		assert.Assert(t, ok)
	}
	n, err := scrub(ctx, l.rdb)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(3*rows+3*10))
}

// With the check in the background (the relay, which must not wait seconds
// per gigabyte to restart), the ledger opens at once; when the check finds
// the damage, it says so and every later write is refused: nothing more is
// claimed on a damaged file.
func TestBackgroundCheckOfADamagedFileRefusesEveryLaterWrite(t *testing.T) {
	path := damagedInside(t)
	checked := make(chan error, 1)
	l, err := Open(path, ledger.Options{CheckInBackground: func(_ time.Duration, err error) { checked <- err }})
	assert.NilError(t, err, "the open waited for the check")
	defer l.Close()
	err = <-checked
	assert.ErrorContains(t, err, "integrity check")
	_, err = l.Claim(ctx, "G-after-the-check", "TRF00001", []byte("r"))
	assert.Check(t, errors.Is(err, ledger.ErrDamaged), "claim on a damaged file: %v", err)
	_, err = l.PurgeBatch(ctx, 0, 10)
	assert.Check(t, errors.Is(err, ledger.ErrDamaged), "purge on a damaged file: %v", err)
}

// A sound file checked in the background reports ok and keeps its writes.
func TestBackgroundCheckOfASoundFilePassesAndWritesGoOn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	checked := make(chan error, 1)
	l, err := Open(path, ledger.Options{CheckInBackground: func(_ time.Duration, err error) { checked <- err }})
	assert.NilError(t, err)
	defer l.Close()
	assert.NilError(t, <-checked)
	ok, err := l.Claim(ctx, "G1", "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Check(t, ok)
}

// Close ends the background check before it returns: no goroutine reads
// the file after Close.
func TestCloseStopsTheBackgroundCheck(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{CheckInBackground: func(time.Duration, error) {}})
	assert.NilError(t, err)
	assert.NilError(t, l.Close())
	select {
	case <-l.checkEnded:
	default:
		t.Fatal("Close returned while the background check was still running")
	}
}

// The connection that writes is refused unless PRAGMA synchronous reads
// back as asked: a driver that dropped the DSN parameter would otherwise
// leave every commit unsynced, unnoticed until a power cut.
func TestWriteConnectionMustReportTheSynchronousAsked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	db, err := sql.Open("sqlite3", path)
	assert.NilError(t, err)
	defer db.Close()
	c, err := db.Conn(context.Background())
	assert.NilError(t, err)
	defer c.Close()
	for _, tc := range []struct {
		set, want string
		ok        bool
	}{{"FULL", "FULL", true}, {"NORMAL", "NORMAL", true}, {"OFF", "FULL", false}, {"NORMAL", "FULL", false}, {"FULL", "NORMAL", false}} {
		_, err := c.ExecContext(context.Background(), "PRAGMA synchronous="+tc.set)
		assert.NilError(t, err)
		err = checkSynchronous(context.Background(), c, tc.want)
		if tc.ok {
			assert.Check(t, err, "%+v", tc)
		} else {
			assert.Check(t, is.ErrorContains(err, "PRAGMA synchronous is "+tc.set), "%+v", tc)
		}
	}
	// Both settings a binary may ask for reach the connection as asked.
	for _, s := range []string{"full", "normal"} {
		l, err := Open(filepath.Join(t.TempDir(), "l.db"), ledger.Options{Synchronous: s})
		assert.NilError(t, err, s)
		l.Close()
	}
}

// A tx declared WITHOUT ROWID (docs/ledger.md allows it: another build or
// tool may create it so) has no rowid to walk: the scrub must read it by
// its guid b-tree and find it sound, not call it damaged and refuse every
// write of a sound relay.
func TestScrubWalksAWithoutRowidLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	_, err := rawDB(t, path).Exec(withoutRowidTx)
	assert.NilError(t, err)

	l, err := Open(path, ledger.Options{})
	assert.NilError(t, err)
	const rows = 2*scrubSlice + 5
	for i := 0; i < rows; i++ {
		_, err := l.Claim(ctx, fmt.Sprintf("G%031d", i), "TRF00001", make([]byte, 200))
		assert.NilError(t, err)
	}
	_, err = l.Finish(ctx, "G0000000000000000000000000000000", 1, ledger.Outcome{State: dedup.StateFailed, RspCode: dedup.CodeNotSent})
	assert.NilError(t, err)
	_, _, ok, err := l.Reclaim(ctx, "G0000000000000000000000000000000", nil, 0)
	assert.NilError(t, err)
	assert.Assert(t, ok)
	n, err := scrub(ctx, l.rdb)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(2*rows+3), "the table and its state index, and one event in three trees")
	assert.NilError(t, l.Close())

	checked := make(chan error, 1)
	l, err = Open(path, ledger.Options{CheckInBackground: func(_ time.Duration, err error) { checked <- err }})
	assert.NilError(t, err)
	defer l.Close()
	assert.NilError(t, <-checked, "a sound WITHOUT ROWID ledger was called damaged")
	claimed, err := l.Claim(ctx, "G-after-the-check", "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, claimed)
}

// Only what says the pages cannot be read as a sound ledger is damage: a
// busy or locked database (another process recovering the WAL index) or an
// interrupted read must not stop every write.
func TestIsDamage(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{sqlite3.Error{Code: sqlite3.ErrCorrupt}, true},
		{sqlite3.Error{Code: sqlite3.ErrNotADB}, true},
		{sqlite3.Error{Code: sqlite3.ErrIoErr}, true},
		{fmt.Errorf("integrity check (table tx): %w", sqlite3.Error{Code: sqlite3.ErrCorrupt}), true},
		{sqlite3.Error{Code: sqlite3.ErrBusy}, false},
		{sqlite3.Error{Code: sqlite3.ErrLocked}, false},
		{sqlite3.Error{Code: sqlite3.ErrInterrupt}, false},
		{context.Canceled, false},
	} {
		assert.Check(t, isDamage(tc.err) == tc.want, "%v: isDamage=%v", tc.err, !tc.want)
	}
}

// A background check whose read fails with an error that is not damage
// (the database busy or locked) starts again after scrubRetry, with a
// warning: the sound ledger is never called damaged for it, its writes go
// on meanwhile, and the check that follows reports it sound.
func TestScrubStartsAgainAfterAnErrorThatIsNotDamage(t *testing.T) {
	realScrub, realRetry := scrubLedger, scrubRetry
	t.Cleanup(func() { scrubLedger, scrubRetry = realScrub, realRetry })
	scrubRetry = 50 * time.Millisecond
	var runs atomic.Int32
	release := make(chan struct{})
	scrubLedger = func(ctx context.Context, db *sql.DB) (int64, error) {
		switch runs.Add(1) { // busy, then locked, as another process's recovery makes it
		case 1:
			return 0, fmt.Errorf("integrity check (table tx): %w", sqlite3.Error{Code: sqlite3.ErrBusy})
		case 2:
			<-release
			return 0, fmt.Errorf("integrity check (table tx): %w", sqlite3.Error{Code: sqlite3.ErrLocked})
		}
		return realScrub(ctx, db)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	warned := make(chan string, 8)
	checked := make(chan error, 1)
	l, err := Open(path, ledger.Options{
		Warn:              func(msg string, _ ...any) { warned <- msg },
		CheckInBackground: func(_ time.Duration, err error) { checked <- err }})
	assert.NilError(t, err)
	defer l.Close()
	next := func(what string) string {
		t.Helper()
		select {
		case msg := <-warned:
			return msg
		case err := <-checked:
			t.Fatalf("the check ended (%v) where it should have warned and started again (%s)", err, what)
		case <-time.After(20 * time.Second):
			t.Fatalf("no warning within 20 s (%s)", what)
		}
		return ""
	}
	assert.Assert(t, is.Contains(next("after busy"), "not damage; starting it again"))
	// While the check is held between its tries, the ledger is not damaged
	// and takes writes.
	assert.NilError(t, l.Damaged())
	claimed, err := l.Claim(ctx, "G-during-the-retries", "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, claimed)
	close(release)
	assert.Assert(t, is.Contains(next("after locked"), "not damage; starting it again"))
	assert.NilError(t, <-checked, "the check after the retries did not report the ledger sound")
	assert.Equal(t, runs.Load(), int32(3))
	assert.NilError(t, l.Damaged())
}

// TestUpgradeOpensTheCriticalFindingsOfTheRunsKept: a ledger of an older
// version (no critical_finding table) gains its open findings on the first
// open, once.
func TestUpgradeOpensTheCriticalFindingsOfTheRunsKept(t *testing.T) {
	ledgertest.ExerciseUpgrade(t, Backend, func(t *testing.T, db string) {
		_, err := rawDB(t, db).Exec("DROP TABLE critical_finding")
		assert.NilError(t, err)
	})
}
