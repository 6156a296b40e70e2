// Package sqlite is the SQLite backend of the ledger (docs/ledger.md): one
// file on the relay's host, in WAL mode, the embedded default.
//
// Every write goes through one write connection, and whatever writes are
// waiting are committed in one transaction (group commit, led by the callers
// themselves: see submit): with synchronous=FULL every commit costs an fsync,
// and batching lets many transactions share one. A write returns only after
// the transaction holding it has committed, so a caller never acts on an
// uncommitted claim. Reads go through a separate pool of query-only
// connections and never wait for the writes.
//
// Every statement is the exact SQL of docs/ledger.md; each is atomic on its own,
// so several processes may share one ledger file.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"dedup"
	"dedup/ledger"
)

// DefaultMaxBatch bounds how many writes one commit carries.
const DefaultMaxBatch = 256

// Ledger is an open ledger file. It is safe for concurrent use.
type Ledger struct {
	wdb      *sql.DB
	rdb      *sql.DB
	conn     *sql.Conn // the write connection, used only by the caller leading a batch
	stmts    writeStmts
	getStmt  *sql.Stmt
	maxBatch int

	// The group commit (see submit): writes waiting for a batch, whether
	// a caller is leading one, and whether Close was called. idle is
	// signalled when the last batch ends.
	mu       sync.Mutex
	queue    []*op
	leading  bool
	closed   bool
	idle     *sync.Cond
	faults   *ledger.Faults
	onCommit func(time.Duration, int)
	warn     func(string, ...any)
	actor    string // who writes this handle's events
	// synchronous is what the write connection must report (FULL or
	// NORMAL), checked when it is opened.
	synchronous string

	// The structural check in the background (Options.CheckInBackground).
	checkDone  func(time.Duration, error) // Options.CheckInBackground; nil: the check runs at open
	damaged    atomic.Pointer[error]      // set when the check failed: every write fails with it
	stopCheck  context.CancelFunc
	checkEnded chan struct{}

	// A purge's checkpoints (see PurgeBatch): autoCheckpoint is the
	// write connection's wal_autocheckpoint before the purge turned it
	// off (0: it is on), set and read only by the caller leading a batch;
	// checkpointing is whether a passive checkpoint runs in the
	// background, and checkpoints waits for it.
	autoCheckpoint int
	checkpointing  atomic.Bool
	checkpoints    sync.WaitGroup
}

var _ ledger.Ledger = (*Ledger)(nil)

// Open opens (creating if needed) the ledger at path, applies the schema,
// and prepares the writes. Errors name the path and the cause.
func Open(path string, opts ledger.Options) (*Ledger, error) {
	l, err := open(path, opts)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	return l, nil
}

// CheckPath reports what is wrong with path as a ledger file name without
// creating anything, so that a binary can refuse a bad --db before it
// touches the disk.
func CheckPath(path string) error {
	if path == "" {
		return errors.New("empty path")
	}
	if strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") || path == ":memory:" {
		// The driver would read these as URI syntax or an in-memory
		// database; the ledger must be a plain file on disk (docs/rules.md rule 8).
		return errors.New("path must be a plain file name (no '?', '#', 'file:' or ':memory:')")
	}
	return nil
}

