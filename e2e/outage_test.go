package e2e

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/poll"

	"dedup/internal/channel"
)

// The relay sends the core nothing but its claimed transfers: started on a
// fresh ledger and stopped, it has made no call of any kind to a fixture
// core (no probe inquiry, no health check).
func TestRelaySendsTheCoreNothingButItsClaims(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	r := startRelay(t, tempDB(t), c.url)
	assert.Equal(t, r.stop(t, syscall.SIGTERM), 0)
	s := c.stats(t)
	assert.Equal(t, s.Transfers, 0)
	assert.Check(t, is.Len(s.ByGUID, 0), "POSTs: %v", s.ByGUID)
	assert.Check(t, is.Len(s.LookupsByGUID, 0), "inquiries: %v", s.LookupsByGUID)
	for _, req := range []string{"POST /", "GET /", "unknown request"} {
		assert.Check(t, !strings.Contains(c.log(), req), "the core got a request:\n%s", c.log())
	}
}

// The start-up reachability check opens a connection and writes nothing on
// it; with nothing listening on the core's port it warns once, and the
// relay serves anyway.
func TestStartUpCheckOpensAConnectionAndSendsNothing(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer ln.Close()
	var accepted, received atomic.Int64
	var wg sync.WaitGroup
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				conn.SetReadDeadline(time.Now().Add(20 * time.Second))
				n, _ := io.Copy(io.Discard, conn)
				received.Add(n)
			}()
		}
	}()
	r := startRelay(t, tempDB(t), "http://"+ln.Addr().String())
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if accepted.Load() == 0 {
			return poll.Continue("no connection yet")
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(10*time.Millisecond))
	assert.Equal(t, r.stop(t, syscall.SIGTERM), 0)
	ln.Close()
	wg.Wait() // every connection read to its end (the relay closed it)
	assert.Equal(t, received.Load(), int64(0), "the relay wrote to the core at start")
	assert.Check(t, !strings.Contains(r.log(), "accepts no connection"), r.log())

	dead := startRelay(t, tempDB(t), "http://"+freeAddr(t), "--connect-timeout", "0.5")
	dead.waitLog(t, "the core accepts no connection")
	assert.Equal(t, code(send(t, dead.addr, telegram(t, newGUID()))), "E902")
}

// An outage burns no attempts, and the core's return is used at once
// (docs/cli.md in docs/cli.md): while fewer than 3 sends have obtained no
// connection a retransmission of a FAILED/E902 row is reclaimed as the
// relay does when the core is up; once the core counts as down, retransmissions however
// many and however spread leave the row as it is; the first ones after the
// core accepts connections again are sent at once, once per GUID, however
// many copies arrive together.
func TestOutageBurnsNoAttemptsAndTheCoresReturnIsUsedAtOnce(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	db := tempDB(t)
	r := startRelay(t, db, "http://"+addr, "--connect-timeout", "0.3")
	ldb := openDB(t, db)

	first := newGUID()
	tg := telegram(t, first)
	assert.Equal(t, code(send(t, r.addr, tg)), "E902") // send 1 without a connection
	assert.Equal(t, code(send(t, r.addr, tg)), "E902") // reclaimed: send 2
	assert.Equal(t, getRow(t, ldb, first).Attempts, 2, "a retransmission before the core counted as down was not reclaimed")
	guids := []string{first}
	for len(guids) < 10 { // send 3 makes the core count as down; the rest keep it so
		g := newGUID()
		assert.Equal(t, code(send(t, r.addr, telegram(t, g, amount(int64(len(guids)))))), "E902")
		guids = append(guids, g)
	}
	// 20 retransmissions spread over 30 s: longer than any pause a
	// time-based breaker would take between probes.
	for i := 0; i < 20; i++ {
		assert.Equal(t, code(send(t, r.addr, tg)), "E902")
		time.Sleep(1500 * time.Millisecond) // the spacing of real channels' retransmissions
	}
	assert.Equal(t, getRow(t, ldb, first).Attempts, 2, "retransmissions during the outage burnt attempts")

	// The storm: 10 GUIDs x 8 concurrent copies, connected beforehand so
	// that they arrive together right after the core starts.
	conns := make([][]*channel.Conn, len(guids))
	for i := range guids {
		for k := 0; k < 8; k++ {
			conn, err := dialRelay(r.addr)
			assert.NilError(t, err)
			defer conn.Close()
			conns[i] = append(conns[i], conn)
		}
	}
	c := startCoreAt(t, addr)
	codes := make([][]string, len(guids))
	var wg sync.WaitGroup
	for i, g := range guids {
		codes[i] = make([]string, 8)
		tgi := telegram(t, g, amount(int64(i)))
		if i == 0 {
			tgi = tg
		}
		for k, conn := range conns[i] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reply, err := conn.RoundTrip(tgi)
				if err != nil {
					codes[i][k] = err.Error()
					return
				}
				codes[i][k] = code(reply)
			}()
		}
	}
	wg.Wait()
	s := c.stats(t)
	for i, g := range guids {
		assert.Check(t, is.Equal(s.ByGUID[g], 1), "GUID %s: %d POSTs", g, s.ByGUID[g])
		assert.Check(t, is.Equal(s.AppliedByGUID[g], 1), "GUID %s applied %d times", g, s.AppliedByGUID[g])
		ok := 0
		for _, cd := range codes[i] {
			assert.Check(t, cd == "0000" || cd == "E903", "GUID %s: reply %q after the core's return", g, cd)
			if cd == "0000" {
				ok++
			}
		}
		assert.Check(t, ok >= 1, "no copy of %s got 0000: %v", g, codes[i])
		want := 2
		if i == 0 {
			want = 3
		}
		assert.Check(t, is.Equal(getRow(t, ldb, g).Attempts, want), "GUID %s", g)
	}
}
