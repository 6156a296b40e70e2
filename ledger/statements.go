package ledger

// Statement is one ledger statement in both dialects, side by side, so that
// a change to one is made, and reviewed, beside the other. SQLite binds ?
// in order; PostgreSQL binds $n. An empty dialect says that backend does
// the same work another way (its comment says how).
type Statement struct {
	SQLite   string
	Postgres string
}

// SQL is every statement the two backends run on the tx and tx_event
// tables, with the rule it serves (docs/rules.md, docs/ledger.md
// "Transitions"). Times are always the database's own clock
// (datetime('now'), now()): no statement binds a time computed on a host.
var SQL = struct {
	Claim, Reclaim, Finish, FinishEvent, Resolve, SweepSelect, Sweep, Decide Statement
	Event, AddEvent, Purge, PurgeEvents                                      Statement
	Get, Confirm, ConfirmMany, Now, SelectUnknown, SelectFailed, SelectState Statement
	CountExhausted, CountPurgeable, Stats, SliceEdge, SliceCount, EventsOf   Statement
	EventByID, ProposalClosed                                                Statement
	GetMany, DoneSliceEdge, DoneSlice, ResolveFromJournal                    Statement
	AddReconcileRun, AddReconcileFinding, ReconcileRuns, ReconcileFindings   Statement
	OpenCriticalFinding, OpenFindings, CountOpenFindings, FindingByID        Statement
	CloseFinding, BackfillCriticalFindings                                   Statement
}{
	// Rule 1, one claim per GUID: the insert that only one caller can win.
	// Affected rows = 1 means "mine", with attempt 1.
	Claim: Statement{
		SQLite: `INSERT INTO tx(guid,tx_code,state,rsp_code,request,response,attempts,updated_at)
VALUES(?,?,'SENT',NULL,?,NULL,1,datetime('now')) ON CONFLICT(guid) DO NOTHING`,
		Postgres: `INSERT INTO tx(guid,tx_code,state,rsp_code,request,response,attempts,updated_at)
VALUES($1,$2,'SENT',NULL,$3,NULL,1,now()) ON CONFLICT (guid) DO NOTHING`,
	},
	// Rule 5, only a surely undelivered transfer is resent: FAILED/E902
	// back to SENT, attempts + 1, judged by the row it returns. The relay
	// passes the received request and no limit (0); reprocess passes NULL
	// and its --max-attempts. PostgreSQL writes the reclaim's event in the
	// same statement; SQLite runs Event after it in the same transaction.
	Reclaim: Statement{
		SQLite: `UPDATE tx SET state='SENT', rsp_code=NULL, attempts=attempts+1, request=COALESCE(request,?), updated_at=datetime('now')
WHERE guid=? AND state='FAILED' AND rsp_code='E902' AND (?=0 OR attempts < ?) RETURNING attempts, request`,
		Postgres: `WITH r AS (UPDATE tx SET state='SENT', rsp_code=NULL, attempts=attempts+1, request=COALESCE(request,$1), updated_at=now()
WHERE guid=$2 AND state='FAILED' AND rsp_code='E902' AND ($3::integer=0 OR attempts < $3::integer) RETURNING guid, attempts, request),
e AS (INSERT INTO tx_event(guid, actor, action, from_state, to_state, attempts) SELECT guid, $4, 'reclaim', 'FAILED', 'SENT', attempts FROM r)
SELECT attempts, request FROM r`,
	},
	// Rule 7, fencing: an outcome is recorded only by the claim it belongs
	// to (state SENT and this attempt).
	Finish: Statement{
		SQLite: `UPDATE tx SET state=?, rsp_code=?, response=?, updated_at=datetime('now')
WHERE guid=? AND state='SENT' AND attempts=?`,
		Postgres: `UPDATE tx SET state=$1, rsp_code=$2, response=$3, updated_at=now()
WHERE guid=$4 AND state='SENT' AND attempts=$5`,
	},
	// Finish of a reclaimed send, with its event in the same statement
	// (PostgreSQL); SQLite runs Finish, then Event, in one transaction.
	FinishEvent: Statement{
		Postgres: `WITH f AS (UPDATE tx SET state=$1, rsp_code=$2, response=$3, updated_at=now()
WHERE guid=$4 AND state='SENT' AND attempts=$5 RETURNING guid, attempts),
e AS (INSERT INTO tx_event(guid, actor, action, from_state, to_state, rsp_code, attempts, detail)
SELECT guid, $6, 'outcome', 'SENT', $1, $2, attempts, $7 FROM f)
SELECT count(*) FROM f`,
	},
	// Rule 6, resolve resolves an UNKNOWN row by inquiry, fenced on the row
	// exactly as read (updated_at to the microsecond on PostgreSQL).
	Resolve: Statement{
		SQLite: `UPDATE tx SET state=?, rsp_code=?, response=?, updated_at=datetime('now')
WHERE guid=? AND state='UNKNOWN' AND attempts=? AND updated_at=?`,
		Postgres: `WITH s AS (UPDATE tx SET state=$1, rsp_code=$2, response=$3, updated_at=now()
WHERE guid=$4 AND state='UNKNOWN' AND attempts=$5 AND updated_at=($6::timestamp AT TIME ZONE 'UTC') RETURNING guid, attempts),
e AS (INSERT INTO tx_event(guid, actor, action, from_state, to_state, rsp_code, attempts, detail)
SELECT guid, $7, 'resolve', 'UNKNOWN', $1, $2, attempts, $8 FROM s)
SELECT count(*) FROM s`,
	},
	// Rule 8, an orphaned claim becomes UNKNOWN, never FAILED. SQLite reads
	// its rows and moves each (SweepSelect, then Sweep and Event per row)
	// inside one write transaction: the write lock keeps anything else from
	// changing them in between. PostgreSQL does it in one statement that
	// locks its rows in guid order, as the group commit's batches do, so
	// that the two never deadlock.
	SweepSelect: Statement{
		SQLite: `SELECT guid, state, attempts FROM tx
WHERE state IN ('SENT','RECEIVED') AND updated_at < datetime('now', ?) ORDER BY guid`,
	},
	Sweep: Statement{
		SQLite: `UPDATE tx SET state='UNKNOWN', rsp_code='E901', response=NULL, updated_at=datetime('now')
WHERE guid=? AND state=?`,
		Postgres: `WITH c AS (SELECT guid, state FROM tx WHERE state IN ('SENT','RECEIVED') AND updated_at < now() - make_interval(secs => $1)
ORDER BY guid FOR UPDATE),
u AS (UPDATE tx SET state='UNKNOWN', rsp_code='E901', response=NULL, updated_at=now() FROM c
WHERE tx.guid = c.guid AND tx.state IN ('SENT','RECEIVED') RETURNING tx.guid, c.state AS from_state, tx.attempts),
e AS (INSERT INTO tx_event(guid, actor, action, from_state, to_state, rsp_code, attempts)
SELECT guid, $2, 'sweep', from_state, 'UNKNOWN', 'E901', attempts FROM u)
SELECT count(*) FROM u`,
	},
	// settle.md, an approved decision changes the row exactly as proposed:
	// fenced on state, attempts and updated_at.
	Decide: Statement{
		SQLite: `UPDATE tx SET state=?, rsp_code=?, response=?, updated_at=datetime('now')
WHERE guid=? AND state=? AND attempts=? AND updated_at=?`,
		Postgres: `UPDATE tx SET state=$1, rsp_code=$2, response=$3, updated_at=now()
WHERE guid=$4 AND state=$5 AND attempts=$6 AND updated_at=($7::timestamp AT TIME ZONE 'UTC')`,
	},
	// settle.md, a proposal is decided once: has it an approve, reject or
	// expire event already?
	ProposalClosed: Statement{
		SQLite: `SELECT count(*) > 0 FROM tx_event WHERE guid=?
AND action IN ('approve','reject','expire') AND detail LIKE ?`,
		Postgres: `SELECT EXISTS (SELECT 1 FROM tx_event WHERE guid=$1
AND action IN ('approve','reject','expire') AND detail LIKE $2)`,
	},
	// docs/ledger.md "Events": every change but a first send's claim and
	// outcome has its event, in the same transaction as the change.
	Event: Statement{
		SQLite: `INSERT INTO tx_event(guid, actor, action, from_state, to_state, rsp_code, attempts, detail)
VALUES(?,?,?,?,?,?,?,?)`,
	},
	// An event that changes no row (settle's proposals), with its id.
	AddEvent: Statement{
		SQLite: `INSERT INTO tx_event(guid, actor, action, from_state, to_state, rsp_code, attempts, detail)
VALUES(?,?,?,?,?,?,?,?) RETURNING id`,
		Postgres: `INSERT INTO tx_event(guid, actor, action, from_state, to_state, rsp_code, attempts, detail)
VALUES($1,$2,$3,$4,$5,$6,$7,$8) RETURNING id`,
	},
	// Retention: only DONE rows past --days, in batches. SQLite deletes by
	// guid, not rowid: the table may be WITHOUT ROWID (docs/ledger.md).
	// PostgreSQL finds its rows through the (state, updated_at) index,
	// oldest first, and deletes them by ctid: no second lookup by guid per
	// row (measured: docs/benchmarks.md, "Figures the code's choices rest
	// on"). A row changed since it was found has another ctid, and
	// the outer condition is checked again on every row deleted.
	Purge: Statement{
		SQLite: `DELETE FROM tx WHERE guid IN
(SELECT guid FROM tx WHERE state='DONE' AND updated_at <= datetime('now', ?) LIMIT ?)`,
		Postgres: `DELETE FROM tx WHERE ctid = ANY (ARRAY(
SELECT ctid FROM tx WHERE state='DONE' AND updated_at <= now() - make_interval(days => $1) ORDER BY state, updated_at LIMIT $2))
AND state='DONE' AND updated_at <= now() - make_interval(days => $1)`,
	},
	PurgeEvents: Statement{
		SQLite: `DELETE FROM tx_event WHERE id IN
(SELECT id FROM tx_event WHERE at <= datetime('now', ?) ORDER BY at LIMIT ?)`,
		Postgres: `DELETE FROM tx_event WHERE id IN
(SELECT id FROM tx_event WHERE at <= now() - make_interval(days => $1) ORDER BY at LIMIT $2)`,
	},
	// Rules 2-4 and 14, a known GUID is answered from its row: the row and
	// its age on the database's clock.
	Get: Statement{
		SQLite:   `SELECT ` + RowColumns.SQLite + ` FROM tx WHERE guid=?`,
		Postgres: `SELECT ` + RowColumns.Postgres + ` FROM tx WHERE guid=$1`,
	},
	// Rule 13, a holder confirms its claim before its first byte to the
	// core: still SENT with its attempt, and how old on the database's
	// clock (PostgreSQL: clock_timestamp(), as now() is the transaction's
	// start).
	Confirm: Statement{
		SQLite: `SELECT state='SENT' AND attempts=?, julianday('now') - julianday(updated_at), julianday('now')
FROM tx WHERE guid=?`,
		Postgres: `SELECT state='SENT' AND attempts=$2, extract(epoch FROM clock_timestamp() - updated_at),
extract(epoch FROM clock_timestamp()) FROM tx WHERE guid=$1`,
	},
	// Rule 13 for many holders at once: one query reads the rows of every
	// confirmation that waited while another was in flight (= ANY, so that
	// each GUID is one lookup in the primary key's index, whatever the
	// table's size); the caller judges each holder's attempt against its
	// row. A GUID without a row returns nothing. Each row's
	// clock_timestamp() is read after every one of them asked. SQLite has
	// none: its confirmation is a local read, with no round trip to share.
	ConfirmMany: Statement{
		Postgres: `SELECT guid, state='SENT', attempts, extract(epoch FROM clock_timestamp() - updated_at),
extract(epoch FROM clock_timestamp()) FROM tx WHERE guid = ANY($1::text[])`,
	},
	// docs/ledger.md "Clocks": the database's clock, against the host's.
	Now: Statement{
		SQLite:   `SELECT julianday('now')`,
		Postgres: `SELECT extract(epoch FROM clock_timestamp())`,
	},
	// resolve's candidates: UNKNOWN rows older than --min-age.
	SelectUnknown: Statement{
		SQLite:   `SELECT ` + RowColumns.SQLite + ` FROM tx WHERE state='UNKNOWN' AND updated_at <= datetime('now', ?) ORDER BY updated_at, guid`,
		Postgres: `SELECT ` + RowColumns.Postgres + ` FROM tx WHERE state='UNKNOWN' AND updated_at <= now() - make_interval(secs => $1) ORDER BY updated_at, guid`,
	},
	// reprocess's candidates: FAILED/E902 rows under --max-attempts.
	SelectFailed: Statement{
		SQLite:   `SELECT ` + RowColumns.SQLite + ` FROM tx WHERE state='FAILED' AND rsp_code='E902' AND attempts < ? ORDER BY updated_at, guid`,
		Postgres: `SELECT ` + RowColumns.Postgres + ` FROM tx WHERE state='FAILED' AND rsp_code='E902' AND attempts < $1 ORDER BY updated_at, guid`,
	},
	// inspect --state: oldest first, at most a limit (SQLite: -1 is none;
	// PostgreSQL: NULL is none).
	SelectState: Statement{
		SQLite:   `SELECT ` + RowColumns.SQLite + ` FROM tx WHERE state=? AND updated_at <= datetime('now', ?) ORDER BY updated_at, guid LIMIT ?`,
		Postgres: `SELECT ` + RowColumns.Postgres + ` FROM tx WHERE state=$1 AND updated_at <= now() - make_interval(secs => $2) ORDER BY updated_at, guid LIMIT $3`,
	},
	// reprocess's report: FAILED/E902 rows no run will send again.
	CountExhausted: Statement{
		SQLite:   `SELECT count(*) FROM tx WHERE state='FAILED' AND rsp_code='E902' AND attempts >= ?`,
		Postgres: `SELECT count(*) FROM tx WHERE state='FAILED' AND rsp_code='E902' AND attempts >= $1`,
	},
	// purge --dry-run and its progress.
	CountPurgeable: Statement{
		SQLite:   `SELECT count(*) FROM tx WHERE state='DONE' AND updated_at <= datetime('now', ?)`,
		Postgres: `SELECT count(*) FROM tx WHERE state='DONE' AND updated_at <= now() - make_interval(days => $1)`,
	},
	// inspect --summary, the relay's gauges and the console: per state, its
	// rows (at most ?/$1 of them: -1 or NULL for all) and the age of its
	// oldest row, each a range of the (state, updated_at) index, so that a
	// bounded count reads at most that many entries per state however
	// large the ledger grows (docs/ledger.md "What grows with the ledger").
	Stats: Statement{
		SQLite: `SELECT s.state,
(SELECT count(*) FROM (SELECT 1 FROM tx INDEXED BY tx_state_updated WHERE tx.state=s.state LIMIT ?1)),
COALESCE(CAST(strftime('%s','now') AS INTEGER) - CAST(strftime('%s',
  (SELECT updated_at FROM tx INDEXED BY tx_state_updated WHERE tx.state=s.state ORDER BY updated_at LIMIT 1)) AS INTEGER), 0)
FROM (SELECT 'RECEIVED' AS state UNION ALL SELECT 'SENT' UNION ALL SELECT 'DONE' UNION ALL SELECT 'UNKNOWN' UNION ALL SELECT 'FAILED') AS s`,
		Postgres: `SELECT s.state,
(SELECT count(*) FROM (SELECT 1 FROM tx WHERE tx.state=s.state LIMIT $1) AS c),
COALESCE(floor(extract(epoch FROM now() - (SELECT updated_at FROM tx WHERE tx.state=s.state ORDER BY updated_at LIMIT 1))), 0)::bigint
FROM unnest(ARRAY['RECEIVED','SENT','DONE','UNKNOWN','FAILED']::text[]) AS s(state)`,
	},
	// The relay's count of a large state, slice by slice (CountSlice):
	// the updated_at of the row at an offset after the last slice's edge
	// (NULL: from the first row; '' and -infinity sort before every date
	// either database writes), then the rows up to it, ties included (NULL:
	// every row left; char(1114111) sorts after every text date). Both are
	// ranges of the state index bounded by the offset.
	SliceEdge: Statement{
		SQLite: `SELECT updated_at FROM tx INDEXED BY tx_state_updated
WHERE state=?1 AND updated_at > COALESCE(?2, '') ORDER BY updated_at LIMIT 1 OFFSET ?3`,
		Postgres: `SELECT updated_at FROM tx
WHERE state=$1 AND updated_at > COALESCE($2::timestamptz, '-infinity') ORDER BY updated_at LIMIT 1 OFFSET $3`,
	},
	SliceCount: Statement{
		SQLite: `SELECT count(*) FROM tx INDEXED BY tx_state_updated
WHERE state=?1 AND updated_at > COALESCE(?2, '') AND updated_at <= COALESCE(?3, char(1114111))`,
		Postgres: `SELECT count(*) FROM tx
WHERE state=$1 AND updated_at > COALESCE($2::timestamptz, '-infinity') AND updated_at <= COALESCE($3::timestamptz, 'infinity')`,
	},
	// A GUID's story (inspect, settle): its events, oldest first.
	EventsOf: Statement{
		SQLite:   `SELECT ` + EventColumns + ` FROM tx_event WHERE guid=? ORDER BY id`,
		Postgres: `SELECT ` + EventColumnsPostgres + ` FROM tx_event WHERE guid=$1 ORDER BY id`,
	},
	// settle approve/reject: one event with its age.
	// reconcile.md, the journal's GUIDs read in batches: one statement per
	// batch of lines, not one per line.
	GetMany: Statement{
		SQLite:   `SELECT ` + RowColumns.SQLite + ` FROM tx WHERE guid IN (SELECT value FROM json_each(?))`,
		Postgres: `SELECT ` + RowColumns.Postgres + ` FROM tx WHERE guid = ANY($1)`,
	},
	// reconcile.md, the ledger's side of business date D: DONE rows
	// finished since two days before D's first day (a row decided days
	// after D counts for D; two days cover any time zone between the
	// core's clock and the ledger's), read in slices of the state index as
	// CountSlice reads them, so that no read holds a snapshot for long.
	// Each has one lower bound on updated_at: the slice's mark, or before
	// the first slice the day's start less two days (a mark is never
	// earlier). Two lower bounds on one column would let SQLite seek by
	// the looser one, and read every earlier slice again for each slice.
	DoneSliceEdge: Statement{
		SQLite: `SELECT updated_at FROM tx INDEXED BY tx_state_updated
WHERE state='DONE' AND updated_at > COALESCE(?2, datetime(?1, '-2 days', '-1 seconds')) ORDER BY updated_at LIMIT 1 OFFSET ?3`,
		Postgres: `SELECT updated_at FROM tx
WHERE state='DONE' AND updated_at > COALESCE($2::timestamptz, ($1::date - 2)::timestamptz - interval '1 microsecond') ORDER BY updated_at LIMIT 1 OFFSET $3`,
	},
	DoneSlice: Statement{
		SQLite: `SELECT ` + RowColumns.SQLite + ` FROM tx INDEXED BY tx_state_updated
WHERE state='DONE' AND updated_at > COALESCE(?2, datetime(?1, '-2 days', '-1 seconds')) AND updated_at <= COALESCE(?3, char(1114111)) AND rsp_code='0000'`,
		Postgres: `SELECT ` + RowColumns.Postgres + ` FROM tx
WHERE state='DONE' AND updated_at > COALESCE($2::timestamptz, ($1::date - 2)::timestamptz - interval '1 microsecond') AND updated_at <= COALESCE($3::timestamptz, 'infinity') AND rsp_code='0000'`,
	},
	// reconcile.md, an UNKNOWN or FAILED row the journal proves applied
	// becomes DONE/0000, fenced on the row exactly as read, with its
	// reconcile event in the same transaction (SQLite: Event after it).
	ResolveFromJournal: Statement{
		SQLite: `UPDATE tx SET state='DONE', rsp_code='0000', response=?, updated_at=datetime('now')
WHERE guid=? AND state=? AND attempts=? AND updated_at=?`,
		Postgres: `WITH s AS (UPDATE tx SET state='DONE', rsp_code='0000', response=$1, updated_at=now()
WHERE guid=$2 AND state=$3 AND attempts=$4 AND updated_at=($5::timestamp AT TIME ZONE 'UTC') RETURNING guid, attempts),
e AS (INSERT INTO tx_event(guid, actor, action, from_state, to_state, rsp_code, attempts, detail)
SELECT guid, $6, 'reconcile', $3, 'DONE', '0000', attempts, $7 FROM s)
SELECT count(*) FROM s`,
	},
	// reconcile.md, a completed run and its findings, kept for inspect and
	// the console.
	AddReconcileRun: Statement{
		SQLite: `INSERT INTO reconcile_run(business_date, actor, source, lines, amount, matched, resolved, applied_but_failed,
applied_in_flight, applied_twice, mismatch, applied_told_failure, told_success_unapplied, not_in_ledger)
VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id`,
		Postgres: `INSERT INTO reconcile_run(business_date, actor, source, lines, amount, matched, resolved, applied_but_failed,
applied_in_flight, applied_twice, mismatch, applied_told_failure, told_success_unapplied, not_in_ledger)
VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14) RETURNING id`,
	},
	AddReconcileFinding: Statement{
		SQLite: `INSERT INTO reconcile_finding(run_id, class, guid, ledger_state, ledger_code, journal_refs, amount, critical, resolved)
VALUES(?,?,?,?,?,?,?,?,?)`,
		Postgres: `INSERT INTO reconcile_finding(run_id, class, guid, ledger_state, ledger_code, journal_refs, amount, critical, resolved)
VALUES($1,$2,$3,$4,$5,$6,$7,$8,$9)`,
	},
	ReconcileRuns: Statement{
		SQLite: `SELECT id, business_date, at, actor, source, lines, amount, matched, resolved, applied_but_failed,
applied_in_flight, applied_twice, mismatch, applied_told_failure, told_success_unapplied, not_in_ledger
FROM reconcile_run WHERE (?1 = '' OR business_date = ?1) ORDER BY id DESC LIMIT ?2`,
		Postgres: `SELECT id, business_date, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), actor, source, lines, amount, matched, resolved, applied_but_failed,
applied_in_flight, applied_twice, mismatch, applied_told_failure, told_success_unapplied, not_in_ledger
FROM reconcile_run WHERE ($1 = '' OR business_date = $1) ORDER BY id DESC LIMIT $2`,
	},
	ReconcileFindings: Statement{
		SQLite: `SELECT class, guid, COALESCE(ledger_state, ''), COALESCE(ledger_code, ''), COALESCE(journal_refs, ''), COALESCE(amount, 0), critical, resolved
FROM reconcile_finding WHERE run_id=? ORDER BY critical DESC, rowid`,
		Postgres: `SELECT class, guid, COALESCE(ledger_state, ''), COALESCE(ledger_code, ''), COALESCE(journal_refs, ''), COALESCE(amount, 0), critical::int, resolved::int
FROM reconcile_finding WHERE run_id=$1 ORDER BY critical DESC, ctid`,
	},
	// A critical finding stays open until a person closes it
	// (docs/reconcile.md "Open findings"): the run that finds a GUID and
	// class first opens it; a later run that finds it again is counted on
	// the same finding, open or closed, and never reopens a closed one.
	OpenCriticalFinding: Statement{
		SQLite: `INSERT INTO critical_finding(guid, class, business_date, first_run, last_run, amount)
VALUES(?,?,?,?,?,?) ON CONFLICT(guid, class) DO UPDATE SET last_run=excluded.last_run, runs=critical_finding.runs+1`,
		Postgres: `INSERT INTO critical_finding(guid, class, business_date, first_run, last_run, amount)
VALUES($1,$2,$3,$4,$5,$6) ON CONFLICT (guid, class) DO UPDATE SET last_run=excluded.last_run, runs=critical_finding.runs+1`,
	},
	OpenFindings: Statement{
		SQLite: `SELECT ` + FindingColumns + `, ` + FindingAge.SQLite + ` FROM critical_finding
WHERE closed_at IS NULL ORDER BY id LIMIT ?`,
		Postgres: `SELECT ` + FindingColumnsPostgres + `, ` + FindingAge.Postgres + ` FROM critical_finding
WHERE closed_at IS NULL ORDER BY id LIMIT $1`,
	},
	CountOpenFindings: Statement{
		SQLite:   `SELECT count(*) FROM critical_finding WHERE closed_at IS NULL`,
		Postgres: `SELECT count(*) FROM critical_finding WHERE closed_at IS NULL`,
	},
	FindingByID: Statement{
		SQLite:   `SELECT ` + FindingColumns + `, ` + FindingAge.SQLite + ` FROM critical_finding WHERE id=?`,
		Postgres: `SELECT ` + FindingColumnsPostgres + `, ` + FindingAge.Postgres + ` FROM critical_finding WHERE id=$1`,
	},
	// CloseFinding closes an open finding; 0 rows: not found, or closed
	// already (FindingByID tells which). PostgreSQL's operators close
	// through dedup_close_finding, which runs the same statement.
	CloseFinding: Statement{
		SQLite:   `UPDATE critical_finding SET closed_at=datetime('now'), closed_by=?, note=? WHERE id=? AND closed_at IS NULL`,
		Postgres: `UPDATE critical_finding SET closed_at=now(), closed_by=$1, note=$2 WHERE id=$3 AND closed_at IS NULL`,
	},
	// BackfillCriticalFindings opens, once, when an older ledger gains the
	// critical_finding table, a finding for each GUID and class that the
	// runs already kept found critical: none of them was ever closed by a
	// person. PostgreSQL runs it in schema_postgres.sql.
	BackfillCriticalFindings: Statement{
		SQLite: `INSERT INTO critical_finding(guid, class, business_date, first_run, last_run, runs, amount, opened_at)
SELECT g.guid, g.class, r.business_date, g.first_run, g.last_run, g.runs, g.amount, r.at
FROM (SELECT guid, class, MIN(run_id) AS first_run, MAX(run_id) AS last_run, COUNT(*) AS runs, MAX(amount) AS amount
      FROM reconcile_finding WHERE critical<>0 GROUP BY guid, class) g
JOIN reconcile_run r ON r.id = g.first_run WHERE true ORDER BY g.first_run, g.guid, g.class
ON CONFLICT(guid, class) DO NOTHING`,
	},
	EventByID: Statement{
		SQLite:   `SELECT ` + EventColumns + `, ` + EventAge.SQLite + ` FROM tx_event WHERE id=?`,
		Postgres: `SELECT ` + EventColumnsPostgres + `, ` + EventAge.Postgres + ` FROM tx_event WHERE id=$1`,
	},
}

