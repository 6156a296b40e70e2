package ledger

import (
	"testing"
	"time"
)

// The bounds keep a lease plus the exchange below the sweep: a claim whose
// holder wrote its request within the lease has had its whole exchange
// before the sweep may move its row (docs/rules.md rule 13).
func TestBoundsKeepTheLeaseAndExchangeBelowTheSweep(t *testing.T) {
	for _, c := range []struct {
		name             string
		b                Bounds
		lease, leastSwep time.Duration
		ok               bool
	}{
		{"defaults", Bounds{ConnectTimeout: time.Second, Timeout: 3 * time.Second, OrphanAfter: 60 * time.Second}, 7 * time.Second, 11 * time.Second, true},
		{"orphan-after at the least", Bounds{ConnectTimeout: time.Second, Timeout: time.Second, OrphanAfter: 9 * time.Second}, 7 * time.Second, 9 * time.Second, true},
		{"orphan-after a second short", Bounds{ConnectTimeout: time.Second, Timeout: time.Second, OrphanAfter: 8 * time.Second}, 7 * time.Second, 9 * time.Second, false},
		{"long timeouts", Bounds{ConnectTimeout: 5 * time.Second, Timeout: 30 * time.Second, OrphanAfter: 40 * time.Second}, 11 * time.Second, 42 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.b.Lease(); got != c.lease {
				t.Errorf("Lease() = %v, want %v", got, c.lease)
			}
			if got := c.b.LeastOrphanAfter(); got != c.leastSwep {
				t.Errorf("LeastOrphanAfter() = %v, want %v", got, c.leastSwep)
			}
			if c.b.Lease()+c.b.Timeout >= c.b.LeastOrphanAfter() {
				t.Errorf("lease %v + timeout %v reaches the least orphan-after %v", c.b.Lease(), c.b.Timeout, c.b.LeastOrphanAfter())
			}
			if err := c.b.Check(); (err == nil) != c.ok {
				t.Errorf("Check() = %v, want ok=%v", err, c.ok)
			}
		})
	}
}
