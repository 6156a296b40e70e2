//go:build faults

package e2e

// The fault campaign (scripts/faults.sh): seeded randomized runs of the real
// binaries under crashes, outages, slow answers, batch jobs and channel
// storms, followed by a check of the whole history against the core. Build
// tag "faults" keeps it out of the default test run.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"

	"dedup/internal/channel"
	"dedup/internal/testbed/hatest"
	"dedup/internal/testbed/lazyfs"
	"dedup/internal/testbed/pgtest"
	"dedup/ledger"
	"dedup/lhstd"
)

var (
	fRuns     = flag.Int("faults.runs", 20, "seeded runs")
	fSeed     = flag.Uint64("faults.seed", 0, "seed of the first run (0: from the clock); run i uses seed+i")
	fDuration = flag.Duration("faults.duration", 12*time.Second, "load per run")
	fChannels = flag.Int("faults.channels", 12, "simulated channels per run")
	fBroken   = flag.Bool("faults.broken", false, "use a relay built with a select-then-insert claim: the checks must fail")
	fLedger   = flag.String("faults.ledger", "sqlite", "sqlite; postgres: each run gets a PostgreSQL cluster of its own, and database restarts join the faults; patroni: each run gets etcd and three Patroni nodes, and failovers join the faults")
	fTLS      = flag.Bool("faults.tls", false, "channels over mutual TLS (with channel binding) and the core over https with a client certificate")
)

// Campaign settings. The relay's orphan bound is its minimum for these
// timeouts (0.3 + 1 + 7); resolve's --min-age exceeds the core's slowest
// answer (SLOW = 1.2 s) plus --timeout (docs/rules.md rule 12) by more than
// the one-second timestamp granularity.
const (
	coreSlow       = "1.2"
	relayTimeout   = "1"
	relayConnect   = "0.3"
	orphanAfter    = 8300 * time.Millisecond
	resolveMinAge  = "4"
	maxAttempts    = 3
	channelTimeout = 2500 * time.Millisecond
)

// event is one thing a channel did with a GUID, and what it got.
type event struct {
	at      time.Duration
	channel int
	what    string // send, burst, hangup
	code    string // reply code, or "-" (no reply: error, timeout, hang-up)
	reply   []byte
	detail  string
}

type history struct {
	mu     sync.Mutex
	start  time.Time
	events map[string][]event
	memo   map[string]string
	order  []string
}

func (h *history) add(guid string, e event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.at = time.Since(h.start).Round(time.Millisecond)
	if _, ok := h.events[guid]; !ok {
		h.order = append(h.order, guid)
	}
	h.events[guid] = append(h.events[guid], e)
}

type counters struct {
	tx, retrans, hangups, bursts                                        atomic.Int64
	relayKill, relayTerm, coreDown, coreKill, resolve, reprocess, purge atomic.Int64
	dbRestart, relayFreeze                                              atomic.Int64
	linkBlackHole, linkPartition                                        atomic.Int64
	settleProposed, settleApproved, settleRefused                       atomic.Int64
	haPostmaster, haHostLoss, haSwitchover, haSyncLost, haIsolated      atomic.Int64
	powerCut                                                            atomic.Int64
	// jobsLockedOut: jobs that failed "ledger busy" while a stopped relay
	// held SQLite's write lock (tolerated, counted).
	jobsLockedOut atomic.Int64
}

// campaign is one seeded run.
type campaign struct {
	t        *testing.T
	seed     uint64
	rng      *rand.Rand
	rngMu    sync.Mutex
	dir      string
	db       string
	coreAddr string
	coreURL  string
	state    string
	relayBin string
	pg       *pgtest.Cluster // the run's own cluster with -faults.ledger=postgres
	ha       *hatest.Cluster // the run's own HA cluster with -faults.ledger=patroni
	dbFlags  []string        // extra ledger flags of every binary
	// primaryLost are the moments a primary was lost (for the failover time).
	primaryLost []time.Duration

	// With -faults.tls: the run's own CA and what each party needs of it.
	coreServe  []string    // the fixture core's TLS flags
	coreClient []string    // the relay's and the jobs' --core-* flags
	listener   []string    // the relay's listener flags (client certificates required)
	chanTLS    *tls.Config // the channels' TLS (a certificate for channel FLT)
	pki        *testPKI

	mu     sync.Mutex
	core   *proc
	relays []*proc
	raddrs []string

	hist history
	n    *counters
	out  strings.Builder

	// With -faults.powerloss: the file system the ledger is on, the
	// children a cut kills, and what the checks after each cut found.
	lfs       *lazyfs.FS
	kids      children
	integrity []string

	operatorRoles sync.Once // the PostgreSQL roles of the operators, made at the first decision

	// freezes counts the SIGSTOPs so far and frozen is set while a relay is
	// stopped: a relay stopped inside a SQLite write transaction holds the
	// file's write lock until SIGCONT, so a job that writes meanwhile fails
	// "ledger busy" (exit 1) by design, as under a paused VM.
	freezes atomic.Int64
	frozen  atomic.Bool
}

func (c *campaign) intn(n int) int {
	c.rngMu.Lock()
	defer c.rngMu.Unlock()
	return c.rng.IntN(n)
}

func (c *campaign) logf(format string, args ...any) {
	c.mu.Lock()
	fmt.Fprintf(&c.out, "  %7s "+format+"\n", append([]any{time.Since(c.hist.start).Round(time.Millisecond)}, args...)...)
	c.mu.Unlock()
}

func (c *campaign) startCore() {
	c.core = start(c.t, "fixturecore", append([]string{"--listen", c.coreAddr, "--slow", coreSlow, "--state", c.state, "--quiet"}, c.coreServe...)...)
}

// startRelay (re)starts relay i. On an HA ledger it first waits for a
// primary that takes writes: a relay refuses to start on a ledger it
// cannot open (systemd's Restart= retries it in production).
func (c *campaign) startRelay(i int) {
	if c.ha != nil {
		if err := c.ha.WaitWritable(120 * time.Second); err != nil {
			c.t.Errorf("seed %d: %v", c.seed, err)
		}
	}
	c.relays[i] = c.relayAt(c.raddrs[i])
}