// RowColumns are the columns every row read selects, in ScanRow's order:
// updated_at as text (PostgreSQL: to the microsecond, UTC, so that a fence
// compares it exactly), and the row's age in whole seconds on the
// database's clock (SQLite: NULL if another tool wrote an updated_at SQLite
// cannot read as a time).
var RowColumns = Statement{
	SQLite: "guid, tx_code, state, rsp_code, request, response, attempts, updated_at, " +
		"CAST(strftime('%s','now') AS INTEGER) - CAST(strftime('%s', updated_at) AS INTEGER)",
	Postgres: `guid, tx_code, state, rsp_code, request, response, attempts,
to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'),
floor(extract(epoch FROM now() - updated_at))::bigint`,
}

// EventColumnsPostgres is EventColumns with at as text to the microsecond.
const EventColumnsPostgres = `id, guid, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), actor, action, from_state, to_state, rsp_code, attempts, detail`

// FindingColumns are the columns a critical finding's read selects, in
// ReadCriticalFindings' order, before its age.
const FindingColumns = `id, guid, class, business_date, first_run, last_run, runs, COALESCE(amount, 0), opened_at,
COALESCE(closed_at, ''), COALESCE(closed_by, ''), COALESCE(note, '')`

// FindingColumnsPostgres are FindingColumns with PostgreSQL's times as
// SQLite's text.
const FindingColumnsPostgres = `id, guid, class, business_date, first_run, last_run, runs, COALESCE(amount, 0),
to_char(opened_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'),
COALESCE(to_char(closed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), ''), COALESCE(closed_by, ''), COALESCE(note, '')`

// FindingAge is a finding's age since it was opened, in whole seconds on
// the database's clock.
var FindingAge = Statement{
	SQLite:   "CAST(strftime('%s','now') AS INTEGER) - CAST(strftime('%s', opened_at) AS INTEGER)",
	Postgres: "floor(extract(epoch FROM now() - opened_at))::bigint",
}

// EventAge is an event's age in whole seconds on the database's clock.
var EventAge = Statement{
	SQLite:   "CAST(strftime('%s','now') AS INTEGER) - CAST(strftime('%s', at) AS INTEGER)",
	Postgres: "floor(extract(epoch FROM now() - at))::bigint",
}
