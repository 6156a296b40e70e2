// Package ledger is the contract of the relay's durable state ledger: one row
// per GUID recording what the relay knows about that transaction
// (docs/ledger.md). It holds the types every backend shares and the Ledger
// interface that the relay and the batch jobs use.
//
// Two backends implement it, each in its own package: ledger/sqlite (one
// file on the relay's host; the embedded default) and ledger/postgres (one
// database shared by relays on several hosts). ledger/backend picks one from
// the --db value, and ledger/ledgertest is the conformance suite that every
// backend's tests run, so the rules are proven once for both.
//
// Every write is one of docs/ledger.md's statements and is atomic on its own, so
// several processes (relays, batch jobs) may share one ledger.
package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"dedup"
)

// ErrClosed is returned by writes submitted after Close.
var ErrClosed = errors.New("ledger closed")

// ErrBusy is wrapped by a write that failed because another writer held the
// lock for longer than BusyTimeout. Nothing was written.
var ErrBusy = errors.New("ledger busy: another writer held the lock for longer than the busy timeout")

// ErrDamaged is wrapped by every write after the ledger's background check
// (Options.CheckInBackground) found the file damaged. Nothing is written.
var ErrDamaged = errors.New("the ledger file is damaged (restore it from a backup)")

// ErrNoLedger is returned by an Open with Options.Existing when there is no
// ledger to open: a SQLite file that does not exist, a PostgreSQL database
// without the ledger's tables.
var ErrNoLedger = errors.New("no ledger there")

// ErrNotCommitted is returned by a write that the database acknowledged in
// a way that does not make it a commit the relay may act on: PostgreSQL
// committed it locally but warned that it might not have reached the
// synchronous standby, or the server was no longer the primary. The caller
// must act as if it never happened (a claim sends nothing); if it did
// commit somewhere, the sweep and resolve settle the row.
var ErrNotCommitted = errors.New("write not committed as the ledger requires")

// Row is one ledger row.
type Row struct {
	GUID     string
	TxCode   string // "" if NULL
	State    dedup.State
	RspCode  string // "" if NULL
	Request  []byte // nil if NULL (rows written by other tools)
	Response []byte // nil if NULL
	Attempts int
	// UpdatedAt is updated_at as the database keeps it, in UTC: SQLite's
	// "YYYY-MM-DD HH:MM:SS", PostgreSQL's with microseconds. Resolve fences
	// on it verbatim.
	UpdatedAt string
	// Age is how long ago updated_at was, on the database's clock (never
	// the host's), truncated to whole seconds.
	Age time.Duration
}

// Outcome is what a claim's holder (or resolve) records.
type Outcome struct {
	State    dedup.State // DONE, UNKNOWN or FAILED
	RspCode  string
	Response []byte // the reply telegram for DONE; nil otherwise
	// Reclaimed: the holder's claim was a reclaim of a FAILED row, so its
	// outcome writes an "outcome" event (the first send's writes none).
	Reclaimed bool
	// Detail is the event's why: the evidence of resolve's verdict, the
	// core's answer of a reclaimed send.
	Detail string
}

// Event actions (docs/ledger.md "Events").
const (
	ActionSweep     = "sweep"     // the orphan sweep moved a SENT/RECEIVED row to UNKNOWN
	ActionReclaim   = "reclaim"   // a FAILED/E902 row reclaimed for a send (relay or reprocess)
	ActionOutcome   = "outcome"   // the outcome of a reclaimed send
	ActionResolve   = "resolve"   // resolve resolved an UNKNOWN row by inquiry
	ActionReconcile = "reconcile" // reconcile resolved an UNKNOWN or FAILED row from the core's journal
	ActionPropose   = "propose"   // an operator proposed a decision (settle propose); the row is unchanged
	ActionApprove   = "approve"   // a second operator approved it: the row changed
	ActionReject    = "reject"    // a second operator rejected it; the row is unchanged
	ActionExpire    = "expire"    // it was older than its limit when approved; the row is unchanged
	// ActionCloseFinding: a person closed a critical finding of reconcile
	// with a note saying what was done; the row is unchanged.
	ActionCloseFinding = "close_finding"
)

