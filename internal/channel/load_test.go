package channel

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// TestLoadDefaults: a count is sent in full whatever --duration says (the
// flag's help: "Seconds to run (unless --count)"); without either, 10 s.
func TestLoadDefaults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       LoadConfig
		duration time.Duration
	}{
		{"count overrides the default duration", LoadConfig{Count: 3000, Duration: 10 * time.Second}, 0},
		{"count alone", LoadConfig{Count: 5}, 0},
		{"duration alone", LoadConfig{Duration: 3 * time.Second}, 3 * time.Second},
		{"neither: 10 s", LoadConfig{}, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.withDefaults()
			assert.Equal(t, got.Duration, tc.duration)
			assert.Equal(t, got.Count, tc.in.Count)
		})
	}
}

// TestPacerSpacesSendsAndNeverBursts: sends are booked every interval; a
// connection that fell far behind sends at once, then at most one more
// early, never the whole backlog.
func TestPacerSpacesSendsAndNeverBursts(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &pacer{every: 10 * time.Millisecond, next: t0}
	assert.Equal(t, p.wait(t0), time.Duration(0))
	assert.Equal(t, p.wait(t0), 10*time.Millisecond)
	assert.Equal(t, p.wait(t0.Add(5*time.Millisecond)), 15*time.Millisecond)
	late := t0.Add(time.Second)
	assert.Equal(t, p.wait(late), time.Duration(0), "a late connection sends at once")
	assert.Equal(t, p.wait(late), time.Duration(0), "one send early")
	assert.Equal(t, p.wait(late), 10*time.Millisecond, "then paced again, not a burst of the 100 it missed")
}
