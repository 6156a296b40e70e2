// Package settle is a person's decision, on the record, about a ledger
// row that inquiry cannot resolve (docs/settle.md): a
// proposal by one operator, an approval or a rejection by another (four
// eyes), each an event in tx_event, and the approval one fenced change of
// the row in the same transaction as its event. Nothing here touches a row
// by SQL of its own: every change goes through ledger.Ledger.Decide, or,
// on PostgreSQL, the database's own settle functions (Desk).
//
// Who decides is a Person established by an authentication that person
// cannot forge alone (sudo on the host, the database's role, the console's
// client certificate), never a typed name (person.go).
package settle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"dedup"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/lhstd"
)

// The decisions an operator may propose.
const (
	// Applied: the core applied the transfer (its team found it): the
	// UNKNOWN row becomes DONE/0000 with the reply built from the core's
	// reference, balance and processing time.
	Applied = "applied"
	// NotApplied: the core never applied it and never will: the UNKNOWN
	// row becomes FAILED/E902, which reprocess and retransmissions send.
	NotApplied = "not-applied"
	// Abandoned: the bank will not send it: the FAILED/E902 row becomes
	// DONE/E905, final, never sent.
	Abandoned = "abandoned"
)

// MaxAge is how long a proposal may wait for its approval; an older one is
// expired (with its event) when someone tries to approve it.
const MaxAge = 24 * time.Hour

// ErrUsage is wrapped by errors in what the operator gave (exit 2).
var ErrUsage = ledger.ErrUsage

// ErrRefused is wrapped by a decision refused for what the ledger holds
// (exit 1): the row's state, a closed or expired proposal, the same person,
// a person that could not be authenticated.
var ErrRefused = ledger.ErrRefused

// Proposal is what an operator proposes about one GUID.
type Proposal struct {
	GUID   string
	As     string // Applied, NotApplied or Abandoned
	Reason string
	// For Applied: the core's reference, the balance after it, and when the
	// core processed it (YYYYMMDDhhmmss).
	CoreRef     string
	Balance     *int64
	ProcessedAt string
}

// Check reports what is wrong with p on its face (exit 2), before the
// ledger is read.
func (p Proposal) Check() error {
	usage := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	if !lhstd.IsGUID(p.GUID) {
		return usage("GUID %q is not 32 characters of [0-9A-Za-z]", p.GUID)
	}
	if p.Reason == "" {
		return usage("--reason is required: why, and the evidence (a ticket, the core team's answer)")
	}
	switch p.As {
	case Applied:
		if p.CoreRef == "" || p.Balance == nil || p.ProcessedAt == "" {
			return usage("--as applied needs --core-ref, --balance and --processed-at (the core's reply, from its team)")
		}
		if _, err := time.Parse("20060102150405", p.ProcessedAt); err != nil {
			return usage("--processed-at %q is not YYYYMMDDhhmmss", p.ProcessedAt)
		}
		if _, err := lhstd.TransferResponseBody(p.CoreRef, *p.Balance, p.ProcessedAt); err != nil {
			return usage("--core-ref/--balance: %v", err)
		}
	case NotApplied, Abandoned:
		if p.CoreRef != "" || p.Balance != nil || p.ProcessedAt != "" {
			return usage("--core-ref, --balance and --processed-at go with --as applied only")
		}
	default:
		return usage("--as must be applied, not-applied or abandoned")
	}
	return nil
}

// proposed is a proposal as its event's detail keeps it: what was
// proposed, by whom, why, and the row it was proposed on (its fence). The
// same shape as dedup_settle_propose writes on PostgreSQL.
type proposed struct {
	As           string  `json:"as"`
	Reason       string  `json:"reason"`
	CoreRef      string  `json:"core_ref,omitempty"`
	Balance      *int64  `json:"balance,omitempty"`
	ProcessedAt  string  `json:"processed_at,omitempty"`
	Person       *Person `json:"person,omitempty"`
	RowUpdatedAt string  `json:"row_updated_at"`
	// Operator names the proposer of a proposal recorded before persons
	// were authenticated (typed text): shown by List, never approved.
	Operator string `json:"operator,omitempty"`
	// TraceID is the trace of the settle run that proposed it, if traced.
	TraceID string `json:"trace_id,omitempty"`
}

// decided is a decision's event detail. Proposal comes first: a decided
// proposal is found by its prefix (ledger.ProposalRef).
type decided struct {
	Proposal int64  `json:"proposal"`
	Reason   string `json:"reason,omitempty"`
	Person   Person `json:"person"`
	TraceID  string `json:"trace_id,omitempty"` // the deciding run's trace, if traced
}