// ErrProposalClosed is returned by Decide when the proposal already has a
// decision (approved, rejected or expired). Nothing was written.
var ErrProposalClosed = errors.New("the proposal is no longer open")

// ErrRowChanged is returned by Decide when the row is no longer as it was
// proposed (state, attempts, updated_at). Nothing was written.
var ErrRowChanged = errors.New("the row changed since the proposal")

// Decision is a decision on a proposal, recorded by Decide in one
// transaction: the decision's event and, for an approval, the fenced
// change of the row.
type Decision struct {
	Proposal int64 // the proposal's event id
	Event    Event // the decision's event (GUID, Actor, Action, Detail, states)
	// Change, for an approval: the row as proposed (the fence: state,
	// attempts, updated_at) and what it becomes.
	From *Row
	To   Outcome
}

// ProposalRef is the prefix of a decision event's detail that names its
// proposal: a decision's detail is a JSON object whose first member is
// "proposal", so that "is this proposal still open" is one indexed query.
func ProposalRef(id int64) string { return fmt.Sprintf(`{"proposal":%d,`, id) }

// Event is one row of tx_event: one change to a tx row (or an operator's
// proposal about one), with who made it and why. Events are only ever
// appended.
type Event struct {
	ID        int64
	GUID      string
	At        string // as the database keeps it, UTC
	Actor     string // relay@HOST, resolve@HOST, ...
	Action    string
	FromState string // "" if NULL
	ToState   string // "" if NULL
	RspCode   string // "" if NULL
	Attempts  *int
	Detail    string // "" if NULL
	// Age is how long ago the event was written, on the ledger's clock
	// (EventByID and OpenProposals only).
	Age time.Duration
}

// ClaimCheck is what ConfirmClaim read.
type ClaimCheck struct {
	Held bool          // the row is SENT with the holder's attempt number
	Age  time.Duration // now minus updated_at, on the ledger's clock
	Now  time.Time     // the ledger's clock when it was read
}

// StateStat summarises the rows in one state.
type StateStat struct {
	State dedup.State
	Rows  int64
	// AtLeast reports that the count stopped at the limit Stats was given:
	// the state holds Rows rows or more.
	AtLeast bool
	Oldest  time.Duration // age of the oldest row, on the database's clock; 0 if none
}

