package hatest

import (
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// The harness brings up a healthy cluster, and a lost leader is replaced.
func TestClusterFailsOver(t *testing.T) {
	c, err := Start(Options{})
	assert.NilError(t, err)
	defer c.Remove()
	leader, err := c.Leader()
	assert.NilError(t, err)
	sync, err := c.SyncStandby()
	assert.NilError(t, err)
	assert.Assert(t, leader != sync)
	leader.Kill()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := c.Leader()
		if err == nil && n != leader {
			break
		}
		assert.Assert(t, time.Now().Before(deadline), "no new leader: %v\n%s", err, c.Log())
		time.Sleep(200 * time.Millisecond)
	}
}

// On hosts of their own, a primary cut off the network is replaced, and
// rejoins as a standby once reconnected.
func TestIsolatedPrimaryIsReplaced(t *testing.T) {
	c, err := Start(Options{Netns: true})
	assert.NilError(t, err)
	defer c.Remove()
	leader, err := c.Leader()
	assert.NilError(t, err)
	assert.NilError(t, leader.Isolate())
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := c.Leader()
		if err == nil && n != leader {
			break
		}
		assert.Assert(t, time.Now().Before(deadline), "no new leader: %v\n%s", err, c.Log())
		time.Sleep(200 * time.Millisecond)
	}
	assert.NilError(t, leader.Reconnect())
	assert.NilError(t, c.WaitHealthy(120*time.Second))
}
