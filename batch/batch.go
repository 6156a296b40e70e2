// Package batch implements the jobs operators run from cron and runbooks:
// resolve (settle UNKNOWN rows by inquiry), reprocess (resend what surely
// never reached the core) and purge (forget old DONE rows). See docs/cli.md
// and docs/ledger.md.
package batch

import (
	"go.opentelemetry.io/otel/trace"

	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"dedup"
	"dedup/coreapi"
	"dedup/holder"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/lhstd"
)

// ResolveSummary counts one resolve run.
type ResolveSummary struct {
	Candidates, Done, Failed, Left int
}

// String is the summary line resolve prints last on stdout.
func (s ResolveSummary) String() string {
	return fmt.Sprintf("resolve: candidates=%d done=%d failed=%d left=%d", s.Candidates, s.Done, s.Failed, s.Left)
}

// Fields are the summary's counts in order.
func (s ResolveSummary) Fields() []Field {
	return []Field{{Name: "candidates", Value: int64(s.Candidates)}, {Name: "done", Value: int64(s.Done)}, {Name: "failed", Value: int64(s.Failed)}, {Name: "left", Value: int64(s.Left)}}
}

// Resolve settles every UNKNOWN row not updated for minAge by inquiry: 200
// → DONE/0000 with the reply the relay would have sent, 404 NOT_FOUND →
// FAILED/E902, anything else leaves the row as it is. Each change is fenced
// on the row as selected. It never sends a transfer. A ledger error ends the
// run with the summary so far.
//
// It first compares the ledger's clock with this host's and settles
// nothing while they differ by more than maxSkew (docs/ledger.md
// "Clocks"): a ledger clock that runs ahead makes young rows look old, and
// a young row settled FAILED on "not found" may still be on its way.
func Resolve(ctx context.Context, l ledger.Ledger, core *coreapi.Client, minAge, maxSkew time.Duration, log *slog.Logger) (ResolveSummary, error) {
	if _, err := ledger.CheckClock(ctx, l, maxSkew); err != nil {
		return ResolveSummary{}, err
	}
	rows, err := l.SelectUnknown(ctx, minAge)
	if err != nil {
		return ResolveSummary{}, err
	}
	sum := ResolveSummary{Candidates: len(rows)}
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
		settled, err := resolveRow(rctx, l, core, row, log)
		if span.IsRecording() {
			span.SetAttributes(tracing.AttrOutcome.String(string(settled)))
			tracing.Fail(span, err)
		}
		span.End()
		if err != nil {
			sum.Left = sum.Candidates - sum.Done - sum.Failed
			return sum, err
		}
		switch settled {
		case dedup.StateDone:
			sum.Done++
		case dedup.StateFailed:
			sum.Failed++
		}
	}
	sum.Left = sum.Candidates - sum.Done - sum.Failed
	return sum, nil
}

// resolveRow asks the core about one UNKNOWN row and settles it if the
// answer is proof. It returns the state the row was settled to, or "" if
// it was left as it is; an error is the ledger's.
func resolveRow(ctx context.Context, l ledger.Ledger, core *coreapi.Client, row ledger.Row, log *slog.Logger) (dedup.State, error) {
	var out ledger.Outcome
	lk := core.Lookup(ctx, row.GUID)
	switch lk.Verdict {
	case coreapi.Found:
		if len(row.Request) < lhstd.HeaderLen {
			log.Error("resolve: core applied it, but the row has no stored request to build the reply from; left for an operator",
				traced(ctx, "guid", row.GUID)...)
			return "", nil
		}
		out = ledger.Outcome{State: dedup.StateDone, RspCode: dedup.CodeOK, Response: lhstd.Reply(row.Request, dedup.CodeOK, lk.Body),
			Detail: "core lookup: 200, applied (" + strings.TrimSpace(string(lk.Body)) + ")"}
	case coreapi.NotFound:
		out = ledger.Outcome{State: dedup.StateFailed, RspCode: dedup.CodeNotSent, Detail: "core lookup: 404 NOT_FOUND"}
	default:
		log.Warn("resolve: no proof either way; row left as it is", traced(ctx, "guid", row.GUID, "status", lk.Status, "detail", lk.Detail)...)
		return "", nil
	}
	out.Detail = tracing.WithDetail(ctx, out.Detail)
	wctx, span := tracing.Child(ctx, tracing.SpanLedgerWrite)
	recorded, err := l.Settle(wctx, row, out)
	tracing.Fail(span, err)
	span.End()
	if err != nil {
		return "", err
	}
	if !recorded {
		log.Warn("resolve: row changed since it was selected; left to its new holder",
			traced(ctx, "guid", row.GUID, "attempts", row.Attempts, "updated_at", row.UpdatedAt)...)
		return "", nil
	}
	log.Info("resolve: settled", traced(ctx, "guid", row.GUID, "state", "UNKNOWN->"+string(out.State), "code", out.RspCode, "attempts", row.Attempts)...)
	return out.State, nil
}

