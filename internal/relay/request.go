// Package relay is the dedup relay (중계): it reads request telegrams from
// channels, decides from the ledger whether a GUID may reach the core,
// calls the core at most once per claim, records the outcome, and replies;
// and it is the relay binary's flags and wiring (Main, run.go).
//
// The rules it enforces are docs/rules.md's: write before you send, claim
// atomically, FAILED only when surely not sent, UNKNOWN never resent, record
// then reply, and a channel that hangs up never cancels a transaction.
//
// This file is one transfer's path: ProcessFrom parses, handle claims, and
// the claim is sent (package send) or the row answers (answer.go).
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"dedup"
	"dedup/internal/metrics"
	"dedup/internal/send"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/lhstd"

	"go.opentelemetry.io/otel/trace"
)

// Store is the part of the ledger the relay uses. Every ledger.Ledger implements
// it; the end-to-end benchmark wires an in-memory one to measure the ceiling.
type Store interface {
	Get(ctx context.Context, guid string) (*ledger.Row, error)
	Claim(ctx context.Context, guid, txCode string, request []byte) (bool, error)
	Reclaim(ctx context.Context, guid string, request []byte, maxAttempts int) (int, []byte, bool, error)
	Finish(ctx context.Context, guid string, attempt int, o ledger.Outcome) (bool, error)
	ConfirmClaim(ctx context.Context, guid string, attempt int) (ledger.ClaimCheck, error)
	SweepOrphans(ctx context.Context, after time.Duration) (int64, error)
	Now(ctx context.Context) (time.Time, error)
}

// Core is the part of the core client the relay uses.
type Core interface {
	send.Core
	// Reach obtains a connection to the core and closes it, sending
	// nothing: how the relay learns that the core is back during an outage.
	Reach(ctx context.Context) error
}

// txn is one request's trip through the relay, for its log line.
type txn struct {
	peer     Peer // the channel connection
	req      *lhstd.Request
	start    time.Time
	from     string // the row's state when the request arrived ("none" if new)
	to       string // the row's state when the reply was decided
	attempt  int    // the claim's attempt number, or the row's attempts
	core     time.Duration
	detail   string
	logLevel slog.Level
	traceID  string // the transfer's trace, "" when not traced
}

// Process handles one request telegram and returns the reply telegram, or
// nil if the telegram cannot be answered (shorter than its header) and the
// connection must be closed. It never depends on the channel's connection:
// once called, the transaction runs to its end and its outcome is recorded.
func (s *Server) Process(t []byte) []byte { return s.ProcessFrom(Peer{}, t) }

