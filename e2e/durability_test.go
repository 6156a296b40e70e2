package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"

	"dedup/internal/pgtest"
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
