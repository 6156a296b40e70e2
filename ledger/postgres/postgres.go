// Package postgres is the PostgreSQL backend of the ledger (docs/ledger.md
// "PostgreSQL"): one database that relays on several hosts share, so that
// losing a host loses nothing and no GUID is sent by two relays.
//
// Writes are group-committed: Writers goroutines each take the writes that
// wait while other commits are in flight and send them as one pipelined
// batch (pgx.Batch), one implicit transaction, so that many transactions
// share one round trip and one WAL flush; a lone write is one autocommit
// statement.
// (The SQLite backend has no writer goroutine: its callers lead their own
// group commits, as only one can hold SQLite's write lock.) Measured
// against plain concurrent statements (which PostgreSQL's own WAL flush
// grouping also helps), the batches win at high concurrency and the lone
// statement at one caller (BenchmarkClaimFinish; docs/benchmarks.md).
// Reads use the pool directly (pgx's own pool, not database/sql). Every age
// is the server's now() minus the row's updated_at; no statement binds a
// time computed on a relay's host, so hosts whose clocks disagree still
// sweep, resolve and purge the same rows.
package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"dedup"
	"dedup/ledger"
)

// schemaLockKey serialises concurrent opens applying dedup.SchemaPostgres: two sessions
// running CREATE TABLE IF NOT EXISTS at once can both try to create it.
const schemaLockKey = 0x646564757000 // "dedup\0"

// Writers is how many group commits may be in flight at once. A free
// writer takes what waits at once, so each writer more means smaller
// batches, more commits and more WAL flushes contending for the WAL's
// lock: through the real relay, two writers carried more transfers a
// second than four, for less server CPU per transfer, and one more again
// (docs/benchmarks.md, table 2). Two, not one: a batch stalled on a row
// lock (for up to the lock timeout) then holds up only its own writes,
// and the other writer carries every new one
// (TestABatchStalledOnARowLockHoldsUpOnlyItsOwnWrites).
const Writers = 2

// DefaultMaxBatch bounds how many writes one group commit carries.
const DefaultMaxBatch = 256

// DefaultConns is the pool size when Options.Conns is 0: enough for a relay
// at 64 channel connections, well below PostgreSQL's default 100.
const DefaultConns = 16

// ConnectTimeout bounds one attempt to connect to the server. While the
// database is unreachable a claim fails within it and the relay answers E902.
const ConnectTimeout = 2 * time.Second

// Ledger is an open PostgreSQL ledger. It is safe for concurrent use.
type Ledger struct {
	pool     *pgxpool.Pool
	faults   *ledger.Faults
	onCommit func(time.Duration, int)
	// onNotCommitted is told why a write was judged not a commit.
	onNotCommitted func(string)
	closed         atomic.Bool
	actor          string // who writes this handle's events
	existing       bool   // Options.Existing: refuse a database without the tables
	// Group commit (nil ops: every write is its own statement).
	ops      chan *wop
	confirms chan *confirmation // rule 13's confirmations, batched like the writes
	quit     chan struct{}
	stopped  chan struct{}
	maxBatch int
}

var _ ledger.Ledger = (*Ledger)(nil)

// Open connects to the database at dsn, checks that commits are durable,
// and applies the schema. Errors name the server (never the password) and
// the cause.
func Open(dsn string, opts ledger.Options) (*Ledger, error) {
	l, err := open(dsn, opts)
	if err != nil {
		return nil, fmt.Errorf("open ledger %s: %w", Redact(dsn), scrubbed{err, dsn})
	}
	return l, nil
}

