package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"dedup/ledger"
)

type writeStmts struct {
	claim, reclaim, finish, resolve, resolveJournal, sweepSelect, sweep, purge, purgeEvents, event *sql.Stmt
}

func prepareWrites(ctx context.Context, c *sql.Conn) (writeStmts, error) {
	var s writeStmts
	for _, p := range []struct {
		dst   **sql.Stmt
		query string
	}{
		{&s.claim, ledger.SQL.Claim.SQLite}, {&s.reclaim, ledger.SQL.Reclaim.SQLite}, {&s.finish, ledger.SQL.Finish.SQLite},
		{&s.resolve, ledger.SQL.Resolve.SQLite}, {&s.resolveJournal, ledger.SQL.ResolveFromJournal.SQLite}, {&s.sweepSelect, ledger.SQL.SweepSelect.SQLite}, {&s.sweep, ledger.SQL.Sweep.SQLite}, {&s.purge, ledger.SQL.Purge.SQLite}, {&s.purgeEvents, ledger.SQL.PurgeEvents.SQLite}, {&s.event, ledger.SQL.Event.SQLite},
	} {
		st, err := c.PrepareContext(ctx, p.query)
		if err != nil {
			s.close()
			return s, fmt.Errorf("prepare: %w", err)
		}
		*p.dst = st
	}
	return s, nil
}

func (s writeStmts) close() {
	for _, st := range []*sql.Stmt{s.claim, s.reclaim, s.finish, s.resolve, s.resolveJournal, s.sweepSelect, s.sweep, s.purge, s.purgeEvents, s.event} {
		if st != nil {
			st.Close()
		}
	}
}

// op is one write waiting to be committed. run executes it inside the
// batch's transaction and stores its own result; the batch's error, if any,
// is sent on done and overrides that result.
type op struct {
	run  func(ctx context.Context, s *writeStmts) error
	done chan error
}

// errLead, sent on a waiting op's done channel, tells its caller to commit
// the next batch itself.
var errLead = errors.New("lead the next batch")

// submit queues o and returns once the batch holding it has committed
// (group commit, led by the callers themselves).
//
// There is no writer goroutine. A caller that finds no batch in progress
// leads one: it takes what is queued (at first only its own write), runs
// it in one transaction on the write connection, commits, and acknowledges
// the others. Callers that arrive meanwhile queue up; when the leader is
// done, it hands the lead to the first of them, which commits all of them
// at once. At low load a write is thus committed by its own goroutine with
// no hand-off at all: on a virtual machine, waking a parked thread costs
// tens of microseconds of latency and CPU, twice per write with a writer
// goroutine. Under load, batches form while the previous commit (and its
// fsync) is in flight, as before.
//
// Once queued, o is committed or failed whatever ctx says: a caller must
// never act as if a write failed that may have committed.
func (l *Ledger) submit(ctx context.Context, o *op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.Damaged(); err != nil {
		return err
	}
	o.done = make(chan error, 1)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ledger.ErrClosed
	}
	l.queue = append(l.queue, o)
	if l.leading {
		l.mu.Unlock()
		if err := <-o.done; err != errLead {
			return err
		}
		l.mu.Lock()
	}
	l.leading = true
	// The queue starts with o: a new leader's queue holds only its own
	// write, and the lead is handed to the queue's first.
	n := min(len(l.queue), l.maxBatch)
	b := append(make([]*op, 0, n), l.queue[:n]...)
	l.queue = append(l.queue[:0], l.queue[n:]...)
	l.mu.Unlock()

	start := time.Now()
	errs, committed := l.commitEach(b)
	if committed > 0 && l.onCommit != nil {
		l.onCommit(time.Since(start), committed)
	}
	var err error
	for i, x := range b {
		if x != o {
			x.done <- errs[i]
		} else {
			err = errs[i]
		}
	}

	// Hand the lead to the first write that queued meanwhile. Leading
	// the next batch here instead would make this caller wait for writes
	// that are not its own.
	l.mu.Lock()
	if len(l.queue) == 0 {
		l.leading = false
		l.idle.Broadcast()
		l.mu.Unlock()
		return err
	}
	next := l.queue[0]
	l.mu.Unlock()
	next.done <- errLead
	return err
}

