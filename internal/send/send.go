// Package send sends a claimed transfer to the core and records how it
// ended: the one sequence (lease → confirmation → one core call → outcome
// → fenced record) that the relay and reprocess share, so that each
// safeguard on it exists once and holds for both senders.
//
// A holder is whoever owns a claim: the relay that claimed a new GUID or
// reclaimed a FAILED row on a retransmission, or reprocess. It may write
// the request to the core only while its claim is surely its own:
//
//   - within its lease, measured on its own monotonic clock from just
//     before it asked for the claim (docs/rules.md, operating assumptions);
//   - on a shared ledger, after confirming on the ledger's clock, once
//     connected and just before the first byte, that the row is still its
//     claim and younger than the lease (rule 13);
//
// and every connection it writes on carries TCP_USER_TIMEOUT and is
// aborted if given up on (rule 12, in coreapi).
package send

import (
	"context"
	"errors"
	"fmt"
	"time"

	"dedup"
	"dedup/internal/coreapi"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/lhstd"
)

// Ledger is what a holder needs of the ledger.
type Ledger interface {
	Finish(ctx context.Context, guid string, attempt int, o ledger.Outcome) (recorded bool, err error)
	ConfirmClaim(ctx context.Context, guid string, attempt int) (ledger.ClaimCheck, error)
}

// Core is what a holder needs of the core client.
type Core interface {
	// Transfer sends one transfer (at most one POST); see coreapi.Client.
	Transfer(ctx context.Context, tr coreapi.TransferRequest, lease time.Time, confirm coreapi.Confirm) coreapi.Result
}

// Sender sends claims. The zero Lease means no lease (tests only).
type Sender struct {
	Ledger Ledger
	Core   Core
	// Lease is how long after asking for a claim its holder may still
	// write the request (ledger.Bounds.Lease).
	Lease time.Duration
	// Confirm makes the holder confirm its claim on the ledger's clock
	// before the first byte (rule 13): set on a ledger shared by several
	// hosts (PostgreSQL). On SQLite every party runs on one host, and a
	// pause stops them all.
	Confirm bool
	// MaxClockSkew bounds the difference between the ledger's clock and
	// the host's past which the confirmation judges no age (docs/ledger.md
	// "Clocks"); the claim must still be the holder's.
	MaxClockSkew time.Duration
	// OnClock, if set, is told of every clock reading the confirmation
	// made, and whether the age check was skipped for it.
	OnClock func(r ledger.ClockReading, skipped bool)
	// BeforeSend, if set, is called with the memo between the claim and
	// its send: a test hook (nil in every release binary).
	BeforeSend func(memo string)
}

// Claim is one claim its holder owns.
type Claim struct {
	// Request is the request to send: the row's stored request, parsed.
	Request *lhstd.Request
	// Attempt is the claim's attempt number (its fencing epoch).
	Attempt int
	// Asked is when the claim was asked for: the lease runs from then.
	Asked time.Time
	// Received is the telegram that caused the send (the relay's
	// channel request; reprocess passes the stored one): the replies
	// that are not a stored DONE reply are built from it.
	Received []byte
	// Reclaimed: the claim is a reclaim of a FAILED row (not a first
	// send), so its outcome is recorded with an event.
	Reclaimed bool
}

// Sent is how one send ended.
type Sent struct {
	Result   coreapi.Result
	CoreTime time.Duration // the core call, connect to answer
	Outcome  ledger.Outcome
	// Recorded reports that the outcome was committed, fenced on the
	// claim; RecordErr is the ledger's error if the write failed.
	Recorded  bool
	RecordErr error
	// Reply is what the channel is told (docs/rules.md rules 10 and 12):
	// the stored reply when recorded; when not, 0000 if the core applied
	// the transfer, E902 if no byte left this process, E901 otherwise.
	Reply []byte
}

// ErrNotHeld is wrapped by a confirmation that found the claim gone.
var ErrNotHeld = errors.New("the row is no longer this holder's claim")

// ErrLeaseOver is wrapped by a confirmation that found the claim older
// than its lease on the ledger's clock.
var ErrLeaseOver = errors.New("the claim is older than its lease on the ledger's clock")

