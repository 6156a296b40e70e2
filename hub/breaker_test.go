package hub

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"dedup/coreapi"
)

func TestBreakerOpensAfterConsecutiveConnectionFailuresAndProbesOnce(t *testing.T) {
	noConn := coreapi.Result{NoConnection: true}
	connected := coreapi.Result{Code: "0000"}
	b := newBreaker(3, 20*time.Millisecond)
	for i := 0; i < 2; i++ {
		assert.Assert(t, b.allow())
		b.record(noConn)
	}
	assert.Assert(t, b.allow(), "opened before the third failure")
	b.record(connected)
	for i := 0; i < 3; i++ {
		b.record(noConn)
	}
	assert.Assert(t, !b.allow(), "still closed after 3 consecutive connection failures")
	deadline := time.Now().Add(time.Second)
	for !b.allow() {
		assert.Assert(t, time.Now().Before(deadline), "no half-open probe after the pause")
		time.Sleep(5 * time.Millisecond)
	}
	assert.Assert(t, !b.allow(), "a second probe went while the first was under way")
	b.record(noConn) // the probe found the core still down: open again
	assert.Assert(t, !b.allow())
	for !b.allow() {
		assert.Assert(t, time.Now().Before(deadline), "no second probe")
		time.Sleep(5 * time.Millisecond)
	}
	b.record(connected) // the core is back
	assert.Assert(t, b.allow() && b.allow(), "a probe that connected did not close the breaker")
	// A lease that expired says nothing about the core.
	for i := 0; i < 5; i++ {
		b.record(coreapi.Result{LeaseExpired: true})
	}
	assert.Assert(t, b.allow())
}
