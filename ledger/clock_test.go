package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A step of the wall clock against the monotonic clock, in either
// direction, is a step past one second; a wall clock that moves with the
// monotonic one (slewed, even by a few milliseconds) is not. A paused
// VM's monotonic clock stands still while its wall clock is set forward.
func TestStepDetectorWithInjectedClocks(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		wall       time.Duration // how far the wall clock moved
		mono       time.Duration // how far the monotonic clock moved
		wantStep   bool
		wantAmount time.Duration
	}{
		{"in step", 10 * time.Second, 10 * time.Second, false, 0},
		{"slewed", 10*time.Second + 5*time.Millisecond, 10 * time.Second, false, 5 * time.Millisecond},
		{"forward step", 10*time.Minute + 10*time.Second, 10 * time.Second, true, 10 * time.Minute},
		{"backward step", 10*time.Second - 3*time.Second, 10 * time.Second, true, -3 * time.Second},
		{"paused VM", 40 * time.Second, 0, true, 40 * time.Second},
	} {
		var d StepDetector
		if _, stepped := d.Observe(t0, time.Hour); stepped {
			t.Fatalf("%s: the first observation reported a step", tc.name)
		}
		step, stepped := d.Observe(t0.Add(tc.wall), time.Hour+tc.mono)
		if stepped != tc.wantStep || step != tc.wantAmount {
			t.Errorf("%s: got step %v (%v), want %v (%v)", tc.name, step, stepped, tc.wantAmount, tc.wantStep)
		}
	}
}

// The host's clock is taken at the midpoint of the read, and the check
// names both clocks and the difference, in both directions.
func TestClockReadingAndCheck(t *testing.T) {
	before := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	after := before.Add(20 * time.Millisecond)
	r := ReadClock(before, after, before.Add(10*time.Millisecond+600*time.Second))
	if r.Skew != 600*time.Second {
		t.Fatalf("skew %v, want 600s", r.Skew)
	}
	err := r.Check(5 * time.Second)
	if !errors.Is(err, ErrClockSkew) {
		t.Fatalf("a ledger clock 600 s ahead passed the check: %v", err)
	}
	for _, want := range []string{"ledger 2026-12-01T09:10:00.010Z", "host 2026-12-01T09:00:00.010Z", "+600.000s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not name %q", err, want)
		}
	}
	if err := ReadClock(before, after, before.Add(-6*time.Second)).Check(5 * time.Second); !errors.Is(err, ErrClockSkew) {
		t.Errorf("a ledger clock 6 s behind passed the check")
	}
	if err := ReadClock(before, after, before.Add(3*time.Second)).Check(5 * time.Second); err != nil {
		t.Errorf("a 3 s difference was refused: %v", err)
	}
}
