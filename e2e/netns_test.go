package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
	"gotest.tools/v3/icmd"
	"gotest.tools/v3/poll"

	"dedup/internal/channel"
	"dedup/internal/testbed/pgtest"
	"dedup/internal/testbed/testpki"
	"dedup/lhstd"
)

// netns is a network namespace made by a test, removed at its end.
type netns struct{ name string }

func run(t *testing.T, argv ...string) {
	t.Helper()
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	assert.NilError(t, err, "%v: %s", argv, out)
}

func newNetns(t *testing.T, name string) *netns {
	t.Helper()
	exec.Command("ip", "netns", "del", name).Run() // a leftover of a killed run
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return &netns{name}
}

// link joins a and b with a veth pair, giving a the address aIP and b bIP
// (CIDR notation, one /24).
func link(t *testing.T, a *netns, aIP string, b *netns, bIP, ifa, ifb string) {
	t.Helper()
	run(t, "ip", "link", "add", ifa, "type", "veth", "peer", "name", ifb)
	run(t, "ip", "link", "set", ifa, "netns", a.name)
	run(t, "ip", "link", "set", ifb, "netns", b.name)
	run(t, "ip", "-n", a.name, "addr", "add", aIP, "dev", ifa)
	run(t, "ip", "-n", b.name, "addr", "add", bIP, "dev", ifb)
	run(t, "ip", "-n", a.name, "link", "set", ifa, "up")
	run(t, "ip", "-n", b.name, "link", "set", ifb, "up")
}

// dial connects to addr from inside the namespace: the socket is created
// on a thread switched into it (setns), and keeps belonging to it after
// the thread switches back.
func (n *netns) dial(addr string, timeout time.Duration) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + n.name)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := setns(target.Fd()); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setns %s: %w", n.name, err)
	}
	c, derr := net.DialTimeout("tcp", addr, timeout)
	if err := setns(orig.Fd()); err != nil {
		// This thread is stuck in the namespace: keep it locked so that
		// it dies with the goroutine instead of serving others.
		return nil, fmt.Errorf("setns back: %w", err)
	}
	runtime.UnlockOSThread()
	return c, derr
}

func setns(fd uintptr) error { return unix.Setns(int(fd), unix.CLONE_NEWNET) }

// httpClient reaches servers inside the namespace.
func (n *netns) httpClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return n.dial(addr, 5*time.Second) }}}
}

// cmd is the argv that runs binary name inside n.
func (n *netns) cmd(name string, args ...string) []string {
	return append([]string{"/usr/sbin/ip", "netns", "exec", n.name, bin(name)}, args...)
}

