package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/icmd"
	"gotest.tools/v3/poll"
)

// buildTestRelay builds one of the tests' deliberately broken relays
// (e2e/testdata/NAME: never built by go build ./..., never released).
func buildTestRelay(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	args := []string{"build", "-o", out}
	if os.Getenv("DEDUP_E2E_RACE") != "" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./e2e/testdata/"+name)...)
	cmd.Dir = ".."
	b, err := cmd.CombinedOutput()
	assert.NilError(t, err, string(b))
	return out
}

// processState is the state letter of /proc/PID/stat ('T': stopped).
func processState(t *testing.T, pid int) byte {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	assert.NilError(t, err)
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return s[i+2]
}

// A holder frozen between its claim and its send (a paused VM, a stop
// signal) for longer than --orphan-after + --min-age: meanwhile a second
// relay's sweep, resolve and reprocess settle the transfer and send it.
// When the frozen relay resumes, its claim's lease is long over: it writes
// nothing to the core, and the core applies the transfer exactly once.
//
// The relay under test is e2e/testdata/frozenrelay (it stops itself with
// SIGSTOP after committing the claim of a FREEZE transfer). The same
// scenario with its --no-lease (the relay's Lease 0) must apply the
// transfer twice: the proof that this test can fail. Both run
// with the core over http and over https with client certificates: the
// lease must hold whatever wraps the connection.
func TestFrozenHolderNeverSendsItsStaleClaim(t *testing.T) {
	t.Parallel()
	frozenBin := buildTestRelay(t, "frozenrelay")
	for _, tc := range []struct {
		name        string
		noLease     bool
		https       bool
		wantApplied int
	}{
		{"with the lease, http", false, false, 1},
		{"with the lease, https", false, true, 1},
		{"without the lease (proof the test can fail), http", true, false, 2},
		{"without the lease (proof the test can fail), https", true, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := startCore(t, "--quiet")
			var tlsArgs []string
			if tc.https {
				p := newTestPKI(t)
				c = startTLSCore(t, p, true, "--quiet")
				tlsArgs = p.coreArgs()
			}
			db := tempDB(t)
			timing := append([]string{"--timeout", "1", "--connect-timeout", "0.3", "--orphan-after", "8.3"}, tlsArgs...)
			args := append([]string{"--db", db, "--listen", "127.0.0.1:0", "--core", c.url}, timing...)
			if tc.noLease {
				args = append([]string{"--no-lease"}, args...)
			}
			frozen := start(t, frozenBin, args...)
			startRelay(t, db, c.url, timing...) // sweeps the frozen relay's claim

			g := newGUID()
			tg := telegram(t, g, memo("FREEZE before send"))
			go func() {
				conn, err := dialRelay(frozen.addr)
				if err == nil {
					conn.RoundTrip(tg) // no answer while frozen; the channel gives up
					conn.Close()
				}
			}()
			ldb := openDB(t, db)
			waitState(t, ldb, g, "SENT", 10*time.Second)
			poll.WaitOn(t, func(poll.LogT) poll.Result {
				if processState(t, frozen.cmd.Process.Pid) == 'T' {
					return poll.Success()
				}
				return poll.Continue("the relay has not frozen yet")
			}, poll.WithTimeout(10*time.Second), poll.WithDelay(20*time.Millisecond))

			// The other relay's sweep turns the claim into UNKNOWN, resolve
			// finds the transfer not applied, reprocess sends it.
			waitState(t, ldb, g, "UNKNOWN", 30*time.Second)
			waitSQL(t, ldb, "SELECT count(*)=0 FROM tx WHERE guid=? AND updated_at > datetime('now', '-2 seconds')", g)
			res := runJob(t, "resolve", append([]string{"--db", db, "--core", c.url, "--min-age", "2"}, tlsArgs...)...)
			res.Assert(t, icmd.Success)
			assert.Equal(t, getRow(t, ldb, g).State.String, "FAILED")
			res = runJob(t, "reprocess", append([]string{"--db", db, "--core", c.url, "--max-attempts", "3"}, tlsArgs...)...)
			res.Assert(t, icmd.Success)
			assert.Equal(t, getRow(t, ldb, g).State.String, "DONE")
			assert.Equal(t, c.stats(t).AppliedByGUID[g], 1)

			// The frozen relay resumes.
			assert.NilError(t, frozen.cmd.Process.Signal(syscall.SIGCONT))
			frozen.waitLog(t, "guid="+g)
			assert.Equal(t, c.stats(t).AppliedByGUID[g], tc.wantApplied, "applications of the transfer")
			if tc.wantApplied == 1 {
				// Its lease expired; on PostgreSQL its confirmation on the
				// ledger (rule 13) finds the claim gone first.
				frozen.waitLog(t, "nothing sent")
				assert.Equal(t, c.stats(t).ByGUID[g], 1, "the frozen relay's request reached the core")
			}
			row := getRow(t, ldb, g)
			assert.Equal(t, row.State.String, "DONE", "the stale holder changed the row")
			assert.Equal(t, row.Attempts, 2)
		})
	}
}