// createPrivate creates the ledger file, if it does not exist, with mode
// 0600 whatever the umask: SQLite gives the -wal and -shm files the mode of
// the database file, and the three hold every customer's transfers. An
// existing file that group or others can read is left as it is, with a
// warning.
func createPrivate(path string, warn func(string, ...any)) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, os.ErrExist) {
		return err
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 && warn != nil {
		warn("the ledger file can be read by other users: it holds account numbers and memos; chmod 0600 it (and its -wal and -shm)",
			"file", path, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	return nil
}

// checkFile checks the ledger's path and its directory, and creates the
// file, private, if it does not exist yet.
func checkFile(path string, warn func(string, ...any)) error {
	if err := CheckPath(path); err != nil {
		return err
	}
	if dir := filepath.Dir(path); dir != "" {
		if fi, err := os.Stat(dir); err != nil {
			return fmt.Errorf("directory: %w", err)
		} else if !fi.IsDir() {
			return fmt.Errorf("directory %s is not a directory", dir)
		}
	}
	return createPrivate(path, warn)
}

// prepareWriteConn checks the write connection's journal mode, applies the
// schema, refuses a damaged file, and makes the connection wait for the
// write lock itself.
func (l *Ledger) prepareWriteConn(ctx context.Context) error {
	if err := checkSynchronous(ctx, l.conn, l.synchronous); err != nil {
		return err
	}
	var mode string
	if err := l.conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return translate(err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, not WAL (is the file system local?)", mode)
	}
	if err := l.applySchema(ctx); err != nil {
		return fmt.Errorf("apply schema: %w", translate(err))
	}
	// No whole-file check here: opening costs the same on a ledger of ten
	// rows or ten million (a job run every minute must not read 4 GB each
	// time). The header, the journal mode and the schema were just read;
	// the relay scrubs the rest in the background (scrub.go), and the
	// daily `inspect --check` runs SQLite's full check.
	// Checkpoints stay SQLite's automatic ones (every 1000 WAL pages, run
	// by the committing connection). A background checkpointer was tried
	// and measured worse: under a steady writer it never catches up with
	// the WAL's end, so the WAL is never restarted and grows, and every
	// commit's fsync then also journals the file's new size. One whose
	// leader copies the last frames itself, so that the WAL restarts,
	// gained nothing either. The figures: docs/benchmarks.md, "Figures the
	// code's choices rest on".
	// From here on the write connection waits for the lock itself (see
	// begin), still for at most BusyTimeout; statements inside a
	// transaction that holds the lock never wait.
	if _, err := l.conn.ExecContext(ctx, "PRAGMA busy_timeout=0"); err != nil {
		return fmt.Errorf("busy timeout: %w", err)
	}
	return nil
}

// applySchema applies dedup.Schema. A ledger made by an older version,
// with reconcile runs but no critical_finding table yet, gains the table
// and a finding for each GUID and class its kept runs found critical, in
// the same transaction: none of them was ever closed by a person.
func (l *Ledger) applySchema(ctx context.Context) error {
	var tables int
	if err := l.conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN ('reconcile_finding', 'critical_finding')`).Scan(&tables); err != nil {
		return err
	}
	var hasRuns int
	if tables == 1 {
		if err := l.conn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type='table' AND name='reconcile_finding'`).Scan(&hasRuns); err != nil {
			return err
		}
	}
	if hasRuns == 0 {
		_, err := l.conn.ExecContext(ctx, dedup.Schema)
		return err
	}
	if _, err := l.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	if _, err := l.conn.ExecContext(ctx, dedup.Schema); err != nil {
		l.conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	}
	if _, err := l.conn.ExecContext(ctx, ledger.SQL.BackfillCriticalFindings.SQLite); err != nil {
		l.conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return fmt.Errorf("open the critical findings of the runs kept: %w", err)
	}
	_, err := l.conn.ExecContext(ctx, "COMMIT")
	return err
}