func (c *campaign) relayAt(addr string) *proc {
	args := []string{"--db", c.db, "--listen", addr, "--core", c.coreURL,
		"--timeout", relayTimeout, "--connect-timeout", relayConnect, "--orphan-after", fmt.Sprint(orphanAfter.Seconds())}
	return start(c.t, c.relayBin, append(append(append(args, c.dbFlags...), c.listener...), c.coreClient...)...)
}

// setUpTLS makes the run's CA and certificates: every link of the
// campaign then runs over TLS, channels and the core with client
// certificates.
func (c *campaign) setUpTLS() {
	p := newTestPKI(c.t)
	c.pki = p
	c.coreServe = []string{"--tls-cert", p.server.Cert, "--tls-key", p.server.Key, "--client-ca", p.ca.File}
	c.coreClient = p.coreArgs()
	c.listener = p.listenerArgs()
	ch := p.channelCert(c.t, "flt-gw-01", "FLT")
	c.chanTLS = p.clientTLS(c.t, &ch)
	c.chanTLS.ClientSessionCache = tls.NewLRUClientSessionCache(256)
}

func TestFaultCampaign(t *testing.T) {
	seed := *fSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano() % 1_000_000_000)
	}
	relayBin := bin("relay")
	if *fBroken {
		relayBin = buildTestRelay(t, "brokenrelay")
	}
	total := &counters{}
	var checksMu sync.Mutex
	var violations []string
	var stats struct{ guids, applied, receivedTwice, explained, done, exhausted, neverAccepted, ok0000 int }
	var failovers []time.Duration
	fmt.Printf("faults: runs=%d first seed=%d duration=%v channels=%d broken=%v ledger=%s tls=%v power_loss=%v synchronous=%s\n", *fRuns, seed, *fDuration, *fChannels, *fBroken, *fLedger, *fTLS, *fPowerLoss, *fSynchronous)
	begin := time.Now()
	t.Run("runs", func(t *testing.T) {
		for i := 0; i < *fRuns; i++ {
			s := seed + uint64(i)
			t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
				t.Parallel()
				c := &campaign{t: t, seed: s, rng: rand.New(rand.NewPCG(s, 0x5eed)), dir: t.TempDir(), relayBin: relayBin, n: total}
				res := c.run()
				checksMu.Lock()
				defer checksMu.Unlock()
				stats.guids += res.guids
				stats.applied += res.applied
				stats.receivedTwice += res.receivedTwice
				stats.explained += res.explained
				stats.done += res.done
				stats.exhausted += res.exhausted
				stats.neverAccepted += res.neverAccepted
				stats.ok0000 += res.ok0000
				failovers = append(failovers, res.failovers...)
				if len(res.violations) > 0 {
					violations = append(violations, res.violations...)
					t.Errorf("seed %d: %d violations; replay with: scripts/faults.sh --seed %d --runs 1\n%s\nrun log:\n%s",
						s, len(res.violations), s, strings.Join(res.violations, "\n"), c.out.String())
				}
			})
		}
	})
	n := total
	fmt.Printf("faults: runs=%d seconds=%.0f transactions=%d retransmissions=%d hangups=%d bursts=%d\n",
		*fRuns, time.Since(begin).Seconds(), n.tx.Load(), n.retrans.Load(), n.hangups.Load(), n.bursts.Load())
	fmt.Printf("faults injected: relay_kill9=%d relay_sigterm=%d relay_sigstop=%d core_down=%d core_kill9=%d link_black_hole=%d link_partition=%d db_restart=%d resolve=%d reprocess=%d purge=%d (jobs locked out by a stopped relay: %d)\n",
		n.relayKill.Load(), n.relayTerm.Load(), n.relayFreeze.Load(), n.coreDown.Load(), n.coreKill.Load(), n.linkBlackHole.Load(), n.linkPartition.Load(),
		n.dbRestart.Load(), n.resolve.Load(), n.reprocess.Load(), n.purge.Load(), n.jobsLockedOut.Load())
	if *fPowerLoss {
		fmt.Printf("faults injected (power loss): power_cut=%d synchronous=%s\n", n.powerCut.Load(), *fSynchronous)
	}
	fmt.Printf("settle: proposed=%d approved=%d refused=%d (the row changed meanwhile, or the proposal was decided)\n",
		n.settleProposed.Load(), n.settleApproved.Load(), n.settleRefused.Load())
	if *fLedger == "patroni" {
		fmt.Printf("faults injected (HA): primary_postmaster_kill9=%d primary_host_lost=%d primary_isolated=%d switchover=%d sync_standby_lost=%d\n",
			n.haPostmaster.Load(), n.haHostLoss.Load(), n.haIsolated.Load(), n.haSwitchover.Load(), n.haSyncLost.Load())
		if len(failovers) > 0 {
			slices.Sort(failovers)
			fmt.Printf("failover (first E902 or unanswered send to the next 0000 after a primary was lost): n=%d p50=%.1fs max=%.1fs target p50 <= ttl+5 = %ds\n",
				len(failovers), failovers[len(failovers)/2].Seconds(), failovers[len(failovers)-1].Seconds(), hatest.TTL+5)
		} else {
			fmt.Println("failover: no primary lost with an E902 seen in these runs")
		}
	}
	kinds := map[string]int{}
	for _, v := range violations {
		kinds[strings.SplitN(v, ":", 2)[0]]++
	}
	verdict := func(k string) string {
		switch {
		case expectLoss() && kinds[k] > 0:
			// The power-loss control: unsynced commits must be lost.
			return fmt.Sprintf("caught the lost commits, as it must (%d violations)", kinds[k])
		case *fBroken && kinds[k] > 0:
			// The proof that the checks can fail: worded so that nobody
			// reading a green log takes it for a failure.
			return fmt.Sprintf("caught the broken relay, as it must (%d violations)", kinds[k])
		case kinds[k] > 0:
			return fmt.Sprintf("FAILED (%d violations)", kinds[k])
		}
		return "ok"
	}
	fmt.Printf("check 1 no double application: %s (guids=%d applied=%d received_twice=%d, all explained=%v)\n",
		verdict("double"), stats.guids, stats.applied, stats.receivedTwice, stats.explained == stats.receivedTwice)
	fmt.Printf("check 2 nothing lost: %s (DONE=%d FAILED-exhausted=%d never-accepted=%d)\n", verdict("lost"), stats.done, stats.exhausted, stats.neverAccepted)
	fmt.Printf("check 3 truthful replies: %s (0000 replies=%d)\n", verdict("reply"), stats.ok0000)
	fmt.Printf("check 4 consistency with the core: %s\n", verdict("core"))
	fmt.Printf("check 5 every change on the record (events): %s\n", verdict("events"))
	if *fPowerLoss {
		fmt.Printf("check 6 the ledger intact after every cut (%s): %s\n", map[bool]string{true: "amcheck", false: "integrity_check"}[*fLedger == "postgres"], verdict("integrity"))
	}
	if len(violations) == 0 {
		fmt.Println("faults: all checks passed")
	}
}