func open(dsn string, opts ledger.Options) (*Ledger, error) {
	sync := strings.ToLower(opts.Synchronous)
	if sync != "" && sync != "full" && sync != "normal" {
		return nil, fmt.Errorf("synchronous %q: want full or normal", opts.Synchronous)
	}
	if err := checkPassfile(dsn, opts.Warn); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	// Every statement is bounded like SQLite's busy timeout, so that a
	// claim's holder ends within the bound --orphan-after assumes.
	ms := fmt.Sprint(ledger.BusyTimeout.Milliseconds())
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = ms
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = ms
	cfg.ConnConfig.RuntimeParams["TimeZone"] = "UTC"
	cfg.ConnConfig.RuntimeParams["application_name"] = "dedup"
	cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	cfg.MaxConns = int32(opts.Conns)
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultConns
	}
	cfg.MinConns = 0
	configureHA(cfg, sync == "normal", opts.Warn)
	ctx, cancel := context.WithTimeout(context.Background(), 3*ConnectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	l := &Ledger{pool: pool, faults: opts.Faults, onCommit: opts.OnCommit, onNotCommitted: opts.OnNotCommitted, maxBatch: opts.MaxBatch, actor: ledger.ActorOf(opts), existing: opts.Existing}
	if err := l.prepare(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if opts.WarmAtOpen != nil {
		opts.WarmAtOpen(l.warmPool(ctx))
	}
	if l.maxBatch <= 0 {
		l.maxBatch = DefaultMaxBatch
	}
	if l.maxBatch > 1 {
		l.ops, l.quit = make(chan *wop), make(chan struct{})
		l.confirms = make(chan *confirmation)
		l.stopped = make(chan struct{}, Writers+Confirmers)
		for i := 0; i < Writers; i++ {
			go l.writer()
		}
		for i := 0; i < Confirmers; i++ {
			go l.confirmer()
		}
	}
	return l, nil
}

// warmPool opens the pool's connections (Options.WarmAtOpen, the relay),
// all at once, and returns them to the pool idle: a relay that listened
// with one connection open had its first claims each wait for a new server
// process to start, many times the steady p99 (docs/benchmarks.md,
// "Figures the code's choices rest on"). It takes at most ConnectTimeout: a server that
// does not answer delays the relay's listening by that, no more. A
// connection that cannot be opened (the server's max_connections reached,
// the time up) ends the warming with an error; the pool opens the rest
// when it needs them, as it always did. Each connection passes the pool's
// AfterConnect (durableSession) like any other.
func (l *Ledger) warmPool(ctx context.Context) (ledger.WarmReport, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	n := int(l.pool.Config().MaxConns)
	conns := make([]*pgxpool.Conn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { conns[i], errs[i] = l.pool.Acquire(ctx) })
	}
	wg.Wait()
	var first error
	for i, c := range conns {
		if c != nil {
			c.Release()
		} else if first == nil {
			first = fmt.Errorf("open connection %d of %d: %w", i+1, n, errs[i])
		}
	}
	// Release hands a connection back through the pool's AfterRelease
	// (keepAfterRelease) in a goroutine of its own: wait until every one
	// is idle, or the first claims would find none and open more (past a
	// role's CONNECTION LIMIT, a claim refused for want of a connection).
	for l.pool.Stat().AcquiredConns() > 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	return ledger.WarmReport{Conns: int(l.pool.Stat().TotalConns()), Took: time.Since(start)}, first
}

// SchemaVersion names dedup.SchemaPostgres: the first 12 hexadecimal
// digits of its SHA-256. The owner's prepare records it as the comment of
// dedup_settle_approve; another role's prepare requires it there, so that
// an operator's settle never runs against functions of another version.
var SchemaVersion = func() string {
	sum := sha256.Sum256([]byte(dedup.SchemaPostgres))
	return hex.EncodeToString(sum[:6])
}()

// approveFunction is dedup_settle_approve's signature, as the catalog
// names it.
const approveFunction = "public.dedup_settle_approve(bigint,text,text,jsonb)"