// ProcessFrom is Process for a telegram that arrived from peer. A peer
// whose client certificate does not allow the telegram's channel code gets
// E900 without the ledger being read or written or the core called.
func (s *Server) ProcessFrom(peer Peer, t []byte) []byte {
	start := time.Now()
	req, err := lhstd.ParseRequest(t)
	if errors.Is(err, lhstd.ErrShort) {
		s.refusals.Log("malformed", slog.LevelWarn, "unanswerable telegram, closing connection",
			slog.String("peer", peer.Addr), slog.Int("bytes", len(t)), slog.String("error", err.Error()))
		return nil
	}
	if err != nil {
		h, _ := lhstd.ParseHeader(t)
		s.refusals.Log("malformed", slog.LevelWarn, "tx", s.peerAttrs(peer, slog.String("guid", printable(h.GUID)),
			slog.String("tx_code", printable(h.TxCode)), slog.String("code", dedup.CodeMalformed), slog.String("state", "none"),
			slog.Int("attempts", 0), slog.Float64("ms", ms(time.Since(start))), slog.String("detail", err.Error()))...)
		return lhstd.Reply(t, dedup.CodeMalformed, nil)
	}
	if !peer.allows(req.Channel) {
		// Channel binding: a gateway may send only as the channels its
		// certificate names, and so cannot claim another channel's GUIDs.
		s.metrics.Rejected(metrics.RejectChannelNotAllowed)
		s.refusals.Log(metrics.RejectChannelNotAllowed, slog.LevelWarn, "tx", s.peerAttrs(peer, slog.String("guid", req.GUID),
			slog.String("tx_code", req.TxCode), slog.String("channel", req.Channel), slog.String("code", dedup.CodeMalformed),
			slog.String("state", "none"), slog.Int("attempts", 0), slog.Float64("ms", ms(time.Since(start))),
			slog.String("detail", fmt.Sprintf("channel %s not allowed for client certificate CN=%s", req.Channel, peer.Client)))...)
		return lhstd.Reply(t, dedup.CodeMalformed, nil)
	}
	tx := &txn{peer: peer, req: req, start: start, from: "none", logLevel: slog.LevelInfo}
	// A background context: neither a hang-up nor a shutdown may cut a
	// transaction short (docs/rules.md rule 9); the core call is bounded by the
	// client's timeouts and ledger writes by the busy timeout.
	ctx, span := s.tracer.StartTransfer(context.Background(), req.GUID, req.TxCode, req.Channel)
	if span.IsRecording() {
		tx.traceID = span.SpanContext().TraceID().String()
	}
	reply := s.handle(ctx, tx)
	s.logTx(tx, reply)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrCode.String(lhstd.ReplyCode(reply)), tracing.AttrState.String(tx.stateChange()),
			tracing.AttrAttempts.Int(tx.attempt))
	}
	s.metrics.Transaction(time.Since(start), tx.traceID)
	span.End()
	return reply
}

// stateChange is the row's state as the log line and the span report it:
// "DONE", or "none->SENT->DONE" style from->to when this request moved it.
func (tx *txn) stateChange() string {
	if tx.to != "" && tx.to != tx.from {
		return tx.from + "->" + tx.to
	}
	return tx.from
}

func (s *Server) logTx(tx *txn, reply []byte) {
	attrs := s.peerAttrs(tx.peer, slog.String("guid", tx.req.GUID), slog.String("tx_code", tx.req.TxCode), slog.String("channel", tx.req.Channel),
		slog.String("code", lhstd.ReplyCode(reply)), slog.String("state", tx.stateChange()), slog.Int("attempts", tx.attempt),
		slog.Float64("ms", ms(time.Since(tx.start))))
	if tx.core > 0 {
		attrs = append(attrs, slog.Float64("core_ms", ms(tx.core)))
	}
	if tx.detail != "" {
		attrs = append(attrs, slog.String("detail", tx.detail))
	}
	if tx.traceID != "" {
		attrs = append(attrs, slog.String("trace_id", tx.traceID))
	}
	s.log.LogAttrs(context.Background(), tx.logLevel, "tx", attrs...)
}

// peerAttrs starts a transaction's log line: the peer's address and, with
// client certificates, its CN.
func (s *Server) peerAttrs(p Peer, attrs ...slog.Attr) []slog.Attr {
	out := make([]slog.Attr, 0, len(attrs)+4)
	out = append(out, slog.String("peer", p.Addr))
	if s.clientCerts {
		out = append(out, slog.String("client", p.Client))
	}
	return append(out, attrs...)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// printable keeps a malformed header field safe to log.
func printable(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// endSpan ends a ledger step's span with its error.
func endSpan(span trace.Span, err error) {
	tracing.Fail(span, err)
	span.End()
}

// endClaim ends a claim's span with its error and whether it took the row.
// (No variadic attributes: with tracing off they would cost an allocation
// per transfer.)
func endClaim(span trace.Span, err error, claimed bool) {
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrClaimed.Bool(claimed))
	}
	endSpan(span, err)
}

func (tx *txn) fail(level slog.Level, detail string) {
	tx.logLevel = max(tx.logLevel, level)
	if tx.detail != "" {
		tx.detail += "; "
	}
	tx.detail += detail
}

