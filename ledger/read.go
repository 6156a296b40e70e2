package ledger

import (
	"fmt"
	"strings"
	"time"

	"dedup"
)

// The read side that both backends share: the row columns they select are
// the same (guid, tx_code, state, rsp_code, request, response, attempts,
// updated_at as text, the age in whole seconds as the database computes
// it), and so is turning them into Rows and StateStats. A backend passes
// its driver's rows and its error translator (TranslateError).

// Scanner is one row of a query: database/sql's *Row and *Rows and pgx's
// Row and Rows all are.
type Scanner interface {
	Scan(dest ...any) error
}

// Cursor is the rows of a query: database/sql's *Rows and pgx's Rows.
type Cursor interface {
	Scanner
	Next() bool
	Err() error
}

// TranslateError is a backend's own reading of its driver's errors (a full
// disk, a damaged file, a lock or statement timeout), kept wrapped with %w.
type TranslateError func(error) error

// ScanRow reads one row of the row columns.
func ScanRow(s Scanner) (*Row, error) {
	var r Row
	var txCode, rsp *string
	var state string
	var age *int64
	if err := s.Scan(&r.GUID, &txCode, &state, &rsp, &r.Request, &r.Response, &r.Attempts, &r.UpdatedAt, &age); err != nil {
		return nil, err
	}
	if txCode != nil {
		r.TxCode = *txCode
	}
	if rsp != nil {
		r.RspCode = *rsp
	}
	r.State = dedup.State(state)
	if age != nil {
		r.Age = time.Duration(max(*age, 0)) * time.Second
	}
	return &r, nil
}

// CollectRows reads a whole selection (a job reads its candidates fully
// before its first core call). what names the selection in errors.
func CollectRows(rows Cursor, what string, translate TranslateError) ([]Row, error) {
	var out []Row
	for rows.Next() {
		r, err := ScanRow(rows)
		if err != nil {
			return nil, fmt.Errorf("select %s: %w", what, err)
		}
		out = append(out, *r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("select %s: %w", what, translate(err))
	}
	return out, nil
}

// CollectStats reads the per-state counts (state, rows, the oldest row's
// age in seconds) and returns one StateStat per state, zero where none; a
// count that reached limit (> 0) is marked AtLeast.
func CollectStats(rows Cursor, limit int64, translate TranslateError) ([]StateStat, error) {
	got := map[dedup.State]StateStat{}
	for rows.Next() {
		var st string
		var s StateStat
		var oldest int64
		if err := rows.Scan(&st, &s.Rows, &oldest); err != nil {
			return nil, fmt.Errorf("stats: %w", err)
		}
		s.State, s.Oldest = dedup.State(st), time.Duration(max(oldest, 0))*time.Second
		s.AtLeast = limit > 0 && s.Rows >= limit
		got[s.State] = s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("stats: %w", translate(err))
	}
	return AllStates(got), nil
}

// Count reads a count(*) query's one row; what names it in errors.
func Count(row Scanner, what string, translate TranslateError) (int64, error) {
	var n int64
	if err := row.Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", what, translate(err))
	}
	return n, nil
}

// EventColumns are the event columns both backends select, at as text.
const EventColumns = "id, guid, at, actor, action, from_state, to_state, rsp_code, attempts, detail"

// CollectEvents reads a whole selection of events; aged, if the query's
// last column is the event's age in whole seconds.
func CollectEvents(rows Cursor, aged bool, translate TranslateError) ([]Event, error) {
	var out []Event
	for rows.Next() {
		var e Event
		var from, to, rsp, detail *string
		var age *int64
		dest := []any{&e.ID, &e.GUID, &e.At, &e.Actor, &e.Action, &from, &to, &rsp, &e.Attempts, &detail}
		if aged {
			dest = append(dest, &age)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("read events: %w", translate(err))
		}
		if age != nil {
			e.Age = time.Duration(max(*age, 0)) * time.Second
		}
		for _, f := range []struct {
			dst *string
			src *string
		}{{&e.FromState, from}, {&e.ToState, to}, {&e.RspCode, rsp}, {&e.Detail, detail}} {
			if f.src != nil {
				*f.dst = *f.src
			}
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", translate(err))
	}
	return out, nil
}

// Selection is what a backend's query returned: a Cursor that must be
// closed (database/sql's *sql.Rows; pgx's rows through an adapter).
type Selection interface {
	Cursor
	Close() error
}

// readAll reads a whole selection with collect and closes it. err is the
// query's own error: then nothing is read, and the error is translate's
// reading of it, named by what. Every read of both backends goes through
// it, so that none leaves a cursor open (an open cursor on SQLite keeps
// the WAL from being checkpointed).
func readAll[T any](sel Selection, err error, what string, translate TranslateError, collect func(Cursor) (T, error)) (T, error) {
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", what, translate(err))
	}
	defer sel.Close()
	return collect(sel)
}