// prepare applies the schema if it is not current and this session's role
// owns it (or may create it), and otherwise checks that it is there and
// current and applies nothing: an operator's role may read and call the settle functions, not
// run DDL (docs/security.md). The first connection also proves that the
// database is reachable and its sessions durable (durableSession).
func (l *Ledger) prepare(ctx context.Context) error {
	c, err := l.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("cannot reach the database: %w", err)
	}
	defer c.Release()
	var exists, owner bool
	var role string
	if err := c.QueryRow(ctx, `SELECT to_regclass('public.tx') IS NOT NULL,
COALESCE((SELECT pg_has_role(current_user, relowner, 'MEMBER') FROM pg_class WHERE oid = to_regclass('public.tx')), true),
current_user::text`).Scan(&exists, &owner, &role); err != nil {
		return fmt.Errorf("read the schema's owner: %w", err)
	}
	if !exists && l.existing {
		return fmt.Errorf("%w: the database has no table tx", ledger.ErrNoLedger)
	}
	if exists && !owner {
		return checkSchema(ctx, c, role)
	}
	if exists && checkSchema(ctx, c, role) == nil {
		// Current already: nothing to write. (Re-creating the functions
		// would write the catalog, and a commit that must wait for a
		// synchronous standby that is down would keep every binary from
		// opening the ledger.)
		return nil
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		return fmt.Errorf("apply schema: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(schemaLockKey)); err != nil {
		return fmt.Errorf("apply schema: %w", err)
	}
	if _, err := tx.Exec(ctx, dedup.SchemaPostgres); err != nil {
		var pe *pgconn.PgError
		if !exists && errors.As(err, &pe) && pe.Code == "42501" { // insufficient_privilege
			return fmt.Errorf("the database has no dedup schema yet, and role %s may not create it: start a dedup binary once as the schema's owner: %w", role, err)
		}
		return fmt.Errorf("apply schema: %w", err)
	}
	if _, err := tx.Exec(ctx, "COMMENT ON FUNCTION "+approveFunction+" IS 'dedup schema "+SchemaVersion+"'"); err != nil {
		return fmt.Errorf("apply schema: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("apply schema: %w", err)
	}
	return nil
}

// checkSchema is prepare for a role that does not own the schema: the
// tables and the settle functions must be there, in this binary's version.
func checkSchema(ctx context.Context, c *pgxpool.Conn, role string) error {
	var events bool
	var version *string
	if err := c.QueryRow(ctx, `SELECT to_regclass('public.tx_event') IS NOT NULL,
obj_description(to_regprocedure('`+approveFunction+`'), 'pg_proc')`).Scan(&events, &version); err != nil {
		return fmt.Errorf("check the schema: %w", err)
	}
	want := "dedup schema " + SchemaVersion
	if !events || version == nil || *version != want {
		have := "none"
		if version != nil {
			have = strings.TrimPrefix(*version, "dedup schema ")
		}
		return fmt.Errorf("the ledger's schema is not current (version %s, this binary's is %s) and role %s does not own it: start a dedup binary of this version once as the schema's owner, which applies it", have, SchemaVersion, role)
	}
	return nil
}

// Close stops the writers and confirmers and closes every connection. Writes after Close
// fail with ErrClosed; a write already taken by the writer completes.
func (l *Ledger) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	if l.ops != nil {
		close(l.quit)
		for i := 0; i < Writers+Confirmers; i++ {
			<-l.stopped
		}
	}
	l.pool.Close()
	return nil
}

// bound limits one ledger operation, the wait for a connection included:
// a database that does not answer (a partition, not a refusal) must not hold
// a claim's holder past the busy timeout.
func bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, ledger.StatementBound)
}

// translate maps PostgreSQL's lock and statement timeouts to ErrBusy.
func translate(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "57014") { // lock_not_available, query_canceled
		return fmt.Errorf("%w: %v", ledger.ErrBusy, err)
	}
	return err
}

// wop is one write: a statement, its arguments, and where its result goes.
type wop struct {
	key   string // the GUID whose row it locks: a batch takes its locks in this order
	sql   string
	args  []any
	scan  []any // a RETURNING statement scans its one row into these
	n     int64 // rows affected (statements without RETURNING)
	noRow bool  // a RETURNING statement returned no row
	done  chan error
}

