package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"go.opentelemetry.io/otel/trace"

	"dedup"
	"dedup/ledger"
)

var _ ledger.Desk = (*Ledger)(nil)

// vouchedArg is a Vouched as the functions' last argument (jsonb; NULL
// for none).
func vouchedArg(v *ledger.Vouched) any {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// optional is "" as NULL.
func optional(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// decisionError maps the functions' refusals (SQLSTATE DD001, DD002) to
// ledger.ErrRefused and ledger.ErrUsage with the database's words, and an
// operator's missing right to a refusal that says which role lacks it.
func decisionError(what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "DD001":
			return fmt.Errorf("%w: %s", ledger.ErrRefused, pe.Message)
		case "DD002":
			return fmt.Errorf("%w: %s", ledger.ErrUsage, pe.Message)
		case "42501": // insufficient_privilege
			return fmt.Errorf("%w: %s (an operator's role must be a member of dedup_operator)", ledger.ErrRefused, pe.Message)
		}
	}
	return fmt.Errorf("%s: %w", what, translate(err))
}

// call runs one of the settle functions in a transaction of its own,
// committed as every write (durably; on HA, acknowledged by the standby).
func (l *Ledger) call(ctx context.Context, what, sql string, scan []any, args ...any) error {
	ctx, cancel := bound(ctx)
	defer cancel()
	return l.onConn(ctx, func(c *pgxpool.Conn) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			return decisionError(what, err)
		}
		defer tx.Rollback(ctx)
		// A traced decision's events name its trace: the functions read
		// it from this transaction's dedup.trace_id (a correlation, not a
		// right: they take only 32 hex digits from it).
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			id := span.SpanContext().TraceID().String()
			if _, err := tx.Exec(ctx, "SELECT set_config('dedup.trace_id', $1, true)", id); err != nil {
				return decisionError(what, err)
			}
		}
		row := tx.QueryRow(ctx, sql, args...)
		if len(scan) == 0 {
			var ignored any
			scan = []any{&ignored}
		}
		if err := row.Scan(scan...); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return decisionError(what, err)
		}
		if err := l.commit(ctx, tx); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	})
}

// ProposeInLedger records a proposal through dedup_settle_propose.
func (l *Ledger) ProposeInLedger(ctx context.Context, p ledger.Proposed, host string, vouched *ledger.Vouched) (int64, error) {
	var balance any
	if p.Balance != nil {
		balance = *p.Balance
	}
	var id int64
	err := l.call(ctx, "propose "+p.GUID, "SELECT public.dedup_settle_propose($1, $2, $3, $4, $5, $6, $7, $8::jsonb)", []any{&id},
		p.GUID, p.As, p.Reason, optional(p.CoreRef), balance, optional(p.ProcessedAt), host, vouchedArg(vouched))
	return id, err
}

// ApproveInLedger approves a proposal through dedup_settle_approve.
func (l *Ledger) ApproveInLedger(ctx context.Context, id int64, reason, host string, vouched *ledger.Vouched) (ledger.Decided, error) {
	var outcome string
	var guid, state, code *string
	err := l.call(ctx, fmt.Sprintf("approve proposal %d", id), "SELECT outcome, guid, state, rsp_code FROM public.dedup_settle_approve($1, $2, $3, $4::jsonb)",
		[]any{&outcome, &guid, &state, &code}, id, reason, host, vouchedArg(vouched))
	if err != nil {
		return ledger.Decided{}, err
	}
	d := ledger.Decided{Expired: outcome == "expired"}
	if guid != nil {
		d.GUID = *guid
	}
	if state != nil {
		d.State = dedup.State(*state)
	}
	if code != nil {
		d.RspCode = *code
	}
	return d, nil
}

// RejectInLedger rejects a proposal through dedup_settle_reject.
func (l *Ledger) RejectInLedger(ctx context.Context, id int64, reason, host string, vouched *ledger.Vouched) error {
	return l.call(ctx, fmt.Sprintf("reject proposal %d", id), "SELECT public.dedup_settle_reject($1, $2, $3, $4::jsonb)::text", nil,
		id, reason, host, vouchedArg(vouched))
}

// CloseFindingInLedger closes a critical finding through
// dedup_close_finding, which names the person.
func (l *Ledger) CloseFindingInLedger(ctx context.Context, id int64, note, host string, vouched *ledger.Vouched) (ledger.CriticalFinding, error) {
	var actor string
	if err := l.call(ctx, fmt.Sprintf("close finding %d", id), "SELECT public.dedup_close_finding($1, $2, $3, $4::jsonb)", []any{&actor},
		id, note, host, vouchedArg(vouched)); err != nil {
		return ledger.CriticalFinding{}, err
	}
	f, err := l.Finding(ctx, id)
	if err != nil || f == nil {
		// Closed; only the read back failed (or an operator's role may not
		// read it): what the caller knows is enough.
		return ledger.CriticalFinding{ID: id, ClosedBy: actor, Note: note}, nil
	}
	return *f, nil
}
