// Package purge is the purge job's logic: it forgets old DONE and FAILED
// rows and old events in small batches, beside a serving relay
// (docs/cli.md "purge", docs/ledger.md).
package purge

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"dedup/internal/job"
	"dedup/ledger"
)

// Summary counts one purge run.
type Summary struct {
	Deleted     int64
	DryRun      bool
	WouldDelete int64 // a dry run's count of rows a real run would delete
	// EventsDeleted counts the events older than --event-days deleted
	// (in the textfile and the JSON summary; the text line is the
	// contract's and stays "purge: deleted=N").
	EventsDeleted int64
}

// String is the summary line purge prints last on stdout. A dry run adds
// would_delete.
func (s Summary) String() string {
	if s.DryRun {
		return fmt.Sprintf("purge: deleted=%d would_delete=%d", s.Deleted, s.WouldDelete)
	}
	return fmt.Sprintf("purge: deleted=%d", s.Deleted)
}

// Fields are the summary's counts in order.
func (s Summary) Fields() []job.Field {
	f := []job.Field{{Name: "deleted", Value: s.Deleted}, {Name: "events_deleted", Value: s.EventsDeleted}}
	if s.DryRun {
		f = append(f, job.Field{Name: "would_delete", Value: s.WouldDelete})
	}
	return f
}

// BatchSize is the most rows one purge batch deletes. Each backend
// also bounds how long a batch holds its locks (SQLite: ledger.PurgeHold
// of the write lock), so a batch may delete fewer rows than asked while
// more remain; a purge ends at the first batch that deletes none.
const BatchSize = 5000

// purgePause is the least pause between two purge batches. Neither backend
// has a fair queue for its write lock (SQLite's writers poll for it, every
// half millisecond at most in ledger/sqlite; PostgreSQL's row locks go to
// whoever asks next), so a purge that started its next batch at once could
// take the lock again and again while a relay's claim waits. Pausing at
// least twice as long as each batch took leaves the lock free most of the
// time.
const purgePause = 10 * time.Millisecond

// Purge deletes DONE rows not updated for days days, in batches. Every other
// state is kept whatever its age: it is the evidence for investigation. A
// dry run deletes nothing and counts what a real run would delete. If
// progress is not nil, it is called after every batch with the rows deleted
// so far and the count there was to delete at the start.
//
// Like Resolve, it deletes nothing while the ledger's clock and this
// host's differ by more than maxSkew: a clock that runs ahead would delete
// rows a channel may still retransmit.
//
// Then it deletes the events older than eventDays days (0: none), in
// batches too: a purged row's events outlive it, for the auditors.
func Run(ctx context.Context, l ledger.Ledger, days, eventDays int, maxSkew time.Duration, dryRun bool, progress func(deleted, total int64), log *slog.Logger) (Summary, error) {
	var sum Summary
	if _, err := ledger.CheckClock(ctx, l, maxSkew); err != nil {
		return sum, err
	}
	var total int64
	if dryRun || progress != nil {
		n, err := l.CountPurgeable(ctx, days)
		if err != nil {
			return sum, err
		}
		if dryRun {
			sum.DryRun, sum.WouldDelete = true, n
			return sum, nil
		}
		total = n
	}
	err := inBatches(ctx, func(ctx context.Context) (int64, error) { return l.PurgeBatch(ctx, days, BatchSize) }, func(n int64) {
		sum.Deleted += n
		if progress != nil {
			progress(sum.Deleted, total)
		}
	})
	if err != nil || eventDays <= 0 {
		return sum, err
	}
	err = inBatches(ctx, func(ctx context.Context) (int64, error) { return l.PurgeEvents(ctx, eventDays, BatchSize) },
		func(n int64) { sum.EventsDeleted += n })
	if sum.EventsDeleted > 0 {
		log.Info("purge: events older than --event-days deleted", "events", sum.EventsDeleted, "event_days", eventDays)
	}
	return sum, err
}

// inBatches runs batch until it deletes nothing, telling done of each
// batch's count, and pauses between batches so that a relay's claims are
// never kept waiting long (see purgePause).
func inBatches(ctx context.Context, batch func(context.Context) (int64, error), done func(int64)) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		start := time.Now()
		n, err := batch(ctx)
		if err != nil {
			return err
		}
		done(n)
		if n == 0 {
			return nil
		}
		time.Sleep(max(purgePause, 2*time.Since(start)))
	}
}