// found notes the row a known GUID had when its request arrived: the log
// line's from, to (until moved) and attempts.
func (tx *txn) found(row *ledger.Row) {
	tx.from, tx.to, tx.attempt = string(row.State), string(row.State), row.Attempts
}

// moved notes a change of the row this transaction made: its new state
// and the claim's attempt. found and moved are the only places that change
// what the log line reports of the row.
func (tx *txn) moved(to dedup.State, attempt int) {
	tx.to, tx.attempt = string(to), attempt
}

// replyNew answers with code built from the request just received.
func (tx *txn) replyNew(code string) []byte { return lhstd.Reply(tx.req.Raw, code, nil) }

func (s *Server) handle(ctx context.Context, tx *txn) []byte {
	guid := tx.req.GUID
	// Claim first: most traffic is new GUIDs, and the claim's row count
	// already says whether a row exists, so the row is read only when the
	// claim loses (a retransmission). If the row is gone when read (purged
	// meanwhile), claim once more.
	for try := 0; try < 2; try++ {
		asked := time.Now() // the lease runs from just before the claim is asked for
		cctx, span := tracing.Child(ctx, tracing.SpanClaim)
		claimed, err := s.store.Claim(cctx, guid, tx.req.TxCode, tx.req.Raw)
		endClaim(span, err, claimed)
		if err != nil {
			// The claim counts as not committed (its commit may be
			// ambiguous) and nothing is sent. A GUID that has a row is
			// still answered from it (docs/rules.md rule 14): a write
			// outage must not tell "not delivered" of a transfer that
			// may have been applied.
			s.ledgerTrouble(err)
			if row, rerr := s.store.Get(ctx, guid); rerr == nil && row != nil {
				tx.fail(slog.LevelWarn, "ledger cannot be written ("+err.Error()+"); answered from the row")
				return s.answerRow(tx, row, false).reply
			}
			tx.fail(slog.LevelError, "claim failed, not sent: "+err.Error())
			return tx.replyNew(dedup.CodeNotSent)
		}
		if claimed {
			tx.moved(dedup.StateSent, 1)
			return s.send(ctx, tx, send.Claim{Request: tx.req, Attempt: 1, Asked: asked, Received: tx.req.Raw})
		}
		rctx, span := tracing.Child(ctx, tracing.SpanRead)
		row, err := s.store.Get(rctx, guid)
		endSpan(span, err)
		if err != nil {
			tx.fail(slog.LevelError, "ledger read failed, not sent: "+err.Error())
			return tx.replyNew(dedup.CodeNotSent)
		}
		if row != nil {
			if a := s.answerRow(tx, row, true); !a.reclaim {
				return a.reply
			}
			return s.reclaim(ctx, tx)
		}
	}
	tx.fail(slog.LevelError, "GUID could be neither claimed nor read, not sent")
	return tx.replyNew(dedup.CodeNotSent)
}

// answerRow is what a GUID that has a row is answered, as answerKnown
// decides, accounted for in tx and the metrics. When the answer is to
// reclaim (a FAILED/E902 row, the ledger writable), the caller reclaims.
func (s *Server) answerRow(tx *txn, row *ledger.Row, writable bool) answer {
	tx.found(row)
	a := answerKnown(row, tx.req, writable)
	if a.detail != "" {
		tx.fail(a.level, a.detail)
	}
	if a.fromLedger {
		s.metrics.LedgerAnswer(row.State)
	}
	return a
}

