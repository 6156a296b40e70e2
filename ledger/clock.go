package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The clock rules of docs/ledger.md "Clocks": every age decision (the
// orphan sweep, resolve's --min-age, purge's --days, the lease check on a
// shared ledger) is taken on the ledger's clock, and none is taken while
// that clock and the host's differ by more than --max-clock-skew. A server
// whose clock runs ahead makes every row look older than it is: resolve
// would settle a young UNKNOWN row on "not found", reprocess would send it
// again, the first copy would land.

// DefaultMaxClockSkew is the default of --max-clock-skew.
const DefaultMaxClockSkew = 5 * time.Second

// ErrClockSkew is wrapped by the error of an age decision refused because
// the ledger's clock and the host's disagree.
var ErrClockSkew = errors.New("the ledger's clock and this host's disagree")

// ClockReading is one comparison of the ledger's clock with the host's.
type ClockReading struct {
	Ledger time.Time     // the ledger's clock
	Host   time.Time     // the host's wall clock at the midpoint of the read
	Skew   time.Duration // Ledger - Host: positive when the ledger's clock is ahead
}

// ReadClock compares ledgerNow, read from the ledger between the host's
// wall-clock readings before and after, with the host's clock at their
// midpoint.
func ReadClock(before, after, ledgerNow time.Time) ClockReading {
	before, after = before.Round(0), after.Round(0) // wall clock only
	mid := before.Add(after.Sub(before) / 2)
	return ClockReading{Ledger: ledgerNow, Host: mid, Skew: ledgerNow.Sub(mid)}
}

// Clocked is a ledger that can tell its clock.
type Clocked interface {
	// Now returns the ledger's clock (PostgreSQL's clock_timestamp(),
	// SQLite's julianday('now')).
	Now(ctx context.Context) (time.Time, error)
}

// MeasureClock reads l's clock against the host's.
func MeasureClock(ctx context.Context, l Clocked) (ClockReading, error) {
	before := time.Now()
	now, err := l.Now(ctx)
	after := time.Now()
	if err != nil {
		return ClockReading{}, fmt.Errorf("read the ledger's clock: %w", err)
	}
	return ReadClock(before, after, now), nil
}

// Check returns an error wrapping ErrClockSkew, naming both clocks and
// their difference, if r's skew exceeds max in either direction.
func (r ClockReading) Check(max time.Duration) error {
	if r.Skew <= max && -r.Skew <= max {
		return nil
	}
	return fmt.Errorf("%w: ledger %s, host %s, difference %+.3fs exceeds --max-clock-skew %gs: nothing is decided by age",
		ErrClockSkew, r.Ledger.UTC().Format("2006-01-02T15:04:05.000Z"), r.Host.UTC().Format("2006-01-02T15:04:05.000Z"),
		r.Skew.Seconds(), max.Seconds())
}

// CheckClock measures l's clock and checks it against max: nil means that
// ages may be judged now.
func CheckClock(ctx context.Context, l Clocked, max time.Duration) (ClockReading, error) {
	r, err := MeasureClock(ctx, l)
	if err != nil {
		return r, err
	}
	return r, r.Check(max)
}

// StepDetector notices steps of the host's wall clock: it compares how far
// the wall clock and the monotonic clock moved between two observations. A
// forward step makes young rows look old on a single host (docs/rules.md,
// operating assumptions); a paused VM's monotonic clock stands still while
// its wall clock is set forward on resume, which shows as a step too.
type StepDetector struct {
	Threshold time.Duration // a difference above it is a step (0: one second)
	seen      bool
	wall      time.Time
	mono      time.Duration
}

// Observe records one observation: wall, the wall clock, and mono, a
// monotonic reading (time.Since a fixed start). It returns the step since
// the last observation (wall moved minus monotonic moved) and whether it
// exceeds the threshold.
func (d *StepDetector) Observe(wall time.Time, mono time.Duration) (time.Duration, bool) {
	wall = wall.Round(0)
	defer func() { d.seen, d.wall, d.mono = true, wall, mono }()
	if !d.seen {
		return 0, false
	}
	step := wall.Sub(d.wall) - (mono - d.mono)
	th := d.Threshold
	if th <= 0 {
		th = time.Second
	}
	return step, step > th || -step > th
}