type runResult struct {
	guids, applied, receivedTwice, explained, done, exhausted, neverAccepted, ok0000 int
	violations                                                                       []string
	failovers                                                                        []time.Duration
}

func (c *campaign) run() runResult {
	t := c.t
	c.hist = history{start: time.Now(), events: map[string][]event{}, memo: map[string]string{}}
	// The ledger in a directory of its own: settle's operators reach it
	// through sudo as its owner (ownLedger).
	c.db = filepath.Join(c.dir, "ledger", "relay.db")
	if err := os.MkdirAll(filepath.Dir(c.db), 0o700); err != nil {
		t.Fatal(err)
	}
	switch {
	case *fPowerLoss:
		c.setUpPowerLoss()
	case *fLedger == "postgres":
		pg, err := pgtest.Start(pgtest.Options{})
		assert.NilError(t, err)
		t.Cleanup(pg.Remove)
		c.pg = pg
		name, err := pg.NewDatabase()
		assert.NilError(t, err)
		c.db = pg.URL(name)
	case *fLedger == "patroni":
		// Each node a host of its own, so that the primary can be cut off.
		ha, err := hatest.Start(hatest.Options{Netns: true})
		assert.NilError(t, err)
		t.Cleanup(ha.Remove)
		c.ha = ha
		c.db = ha.URL(ha.DB)
		c.dbFlags = []string{"--db-insecure"} // the nodes are not on loopback; TLS is not this mode's subject
	}
	c.hist.start = time.Now() // the history (and the failover times) start with the load
	c.state = filepath.Join(c.dir, "core.json")
	c.coreAddr = freeAddr(t)
	c.coreURL = "http://" + c.coreAddr
	if *fTLS {
		c.setUpTLS()
		c.coreURL = "https://" + c.coreAddr
	}
	c.startCore()

	// Old DONE rows for purge to delete while everything else runs.
	db := openDB(t, c.db)
	db.applySchema(t)
	db.insertOldDone(t, 3000, nil, nil)
	if c.lfs != nil {
		// The test's own handle must not hold the ledger across a power
		// cut (its process is not killed): closed now, opened again for
		// the checks.
		db.Close()
	}

	nRelays := 1 + c.intn(2)
	c.relays = make([]*proc, nRelays)
	c.raddrs = make([]string, nRelays)
	for i := range c.raddrs {
		c.raddrs[i] = freeAddr(t)
		c.startRelay(i)
	}
	c.logf("seed %d: %d relay(s), core %s", c.seed, nRelays, c.coreAddr)

	load := *fDuration
	if c.ha != nil && load < haMinLoad {
		load = haMinLoad // channels keep sending through the whole failover
	}
	ctx, stopLoad := context.WithTimeout(context.Background(), load)
	defer stopLoad()
	var wg sync.WaitGroup
	if *fBroken {
		// The proof must not depend on the schedule happening to send
		// concurrent first copies: a storm of them up front, which a
		// select-then-insert claim lets through twice.
		c.firstSendStorm()
	}
	for ch := 0; ch < *fChannels; ch++ {
		wg.Add(1)
		go func() { defer wg.Done(); c.channel(ctx, ch) }()
	}
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); c.faults(ctx) }()
	wg.Wait()
	<-faultsDone
	// Two more decisions, with the relays still up: rows in doubt are
	// rarest in short runs, where the random ones may find none.
	c.settleAction()
	c.settleAction()
	if c.lfs != nil {
		db = openDB(t, c.db)
	}
	c.settle(db)
	res := c.check(db)
	res.violations = append(res.violations, c.integrity...)
	res.failovers = c.failovers()
	return res
}

// channel sends fresh transfers and retransmits each the way a real channel
// does until it gets a final answer or gives up.
func (c *campaign) channel(ctx context.Context, id int) {
	rng := rand.New(rand.NewPCG(c.seed, uint64(id)+1))
	for ctx.Err() == nil {
		g := fmt.Sprintf("%sF%02d%021d", time.Now().Format("20060102"), id, rng.Uint64()%1e19)
		memo, amt, from := "faults", int64(1+rng.IntN(1000)), "11020030004001"
		switch p := rng.IntN(100); {
		case p < 8:
			memo = "SLOW"
		case p < 11:
			memo = "DROP"
		case p < 15:
			memo = "APPLYDROP"
		case p < 18:
			memo = "FAIL500"
		case p < 22:
			amt = 900_000_000 // B201
		case p < 25:
			from = "00000000000000" // B202
		}
		tg, err := lhstd.NewTransferRequest(g, "FLT", channel.Now(), lhstd.Transfer{From: from, To: "11020030004002", Amount: amt, Memo: memo})
		if err != nil {
			panic(err)
		}
		c.hist.mu.Lock()
		c.hist.memo[g] = memo
		c.hist.mu.Unlock()
		c.n.tx.Add(1)
		for try := 0; try < 12; try++ {
			if try > 0 {
				c.n.retrans.Add(1)
				time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
			}
			addr := c.raddrs[rng.IntN(len(c.raddrs))]
			var codes []string
			switch p := rng.IntN(100); {
			case p < 8:
				c.n.hangups.Add(1)
				c.hangup(addr, g, id, tg)
				continue
			case p < 16:
				c.n.bursts.Add(1)
				codes = c.burst(addr, g, id, tg, 2+rng.IntN(4))
			default:
				codes = []string{c.send(addr, g, id, tg, "send")}
			}
			if final(codes) {
				break
			}
			if ctx.Err() != nil && try >= 2 {
				break
			}
		}
	}
}

