package e2e

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/icmd"
	"gotest.tools/v3/poll"

	"dedup/internal/testbed/hatest"
)

// startHA starts etcd and three Patroni-managed PostgreSQL nodes for this
// test. It fails, never skips, when etcd or Patroni is missing.
func startHA(t *testing.T, opts hatest.Options) *hatest.Cluster {
	t.Helper()
	c, err := hatest.Start(opts)
	assert.NilError(t, err)
	t.Cleanup(c.Remove)
	return c
}

// haLoad is channels sending fresh transfers to a relay and retransmitting
// each until it gets anything but E902/E903 or gives up, recording every
// reply per GUID.
type haLoad struct {
	t       *testing.T
	relay   string
	mu      sync.Mutex
	replies map[string][]string
	tgs     map[string][]byte
	seq     atomic.Int64
	// The first E902 after the fault, and the first 0000 of a GUID first
	// sent after that E902: the failover as a channel sees it.
	fault          atomic.Int64 // unix nanos; 0 before the fault
	firstE902      atomic.Int64
	firstOKAfter   atomic.Int64
	firstOKGUIDSeq atomic.Int64
}

func newHALoad(t *testing.T, relay string) *haLoad {
	return &haLoad{t: t, relay: relay, replies: map[string][]string{}, tgs: map[string][]byte{}}
}