// begin takes the write lock (BEGIN IMMEDIATE), waiting at most
// BusyTimeout for another process to release it.
//
// The wait is ours, not SQLite's busy handler: that handler sleeps in steps
// growing to 100 ms, while a busy writer in another process (a relay under
// load) frees the lock only for microseconds between its commits. A waiter
// that sleeps 100 ms at a time almost never finds it free, so a purge or a
// second relay would starve and fail with "database is locked". Polling
// every few hundred microseconds finds the gaps; the bound stays 5 s.
func (l *Ledger) begin(ctx context.Context) error {
	deadline := time.Now().Add(ledger.BusyTimeout)
	pause := 50 * time.Microsecond
	for {
		_, err := l.conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		if err == nil {
			return nil
		}
		if !isBusy(err) {
			return translate(err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %v", ledger.ErrBusy, err)
		}
		time.Sleep(pause + time.Duration(rand.Int64N(int64(pause))))
		pause = min(2*pause, 500*time.Microsecond)
	}
}

// commitEach commits batch and returns each write's own result, and how
// many writes committed. One write's failure is that write's alone
// (docs/ledger.md): a statement refused by a constraint rolls the
// transaction back, gets its own error, and the batch is committed again
// without it. Any other failure (the lock, the disk, the commit) fails
// every write still in the batch, so no caller believes a write happened
// that did not.
func (l *Ledger) commitEach(batch []*op) (errs []error, committed int) {
	errs = make([]error, len(batch))
	pending := batch
	at := make([]int, len(batch)) // pending[k] is batch[at[k]]
	for i := range at {
		at[i] = i
	}
	for len(pending) > 0 {
		failed, err := l.commit(pending)
		if failed < 0 {
			for _, i := range at {
				errs[i] = err
			}
			if err == nil {
				committed = len(pending)
			}
			return errs, committed
		}
		errs[at[failed]] = err
		pending = append(pending[:failed:failed], pending[failed+1:]...)
		at = append(at[:failed:failed], at[failed+1:]...)
	}
	return errs, 0
}

// commit runs batch in one BEGIN IMMEDIATE ... COMMIT. If anything fails,
// the whole batch is rolled back; failed is the index of the write whose
// own statement a constraint refused, or -1 when err is the batch's.
func (l *Ledger) commit(batch []*op) (failed int, err error) {
	failed = -1
	ctx := context.Background() // a batch is never cut short by one caller
	if err := l.begin(ctx); err != nil {
		return -1, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			// After some errors SQLite has already rolled back; a second
			// rollback then fails harmlessly.
			l.conn.ExecContext(ctx, "ROLLBACK")
		}
	}()
	for i, o := range batch {
		if err := o.run(ctx, &l.stmts); err != nil {
			var se sqlite3.Error
			if errors.As(err, &se) && se.Code == sqlite3.ErrConstraint {
				failed = i
			}
			return failed, translate(err)
		}
	}
	if err := l.faults.Before(); err != nil {
		return -1, err
	}
	if _, err := l.conn.ExecContext(ctx, "COMMIT"); err != nil {
		return -1, fmt.Errorf("commit: %w", translate(err))
	}
	return -1, l.faults.After()
}

// execCount runs one of the prepared writes in the next batch and returns
// the rows it affected (the claim's, the fences' and the sweep's verdict).
func (l *Ledger) execCount(ctx context.Context, stmt func(*writeStmts) *sql.Stmt, args ...any) (int64, error) {
	return l.execCountThen(ctx, stmt, nil, args...)
}

// execCountThen is execCount that also runs then, in the same transaction,
// if the write changed a row (its event).
func (l *Ledger) execCountThen(ctx context.Context, stmt func(*writeStmts) *sql.Stmt, then func(context.Context, *writeStmts) error, args ...any) (int64, error) {
	var n int64
	err := l.submit(ctx, &op{run: func(ctx context.Context, s *writeStmts) error {
		res, err := stmt(s).ExecContext(ctx, args...)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil || n == 0 || then == nil {
			return err
		}
		return then(ctx, s)
	}})
	return n, err
}