func final(codes []string) bool {
	for _, c := range codes {
		if c == "0000" || c == "E500" || c == "E905" || strings.HasPrefix(c, "B2") {
			return true
		}
	}
	return false
}

func (c *campaign) send(addr, g string, id int, tg []byte, what string) string {
	conn, err := channel.DialTLS(addr, channelTimeout, c.chanTLS)
	if err != nil {
		c.hist.add(g, event{channel: id, what: what, code: "-", detail: "connect: " + err.Error()})
		return "-"
	}
	defer conn.Close()
	reply, err := conn.RoundTrip(tg)
	if err != nil {
		c.hist.add(g, event{channel: id, what: what, code: "-", detail: err.Error()})
		return "-"
	}
	cd := lhstd.ReplyCode(reply)
	c.hist.add(g, event{channel: id, what: what, code: cd, reply: reply})
	return cd
}

// firstSendStorm sends 20 fresh GUIDs, each as 4 copies at once (the
// first sends of a channel that retransmits before any answer).
func (c *campaign) firstSendStorm() {
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		g := fmt.Sprintf("%sST%022d", time.Now().Format("20060102"), c.seed%1e9*100+uint64(i))
		tg, err := lhstd.NewTransferRequest(g, "FLT", channel.Now(), lhstd.Transfer{From: "11020030004001", To: "11020030004002", Amount: 1, Memo: "storm"})
		if err != nil {
			panic(err)
		}
		c.hist.mu.Lock()
		c.hist.memo[g] = "storm"
		c.hist.mu.Unlock()
		c.n.tx.Add(1)
		wg.Add(1)
		go func() { defer wg.Done(); c.burst(c.raddrs[i%len(c.raddrs)], g, 99, tg, 4) }()
	}
	wg.Wait()
}

func (c *campaign) burst(addr, g string, id int, tg []byte, k int) []string {
	codes := make([]string, k)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i] = c.send(addr, g, id, tg, "burst") }()
	}
	wg.Wait()
	return codes
}

func (c *campaign) hangup(addr, g string, id int, tg []byte) {
	conn, err := channel.DialTLS(addr, channelTimeout, c.chanTLS)
	if err != nil {
		c.hist.add(g, event{channel: id, what: "hangup", code: "-", detail: "connect: " + err.Error()})
		return
	}
	conn.Send(tg)
	conn.Close()
	c.hist.add(g, event{channel: id, what: "hangup", code: "-"})
}

// faults injects one fault at a time at random moments until ctx ends.
func (c *campaign) faults(ctx context.Context) {
	var jobs sync.WaitGroup
	defer jobs.Wait()
	if c.ha != nil {
		// Every run starts with an HA fault, in rotation by seed, so that a
		// campaign of 5 or more runs has each of them at least once.
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		c.haFault(int(c.seed % haFaultKinds))
	}
	if c.lfs != nil {
		c.powerFaults(ctx, &jobs)
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(300+c.intn(900)) * time.Millisecond):
		}
		kinds := 8
		switch {
		case c.pg != nil:
			kinds = 9
		case c.ha != nil:
			kinds = 10
		}
		switch c.intn(kinds + 2) {
		case kinds:
			// A broken link to the core that heals later (docs/rules.md
			// rule 12), as likely as any other fault.
			c.linkFault()
			continue
		case kinds + 1:
			// Two operators decide about a row in doubt, racing the
			// relays and the jobs.
			jobs.Add(1)
			go func() {
				defer jobs.Done()
				c.settleAction()
			}()
			continue
		}
		k := c.intn(kinds)
		if c.ha != nil && k >= 8 {
			// A failover fault more often than any other: it is what the
			// HA ledger is for.
			c.haFault(c.intn(haFaultKinds))
			continue
		}
		switch k {
		case 7: // SIGSTOP a relay for longer than --orphan-after + --min-age
			c.freeze()
		case 0: // kill -9 a relay, restart it on the same ledger
			i := c.intn(len(c.relays))
			c.relays[i].kill()
			c.n.relayKill.Add(1)
			c.logf("kill -9 relay %d", i)
			time.Sleep(time.Duration(c.intn(300)) * time.Millisecond)
			c.startRelay(i)
		case 1: // SIGTERM a relay, restart it
			i := c.intn(len(c.relays))
			code := c.relays[i].stop(c.t, syscall.SIGTERM)
			c.n.relayTerm.Add(1)
			c.logf("SIGTERM relay %d: exit %d", i, code)
			if code != 0 {
				c.t.Errorf("seed %d: relay exited %d after SIGTERM\n%s", c.seed, code, c.relays[i].log())
			}
			c.startRelay(i)
		case 2: // the core down for a while
			c.core.kill()
			c.n.coreDown.Add(1)
			d := time.Duration(300+c.intn(1500)) * time.Millisecond
			c.logf("core down for %v", d)
			time.Sleep(d)
			c.startCore()
		case 3: // the core killed mid-request, restarted at once
			c.core.kill()
			c.n.coreKill.Add(1)
			c.logf("kill -9 core")
			c.startCore()
		case 8: // the database crashes (pg_ctl stop -m immediate) and comes back
			c.n.dbRestart.Add(1)
			d := time.Duration(200+c.intn(1500)) * time.Millisecond
			c.logf("database down (immediate stop) for %v", d)
			if err := c.pg.StopServer("immediate"); err != nil {
				c.t.Errorf("seed %d: %v", c.seed, err)
			}
			time.Sleep(d)
			if err := c.pg.StartServer(); err != nil {
				c.t.Errorf("seed %d: %v", c.seed, err)
				return
			}
		case 4, 5, 6:
			job := []string{"resolve", "reprocess", "purge"}[k-4]
			jobs.Add(1)
			go func() {
				defer jobs.Done()
				c.runJob(job)
			}()
		}
	}
}

