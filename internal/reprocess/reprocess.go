// Package reprocess is the reprocess job's logic: it sends again, under a
// fresh claim, the FAILED rows that surely never reached the core
// (docs/cli.md "reprocess", docs/rules.md).
package reprocess

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"dedup"
	"dedup/internal/job"
	"dedup/internal/send"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/lhstd"
)

// Summary counts one reprocess run (docs/cli.md defines every count).
type Summary struct {
	Candidates, Sent, Done, Unknown, Failed, Skipped, Exhausted int
	DryRun                                                      bool
	WouldSend                                                   int // a dry run's rows that a real run would reclaim and send
}

// String is the summary line reprocess prints last on stdout. A dry run
// adds would_send.
func (s Summary) String() string {
	out := fmt.Sprintf("reprocess: candidates=%d sent=%d done=%d unknown=%d failed=%d skipped=%d exhausted=%d",
		s.Candidates, s.Sent, s.Done, s.Unknown, s.Failed, s.Skipped, s.Exhausted)
	if s.DryRun {
		out += fmt.Sprintf(" would_send=%d", s.WouldSend)
	}
	return out
}

// Fields are the summary's counts in order.
func (s Summary) Fields() []job.Field {
	f := []job.Field{{Name: "candidates", Value: int64(s.Candidates)}, {Name: "sent", Value: int64(s.Sent)}, {Name: "done", Value: int64(s.Done)}, {Name: "unknown", Value: int64(s.Unknown)},
		{Name: "failed", Value: int64(s.Failed)}, {Name: "skipped", Value: int64(s.Skipped)}, {Name: "exhausted", Value: int64(s.Exhausted)}}
	if s.DryRun {
		f = append(f, job.Field{Name: "would_send", Value: int64(s.WouldSend)})
	}
	return f
}

// Reprocess resends, with its own GUID and its stored request, every
// FAILED/E902 row with fewer than maxAttempts attempts: reclaim (atomic,
// attempts + 1), then the holder's one sequence (package holder: lease,
// confirmation on a shared ledger, one send, the outcome recorded fenced
// on the attempt). UNKNOWN rows are never candidates. sender must send
// through the ledger l.
//
// A dry run changes nothing: it reports which rows a real run would send.
func Run(ctx context.Context, l ledger.Ledger, sender *send.Sender, maxAttempts int, dryRun bool, log *slog.Logger) (Summary, error) {
	rows, err := l.SelectFailed(ctx, maxAttempts)
	if err != nil {
		return Summary{}, err
	}
	sum := Summary{Candidates: len(rows), DryRun: dryRun}
	finish := func() (Summary, error) {
		n, err := l.CountExhausted(context.WithoutCancel(ctx), maxAttempts)
		sum.Exhausted = n
		return sum, err
	}
	for _, row := range rows {
		if err := ctx.Err(); err != nil {
			s, _ := finish()
			return s, fmt.Errorf("interrupted: %w", err)
		}
		if row.Request == nil {
			sum.Skipped++
			log.Warn("reprocess: no stored request; skipped, an operator must review", "guid", row.GUID)
			continue
		}
		if _, err := storedRequest(row.GUID, row.Request); err != nil {
			sum.Skipped++
			log.Error("reprocess: stored request is not a valid request for this GUID; skipped, an operator must review", "guid", row.GUID, "error", err)
			continue
		}
		if dryRun {
			sum.WouldSend++
			log.Info("reprocess (dry run): would send", "guid", row.GUID, "attempts", row.Attempts)
			continue
		}
		asked := time.Now()
		attempt, stored, claimed, err := l.Reclaim(ctx, row.GUID, nil, maxAttempts)
		if err != nil {
			s, _ := finish()
			return s, err
		}
		if !claimed {
			sum.Skipped++
			log.Info("reprocess: row reclaimed by someone else first; skipped", "guid", row.GUID)
			continue
		}
		rctx, span := tracing.Root(ctx, tracing.SpanReprocess, tracing.AttrGUID.String(row.GUID), tracing.AttrAttempts.Int(attempt))
		err = sendReclaimed(rctx, l, sender, row.GUID, attempt, stored, asked, &sum, log)
		tracing.Fail(span, err)
		span.End()
		if err != nil {
			s, _ := finish()
			return s, err
		}
	}
	return finish()
}

// storedRequest parses a row's stored request and checks that it is guid's.
func storedRequest(guid string, stored []byte) (*lhstd.Request, error) {
	req, err := lhstd.ParseRequest(stored)
	if err != nil {
		return nil, err
	}
	if req.GUID != guid {
		return nil, fmt.Errorf("it names GUID %s", req.GUID)
	}
	return req, nil
}

// sendReclaimed sends one row reprocess reclaimed, the request the reclaim
// returned (it is what the row holds now), and counts how it ended. Once
// reclaimed, the send and its record run to the end even if the job is
// interrupted. A ledger error is returned: the run stops there.
func sendReclaimed(ctx context.Context, l ledger.Ledger, sender *send.Sender, guid string, attempt int, stored []byte, asked time.Time,
	sum *Summary, log *slog.Logger) error {
	req, err := storedRequest(guid, stored)
	if err != nil {
		// Changed since it was selected: give the claim back unsent.
		sum.Skipped++
		log.Error("reprocess: the reclaimed row's request is not usable; given back unsent, an operator must review", "guid", guid, "error", err)
		_, ferr := l.Finish(context.WithoutCancel(ctx), guid, attempt, ledger.Outcome{State: dedup.StateFailed, RspCode: dedup.CodeNotSent,
			Reclaimed: true, Detail: "the reclaimed row's request is not usable: not sent"})
		return ferr
	}
	sum.Sent++
	start := time.Now()
	sent := sender.Send(ctx, send.Claim{Request: req, Attempt: attempt, Asked: asked, Received: stored, Reclaimed: true})
	res := sent.Result
	args := tracing.LogAttrs(ctx, "guid", guid, "code", res.Code, "attempts", attempt, "ms", time.Since(start).Milliseconds())
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.AttrCode.String(res.Code), tracing.AttrOutcome.String(string(res.State)))
	}
	if res.Detail != "" {
		args = append(args, "detail", res.Detail)
	}
	switch {
	case sent.RecordErr != nil || !sent.Recorded:
		sum.Unknown++
		log.Error("reprocess: outcome not recorded; the row will be resolved by inquiry", append(args, "error", sent.RecordErr)...)
		return sent.RecordErr
	case res.State == dedup.StateDone:
		sum.Done++
	case res.State == dedup.StateUnknown:
		sum.Unknown++
	default:
		sum.Failed++
	}
	log.Info("reprocess: sent", append(args, "state", "FAILED->"+string(res.State))...)
	return nil
}