// exec runs o on its own, as one autocommit statement.
func (o *wop) exec(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}) error {
	if o.scan != nil {
		err := q.QueryRow(ctx, o.sql, o.args...).Scan(o.scan...)
		if errors.Is(err, pgx.ErrNoRows) {
			o.noRow = true
			return nil
		}
		return err
	}
	tag, err := q.Exec(ctx, o.sql, o.args...)
	o.n = tag.RowsAffected()
	return err
}

// read takes o's result from a batch.
func (o *wop) read(br pgx.BatchResults) error {
	if o.scan != nil {
		err := br.QueryRow().Scan(o.scan...)
		if errors.Is(err, pgx.ErrNoRows) {
			o.noRow = true
			return nil
		}
		return err
	}
	tag, err := br.Exec()
	o.n = tag.RowsAffected()
	return err
}

// submit runs one write and returns once it has committed (or failed: then
// the caller must act as if it never happened). With group commit it waits
// for the writer; a write the writer has taken completes whatever ctx says.
func (l *Ledger) submit(ctx context.Context, o *wop) error {
	if l.closed.Load() {
		return ledger.ErrClosed
	}
	if l.ops == nil {
		return l.runOne(ctx, o)
	}
	o.done = make(chan error, 1)
	select {
	case l.ops <- o:
	case <-l.quit:
		return ledger.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-o.done
}

// gather waits for the first item on ch and takes, without waiting, the
// ones queued behind it, up to max in all, into batch (reused). It reports
// false once quit is closed. The writers and confirmers batch with it: what
// waited while the previous round trip was in flight shares the next one.
func gather[T any](ch <-chan T, quit <-chan struct{}, batch []T, max int) ([]T, bool) {
	select {
	case x := <-ch:
		batch = append(batch[:0], x)
	case <-quit:
		return batch[:0], false
	}
	for len(batch) < max {
		select {
		case x := <-ch:
			batch = append(batch, x)
		default:
			return batch, true
		}
	}
	return batch, true
}

// writer gathers the writes that wait while a commit is in flight and
// commits them together: one round trip (a pipelined batch) and one WAL
// flush for all. A lone write runs as one autocommit statement, which is
// what a single caller is fastest with.
func (l *Ledger) writer() {
	defer func() { l.stopped <- struct{}{} }()
	batch := make([]*wop, 0, l.maxBatch)
	for {
		var open bool
		if batch, open = gather(l.ops, l.quit, batch, l.maxBatch); !open {
			return
		}
		if len(batch) == 1 {
			batch[0].done <- l.runOne(context.Background(), batch[0])
		} else {
			l.runBatch(batch)
		}
	}
}

// runOne runs one write on its own. Without faults it is one autocommit
// statement; with faults (tests) an explicit transaction, so that the
// hooks can fail it before or after its COMMIT.
func (l *Ledger) runOne(ctx context.Context, o *wop) error {
	ctx, cancel := bound(ctx)
	defer cancel()
	start := time.Now()
	err := l.onConn(ctx, func(c *pgxpool.Conn) error {
		if l.faults == nil {
			return translate(o.exec(ctx, c))
		}
		tx, err := c.Begin(ctx)
		if err != nil {
			return translate(err)
		}
		defer tx.Rollback(ctx)
		if err := o.exec(ctx, tx); err != nil {
			return translate(err)
		}
		return l.commit(ctx, tx)
	})
	if err == nil && l.onCommit != nil {
		l.onCommit(time.Since(start), 1)
	}
	return err
}

// runBatch commits writes in one transaction, pipelined, and sends each
// its own result. Their row locks are taken in GUID order, so that two
// relays' batches (and the orphan sweep) never deadlock on each other.
//
// One write's failure is that write's alone (docs/ledger.md): a statement
// that fails inside the batch (a deadlock, a lock timeout, a constraint)
// aborts the transaction, so that write gets its error and the batch is
// run again without it. Anything else (the commit, the connection) fails
// every write of the batch: none of them is known to have committed.
func (l *Ledger) runBatch(batch []*wop) {
	pending := slices.Clone(batch)
	slices.SortStableFunc(pending, func(a, b *wop) int { return strings.Compare(a.key, b.key) })
	for len(pending) > 0 {
		failed, err := l.tryBatch(pending)
		if failed < 0 {
			for _, o := range pending {
				o.done <- err
			}
			return
		}
		pending[failed].done <- err
		pending = slices.Delete(pending, failed, failed+1)
	}
}

// tryBatch runs pending (sorted) in one transaction. failed is the index
// of the write whose own statement failed, with its error, or -1 when err
// (nil or not) is the whole batch's.
func (l *Ledger) tryBatch(pending []*wop) (failed int, err error) {
	ctx, cancel := bound(context.Background())
	defer cancel()
	start := time.Now()
	failed = -1
	err = l.onConn(ctx, func(c *pgxpool.Conn) error {
		// Without faults the batch is one implicit transaction: its
		// statements and their commit (at the batch's Sync) take one round
		// trip. With faults (tests), an explicit transaction, so that the
		// hooks run between the statements and their COMMIT.
		var q interface {
			SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
		} = c
		var tx pgx.Tx
		if l.faults != nil {
			var err error
			if tx, err = c.Begin(ctx); err != nil {
				return translate(err)
			}
			defer tx.Rollback(ctx)
			q = tx
		}
		var b pgx.Batch
		for _, o := range pending {
			b.Queue(o.sql, o.args...)
		}
		br := q.SendBatch(ctx, &b)
		for i, o := range pending {
			if err := o.read(br); err != nil {
				br.Close()
				if statementFailed(err) {
					failed = i
				}
				return translate(err)
			}
		}
		if err := br.Close(); err != nil {
			// Every statement succeeded: without tx this was the commit.
			return fmt.Errorf("commit: %w", translate(err))
		}
		if tx == nil {
			return nil
		}
		return l.commit(ctx, tx)
	})
	if failed >= 0 && (err == nil || errors.Is(err, ledger.ErrNotCommitted)) {
		// The connection was judged after the statement failed (a
		// demoted server): that is every write's failure, not this one's.
		failed = -1
	}
	if err == nil && l.onCommit != nil {
		l.onCommit(time.Since(start), len(pending))
	}
	return failed, err
}

// statementFailed reports an error of one statement that leaves the
// session usable once the transaction is rolled back: the server answered
// it with an error of its own (a deadlock, a lock or statement timeout, a
// constraint), not a broken connection or a server that is no longer the
// primary.
func statementFailed(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && !notPrimary(err) && !strings.HasPrefix(pe.Code, "08") && !strings.HasPrefix(pe.Code, "57P")
}

// commit commits tx, with the test hooks around it.
func (l *Ledger) commit(ctx context.Context, tx pgx.Tx) error {
	if err := l.faults.Before(); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", translate(err))
	}
	return l.faults.After()
}

