// Package ledger is the relay's durable state ledger: one SQLite row per GUID
// recording what the relay knows about that transaction (spec: ledger.md).
//
// Every write goes through one writer goroutine that owns the write
// connection and commits whatever writes are waiting in one transaction (group
// commit): with synchronous=FULL every commit costs an fsync, and batching lets
// many transactions share one. A write returns only after the transaction
// holding it has committed, so a caller never acts on an uncommitted claim.
// Reads go through a separate pool of query-only connections and never wait
// for the writer.
//
// Every statement is the exact SQL of ledger.md; each is atomic on its own,
// so several processes may share one ledger file.
package ledger

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"dedup"
)

// BusyTimeout is how long a statement waits for another writer's lock
// before failing. The relay's --orphan-after bound assumes it.
const BusyTimeout = 5 * time.Second

// DefaultMaxBatch bounds how many writes one commit carries.
const DefaultMaxBatch = 256

// ErrClosed is returned by writes submitted after Close.
var ErrClosed = errors.New("ledger closed")

// Row is one ledger row.
type Row struct {
	GUID      string
	TxCode    string // "" if NULL
	State     dedup.State
	RspCode   string // "" if NULL
	Request   []byte // nil if NULL (rows written by other tools)
	Response  []byte // nil if NULL
	Attempts  int
	UpdatedAt string // as stored: UTC "YYYY-MM-DD HH:MM:SS"; compared verbatim when fencing
}

// Outcome is what a claim's holder records when its core call ends.
type Outcome struct {
	State    dedup.State // DONE, UNKNOWN or FAILED
	RspCode  string
	Response []byte // the reply telegram for DONE; nil otherwise
}

// Options configure Open.
type Options struct {
	// Synchronous is SQLite's synchronous setting: "full" (default) or
	// "normal". NORMAL in WAL mode survives a crash of the process but may
	// lose the last commits on a power cut.
	Synchronous string
	// MaxBatch bounds the writes per commit; 0 means DefaultMaxBatch, 1
	// disables group commit.
	MaxBatch int
	// ReadConns bounds the read pool; 0 means 8.
	ReadConns int
}

// Ledger is an open ledger file. It is safe for concurrent use.
type Ledger struct {
	wdb      *sql.DB
	rdb      *sql.DB
	conn     *sql.Conn // the writer's connection, owned by the writer goroutine
	stmts    writeStmts
	getStmt  *sql.Stmt
	ops      chan *op // unbuffered: a completed send means the writer owns the op
	quit     chan struct{}
	stopped  chan struct{}
	maxBatch int
}

// Open opens (creating if needed) the ledger at path, applies the schema,
// and starts the writer. Errors name the path and the cause.
func Open(path string, opts Options) (*Ledger, error) {
	l, err := open(path, opts)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", path, err)
	}
	return l, nil
}

func open(path string, opts Options) (*Ledger, error) {
	sync := strings.ToUpper(opts.Synchronous)
	if sync == "" {
		sync = "FULL"
	}
	if sync != "FULL" && sync != "NORMAL" {
		return nil, fmt.Errorf("synchronous %q: want full or normal", opts.Synchronous)
	}
	if path == "" {
		return nil, errors.New("empty path")
	}
	if strings.ContainsAny(path, "?#") || strings.HasPrefix(path, "file:") || path == ":memory:" {
		// The driver would read these as URI syntax or an in-memory
		// database; the ledger must be a plain file on disk (domain.md rule 8).
		return nil, errors.New("path must be a plain file name (no '?', '#', 'file:' or ':memory:')")
	}
	if dir := filepath.Dir(path); dir != "" {
		if fi, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("directory: %w", err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("directory %s is not a directory", dir)
		}
	}
	params := fmt.Sprintf("_journal_mode=WAL&_synchronous=%s&_busy_timeout=%d&_txlock=immediate",
		sync, BusyTimeout.Milliseconds())
	wdb, err := sql.Open("sqlite3", path+"?"+params)
	if err != nil {
		return nil, err
	}
	wdb.SetMaxOpenConns(1)
	wdb.SetConnMaxIdleTime(0)
	wdb.SetConnMaxLifetime(0)

	l := &Ledger{wdb: wdb, ops: make(chan *op), quit: make(chan struct{}), stopped: make(chan struct{})}
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
		return fail(err)
	}
	var mode string
	if err := l.conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fail(err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fail(fmt.Errorf("journal mode is %q, not WAL (is the file system local?)", mode))
	}
	if _, err := l.conn.ExecContext(ctx, dedup.Schema); err != nil {
		return fail(fmt.Errorf("apply schema: %w", err))
	}
	// Checkpoints stay SQLite's automatic ones (every 1000 WAL pages, run
	// by the committing connection). A background checkpointer was tried
	// and measured worse: under a steady writer it never catches up with
	// the WAL's end, so the WAL is never restarted and grows, and every
	// commit's fsync then also journals the file's new size (1 caller:
	// 0.75-0.95 ms per claim+finish against 0.52 ms).
	// From here on the writer waits for the lock itself (see begin), still
	// for at most BusyTimeout; statements inside a transaction that holds
	// the lock never wait.
	if _, err := l.conn.ExecContext(ctx, "PRAGMA busy_timeout=0"); err != nil {
		return fail(fmt.Errorf("busy timeout: %w", err))
	}
	if l.stmts, err = prepareWrites(ctx, l.conn); err != nil {
		return fail(err)
	}

	rdb, err := sql.Open("sqlite3", path+"?"+params+"&_query_only=1")
	if err != nil {
		return fail(err)
	}
	l.rdb = rdb
	n := opts.ReadConns
	if n <= 0 {
		n = 8
	}
	rdb.SetMaxOpenConns(n)
	rdb.SetMaxIdleConns(n)
	if l.getStmt, err = rdb.PrepareContext(ctx, "SELECT "+rowColumns+" FROM tx WHERE guid=?"); err != nil {
		return fail(fmt.Errorf("prepare lookup: %w", err))
	}

	l.maxBatch = opts.MaxBatch
	if l.maxBatch <= 0 {
		l.maxBatch = DefaultMaxBatch
	}
	go l.writer()
	return l, nil
}

