// Package dedup is the domain of the dedup relay and nothing else: the
// states of a ledger row and the response codes a channel can receive, with
// what they mean (docs/rules.md).
//
// The relay stands between a bank's channels and its non-idempotent core
// banking system and makes sure that a transfer retransmitted with the same
// GUID reaches the core at most once, unless the relay knows for certain that
// the earlier send never arrived.
//
// The repository's top holds what users run (one folder per binary, each a
// thin main), this domain package, lhstd (the telegram) and ledger (the
// state ledger's contract, with ledger/sqlite and ledger/postgres behind
// it and one conformance suite, ledger/ledgertest). Everything else is
// machinery under internal/: a binary's logic is in the internal package
// of its name (relay/ runs internal/relay, settle/ runs internal/settle),
// and the test and benchmark tools are apart, under internal/testbed and
// internal/bench. docs/architecture.md draws the rooms and one transfer's
// path through them.
package dedup

import _ "embed"

// Schema is the SQLite ledger's DDL, schema.sql, and SchemaPostgres the
// PostgreSQL ledger's, schema_postgres.sql: the same tables, columns (in
// the same order, so that positional inserts by other tools work on both)
// and indexes, side by side at the repository's top so that operators find
// them. They are embedded here only because go:embed cannot reach a parent
// directory; ledger/sqlite and ledger/postgres apply them on every open,
// so every statement in them is idempotent.
//
//go:embed schema.sql
var Schema string

// SchemaPostgres is schema_postgres.sql (see Schema).
//
//go:embed schema_postgres.sql
var SchemaPostgres string

// State is the state of a ledger row (docs/rules.md "The five states").
type State string

// The five ledger states.
const (
	// StateReceived: accepted but not yet sent. This project never writes it,
	// but treats it exactly like StateSent.
	StateReceived State = "RECEIVED"
	// StateSent: claimed, the core call is under way.
	StateSent State = "SENT"
	// StateDone: a definite answer exists (0000, B2xx, E500).
	StateDone State = "DONE"
	// StateUnknown: sent, but no definite answer came (E901). Resolved only by
	// inquiry, never resent.
	StateUnknown State = "UNKNOWN"
	// StateFailed: surely not delivered (E902). May be sent again.
	StateFailed State = "FAILED"
)

// Response codes (docs/telegram.md "Response codes").
const (
	CodeOK         = "0000" // applied by the core
	CodeCoreFailed = "E500" // the core answered HTTP 500: its own definite failure
	CodeMalformed  = "E900" // malformed request; nothing recorded
	CodeUnknown    = "E901" // result unknown; resolved later by inquiry
	CodeNotSent    = "E902" // not sent; may be sent again under the same GUID
	CodeInProgress = "E903" // this GUID is being processed now
	CodeGUIDReused = "E904" // the GUID belongs to a different request
	CodeCancelled  = "E905" // not applied: cancelled by the bank (settle), final; never retried under this GUID
)

// IsBusinessReject reports whether code is a core rejection for a business
// reason: B2 followed by two digits.
func IsBusinessReject(code string) bool {
	return len(code) == 4 && code[0] == 'B' && code[1] == '2' &&
		code[2] >= '0' && code[2] <= '9' && code[3] >= '0' && code[3] <= '9'
}

// CodeMeaning is a short human description of a response code, for the
// channel simulator and the logs.
func CodeMeaning(code string) string {
	switch code {
	case CodeOK:
		return "applied by the core"
	case "B201":
		return "rejected: insufficient funds"
	case "B202":
		return "rejected: no such account"
	case "B203":
		return "rejected: invalid amount"
	case "B204":
		return "rejected: same debit and credit account"
	case CodeCoreFailed:
		return "the core failed (HTTP 500); not applied"
	case CodeMalformed:
		return "malformed request"
	case CodeUnknown:
		return "result unknown; will be resolved by inquiry; ask again with the same GUID"
	case CodeNotSent:
		return "not sent; may be sent again under the same GUID"
	case CodeInProgress:
		return "in progress; ask again later with the same GUID"
	case CodeGUIDReused:
		return "GUID already used for a different request"
	case CodeCancelled:
		return "not applied: cancelled by the bank; final, never retried under this GUID"
	}
	if IsBusinessReject(code) {
		return "rejected by the core for a business reason"
	}
	return "unknown code"
}

