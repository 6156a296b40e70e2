package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"

	"dedup/internal/testbed/pgtest"
)

// openCritical is the textfile's count of open critical findings.
func openCritical(t *testing.T, prom string) string {
	t.Helper()
	text, err := os.ReadFile(prom)
	assert.NilError(t, err)
	m := regexp.MustCompile(`(?m)^dedup_reconcile_open_critical (\d+)$`).FindStringSubmatch(string(text))
	assert.Assert(t, m != nil, "no dedup_reconcile_open_critical in the textfile:\n%s", text)
	return m[1]
}

// A critical finding survives every later run until a person closes it,
// and the alert's series follows it: the first run finds a FAILED row the
// core applied (rule 3 broken by hand), resolves it and exits 3; a second
// run sees a matched row and exits 0, and the finding is still open, first
// in inspect --reconcile, counted in the textfile. A role that may only
// read cannot close it (PostgreSQL); one operator closes it with a note
// through the runbook's way (sudo on SQLite, their own role on
// PostgreSQL): an event on the transfer names them, the textfile says 0 at
// once, a second close is refused, and a third run does not reopen it.
func TestCriticalFindingStaysOpenUntilAPersonClosesIt(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	r := startRelay(t, path, c.url, "--timeout", "2")
	g := newGUID()
	assert.Equal(t, code(send(t, r.addr, telegram(t, g))), "0000")
	r.stop(t, 15)
	_, err := db.Exec("UPDATE tx SET state='FAILED', rsp_code='E902', response=NULL WHERE guid=?", g)
	assert.NilError(t, err)

	// The textfile sits beside the ledger, where the owner may write it.
	dir := t.TempDir()
	if !onPostgres() {
		dir = filepath.Dir(path)
	}
	prom := filepath.Join(dir, "dedup_reconcile.prom")
	run := func(want int) {
		t.Helper()
		res := runJob(t, "reconcile", "--db", path, "--core", c.url, "--date", today(), "--metrics-textfile", prom)
		assert.Equal(t, res.ExitCode, want, res.Stderr())
	}
	run(3)
	assert.Check(t, is.Equal(getRow(t, db, g).State.String, "DONE"))
	assert.Check(t, is.Equal(openCritical(t, prom), "1"))
	run(0) // matched now: the finding stays open
	assert.Check(t, is.Equal(openCritical(t, prom), "1"), "a later run that no longer sees the finding cleared the alert")
	ins := icmd.RunCmd(icmd.Command(bin("inspect"), "--db", path, "--reconcile"))
	ins.Assert(t, icmd.Success)
	first := strings.SplitN(ins.Stdout(), "\n", 2)[0]
	m := regexp.MustCompile(`^open finding (\d+): applied_but_failed ` + g + ` date=` + today() + ` runs=1 `).FindStringSubmatch(first)
	assert.Assert(t, m != nil, "inspect --reconcile does not list the open finding first:\n%s", ins.Stdout())
	id := m[1]

	closeBy := func(who string, args ...string) *icmd.Result {
		t.Helper()
		args = append([]string{"--finding", id}, args...)
		if !onPostgres() {
			return closeFindingAs(t, path, who, args...)
		}
		res := icmd.RunCmd(icmd.Command(bin("reconcile"), append([]string{"close", "--db", who}, args...)...), icmd.WithTimeout(60*time.Second))
		t.Logf("reconcile close %v: exit %d\n%s%s", args, res.ExitCode, res.Stdout(), res.Stderr())
		return res
	}
	closer, reader, wantActor := kim, "", "settle:"+kim+"(sudo uid "+uidOf(t, kim)+")@"
	if onPostgres() {
		suffix := fmt.Sprintf("_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
		pgtest.Exec(t, path, "CREATE ROLE kim"+suffix+" LOGIN IN ROLE dedup_operator")
		pgtest.Exec(t, path, "CREATE ROLE reader"+suffix+" LOGIN")
		pgtest.Exec(t, path, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO reader"+suffix)
		t.Cleanup(func() {
			pgtest.Exec(t, path, "DROP OWNED BY kim"+suffix+"; DROP ROLE kim"+suffix)
			pgtest.Exec(t, path, "DROP OWNED BY reader"+suffix+"; DROP ROLE reader"+suffix)
		})
		closer = strings.Replace(path, "postgres://postgres@", "postgres://kim"+suffix+"@", 1)
		reader = strings.Replace(path, "postgres://postgres@", "postgres://reader"+suffix+"@", 1)
		wantActor = "settle:pg:kim" + suffix + "@"
		res := closeBy(reader, "--note", "a reader tries")
		assert.Check(t, is.Equal(res.ExitCode, 1), "a reader closed a finding")
		assert.Check(t, strings.Contains(res.Stderr(), "dedup_operator"), res.Stderr())
	}
	// The owner itself, without sudo, is nobody.
	if !onPostgres() {
		res := closeFindingAs(t, path, ledgerOwner, "--finding", id, "--note", "the owner tries")
		assert.Check(t, is.Equal(res.ExitCode, 1), "the ledger's owner closed a finding without a person")
	}
	assert.Check(t, is.Equal(openCritical(t, prom), "1"))

	res := closeBy(closer, "--note", "REV-2291 reversed by the core team; MOB told", "--metrics-textfile", prom)
	res.Assert(t, icmd.Success)
	assert.Check(t, is.Equal(lastLine(res.Stdout()), "reconcile: closed finding="+id+" guid="+g+" class=applied_but_failed"))
	assert.Check(t, is.Equal(openCritical(t, prom), "0"), "the textfile still counts the closed finding")
	var actor, detail string
	assert.NilError(t, db.QueryRow("SELECT actor, detail FROM tx_event WHERE guid=? AND action='close_finding'", g).Scan(&actor, &detail))
	assert.Check(t, strings.HasPrefix(actor, wantActor), actor)
	assert.Check(t, is.Equal(detail, `{"finding":`+id+`,"class":"applied_but_failed","note":"REV-2291 reversed by the core team; MOB told"}`))

	again := closeBy(closer, "--note", "again")
	assert.Check(t, is.Equal(again.ExitCode, 1), "a closed finding was closed again")
	assert.Check(t, strings.Contains(again.Stderr(), "was closed at"), again.Stderr())
	run(0)
	assert.Check(t, is.Equal(openCritical(t, prom), "0"), "a later run reopened the closed finding")
	ins = icmd.RunCmd(icmd.Command(bin("inspect"), "--db", path, "--reconcile"))
	assert.Check(t, strings.HasPrefix(ins.Stdout(), "no open critical finding\n"), ins.Stdout())
}
