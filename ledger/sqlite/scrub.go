package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"dedup/ledger"
)

// The relay's background check (Options.CheckInBackground) is a scrub, not
// SQLite's quick_check: quick_check reads the whole file in one statement
// on one read snapshot, so on a large ledger it takes a core and the disk
// for as long as the file takes to read (4.3 GB: tens of seconds, the relay
// at half speed meanwhile) and its snapshot keeps the WAL from being
// checkpointed. The scrub reads every b-tree of the ledger, every table row
// with its blobs and every index entry, in slices of scrubSlice entries,
// each slice a statement of its own on a fresh snapshot, and sleeps after
// each slice scrubIdle times as long as the slice took: it uses at most
// 1/(1+scrubIdle) of one core, never holds a snapshot for longer than one
// slice, and yields to the writers. SQLite checks each page as it reads
// it, so a page that is not a valid b-tree page of its tree fails the
// slice with SQLITE_CORRUPT: the damage is found, and every write refused.
//
// What it does not read (free pages, the pointer map) is checked by the
// full quick_check of `inspect --check`, from the daily timer
// (docs/operations.md "The ledger's health").

// scrubSlice is how many entries one scrub statement reads.
const scrubSlice = 2000

// scrubIdle is how many times a slice's duration the scrub sleeps after it:
// 19 keeps it under 5 % of one core.
const scrubIdle = 19

// scrubPass is one b-tree walk: a query that reads the next slice of
// entries after the key it is given (keys ? placeholders, then LIMIT ?),
// whose first keys columns are the entry's key, in the tree's order.
type scrubPass struct {
	what  string
	query string
	start []any // the key before the first entry
}

// scrubPasses walk every b-tree of the schema: the two tables by rowid
// (reading every column, so that overflow pages are read too) and every
// index in its own order (covering queries: the index is what is read).
// A tx declared WITHOUT ROWID (docs/ledger.md allows it) is walked by
// withoutRowidPasses instead.
var scrubPasses = []scrubPass{
	{"table tx", `SELECT rowid, ` + txColumnsRead + `
FROM tx WHERE rowid > ? ORDER BY rowid LIMIT ?`, []any{int64(-1 << 63)}},
	{"tx's primary key (guid)", `SELECT guid FROM tx WHERE guid > ? ORDER BY guid LIMIT ?`, []any{""}},
	{"index tx_state_updated", `SELECT state, updated_at, rowid FROM tx INDEXED BY tx_state_updated
WHERE (state, updated_at, rowid) > (?, ?, ?) ORDER BY state, updated_at, rowid LIMIT ?`, []any{"", "", int64(-1 << 63)}},
	{"table tx_event", `SELECT id, length(guid)+length(at)+length(actor)+length(action)+length(COALESCE(detail,''))
FROM tx_event WHERE id > ? ORDER BY id LIMIT ?`, []any{int64(-1 << 63)}},
	{"index tx_event_guid", `SELECT guid, id FROM tx_event INDEXED BY tx_event_guid
WHERE (guid, id) > (?, ?) ORDER BY guid, id LIMIT ?`, []any{"", int64(-1 << 63)}},
	{"index tx_event_at", `SELECT at, id FROM tx_event INDEXED BY tx_event_at
WHERE (at, id) > (?, ?) ORDER BY at, id LIMIT ?`, []any{"", int64(-1 << 63)}},
}

// txColumnsRead reads every column of a tx row, overflow pages included.
const txColumnsRead = `length(guid)+length(COALESCE(tx_code,''))+length(state)+length(COALESCE(rsp_code,''))+
length(COALESCE(request,''))+length(COALESCE(response,''))+length(updated_at)+attempts`

// withoutRowidPasses replace scrubPasses' first three for a WITHOUT ROWID
// tx: the table is its guid b-tree, and the state index's entries end
// with the guid, not a rowid (no statement may name rowid on such a table).
var withoutRowidPasses = []scrubPass{
	{"table tx (WITHOUT ROWID)", `SELECT guid, ` + txColumnsRead + `
FROM tx WHERE guid > ? ORDER BY guid LIMIT ?`, []any{""}},
	{"index tx_state_updated", `SELECT state, updated_at, guid FROM tx INDEXED BY tx_state_updated
WHERE (state, updated_at, guid) > (?, ?, ?) ORDER BY state, updated_at, guid LIMIT ?`, []any{"", "", ""}},
}

// passesFor returns the passes for db's schema: scrubPasses, or, if tx is
// WITHOUT ROWID, withoutRowidPasses and scrubPasses' event passes.
func passesFor(ctx context.Context, db *sql.DB) ([]scrubPass, error) {
	var withoutRowid bool
	if err := db.QueryRowContext(ctx, `SELECT wr FROM pragma_table_list WHERE schema='main' AND name='tx'`).Scan(&withoutRowid); err != nil {
		return nil, fmt.Errorf("integrity check: read tx's declaration: %w", translate(err))
	}
	if !withoutRowid {
		return scrubPasses, nil
	}
	return append(append([]scrubPass(nil), withoutRowidPasses...), scrubPasses[3:]...), nil
}

// keys is how many of the pass's columns are its key.
func (p scrubPass) keys() int { return len(p.start) }

// scrub walks every b-tree of the ledger through db, slice by slice, as
// described above, and returns the first error: SQLITE_CORRUPT for a
// damaged page, or ctx's error. It reports how many entries it read.
func scrub(ctx context.Context, db *sql.DB) (int64, error) {
	var total int64
	passes, err := passesFor(ctx, db)
	if err != nil {
		return 0, err
	}
	for _, p := range passes {
		key := append([]any(nil), p.start...)
		for {
			start := time.Now()
			n, last, err := scrubSliceOf(ctx, db, p, key)
			if err != nil {
				return total, fmt.Errorf("integrity check (%s): %w", p.what, translate(err))
			}
			total += n
			if n < scrubSlice {
				break
			}
			key = last
			if err := sleepCtx(ctx, time.Since(start)*scrubIdle); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// scrubSliceOf reads one slice of pass p after key, and returns how many
// entries it read and the last one's key.
func scrubSliceOf(ctx context.Context, db *sql.DB, p scrubPass, key []any) (int64, []any, error) {
	rows, err := db.QueryContext(ctx, p.query, append(append([]any(nil), key...), scrubSlice)...)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, nil, err
	}
	vals := make([]any, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	var n int64
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return n, nil, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, nil, err
	}
	last := make([]any, p.keys())
	for i := range last {
		if b, ok := vals[i].([]byte); ok {
			last[i] = string(b)
		} else {
			last[i] = vals[i]
		}
	}
	return n, last, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Check runs SQLite's full structural check (PRAGMA quick_check: every page
// of the file, free pages included) and returns what it found: what
// `inspect --check` runs from the daily timer. It reads the whole file, so
// it takes seconds per gigabyte, on its own read snapshot.
func (l *Ledger) Check(ctx context.Context) error {
	return quickCheck(ctx, l.rdb)
}

var _ ledger.Checker = (*Ledger)(nil)
