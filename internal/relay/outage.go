package relay

import (
	"sync"

	"dedup/internal/coreapi"
)

// DefaultOutageAfter is how many consecutive sends without a connection
// make the core count as down.
const DefaultOutageAfter = 3

// outage remembers whether the core counts as down, so that a channel's
// retransmission of a FAILED/E902 row burns no attempt on a send that cannot
// happen (an outage would otherwise push rows past reprocess
// --max-attempts), and so that the core's return is used at once.
//
// While the core is reachable as far as the relay knows, such a
// retransmission is reclaimed and sent at once, as the relay always did before the core went down.
// After `after` consecutive sends (of any GUIDs) that obtained no
// connection, the core is down: a retransmission is reclaimed only once a
// connection to the core has been obtained for it (Core.Reach). The first
// connection obtained, by any send or any such check, ends the outage.
// There is no pause and no probe request: nothing but claimed transfers is
// ever sent to the core, and nothing is held back once it accepts
// connections again.
type outage struct {
	after int

	mu       sync.Mutex
	failures int // consecutive sends without a connection
}

func newOutage(after int) *outage {
	if after <= 0 {
		after = DefaultOutageAfter
	}
	return &outage{after: after}
}

// down reports whether the core counts as down.
func (o *outage) down() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failures >= o.after
}

// reached ends an outage: a connection to the core was obtained.
func (o *outage) reached() {
	o.mu.Lock()
	o.failures = 0
	o.mu.Unlock()
}

// record learns from one send.
func (o *outage) record(r coreapi.Result) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case r.LeaseExpired:
		// Nothing was attempted: says nothing about the core.
	case r.NoConnection:
		o.failures++
	default:
		o.failures = 0
	}
}