func (l *Ledger) execCount(ctx context.Context, key, sql string, args ...any) (int64, error) {
	o := &wop{key: key, sql: sql, args: args}
	err := l.submit(ctx, o)
	return o.n, err
}

// queryCount runs a write whose statement returns the count of rows it
// changed (a WITH that also writes their events).
func (l *Ledger) queryCount(ctx context.Context, key, sql string, args ...any) (int64, error) {
	var n int64
	o := &wop{key: key, sql: sql, args: args, scan: []any{&n}}
	err := l.submit(ctx, o)
	return n, err
}

// nullable is s, or NULL when empty.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Claim claims a new GUID (none → SENT, attempts 1). A concurrent claim of
// the same GUID waits for the first to commit, then affects nothing.
func (l *Ledger) Claim(ctx context.Context, guid, txCode string, request []byte) (bool, error) {
	n, err := l.execCount(ctx, guid, ledger.SQL.Claim.Postgres, guid, txCode, request)
	if err != nil {
		return false, fmt.Errorf("claim %s: %w", guid, err)
	}
	return n == 1, nil
}

// Reclaim takes a FAILED/E902 row back to SENT with attempts + 1, judged
// by the row the statement returned; stored is the request it holds.
func (l *Ledger) Reclaim(ctx context.Context, guid string, request []byte, maxAttempts int) (int, []byte, bool, error) {
	var attempt int
	var stored []byte
	o := &wop{key: guid, sql: ledger.SQL.Reclaim.Postgres, args: []any{request, guid, maxAttempts, l.actor}, scan: []any{&attempt, &stored}}
	if err := l.submit(ctx, o); err != nil {
		return 0, nil, false, fmt.Errorf("reclaim %s: %w", guid, err)
	}
	if o.noRow {
		return 0, nil, false, nil
	}
	return attempt, stored, true, nil
}