// Send sends c's request to the core, once, records the outcome fenced on
// the attempt, and returns how it ended. It runs to its end whatever ctx
// says about cancellation: a transfer in flight is never cut short.
func (s *Sender) Send(ctx context.Context, c Claim) Sent {
	ctx = context.WithoutCancel(ctx)
	if s.BeforeSend != nil {
		s.BeforeSend(c.Request.Transfer.Memo)
	}
	var lease time.Time
	if s.Lease > 0 {
		lease = c.Asked.Add(s.Lease)
	}
	var confirm coreapi.Confirm
	if s.Confirm {
		confirm = func(ctx context.Context) error { return s.confirm(ctx, c) }
	}
	start := time.Now()
	res := s.Core.Transfer(ctx, coreapi.NewTransferRequest(c.Request), lease, confirm)
	sent := Sent{Result: res, CoreTime: time.Since(start)}
	sent.Outcome = ledger.Outcome{State: res.State, RspCode: res.Code, Reclaimed: c.Reclaimed}
	if c.Reclaimed {
		sent.Outcome.Detail = tracing.WithDetail(ctx, outcomeDetail(res))
	}
	var stored []byte
	if res.State == dedup.StateDone {
		stored = lhstd.Reply(c.Request.Raw, res.Code, res.Body)
		sent.Outcome.Response = stored
	}
	fctx, span := tracing.Child(ctx, tracing.SpanFinish)
	sent.Recorded, sent.RecordErr = s.Ledger.Finish(fctx, c.Request.GUID, c.Attempt, sent.Outcome)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrClaimed.Bool(sent.Recorded))
		tracing.Fail(span, sent.RecordErr)
	}
	span.End()
	switch {
	case sent.Recorded && stored != nil:
		sent.Reply = stored
	case res.State == dedup.StateDone && !res.Applied():
		// A definite rejection that was not recorded: the row will be
		// resolved by inquiry, and a channel told "rejected" must never
		// see the transfer applied afterwards (rule 10).
		sent.Reply = lhstd.Reply(c.Received, dedup.CodeUnknown, nil)
	case res.Applied():
		sent.Reply = stored // the truth, recorded or not
	case sent.Recorded || res.LeaseExpired:
		// E901/E902 as recorded; or, unrecorded, a send that wrote no
		// byte: "not delivered by this send" is the truth whoever holds
		// the row now.
		sent.Reply = lhstd.Reply(c.Received, res.Code, nil)
	default:
		sent.Reply = lhstd.Reply(c.Received, dedup.CodeUnknown, nil)
	}
	return sent
}

// outcomeDetail is the event's why for a reclaimed send's outcome.
func outcomeDetail(r coreapi.Result) string {
	d := "core answered " + r.Code
	if r.Status != 0 {
		d += fmt.Sprintf(" (HTTP %d)", r.Status)
	}
	if r.Detail != "" {
		d += ": " + r.Detail
	}
	return d
}

// confirm is rule 13's check: the row is still c's claim and, while the
// ledger's clock and the host's agree, younger than the lease on the
// ledger's clock. It reads the ledger's clock in the same statement.
func (s *Sender) confirm(ctx context.Context, c Claim) (err error) {
	ctx, span := tracing.Child(ctx, tracing.SpanConfirm)
	defer func() { tracing.Fail(span, err); span.End() }()
	before := time.Now()
	chk, err := s.Ledger.ConfirmClaim(ctx, c.Request.GUID, c.Attempt)
	after := time.Now()
	if err != nil {
		return fmt.Errorf("confirm the claim: %w", err)
	}
	if !chk.Held {
		return fmt.Errorf("%w (attempt %d)", ErrNotHeld, c.Attempt)
	}
	if s.Lease <= 0 {
		return nil
	}
	r := ledger.ReadClock(before, after, chk.Now)
	maxSkew := s.MaxClockSkew
	if maxSkew <= 0 {
		maxSkew = ledger.DefaultMaxClockSkew
	}
	skewed := r.Check(maxSkew) != nil
	if s.OnClock != nil {
		s.OnClock(r, skewed)
	}
	if !skewed && chk.Age >= s.Lease {
		return fmt.Errorf("%w: %.3fs old, lease %gs", ErrLeaseOver, chk.Age.Seconds(), s.Lease.Seconds())
	}
	return nil
}
