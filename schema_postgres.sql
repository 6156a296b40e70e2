-- The dedup relay's state ledger on PostgreSQL: the same tables, columns
-- and indexes as schema.sql (SQLite), in PostgreSQL's types (spec:
-- ledger.md "PostgreSQL"). Applied by every binary that opens a
-- postgres:// ledger as the schema's owner (or a superuser), under an
-- advisory lock, so every statement is idempotent; a binary opened by
-- another role (an operator's) applies nothing and checks that the schema
-- is there and current (ledger/postgres: prepare).
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

-- Each completed reconciliation against the core's journal (spec:
-- reconcile.md), and its findings for a person (schema.sql says more).
CREATE TABLE IF NOT EXISTS reconcile_run (
  id                     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  business_date          text        NOT NULL,
  at                     timestamptz NOT NULL DEFAULT now(),
  actor                  text        NOT NULL,
  source                 text        NOT NULL,
  lines                  bigint      NOT NULL,
  amount                 bigint      NOT NULL,
  matched                bigint      NOT NULL,
  resolved               bigint      NOT NULL,
  applied_but_failed     bigint      NOT NULL,
  applied_in_flight      bigint      NOT NULL,
  applied_twice          bigint      NOT NULL,
  mismatch               bigint      NOT NULL,
  applied_told_failure   bigint      NOT NULL,
  told_success_unapplied bigint      NOT NULL,
  not_in_ledger          bigint      NOT NULL
);
CREATE INDEX IF NOT EXISTS reconcile_run_date ON reconcile_run (business_date, id);
CREATE TABLE IF NOT EXISTS reconcile_finding (
  run_id       bigint  NOT NULL,
  class        text    NOT NULL,
  guid         text    NOT NULL,
  ledger_state text,
  ledger_code  text,
  journal_refs text,
  amount       bigint,
  critical     boolean NOT NULL,
  resolved     boolean NOT NULL
);
CREATE INDEX IF NOT EXISTS reconcile_finding_run ON reconcile_finding (run_id, critical);
-- A critical finding across runs, open until a person closes it
-- (schema.sql says more). Created with the runs already kept: each GUID and
-- class they found critical is opened once (none was ever closed by a
-- person); a finding already here is left as it is.
CREATE TABLE IF NOT EXISTS critical_finding (
  id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  guid          text        NOT NULL,
  class         text        NOT NULL,
  business_date text        NOT NULL,
  first_run     bigint      NOT NULL,
  last_run      bigint      NOT NULL,
  runs          bigint      NOT NULL DEFAULT 1,
  amount        bigint,
  opened_at     timestamptz NOT NULL DEFAULT now(),
  closed_at     timestamptz,
  closed_by     text,
  note          text,
  UNIQUE (guid, class)
);
CREATE INDEX IF NOT EXISTS critical_finding_open ON critical_finding (id) WHERE closed_at IS NULL;
INSERT INTO critical_finding (guid, class, business_date, first_run, last_run, runs, amount, opened_at)
SELECT g.guid, g.class, r.business_date, g.first_run, g.last_run, g.runs, g.amount, r.at
FROM (SELECT guid, class, MIN(run_id) AS first_run, MAX(run_id) AS last_run, COUNT(*) AS runs, MAX(amount) AS amount
      FROM reconcile_finding WHERE critical GROUP BY guid, class) g
JOIN reconcile_run r ON r.id = g.first_run ORDER BY g.first_run, g.guid, g.class
ON CONFLICT (guid, class) DO NOTHING;

