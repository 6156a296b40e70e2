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