// Finish records the outcome of the holder's claim, fenced on attempt.
func (l *Ledger) Finish(ctx context.Context, guid string, attempt int, o ledger.Outcome) (bool, error) {
	var n int64
	var err error
	if o.Reclaimed {
		n, err = l.queryCount(ctx, guid, ledger.SQL.FinishEvent.Postgres, string(o.State), o.RspCode, o.Response, guid, attempt, l.actor, nullable(o.Detail))
	} else {
		n, err = l.execCount(ctx, guid, ledger.SQL.Finish.Postgres, string(o.State), o.RspCode, o.Response, guid, attempt)
	}
	if err != nil {
		return false, fmt.Errorf("finish %s attempt %d: %w", guid, attempt, err)
	}
	return n == 1, nil
}

// Resolve records resolve's verdict, fenced on the row as selected.
func (l *Ledger) Resolve(ctx context.Context, selected ledger.Row, o ledger.Outcome) (bool, error) {
	n, err := l.queryCount(ctx, selected.GUID, ledger.SQL.Resolve.Postgres, string(o.State), o.RspCode, o.Response, selected.GUID, selected.Attempts, selected.UpdatedAt,
		l.actor, nullable(o.Detail))
	if err != nil {
		return false, fmt.Errorf("resolve %s: %w", selected.GUID, err)
	}
	return n == 1, nil
}

// SweepOrphans moves SENT/RECEIVED rows older than after to UNKNOWN/E901.
func (l *Ledger) SweepOrphans(ctx context.Context, after time.Duration) (int64, error) {
	n, err := l.queryCount(ctx, "", ledger.SQL.Sweep.Postgres, after.Seconds(), l.actor)
	if err != nil {
		return 0, fmt.Errorf("sweep orphans: %w", err)
	}
	return n, nil
}

// PurgeBatch deletes at most limit DONE rows not updated for days days.
func (l *Ledger) PurgeBatch(ctx context.Context, days, limit int) (int64, error) {
	n, err := l.execCount(ctx, "", ledger.SQL.Purge.Postgres, days, limit)
	if err != nil {
		return 0, fmt.Errorf("purge: %w", err)
	}
	return n, nil
}

// Get returns the row of guid, or nil if there is none.
func (l *Ledger) Get(ctx context.Context, guid string) (*ledger.Row, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	r, err := ledger.ScanRow(l.pool.QueryRow(ctx, ledger.SQL.Get.Postgres, guid))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", guid, translate(err))
	}
	return r, nil
}

func (l *Ledger) selectRows(ctx context.Context, what, query string, args ...any) ([]ledger.Row, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	rows, err := l.pool.Query(ctx, query, args...)
	return ledger.ReadRows(selection{rows}, err, what, translate)
}

// SelectUnknown returns resolve's candidates.
func (l *Ledger) SelectUnknown(ctx context.Context, minAge time.Duration) ([]ledger.Row, error) {
	return l.selectRows(ctx, "unknown", ledger.SQL.SelectUnknown.Postgres, minAge.Seconds())
}

// SelectFailed returns reprocess's candidates.
func (l *Ledger) SelectFailed(ctx context.Context, maxAttempts int) ([]ledger.Row, error) {
	return l.selectRows(ctx, "failed", ledger.SQL.SelectFailed.Postgres, maxAttempts)
}