// Close stops the writer and closes the database. Writes submitted after
// Close fail with ErrClosed; a write already taken by the writer completes.
func (l *Ledger) Close() error {
	select {
	case <-l.quit:
		return nil
	default:
	}
	close(l.quit)
	<-l.stopped
	l.getStmt.Close()
	l.stmts.close()
	err := l.conn.Close()
	l.rdb.Close()
	if cerr := l.wdb.Close(); err == nil {
		err = cerr
	}
	return err
}

// IsBusy reports whether err is SQLite's "database is locked" (busy
// timeout exceeded).
func IsBusy(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.Code == sqlite3.ErrBusy || se.Code == sqlite3.ErrLocked)
}

const rowColumns = "guid, tx_code, state, rsp_code, request, response, attempts, updated_at"

type scanner interface{ Scan(...any) error }

func scanRow(s scanner) (*Row, error) {
	var r Row
	var txCode, rsp sql.NullString
	var state string
	if err := s.Scan(&r.GUID, &txCode, &state, &rsp, &r.Request, &r.Response, &r.Attempts, &r.UpdatedAt); err != nil {
		return nil, err
	}
	r.TxCode, r.RspCode, r.State = txCode.String, rsp.String, dedup.State(state)
	return &r, nil
}

// Get returns the row of guid, or nil if there is none. It reads through the
// read pool and never waits for the writer.
func (l *Ledger) Get(ctx context.Context, guid string) (*Row, error) {
	r, err := scanRow(l.getStmt.QueryRowContext(ctx, guid))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", guid, err)
	}
	return r, nil
}

// secondsAgo is the SQLite modifier for "s seconds before now". Time is
// always compared by SQLite itself, so rows written by other tools compare
// correctly.
func secondsAgo(d time.Duration) string {
	return "-" + strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " seconds"
}

func (l *Ledger) selectRows(ctx context.Context, what, query string, args ...any) ([]Row, error) {
	// Read the whole selection before returning: an open cursor during the
	// core calls would keep the WAL from being checkpointed.
	rows, err := l.rdb.QueryContext(ctx, "SELECT "+rowColumns+" FROM tx WHERE "+query+" ORDER BY updated_at, guid", args...)
	if err != nil {
		return nil, fmt.Errorf("select %s: %w", what, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r, err := scanRow(rows)
		if err != nil {
			return nil, fmt.Errorf("select %s: %w", what, err)
		}
		out = append(out, *r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("select %s: %w", what, err)
	}
	return out, nil
}

// SelectUnknown returns the UNKNOWN rows not updated for minAge (resolve's
// candidates).
func (l *Ledger) SelectUnknown(ctx context.Context, minAge time.Duration) ([]Row, error) {
	return l.selectRows(ctx, "unknown", "state='UNKNOWN' AND updated_at <= datetime('now', ?)", secondsAgo(minAge))
}

// SelectFailed returns the FAILED/E902 rows with fewer than maxAttempts
// attempts (reprocess's candidates).
func (l *Ledger) SelectFailed(ctx context.Context, maxAttempts int) ([]Row, error) {
	return l.selectRows(ctx, "failed", "state='FAILED' AND rsp_code='E902' AND attempts < ?", maxAttempts)
}

// CountExhausted counts FAILED/E902 rows at or above maxAttempts: rows no
// reprocess run will send again, which an operator must review.
func (l *Ledger) CountExhausted(ctx context.Context, maxAttempts int) (int, error) {
	var n int
	err := l.rdb.QueryRowContext(ctx, "SELECT count(*) FROM tx WHERE state='FAILED' AND rsp_code='E902' AND attempts >= ?", maxAttempts).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count exhausted: %w", err)
	}
	return n, nil
}