// Finding is the class of one GUID in a day's reconciliation against the
// core's journal (docs/reconcile.md): the first of the classes, in
// Findings' order, that applies to it.
type Finding string

// The classes of a reconciliation finding, in the order they are judged
// and counted.
const (
	// FindingAppliedTwice: the core applied the GUID two or more times (two
	// journal lines, or a line whose ref is not the row's).
	FindingAppliedTwice Finding = "applied_twice"
	// FindingMismatch: one line whose from, to or amount differ from the
	// row's stored request.
	FindingMismatch Finding = "mismatch"
	// FindingAppliedButFailed: one line, and the row is FAILED: rule 3 was
	// broken somewhere, and a resend would debit again.
	FindingAppliedButFailed Finding = "applied_but_failed"
	// FindingResolved: one line, and the row was UNKNOWN: resolved from the
	// journal.
	FindingResolved Finding = "resolved"
	// FindingAppliedInFlight: one line, and the row is SENT or RECEIVED.
	FindingAppliedInFlight Finding = "applied_in_flight"
	// FindingAppliedToldFailure: one line, and the row is DONE with a code
	// other than 0000: the channel was told it failed, and money moved.
	FindingAppliedToldFailure Finding = "applied_told_failure"
	// FindingToldSuccessUnapplied: a DONE/0000 row of the day with no
	// journal line: the channel was told it succeeded, and no money moved.
	FindingToldSuccessUnapplied Finding = "told_success_unapplied"
	// FindingNotInLedger: a journal line whose GUID has no row.
	FindingNotInLedger Finding = "not_in_ledger"
	// FindingMatched: one line, and a DONE/0000 row with the same ref,
	// accounts and amount.
	FindingMatched Finding = "matched"
)

// Findings lists every class in the order of reconcile's summary line.
var Findings = []Finding{FindingMatched, FindingResolved, FindingAppliedButFailed, FindingAppliedInFlight,
	FindingAppliedTwice, FindingMismatch, FindingAppliedToldFailure, FindingToldSuccessUnapplied, FindingNotInLedger}

// Critical reports whether a finding needs a person: money moved twice, or
// moved while the channel was told otherwise, or did not move while it was
// told it did.
func (f Finding) Critical() bool {
	switch f {
	case FindingAppliedTwice, FindingMismatch, FindingAppliedButFailed, FindingAppliedToldFailure, FindingToldSuccessUnapplied:
		return true
	}
	return false
}

// findingWords are the classes in a person's words (docs/reconcile.md),
// and what a person does about a finding of each: the console, inspect and
// the alert's annotation say the same (a test holds them together).
var findingWords = map[Finding]struct{ words, action string }{
	FindingAppliedTwice: {"Applied twice",
		"Ask the core team to reverse the second application, find how it was sent twice (the GUID's events, the relay's log), and close the finding with the reversal's reference."},
	FindingMismatch: {"Applied, not as requested",
		"Compare the stored request with the core's record, escalate to the core team and security, and close the finding with their conclusion."},
	FindingAppliedButFailed: {"Applied, ledger had it failed",
		"Nothing to change (the row is now DONE/0000): find why it was FAILED (rule 3 broken by a network element, a person or a defect), and close the finding with the cause."},
	FindingAppliedToldFailure: {"Applied, channel told failed",
		"Have the channel tell the customer the money moved (and look for a retry under a new GUID), and close the finding with the channel's reference."},
	FindingToldSuccessUnapplied: {"Told success, never applied",
		"Confirm with the core team that it was applied on no date, have the channel correct what the customer was told (or the core apply it), and close the finding with that reference."},
	FindingResolved:        {"Resolved from the journal", "Nothing: resolve would have done the same."},
	FindingAppliedInFlight: {"Applied, still in flight", "Nothing: the orphan sweep and resolve finish it."},
	FindingNotInLedger:     {"Not in the ledger", "Nothing for a few (another path to the core, a purged row); many for dedup's own channels mean the relay is bypassed."},
	FindingMatched:         {"Matched", "Nothing."},
}

// Words is the class in a person's words.
func (f Finding) Words() string {
	if w, ok := findingWords[f]; ok {
		return w.words
	}
	return string(f)
}

// Action is the one thing a person does about a finding of the class.
func (f Finding) Action() string { return findingWords[f].action }