-- Four eyes inside the database (spec: settle.md "Who a person is";
-- docs/security.md). An operator connects as their own role, a member of
-- dedup_operator, which may read tx and tx_event and execute these three
-- functions, nothing else: the person is session_user, and "not the
-- proposer" is checked here, so psql users are bound by the same rule as
-- settle. The functions run as the schema owner (SECURITY DEFINER) with a
-- pinned search_path and every table schema-qualified. The owner (or a
-- superuser) may call them too, but only naming the person that its
-- binary authenticated (p_vouched: the account sudo authenticated for
-- settle through sudo -u dedup, or the certificate the console verified);
-- the owner can change the ledger directly anyway and is trusted. Refusals raise SQLSTATE DD001 (the ledger's state refuses it)
-- or DD002 (what was given is wrong); nothing is written then, but an
-- expiry, which is recorded.

-- public.dedup_settle_person is the caller as the record names them (not
-- executable by operators: the three functions call it as the owner).
CREATE OR REPLACE FUNCTION public.dedup_settle_person(p_host text, p_vouched jsonb)
RETURNS jsonb LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_owner boolean;
BEGIN
  SELECT pg_has_role(session_user, c.relowner, 'MEMBER') INTO v_owner
    FROM pg_class c WHERE c.oid = 'public.tx'::regclass;
  IF v_owner THEN
    IF p_vouched IS NULL OR coalesce(p_vouched->>'name', '') = '' OR coalesce(p_vouched->>'auth', '') NOT IN ('sudo', 'cert') THEN
      RAISE EXCEPTION 'the ledger''s owner (%) decides nothing by itself: an operator runs settle through sudo (sudo -u dedup settle ...), connects as their own role, or uses the console with their certificate', session_user
        USING ERRCODE = 'DD001';
    END IF;
    IF p_vouched->>'auth' = 'sudo' THEN
      RETURN jsonb_build_object('auth', 'sudo', 'name', p_vouched->>'name', 'uid', (p_vouched->>'uid')::integer, 'host', coalesce(p_host, ''));
    END IF;
    RETURN jsonb_build_object('auth', 'cert', 'name', p_vouched->>'name', 'serial', coalesce(p_vouched->>'serial', ''), 'host', coalesce(p_host, ''));
  END IF;
  RETURN jsonb_build_object('auth', 'pg', 'name', session_user::text, 'host', coalesce(p_host, ''));
END
$fn$;

-- public.dedup_settle_actor is a person as an event's actor names them.
CREATE OR REPLACE FUNCTION public.dedup_settle_actor(p jsonb)
RETURNS text LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT CASE p->>'auth'
    WHEN 'sudo' THEN format('settle:%s(sudo uid %s)@%s', p->>'name', p->>'uid', p->>'host')
    WHEN 'cert' THEN format('console:%s(cert %s)@%s', p->>'name', p->>'serial', p->>'host')
    ELSE format('settle:pg:%s@%s', p->>'name', p->>'host') END
$fn$;

-- public.dedup_settle_same reports whether two persons are one: the same name
-- (an OS account, a role), or the same uid on the same host.
CREATE OR REPLACE FUNCTION public.dedup_settle_same(a jsonb, b jsonb)
RETURNS boolean LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT a IS NULL OR b IS NULL OR a->>'name' IS NULL OR a->>'name' = b->>'name'
      OR (a->>'auth' = 'sudo' AND b->>'auth' = 'sudo' AND a->>'uid' = b->>'uid' AND a->>'host' = b->>'host')
$fn$;

-- public.dedup_settle_trace is the trace of the calling settle run or
-- console decision, as its events' detail names it ({"trace_id": ...}), or
-- {} when untraced: the caller sets dedup.trace_id in its transaction. A
-- correlation, not a right: only 32 lowercase hex digits are taken.
CREATE OR REPLACE FUNCTION public.dedup_settle_trace()
RETURNS jsonb LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT CASE WHEN current_setting('dedup.trace_id', true) ~ '^[0-9a-f]{32}$'
    THEN jsonb_build_object('trace_id', current_setting('dedup.trace_id', true)) ELSE '{}'::jsonb END
$fn$;

-- public.dedup_settle_target is the row a decision leads to (state, rsp_code,
-- response), or a DD001 refusal: settle.md's table of decisions.
CREATE OR REPLACE FUNCTION public.dedup_settle_target(p_as text, r public.tx, p jsonb,
  OUT state text, OUT rsp_code text, OUT response bytea)
LANGUAGE plpgsql IMMUTABLE SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_head bytea;
BEGIN
  IF r.state IN ('SENT', 'RECEIVED') THEN
    RAISE EXCEPTION '% is %: in flight; wait for the orphan sweep, then resolve', r.guid, r.state USING ERRCODE = 'DD001';
  ELSIF r.state = 'DONE' THEN
    RAISE EXCEPTION '% is DONE (%): final, nothing to decide', r.guid, r.rsp_code USING ERRCODE = 'DD001';
  END IF;
  IF p_as IN ('applied', 'abandoned') AND (r.request IS NULL OR length(r.request) <> 64 + 63 OR get_byte(r.request, 40) <> 83) THEN
    RAISE EXCEPTION '% has no usable stored request to build the reply from', r.guid USING ERRCODE = 'DD001';
  END IF;
  IF r.request IS NOT NULL AND length(r.request) >= 64 THEN
    -- lhstd.Reply: the request's header, kind R, the code in rsp_code.
    v_head := set_byte(substring(r.request FROM 1 FOR 64), 40, 82);
  END IF;
  IF p_as = 'applied' AND r.state = 'UNKNOWN' THEN
    state := 'DONE'; rsp_code := '0000';
    response := overlay(v_head PLACING convert_to('0000', 'SQL_ASCII') FROM 42 FOR 4)
      || convert_to(rpad(p->>'core_ref', 16, ' ') || lpad(p->>'balance', 15, '0') || (p->>'processed_at'), 'SQL_ASCII');
  ELSIF p_as = 'not-applied' AND r.state = 'UNKNOWN' THEN
    state := 'FAILED'; rsp_code := 'E902'; response := NULL;
  ELSIF p_as = 'abandoned' AND r.state = 'FAILED' AND r.rsp_code = 'E902' THEN
    state := 'DONE'; rsp_code := 'E905';
    response := overlay(v_head PLACING convert_to('E905', 'SQL_ASCII') FROM 42 FOR 4);
  ELSE
    RAISE EXCEPTION '% is %/%: --as % is not a decision for it (applied and not-applied: UNKNOWN rows; abandoned: FAILED/E902 rows)',
      r.guid, r.state, coalesce(r.rsp_code, ''), p_as USING ERRCODE = 'DD001';
  END IF;
END
$fn$;

-- public.dedup_settle_propose records a proposal (an event; the row does not
-- change) and returns its id.
CREATE OR REPLACE FUNCTION public.dedup_settle_propose(p_guid text, p_as text, p_reason text,
  p_core_ref text, p_balance bigint, p_processed_at text,
  p_host text, p_vouched jsonb DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC' AS $fn$
DECLARE
  v_person jsonb := public.dedup_settle_person(p_host, p_vouched);
  v_row public.tx;
  v_detail jsonb;
  v_t record;
  v_id bigint;
BEGIN
  IF p_guid IS NULL OR p_guid !~ '^[0-9A-Za-z]{32}$' THEN
    RAISE EXCEPTION 'GUID % is not 32 characters of [0-9A-Za-z]', p_guid USING ERRCODE = 'DD002';
  END IF;
  IF coalesce(p_reason, '') = '' THEN
    RAISE EXCEPTION '--reason is required: why, and the evidence (a ticket, the core team''s answer)' USING ERRCODE = 'DD002';
  END IF;
  IF p_as = 'applied' THEN
    IF p_core_ref IS NULL OR p_balance IS NULL OR p_processed_at IS NULL THEN
      RAISE EXCEPTION '--as applied needs --core-ref, --balance and --processed-at (the core''s reply, from its team)' USING ERRCODE = 'DD002';
    END IF;
    IF p_core_ref !~ '^[ -~]{1,16}$' OR p_balance < 0 OR p_balance > 999999999999999
       OR p_processed_at !~ '^[0-9]{14}$'
       OR to_char(to_timestamp(p_processed_at, 'YYYYMMDDHH24MISS'), 'YYYYMMDDHH24MISS') <> p_processed_at THEN
      RAISE EXCEPTION '--core-ref, --balance or --processed-at do not fit the reply (16 printable characters, 15 digits, YYYYMMDDhhmmss)' USING ERRCODE = 'DD002';
    END IF;
  ELSIF p_as IN ('not-applied', 'abandoned') THEN
    IF p_core_ref IS NOT NULL OR p_balance IS NOT NULL OR p_processed_at IS NOT NULL THEN
      RAISE EXCEPTION '--core-ref, --balance and --processed-at go with --as applied only' USING ERRCODE = 'DD002';
    END IF;
  ELSE
    RAISE EXCEPTION '--as must be applied, not-applied or abandoned' USING ERRCODE = 'DD002';
  END IF;
  SELECT * INTO v_row FROM public.tx WHERE guid = p_guid;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'GUID % has no row in the ledger', p_guid USING ERRCODE = 'DD002';
  END IF;
  v_detail := jsonb_strip_nulls(jsonb_build_object('as', p_as, 'reason', p_reason, 'core_ref', p_core_ref,
    'balance', p_balance, 'processed_at', p_processed_at)) ||
    jsonb_build_object('person', v_person, 'row_updated_at', v_row.updated_at::text) || public.dedup_settle_trace();
  SELECT * INTO v_t FROM public.dedup_settle_target(p_as, v_row, v_detail);
  INSERT INTO public.tx_event(guid, actor, action, from_state, to_state, rsp_code, attempts, detail)
    VALUES (p_guid, public.dedup_settle_actor(v_person), 'propose', v_row.state, NULL, NULL, v_row.attempts, v_detail::text)
    RETURNING id INTO v_id;
  RETURN v_id;
END
$fn$;

-- public.dedup_settle_decision is the open proposal p_id, locked, and the person
-- deciding it, who must not be its proposer.
CREATE OR REPLACE FUNCTION public.dedup_settle_decision(p_id bigint, v_person jsonb, p_what text,
  OUT e public.tx_event, OUT proposal jsonb)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  SELECT * INTO e FROM public.tx_event t WHERE t.id = p_id AND t.action = 'propose' FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'there is no proposal %', p_id USING ERRCODE = 'DD001';
  END IF;
  BEGIN
    proposal := e.detail::jsonb;
  EXCEPTION WHEN others THEN
    RAISE EXCEPTION 'proposal % is unreadable', p_id USING ERRCODE = 'DD001';
  END;
  IF proposal->'person' IS NULL THEN
    RAISE EXCEPTION 'proposal % names no authenticated person (it was recorded by an older settle): propose again', p_id USING ERRCODE = 'DD001';
  END IF;
  IF public.dedup_settle_same(proposal->'person', v_person) THEN
    RAISE EXCEPTION 'proposal % was made by %: it needs another person''s %', p_id, public.dedup_settle_actor(proposal->'person'), p_what
      USING ERRCODE = 'DD001';
  END IF;
  IF EXISTS (SELECT 1 FROM public.tx_event d WHERE d.guid = e.guid AND d.action IN ('approve', 'reject', 'expire')
             AND d.detail LIKE '{"proposal":' || p_id || ',%') THEN
    RAISE EXCEPTION 'proposal % is already decided (approved, rejected or expired)', p_id USING ERRCODE = 'DD001';
  END IF;
END
$fn$;

-- public.dedup_settle_approve applies proposal p_id for a person other than its
-- proposer: one fenced change of the row with its event, if the proposal
-- is open and younger than 24 hours and the row is exactly as proposed.
-- outcome is 'approved', or 'expired' (recorded; the row unchanged).
CREATE OR REPLACE FUNCTION public.dedup_settle_approve(p_id bigint, p_reason text,
  p_host text, p_vouched jsonb DEFAULT NULL,
  OUT outcome text, OUT guid text, OUT state text, OUT rsp_code text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC' AS $fn$
DECLARE
  v_person jsonb := public.dedup_settle_person(p_host, p_vouched);
  v_d record;
  v_row public.tx;
  v_t record;
  v_detail text;
BEGIN
  SELECT * INTO v_d FROM public.dedup_settle_decision(p_id, v_person, 'approval');
  guid := (v_d.e).guid;
  v_detail := '{"proposal":' || p_id || ',' || substr((jsonb_strip_nulls(jsonb_build_object('reason', nullif(p_reason, ''), 'person', v_person)) || public.dedup_settle_trace())::text, 2);
  IF (v_d.e).at < now() - interval '24 hours' THEN
    INSERT INTO public.tx_event(guid, actor, action, from_state, attempts, detail)
      VALUES (guid, public.dedup_settle_actor(v_person), 'expire', (v_d.e).from_state, (v_d.e).attempts, v_detail);
    outcome := 'expired';
    RETURN;
  END IF;
  SELECT * INTO v_row FROM public.tx t WHERE t.guid = (v_d.e).guid FOR UPDATE;
  IF NOT FOUND OR v_row.state <> (v_d.e).from_state OR v_row.attempts <> (v_d.e).attempts
     OR v_row.updated_at <> (v_d.proposal->>'row_updated_at')::timestamptz THEN
    RAISE EXCEPTION '% changed since proposal % (it was % attempts=%, updated %): nothing changed; look again and propose anew',
      guid, p_id, (v_d.e).from_state, (v_d.e).attempts, v_d.proposal->>'row_updated_at' USING ERRCODE = 'DD001';
  END IF;
  SELECT * INTO v_t FROM public.dedup_settle_target(v_d.proposal->>'as', v_row, v_d.proposal);
  UPDATE public.tx t SET state = v_t.state, rsp_code = v_t.rsp_code, response = v_t.response, updated_at = now()
    WHERE t.guid = v_row.guid AND t.state = v_row.state AND t.attempts = v_row.attempts AND t.updated_at = v_row.updated_at;
  INSERT INTO public.tx_event(guid, actor, action, from_state, to_state, rsp_code, attempts, detail)
    VALUES (guid, public.dedup_settle_actor(v_person), 'approve', v_row.state, v_t.state, v_t.rsp_code, v_row.attempts, v_detail);
  outcome := 'approved'; state := v_t.state; rsp_code := v_t.rsp_code;
END
$fn$;

-- public.dedup_settle_reject closes proposal p_id without changing the row, for
-- a person other than its proposer.
CREATE OR REPLACE FUNCTION public.dedup_settle_reject(p_id bigint, p_reason text,
  p_host text, p_vouched jsonb DEFAULT NULL)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET TimeZone = 'UTC' AS $fn$
DECLARE
  v_person jsonb := public.dedup_settle_person(p_host, p_vouched);
  v_d record;
BEGIN
  IF coalesce(p_reason, '') = '' THEN
    RAISE EXCEPTION '--reason is required' USING ERRCODE = 'DD002';
  END IF;
  SELECT * INTO v_d FROM public.dedup_settle_decision(p_id, v_person, 'rejection');
  INSERT INTO public.tx_event(guid, actor, action, from_state, attempts, detail)
    VALUES ((v_d.e).guid, public.dedup_settle_actor(v_person), 'reject', (v_d.e).from_state, (v_d.e).attempts,
      '{"proposal":' || p_id || ',' || substr((jsonb_build_object('reason', p_reason, 'person', v_person) || public.dedup_settle_trace())::text, 2));
END
$fn$;

-- public.dedup_close_finding closes open critical finding p_id with a note
-- saying what was done, for one person (closing changes no money and no
-- row of tx, so no second person is asked), and records the close as an
-- event on the transfer: action close_finding, detail the finding's id,
-- class and note. It returns the person as the event names them.
CREATE OR REPLACE FUNCTION public.dedup_close_finding(p_id bigint, p_note text, p_host text, p_vouched jsonb)
RETURNS text LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_person jsonb := public.dedup_settle_person(p_host, p_vouched);
  v_actor text := public.dedup_settle_actor(v_person);
  v_f public.critical_finding;
  v_state text;
  v_attempts integer;
BEGIN
  IF coalesce(btrim(p_note), '') = '' THEN
    RAISE EXCEPTION 'a note saying what was done is required' USING ERRCODE = 'DD002';
  END IF;
  SELECT * INTO v_f FROM public.critical_finding WHERE id = p_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'no finding %', p_id USING ERRCODE = 'DD001';
  END IF;
  IF v_f.closed_at IS NOT NULL THEN
    RAISE EXCEPTION 'finding % was closed at % UTC by %: %', p_id,
      to_char(v_f.closed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), v_f.closed_by, v_f.note USING ERRCODE = 'DD001';
  END IF;
  UPDATE public.critical_finding SET closed_at = now(), closed_by = v_actor, note = p_note WHERE id = p_id;
  SELECT state, attempts INTO v_state, v_attempts FROM public.tx WHERE guid = v_f.guid;
  INSERT INTO public.tx_event (guid, actor, action, from_state, to_state, rsp_code, attempts, detail)
    VALUES (v_f.guid, v_actor, 'close_finding', v_state, NULL, NULL, v_attempts,
      format('{"finding":%s,"class":%s,"note":%s}', p_id, to_json(v_f.class)::text, to_json(p_note)::text));
  RETURN v_actor;
END
$fn$;

REVOKE ALL ON FUNCTION public.dedup_settle_person(text, jsonb), public.dedup_settle_actor(jsonb), public.dedup_settle_trace(),
  public.dedup_settle_same(jsonb, jsonb), public.dedup_settle_target(text, public.tx, jsonb),
  public.dedup_settle_decision(bigint, jsonb, text),
  public.dedup_settle_propose(text, text, text, text, bigint, text, text, jsonb),
  public.dedup_settle_approve(bigint, text, text, jsonb),
  public.dedup_settle_reject(bigint, text, text, jsonb),
  public.dedup_close_finding(bigint, text, text, jsonb) FROM PUBLIC;

-- The operators' role: made here if the owner may create roles, else by
-- the database's administrator (CREATE ROLE dedup_operator NOLOGIN); its
-- grants follow whenever it exists.
DO $do$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dedup_operator') THEN
    BEGIN
      CREATE ROLE dedup_operator NOLOGIN;
    EXCEPTION WHEN duplicate_object OR unique_violation OR insufficient_privilege THEN
      NULL;
    END;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'dedup_operator') THEN
    GRANT SELECT ON public.tx, public.tx_event, public.reconcile_run, public.reconcile_finding, public.critical_finding TO dedup_operator;
    GRANT EXECUTE ON FUNCTION public.dedup_settle_propose(text, text, text, text, bigint, text, text, jsonb),
      public.dedup_settle_approve(bigint, text, text, jsonb),
      public.dedup_settle_reject(bigint, text, text, jsonb),
      public.dedup_close_finding(bigint, text, text, jsonb) TO dedup_operator;
  END IF;
END
$do$;