func open(path string, opts ledger.Options) (*Ledger, error) {
	synchronous := strings.ToUpper(opts.Synchronous)
	if synchronous == "" {
		synchronous = "FULL"
	}
	if synchronous != "FULL" && synchronous != "NORMAL" {
		return nil, fmt.Errorf("synchronous %q: want full or normal", opts.Synchronous)
	}
	if opts.Existing {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %v", ledger.ErrNoLedger, err)
		}
	}
	if err := checkFile(path, opts.Warn); err != nil {
		return nil, err
	}
	// Before sql.Open: warming reads the file through a descriptor of its
	// own and closes it, which must happen while no connection of this
	// process holds a lock on the file (warm.go).
	if opts.WarmAtOpen != nil {
		opts.WarmAtOpen(warmGUIDIndex(path, warmBudget, time.Now().Add(warmDeadline)))
	}
	// secure_delete: a purged request's bytes (accounts, memo) are
	// overwritten, not left in free pages; set explicitly, as builds
	// differ in its default.
	// vfs: each WAL frame written in one call, its header with its page (walbuf.go).
	if err := registerWALBuffer(); err != nil {
		return nil, err
	}
	params := fmt.Sprintf("_journal_mode=WAL&_synchronous=%s&_busy_timeout=%d&_txlock=immediate&_secure_delete=on&vfs=%s",
		synchronous, ledger.BusyTimeout.Milliseconds(), walbufVFS)
	wdb, err := sql.Open("sqlite3", path+"?"+params)
	if err != nil {
		return nil, err
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetConnMaxIdleTime(0)
	wdb.SetConnMaxLifetime(0)

	l := &Ledger{wdb: wdb, faults: opts.Faults, onCommit: opts.OnCommit, warn: opts.Warn, actor: ledger.ActorOf(opts),
		checkDone: opts.CheckInBackground, synchronous: synchronous}
	l.idle = sync.NewCond(&l.mu)
	fail := func(err error) (*Ledger, error) {
		if l.conn != nil {
			l.conn.Close()
		}
		if l.rdb != nil {
			l.rdb.Close()
		}
		wdb.Close()
		return nil, err
	}
	ctx := context.Background()
	l.conn, err = wdb.Conn(ctx)
	if err != nil {
		return fail(translate(err))
	}
	if err := l.prepareWriteConn(ctx); err != nil {
		return fail(err)
	}
	if l.stmts, err = prepareWrites(ctx, l.conn); err != nil {
		return fail(err)
	}

	rdb, err := sql.Open("sqlite3", path+"?"+params+"&_query_only=1")
	if err != nil {
		return fail(err)
	}
	l.rdb = rdb
	n := opts.Conns
	if n <= 0 {
		n = 8
	}
	rdb.SetMaxOpenConns(n)
	rdb.SetMaxIdleConns(n)
	if l.getStmt, err = rdb.PrepareContext(ctx, ledger.SQL.Get.SQLite); err != nil {
		return fail(fmt.Errorf("prepare lookup: %w", err))
	}

	l.maxBatch = opts.MaxBatch
	if l.maxBatch <= 0 {
		l.maxBatch = DefaultMaxBatch
	}
	if l.checkDone != nil {
		l.checkInBackground()
	}
	return l, nil
}

// synchronousLevels are PRAGMA synchronous's answers.
var synchronousLevels = map[int]string{0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}

// checkSynchronous reads PRAGMA synchronous back on the connection that
// writes and refuses it unless it is what was asked (FULL, or NORMAL under
// --synchronous normal): the setting is a DSN parameter, and a driver that
// dropped or renamed it would leave every commit unsynced with nothing to
// show for it until a power cut (docs/rules.md "A power cut").
func checkSynchronous(ctx context.Context, c interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, want string) error {
	var level int
	if err := c.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&level); err != nil {
		return fmt.Errorf("read PRAGMA synchronous: %w", translate(err))
	}
	if got := synchronousLevels[level]; got != want {
		return fmt.Errorf("PRAGMA synchronous is %s (%d) on the connection that writes, not %s: a power cut could lose commits the relay acted on; refusing to write", got, level, want)
	}
	return nil
}

// quickCheck runs SQLite's structural check on c: every page of the file is
// read, so it takes seconds per gigabyte.
func quickCheck(ctx context.Context, c interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) error {
	var ok string
	if err := c.QueryRowContext(ctx, "PRAGMA quick_check(1)").Scan(&ok); err != nil {
		return fmt.Errorf("integrity check: %w", translate(err))
	} else if ok != "ok" {
		return fmt.Errorf("integrity check failed: %s (the file is damaged; restore it from a backup)", ok)
	}
	return nil
}

// checkInBackground scrubs the ledger (scrub.go: every b-tree, slice by
// slice, under 5 % of one core) through the read pool and tells done the
// result. A damaged file fails every write from then on; Close stops it.
// An error that says nothing about the file's pages (the database busy or
// locked by another process's recovery, a read interrupted) is not damage:
// refusing every write for it would take a sound relay out of service, so
// the scrub starts again after scrubRetry.
func (l *Ledger) checkInBackground() {
	ctx, cancel := context.WithCancel(context.Background())
	l.stopCheck, l.checkEnded = cancel, make(chan struct{})
	go func() {
		defer close(l.checkEnded)
		start := time.Now()
		for {
			_, err := scrubLedger(ctx, l.rdb)
			if ctx.Err() != nil {
				return // closed meanwhile
			}
			if err != nil && !isDamage(err) {
				if l.warn != nil {
					l.warn("ledger check interrupted by an error that is not damage; starting it again", "retry_s", scrubRetry.Seconds(), "error", err)
				}
				if sleepCtx(ctx, scrubRetry) != nil {
					return
				}
				continue
			}
			if err != nil {
				damaged := fmt.Errorf("%w: %v", ledger.ErrDamaged, err)
				l.damaged.Store(&damaged)
			}
			l.checkDone(time.Since(start), err)
			return
		}
	}()
}