// ReadRows reads and closes a selection of rows (CollectRows).
func ReadRows(sel Selection, err error, what string, translate TranslateError) ([]Row, error) {
	return readAll(sel, err, "select "+what, translate, func(c Cursor) ([]Row, error) { return CollectRows(c, what, translate) })
}

// ReadEvents reads and closes a selection of events (CollectEvents).
func ReadEvents(sel Selection, err error, what string, aged bool, translate TranslateError) ([]Event, error) {
	return readAll(sel, err, what, translate, func(c Cursor) ([]Event, error) { return CollectEvents(c, aged, translate) })
}

// ReadStats reads and closes the per-state statistics (CollectStats).
func ReadStats(sel Selection, err error, limit int64, translate TranslateError) ([]StateStat, error) {
	return readAll(sel, err, "stats", translate, func(c Cursor) ([]StateStat, error) { return CollectStats(c, limit, translate) })
}

// First is the first of a selection's items, or nil if it has none.
func First[T any](items []T, err error) (*T, error) {
	if err != nil || len(items) == 0 {
		return nil, err
	}
	return &items[0], nil
}

// CountSliceWith is Ledger.CountSlice over a backend's two reads: edge
// returns the updated_at of the row offset rows after lo (found false if
// there is none), count the rows after lo up to and including hi (nil:
// every row left).
func CountSliceWith(after *Mark, limit int, edge func(lo any, offset int) (at any, found bool, err error),
	count func(lo, hi any) (int64, error)) (int64, *Mark, error) {
	return SliceWith(after, limit, edge, count)
}

// SliceWith is one slice of a state index's rows over a backend's two
// reads (CountSlice counts it, DoneSlice reads its rows): edge returns the
// updated_at of the row offset rows after lo (found false if there is
// none), read the slice after lo up to and including hi (nil: every row
// left). next marks where the slice ended, nil after the last.
func SliceWith[T any](after *Mark, limit int, edge func(lo any, offset int) (at any, found bool, err error),
	read func(lo, hi any) (T, error)) (T, *Mark, error) {
	var zero T
	var lo any
	if after != nil {
		lo = after.UpdatedAt
	}
	at, found, err := edge(lo, max(limit, 1)-1)
	if err != nil {
		return zero, nil, err
	}
	var hi any
	var next *Mark
	if found { // else fewer than limit rows are left: read them all
		hi, next = at, &Mark{UpdatedAt: at}
	}
	v, err := read(lo, hi)
	if err != nil {
		return zero, nil, err
	}
	return v, next, nil
}

// ReadReconcileRuns reads and closes a selection of ReconcileRuns'
// columns (runs without their findings).
func ReadReconcileRuns(sel Selection, err error, translate TranslateError) ([]ReconcileRun, error) {
	return readAll(sel, err, "reconcile runs", translate, func(c Cursor) ([]ReconcileRun, error) {
		var out []ReconcileRun
		for c.Next() {
			r := ReconcileRun{Counts: map[dedup.Finding]int64{}}
			counts := make([]int64, len(ReconcileColumns))
			dest := []any{&r.ID, &r.Date, &r.At, &r.Actor, &r.Source, &r.Lines, &r.Amount}
			for i := range counts {
				dest = append(dest, &counts[i])
			}
			if err := c.Scan(dest...); err != nil {
				return nil, fmt.Errorf("read reconcile runs: %w", translate(err))
			}
			for i, class := range ReconcileColumns {
				r.Counts[class] = counts[i]
			}
			out = append(out, r)
		}
		if err := c.Err(); err != nil {
			return nil, fmt.Errorf("read reconcile runs: %w", translate(err))
		}
		return out, nil
	})
}