// powerFaults is the power-loss campaign's schedule: power cuts at seeded
// moments, with the jobs and the operators running between (and cut down
// with everything else).
func (c *campaign) powerFaults(ctx context.Context, jobs *sync.WaitGroup) {
	// Every run has a cut under load, at a seeded moment between 1 and
	// 2.5 s in: the control must not pass for want of one.
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(1000+c.intn(1500)) * time.Millisecond):
		c.powerCut()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(400+c.intn(1200)) * time.Millisecond):
		}
		switch k := c.intn(6); k {
		case 0, 1:
			c.powerCut()
		case 2, 3, 4:
			job := []string{"resolve", "reprocess", "purge"}[k-2]
			jobs.Add(1)
			go func() { defer jobs.Done(); c.runJob(job) }()
		case 5:
			jobs.Add(1)
			go func() { defer jobs.Done(); c.settleAction() }()
		}
	}
}

// linkFault breaks the link to the core for 1 to 3 s and heals it, with
// nftables on loopback (root): either a path-MTU black hole (every data
// segment towards the core dropped, SYNs and ACKs pass) or a full
// partition (every segment to or from the core's port dropped). The jobs
// run around it as they always do; a request given up on must never reach
// the core after the heal (check 1).
func (c *campaign) linkFault() {
	_, port, _ := net.SplitHostPort(c.coreAddr)
	table := fmt.Sprintf("dedupflt%d", c.seed)
	nft := func(args ...string) {
		if out, err := exec.Command("nft", args...).CombinedOutput(); err != nil {
			c.t.Errorf("seed %d: nft %v: %v: %s (the link fault needs root and Debian's nftables)", c.seed, args, err, out)
		}
	}
	nft("add", "table", "inet", table)
	heal := func() { exec.Command("nft", "delete", "table", "inet", table).Run() }
	c.t.Cleanup(heal)
	nft("add", "chain", "inet", table, "out", "{ type filter hook output priority 0 ; }")
	d := time.Duration(1000+c.intn(2000)) * time.Millisecond
	if c.intn(2) == 0 {
		c.n.linkBlackHole.Add(1)
		c.logf("link to the core: data segments dropped (black hole) for %v", d)
		nft("add", "rule", "inet", table, "out", "tcp", "dport", port, "ip", "length", ">", "60", "drop")
	} else {
		c.n.linkPartition.Add(1)
		c.logf("link to the core: partitioned for %v", d)
		nft("add", "rule", "inet", table, "out", "tcp", "dport", port, "drop")
		nft("add", "rule", "inet", table, "out", "tcp", "sport", port, "drop")
	}
	time.Sleep(d)
	heal()
	c.logf("link to the core healed")
}

// haMinLoad is the least load per run on an HA ledger: the first fault
// comes after a second, and a lost primary is replaced after about ttl
// plus a few seconds, during which channels must keep sending for the
// failover to be measured and its edges exercised.
const haMinLoad = 25 * time.Second

// haFaultKinds is how many kinds of HA fault haFault knows.
const haFaultKinds = 5

// haFault does to the HA cluster one thing of a bad day, and waits until
// it is healthy again (the lost node back) before the next fault.
func (c *campaign) haFault(kind int) {
	switch kind {
	case 4:
		n, err := c.ha.Leader()
		if err != nil {
			return
		}
		c.n.haIsolated.Add(1)
		c.logf("the primary %s cut off the network", n.Name)
		c.lostPrimary()
		if err := n.Isolate(); err != nil {
			c.t.Errorf("seed %d: %v", c.seed, err)
			return
		}
		time.Sleep(time.Duration(hatest.TTL+3+c.intn(5)) * time.Second)
		n.Reconnect()
	case 0:
		n, err := c.ha.Leader()
		if err != nil {
			return
		}
		c.n.haPostmaster.Add(1)
		c.logf("kill -9 of the primary's postmaster (%s)", n.Name)
		c.lostPrimary()
		n.KillPostmaster()
	case 1:
		n, err := c.ha.Leader()
		if err != nil {
			return
		}
		c.n.haHostLoss.Add(1)
		c.logf("the primary host lost: Patroni and PostgreSQL of %s killed", n.Name)
		c.lostPrimary()
		n.Kill()
		time.Sleep(time.Duration(hatest.TTL+3+c.intn(5)) * time.Second)
		if err := n.Start(); err != nil {
			c.t.Errorf("seed %d: %v", c.seed, err)
		}
	case 2:
		c.n.haSwitchover.Add(1)
		c.logf("planned switchover")
		if err := c.ha.Switchover(""); err != nil {
			c.logf("switchover: %v", err)
		}
	case 3:
		n, err := c.ha.SyncStandby()
		if err != nil {
			return
		}
		c.n.haSyncLost.Add(1)
		c.logf("the synchronous standby %s lost", n.Name)
		n.Kill()
		time.Sleep(time.Duration(2+c.intn(4)) * time.Second)
		if err := n.Start(); err != nil {
			c.t.Errorf("seed %d: %v", c.seed, err)
		}
	}
	if err := c.ha.WaitHealthy(120 * time.Second); err != nil {
		c.t.Errorf("seed %d: the HA cluster did not recover: %v", c.seed, err)
	}
	// Patroni's view lags a loop behind: wait until a client finds a
	// primary that commits, as a relay (re)started next must.
	if err := c.ha.WaitWritable(120 * time.Second); err != nil {
		c.t.Errorf("seed %d: the HA cluster takes no writes: %v", c.seed, err)
	}
}

func (c *campaign) lostPrimary() {
	c.mu.Lock()
	c.primaryLost = append(c.primaryLost, time.Since(c.hist.start))
	c.mu.Unlock()
}