// scrubRetry is how long the background check waits before it starts
// again after an error that is not damage.
var scrubRetry = 30 * time.Second

// scrubLedger is the scrub the background check runs: scrub, which a test
// replaces to make a read fail the way SQLite cannot be made to on demand
// (busy, locked).
var scrubLedger = scrub

// isDamage reports whether err says that the file's pages cannot be read
// as a sound ledger: SQLite found a page that is not what its tree needs
// (SQLITE_CORRUPT, SQLITE_NOTADB, SQLITE_FORMAT), the disk failed to read
// it (SQLITE_IOERR), or the schema lacks what the scrub reads. Busy,
// locked and interrupted reads are not damage.
func isDamage(err error) bool {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code {
	case sqlite3.ErrCorrupt, sqlite3.ErrNotADB, sqlite3.ErrFormat, sqlite3.ErrIoErr, sqlite3.ErrError:
		return true
	}
	return false
}

// Damaged returns the damage the background check found (wrapping
// ledger.ErrDamaged), or nil: the relay's readiness reports it, so that
// a relay refusing every write is taken out of service and paged on.
func (l *Ledger) Damaged() error {
	if d := l.damaged.Load(); d != nil {
		return *d
	}
	return nil
}

// translate adds what an operator should know to SQLite's terse errors.
func translate(err error) error {
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrNotADB, sqlite3.ErrCorrupt:
			return fmt.Errorf("%w (the file is not a usable SQLite ledger: damaged, or another kind of file)", err)
		case sqlite3.ErrFull:
			return fmt.Errorf("%w (the file system is full)", err)
		case sqlite3.ErrCantOpen, sqlite3.ErrPerm, sqlite3.ErrReadonly:
			return fmt.Errorf("%w (check the path and its permissions)", err)
		}
	}
	return err
}

// Close closes the database. Writes submitted after Close fail with
// ErrClosed; writes already queued are committed first.
func (l *Ledger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for l.leading {
		l.idle.Wait()
	}
	l.mu.Unlock()
	if l.stopCheck != nil {
		l.stopCheck()
		<-l.checkEnded
	}
	l.checkpoints.Wait()
	l.getStmt.Close()
	l.stmts.close()
	err := l.conn.Close()
	l.rdb.Close()
	if cerr := l.wdb.Close(); err == nil {
		err = cerr
	}
	return err
}

// isBusy reports whether err is SQLite's "database is locked".
func isBusy(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked)
}

// Get returns the row of guid, or nil if there is none. It reads through the
// read pool and never waits for the writes.
func (l *Ledger) Get(ctx context.Context, guid string) (*ledger.Row, error) {
	r, err := ledger.ScanRow(l.getStmt.QueryRowContext(ctx, guid))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", guid, translate(err))
	}
	return r, nil
}

// secondsAgo is the SQLite modifier for "d before now". Time is always
// compared by SQLite itself, so rows written by other tools compare
// correctly.
func secondsAgo(d time.Duration) string {
	return "-" + strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " seconds"
}

func (l *Ledger) selectRows(ctx context.Context, what, query string, args ...any) ([]ledger.Row, error) {
	// Read the whole selection before returning: an open cursor during the
	// core calls would keep the WAL from being checkpointed.
	rows, err := l.rdb.QueryContext(ctx, query, args...)
	return ledger.ReadRows(rows, err, what, translate)
}

// SelectUnknown returns the UNKNOWN rows not updated for minAge (resolve's
// candidates).
func (l *Ledger) SelectUnknown(ctx context.Context, minAge time.Duration) ([]ledger.Row, error) {
	return l.selectRows(ctx, "unknown", ledger.SQL.SelectUnknown.SQLite, secondsAgo(minAge))
}

// SelectFailed returns the FAILED/E902 rows with fewer than maxAttempts
// attempts (reprocess's candidates).
func (l *Ledger) SelectFailed(ctx context.Context, maxAttempts int) ([]ledger.Row, error) {
	return l.selectRows(ctx, "failed", ledger.SQL.SelectFailed.SQLite, maxAttempts)
}

// SelectState lists the rows in state not updated for olderThan, oldest
// first, at most limit (0: all).
func (l *Ledger) SelectState(ctx context.Context, state dedup.State, olderThan time.Duration, limit int) ([]ledger.Row, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	return l.selectRows(ctx, "state "+string(state), ledger.SQL.SelectState.SQLite,
		string(state), secondsAgo(olderThan), limit)
}