// ReadReconcileFindings reads and closes a selection of a run's findings.
func ReadReconcileFindings(sel Selection, err error, translate TranslateError) ([]ReconcileFinding, error) {
	return readAll(sel, err, "reconcile findings", translate, func(c Cursor) ([]ReconcileFinding, error) {
		var out []ReconcileFinding
		for c.Next() {
			var f ReconcileFinding
			var class, refs string
			var critical, resolved int64
			if err := c.Scan(&class, &f.GUID, &f.State, &f.Code, &refs, &f.Amount, &critical, &resolved); err != nil {
				return nil, fmt.Errorf("read reconcile findings: %w", translate(err))
			}
			f.Class, f.Resolved = dedup.Finding(class), resolved != 0
			if refs != "" {
				f.Refs = strings.Split(refs, ",")
			}
			out = append(out, f)
		}
		if err := c.Err(); err != nil {
			return nil, fmt.Errorf("read reconcile findings: %w", translate(err))
		}
		return out, nil
	})
}

// ReconcileColumns are the classes in the order of reconcile_run's count
// columns (and of AddReconcileRun's arguments after amount).
var ReconcileColumns = []dedup.Finding{dedup.FindingMatched, dedup.FindingResolved, dedup.FindingAppliedButFailed,
	dedup.FindingAppliedInFlight, dedup.FindingAppliedTwice, dedup.FindingMismatch, dedup.FindingAppliedToldFailure,
	dedup.FindingToldSuccessUnapplied, dedup.FindingNotInLedger}

// ReconcileRunArgs are AddReconcileRun's arguments for r.
func ReconcileRunArgs(r ReconcileRun) []any {
	args := []any{r.Date, r.Actor, r.Source, r.Lines, r.Amount}
	for _, class := range ReconcileColumns {
		args = append(args, r.Counts[class])
	}
	return args
}

// ReconcileFindingArgs are AddReconcileFinding's arguments for f of run id.
func ReconcileFindingArgs(id int64, f ReconcileFinding) []any {
	var state, code, refs any
	if f.State != "" {
		state = f.State
	}
	if f.Code != "" {
		code = f.Code
	}
	if len(f.Refs) > 0 {
		refs = strings.Join(f.Refs, ",")
	}
	return []any{id, string(f.Class), f.GUID, state, code, refs, f.Amount, f.Class.Critical(), f.Resolved}
}

// KeptFindings is the part of r's findings a run keeps in the ledger:
// critical ones first, at most MaxKeptFindings.
func KeptFindings(r ReconcileRun) []ReconcileFinding {
	kept := make([]ReconcileFinding, 0, min(len(r.Findings), MaxKeptFindings))
	for _, critical := range []bool{true, false} {
		for _, f := range r.Findings {
			if f.Class.Critical() == critical && len(kept) < MaxKeptFindings {
				kept = append(kept, f)
			}
		}
	}
	return kept
}

// ReadCriticalFindings reads FindingColumns and FindingAge rows.
func ReadCriticalFindings(sel Selection, err error, translate TranslateError) ([]CriticalFinding, error) {
	return readAll(sel, err, "critical findings", translate, func(c Cursor) ([]CriticalFinding, error) {
		var out []CriticalFinding
		for c.Next() {
			var f CriticalFinding
			var class string
			var age int64
			if err := c.Scan(&f.ID, &f.GUID, &class, &f.Date, &f.FirstRun, &f.LastRun, &f.Runs, &f.Amount, &f.OpenedAt,
				&f.ClosedAt, &f.ClosedBy, &f.Note, &age); err != nil {
				return nil, fmt.Errorf("read critical findings: %w", translate(err))
			}
			f.Class, f.Age = dedup.Finding(class), time.Duration(max(age, 0))*time.Second
			out = append(out, f)
		}
		if err := c.Err(); err != nil {
			return nil, fmt.Errorf("read critical findings: %w", translate(err))
		}
		return out, nil
	})
}

// OpenCriticalFindingArgs are OpenCriticalFinding's arguments for finding
// f of run r (id runID).
func OpenCriticalFindingArgs(runID int64, r ReconcileRun, f ReconcileFinding) []any {
	return []any{f.GUID, string(f.Class), r.Date, runID, runID, f.Amount}
}

// ClosableFinding judges the read of finding id that a close is about:
// the finding if it is open, or the refusal (ErrRefused) of a finding not
// found or closed already. Both backends close through it.
func ClosableFinding(id int64, read []CriticalFinding) (CriticalFinding, error) {
	switch {
	case len(read) == 0:
		return CriticalFinding{}, fmt.Errorf("%w: no finding %d", ErrRefused, id)
	case !read[0].Open():
		f := read[0]
		return CriticalFinding{}, fmt.Errorf("%w: finding %d was closed at %s UTC by %s: %s", ErrRefused, id, f.ClosedAt, f.ClosedBy, f.Note)
	}
	return read[0], nil
}