// Ledger is an open ledger. Implementations are safe for concurrent use.
//
// Writes that report an error did not happen as far as the caller may
// assume: a claim that returns an error must not be sent (even if the
// database did commit it, the row is then resolved by the sweep and resolve,
// never sent twice). A fenced write that matches no row returns false and
// no error.
type Ledger interface {
	// Get returns the row of guid, or nil if there is none.
	Get(ctx context.Context, guid string) (*Row, error)
	// Claim claims a new GUID (none → SENT, attempts 1); claimed reports
	// whether this caller owns it. The claim is committed before it returns.
	Claim(ctx context.Context, guid, txCode string, request []byte) (claimed bool, err error)
	// Reclaim takes a FAILED/E902 row back to SENT with attempts + 1.
	// request is stored only if the row has none; maxAttempts > 0 admits
	// only rows with fewer attempts (reprocess). claimed is judged by the
	// row the statement returned; stored is the request that row holds
	// (RETURNING request): the one to send, whoever stored it.
	Reclaim(ctx context.Context, guid string, request []byte, maxAttempts int) (attempt int, stored []byte, claimed bool, err error)
	// Finish records the outcome of the holder's claim, fenced on attempt.
	Finish(ctx context.Context, guid string, attempt int, o Outcome) (recorded bool, err error)
	// Resolve records resolve's verdict on an UNKNOWN row, fenced on the
	// state, attempts and updated_at that were selected.
	Resolve(ctx context.Context, selected Row, o Outcome) (recorded bool, err error)
	// ResolveFromJournal records reconcile's verdict: an UNKNOWN or FAILED
	// row the core's journal proves applied becomes DONE/0000 with
	// o.Response, fenced on the state, attempts and updated_at that were
	// read, with a reconcile event (o.Detail) in the same transaction.
	ResolveFromJournal(ctx context.Context, selected Row, o Outcome) (recorded bool, err error)
	// GetMany returns the rows of guids that exist, in no particular
	// order: one read for a batch of GUIDs.
	GetMany(ctx context.Context, guids []string) ([]Row, error)
	// DoneSlice returns one slice of the DONE/0000 rows that may belong to
	// business date day (YYYY-MM-DD): those finished since two days before
	// it, in the state index's order, after the mark after (nil: from the
	// first), up to and including the limit-th row's updated_at (with all
	// its ties). next is nil once the last slice is read. Each slice is
	// its own short read.
	DoneSlice(ctx context.Context, day string, after *Mark, limit int) (rows []Row, next *Mark, err error)
	// AddReconcileRun keeps a completed reconciliation and its findings in
	// one transaction and returns the run's id.
	AddReconcileRun(ctx context.Context, r ReconcileRun) (int64, error)
	// ReconcileRuns lists the last limit runs, newest first, of business
	// date date (YYYYMMDD; "" for every date), without their findings.
	ReconcileRuns(ctx context.Context, date string, limit int) ([]ReconcileRun, error)
	// ReconcileFindings returns the findings kept for a run, critical first.
	ReconcileFindings(ctx context.Context, runID int64) ([]ReconcileFinding, error)
	// OpenFindings returns the open critical findings, oldest first, at
	// most limit of them, and how many are open in all.
	OpenFindings(ctx context.Context, limit int) ([]CriticalFinding, int64, error)
	// Finding returns critical finding id, open or closed (nil if none).
	Finding(ctx context.Context, id int64) (*CriticalFinding, error)
	// CloseFinding closes open critical finding id for actor, with note,
	// and records its close_finding event on the transfer, in one
	// transaction. A finding not found or closed already wraps ErrRefused,
	// and nothing is written. PostgreSQL's operators close through
	// Desk.CloseFindingInLedger instead.
	CloseFinding(ctx context.Context, id int64, actor, note string) (CriticalFinding, error)
	// SweepOrphans moves SENT/RECEIVED rows not updated for longer than
	// after to UNKNOWN/E901 and returns how many it moved.
	SweepOrphans(ctx context.Context, after time.Duration) (int64, error)
	// SelectUnknown returns resolve's candidates: UNKNOWN rows not updated
	// for at least minAge (whole seconds, so up to a second younger).
	SelectUnknown(ctx context.Context, minAge time.Duration) ([]Row, error)
	// SelectFailed returns reprocess's candidates: FAILED/E902 rows with
	// fewer than maxAttempts attempts.
	SelectFailed(ctx context.Context, maxAttempts int) ([]Row, error)
	// CountExhausted counts FAILED/E902 rows at or above maxAttempts.
	CountExhausted(ctx context.Context, maxAttempts int) (int, error)
	// CountPurgeable counts the DONE rows that PurgeBatch would delete.
	CountPurgeable(ctx context.Context, days int) (int64, error)
	// PurgeBatch deletes at most limit DONE rows not updated for days days.
	PurgeBatch(ctx context.Context, days, limit int) (int64, error)
	// SelectState lists rows in state not updated for at least olderThan,
	// oldest first, at most limit (0: no limit).
	SelectState(ctx context.Context, state dedup.State, olderThan time.Duration, limit int) ([]Row, error)
	// Stats counts the rows per state with the oldest age of each, through
	// the state index. Every state appears, with 0 rows if it has none. A
	// limit > 0 stops each state's count there (StateStat.AtLeast): the
	// read is then bounded however large the ledger grows, which is what a
	// caller that runs beside the money path (the relay's gauges, the
	// console) must pass; 0 counts every row.
	Stats(ctx context.Context, limit int64) ([]StateStat, error)
	// CountSlice counts one slice of state's rows in the state index's
	// order: the rows after the mark after (nil: from the first) up to
	// and including the limit-th one's updated_at (all of its ties, so a
	// slice may hold more). next marks where the slice ended, nil once the
	// state's last row is counted. Each slice is its own read: slices
	// summed over a pass count the state to within the rows that changed
	// meanwhile, at a cost per slice bounded by limit.
	CountSlice(ctx context.Context, state dedup.State, after *Mark, limit int) (n int64, next *Mark, err error)
	// ConfirmClaim reads whether guid's row is still the claim of the
	// holder with attempt (SENT with that attempts) and its age on the
	// ledger's clock (docs/rules.md rule 13). It writes nothing.
	ConfirmClaim(ctx context.Context, guid string, attempt int) (ClaimCheck, error)
	// Now returns the ledger's clock (docs/ledger.md "Clocks").
	Now(ctx context.Context) (time.Time, error)
	// Events returns guid's events, oldest first.
	Events(ctx context.Context, guid string) ([]Event, error)
	// EventsBetween returns the events at or after since and before until
	// (zero: no end), oldest first.
	EventsBetween(ctx context.Context, since, until time.Time) ([]Event, error)
	// PurgeEvents deletes at most limit events older than days days.
	PurgeEvents(ctx context.Context, days, limit int) (int64, error)
	// AddEvent appends an event that changes no row (a proposal) and
	// returns its id.
	AddEvent(ctx context.Context, e Event) (int64, error)
	// EventByID returns one event, with its age on the ledger's clock, or
	// nil if there is none.
	EventByID(ctx context.Context, id int64) (*Event, error)
	// OpenProposals lists the proposals that have no decision yet, oldest
	// first, with their ages.
	OpenProposals(ctx context.Context) ([]Event, error)
	// Decide records d in one transaction if its proposal is still open
	// (else ErrProposalClosed) and, for an approval, the row is still as
	// proposed (else ErrRowChanged); either way nothing is written then.
	Decide(ctx context.Context, d Decision) error
	// Close releases the ledger. Writes after Close fail with ErrClosed.
	Close() error
}

