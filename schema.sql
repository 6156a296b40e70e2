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