// SelectState lists rows in state not updated for olderThan, oldest first.
func (l *Ledger) SelectState(ctx context.Context, state dedup.State, olderThan time.Duration, limit int) ([]ledger.Row, error) {
	var max any // NULL: no limit
	if limit > 0 {
		max = limit
	}
	return l.selectRows(ctx, "state "+string(state), ledger.SQL.SelectState.Postgres, string(state), olderThan.Seconds(), max)
}

func (l *Ledger) count(ctx context.Context, what, sql string, args ...any) (int64, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	return ledger.Count(l.pool.QueryRow(ctx, sql, args...), what, translate)
}

// CountExhausted counts FAILED/E902 rows at or above maxAttempts.
func (l *Ledger) CountExhausted(ctx context.Context, maxAttempts int) (int, error) {
	n, err := l.count(ctx, "exhausted", ledger.SQL.CountExhausted.Postgres, maxAttempts)
	return int(n), err
}

// CountPurgeable counts the DONE rows PurgeBatch would delete.
func (l *Ledger) CountPurgeable(ctx context.Context, days int) (int64, error) {
	return l.count(ctx, "purgeable", ledger.SQL.CountPurgeable.Postgres, days)
}

// Stats counts the rows per state, each up to limit (0: all), with the
// oldest age of each.
func (l *Ledger) Stats(ctx context.Context, limit int64) ([]ledger.StateStat, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	var bound *int64 // NULL: LIMIT ALL
	if limit > 0 {
		bound = &limit
	}
	rows, err := l.pool.Query(ctx, ledger.SQL.Stats.Postgres, bound)
	return ledger.ReadStats(selection{rows}, err, limit, translate)
}

// CountSlice counts one slice of state's rows (ledger.Ledger.CountSlice):
// two reads of at most limit index entries.
func (l *Ledger) CountSlice(ctx context.Context, state dedup.State, after *ledger.Mark, limit int) (int64, *ledger.Mark, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	return ledger.CountSliceWith(after, limit, func(lo any, offset int) (any, bool, error) {
		var at time.Time
		err := l.pool.QueryRow(ctx, ledger.SQL.SliceEdge.Postgres, string(state), lo, offset).Scan(&at)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("count %s: %w", state, translate(err))
		}
		return at, true, nil
	}, func(lo, hi any) (int64, error) {
		return ledger.Count(l.pool.QueryRow(ctx, ledger.SQL.SliceCount.Postgres, string(state), lo, hi), "slice of "+string(state), translate)
	})
}

// Now returns the server's clock, clock_timestamp() (docs/ledger.md
// "Clocks").
func (l *Ledger) Now(ctx context.Context) (time.Time, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	var now float64
	if err := l.pool.QueryRow(ctx, ledger.SQL.Now.Postgres).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the clock: %w", translate(err))
	}
	return fromEpoch(now), nil
}

func fromEpoch(s float64) time.Time { return time.UnixMicro(int64(s * 1e6)).UTC() }

// Events returns guid's events, oldest first.
func (l *Ledger) Events(ctx context.Context, guid string) ([]ledger.Event, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	rows, err := l.pool.Query(ctx, ledger.SQL.EventsOf.Postgres, guid)
	return ledger.ReadEvents(selection{rows}, err, fmt.Sprintf("events of %s", guid), false, translate)
}

// EventsBetween returns the events at or after since and before until
// (zero: no end), oldest first.
func (l *Ledger) EventsBetween(ctx context.Context, since, until time.Time) ([]ledger.Event, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	q := "SELECT " + ledger.EventColumnsPostgres + " FROM tx_event WHERE at >= $1"
	args := []any{since}
	if !until.IsZero() {
		q += " AND at < $2"
		args = append(args, until)
	}
	rows, err := l.pool.Query(ctx, q+" ORDER BY id", args...)
	return ledger.ReadEvents(selection{rows}, err, "events", false, translate)
}

