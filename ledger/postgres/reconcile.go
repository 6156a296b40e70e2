package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"dedup/ledger"
)

// ResolveFromJournal records reconcile's verdict on an UNKNOWN or FAILED
// row (docs/reconcile.md), fenced on the row as read, with its reconcile
// event in the same statement.
func (l *Ledger) ResolveFromJournal(ctx context.Context, selected ledger.Row, o ledger.Outcome) (bool, error) {
	n, err := l.queryCount(ctx, selected.GUID, ledger.SQL.ResolveFromJournal.Postgres, o.Response, selected.GUID,
		string(selected.State), selected.Attempts, selected.UpdatedAt, l.actor, nullable(o.Detail))
	if err != nil {
		return false, fmt.Errorf("reconcile %s: %w", selected.GUID, err)
	}
	return n == 1, nil
}

// GetMany returns the rows of guids that exist, in one query.
func (l *Ledger) GetMany(ctx context.Context, guids []string) ([]ledger.Row, error) {
	if len(guids) == 0 {
		return nil, nil
	}
	// Planned anew for each call, as confirmMany is: `= ANY($1)` must
	// not keep a plan made when the table was small.
	return l.selectRows(ctx, fmt.Sprintf("%d rows", len(guids)), ledger.SQL.GetMany.Postgres, pgx.QueryExecModeExec, guids)
}

// DoneSlice returns one slice of the DONE/0000 rows that may belong to
// business date day, in two short reads of the state index.
func (l *Ledger) DoneSlice(ctx context.Context, day string, after *ledger.Mark, limit int) ([]ledger.Row, *ledger.Mark, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	return ledger.SliceWith(after, limit, func(lo any, offset int) (any, bool, error) {
		var at time.Time
		err := l.pool.QueryRow(ctx, ledger.SQL.DoneSliceEdge.Postgres, day, lo, offset).Scan(&at)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("done rows of %s: %w", day, translate(err))
		}
		return at, true, nil
	}, func(lo, hi any) ([]ledger.Row, error) {
		return l.selectRows(ctx, "done rows of "+day, ledger.SQL.DoneSlice.Postgres, day, lo, hi)
	})
}

// AddReconcileRun keeps a completed run and its findings in one
// transaction of its own.
func (l *Ledger) AddReconcileRun(ctx context.Context, r ledger.ReconcileRun) (int64, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	var id int64
	kept := ledger.KeptFindings(r)
	err := l.onConn(ctx, func(c *pgxpool.Conn) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			return translate(err)
		}
		defer tx.Rollback(ctx)
		if err := tx.QueryRow(ctx, ledger.SQL.AddReconcileRun.Postgres, ledger.ReconcileRunArgs(r)...).Scan(&id); err != nil {
			return translate(err)
		}
		var b pgx.Batch
		for _, f := range kept {
			b.Queue(ledger.SQL.AddReconcileFinding.Postgres, ledger.ReconcileFindingArgs(id, f)...)
			if f.Class.Critical() {
				b.Queue(ledger.SQL.OpenCriticalFinding.Postgres, ledger.OpenCriticalFindingArgs(id, r, f)...)
			}
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return translate(err)
		}
		return l.commit(ctx, tx)
	})
	if err != nil {
		return 0, fmt.Errorf("keep the reconciliation of %s: %w", r.Date, err)
	}
	return id, nil
}

// ReconcileRuns lists the last limit runs of date ("" for every date).
func (l *Ledger) ReconcileRuns(ctx context.Context, date string, limit int) ([]ledger.ReconcileRun, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	rows, err := l.pool.Query(ctx, ledger.SQL.ReconcileRuns.Postgres, date, limit)
	return ledger.ReadReconcileRuns(selection{rows}, err, translate)
}

// ReconcileFindings returns the findings kept for a run, critical first.
func (l *Ledger) ReconcileFindings(ctx context.Context, runID int64) ([]ledger.ReconcileFinding, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	rows, err := l.pool.Query(ctx, ledger.SQL.ReconcileFindings.Postgres, runID)
	return ledger.ReadReconcileFindings(selection{rows}, err, translate)
}

// OpenFindings returns the open critical findings, oldest first, and how
// many are open.
func (l *Ledger) OpenFindings(ctx context.Context, limit int) ([]ledger.CriticalFinding, int64, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	var n int64
	if err := l.pool.QueryRow(ctx, ledger.SQL.CountOpenFindings.Postgres).Scan(&n); err != nil {
		return nil, 0, fmt.Errorf("count the open findings: %w", translate(err))
	}
	rows, err := l.pool.Query(ctx, ledger.SQL.OpenFindings.Postgres, limit)
	fs, err := ledger.ReadCriticalFindings(selection{rows}, err, translate)
	return fs, n, err
}

// Finding returns critical finding id (nil if none).
func (l *Ledger) Finding(ctx context.Context, id int64) (*ledger.CriticalFinding, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	rows, err := l.pool.Query(ctx, ledger.SQL.FindingByID.Postgres, id)
	fs, err := ledger.ReadCriticalFindings(selection{rows}, err, translate)
	if err != nil || len(fs) == 0 {
		return nil, err
	}
	return &fs[0], nil
}

// CloseFinding closes open finding id for actor and records its
// close_finding event, in one transaction: the schema owner's way (the
// conformance suite's); an operator's role closes through
// CloseFindingInLedger.
func (l *Ledger) CloseFinding(ctx context.Context, id int64, actor, note string) (ledger.CriticalFinding, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	var closed ledger.CriticalFinding
	var verdict error
	err := l.onConn(ctx, func(c *pgxpool.Conn) error {
		verdict = nil
		tx, err := c.Begin(ctx)
		if err != nil {
			return translate(err)
		}
		defer tx.Rollback(ctx)
		rows, err := tx.Query(ctx, ledger.SQL.FindingByID.Postgres+" FOR UPDATE", id)
		fs, err := ledger.ReadCriticalFindings(selection{rows}, err, translate)
		if err != nil {
			return err
		}
		if closed, verdict = ledger.ClosableFinding(id, fs); verdict != nil {
			return nil
		}
		if _, err := tx.Exec(ctx, ledger.SQL.CloseFinding.Postgres, actor, note, id); err != nil {
			return translate(err)
		}
		var state *string
		var attempts *int64
		err = tx.QueryRow(ctx, "SELECT state, attempts FROM tx WHERE guid=$1", closed.GUID).Scan(&state, &attempts)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return translate(err)
		}
		var ignored int64
		if err := tx.QueryRow(ctx, ledger.SQL.AddEvent.Postgres, closed.GUID, actor, ledger.ActionCloseFinding, state, nil, nil, attempts,
			ledger.FindingClosedDetail(closed, note)).Scan(&ignored); err != nil {
			return translate(err)
		}
		return l.commit(ctx, tx)
	})
	if err != nil {
		return ledger.CriticalFinding{}, fmt.Errorf("close finding %d: %w", id, err)
	}
	if verdict != nil {
		return ledger.CriticalFinding{}, verdict
	}
	closed.ClosedBy, closed.Note = actor, note
	return closed, nil
}