// failovers are, for every primary lost, the time channels saw no
// service: the first send after the loss that got E902 or no answer at all
// (a channel gives up before a claim's 6 s client deadline) to the first
// 0000 after that.
func (c *campaign) failovers() []time.Duration {
	type ev struct {
		at   time.Duration
		code string
	}
	var evs []ev
	c.hist.mu.Lock()
	for _, es := range c.hist.events {
		for _, e := range es {
			if e.what != "hangup" {
				evs = append(evs, ev{e.at, e.code})
			}
		}
	}
	c.hist.mu.Unlock()
	sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	var out []time.Duration
	for _, lost := range c.primaryLost {
		var down time.Duration = -1
		for _, e := range evs {
			if e.at < lost {
				continue
			}
			if down < 0 && (e.code == "E902" || e.code == "-") {
				down = e.at
			}
			if down >= 0 && e.code == "0000" && e.at > down {
				out = append(out, e.at-down)
				break
			}
		}
	}
	return out
}

// freeze stops a relay (SIGSTOP, as a paused VM would be) while its claims
// are in flight, lets another relay's start-up sweep move them to UNKNOWN
// once they are older than --orphan-after, runs resolve and reprocess
// after --min-age (which send again what the core never got), and only then
// resumes the frozen relay: its lease must keep it from sending any stale
// claim.
func (c *campaign) freeze() {
	i := c.intn(len(c.relays))
	p := c.relays[i]
	c.frozen.Store(true)
	c.freezes.Add(1)
	defer c.frozen.Store(false)
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return
	}
	c.n.relayFreeze.Add(1)
	c.logf("SIGSTOP relay %d", i)
	time.Sleep(orphanAfter + time.Second)
	sw := c.relayAt("127.0.0.1:0")
	sw.stop(c.t, syscall.SIGTERM)
	time.Sleep(4500 * time.Millisecond) // resolve's --min-age
	c.runJob("resolve")
	c.runJob("reprocess")
	p.cmd.Process.Signal(syscall.SIGCONT)
	c.logf("SIGCONT relay %d", i)
}

func (c *campaign) runJob(job string) string {
	var args []string
	switch job {
	case "resolve":
		c.n.resolve.Add(1)
		args = []string{"--db", c.db, "--core", c.coreURL, "--min-age", resolveMinAge, "--timeout", relayTimeout, "--connect-timeout", relayConnect}
	case "reprocess":
		c.n.reprocess.Add(1)
		args = []string{"--db", c.db, "--core", c.coreURL, "--max-attempts", fmt.Sprint(maxAttempts), "--timeout", relayTimeout, "--connect-timeout", relayConnect}
	case "purge":
		c.n.purge.Add(1)
		args = []string{"--db", c.db, "--days", "7"}
	}
	if job != "purge" {
		args = append(args, c.coreClient...)
	}
	args = append(args, c.dbFlags...)
	cmd := exec.Command(bin(job), args...)
	var stdout, stderrBuf strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderrBuf
	freezesBefore, frozenBefore := c.freezes.Load(), c.frozen.Load()
	cut, err := c.runChild(cmd)
	duringFreeze := frozenBefore || c.frozen.Load() || c.freezes.Load() != freezesBefore
	line := lastLine(stdout.String())
	if cut {
		c.logf("%s: killed by the power cut (%v)", job, err)
		return line
	}
	c.logf("%s: %s", job, line)
	if err != nil {
		stderr := stderrBuf.String()
		if (c.pg != nil || c.ha != nil) && strings.Contains(stderr, "error:") {
			// The database may have been down: a runtime error (exit 1),
			// the rows stay for the next run, and the checks still judge.
			c.logf("%s: %v: %s", job, err, strings.TrimSpace(stderr))
			return line
		}
		if c.pg == nil && c.ha == nil && duringFreeze && strings.Contains(stderr, ledger.ErrBusy.Error()) {
			// A stopped relay held the SQLite write lock: the job wrote
			// nothing, the rows stay for the next run.
			c.n.jobsLockedOut.Add(1)
			c.logf("%s: %v while a relay was stopped: %s", job, err, strings.TrimSpace(stderr))
			return line
		}
		c.t.Errorf("seed %d: %s failed: %v\n%s", c.seed, job, err, stderr)
	}
	return line
}

// settle stops the faults' effects and lets the jobs settle every row.
func (c *campaign) settle(db *ledgerDB) {
	for i := range c.relays {
		if code := c.relays[i].stop(c.t, syscall.SIGTERM); code != 0 {
			c.t.Errorf("seed %d: relay %d exited %d at the end", c.seed, i, code)
		}
	}
	// Claims left SENT by killed relays become UNKNOWN once they are older
	// than the orphan bound: a relay sweeps them at start.
	var sent int
	assert.NilError(c.t, db.QueryRow("SELECT count(*) FROM tx WHERE state IN ('SENT','RECEIVED')").Scan(&sent))
	if sent > 0 {
		c.logf("%d SENT rows left by crashes: waiting for the orphan bound", sent)
		waitSQL(c.t, db, "SELECT count(*)=0 FROM tx WHERE state IN ('SENT','RECEIVED') AND updated_at >= datetime('now', ?)", fmt.Sprintf("-%d seconds", int(orphanAfter.Seconds())+1))
		c.startRelay(0)
		c.relays[0].stop(c.t, syscall.SIGTERM)
	}
	for round := 0; round < 20; round++ {
		var unknown, retry int
		assert.NilError(c.t, db.QueryRow("SELECT count(*) FROM tx WHERE state='UNKNOWN'").Scan(&unknown))
		assert.NilError(c.t, db.QueryRow("SELECT count(*) FROM tx WHERE state='FAILED' AND rsp_code='E902' AND attempts < ?", maxAttempts).Scan(&retry))
		if unknown == 0 && retry == 0 {
			return
		}
		if unknown > 0 {
			waitSQL(c.t, db, "SELECT count(*)=0 FROM tx WHERE state='UNKNOWN' AND updated_at > datetime('now', ?)", "-"+resolveMinAge+" seconds")
			c.runJob("resolve")
		}
		c.runJob("reprocess")
	}
	c.t.Errorf("seed %d: the ledger did not settle in 20 rounds", c.seed)
}