// PurgeEvents deletes at most limit events older than days days.
func (l *Ledger) PurgeEvents(ctx context.Context, days, limit int) (int64, error) {
	n, err := l.execCount(ctx, "", ledger.SQL.PurgeEvents.Postgres, days, limit)
	if err != nil {
		return 0, fmt.Errorf("purge events: %w", err)
	}
	return n, nil
}

// EventByID returns one event with its age, or nil.
func (l *Ledger) EventByID(ctx context.Context, id int64) (*ledger.Event, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	rows, err := l.pool.Query(ctx, ledger.SQL.EventByID.Postgres, id)
	return ledger.First(ledger.ReadEvents(selection{rows}, err, fmt.Sprintf("event %d", id), true, translate))
}

// OpenProposals lists the proposals without a decision, oldest first.
func (l *Ledger) OpenProposals(ctx context.Context) ([]ledger.Event, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	rows, err := l.pool.Query(ctx, "SELECT "+ledger.EventColumnsPostgres+", "+ledger.EventAge.Postgres+` FROM tx_event p
WHERE action='propose' AND NOT EXISTS (SELECT 1 FROM tx_event d WHERE d.guid = p.guid
AND d.action IN ('approve','reject','expire') AND d.detail LIKE '{"proposal":' || p.id || ',%') ORDER BY id`)
	return ledger.ReadEvents(selection{rows}, err, "open proposals", true, translate)
}

// AddEvent appends an event that changes no row and returns its id.
func (l *Ledger) AddEvent(ctx context.Context, e ledger.Event) (int64, error) {
	var id int64
	o := &wop{key: e.GUID, sql: ledger.SQL.AddEvent.Postgres, args: []any{e.GUID, e.Actor, e.Action, nullable(e.FromState), nullable(e.ToState),
		nullable(e.RspCode), e.Attempts, nullable(e.Detail)}, scan: []any{&id}}
	if err := l.submit(ctx, o); err != nil {
		return 0, fmt.Errorf("add event %s %s: %w", e.Action, e.GUID, err)
	}
	return id, nil
}

// Decide records a decision on a proposal in one transaction of its own.
// The proposal's event is locked first, so that decisions on one proposal
// are serialized; each later statement (READ COMMITTED) then sees a
// decision committed meanwhile.
func (l *Ledger) Decide(ctx context.Context, d ledger.Decision) error {
	ctx, cancel := bound(ctx)
	defer cancel()
	var verdict error
	e := d.Event
	err := l.onConn(ctx, func(c *pgxpool.Conn) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			return translate(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "SELECT id FROM tx_event WHERE id=$1 FOR UPDATE", d.Proposal); err != nil {
			return translate(err)
		}
		var closed bool
		if err := tx.QueryRow(ctx, ledger.SQL.ProposalClosed.Postgres, e.GUID, ledger.ProposalRef(d.Proposal)+"%").Scan(&closed); err != nil {
			return translate(err)
		}
		if closed {
			verdict = ledger.ErrProposalClosed
			return nil
		}
		if d.From != nil {
			tag, err := tx.Exec(ctx, ledger.SQL.Decide.Postgres, string(d.To.State), d.To.RspCode, d.To.Response,
				e.GUID, string(d.From.State), d.From.Attempts, d.From.UpdatedAt)
			if err != nil {
				return translate(err)
			}
			if tag.RowsAffected() == 0 {
				verdict = ledger.ErrRowChanged
				return nil
			}
		}
		if _, err := tx.Exec(ctx, ledger.SQL.AddEvent.Postgres, e.GUID, e.Actor, e.Action, nullable(e.FromState), nullable(e.ToState),
			nullable(e.RspCode), e.Attempts, nullable(e.Detail)); err != nil {
			return translate(err)
		}
		return l.commit(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("%s proposal %d: %w", e.Action, d.Proposal, err)
	}
	return verdict
}

// selection adapts pgx's rows to ledger.Selection (pgx's Close returns
// nothing; its error is in Err, which the collectors check).
type selection struct{ pgx.Rows }

// Close closes the rows.
func (s selection) Close() error {
	s.Rows.Close()
	return nil
}
