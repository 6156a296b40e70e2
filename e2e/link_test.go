package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/icmd"

	"dedup/internal/channel"
)

// nft runs an nftables command inside n.
func (n *netns) nft(t *testing.T, args ...string) {
	t.Helper()
	run(t, append([]string{"ip", "netns", "exec", n.name, "nft"}, args...)...)
}

// Rule 12: a link to the core that breaks and heals late never delivers a
// request the relay gave up on. The core runs on a host of its own (a
// network namespace); under load from 8 channels the link breaks for 10 s
// and heals; then the runbook runs at once (resolve --min-age 3, which
// exceeds the fixture's processing time plus --timeout 1; reprocess) and
// every channel retransmits every GUID. 40 s after the heal, by when a
// kernel that kept the abandoned requests would have delivered them, the
// core has applied every GUID at most once.
//
// Two shapes: a path-MTU black hole (every data segment towards the core
// dropped, SYNs and ACKs pass: requests are written on fresh connections
// and never acknowledged), and a full partition (both directions dropped:
// requests written on pooled keep-alive connections). With the graceful
// close of the relay before rule 12, both applied GUIDs twice.
func TestBrokenLinkToTheCoreDeliversNothingLate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test makes network namespaces and must run as root (CI does)")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatal("nft not found: scripts/setup.sh installs Debian's nftables")
	}
	for i, shape := range []string{"black-hole", "partition"} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			brokenLink(t, shape, 10+i)
		})
	}
}

func brokenLink(t *testing.T, shape string, subnet int) {
	tag := fmt.Sprintf("%d%d", os.Getpid()%10000, subnet)
	rh := newNetns(t, "dd-lr-"+tag)
	ch := newNetns(t, "dd-lc-"+tag)
	coreIP := fmt.Sprintf("10.232.%d.1", subnet)
	link(t, ch, coreIP+"/24", rh, fmt.Sprintf("10.232.%d.2/24", subnet), "vlc"+tag, "vlr"+tag)
	coreURL := "http://" + coreIP + ":9201"
	path := t.TempDir() + "/relay.db"

	start(t, "/usr/sbin/ip", ch.cmd("fixturecore", "--listen", "0.0.0.0:9201", "--quiet")[1:]...)
	r := start(t, "/usr/sbin/ip", rh.cmd("relay", "--db", path, "--listen", "127.0.0.1:0", "--core", coreURL,
		"--timeout", "1", "--connect-timeout", "1", "--orphan-after", "9")[1:]...)
	stats := func() *channel.Stats {
		s, err := channel.FetchStatsVia(context.Background(), ch.httpClient(), coreURL)
		assert.NilError(t, err)
		return s
	}

	ctx, cancel := context.WithCancel(context.Background())
	loadDone := make(chan *channel.LoadReport, 1)
	go func() {
		rep, err := channel.Load(ctx, channel.LoadConfig{Relay: r.addr, Conns: 8, Duration: 5 * time.Minute,
			Timeout: 5 * time.Second, From: "11020030004001", To: "11020030004002", Amount: 1, Channel: "LNK", Dial: rh.dial})
		assert.Check(t, err)
		loadDone <- rep
	}()
	time.Sleep(time.Second) // pooled connections exist
	rh.nft(t, "add", "table", "inet", "brk")
	rh.nft(t, "add", "chain", "inet", "brk", "out", "{ type filter hook output priority 0 ; }")
	rh.nft(t, "add", "chain", "inet", "brk", "in", "{ type filter hook input priority 0 ; }")
	if shape == "black-hole" {
		// Data segments only: a SYN (60 bytes with its options) and a bare
		// ACK (52 with timestamps) pass, a request does not.
		rh.nft(t, "add", "rule", "inet", "brk", "out", "ip", "daddr", coreIP, "ip", "length", ">", "60", "drop")
	} else {
		rh.nft(t, "add", "rule", "inet", "brk", "out", "ip", "daddr", coreIP, "drop")
		rh.nft(t, "add", "rule", "inet", "brk", "in", "ip", "saddr", coreIP, "drop")
	}
	time.Sleep(10 * time.Second)
	rh.nft(t, "delete", "table", "inet", "brk") // the link heals
	healed := time.Now()
	cancel()
	rep := <-loadDone
	t.Logf("%s: %d transfers under load, by code %v", shape, rep.Sent, rep.ByCode)
	assert.Assert(t, rep.ByCode["E901"] > 0, "no request was given up on: the fault did not bite")

	// The runbook, at once: resolve, reprocess, and every channel
	// retransmits every GUID.
	job := func(name string, args ...string) {
		argv := rh.cmd(name, append([]string{"--db", path, "--core", coreURL}, args...)...)
		res := icmd.RunCmd(icmd.Command(argv[0], argv[1:]...), icmd.WithTimeout(2*time.Minute))
		t.Logf("%s: exit %d: %s", name, res.ExitCode, strings.TrimSpace(res.Stdout()))
		assert.Check(t, res.ExitCode == 0, res.Stderr())
	}
	time.Sleep(3 * time.Second) // --min-age 3 from the heal: the rows given up on at its end are old enough
	job("resolve", "--min-age", "3")
	job("reprocess", "--timeout", "1", "--connect-timeout", "1")
	db := openDB(t, path)
	rs, err := db.Query("SELECT request FROM tx")
	assert.NilError(t, err)
	var reqs [][]byte
	for rs.Next() {
		var b []byte
		assert.NilError(t, rs.Scan(&b))
		reqs = append(reqs, b)
	}
	assert.NilError(t, rs.Err())
	rs.Close()
	var wg sync.WaitGroup
	work := make(chan []byte)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tg := range work {
				c, err := rh.dial(r.addr, 5*time.Second)
				if err != nil {
					continue
				}
				conn := channel.NewConn(c, 10*time.Second)
				conn.RoundTrip(tg)
				conn.Close()
			}
		}()
	}
	for _, tg := range reqs {
		work <- tg
	}
	close(work)
	wg.Wait()

	// Whatever a kernel still held would have arrived by now.
	time.Sleep(time.Until(healed.Add(40 * time.Second)))
	s := stats()
	twice := 0
	for g, n := range s.AppliedByGUID {
		if n > 1 {
			twice++
			t.Errorf("%s applied %d times", g, n)
		}
	}
	t.Logf("%s: %d GUIDs in the ledger, %d applied by the core, %d applied twice", shape, len(reqs), len(s.AppliedByGUID), twice)
}