type ledgerRow struct {
	state, rsp string
	response   []byte
	attempts   int
}

// check runs the four checks over this run's history.
func (c *campaign) check(db *ledgerDB) runResult {
	var res runResult
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	if c.pki != nil {
		cfg := c.pki.clientTLS(c.t, &c.pki.relayCli)
		cfg.ServerName = ""
		client.Transport = &http.Transport{Proxy: nil, TLSClientConfig: cfg}
	}
	s, err := channel.FetchStatsVia(context.Background(), client, c.coreURL)
	assert.NilError(c.t, err)
	rows := map[string]ledgerRow{}
	rs, err := db.Query("SELECT guid, state, COALESCE(rsp_code,''), response, attempts FROM tx WHERE guid NOT LIKE 'OLD%'")
	assert.NilError(c.t, err)
	for rs.Next() {
		var g string
		var r ledgerRow
		assert.NilError(c.t, rs.Scan(&g, &r.state, &r.rsp, &r.response, &r.attempts))
		rows[g] = r
	}
	rs.Close()
	var old int
	assert.NilError(c.t, db.QueryRow("SELECT count(*) FROM tx WHERE guid LIKE 'OLD%'").Scan(&old))
	if old != 0 {
		// purge ran at least once in most runs; with none, the seed rows stay.
		c.logf("old rows left: %d (purge runs: %d)", old, c.n.purge.Load())
	}

	violate := func(kind, g, format string, args ...any) {
		res.violations = append(res.violations, fmt.Sprintf("%s: GUID %s: %s\n%s", kind, g, fmt.Sprintf(format, args...), c.explain(g, rows, s)))
	}
	res.guids = len(c.hist.order)
	for _, g := range c.hist.order {
		applied, posts := s.AppliedByGUID[g], s.ByGUID[g]
		r, inLedger := rows[g]
		if applied > 0 {
			res.applied++
		}
		// 1. no double application.
		if applied > 1 {
			violate("double", g, "applied %d times by the core", applied)
		}
		if posts > 1 {
			res.receivedTwice++
			if applied <= 1 && inLedger && r.attempts >= 2 {
				res.explained++ // resent after a definite "not found" (a lost rejection, a DROP, a core killed before applying)
			} else {
				violate("double", g, "POSTed %d times without a reclaim to explain it (attempts %d)", posts, r.attempts)
			}
		}
		// 2. nothing lost.
		var codes []string
		for _, e := range c.hist.events[g] {
			codes = append(codes, e.code)
		}
		switch {
		case !inLedger:
			if applied > 0 || anyCode(codes, func(cd string) bool { return cd != "-" && cd != "E902" }) {
				violate("lost", g, "not in the ledger (core applied %d, channel got %v)", applied, codes)
			} else {
				res.neverAccepted++
			}
		case r.state == "DONE":
			res.done++
		case r.state == "FAILED" && r.rsp == "E902" && r.attempts >= maxAttempts && applied == 0:
			res.exhausted++
		default:
			violate("lost", g, "row ends %s/%s attempts %d (core applied %d)", r.state, r.rsp, r.attempts, applied)
		}
		// 3. truthful replies.
		var first []byte
		for _, e := range c.hist.events[g] {
			switch {
			case e.code == "0000":
				res.ok0000++
				if applied == 0 {
					violate("reply", g, "channel %d got 0000 but the core never applied it", e.channel)
				}
				if first == nil {
					first = e.reply
				} else if string(first) != string(e.reply) {
					violate("reply", g, "two different 0000 replies:\n    %s\n    %s", first, e.reply)
				}
				if inLedger && r.state == "DONE" && string(r.response) != string(e.reply) {
					violate("reply", g, "0000 reply differs from the stored reply:\n    %s\n    %s", e.reply, r.response)
				}
			case e.code == "E904" || e.code == "E900":
				violate("reply", g, "channel %d got %s for a faithful retransmission", e.channel, e.code)
			case (strings.HasPrefix(e.code, "B2") || e.code == "E500" || e.code == "E905") && applied > 0:
				violate("core", g, "channel %d was told %s but the core applied it", e.channel, e.code)
			}
		}
		// 4. consistency with the core.
		if inLedger && r.state == "DONE" && r.rsp == "0000" && applied == 0 {
			violate("core", g, "ledger says DONE/0000 but the core never applied it")
		}
		if applied > 0 && !(inLedger && r.state == "DONE" && r.rsp == "0000") {
			violate("core", g, "the core applied it but the ledger says %s/%s", r.state, r.rsp)
		}
		// 5. every change on the record: each reclaim has its event, and
		// once a row has events, every later change has one (the first
		// send's claim and outcome are the only changes without), so the
		// last event that changed the row names its state now.
		if inLedger {
			ev := eventsOf(c.t, db, g)
			if ev.reclaims != r.attempts-1 {
				violate("events", g, "%d reclaim events for attempts %d", ev.reclaims, r.attempts)
			}
			if ev.lastTo != "" && ev.lastTo != r.state {
				violate("events", g, "the last change on the record is to %s, the row is %s", ev.lastTo, r.state)
			}
		}
	}
	return res
}

// recorded is what a GUID's events say.
type recorded struct {
	reclaims int
	lastTo   string // to_state of the last event that changed the row
}

func eventsOf(t *testing.T, db *ledgerDB, g string) recorded {
	var out recorded
	rs, err := db.Query("SELECT action, COALESCE(to_state, '') FROM tx_event WHERE guid=? ORDER BY id", g)
	assert.NilError(t, err)
	defer rs.Close()
	for rs.Next() {
		var action, to string
		assert.NilError(t, rs.Scan(&action, &to))
		if action == "reclaim" {
			out.reclaims++
		}
		if to != "" {
			out.lastTo = to
		}
	}
	return out
}