// event appends one event in the running write transaction.
func (l *Ledger) event(ctx context.Context, s *writeStmts, guid, action, from, to string, rsp any, attempts int, detail any) error {
	_, err := s.event.ExecContext(ctx, guid, l.actor, action, from, to, rsp, attempts, detail)
	if err != nil {
		return fmt.Errorf("event %s %s: %w", action, guid, err)
	}
	return nil
}

// nullable is s, or NULL when empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Claim claims a new GUID for a send to the core (docs/ledger.md: none → SENT):
// it inserts a SENT row with attempts 1 unless the GUID already has a row.
// claimed reports whether this caller owns the GUID; the claim is committed
// before Claim returns.
func (l *Ledger) Claim(ctx context.Context, guid, txCode string, request []byte) (claimed bool, err error) {
	n, err := l.execCount(ctx, func(s *writeStmts) *sql.Stmt { return s.claim }, guid, txCode, request)
	if err != nil {
		return false, fmt.Errorf("claim %s: %w", guid, err)
	}
	return n == 1, nil
}

// Reclaim takes a FAILED/E902 row back to SENT with attempts + 1 (docs/ledger.md:
// FAILED → SENT). request is stored only if the row has none; maxAttempts > 0
// admits only rows with fewer attempts (reprocess). claimed reports whether
// this caller owns the row: judged by the row the statement returned, never
// by the attempt number (another tool may have left it at 0 or below).
// attempt is the new attempt number and stored the request the row holds
// now, which is the one to send.
func (l *Ledger) Reclaim(ctx context.Context, guid string, request []byte, maxAttempts int) (attempt int, stored []byte, claimed bool, err error) {
	err = l.submit(ctx, &op{run: func(ctx context.Context, s *writeStmts) error {
		attempt, stored, claimed = 0, nil, false
		err := s.reclaim.QueryRowContext(ctx, request, guid, maxAttempts, maxAttempts).Scan(&attempt, &stored)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		claimed = true
		return l.event(ctx, s, guid, ledger.ActionReclaim, "FAILED", "SENT", nil, attempt, nil)
	}})
	if err != nil {
		return 0, nil, false, fmt.Errorf("reclaim %s: %w", guid, err)
	}
	return attempt, stored, claimed, nil
}

// Finish records the outcome of the holder's claim (docs/ledger.md: SENT → DONE,
// UNKNOWN or FAILED), fenced on attempt: it changes the row only if it is
// still SENT with the holder's attempt number. recorded reports whether it
// did.
func (l *Ledger) Finish(ctx context.Context, guid string, attempt int, o ledger.Outcome) (recorded bool, err error) {
	var ev func(context.Context, *writeStmts) error
	if o.Reclaimed {
		ev = func(ctx context.Context, s *writeStmts) error {
			return l.event(ctx, s, guid, ledger.ActionOutcome, "SENT", string(o.State), o.RspCode, attempt, nullable(o.Detail))
		}
	}
	n, err := l.execCountThen(ctx, func(s *writeStmts) *sql.Stmt { return s.finish }, ev, string(o.State), o.RspCode, o.Response, guid, attempt)
	if err != nil {
		return false, fmt.Errorf("finish %s attempt %d: %w", guid, attempt, err)
	}
	return n == 1, nil
}

// Resolve records resolve's verdict on an UNKNOWN row (docs/ledger.md: UNKNOWN →
// DONE or FAILED), fenced on the state, attempts and updated_at that were
// selected: a row changed meanwhile is left alone. recorded reports whether
// the row was changed.
func (l *Ledger) Resolve(ctx context.Context, selected ledger.Row, o ledger.Outcome) (recorded bool, err error) {
	ev := func(ctx context.Context, s *writeStmts) error {
		return l.event(ctx, s, selected.GUID, ledger.ActionResolve, "UNKNOWN", string(o.State), o.RspCode, selected.Attempts, nullable(o.Detail))
	}
	n, err := l.execCountThen(ctx, func(s *writeStmts) *sql.Stmt { return s.resolve }, ev, string(o.State), o.RspCode, o.Response, selected.GUID, selected.Attempts, selected.UpdatedAt)
	if err != nil {
		return false, fmt.Errorf("resolve %s: %w", selected.GUID, err)
	}
	return n == 1, nil
}

