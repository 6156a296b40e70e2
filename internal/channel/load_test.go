package channel

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup/internal/socket"
	"dedup/lhstd"
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

// stallingRelay answers every telegram with 0000 at once, except that the
// first answer after stallAfter waits stall: a relay that stops for a
// moment. It returns its address.
func stallingRelay(t *testing.T, stallAfter int, stall time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	served := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					req, err := lhstd.ReadFrame(c)
					if err != nil {
						return
					}
					mu.Lock()
					served++
					if served == stallAfter {
						time.Sleep(stall) // everything behind it waits too
					}
					mu.Unlock()
					if _, err := c.Write(lhstd.AppendFrame(nil, lhstd.Reply(req, "0000", nil))); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// An open-loop run counts a stall as the whole wait it caused: the relay
// stops for 600 ms once; a closed loop would have sent nothing meanwhile
// and seen one slow reply, while the open loop keeps sending at its rate
// (opening connections) and counts every telegram due during the stall
// from when it was due.
func TestOpenLoopCountsAStallFromWhenEachTelegramWasDue(t *testing.T) {
	addr := stallingRelay(t, 50, 600*time.Millisecond)
	rep, err := Load(context.Background(), LoadConfig{Relay: addr, Conns: 4, Rate: 200, Duration: 1500 * time.Millisecond,
		Timeout: 5 * time.Second, From: "11020030004001", To: "11020030004002", Amount: 1})
	assert.NilError(t, err)
	ol := rep.OpenLoop
	assert.Assert(t, ol != nil)
	t.Log(ol.String())
	assert.Check(t, ol.Due >= 250 && ol.Due <= 301, "due %d at 200/s for 1.5 s", ol.Due)
	assert.Check(t, is.Equal(ol.Answered, ol.Due))
	assert.Check(t, ol.Max >= 550*time.Millisecond, "the stall's own wait: max %s", ol.Max)
	// About 120 telegrams fell due during the stall: over 1% of the run.
	assert.Check(t, ol.P99 >= 300*time.Millisecond, "p99 %s hides the stall", ol.P99)
	assert.Check(t, ol.MaxConns > 4, "no connection was opened while all waited")
	assert.Check(t, is.Equal(ol.Refused, 0))
	assert.Check(t, is.Equal(ol.Over1s, 0))
}

// Nothing listening: every telegram is refused until it is given up, and
// the run says so.
func TestOpenLoopCountsRefusedConnections(t *testing.T) {
	b, err := socket.Bind("127.0.0.1:0") // bound, never listening: refused
	assert.NilError(t, err)
	defer b.Close()
	addr := b.Addr().String()
	rep, err := Load(context.Background(), LoadConfig{Relay: addr, Conns: 2, Rate: 20, Duration: 300 * time.Millisecond,
		Timeout: 200 * time.Millisecond, From: "11020030004001", To: "11020030004002", Amount: 1})
	assert.NilError(t, err)
	ol := rep.OpenLoop
	assert.Check(t, ol.Refused > 0, "refused %d", ol.Refused)
	assert.Check(t, is.Equal(ol.Answered, 0))
	assert.Check(t, is.Equal(ol.Unanswered, ol.Due))
}