// target is the row a decision leads to, from the row it is taken on.
func target(as string, row *ledger.Row, p proposed) (ledger.Outcome, error) {
	refuse := func(format string, a ...any) (ledger.Outcome, error) {
		return ledger.Outcome{}, fmt.Errorf("%w: "+format, append([]any{ErrRefused}, a...)...)
	}
	switch {
	case row.State == dedup.StateSent || row.State == dedup.StateReceived:
		return refuse("%s is %s: in flight; wait for the orphan sweep, then resolve", row.GUID, row.State)
	case row.State == dedup.StateDone:
		return refuse("%s is DONE (%s): final, nothing to decide", row.GUID, row.RspCode)
	case as == Applied && row.State == dedup.StateUnknown:
		if _, err := lhstd.ParseRequest(row.Request); err != nil {
			return refuse("%s has no usable stored request to build the reply from (%v)", row.GUID, err)
		}
		body, err := lhstd.TransferResponseBody(p.CoreRef, *p.Balance, p.ProcessedAt)
		if err != nil {
			return refuse("%v", err)
		}
		return ledger.Outcome{State: dedup.StateDone, RspCode: dedup.CodeOK, Response: lhstd.Reply(row.Request, dedup.CodeOK, body)}, nil
	case as == NotApplied && row.State == dedup.StateUnknown:
		return ledger.Outcome{State: dedup.StateFailed, RspCode: dedup.CodeNotSent}, nil
	case as == Abandoned && row.State == dedup.StateFailed && row.RspCode == dedup.CodeNotSent:
		if _, err := lhstd.ParseRequest(row.Request); err != nil {
			return refuse("%s has no usable stored request to build the E905 reply from (%v)", row.GUID, err)
		}
		return ledger.Outcome{State: dedup.StateDone, RspCode: dedup.CodeCancelled, Response: lhstd.Reply(row.Request, dedup.CodeCancelled, nil)}, nil
	}
	return refuse("%s is %s/%s: --as %s is not a decision for it (applied and not-applied: UNKNOWN rows; abandoned: FAILED/E902 rows)",
		row.GUID, row.State, row.RspCode, as)
}

// Propose records p by who as a proposal (an event; the row does not
// change) and returns its id.
func (d goDesk) Propose(ctx context.Context, p Proposal, who Person) (int64, error) {
	l := d.l
	if err := who.authenticated(); err != nil {
		return 0, err
	}
	if err := p.Check(); err != nil {
		return 0, err
	}
	row, err := l.Get(ctx, p.GUID)
	if err != nil {
		return 0, err
	}
	if row == nil {
		return 0, fmt.Errorf("%w: GUID %s has no row in the ledger", ErrUsage, p.GUID)
	}
	pr := proposed{As: p.As, Reason: p.Reason, CoreRef: p.CoreRef, Balance: p.Balance, ProcessedAt: p.ProcessedAt,
		Person: &who, RowUpdatedAt: row.UpdatedAt, TraceID: tracing.TraceID(ctx)}
	detail, _ := json.Marshal(pr)
	attempts := row.Attempts
	if _, err := target(p.As, row, pr); err != nil {
		return 0, err
	}
	// A proposal changes nothing: its event's to_state is NULL, and what
	// is proposed is in its detail.
	return l.AddEvent(ctx, ledger.Event{GUID: p.GUID, Actor: who.Actor(), Action: ledger.ActionPropose,
		FromState: string(row.State), Attempts: &attempts, Detail: string(detail)})
}

// Open is a proposal waiting for its decision.
type Open struct {
	ID     int64
	GUID   string
	As     string
	By     string // the proposer's name (an account, a role, a certificate)
	Age    time.Duration
	Reason string
}

// List returns the open proposals, oldest first.
func List(ctx context.Context, l ledger.Ledger) ([]Open, error) {
	evs, err := l.OpenProposals(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Open, 0, len(evs))
	for _, e := range evs {
		var d proposed
		json.Unmarshal([]byte(e.Detail), &d)
		by := d.Operator + "(unauthenticated)"
		if d.Person != nil {
			by = d.Person.Name
		}
		out = append(out, Open{ID: e.ID, GUID: e.GUID, As: d.As, By: by, Age: e.Age, Reason: d.Reason})
	}
	return out, nil
}

// Approved is what an approval did.
type Approved struct {
	ID   int64
	GUID string
	Row  ledger.Outcome // the row's new state and code
}

// proposalOf reads proposal id.
func proposalOf(ctx context.Context, l ledger.Ledger, id int64) (*ledger.Event, proposed, error) {
	var d proposed
	e, err := l.EventByID(ctx, id)
	if err != nil {
		return nil, d, err
	}
	if e == nil || e.Action != ledger.ActionPropose {
		return nil, d, fmt.Errorf("%w: there is no proposal %d", ErrRefused, id)
	}
	if err := json.Unmarshal([]byte(e.Detail), &d); err != nil {
		return nil, d, fmt.Errorf("%w: proposal %d is unreadable: %v", ErrRefused, id, err)
	}
	if d.Person == nil {
		return nil, d, fmt.Errorf("%w: proposal %d names no authenticated person (it was recorded by an older settle): propose again", ErrRefused, id)
	}
	return e, d, nil
}

