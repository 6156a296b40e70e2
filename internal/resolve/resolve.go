// Package resolve is the resolve job's logic: it resolves UNKNOWN rows by
// asking the core what became of each (docs/cli.md "resolve",
// docs/rules.md). It never sends a transfer.
package resolve

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"dedup"
	"dedup/internal/coreapi"
	"dedup/internal/job"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/lhstd"
)

// Summary counts one resolve run.
type Summary struct {
	Candidates, Done, Failed, Left int
}

// String is the summary line resolve prints last on stdout.
func (s Summary) String() string {
	return fmt.Sprintf("resolve: candidates=%d done=%d failed=%d left=%d", s.Candidates, s.Done, s.Failed, s.Left)
}

// Fields are the summary's counts in order.
func (s Summary) Fields() []job.Field {
	return []job.Field{{Name: "candidates", Value: int64(s.Candidates)}, {Name: "done", Value: int64(s.Done)}, {Name: "failed", Value: int64(s.Failed)}, {Name: "left", Value: int64(s.Left)}}
}

// Run resolves every UNKNOWN row not updated for minAge by inquiry: 200
// → DONE/0000 with the reply the relay would have sent, 404 NOT_FOUND →
// FAILED/E902, anything else leaves the row as it is. Each change is fenced
// on the row as selected. It never sends a transfer. A ledger error ends the
// run with the summary so far.
//
// It first compares the ledger's clock with this host's and resolves
// nothing while they differ by more than maxSkew (docs/ledger.md
// "Clocks"): a ledger clock that runs ahead makes young rows look old, and
// a young row resolved FAILED on "not found" may still be on its way.
func Run(ctx context.Context, l ledger.Ledger, core *coreapi.Client, minAge, maxSkew time.Duration, log *slog.Logger) (Summary, error) {
	if _, err := ledger.CheckClock(ctx, l, maxSkew); err != nil {
		return Summary{}, err
	}
	rows, err := l.SelectUnknown(ctx, minAge)
	if err != nil {
		return Summary{}, err
	}
	sum := Summary{Candidates: len(rows)}
	// "candidates=0" must not read as "nothing pending": say how many
	// UNKNOWN rows were too young to be asked about yet.
	// Read through the state index: UNKNOWN rows only, never the whole
	// ledger (Stats counts every state, DONE's millions included).
	if all, err := l.SelectUnknown(ctx, 0); err == nil && len(all) > len(rows) {
		log.Info("resolve: UNKNOWN rows younger than --min-age left for a later run", "rows", len(all)-len(rows), "min_age_s", minAge.Seconds())
	}
	for _, row := range rows {
		if err := ctx.Err(); err != nil {
			sum.Left = sum.Candidates - sum.Done - sum.Failed
			return sum, fmt.Errorf("interrupted: %w", err)
		}
		rctx, span := tracing.Root(ctx, tracing.SpanResolve, tracing.AttrGUID.String(row.GUID), tracing.AttrAttempts.Int(row.Attempts))
		outcome, err := resolveRow(rctx, l, core, row, log)
		if span.IsRecording() {
			span.SetAttributes(tracing.AttrOutcome.String(string(outcome)))
			tracing.Fail(span, err)
		}
		span.End()
		if err != nil {
			sum.Left = sum.Candidates - sum.Done - sum.Failed
			return sum, err
		}
		switch outcome {
		case dedup.StateDone:
			sum.Done++
		case dedup.StateFailed:
			sum.Failed++
		}
	}
	sum.Left = sum.Candidates - sum.Done - sum.Failed
	return sum, nil
}

// resolveRow asks the core about one UNKNOWN row and resolves it if the
// answer is proof. It returns the state the row was resolved to, or "" if
// it was left as it is; an error is the ledger's.
func resolveRow(ctx context.Context, l ledger.Ledger, core *coreapi.Client, row ledger.Row, log *slog.Logger) (dedup.State, error) {
	var out ledger.Outcome
	lk := core.Lookup(ctx, row.GUID)
	switch lk.Verdict {
	case coreapi.Found:
		if len(row.Request) < lhstd.HeaderLen {
			log.Error("resolve: core applied it, but the row has no stored request to build the reply from; left for an operator",
				tracing.LogAttrs(ctx, "guid", row.GUID)...)
			return "", nil
		}
		out = ledger.Outcome{State: dedup.StateDone, RspCode: dedup.CodeOK, Response: lhstd.Reply(row.Request, dedup.CodeOK, lk.Body),
			Detail: "core lookup: 200, applied (" + replyFields(lk.Body) + ")"}
	case coreapi.NotFound:
		out = ledger.Outcome{State: dedup.StateFailed, RspCode: dedup.CodeNotSent, Detail: "core lookup: 404 NOT_FOUND"}
	default:
		log.Warn("resolve: no proof either way; row left as it is", tracing.LogAttrs(ctx, "guid", row.GUID, "status", lk.Status, "detail", lk.Detail)...)
		return "", nil
	}
	out.Detail = tracing.WithDetail(ctx, out.Detail)
	wctx, span := tracing.Child(ctx, tracing.SpanLedgerWrite)
	recorded, err := l.Resolve(wctx, row, out)
	tracing.Fail(span, err)
	span.End()
	if err != nil {
		return "", err
	}
	if !recorded {
		log.Warn("resolve: row changed since it was selected; left to its new holder",
			tracing.LogAttrs(ctx, "guid", row.GUID, "attempts", row.Attempts, "updated_at", row.UpdatedAt)...)
		return "", nil
	}
	log.Info("resolve: resolved", tracing.LogAttrs(ctx, "guid", row.GUID, "state", "UNKNOWN->"+string(out.State), "code", out.RspCode, "attempts", row.Attempts)...)
	return out.State, nil
}

// replyFields is a 0000 reply body as a person reads it in an event's
// detail: ref=... balance=... processed_at=..., not one run of digits.
func replyFields(body []byte) string {
	r, err := lhstd.ParseTransferResponseBody(body)
	if err != nil {
		return strings.TrimSpace(string(body))
	}
	return fmt.Sprintf("ref=%s balance=%d processed_at=%s", r.Ref, r.Balance, r.ProcessedAt)
}
