package relay

import (
	"log/slog"
	"sync"
	"time"

	"dedup/internal/metrics"
	"dedup/ledger"
)

// ClockLogEvery bounds how often the relay says that the clocks disagree.
const ClockLogEvery = time.Minute

// clockWatch applies docs/ledger.md "Clocks" for the relay: it exports the
// difference between the ledger's clock and the host's, refuses age
// decisions while it exceeds max (logging that at most once a minute), and
// notices steps of the host's own wall clock.
type clockWatch struct {
	max     time.Duration
	log     *slog.Logger
	metrics *metrics.Relay
	start   time.Time // the monotonic origin of the step detector

	mu      sync.Mutex
	steps   ledger.StepDetector
	lastLog time.Time
	skewed  bool
}

// ageDecisionsAllowed records the reading r and reports whether ages may
// be judged now; what names the decision (metrics.AgeDecision*).
func (c *clockWatch) ageDecisionsAllowed(r ledger.ClockReading, what string) bool {
	err := r.Check(c.max)
	c.metrics.ClockSkew(r.Skew)
	c.mu.Lock()
	was := c.skewed
	c.skewed = err != nil
	say := err != nil && (c.lastLog.IsZero() || time.Since(c.lastLog) >= ClockLogEvery)
	if say {
		c.lastLog = time.Now()
	}
	c.mu.Unlock()
	if err != nil {
		c.metrics.AgeDecisionSkipped(what)
		if say {
			c.log.Error("the ledger's clock and this host's disagree: no orphan is swept and no lease is judged by age until they agree; claims and retransmissions are still served",
				"ledger_clock", r.Ledger.UTC().Format(time.RFC3339Nano), "host_clock", r.Host.UTC().Format(time.RFC3339Nano),
				"skew_s", r.Skew.Seconds(), "max_clock_skew_s", c.max.Seconds())
		}
		return false
	}
	if was {
		c.log.Info("the ledger's clock and this host's agree again: age decisions resume", "skew_s", r.Skew.Seconds())
	}
	return true
}

// leaseChecked is the holder's report of a confirmation's clock reading.
func (c *clockWatch) leaseChecked(r ledger.ClockReading, skipped bool) {
	if skipped {
		c.ageDecisionsAllowed(r, metrics.AgeDecisionLease)
		return
	}
	c.metrics.ClockSkew(r.Skew)
}

// observeWall feeds the step detector with the wall clock now and the
// monotonic time since start; a step is counted and logged.
func (c *clockWatch) observeWall(now time.Time) {
	c.mu.Lock()
	step, stepped := c.steps.Observe(now, now.Sub(c.start))
	c.mu.Unlock()
	if stepped {
		c.metrics.ClockStep()
		c.log.Warn("this host's wall clock stepped (or the process was paused): clocks must be slewed, never stepped (chrony); a forward step makes young rows look old",
			"step_s", step.Seconds())
	}
}
