-- The dedup relay's state ledger on PostgreSQL: the same tables, columns
-- and indexes as schema.sql (SQLite), in PostgreSQL's types (spec:
-- ledger.md "PostgreSQL"). Applied by every binary each time it opens a
-- postgres:// ledger, under an advisory lock, so every statement is
-- idempotent.
CREATE TABLE IF NOT EXISTS tx (
  guid       text        NOT NULL PRIMARY KEY,
  tx_code    text,
  state      text        NOT NULL CHECK (state IN ('RECEIVED','SENT','DONE','UNKNOWN','FAILED')),
  rsp_code   text,
  request    bytea,
  response   bytea,
  attempts   integer     NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS tx_state_updated ON tx (state, updated_at);
CREATE TABLE IF NOT EXISTS tx_event (
  id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  guid       text        NOT NULL,
  at         timestamptz NOT NULL DEFAULT now(),
  actor      text        NOT NULL,
  action     text        NOT NULL,
  from_state text,
  to_state   text,
  rsp_code   text,
  attempts   integer,
  detail     text
);
CREATE INDEX IF NOT EXISTS tx_event_guid ON tx_event (guid, id);
CREATE INDEX IF NOT EXISTS tx_event_at ON tx_event (at);
CREATE INDEX IF NOT EXISTS tx_event_proposals ON tx_event (id) WHERE action='propose';