func (l *haLoad) run(stop <-chan struct{}, channels int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for ch := 0; ch < channels; ch++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := l.seq.Add(1)
				g := fmt.Sprintf("%sHA%022d", time.Now().Format("20060102"), i)
				tg := telegram(l.t, g, amount(1+i%997))
				l.mu.Lock()
				l.tgs[g] = tg
				l.mu.Unlock()
				for try := 0; try < 3; try++ {
					cd := l.send(g, tg)
					if cd == "E902" && l.fault.Load() != 0 {
						l.firstE902.CompareAndSwap(0, time.Now().UnixNano())
					}
					if cd == "0000" && try == 0 && l.firstE902.Load() != 0 && l.firstOKAfter.Load() == 0 {
						l.firstOKAfter.Store(time.Now().UnixNano())
					}
					if cd != "E902" && cd != "E903" && cd != "-" {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	return &wg
}

func (l *haLoad) send(g string, tg []byte) string {
	conn, err := dialRelay(l.relay)
	if err != nil {
		return "-"
	}
	defer conn.Close()
	reply, err := conn.RoundTrip(tg)
	cd := "-"
	if err == nil {
		cd = code(reply)
	}
	l.mu.Lock()
	l.replies[g] = append(l.replies[g], cd)
	l.mu.Unlock()
	return cd
}

// failover is how long channels saw no service: the first E902 after the
// fault to the first 0000 of a fresh send (0 if no E902 was seen).
func (l *haLoad) failover() time.Duration {
	a, b := l.firstE902.Load(), l.firstOKAfter.Load()
	if a == 0 || b == 0 {
		return 0
	}
	return time.Duration(b - a)
}

// Losing the database host loses nothing: a relay on a multi-host URL
// keeps serving through each fault of a bad day (the primary's postmaster
// killed, the primary host lost, the primary cut off the network, a
// planned switchover, the synchronous standby lost), and afterwards no
// GUID was applied twice, every GUID the relay answered with anything but
// E902 has its row on the new primary (so the isolated primary
// acknowledged no claim the new one lacks), and every 0000 is the core's
// truth. The nodes are hosts of their own (network namespaces).
func TestHAFailoversLoseNothing(t *testing.T) {
	t.Parallel()
	ha := startHA(t, hatest.Options{Netns: true})
	url := ha.URL(ha.DB)
	c := startCore(t, "--quiet")
	// The nodes are not on loopback; this test is about failover, not TLS.
	timing := []string{"--timeout", "1", "--connect-timeout", "0.3", "--orphan-after", "8.3", "--db-insecure"}
	r := startRelay(t, url, c.url, timing...)
	for _, f := range []struct {
		name  string
		fault func(t *testing.T) *hatest.Node // returns a node to bring back
	}{
		{"kill -9 of the primary's postmaster", func(t *testing.T) *hatest.Node {
			n, err := ha.Leader()
			assert.NilError(t, err)
			assert.NilError(t, n.KillPostmaster())
			return nil
		}},
		{"the primary host lost (Patroni and PostgreSQL killed together)", func(t *testing.T) *hatest.Node {
			n, err := ha.Leader()
			assert.NilError(t, err)
			n.Kill()
			return n
		}},
		{"the primary cut off the network", func(t *testing.T) *hatest.Node {
			n, err := ha.Leader()
			assert.NilError(t, err)
			assert.NilError(t, n.Isolate())
			go func() {
				time.Sleep((hatest.TTL + 5) * time.Second) // a new primary serves meanwhile
				n.Reconnect()
			}()
			return nil
		}},
		{"planned switchover", func(t *testing.T) *hatest.Node {
			assert.NilError(t, ha.Switchover(""))
			return nil
		}},
		{"the synchronous standby lost", func(t *testing.T) *hatest.Node {
			n, err := ha.SyncStandby()
			assert.NilError(t, err)
			n.Kill()
			return n
		}},
	} {
		t.Run(f.name, func(t *testing.T) {
			load := newHALoad(t, r.addr)
			stop := make(chan struct{})
			wg := load.run(stop, 4)
			time.Sleep(time.Second) // steady load before the fault
			load.fault.Store(time.Now().UnixNano())
			back := f.fault(t)
			poll.WaitOn(t, func(poll.LogT) poll.Result {
				if load.firstE902.Load() != 0 && load.firstOKAfter.Load() == 0 {
					return poll.Continue("no service yet")
				}
				// A claim in flight when the primary went away ends by its
				// client deadline (6 s) before its E902 is seen.
				if time.Since(time.Unix(0, load.fault.Load())) < 8*time.Second {
					return poll.Continue("the fault is young")
				}
				return poll.Success()
			}, poll.WithTimeout(90*time.Second), poll.WithDelay(100*time.Millisecond))
			time.Sleep(time.Second) // service again under load
			close(stop)
			wg.Wait()
			if back != nil {
				assert.NilError(t, back.Start())
			}
			assert.NilError(t, ha.WaitHealthy(120*time.Second))
			hist := map[string]int{}
			for _, cds := range load.replies {
				for _, cd := range cds {
					hist[cd]++
				}
			}
			t.Logf("%s: %d GUIDs, replies %v; failover as channels saw it: %v", f.name, len(load.tgs), hist, load.failover().Round(10*time.Millisecond))
			settleAndCheckHA(t, url, c, load, timing)
		})
	}
}

// settleAndCheckHA lets the sweep, resolve and reprocess settle every row
// and checks the history against the core and the new primary.
func settleAndCheckHA(t *testing.T, url string, c *core, load *haLoad, timing []string) {
	t.Helper()
	db := openDB(t, url)
	// Claims whose commit was in doubt stay SENT until the sweep (at a
	// relay's start, and every 10 s) moves them to UNKNOWN.
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM tx WHERE state IN ('SENT','RECEIVED')").Scan(&n); err != nil {
			return poll.Continue("%v", err)
		}
		if n > 0 {
			return poll.Continue("%d SENT rows", n)
		}
		return poll.Success()
	}, poll.WithTimeout(60*time.Second), poll.WithDelay(500*time.Millisecond))
	waitSQL(t, db, "SELECT count(*)=0 FROM tx WHERE state='UNKNOWN' AND updated_at > datetime('now', '-2 seconds')")
	for _, job := range [][]string{{"resolve", "--min-age", "2"}, {"reprocess", "--max-attempts", "3"}} {
		res := runJob(t, job[0], append([]string{"--db", url, "--core", c.url, "--db-insecure"}, append(job[1:], timing[:4]...)...)...)
		res.Assert(t, icmd.Success)
	}
	s := c.stats(t)
	rows := rowsSnapshot(t, db)
	var lost, doubles, untrue []string
	for g := range load.tgs {
		r, ok := rows[g]
		if s.AppliedByGUID[g] > 1 {
			doubles = append(doubles, g)
		}
		answered := false
		for _, cd := range load.replies[g] {
			if cd != "E902" && cd != "-" {
				answered = true
			}
			if cd == "0000" && (s.AppliedByGUID[g] != 1 || !ok || r.State.String != "DONE") {
				untrue = append(untrue, g)
			}
		}
		if answered && !ok {
			lost = append(lost, g)
		}
		if !ok && s.ByGUID[g] > 0 {
			lost = append(lost, g+" (POSTed without a row)")
		}
	}
	sort.Strings(lost)
	assert.Check(t, len(doubles) == 0, "applied twice: %v", doubles)
	assert.Check(t, len(lost) == 0, "answered, but no row on the new primary: %v", lost)
	assert.Check(t, len(untrue) == 0, "0000 without a DONE row applied once: %v", untrue)
}