// SweepOrphans moves SENT/RECEIVED rows not updated for longer than after to
// UNKNOWN/E901, so that resolve resolves them by inquiry. It returns how many
// rows it moved.
func (l *Ledger) SweepOrphans(ctx context.Context, after time.Duration) (int64, error) {
	var n int64
	err := l.submit(ctx, &op{run: func(ctx context.Context, s *writeStmts) error {
		n = 0
		type orphan struct {
			guid, state string
			attempts    int
		}
		rows, err := s.sweepSelect.QueryContext(ctx, secondsAgo(after))
		if err != nil {
			return err
		}
		var found []orphan
		for rows.Next() {
			var o orphan
			if err := rows.Scan(&o.guid, &o.state, &o.attempts); err != nil {
				rows.Close()
				return err
			}
			found = append(found, o)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, o := range found {
			if _, err := s.sweep.ExecContext(ctx, o.guid, o.state); err != nil {
				return err
			}
			if err := l.event(ctx, s, o.guid, ledger.ActionSweep, o.state, "UNKNOWN", "E901", o.attempts, nil); err != nil {
				return err
			}
			n++
		}
		return nil
	}})
	if err != nil {
		return 0, fmt.Errorf("sweep orphans: %w", err)
	}
	return n, nil
}

// PurgeBatch deletes at most limit DONE rows not updated for days days and
// returns how many it deleted. It deletes in chunks of purgeChunk rows
// inside one transaction, and commits once it has held the write lock for
// ledger.PurgeHold, so it may return fewer than limit while more remain:
// callers repeat it until it returns 0.
//
// A purge's commits run no automatic checkpoint. SQLite runs one inside
// the COMMIT of whichever connection takes the WAL past 1000 pages (the
// relay's pages as well as the purge's), after the write lock is
// released; the purge's pause, twice as long as its batch took
// (batch.Purge), then counted the checkpoint as time the batch held the
// lock, and a purge on a large ledger paused about twice as long as its
// rule says. Instead each batch that deleted rows starts a passive
// checkpoint in the background, which runs in the pause: it takes no write
// lock, never waits for readers or writers, and keeps the WAL as short as
// the automatic one would. The last batch (none deleted) waits for it,
// empties the WAL, and turns the automatic checkpoint back on.
func (l *Ledger) PurgeBatch(ctx context.Context, days, limit int) (int64, error) {
	age := fmt.Sprintf("-%d days", days)
	var n int64
	err := l.submit(ctx, &op{run: func(ctx context.Context, s *writeStmts) error {
		if err := l.stopAutoCheckpoint(ctx); err != nil {
			return err
		}
		n = 0 // run again from the start if its batch is retried
		start := time.Now()
		for n < int64(limit) && (n == 0 || time.Since(start) < ledger.PurgeHold) {
			chunk := min(purgeChunk, int64(limit)-n)
			res, err := s.purge.ExecContext(ctx, age, chunk)
			if err != nil {
				return err
			}
			k, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += k
			if k < chunk {
				break
			}
		}
		return nil
	}})
	if err != nil {
		// A failed batch ends the purge (batch.Purge returns its error):
		// the connection writes on as it did before the purge.
		l.restoreAutoCheckpointAfterPurge(ctx)
		return 0, fmt.Errorf("purge: %w", err)
	}
	if n > 0 {
		l.checkpointInBackground()
		return n, nil
	}
	// The last batch of a purge: copy the WAL's overwritten pages into
	// the file and empty the WAL, so that no purged bytes stay in either.
	l.checkpoints.Wait()
	l.truncateWAL(ctx)
	l.restoreAutoCheckpointAfterPurge(ctx)
	return 0, nil
}

// restoreAutoCheckpointAfterPurge turns the write connection's automatic
// checkpoint back on once a purge ended, by its last batch or by an
// error, and even when the purge is being interrupted: the rows deleted
// so far stay deleted, and the connection writes on as it did before.
func (l *Ledger) restoreAutoCheckpointAfterPurge(ctx context.Context) {
	if err := l.submit(context.WithoutCancel(ctx), &op{run: l.restoreAutoCheckpoint}); err != nil && l.warn != nil {
		l.warn("purge: the automatic checkpoint could not be turned back on", "error", err)
	}
}

// stopAutoCheckpoint turns the write connection's automatic checkpoint
// off for a purge (see PurgeBatch), noting what it was. It runs inside a
// batch: only its leader uses the write connection.
func (l *Ledger) stopAutoCheckpoint(ctx context.Context) error {
	if l.autoCheckpoint > 0 {
		return nil
	}
	var pages int
	if err := l.conn.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&pages); err != nil {
		return err
	}
	if pages <= 0 {
		return nil // off already: nothing to restore
	}
	if _, err := l.conn.ExecContext(ctx, "PRAGMA wal_autocheckpoint=0"); err != nil {
		return err
	}
	l.autoCheckpoint = pages
	return nil
}