// Mark is where a CountSlice ended: the backend's own updated_at value,
// handed back as it was read, so that no host formats a time.
type Mark struct{ UpdatedAt any }

// States lists every ledger state in a fixed order, for summaries.
var States = []dedup.State{dedup.StateReceived, dedup.StateSent, dedup.StateDone, dedup.StateUnknown, dedup.StateFailed}

// AllStates returns one StateStat per state of States, in that order,
// taking each from got (a backend's GROUP BY result) or zero if absent.
func AllStates(got map[dedup.State]StateStat) []StateStat {
	out := make([]StateStat, 0, len(States))
	for _, st := range States {
		s := got[st]
		s.State = st
		out = append(out, s)
	}
	return out
}

// Checker is a ledger that can check its whole file's structure (SQLite:
// PRAGMA quick_check): what `inspect --check` runs from the daily timer.
// It reads everything, so no binary runs it when it opens a ledger.
type Checker interface {
	Check(ctx context.Context) error
}

// Why a PostgreSQL write was judged not a commit (Options.OnNotCommitted).
const (
	// NotCommittedNotPrimary: the session's server was no longer the
	// primary (a failover or switchover); the pool was emptied.
	NotCommittedNotPrimary = "not_primary"
	// NotCommittedWarning: the primary warned during the commit (it
	// committed locally without its synchronous standby).
	NotCommittedWarning = "commit_warning"
)

