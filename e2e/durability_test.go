package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"
	"gotest.tools/v3/poll"

	"dedup"
	"dedup/internal/channel"
	"dedup/internal/testbed/pgtest"
)

// A PostgreSQL server that does not fsync (or does not write full pages)
// can lose or tear the commits a relay acted on at a power cut: the relay
// and every binary that writes refuse it, exit 1 naming the setting,
// unless told --synchronous normal, which each of them accepts (the
// runbook must run on any ledger the relay was allowed to use).
func TestServerWithoutFsyncIsRefusedUnlessNormal(t *testing.T) {
	t.Parallel()
	pg, err := pgtest.Start(pgtest.Options{Settings: []string{"fsync=off"}})
	assert.NilError(t, err)
	t.Cleanup(pg.Remove)
	name, err := pg.NewDatabase()
	assert.NilError(t, err)
	db := pg.URL(name)
	c := startCore(t)
	jobs := [][]string{
		{"relay", "--db", db, "--listen", "127.0.0.1:0", "--core", c.url},
		{"resolve", "--db", db, "--core", c.url},
		{"reprocess", "--db", db, "--core", c.url},
		{"purge", "--db", db},
		{"inspect", "--db", db, "--summary"},
	}
	for _, j := range jobs {
		res := icmd.RunCmd(icmd.Command(bin(j[0]), j[1:]...), icmd.WithTimeout(60*time.Second))
		assert.Check(t, is.Equal(res.ExitCode, 1), "%s accepted a server with fsync=off: %s", j[0], res.Stderr())
		assert.Check(t, strings.Contains(res.Stderr(), `fsync is "off"`), "%s: %s", j[0], res.Stderr())
		assert.Check(t, strings.Contains(res.Stderr(), "--synchronous normal"), "%s: %s", j[0], res.Stderr())
	}
	settle := icmd.RunCmd(icmd.Command(bin("settle"), "--db", db, "list"), icmd.WithTimeout(60*time.Second))
	assert.Check(t, is.Equal(settle.ExitCode, 1), settle.Stderr())
	assert.Check(t, strings.Contains(settle.Stderr(), `fsync is "off"`), settle.Stderr())

	r := startRelay(t, db, c.url, "--synchronous", "normal")
	r.waitLog(t, "not durable against a power cut")
	assert.Check(t, is.Equal(r.stop(t, syscall.SIGTERM), 0))
	for _, j := range jobs[1:] {
		res := icmd.RunCmd(icmd.Command(bin(j[0]), append(j[1:], "--synchronous", "normal")...), icmd.WithTimeout(60*time.Second))
		assert.Check(t, is.Equal(res.ExitCode, 0), "%s --synchronous normal: %s", j[0], res.Stderr())
	}
	res := icmd.RunCmd(icmd.Command(bin("settle"), "--db", db, "--synchronous", "normal", "list"), icmd.WithTimeout(60*time.Second))
	assert.Check(t, is.Equal(res.ExitCode, 0), res.Stderr())
}

// A claim the primary committed without its synchronous standby (the
// commit's wait was cancelled, and PostgreSQL said so in a WARNING) is not
// a claim: the relay sends nothing to the core for it, answers the channel
// with something other than success, and counts the write in
// dedup_ledger_not_committed_total{reason="commit_warning"}, the series
// the dashboard and the HA alert read.
func TestCommitWithoutTheStandbyIsCountedAndNotSent(t *testing.T) {
	t.Parallel()
	pg, db := ownPostgres(t)
	admin := pg.URL("postgres")
	c := startCore(t)
	first := startRelay(t, db, c.url) // the schema, before commits start to wait
	assert.Equal(t, first.stop(t, syscall.SIGTERM), 0)

	// A standby that never comes: every commit waits for it. The relay
	// starts once the setting is in force, so that each of its sessions
	// has it from the first: the claim is the write that waits (a session
	// made before would take the reload at a moment of its own, and the
	// finish might be the one to wait instead).
	pgtest.Exec(t, admin, "ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
	pgtest.Exec(t, admin, "SELECT pg_reload_conf()")
	adb := openDB(t, admin)
	adb.SetMaxIdleConns(0) // each poll on a new session: the setting as a new session sees it
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		var v string
		if err := adb.QueryRow("SHOW synchronous_standby_names").Scan(&v); err != nil || v != "ghost" {
			return poll.Continue("synchronous_standby_names reads %q (%v)", v, err)
		}
		return poll.Success()
	}, poll.WithTimeout(20*time.Second), poll.WithDelay(20*time.Millisecond))
	r := startRelay(t, db, c.url, "--metrics-listen", "127.0.0.1:0")
	m, _ := scrape(t, r.metricsAddr)
	assert.Equal(t, m[`dedup_ledger_not_committed_total{reason="commit_warning"}`], 0.0, "the series is not exported at 0")
	g := newGUID()
	tg := telegram(t, g)
	reply := make(chan []byte, 1)
	go func() { // no t.FailNow off the test's goroutine: a nil reply fails below
		var rsp []byte
		if conn, err := channel.Dial(r.addr, 30*time.Second); err == nil {
			rsp, _ = conn.RoundTrip(tg)
			conn.Close()
		}
		reply <- rsp
	}()
	var pid int
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		err := adb.QueryRow(`SELECT pid FROM pg_stat_activity WHERE application_name='dedup' AND wait_event='SyncRep' LIMIT 1`).Scan(&pid)
		if err != nil {
			return poll.Continue("no relay session waits for the standby yet: %v", err)
		}
		return poll.Success()
	}, poll.WithTimeout(20*time.Second), poll.WithDelay(20*time.Millisecond))
	pgtest.Exec(t, admin, "SELECT pg_cancel_backend($1)", pid)
	got := <-reply
	pgtest.Exec(t, admin, "ALTER SYSTEM RESET synchronous_standby_names")
	pgtest.Exec(t, admin, "SELECT pg_reload_conf()")

	assert.Assert(t, got != nil, "no reply")
	assert.Check(t, code(got) != dedup.CodeOK, "a claim committed only locally was answered %s", code(got))
	st := c.stats(t)
	assert.Check(t, is.Equal(st.ByGUID[g], 0), "the core received a transfer whose claim was not a commit")
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		m, _ = scrape(t, r.metricsAddr)
		if v := m[`dedup_ledger_not_committed_total{reason="commit_warning"}`]; v != 1 {
			return poll.Continue("commit_warning counted %v times, want 1", v)
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(20*time.Millisecond))
	assert.Check(t, is.Equal(m[`dedup_ledger_not_committed_total{reason="not_primary"}`], 0.0))
	assert.Check(t, is.Contains(r.log(), "guid="+g), "no tx line for the refused claim")
}