// reclaim takes a FAILED/E902 row back (attempts + 1) and sends it. While
// the core counts as down it first makes sure that a connection can be
// obtained, so that an outage burns no attempt.
func (s *Server) reclaim(ctx context.Context, tx *txn) []byte {
	if s.outage.down() {
		if err := s.core.Reach(ctx); err != nil {
			s.metrics.LedgerAnswer(dedup.StateFailed)
			tx.fail(slog.LevelInfo, "core unreachable ("+err.Error()+"): not reclaimed, no attempt used")
			return tx.replyNew(dedup.CodeNotSent)
		}
		s.outage.reached()
	}
	asked := time.Now()
	rctx, span := tracing.Child(ctx, tracing.SpanReclaim)
	attempt, stored, claimed, err := s.store.Reclaim(rctx, tx.req.GUID, tx.req.Raw, 0)
	endClaim(span, err, claimed)
	if err != nil {
		s.ledgerTrouble(err)
		s.metrics.LedgerAnswer(dedup.StateFailed)
		tx.fail(slog.LevelError, "reclaim failed, not sent: "+err.Error())
		return tx.replyNew(dedup.CodeNotSent)
	}
	if !claimed {
		// Someone else reclaimed it first: answer from what it is now,
		// without trying again.
		now, err := s.store.Get(ctx, tx.req.GUID)
		if err != nil || now == nil {
			tx.fail(slog.LevelError, "lost the reclaim and cannot read the row; not sent")
			return tx.replyNew(dedup.CodeNotSent)
		}
		return s.answerRow(tx, now, false).reply
	}
	tx.moved(dedup.StateSent, attempt)
	// Send what the row holds: another holder may have stored a request
	// there since the row was read.
	req, err := lhstd.ParseRequest(stored)
	if err != nil || req.GUID != tx.req.GUID {
		return s.giveBack(ctx, tx, attempt, fmt.Sprintf("the row's stored request is unusable (%v)", err))
	}
	reply := s.send(ctx, tx, send.Claim{Request: req, Attempt: attempt, Asked: asked, Received: tx.req.Raw, Reclaimed: true})
	if !lhstd.SameRequest(stored, tx.req.Raw) {
		tx.fail(slog.LevelWarn, "the row's stored request, sent, differs from this one: answering E904")
		return tx.replyNew(dedup.CodeGUIDReused)
	}
	return reply
}

// giveBack ends a claim that must not be sent: nothing was written to the
// core, so the row goes back to FAILED/E902 (fenced on the attempt).
func (s *Server) giveBack(ctx context.Context, tx *txn, attempt int, why string) []byte {
	tx.fail(slog.LevelError, why+"; not sent")
	recorded, err := s.store.Finish(ctx, tx.req.GUID, attempt, ledger.Outcome{State: dedup.StateFailed, RspCode: dedup.CodeNotSent,
		Reclaimed: true, Detail: why + "; not sent"})
	if err == nil && recorded {
		tx.moved(dedup.StateFailed, attempt)
	}
	return tx.replyNew(dedup.CodeNotSent)
}

// send sends a claim this relay holds through the one holder sequence
// (package send), and accounts for it: the outage rule, the metrics and
// the log line. It returns the reply.
func (s *Server) send(ctx context.Context, tx *txn, c send.Claim) []byte {
	s.metrics.Inflight(1)
	defer s.metrics.Inflight(-1)
	sent := s.sender.Send(ctx, c)
	res := sent.Result
	tx.core = sent.CoreTime
	s.outage.record(res)
	if !res.LeaseExpired { // refused for its lease, nothing was POSTed
		s.metrics.CoreRequest(res.State, tx.core, tx.traceID)
	}
	if res.Detail != "" {
		tx.fail(slog.LevelWarn, res.Detail)
	}
	if sent.Recorded {
		tx.moved(res.State, c.Attempt)
		return sent.Reply
	}
	// Record, then reply (docs/rules.md rule 10): the outcome is not in
	// the ledger; the holder's reply says what is known.
	if sent.RecordErr != nil {
		s.ledgerTrouble(sent.RecordErr)
		tx.fail(slog.LevelError, "outcome "+res.Code+" not recorded: "+sent.RecordErr.Error())
	} else {
		tx.fail(slog.LevelError, "outcome "+res.Code+" not recorded: the row is no longer this claim's (fenced)")
	}
	return sent.Reply
}