// traced is a job's log line's attributes with the trace id of ctx's span
// added when it is traced.
func traced(ctx context.Context, args ...any) []any {
	if id := tracing.TraceID(ctx); id != "" {
		return append(args, "trace_id", id)
	}
	return args
}

// ReprocessSummary counts one reprocess run (docs/cli.md defines every count).
type ReprocessSummary struct {
	Candidates, Sent, Done, Unknown, Failed, Skipped, Exhausted int
	DryRun                                                      bool
	WouldSend                                                   int // a dry run's rows that a real run would reclaim and send
}

// String is the summary line reprocess prints last on stdout. A dry run
// adds would_send.
func (s ReprocessSummary) String() string {
	out := fmt.Sprintf("reprocess: candidates=%d sent=%d done=%d unknown=%d failed=%d skipped=%d exhausted=%d",
		s.Candidates, s.Sent, s.Done, s.Unknown, s.Failed, s.Skipped, s.Exhausted)
	if s.DryRun {
		out += fmt.Sprintf(" would_send=%d", s.WouldSend)
	}
	return out
}

// Fields are the summary's counts in order.
func (s ReprocessSummary) Fields() []Field {
	f := []Field{{Name: "candidates", Value: int64(s.Candidates)}, {Name: "sent", Value: int64(s.Sent)}, {Name: "done", Value: int64(s.Done)}, {Name: "unknown", Value: int64(s.Unknown)},
		{Name: "failed", Value: int64(s.Failed)}, {Name: "skipped", Value: int64(s.Skipped)}, {Name: "exhausted", Value: int64(s.Exhausted)}}
	if s.DryRun {
		f = append(f, Field{Name: "would_send", Value: int64(s.WouldSend)})
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
func Reprocess(ctx context.Context, l ledger.Ledger, sender *holder.Sender, maxAttempts int, dryRun bool, log *slog.Logger) (ReprocessSummary, error) {
	rows, err := l.SelectFailed(ctx, maxAttempts)
	if err != nil {
		return ReprocessSummary{}, err
	}
	sum := ReprocessSummary{Candidates: len(rows), DryRun: dryRun}
	finish := func() (ReprocessSummary, error) {
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
func sendReclaimed(ctx context.Context, l ledger.Ledger, sender *holder.Sender, guid string, attempt int, stored []byte, asked time.Time,
	sum *ReprocessSummary, log *slog.Logger) error {
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
	sent := sender.Send(ctx, holder.Claim{Request: req, Attempt: attempt, Asked: asked, Received: stored, Reclaimed: true})
	res := sent.Result
	args := traced(ctx, "guid", guid, "code", res.Code, "attempts", attempt, "ms", time.Since(start).Milliseconds())
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.AttrCode.String(res.Code), tracing.AttrOutcome.String(string(res.State)))
	}
	if res.Detail != "" {
		args = append(args, "detail", res.Detail)
	}
	switch {
	case sent.RecordErr != nil || !sent.Recorded:
		sum.Unknown++
		log.Error("reprocess: outcome not recorded; the row will be settled by inquiry", append(args, "error", sent.RecordErr)...)
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

// PurgeSummary counts one purge run.
type PurgeSummary struct {
	Deleted     int64
	DryRun      bool
	WouldDelete int64 // a dry run's count of rows a real run would delete
	// EventsDeleted counts the events older than --event-days deleted
	// (in the textfile and the JSON summary; the text line is the
	// contract's and stays "purge: deleted=N").
	EventsDeleted int64
}

// String is the summary line purge prints last on stdout. A dry run adds
// would_delete.
func (s PurgeSummary) String() string {
	if s.DryRun {
		return fmt.Sprintf("purge: deleted=%d would_delete=%d", s.Deleted, s.WouldDelete)
	}
	return fmt.Sprintf("purge: deleted=%d", s.Deleted)
}

// Fields are the summary's counts in order.
func (s PurgeSummary) Fields() []Field {
	f := []Field{{Name: "deleted", Value: s.Deleted}, {Name: "events_deleted", Value: s.EventsDeleted}}
	if s.DryRun {
		f = append(f, Field{Name: "would_delete", Value: s.WouldDelete})
	}
	return f
}

// PurgeBatchSize is the most rows one purge batch deletes. Each backend
// also bounds how long a batch holds its locks (SQLite: ledger.PurgeHold
// of the write lock), so a batch may delete fewer rows than asked while
// more remain; a purge ends at the first batch that deletes none.
const PurgeBatchSize = 5000

// purgePause is the least pause between two purge batches. Neither backend
// has a fair queue for its write lock (SQLite's writers poll for it, every
// half millisecond at most in ledger/sqlite; PostgreSQL's row locks go to
// whoever asks next), so a purge that started its next batch at once could
// take the lock again and again while a relay's claim waits. Pausing at
// least twice as long as each batch took leaves the lock free most of the
// time.
const purgePause = 10 * time.Millisecond

// Purge deletes DONE rows not updated for days days, in batches. Every other
// state is kept whatever its age: it is the evidence for investigation. A
// dry run deletes nothing and counts what a real run would delete. If
// progress is not nil, it is called after every batch with the rows deleted
// so far and the count there was to delete at the start.
//
// Like Resolve, it deletes nothing while the ledger's clock and this
// host's differ by more than maxSkew: a clock that runs ahead would delete
// rows a channel may still retransmit.
//
// Then it deletes the events older than eventDays days (0: none), in
// batches too: a purged row's events outlive it, for the auditors.
func Purge(ctx context.Context, l ledger.Ledger, days, eventDays int, maxSkew time.Duration, dryRun bool, progress func(deleted, total int64), log *slog.Logger) (PurgeSummary, error) {
	var sum PurgeSummary
	if _, err := ledger.CheckClock(ctx, l, maxSkew); err != nil {
		return sum, err
	}
	var total int64
	if dryRun || progress != nil {
		n, err := l.CountPurgeable(ctx, days)
		if err != nil {
			return sum, err
		}
		if dryRun {
			sum.DryRun, sum.WouldDelete = true, n
			return sum, nil
		}
		total = n
	}
	err := inBatches(ctx, func(ctx context.Context) (int64, error) { return l.PurgeBatch(ctx, days, PurgeBatchSize) }, func(n int64) {
		sum.Deleted += n
		if progress != nil {
			progress(sum.Deleted, total)
		}
	})
	if err != nil || eventDays <= 0 {
		return sum, err
	}
	err = inBatches(ctx, func(ctx context.Context) (int64, error) { return l.PurgeEvents(ctx, eventDays, PurgeBatchSize) },
		func(n int64) { sum.EventsDeleted += n })
	if sum.EventsDeleted > 0 {
		log.Info("purge: events older than --event-days deleted", "events", sum.EventsDeleted, "event_days", eventDays)
	}
	return sum, err
}

// inBatches runs batch until it deletes nothing, telling done of each
// batch's count, and pauses between batches so that a relay's claims are
// never kept waiting long (see purgePause).
func inBatches(ctx context.Context, batch func(context.Context) (int64, error), done func(int64)) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		start := time.Now()
		n, err := batch(ctx)
		if err != nil {
			return err
		}
		done(n)
		if n == 0 {
			return nil
		}
		time.Sleep(max(purgePause, 2*time.Since(start)))
	}
}