// Two hosts, for real: two relays, each in a network namespace of its own
// (its own host), share one PostgreSQL ledger that runs, with the fixture
// core, in a third namespace reached over veth links. Both relays are
// driven at once with storms of the same GUIDs (each GUID sent to both,
// concurrently) while fresh transfers keep flowing; then one relay is
// killed with SIGKILL mid-load while the other keeps serving. The
// survivor's sweep hands the dead relay's claims to resolve, which resolves
// them by inquiry, and reprocess sends what surely never arrived.
func TestTwoHostsShareOnePostgresLedger(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes network namespaces and must run as root (CI does)")
	}
	tag := fmt.Sprintf("%d", os.Getpid()%100000)
	dbh := newNetns(t, "dd-db-"+tag)
	h1 := newNetns(t, "dd-r1-"+tag)
	h2 := newNetns(t, "dd-r2-"+tag)
	link(t, dbh, "10.231.1.1/24", h1, "10.231.1.2/24", "vd1-"+tag, "vr1-"+tag)
	link(t, dbh, "10.231.2.1/24", h2, "10.231.2.2/24", "vd2-"+tag, "vr2-"+tag)

	// The database host serves TLS only, with a certificate of the test's
	// own CA; the relays verify it (sslmode=verify-full), as a host that is
	// not loopback requires.
	pki := newTestPKI(t)
	dbCert := pki.issue(t, testpki.Leaf{Name: "db", CN: "db.bank.internal",
		IPs: []net.IP{net.ParseIP("10.231.1.1"), net.ParseIP("10.231.2.1")}})
	pg, err := pgtest.Start(pgtest.Options{Netns: dbh.name, Host: "*",
		TLS: &pgtest.TLS{Cert: dbCert.Cert, Key: dbCert.Key, CA: pki.ca.File}})
	assert.NilError(t, err)
	t.Cleanup(pg.Remove)
	dbName, err := pg.NewDatabase()
	assert.NilError(t, err)
	ledgerFor := map[*netns]string{h1: pg.URLAt("10.231.1.1", dbName), h2: pg.URLAt("10.231.2.1", dbName)}
	assert.Assert(t, strings.Contains(ledgerFor[h1], "sslmode=verify-full"), ledgerFor[h1])
	// Anything short of a verified server is refused for this host before
	// a byte is sent, naming --db and the fix.
	for _, mode := range []string{"", "?sslmode=prefer", "?sslmode=require", "?sslmode=disable"} {
		url := fmt.Sprintf("postgres://postgres@10.231.1.1:%d/%s%s", pg.Port, dbName, mode)
		argv := h1.cmd("relay", "--db", url, "--listen", "10.231.1.2:0")
		res := icmd.RunCmd(icmd.Command(argv[0], argv[1:]...), icmd.WithTimeout(30*time.Second))
		assert.Equal(t, res.ExitCode, 2, "%s: %s", url, res.Combined())
		assert.Assert(t, strings.Contains(res.Stderr(), "--db:") && strings.Contains(res.Stderr(), "sslmode=verify-full"), res.Stderr())
	}
	coreFor := map[*netns]string{h1: "http://10.231.1.1:9201", h2: "http://10.231.2.1:9201"}

	start(t, "/usr/sbin/ip", dbh.cmd("fixturecore", "--listen", "0.0.0.0:9201", "--slow", "1.2", "--quiet")[1:]...)
	startRelayIn := func(h *netns, ip string) *proc {
		return start(t, "/usr/sbin/ip", h.cmd("relay", "--db", ledgerFor[h], "--listen", ip+":9101", "--core", coreFor[h],
			"--timeout", "1", "--connect-timeout", "0.3", "--orphan-after", "8.3")[1:]...)
	}
	r1 := startRelayIn(h1, "10.231.1.2")
	r2 := startRelayIn(h2, "10.231.2.2")
	relays := []string{"10.231.1.2:9101", "10.231.2.2:9101"}

	var mu sync.Mutex
	replies := map[string][][]byte{} // every reply each GUID got
	sendTo := func(addr string, tg []byte) []byte {
		c, err := dbh.dial(addr, 5*time.Second)
		if err != nil {
			return nil
		}
		conn := channel.NewConn(c, 5*time.Second)
		defer conn.Close()
		reply, err := conn.RoundTrip(tg)
		if err != nil {
			return nil
		}
		mu.Lock()
		g, _ := lhstd.ParseHeader(tg)
		replies[g.GUID] = append(replies[g.GUID], reply)
		mu.Unlock()
		return reply
	}
	telegrams := map[string][]byte{}
	mkTelegram := func(i int, m string) []byte {
		g := fmt.Sprintf("%sNS%022d", time.Now().Format("20060102"), i)
		tg := telegram(t, g, memo(m), amount(int64(1+i%997)))
		mu.Lock()
		telegrams[g] = tg
		mu.Unlock()
		return tg
	}

	// Storms: each GUID sent 4 times to each relay, all at once.
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		tg := mkTelegram(i, "storm")
		for k := 0; k < 8; k++ {
			wg.Add(1)
			go func() { defer wg.Done(); sendTo(relays[k%2], tg) }()
		}
	}
	wg.Wait()

	// Steady load on both relays, with slow transfers in flight, then
	// SIGKILL relay 1 in the middle of it.
	var seq atomic.Int64
	seq.Store(1000)
	var afterKill atomic.Int64
	var killed atomic.Bool
	ctx, stop := context.WithCancel(context.Background())
	for ch := 0; ch < 8; ch++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(seq.Add(1))
				m := "load"
				if i%5 == 0 {
					m = "SLOW"
				}
				tg := mkTelegram(i, m)
				for try := 0; try < 3; try++ {
					addr := relays[(ch+try)%2]
					reply := sendTo(addr, tg)
					if reply != nil && killed.Load() && addr == relays[1] && code(reply) == "0000" {
						afterKill.Add(1)
					}
					if reply != nil && code(reply) != "E903" && code(reply) != "E902" {
						break
					}
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond) // load runs; SLOW transfers are in flight on both
	r1.kill()
	killed.Store(true)
	time.Sleep(2 * time.Second) // the survivor keeps serving
	stop()
	wg.Wait()
	assert.Assert(t, afterKill.Load() > 0, "the surviving relay applied nothing after the other was killed")

	ldb := openDB(t, pg.SocketURL(dbName))
	// The dead relay's claims are swept by the survivor once older than
	// --orphan-after (its sweep runs every 10 s).
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		var n int
		assert.NilError(t, ldb.QueryRow("SELECT count(*) FROM tx WHERE state IN ('SENT','RECEIVED')").Scan(&n))
		if n == 0 {
			return poll.Success()
		}
		return poll.Continue("%d SENT rows not yet swept", n)
	}, poll.WithTimeout(40*time.Second), poll.WithDelay(500*time.Millisecond))
	r2.waitLog(t, "orphan sweep")

	// resolve's --min-age 2 must have passed for the newest UNKNOWN rows.
	waitSQL(t, ldb, "SELECT count(*)=0 FROM tx WHERE state='UNKNOWN' AND updated_at > datetime('now', '-2 seconds')")
	jobIn := func(name string, args ...string) *icmd.Result {
		argv := h2.cmd(name, append([]string{"--db", ledgerFor[h2], "--core", coreFor[h2]}, args...)...)
		res := icmd.RunCmd(icmd.Command(argv[0], argv[1:]...), icmd.WithTimeout(120*time.Second))
		t.Logf("%s: exit %d: %s", name, res.ExitCode, strings.TrimSpace(res.Stdout()))
		res.Assert(t, icmd.Success)
		return res
	}
	jobIn("resolve", "--min-age", "2")
	jobIn("reprocess", "--max-attempts", "3")

	// Checks against the core's own record.
	stats, err := channel.FetchStatsVia(context.Background(), dbh.httpClient(), "http://127.0.0.1:9201")
	assert.NilError(t, err)
	rows := rowsSnapshot(t, ldb)
	var posts, applied, ok0000, unknown int
	for g := range telegrams {
		r, inLedger := rows[g]
		posts += stats.ByGUID[g]
		applied += stats.AppliedByGUID[g]
		assert.Check(t, stats.AppliedByGUID[g] <= 1, "%s applied %d times", g, stats.AppliedByGUID[g])
		if !inLedger {
			assert.Check(t, stats.ByGUID[g] == 0, "%s POSTed without a row", g)
			continue
		}
		assert.Check(t, stats.ByGUID[g] <= r.Attempts, "%s POSTed %d times for %d claims", g, stats.ByGUID[g], r.Attempts)
		switch r.State.String {
		case "DONE":
			if r.RspCode.String == "0000" {
				assert.Check(t, stats.AppliedByGUID[g] == 1, "%s DONE/0000 but the core did not apply it", g)
			} else {
				assert.Check(t, stats.AppliedByGUID[g] == 0, "%s DONE/%s but the core applied it", g, r.RspCode.String)
			}
		case "FAILED":
			assert.Check(t, stats.AppliedByGUID[g] == 0, "%s FAILED but applied", g)
		case "UNKNOWN":
			unknown++
		default:
			t.Errorf("%s left in state %s", g, r.State.String)
		}
		for _, reply := range replies[g] {
			if code(reply) == "0000" {
				ok0000++
				assert.Check(t, stats.AppliedByGUID[g] == 1, "%s answered 0000 but not applied", g)
				assert.Check(t, string(reply) == string(r.Response), "%s: a 0000 reply differs from the stored one", g)
			}
		}
	}
	assert.Equal(t, unknown, 0, "UNKNOWN rows left after resolve")
	t.Logf("two hosts: %d GUIDs, %d POSTs, %d applied, %d 0000 replies, %d applied by the survivor after the kill; 0 applied twice",
		len(telegrams), posts, applied, ok0000, afterKill.Load())
}

