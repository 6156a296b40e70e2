package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/icmd"
	"gotest.tools/v3/poll"
)

// A full disk loses nothing: the ledger lives on a small tmpfs of the
// test's own, which fills up under load. Claims that cannot be committed
// are answered E902 and sent to no core; retransmissions of DONE rows are
// still answered from the ledger; the relay keeps running, says so once
// (not per request), and serves normally again as soon as space is freed.
// After resolve and reprocess every transfer is resolved, none applied twice,
// every 0000 true.
func TestFullDiskLosesNothing(t *testing.T) {
	if ledgerKind != "sqlite" {
		t.Fatal("this test is about the SQLite ledger's file system; run it with the default ledger")
	}
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts a tmpfs and must run as root (CI does)")
	}
	t.Parallel()
	dir := t.TempDir()
	run(t, "mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", dir)
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	db := filepath.Join(dir, "relay.db")
	c := startCore(t, "--quiet")
	r := startRelay(t, db, c.url)

	first := newGUID()
	firstTg := telegram(t, first, amount(1))
	firstReply := send(t, r.addr, firstTg)
	assert.Equal(t, code(firstReply), "0000")

	// Fill the file system, leaving the ledger no room to grow.
	filler := filepath.Join(dir, "filler")
	out, _ := exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=4k").CombinedOutput()
	assert.Assert(t, strings.Contains(string(out), "No space left"), "dd did not fill the file system: %s", out)

	var mu sync.Mutex
	sent := map[string][]byte{}      // telegram per GUID
	replies := map[string][]string{} // every code each GUID got
	ask := func(g string) string {
		reply := send(t, r.addr, sent[g])
		mu.Lock()
		replies[g] = append(replies[g], code(reply))
		mu.Unlock()
		return code(reply)
	}
	// Load until claims fail for want of space.
	var e902 int
	for i := 0; i < 3000 && e902 < 20; i++ {
		g := newGUID()
		sent[g] = telegram(t, g, amount(1))
		if ask(g) == "E902" {
			e902++
		}
	}
	assert.Assert(t, e902 >= 20, "the ledger never filled up")
	// A retransmission of a finished transfer is still answered, byte for byte.
	assert.Equal(t, string(send(t, r.addr, firstTg)), string(firstReply))
	r.waitLog(t, "the ledger cannot be written")
	assert.Equal(t, strings.Count(r.log(), "the ledger cannot be written"), 1, "the full disk was logged more than once within a minute")
	for g := range sent {
		if len(replies[g]) == 1 && replies[g][0] == "E902" && getRow(t, openDB(t, db), g) == nil {
			assert.Equal(t, c.stats(t).ByGUID[g], 0, "%s reached the core without a committed claim", g)
		}
	}

	// Space returns: the same relay serves normally again.
	assert.NilError(t, os.Remove(filler))
	var again string
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		g := newGUID()
		sent[g] = telegram(t, g, amount(1))
		if again = ask(g); again != "0000" {
			return poll.Continue("got %s", again)
		}
		return poll.Success()
	}, poll.WithTimeout(20*time.Second), poll.WithDelay(100*time.Millisecond))
	// Every channel retransmits what it did not get a final answer for.
	for g, codes := range replies {
		if last := codes[len(codes)-1]; last == "E902" || last == "E901" || last == "E903" {
			ask(g)
		}
	}
	select {
	case <-r.exited:
		t.Fatalf("the relay exited: %v", r.err)
	default:
	}
	r.stop(t, 15)

	// Settle whatever is left, then check the whole history.
	ldb := openDB(t, db)
	waitSQL(t, ldb, "SELECT count(*)=0 FROM tx WHERE state='UNKNOWN' AND updated_at > datetime('now', '-2 seconds')")
	icmd.RunCmd(icmd.Command(bin("resolve"), "--db", db, "--core", c.url, "--min-age", "2")).Assert(t, icmd.Success)
	icmd.RunCmd(icmd.Command(bin("reprocess"), "--db", db, "--core", c.url)).Assert(t, icmd.Success)
	stats := c.stats(t)
	var ok, failed int
	for g, codes := range replies {
		assert.Check(t, stats.AppliedByGUID[g] <= 1, "%s applied %d times", g, stats.AppliedByGUID[g])
		for _, cd := range codes {
			if cd == "0000" {
				assert.Check(t, stats.AppliedByGUID[g] == 1, "%s answered 0000 but not applied", g)
			}
		}
		row := getRow(t, ldb, g)
		if row == nil {
			assert.Check(t, stats.ByGUID[g] == 0, "%s reached the core but has no row", g)
			failed++
			continue
		}
		assert.Check(t, row.State.String == "DONE", "%s left %s after resolve and reprocess", g, row.State.String)
		assert.Check(t, (row.RspCode.String == "0000") == (stats.AppliedByGUID[g] == 1), "%s: ledger %s, core applied %d", g, row.RspCode.String, stats.AppliedByGUID[g])
		ok++
	}
	t.Logf("full disk: %d transfers, %d E902 while full, %d ended DONE, %d never claimed (answered E902, nothing sent)", len(replies), e902, ok, failed)
}
