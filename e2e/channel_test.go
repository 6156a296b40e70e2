package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/icmd"

	"dedup/internal/channel"
)

// channel load at 64 connections with 10 % retransmissions: every reply
// 0000 or E903, and the core applied no GUID twice.
func TestChannelLoadAt64ConnectionsHasNoDoubleApplication(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--quiet")
	r := startRelay(t, tempDB(t), c.url)
	res := icmd.RunCmd(icmd.Command(bin("channel"), "load", "--relay", r.addr, "--conns", "64", "--count", "3000",
		"--dup-ratio", "0.1", "--amount", "1", "--core", c.url), icmd.WithTimeout(120*time.Second))
	res.Assert(t, icmd.Success)
	out := res.Stdout()
	assert.Assert(t, strings.Contains(out, "applied_twice=0"), out)
	assert.Assert(t, strings.Contains(out, "sent=3000 "), out)
	assert.Assert(t, !strings.Contains(out, "retransmissions=0 "), "no retransmissions were sent: %s", out)
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "replies:") {
			for _, f := range strings.Fields(line)[1:] {
				assert.Assert(t, strings.HasPrefix(f, "0000=") || strings.HasPrefix(f, "E903="), line)
			}
		}
	}
}

// The double-application check can fail: a core whose /_stats reports
// every GUID applied twice makes channel load report it and exit non-zero.
func TestChannelLoadReportsDoubleApplicationFromStats(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--quiet")
	r := startRelay(t, tempDB(t), c.url)
	doubling := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s := c.stats(t)
		for g := range s.AppliedByGUID {
			s.AppliedByGUID[g] = 2
		}
		json.NewEncoder(w).Encode(s)
	}))
	t.Cleanup(doubling.Close)
	res := icmd.RunCmd(icmd.Command(bin("channel"), "load", "--relay", r.addr, "--conns", "4", "--count", "50",
		"--amount", "1", "--core", doubling.URL), icmd.WithTimeout(60*time.Second))
	res.Assert(t, icmd.Expected{ExitCode: 3, Err: "DOUBLE DEBIT"})
	assert.Assert(t, strings.Contains(res.Stdout(), "applied_twice=50"), res.Stdout())
}

func TestChannelSendPrintsReplyAndExitStatus(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--quiet")
	r := startRelay(t, tempDB(t), c.url)
	g := newGUID()
	res := icmd.RunCmd(icmd.Command(bin("channel"), "send", "--relay", r.addr, "--guid", g, "--raw"))
	res.Assert(t, icmd.Success)
	assert.Assert(t, strings.Contains(res.Stdout(), "0000 applied by the core"), res.Stdout())
	assert.Assert(t, strings.Contains(res.Stdout(), "< 00000109"+g), res.Stdout())
	assert.Assert(t, !strings.Contains(res.Stdout(), "from the relay's ledger"), res.Stdout())
	// A later retransmission (another sent_at) is told apart: its reply
	// carries the first request's sent_at.
	res = icmd.RunCmd(icmd.Command(bin("channel"), "send", "--relay", r.addr, "--guid", g, "--sent-at", "20261129093000"))
	res.Assert(t, icmd.Success)
	assert.Assert(t, strings.Contains(res.Stdout(), "answered from the relay's ledger"), res.Stdout())
	res = icmd.RunCmd(icmd.Command(bin("channel"), "send", "--relay", r.addr, "--amount", "999000000"))
	res.Assert(t, icmd.Expected{ExitCode: 3, Out: "B201"})
	res = icmd.RunCmd(icmd.Command(bin("channel"), "send", "--relay", r.addr, "--guid", "short"))
	res.Assert(t, icmd.Expected{ExitCode: 2, Err: "--guid"})
}

func TestStatsCheckCountsDoubles(t *testing.T) {
	s := &channel.Stats{
		ByGUID:        map[string]int{"a": 1, "b": 2, "c": 3},
		AppliedByGUID: map[string]int{"a": 1, "b": 1, "c": 2},
	}
	cc := s.Check([]string{"a", "b", "c", "d"})
	assert.DeepEqual(t, cc, channel.CoreCheck{GUIDs: 4, Applied: 3, AppliedTwice: 1, ReceivedTwice: 2, Doubles: []string{"c"}})
}

// channel load keeps applying transfers however long it runs: with amounts
// that would drain an account in one direction (1,000 transfers of 150,000
// won against a 100,000,000 opening balance), alternating the direction
// keeps every transfer applied. And when nothing is applied it warns that
// the double-application check is empty.
func TestChannelLoadNeverDrainsAndWarnsWhenNothingApplied(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--quiet")
	r := startRelay(t, tempDB(t), c.url)
	res := icmd.RunCmd(icmd.Command(bin("channel"), "load", "--relay", r.addr, "--conns", "4", "--count", "1000",
		"--amount", "150000", "--core", c.url), icmd.WithTimeout(120*time.Second))
	res.Assert(t, icmd.Success)
	assert.Assert(t, strings.Contains(res.Stdout(), "applied=1000 "), res.Stdout())
	assert.Assert(t, !strings.Contains(res.Stderr(), "warning"), res.Stderr())

	res = icmd.RunCmd(icmd.Command(bin("channel"), "load", "--relay", r.addr, "--conns", "2", "--count", "20",
		"--amount", "900000000", "--core", c.url), icmd.WithTimeout(60*time.Second))
	res.Assert(t, icmd.Success)
	assert.Assert(t, strings.Contains(res.Stdout(), "applied=0 "), res.Stdout())
	assert.Assert(t, strings.Contains(res.Stderr(), "warning: the core applied no transfer"), res.Stderr())
}

// resolve says how many UNKNOWN rows were too young to be asked about, so
// that "candidates=0" does not read as "nothing pending".
func TestResolveLogsUnknownRowsTooYoung(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	for i := 0; i < 2; i++ {
		g := newGUID()
		insert(t, db, g, "UNKNOWN", "E901", telegram(t, g), nil, 1, "-10 seconds")
	}
	res := runJob(t, "resolve", "--db", path, "--core", c.url, "--min-age", "300")
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "resolve: candidates=0 done=0 failed=0 left=0")
	assert.Assert(t, strings.Contains(res.Stderr(), "UNKNOWN rows younger than --min-age left for a later run") &&
		strings.Contains(res.Stderr(), "rows=2"), res.Stderr())
}