func (l *Ledger) count(ctx context.Context, what, query string, args ...any) (int64, error) {
	return ledger.Count(l.rdb.QueryRowContext(ctx, query, args...), what, translate)
}

// CountExhausted counts FAILED/E902 rows at or above maxAttempts: rows no
// reprocess run will send again, which an operator must review.
func (l *Ledger) CountExhausted(ctx context.Context, maxAttempts int) (int, error) {
	n, err := l.count(ctx, "exhausted", ledger.SQL.CountExhausted.SQLite, maxAttempts)
	return int(n), err
}

// CountPurgeable counts the DONE rows not updated for days days.
func (l *Ledger) CountPurgeable(ctx context.Context, days int) (int64, error) {
	return l.count(ctx, "purgeable", ledger.SQL.CountPurgeable.SQLite, fmt.Sprintf("-%d days", days))
}

// Stats counts the rows per state, each up to limit (0: all), and the age
// of each state's oldest row, through the (state, updated_at) index.
func (l *Ledger) Stats(ctx context.Context, limit int64) ([]ledger.StateStat, error) {
	bound := limit
	if bound <= 0 {
		bound = -1 // SQLite's LIMIT -1: no limit
	}
	rows, err := l.rdb.QueryContext(ctx, ledger.SQL.Stats.SQLite, bound)
	return ledger.ReadStats(rows, err, limit, translate)
}

// CountSlice counts one slice of state's rows through the read pool
// (ledger.Ledger.CountSlice): two reads of at most limit index entries.
func (l *Ledger) CountSlice(ctx context.Context, state dedup.State, after *ledger.Mark, limit int) (int64, *ledger.Mark, error) {
	return ledger.CountSliceWith(after, limit, func(lo any, offset int) (any, bool, error) {
		var at string
		err := l.rdb.QueryRowContext(ctx, ledger.SQL.SliceEdge.SQLite, string(state), lo, offset).Scan(&at)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("count %s: %w", state, translate(err))
		}
		return at, true, nil
	}, func(lo, hi any) (int64, error) {
		return l.count(ctx, "slice of "+string(state), ledger.SQL.SliceCount.SQLite, string(state), lo, hi)
	})
}

// ConfirmClaim reads whether guid's row is still SENT with attempt, and its
// age on SQLite's clock (docs/rules.md rule 13). A row written by another
// tool whose updated_at SQLite cannot read counts as infinitely old.
func (l *Ledger) ConfirmClaim(ctx context.Context, guid string, attempt int) (ledger.ClaimCheck, error) {
	var held int
	var ageDays *float64
	var now float64
	err := l.rdb.QueryRowContext(ctx, ledger.SQL.Confirm.SQLite, attempt, guid).Scan(&held, &ageDays, &now)
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.ClaimCheck{}, nil
	}
	if err != nil {
		return ledger.ClaimCheck{}, fmt.Errorf("confirm claim %s: %w", guid, translate(err))
	}
	c := ledger.ClaimCheck{Held: held == 1, Now: fromJulian(now), Age: time.Duration(1<<63 - 1)}
	if ageDays != nil {
		c.Age = time.Duration(*ageDays * 86400 * float64(time.Second))
	}
	return c, nil
}

// Now returns SQLite's clock, julianday('now') (docs/ledger.md "Clocks").
func (l *Ledger) Now(ctx context.Context) (time.Time, error) {
	var jd float64
	if err := l.rdb.QueryRowContext(ctx, ledger.SQL.Now.SQLite).Scan(&jd); err != nil {
		return time.Time{}, fmt.Errorf("read the clock: %w", translate(err))
	}
	return fromJulian(jd), nil
}

// fromJulian converts a Julian day number to a time.
func fromJulian(jd float64) time.Time {
	const unixEpochJD = 2440587.5
	return time.UnixMicro(int64((jd - unixEpochJD) * 86400e6)).UTC()
}

// Events returns guid's events, oldest first.
func (l *Ledger) Events(ctx context.Context, guid string) ([]ledger.Event, error) {
	rows, err := l.rdb.QueryContext(ctx, ledger.SQL.EventsOf.SQLite, guid)
	return ledger.ReadEvents(rows, err, fmt.Sprintf("events of %s", guid), false, translate)
}

