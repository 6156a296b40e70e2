-- The dedup relay's state ledger: one row per GUID (spec: ledger.md).
-- Applied by every binary each time it opens a ledger, so every statement is
-- idempotent. Other tools insert rows positionally (INSERT INTO tx VALUES(...)):
-- the columns, their order and their number are part of the contract.
CREATE TABLE IF NOT EXISTS tx (
    guid       TEXT    NOT NULL PRIMARY KEY,
    tx_code    TEXT,
    state      TEXT    NOT NULL CHECK (state IN ('RECEIVED','SENT','DONE','UNKNOWN','FAILED')),
    rsp_code   TEXT,
    request    BLOB,
    response   BLOB,
    attempts   INTEGER NOT NULL DEFAULT 0,
    updated_at TEXT    NOT NULL DEFAULT (datetime('now'))
);

-- Every selection (resolve, reprocess, purge, the orphan sweep) filters on
-- state and then on age.
CREATE INDEX IF NOT EXISTS tx_state_updated ON tx(state, updated_at);

-- The events: an append-only record of every change to a tx row other than
-- the relay's claim of a new GUID and the outcome of that first send (the
-- row and the relay's log line tell those), written in the same transaction
-- as the change it records, and never updated (spec: settle.md).
CREATE TABLE IF NOT EXISTS tx_event (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    guid       TEXT    NOT NULL,
    at         TEXT    NOT NULL DEFAULT (datetime('now')),
    actor      TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    from_state TEXT,
    to_state   TEXT,
    rsp_code   TEXT,
    attempts   INTEGER,
    detail     TEXT
);
CREATE INDEX IF NOT EXISTS tx_event_guid ON tx_event(guid, id);
CREATE INDEX IF NOT EXISTS tx_event_at ON tx_event(at);
-- settle list and the relay's gauge read the open proposals through it.
CREATE INDEX IF NOT EXISTS tx_event_proposals ON tx_event(id) WHERE action='propose';

-- Each completed reconciliation against the core's journal (spec:
-- reconcile.md): its business date (YYYYMMDD), the journal's lines and
-- control total, and the count of every class of finding.
CREATE TABLE IF NOT EXISTS reconcile_run (
    id                     INTEGER PRIMARY KEY AUTOINCREMENT,
    business_date          TEXT    NOT NULL,
    at                     TEXT    NOT NULL DEFAULT (datetime('now')),
    actor                  TEXT    NOT NULL,
    source                 TEXT    NOT NULL,
    lines                  INTEGER NOT NULL,
    amount                 INTEGER NOT NULL,
    matched                INTEGER NOT NULL,
    resolved               INTEGER NOT NULL,
    applied_but_failed     INTEGER NOT NULL,
    applied_in_flight      INTEGER NOT NULL,
    applied_twice          INTEGER NOT NULL,
    mismatch               INTEGER NOT NULL,
    applied_told_failure   INTEGER NOT NULL,
    told_success_unapplied INTEGER NOT NULL,
    not_in_ledger          INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS reconcile_run_date ON reconcile_run(business_date, id);
-- A run's findings for a person: every one but matched and not_in_ledger,
-- up to a bound per run (the counts above are always whole).
CREATE TABLE IF NOT EXISTS reconcile_finding (
    run_id       INTEGER NOT NULL,
    class        TEXT    NOT NULL,
    guid         TEXT    NOT NULL,
    ledger_state TEXT,
    ledger_code  TEXT,
    journal_refs TEXT,
    amount       INTEGER,
    critical     INTEGER NOT NULL,
    resolved     INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS reconcile_finding_run ON reconcile_finding(run_id, critical);

-- A critical finding across runs (spec: reconcile.md "A critical finding
-- stays open until a person closes it"): one per GUID and class, opened by
-- the first run that finds it, counted again by every later run that finds
-- it (runs, last_run), and open until a person closes it with a note
-- (closed_at, closed_by, note; the close is also an event on the
-- transfer). A later run that no longer sees it does not close it.
CREATE TABLE IF NOT EXISTS critical_finding (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    guid          TEXT    NOT NULL,
    class         TEXT    NOT NULL,
    business_date TEXT    NOT NULL,
    first_run     INTEGER NOT NULL,
    last_run      INTEGER NOT NULL,
    runs          INTEGER NOT NULL DEFAULT 1,
    amount        INTEGER,
    opened_at     TEXT    NOT NULL DEFAULT (datetime('now')),
    closed_at     TEXT,
    closed_by     TEXT,
    note          TEXT,
    UNIQUE (guid, class)
);
CREATE INDEX IF NOT EXISTS critical_finding_open ON critical_finding(id) WHERE closed_at IS NULL;
