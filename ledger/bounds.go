package ledger

import (
	"fmt"
	"time"
)

// The timing bounds of the relay and its jobs live here, each with the
// reason for its value, and Bounds is the one place that derives the
// bounds that depend on the flags (docs/rules.md rules 12 and 13).

// BusyTimeout bounds how long one ledger statement waits for another
// writer's lock (SQLite's busy timeout, PostgreSQL's lock_timeout and
// statement_timeout). The relay's --orphan-after bound assumes it.
const BusyTimeout = 5 * time.Second

// StatementBound limits one ledger operation on a backend whose statements
// can wait for a connection or a server that does not answer (PostgreSQL):
// the busy timeout and a second, so that a claim's holder still ends within
// the bound --orphan-after assumes.
const StatementBound = BusyTimeout + time.Second

// PurgeHold bounds how long one purge batch holds SQLite's write lock: a
// claim queued behind a batch waits at most about this long (ledger.md
// allows "about 100 ms"). A batch of a given count takes ten times longer
// on a ledger of 10 million rows than on a small one (its GUID index pages
// cold and far apart), so a batch is bounded by time, not by a count
// (docs/benchmarks.md, "Figures the code's choices rest on").
const PurgeHold = 20 * time.Millisecond

// Bounds are the flags a claim's holder lives by, and what follows from
// them. Every binary that holds claims (relay, reprocess) computes its
// lease, and the relay its least --orphan-after and shutdown bound, here.
type Bounds struct {
	ConnectTimeout time.Duration // --connect-timeout: to obtain a connection to the core
	Timeout        time.Duration // --timeout: the whole exchange once connected
	OrphanAfter    time.Duration // --orphan-after: when the sweep may take a claim (relay only)
}

// Lease is how long after asking for its claim a holder may still write its
// request to the core: the longest a healthy holder can take from asking
// for the claim to writing the request (the ledger's busy timeout, then the
// connect timeout), plus a second. A holder that has not written its
// request by then was frozen or stalled, and must not write it at all.
// Lease plus Timeout stays a second below LeastOrphanAfter, so a request
// written within the lease has had its whole exchange before the sweep can
// move its row.
func (b Bounds) Lease() time.Duration {
	return BusyTimeout + b.ConnectTimeout + time.Second
}

// LeastOrphanAfter is the smallest --orphan-after that keeps the sweep off
// every claim a healthy holder still has: connect timeout + timeout + the
// busy timeout + 2 s for whole-second timestamps.
func (b Bounds) LeastOrphanAfter() time.Duration {
	return b.ConnectTimeout + b.Timeout + BusyTimeout + 2*time.Second
}

// InFlight bounds one transaction already under way: its claim or outcome
// write, its connection and its exchange, and a second. A relay that stops
// waits this long for the transactions in flight.
func (b Bounds) InFlight() time.Duration {
	return b.ConnectTimeout + b.Timeout + BusyTimeout + time.Second
}

// Check reports an --orphan-after below LeastOrphanAfter, in the flags'
// words.
func (b Bounds) Check() error {
	if least := b.LeastOrphanAfter(); b.OrphanAfter < least {
		return fmt.Errorf("--orphan-after must be at least --connect-timeout + --timeout + %g = %gs",
			(BusyTimeout + 2*time.Second).Seconds(), least.Seconds())
	}
	return nil
}