// The database fails, the money doesn't: PostgreSQL crashes (immediate
// stop) under a relay. While it is down, new GUIDs get E902 and reach no
// core; once it is back the relay serves again without a restart, and
// everything comes to rest with nothing applied twice.
func TestPostgresDownNewGUIDsGetE902AndRelayServesAgain(t *testing.T) {
	t.Parallel()
	pg, db := ownPostgres(t)
	c := startCore(t)
	r := startRelay(t, db, c.url)

	before := newGUID()
	tgBefore := telegram(t, before)
	assert.Equal(t, code(send(t, r.addr, tgBefore)), "0000")

	assert.NilError(t, pg.StopServer("immediate"))
	var down []string
	for i := 0; i < 5; i++ {
		g := newGUID()
		down = append(down, g)
		tg := telegram(t, g)
		assert.Equal(t, string(send(t, r.addr, tg)), string(expectReply(tg, "E902", nil)), "a new GUID was not refused while the ledger was down")
	}
	for _, g := range down {
		assert.Equal(t, c.stats(t).ByGUID[g], 0, "%s reached the core without a committed claim", g)
	}
	assert.NilError(t, pg.StartServer())

	// The same relay process serves again: the first transfer after the
	// restart may still meet a pooled connection that died with the server.
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if cd := code(send(t, r.addr, telegram(t, down[0]))); cd != "0000" {
			return poll.Continue("got %s", cd)
		}
		return poll.Success()
	}, poll.WithTimeout(30*time.Second), poll.WithDelay(200*time.Millisecond))
	for _, g := range down[1:] {
		assert.Equal(t, code(send(t, r.addr, telegram(t, g))), "0000")
	}
	// A retransmission of the transfer from before the crash is answered
	// from the ledger: the committed row survived.
	assert.Equal(t, code(send(t, r.addr, tgBefore)), "0000")
	s := c.stats(t)
	for _, g := range append(down, before) {
		assert.Equal(t, s.AppliedByGUID[g], 1, "%s", g)
	}
	ldb := openDB(t, db)
	for _, g := range down {
		assert.Equal(t, getRow(t, ldb, g).State.String, "DONE")
	}
}
