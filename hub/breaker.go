package hub

import (
	"sync"
	"time"

	"dedup/coreapi"
)

// Breaker defaults.
const (
	DefaultBreakerAfter = 3
	DefaultBreakerPause = 2 * time.Second
)

// breaker remembers that the core refuses connections, so that during an
// outage a channel's retransmission of a FAILED/E902 row is answered E902
// without being reclaimed: every reclaim costs an attempt, and a row that
// burnt its attempts on sends that could not happen would be beyond
// reprocess --max-attempts when the core returns.
//
// Closed: every reclaim may go. After `after` consecutive sends that
// obtained no connection it opens: no reclaim for `pause`; then one probe
// reclaim may go (half-open). A probe that connects closes it; one that
// does not reopens it for another pause. New GUIDs are never held back:
// their claims and sends go on and keep the breaker informed.
type breaker struct {
	after int
	pause time.Duration

	mu       sync.Mutex
	failures int       // consecutive sends without a connection
	openedAt time.Time // when it last opened (zero: closed)
	probing  bool      // a half-open probe is under way
}

func newBreaker(after int, pause time.Duration) *breaker {
	if after <= 0 {
		after = DefaultBreakerAfter
	}
	if pause <= 0 {
		pause = DefaultBreakerPause
	}
	return &breaker{after: after, pause: pause}
}

// allow reports whether a reclaim may go now. A true answer while open
// makes the caller the half-open probe: it must end with record or abandon.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openedAt.IsZero() {
		return true
	}
	if b.probing || time.Since(b.openedAt) < b.pause {
		return false
	}
	b.probing = true
	return true
}

// abandon ends a probe that sent nothing (the reclaim failed or was lost).
func (b *breaker) abandon() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// record learns from one send.
func (b *breaker) record(r coreapi.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	switch {
	case r.NoConnection:
		b.failures++
		if b.failures >= b.after {
			b.openedAt = time.Now()
		}
	case r.LeaseExpired:
		// Says nothing about the core.
	default:
		b.failures, b.openedAt = 0, time.Time{}
	}
}