// EventsBetween returns the events at or after since and before until
// (zero: no end), oldest first.
func (l *Ledger) EventsBetween(ctx context.Context, since, until time.Time) ([]ledger.Event, error) {
	q := "SELECT " + ledger.EventColumns + " FROM tx_event WHERE at >= ?"
	args := []any{sqliteTime(since)}
	if !until.IsZero() {
		q += " AND at < ?"
		args = append(args, sqliteTime(until))
	}
	rows, err := l.rdb.QueryContext(ctx, q+" ORDER BY id", args...)
	return ledger.ReadEvents(rows, err, "events", false, translate)
}

// sqliteTime is t as SQLite's datetime() writes it (UTC, whole seconds): a
// period's bounds are a person's input, compared with the stored text.
func sqliteTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") }

// PurgeEvents deletes at most limit events not newer than days days.
func (l *Ledger) PurgeEvents(ctx context.Context, days, limit int) (int64, error) {
	n, err := l.execCount(ctx, func(s *writeStmts) *sql.Stmt { return s.purgeEvents }, fmt.Sprintf("-%d days", days), limit)
	if err != nil {
		return 0, fmt.Errorf("purge events: %w", err)
	}
	return n, nil
}

// EventByID returns one event with its age, or nil.
func (l *Ledger) EventByID(ctx context.Context, id int64) (*ledger.Event, error) {
	rows, err := l.rdb.QueryContext(ctx, ledger.SQL.EventByID.SQLite, id)
	return ledger.First(ledger.ReadEvents(rows, err, fmt.Sprintf("event %d", id), true, translate))
}

// OpenProposals lists the proposals without a decision, oldest first.
func (l *Ledger) OpenProposals(ctx context.Context) ([]ledger.Event, error) {
	rows, err := l.rdb.QueryContext(ctx, "SELECT "+ledger.EventColumns+", "+ledger.EventAge.SQLite+` FROM tx_event p
WHERE action='propose' AND NOT EXISTS (SELECT 1 FROM tx_event d WHERE d.guid = p.guid
AND d.action IN ('approve','reject','expire') AND d.detail LIKE '{"proposal":' || p.id || ',%') ORDER BY id`)
	return ledger.ReadEvents(rows, err, "open proposals", true, translate)
}

// AddEvent appends an event that changes no row and returns its id.
func (l *Ledger) AddEvent(ctx context.Context, e ledger.Event) (int64, error) {
	var id int64
	err := l.submit(ctx, &op{run: func(ctx context.Context, s *writeStmts) error {
		return l.conn.QueryRowContext(ctx, ledger.SQL.AddEvent.SQLite, e.GUID, e.Actor, e.Action,
			nullable(e.FromState), nullable(e.ToState), nullable(e.RspCode), e.Attempts, nullable(e.Detail)).Scan(&id)
	}})
	if err != nil {
		return 0, fmt.Errorf("add event %s %s: %w", e.Action, e.GUID, err)
	}
	return id, nil
}

// Decide records a decision on a proposal in one write transaction: the
// proposal must still be open and, for an approval, the row as proposed.
func (l *Ledger) Decide(ctx context.Context, d ledger.Decision) error {
	var verdict error
	e := d.Event
	err := l.submit(ctx, &op{run: func(ctx context.Context, s *writeStmts) error {
		verdict = nil
		var closed int
		if err := l.conn.QueryRowContext(ctx, ledger.SQL.ProposalClosed.SQLite, e.GUID, ledger.ProposalRef(d.Proposal)+"%").Scan(&closed); err != nil {
			return err
		}
		if closed > 0 {
			verdict = ledger.ErrProposalClosed
			return nil
		}
		if d.From != nil {
			res, err := l.conn.ExecContext(ctx, ledger.SQL.Decide.SQLite, string(d.To.State), d.To.RspCode, d.To.Response,
				e.GUID, string(d.From.State), d.From.Attempts, d.From.UpdatedAt)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				verdict = ledger.ErrRowChanged
				return nil
			}
		}
		_, err := s.event.ExecContext(ctx, e.GUID, e.Actor, e.Action, nullable(e.FromState), nullable(e.ToState), nullable(e.RspCode), e.Attempts, nullable(e.Detail))
		return err
	}})
	if err != nil {
		return fmt.Errorf("%s proposal %d: %w", e.Action, d.Proposal, err)
	}
	return verdict
}
