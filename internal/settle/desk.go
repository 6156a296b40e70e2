package settle

import (
	"context"
	"fmt"
	"strings"

	"dedup/ledger"
)

// Desk takes an operator's proposals and decisions. DeskFor picks the one
// a ledger needs: on a backend that keeps the four-eyes rule inside the
// database (ledger.Desk: PostgreSQL's functions), the database decides who
// the person is and whether they may decide; elsewhere (SQLite) the rule is
// checked here, in Go, and the change is ledger.Ledger.Decide's fenced
// transaction. Both follow the spec's settle.md, and the settlement tests
// run the same cases on each.
type Desk interface {
	// Propose records p by who as a proposal and returns its id.
	Propose(ctx context.Context, p Proposal, who Person) (int64, error)
	// Approve applies proposal id for who, another person than its
	// proposer: one fenced change of the row, with its event.
	Approve(ctx context.Context, id int64, who Person, reason string) (Approved, error)
	// Reject closes proposal id for who, another person than its proposer.
	Reject(ctx context.Context, id int64, who Person, reason string) error
	// CloseFinding closes reconcile's open critical finding id for who,
	// with a note saying what was done: one person suffices (closing
	// changes no money and no row), but an authenticated one.
	CloseFinding(ctx context.Context, id int64, who Person, note string) (ledger.CriticalFinding, error)
}

// DeskFor returns l's Desk.
func DeskFor(l ledger.Ledger) Desk {
	if d, ok := l.(ledger.Desk); ok {
		return dbDesk{d}
	}
	return goDesk{l}
}

// goDesk checks the four-eyes rule in Go and changes rows through
// ledger.Ledger.Decide (SQLite).
type goDesk struct{ l ledger.Ledger }

// dbDesk calls the database's functions (PostgreSQL). who is passed only
// as its binary authenticated it (sudo, a certificate); the database takes
// session_user instead unless the session is the schema's owner.
type dbDesk struct{ d ledger.Desk }

func (d dbDesk) args(who Person) (string, *ledger.Vouched) {
	host := who.Host
	if host == "" {
		host = Hostname()
	}
	if who.Auth == AuthSudo || who.Auth == AuthCertificate {
		return host, &ledger.Vouched{Auth: who.Auth, Name: who.Name, UID: who.UID, Serial: who.Serial}
	}
	return host, nil
}

func (d dbDesk) Propose(ctx context.Context, p Proposal, who Person) (int64, error) {
	if err := p.Check(); err != nil {
		return 0, err
	}
	host, sudo := d.args(who)
	return d.d.ProposeInLedger(ctx, ledger.Proposed{GUID: p.GUID, As: p.As, Reason: p.Reason, CoreRef: p.CoreRef,
		Balance: p.Balance, ProcessedAt: p.ProcessedAt}, host, sudo)
}

func (d dbDesk) Approve(ctx context.Context, id int64, who Person, reason string) (Approved, error) {
	host, sudo := d.args(who)
	got, err := d.d.ApproveInLedger(ctx, id, reason, host, sudo)
	if err != nil {
		return Approved{}, err
	}
	if got.Expired {
		return Approved{}, fmt.Errorf("%w: proposal %d is older than %s: expired; propose again if it still holds", ErrRefused, id, MaxAge)
	}
	return Approved{ID: id, GUID: got.GUID, Row: ledger.Outcome{State: got.State, RspCode: got.RspCode}}, nil
}

func (d dbDesk) Reject(ctx context.Context, id int64, who Person, reason string) error {
	if reason == "" {
		return fmt.Errorf("%w: --reason is required", ErrUsage)
	}
	host, sudo := d.args(who)
	return d.d.RejectInLedger(ctx, id, reason, host, sudo)
}

func (d dbDesk) CloseFinding(ctx context.Context, id int64, who Person, note string) (ledger.CriticalFinding, error) {
	if strings.TrimSpace(note) == "" {
		return ledger.CriticalFinding{}, fmt.Errorf("%w: a note saying what was done is required", ErrUsage)
	}
	host, vouched := d.args(who)
	return d.d.CloseFindingInLedger(ctx, id, note, host, vouched)
}

func (d goDesk) CloseFinding(ctx context.Context, id int64, who Person, note string) (ledger.CriticalFinding, error) {
	if strings.TrimSpace(note) == "" {
		return ledger.CriticalFinding{}, fmt.Errorf("%w: a note saying what was done is required", ErrUsage)
	}
	if err := who.authenticated(); err != nil {
		return ledger.CriticalFinding{}, err
	}
	return d.l.CloseFinding(ctx, id, who.Actor(), note)
}