// settleAction is two operators deciding about one row in doubt, on true
// evidence from the core's team (the fixture's own record): an UNKNOWN row
// past --min-age is proposed applied (with the core's reference from a
// lookup) or not-applied, a FAILED/E902 row abandoned; a second operator
// approves at once. The relays and the jobs race them; the fence decides.
func (c *campaign) settleAction() {
	// Under the power-loss schedule the query must not hold the ledger
	// open across a cut (the test's process is not killed).
	c.kids.power.RLock()
	db := openDB(c.t, c.db)
	var g, state string
	err := db.QueryRow("SELECT guid, state FROM tx WHERE guid NOT LIKE 'OLD%' AND ((state='UNKNOWN' AND updated_at <= datetime('now', ?)) OR (state='FAILED' AND rsp_code='E902')) ORDER BY random() LIMIT 1",
		"-"+resolveMinAge+" seconds").Scan(&g, &state)
	db.Close()
	c.kids.power.RUnlock()
	if err != nil {
		return // nothing in doubt now, or the database is down
	}
	args := []string{"propose", g, "--reason", "campaign: the core's own record"}
	switch {
	case state == "FAILED":
		args = append(args, "--as", "abandoned")
	case c.coreApplied(g):
		ref, balance, at, ok := c.coreLookup(g)
		if !ok {
			return
		}
		args = append(args, "--as", "applied", "--core-ref", ref, "--balance", balance, "--processed-at", at)
	default:
		args = append(args, "--as", "not-applied")
	}
	out, code := c.settleRun(kim, args...)
	if code != 0 {
		c.n.settleRefused.Add(1)
		c.logf("settle %s: exit %d: %s", g, code, out)
		return
	}
	c.n.settleProposed.Add(1)
	m := proposedRE.FindStringSubmatch(lastLine(out))
	if m == nil {
		c.t.Errorf("seed %d: settle propose printed %q", c.seed, out)
		return
	}
	out, code = c.settleRun(lee, "approve", m[1])
	if code == 0 {
		c.n.settleApproved.Add(1)
	} else {
		c.n.settleRefused.Add(1)
	}
	c.logf("settle %s (%s): %s: exit %d %s", g, state, args[len(args)-1], code, strings.TrimSpace(out))
}

// settleRun runs settle as operator who (their own account, through sudo
// as the ledger's owner, as the runbook says) and returns its output and
// exit status; a usage error (exit 2) is a bug of the campaign or of
// settle.
//
// On a PostgreSQL ledger of the run's own (not the HA one) each operator
// connects as a role of their own instead, a member of dedup_operator,
// and the database decides who they are.
func (c *campaign) settleRun(who string, args ...string) (string, int) {
	var cmd *exec.Cmd
	if c.pg != nil {
		c.operatorRoles.Do(func() {
			for _, r := range []string{kim, lee} {
				pgtest.Exec(c.t, c.db, "CREATE ROLE "+r+" LOGIN IN ROLE dedup_operator")
			}
		})
		db := strings.Replace(c.db, "postgres://postgres@", "postgres://"+who+"@", 1)
		cmd = exec.Command(bin("settle"), append(append([]string{"--db", db}, c.dbFlags...), args...)...)
	} else {
		ownLedger(c.t, c.db)
		argv := append(append([]string{bin("settle"), "--db", c.db}, c.dbFlags...), args...)
		cmd = exec.Command("runuser", append([]string{"-u", who, "--", "sudo", "-S", "-p", "", "-u", ledgerOwner}, argv...)...)
		cmd.Stdin = strings.NewReader("pw-" + who + "\n")
	}
	var outBuf strings.Builder
	cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
	cut, err := c.runChild(cmd)
	out := outBuf.String()
	if cut {
		return out, -1 // killed by a power cut, or not started during one
	}
	code := 0
	if err != nil {
		code = -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
	}
	if code == 2 {
		c.t.Errorf("seed %d: settle %v: usage error: %s", c.seed, args, out)
	}
	return out, code
}

// coreClient is an HTTP client for the fixture core's own endpoints.
func (c *campaign) coreHTTP() *http.Client {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	if c.pki != nil {
		cfg := c.pki.clientTLS(c.t, &c.pki.relayCli)
		cfg.ServerName = ""
		client.Transport = &http.Transport{Proxy: nil, TLSClientConfig: cfg}
	}
	return client
}

// coreApplied is the core's team's answer: did the core apply g?
func (c *campaign) coreApplied(g string) bool {
	s, err := channel.FetchStatsVia(context.Background(), c.coreHTTP(), c.coreURL)
	return err == nil && s.AppliedByGUID[g] > 0
}

// coreLookup reads the core's record of an applied g.
func (c *campaign) coreLookup(g string) (ref, balance, at string, ok bool) {
	resp, err := c.coreHTTP().Get(c.coreURL + "/v1/transfers/" + g)
	if err != nil {
		return "", "", "", false
	}
	defer resp.Body.Close()
	var a struct {
		Ref         string `json:"ref"`
		Balance     int64  `json:"balance"`
		ProcessedAt string `json:"processed_at"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&a) != nil {
		return "", "", "", false
	}
	return a.Ref, fmt.Sprint(a.Balance), a.ProcessedAt, true
}

func anyCode(codes []string, f func(string) bool) bool {
	for _, c := range codes {
		if f(c) {
			return true
		}
	}
	return false
}

// explain prints a GUID's full history for a violation report.
func (c *campaign) explain(g string, rows map[string]ledgerRow, s *channel.Stats) string {
	var b strings.Builder
	c.hist.mu.Lock()
	defer c.hist.mu.Unlock()
	fmt.Fprintf(&b, "  seed %d, memo %q\n", c.seed, c.hist.memo[g])
	evs := c.hist.events[g]
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	for _, e := range evs {
		fmt.Fprintf(&b, "  %8v channel %d %-6s -> %s %s\n", e.at, e.channel, e.what, e.code, e.detail)
	}
	if r, ok := rows[g]; ok {
		fmt.Fprintf(&b, "  ledger: %s %s attempts=%d response=%q\n", r.state, r.rsp, r.attempts, r.response)
	} else {
		b.WriteString("  ledger: no row\n")
	}
	fmt.Fprintf(&b, "  core: by_guid=%d applied=%d lookups=%d\n", s.ByGUID[g], s.AppliedByGUID[g], s.LookupsByGUID[g])
	return b.String()
}