// restoreAutoCheckpoint turns the automatic checkpoint back on as it was
// before the purge, inside a batch.
func (l *Ledger) restoreAutoCheckpoint(ctx context.Context, _ *writeStmts) error {
	if l.autoCheckpoint <= 0 {
		return nil
	}
	if _, err := l.conn.ExecContext(ctx, fmt.Sprintf("PRAGMA wal_autocheckpoint=%d", l.autoCheckpoint)); err != nil {
		return err
	}
	l.autoCheckpoint = 0
	return nil
}

// checkpointInBackground starts a passive checkpoint on a read
// connection unless one is running. Passive: it copies what no reader
// still needs and never invokes the busy handler, so it waits for no one
// and no one waits for it. A checkpoint the relay's own runs meanwhile
// (its automatic one) makes this one return busy at once, which is fine.
func (l *Ledger) checkpointInBackground() {
	if !l.checkpointing.CompareAndSwap(false, true) {
		return
	}
	l.checkpoints.Add(1)
	go func() {
		defer l.checkpoints.Done()
		defer l.checkpointing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), ledger.BusyTimeout)
		defer cancel()
		var busy, logFrames, checkpointed int
		err := l.rdb.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logFrames, &checkpointed)
		if err != nil && l.warn != nil {
			l.warn("purge: a checkpoint between batches failed; the next batch starts another", "error", err)
		}
	}()
}

// purgeChunk is how many rows one purge statement deletes; PurgeBatch runs
// as many as fit in ledger.PurgeHold.
const purgeChunk = 200

// truncateWAL copies the WAL into the database file and truncates it, if
// no reader prevents that now, so that no purged bytes stay in the WAL
// (docs/security.md). It never waits: a checkpoint that waits for readers
// (busy handler) blocks every writer while it waits, and a reader holding
// an old snapshot (a backup, inspect, a report) would stall every claim
// for the busy timeout (docs/ledger.md, purge). Without a busy handler
// SQLite tries once and answers at once; a checkpoint that readers
// prevented is tried again by the next purge run, and the bytes also leave
// as the WAL is overwritten from its start once it was fully checkpointed.
func (l *Ledger) truncateWAL(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, ledger.BusyTimeout)
	defer cancel()
	c, err := l.rdb.Conn(ctx)
	if err != nil {
		return
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "PRAGMA busy_timeout=0"); err != nil {
		return
	}
	// The connection goes back to the read pool: restore its wait.
	defer c.ExecContext(context.Background(), fmt.Sprintf("PRAGMA busy_timeout=%d", ledger.BusyTimeout.Milliseconds()))
	var busy, logFrames, checkpointed int
	err = c.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &checkpointed)
	if (err != nil || busy != 0) && l.warn != nil {
		l.warn("purge: the WAL could not be truncated now (a reader holds an old snapshot); purged bytes may stay in the -wal file until the next purge run no reader overlaps",
			"busy", busy == 1, "error", err)
	}
}