// Options configure a backend's Open.
type Options struct {
	// Synchronous is "full" (default) or "normal". SQLite: its synchronous
	// setting (NORMAL survives a crash of the process but may lose the last
	// commits on a power cut). PostgreSQL: "normal" also accepts a session
	// whose synchronous_commit is off or local, which is otherwise refused.
	Synchronous string
	// MaxBatch bounds the writes per commit (group commit, both
	// backends); 0 means the default, 1 disables group commit.
	MaxBatch int
	// Conns bounds the connection pool (SQLite: the read pool;
	// PostgreSQL: every connection); 0 means the backend's default.
	Conns int
	// Faults injects commit failures; tests only (nil in every binary).
	Faults *Faults
	// OnCommit, if set, is told of every commit that succeeded: how long
	// it took and how many writes it carried (a group commit counts once).
	OnCommit func(d time.Duration, writes int)
	// OnNotCommitted, if set, is told why a write on a shared ledger was
	// judged not a commit (NotCommittedNotPrimary, NotCommittedWarning):
	// what a failover does to writes, for the HA dashboard.
	OnNotCommitted func(reason string)
	// Warn, if set, is told of something an operator should fix that does
	// not stop the ledger from opening (a ledger file others can read).
	Warn func(msg string, args ...any)
	// CheckInBackground, if set, makes the SQLite ledger scrub itself in
	// the background (the relay): every table row and index entry read,
	// slice by slice on fresh snapshots, under 5 % of one core, so that a
	// restart serves at full speed at once and no snapshot holds back a
	// checkpoint. Open itself reads only the header, the journal mode and
	// the schema, whatever the ledger's size (a job's open costs nothing
	// that grows with the ledger); the whole-file quick_check is Checker's,
	// run by `inspect --check`. It is told the scrub's result once. If the
	// file is damaged, every later write fails with ErrDamaged. PostgreSQL
	// ignores it (the server checks its own pages).
	CheckInBackground func(took time.Duration, err error)
	// WarmAtOpen, if set, makes the SQLite ledger read into the page
	// cache, before it opens the file, the leaves of tx's GUID index that
	// the latest rows' GUIDs fall on (at most 128 MiB, for at most 1 s), so
	// that a restart with a cold cache (after a reboot) does not read them
	// one by one inside the write lock while it serves. It is told what
	// was read; an error means the warming stopped (the file is opened and
	// checked as always). On PostgreSQL it opens the pool's connections
	// before Open returns (its buffers are the server's and are not
	// warmed): a relay's first claims would otherwise each wait for a new
	// server process, all at once, in its first tenth of a second.
	WarmAtOpen func(r WarmReport, err error)
	// Existing refuses, with ErrNoLedger, a ledger that does not exist yet
	// instead of creating it: the binaries that only read or prove a
	// ledger (reconcile, inspect, settle, console) must never prove or
	// show an empty one that a mistyped --db made.
	Existing bool
	// Actor names who writes the events of this handle's changes:
	// "relay@HOST", "resolve@HOST"; Actor(name) makes it.
	Actor string
}

// WarmReport is what Options.WarmAtOpen read.
type WarmReport struct {
	Pages  int           // pages read from the file: the table's last rows', the GUID index's
	Leaves int           // leaves of the GUID index now in the cache: read, or found there
	Conns  int           // PostgreSQL: the pool's connections open when it ended
	Took   time.Duration // from the start of the warming to its end
}

// Faults lets a test make commits fail, to prove that no caller acts on a
// write that did not (or may not) have happened.
type Faults struct {
	// BeforeCommit, if it returns an error, makes the commit fail: the
	// writes are rolled back and every caller gets the error.
	BeforeCommit func() error
	// AfterCommit, if it returns an error, reports a commit that did
	// happen as failed: an acknowledgement lost on the way (an ambiguous
	// commit).
	AfterCommit func() error
}

// Before runs BeforeCommit, if any (a nil Faults injects nothing).
func (f *Faults) Before() error {
	if f == nil || f.BeforeCommit == nil {
		return nil
	}
	if err := f.BeforeCommit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// After runs AfterCommit, if any (a nil Faults injects nothing).
func (f *Faults) After() error {
	if f == nil || f.AfterCommit == nil {
		return nil
	}
	if err := f.AfterCommit(); err != nil {
		return fmt.Errorf("commit acknowledgement: %w", err)
	}
	return nil
}

// Actor returns the actor name of a binary on this host: name@HOST.
func Actor(name string) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown-host"
	}
	return name + "@" + h
}

// ActorOf returns opts' actor, or "unknown" if none was set (tests).
func ActorOf(opts Options) string {
	if opts.Actor == "" {
		return "unknown"
	}
	return opts.Actor
}

// ErrRefused is wrapped by a decision that the ledger refuses for what it
// holds: the row's state, a closed or expired proposal, the same person.
var ErrRefused = errors.New("refused")

// ErrUsage is wrapped by a decision refused for what was given (a missing
// reason, fields that do not fit the reply).
var ErrUsage = errors.New("usage")

// Proposed is what an operator proposes about one GUID (settle.md).
type Proposed struct {
	GUID, As, Reason string
	// For "applied": the core's reference, the balance after the
	// transfer, and when the core processed it (YYYYMMDDhhmmss).
	CoreRef     string
	Balance     *int64
	ProcessedAt string
}

// Vouched is a person that the calling binary authenticated itself and
// names to the database: the account sudo authenticated for "sudo -u dedup
// settle ..." (Auth "sudo", with its uid), or the certificate the console
// verified (Auth "cert", with its serial number). The database takes it
// only from a session of the schema's owner (docs/security.md).
type Vouched struct {
	Auth   string `json:"auth"`
	Name   string `json:"name"`
	UID    int    `json:"uid,omitempty"`
	Serial string `json:"serial,omitempty"`
}