// The sharp edge: the synchronous standbys stall, a claim's COMMIT waits
// for them, and the wait is cancelled (pg_cancel_backend): PostgreSQL
// commits the claim locally and says so in a WARNING. The relay must take
// that for "not committed": E902, nothing sent. Once the standbys are back
// the row (committed locally, now replicated) is swept and resolved, and
// the channel's retransmission is sent exactly once.
func TestHACancelledSyncWaitIsNotAClaim(t *testing.T) {
	t.Parallel()
	ha := startHA(t, hatest.Options{})
	url := ha.URL(ha.DB)
	c := startCore(t, "--quiet")
	timing := []string{"--timeout", "1", "--connect-timeout", "0.3", "--orphan-after", "8.3"}
	r := startRelay(t, url, c.url, timing...)
	assert.Equal(t, code(send(t, r.addr, telegram(t, newGUID()))), "0000")

	leader, err := ha.Leader()
	assert.NilError(t, err)
	var standbys []*hatest.Node
	for _, n := range ha.Nodes {
		if n != leader {
			standbys = append(standbys, n)
			assert.NilError(t, n.Freeze())
		}
	}
	thawed := false
	thaw := func() {
		if !thawed {
			for _, n := range standbys {
				n.Thaw()
			}
			thawed = true
		}
	}
	defer thaw()

	g := newGUID()
	tg := telegram(t, g)
	replyc := make(chan string, 1)
	go func() {
		conn, err := dialRelay(r.addr)
		if err != nil {
			replyc <- err.Error()
			return
		}
		defer conn.Close()
		reply, err := conn.RoundTrip(tg)
		if err != nil {
			replyc <- err.Error()
			return
		}
		replyc <- code(reply)
	}()
	admin := openDB(t, ha.NodeURL(leader, "postgres"))
	var pid int
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		err := admin.QueryRow("SELECT pid FROM pg_stat_activity WHERE application_name='dedup' AND wait_event='SyncRep' LIMIT 1").Scan(&pid)
		if err != nil {
			return poll.Continue("no claim waits for the standby: %v", err)
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(20*time.Millisecond))
	_, err = admin.Exec("SELECT pg_cancel_backend(?)", pid)
	assert.NilError(t, err)
	// The claim is not a claim: nothing is sent. The channel is answered
	// from the row it can read (docs/rules.md rule 14): the locally
	// committed SENT row says "in progress" (E903); a read that finds no
	// row says E902. Either way the channel asks again with the same GUID.
	switch got := <-replyc; got {
	case "E903", "E902":
	default:
		t.Fatalf("a claim committed without its standby was answered %s", got)
	}
	assert.Equal(t, c.stats(t).ByGUID[g], 0, "a claim committed without its standby was sent")
	r.waitLog(t, "canceling wait for synchronous replication")
	local := openDB(t, ha.NodeURL(leader, ha.DB))
	assert.Equal(t, getRow(t, local, g).State.String, "SENT", "the claim was not committed locally: the test did not exercise the warning")

	thaw()
	assert.NilError(t, ha.WaitHealthy(60*time.Second))
	// The in-doubt claim: swept to UNKNOWN, resolve finds it not applied.
	db := openDB(t, url)
	waitState(t, db, g, "UNKNOWN", 40*time.Second)
	waitSQL(t, db, "SELECT count(*)=0 FROM tx WHERE guid=? AND updated_at > datetime('now', '-2 seconds')", g)
	res := runJob(t, "resolve", "--db", url, "--core", c.url, "--min-age", "2")
	res.Assert(t, icmd.Success)
	assert.Equal(t, getRow(t, db, g).State.String, "FAILED")
	assert.Equal(t, code(send(t, r.addr, tg)), "0000")
	assert.Equal(t, code(send(t, r.addr, tg)), "0000")
	s := c.stats(t)
	assert.Equal(t, s.ByGUID[g], 1)
	assert.Equal(t, s.AppliedByGUID[g], 1)
}
