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

	"dedup/channelsim"
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
	res = icmd.RunCmd(icmd.Command(bin("channel"), "send", "--relay", r.addr, "--amount", "999000000"))
	res.Assert(t, icmd.Expected{ExitCode: 3, Out: "B201"})
	res = icmd.RunCmd(icmd.Command(bin("channel"), "send", "--relay", r.addr, "--guid", "short"))
	res.Assert(t, icmd.Expected{ExitCode: 2, Err: "--guid"})
}

func TestStatsCheckCountsDoubles(t *testing.T) {
	s := &channelsim.Stats{
		ByGUID:        map[string]int{"a": 1, "b": 2, "c": 3},
		AppliedByGUID: map[string]int{"a": 1, "b": 1, "c": 2},
	}
	cc := s.Check([]string{"a", "b", "c", "d"})
	assert.DeepEqual(t, cc, channelsim.CoreCheck{GUIDs: 4, Applied: 3, AppliedTwice: 1, ReceivedTwice: 2, Doubles: []string{"c"}})
}