// isOpen reports whether proposal id has no decision yet.
func isOpen(ctx context.Context, l ledger.Ledger, id int64) (bool, error) {
	evs, err := l.OpenProposals(ctx)
	if err != nil {
		return false, err
	}
	for _, e := range evs {
		if e.ID == id {
			return true, nil
		}
	}
	return false, nil
}

// notProposer refuses who's decision of proposal id by its own proposer.
func notProposer(id int64, p proposed, who Person, what string) error {
	if p.Person.Same(who) {
		return fmt.Errorf("%w: proposal %d was made by %s: it needs another person's %s", ErrRefused, id, p.Person.Actor(), what)
	}
	return nil
}

// Approve applies proposal id on behalf of who, a person other than its
// proposer: one fenced change of the row, with its event, if the proposal
// is open and younger than MaxAge and the row is exactly as proposed.
func (d goDesk) Approve(ctx context.Context, id int64, who Person, reason string) (Approved, error) {
	l := d.l
	if err := who.authenticated(); err != nil {
		return Approved{}, err
	}
	e, p, err := proposalOf(ctx, l, id)
	if err != nil {
		return Approved{}, err
	}
	if err := notProposer(id, p, who, "approval"); err != nil {
		return Approved{}, err
	}
	detail, _ := json.Marshal(decided{Proposal: id, Reason: reason, Person: who, TraceID: tracing.TraceID(ctx)})
	ev := ledger.Event{GUID: e.GUID, Actor: who.Actor(), FromState: e.FromState, Attempts: e.Attempts, Detail: string(detail)}
	if e.Age > MaxAge {
		ev.Action = ledger.ActionExpire
		err := l.Decide(ctx, ledger.Decision{Proposal: id, Event: ev})
		if err != nil && !errors.Is(err, ledger.ErrProposalClosed) {
			return Approved{}, err
		}
		return Approved{}, fmt.Errorf("%w: proposal %d is %s old, past %s: expired; propose again if it still holds", ErrRefused, id, e.Age.Round(time.Second), MaxAge)
	}
	from := &ledger.Row{GUID: e.GUID, State: dedup.State(e.FromState), RspCode: "", UpdatedAt: p.RowUpdatedAt}
	if e.Attempts != nil {
		from.Attempts = *e.Attempts
	}
	row, err := l.Get(ctx, e.GUID)
	if err != nil {
		return Approved{}, err
	}
	if row == nil || row.State != from.State || row.Attempts != from.Attempts || row.UpdatedAt != from.UpdatedAt {
		// A decided proposal's row has usually changed: say which it is.
		if open, err := isOpen(ctx, l, id); err == nil && !open {
			return Approved{}, fmt.Errorf("%w: proposal %d is already decided (approved, rejected or expired)", ErrRefused, id)
		}
		return Approved{}, fmt.Errorf("%w: %s changed since proposal %d (it was %s attempts=%d, updated %s): nothing changed; look again and propose anew",
			ErrRefused, e.GUID, id, from.State, from.Attempts, from.UpdatedAt)
	}
	to, err := target(p.As, row, p)
	if err != nil {
		return Approved{}, err
	}
	ev.Action, ev.ToState, ev.RspCode = ledger.ActionApprove, string(to.State), to.RspCode
	switch err := l.Decide(ctx, ledger.Decision{Proposal: id, Event: ev, From: from, To: to}); {
	case errors.Is(err, ledger.ErrProposalClosed):
		return Approved{}, fmt.Errorf("%w: proposal %d is already decided (approved, rejected or expired)", ErrRefused, id)
	case errors.Is(err, ledger.ErrRowChanged):
		return Approved{}, fmt.Errorf("%w: %s changed since proposal %d: nothing changed; look again and propose anew", ErrRefused, e.GUID, id)
	case err != nil:
		return Approved{}, err
	}
	return Approved{ID: id, GUID: e.GUID, Row: to}, nil
}

// Reject closes proposal id without changing the row; who must not be its
// proposer either.
func (d goDesk) Reject(ctx context.Context, id int64, who Person, reason string) error {
	l := d.l
	if reason == "" {
		return fmt.Errorf("%w: --reason is required", ErrUsage)
	}
	if err := who.authenticated(); err != nil {
		return err
	}
	e, p, err := proposalOf(ctx, l, id)
	if err != nil {
		return err
	}
	if err := notProposer(id, p, who, "rejection (its proposer lets it expire)"); err != nil {
		return err
	}
	detail, _ := json.Marshal(decided{Proposal: id, Reason: reason, Person: who, TraceID: tracing.TraceID(ctx)})
	err = l.Decide(ctx, ledger.Decision{Proposal: id, Event: ledger.Event{GUID: e.GUID, Actor: who.Actor(), Action: ledger.ActionReject,
		FromState: e.FromState, Attempts: e.Attempts, Detail: string(detail)}})
	if errors.Is(err, ledger.ErrProposalClosed) {
		return fmt.Errorf("%w: proposal %d is already decided", ErrRefused, id)
	}
	return err
}
