package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"dedup/ledger"
)

// ResolveFromJournal records reconcile's verdict on an UNKNOWN or FAILED
// row (docs/reconcile.md): DONE/0000 with o.Response, fenced on the state,
// attempts and updated_at that were read, and its reconcile event in the
// same transaction. recorded reports whether the row was changed.
func (l *Ledger) ResolveFromJournal(ctx context.Context, selected ledger.Row, o ledger.Outcome) (recorded bool, err error) {
	ev := func(ctx context.Context, s *writeStmts) error {
		return l.event(ctx, s, selected.GUID, ledger.ActionReconcile, string(selected.State), "DONE", "0000", selected.Attempts, nullable(o.Detail))
	}
	n, err := l.execCountThen(ctx, func(s *writeStmts) *sql.Stmt { return s.resolveJournal }, ev,
		o.Response, selected.GUID, string(selected.State), selected.Attempts, selected.UpdatedAt)
	if err != nil {
		return false, fmt.Errorf("reconcile %s: %w", selected.GUID, err)
	}
	return n == 1, nil
}

// GetMany returns the rows of guids that exist, in one read through the
// read pool.
func (l *Ledger) GetMany(ctx context.Context, guids []string) ([]ledger.Row, error) {
	if len(guids) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(guids)
	if err != nil {
		return nil, fmt.Errorf("get %d rows: %w", len(guids), err)
	}
	return l.selectRows(ctx, fmt.Sprintf("%d rows", len(guids)), ledger.SQL.GetMany.SQLite, string(list))
}

// DoneSlice returns one slice of the DONE/0000 rows that may belong to
// business date day, in two short reads of the state index.
func (l *Ledger) DoneSlice(ctx context.Context, day string, after *ledger.Mark, limit int) ([]ledger.Row, *ledger.Mark, error) {
	return ledger.SliceWith(after, limit, func(lo any, offset int) (any, bool, error) {
		var at string
		err := l.rdb.QueryRowContext(ctx, ledger.SQL.DoneSliceEdge.SQLite, day, lo, offset).Scan(&at)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("done rows of %s: %w", day, translate(err))
		}
		return at, true, nil
	}, func(lo, hi any) ([]ledger.Row, error) {
		return l.selectRows(ctx, "done rows of "+day, ledger.SQL.DoneSlice.SQLite, day, lo, hi)
	})
}

// AddReconcileRun keeps a completed run and its findings in one write
// transaction.
func (l *Ledger) AddReconcileRun(ctx context.Context, r ledger.ReconcileRun) (int64, error) {
	var id int64
	kept := ledger.KeptFindings(r)
	err := l.submit(ctx, &op{run: func(ctx context.Context, _ *writeStmts) error {
		if err := l.conn.QueryRowContext(ctx, ledger.SQL.AddReconcileRun.SQLite, ledger.ReconcileRunArgs(r)...).Scan(&id); err != nil {
			return err
		}
		for _, f := range kept {
			if _, err := l.conn.ExecContext(ctx, ledger.SQL.AddReconcileFinding.SQLite, ledger.ReconcileFindingArgs(id, f)...); err != nil {
				return err
			}
			if f.Class.Critical() {
				if _, err := l.conn.ExecContext(ctx, ledger.SQL.OpenCriticalFinding.SQLite, ledger.OpenCriticalFindingArgs(id, r, f)...); err != nil {
					return err
				}
			}
		}
		return nil
	}})
	if err != nil {
		return 0, fmt.Errorf("keep the reconciliation of %s: %w", r.Date, err)
	}
	return id, nil
}

// ReconcileRuns lists the last limit runs of date ("" for every date).
func (l *Ledger) ReconcileRuns(ctx context.Context, date string, limit int) ([]ledger.ReconcileRun, error) {
	rows, err := l.rdb.QueryContext(ctx, ledger.SQL.ReconcileRuns.SQLite, date, limit)
	return ledger.ReadReconcileRuns(rows, err, translate)
}

// ReconcileFindings returns the findings kept for a run, critical first.
func (l *Ledger) ReconcileFindings(ctx context.Context, runID int64) ([]ledger.ReconcileFinding, error) {
	rows, err := l.rdb.QueryContext(ctx, ledger.SQL.ReconcileFindings.SQLite, runID)
	return ledger.ReadReconcileFindings(rows, err, translate)
}

// OpenFindings returns the open critical findings, oldest first, and how
// many are open.
func (l *Ledger) OpenFindings(ctx context.Context, limit int) ([]ledger.CriticalFinding, int64, error) {
	var n int64
	if err := l.rdb.QueryRowContext(ctx, ledger.SQL.CountOpenFindings.SQLite).Scan(&n); err != nil {
		return nil, 0, fmt.Errorf("count the open findings: %w", translate(err))
	}
	rows, err := l.rdb.QueryContext(ctx, ledger.SQL.OpenFindings.SQLite, limit)
	fs, err := ledger.ReadCriticalFindings(rows, err, translate)
	return fs, n, err
}

// Finding returns critical finding id (nil if none).
func (l *Ledger) Finding(ctx context.Context, id int64) (*ledger.CriticalFinding, error) {
	rows, err := l.rdb.QueryContext(ctx, ledger.SQL.FindingByID.SQLite, id)
	fs, err := ledger.ReadCriticalFindings(rows, err, translate)
	if err != nil || len(fs) == 0 {
		return nil, err
	}
	return &fs[0], nil
}

// CloseFinding closes open finding id for actor and records its
// close_finding event, in one write transaction.
func (l *Ledger) CloseFinding(ctx context.Context, id int64, actor, note string) (ledger.CriticalFinding, error) {
	var closed ledger.CriticalFinding
	var verdict error
	err := l.submit(ctx, &op{run: func(ctx context.Context, s *writeStmts) error {
		verdict = nil
		rows, err := l.conn.QueryContext(ctx, ledger.SQL.FindingByID.SQLite, id)
		fs, err := ledger.ReadCriticalFindings(rows, err, translate)
		if err != nil {
			return err
		}
		if closed, verdict = ledger.ClosableFinding(id, fs); verdict != nil {
			return nil
		}
		if _, err := l.conn.ExecContext(ctx, ledger.SQL.CloseFinding.SQLite, actor, note, id); err != nil {
			return err
		}
		var state sql.NullString
		var attempts sql.NullInt64
		err = l.conn.QueryRowContext(ctx, "SELECT state, attempts FROM tx WHERE guid=?", closed.GUID).Scan(&state, &attempts)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var att any
		if attempts.Valid {
			att = attempts.Int64
		}
		_, err = s.event.ExecContext(ctx, closed.GUID, actor, ledger.ActionCloseFinding, nullable(state.String), nil, nil, att,
			ledger.FindingClosedDetail(closed, note))
		return err
	}})
	if err != nil {
		return ledger.CriticalFinding{}, fmt.Errorf("close finding %d: %w", id, err)
	}
	if verdict != nil {
		return ledger.CriticalFinding{}, verdict
	}
	closed.ClosedBy, closed.Note = actor, note
	return closed, nil
}