// Decided is what a decision through a Desk did.
type Decided struct {
	Expired bool // the proposal was past its age: recorded as expired, the row unchanged
	GUID    string
	State   dedup.State
	RspCode string
}

// Desk is implemented by a backend that keeps settle's four-eyes rule
// inside the database (PostgreSQL: the SECURITY DEFINER functions of
// schema_postgres.sql), so that it binds every client, psql included. The
// person is the database's own: session_user, or, only when the session is
// the schema's owner, the one its binary vouches for (nil: none). host
// labels the actor.
// Refusals wrap ErrRefused or ErrUsage; nothing is written then but an
// expiry.
type Desk interface {
	ProposeInLedger(ctx context.Context, p Proposed, host string, vouched *Vouched) (id int64, err error)
	ApproveInLedger(ctx context.Context, id int64, reason, host string, vouched *Vouched) (Decided, error)
	RejectInLedger(ctx context.Context, id int64, reason, host string, vouched *Vouched) error
	// CloseFindingInLedger closes a critical finding through
	// dedup_close_finding: one person suffices, whom the database names.
	CloseFindingInLedger(ctx context.Context, id int64, note, host string, vouched *Vouched) (CriticalFinding, error)
}

// ReconcileRun is one completed reconciliation of a business date against
// the core's journal (docs/reconcile.md).
type ReconcileRun struct {
	ID     int64
	Date   string // the business date, YYYYMMDD
	At     string // when it was kept, UTC, as the database keeps it
	Actor  string // reconcile@HOST
	Source string // the journal's file, or the core's URL
	Lines  int64  // the journal's lines
	Amount int64  // the sum of the journal's amounts: the control total
	// Counts is the number of GUIDs of each class (dedup.Findings).
	Counts map[dedup.Finding]int64
	// Findings are the findings kept for a person (every class but
	// matched and not_in_ledger), at most MaxKeptFindings of them.
	Findings []ReconcileFinding
}

// MaxKeptFindings bounds the findings kept in the ledger per run, so that
// a run against the wrong day's journal cannot hold the write lock for
// long; the counts are always whole, and reconcile's output lists every
// finding.
const MaxKeptFindings = 10000

// CriticalFinding is a critical finding across reconcile's runs
// (docs/reconcile.md "Open findings"): one per GUID and class, opened by
// the first run that finds it, counted again by every later run that finds
// it, and open until a person closes it with a note. A later run that no
// longer sees it does not close it: the incident behind it is still there.
type CriticalFinding struct {
	ID    int64
	GUID  string
	Class dedup.Finding
	// Date is the business date (YYYYMMDD) of the run that opened it.
	Date string
	// FirstRun and LastRun are the first and the last run that found it;
	// Runs counts the runs that found it.
	FirstRun, LastRun, Runs int64
	Amount                  int64
	OpenedAt                string        // UTC, as the database keeps it
	Age                     time.Duration // since it was opened, on the ledger's clock
	// ClosedAt, ClosedBy (the person, as events name them) and Note are
	// empty while it is open.
	ClosedAt, ClosedBy, Note string
}

// Open reports whether nobody has closed f yet.
func (f CriticalFinding) Open() bool { return f.ClosedAt == "" }

// FindingClosedDetail is a close_finding event's detail: the finding's
// id, class and the person's note, as JSON.
func FindingClosedDetail(f CriticalFinding, note string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as PostgreSQL's to_json writes the note
	enc.Encode(struct {
		Finding int64  `json:"finding"`
		Class   string `json:"class"`
		Note    string `json:"note"`
	}{f.ID, string(f.Class), note})
	return strings.TrimSuffix(b.String(), "\n")
}

// ReconcileFinding is one GUID's finding in a run.
type ReconcileFinding struct {
	Class  dedup.Finding
	GUID   string
	State  string   // the row's state when judged ("" if none)
	Code   string   // the row's rsp_code ("" if none)
	Refs   []string // the journal's refs for the GUID, in the journal's order
	Amount int64
	// Resolved reports that reconcile turned the row DONE/0000.
	Resolved bool
}
