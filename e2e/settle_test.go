package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"

	"dedup/internal/testbed/pgtest"
	"dedup/lhstd"
)

var proposedRE = regexp.MustCompile(`^settle: proposed id=(\d+) guid=(\w+) as=([a-z-]+)$`)

// propose runs settle propose as kim and returns the proposal's id.
func propose(t *testing.T, db, guid string, args ...string) string {
	t.Helper()
	res := settleAs(t, db, kim, append([]string{"propose", guid}, args...)...)
	res.Assert(t, icmd.Success)
	m := proposedRE.FindStringSubmatch(lastLine(res.Stdout()))
	assert.Assert(t, m != nil, "unexpected last line %q", lastLine(res.Stdout()))
	return m[1]
}

func eventCount(t *testing.T, db *ledgerDB, guid string) int {
	t.Helper()
	var n int
	assert.NilError(t, db.QueryRow("SELECT count(*) FROM tx_event WHERE guid=?", guid).Scan(&n))
	return n
}

// The three decisions end to end, with the real binaries: the row, the
// stored reply and the channel's next answer are as the spec's table says;
// a proposal changes nothing but the events; not-applied is then sent once
// by reprocess; abandoned is E905 byte for byte and never sent.
func TestSettleDecisionsGiveTheirRowAndReply(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	r := startRelay(t, path, c.url)
	gA, gN, gX := newGUID(), newGUID(), newGUID()
	tgA, tgN, tgX := telegram(t, gA), telegram(t, gN), telegram(t, gX)
	insert(t, db, gA, "UNKNOWN", "E901", tgA, nil, 1, "-600 seconds")
	insert(t, db, gN, "UNKNOWN", "E901", tgN, nil, 1, "-600 seconds")
	insert(t, db, gX, "FAILED", "E902", tgX, nil, 3, "-600 seconds")

	before := rowsSnapshot(t, db)
	idA := propose(t, path, gA, "--as", "applied", "--core-ref", "C000000000000042", "--balance", "99850000",
		"--processed-at", "20261129093001", "--reason", "core team ticket INC-4711")
	idN := propose(t, path, gN, "--as", "not-applied", "--reason", "core team: never received (INC-4712)")
	idX := propose(t, path, gX, "--as", "abandoned", "--reason", "customer cancelled; channel informed")
	assert.DeepEqual(t, rowsSnapshot(t, db), before) // a proposal changes nothing but the events
	list := settleAs(t, path, lee, "list")
	list.Assert(t, icmd.Success)
	assert.Check(t, is.Equal(strings.Count(list.Stdout(), "\n"), 3), list.Stdout())
	assert.Check(t, strings.Contains(list.Stdout(), "id="+idA+" guid="+gA+" as=applied by="+kim+" age="), list.Stdout())
	assert.Check(t, strings.Contains(list.Stdout(), `reason="core team ticket INC-4711"`), list.Stdout())

	for _, id := range []string{idA, idN, idX} {
		settleAs(t, path, lee, "approve", id).Assert(t, icmd.Success)
	}
	body, err := lhstd.TransferResponseBody("C000000000000042", 99850000, "20261129093001")
	assert.NilError(t, err)
	wantA := lhstd.Reply(tgA, "0000", body)
	rowA := getRow(t, db, gA)
	assert.Check(t, is.Equal(rowA.State.String, "DONE"))
	assert.Check(t, is.Equal(string(rowA.Response), string(wantA)))
	assert.Check(t, is.Equal(string(send(t, r.addr, tgA)), string(wantA)), "the channel did not get the approved reply byte for byte")

	rowN := getRow(t, db, gN)
	assert.Check(t, is.Equal(rowN.State.String+"/"+rowN.RspCode.String, "FAILED/E902"))
	res := runJob(t, "reprocess", "--db", path, "--core", c.url)
	res.Assert(t, icmd.Success)
	assert.Check(t, is.Equal(getRow(t, db, gN).State.String, "DONE"))
	s := c.stats(t)
	assert.Check(t, is.Equal(s.ByGUID[gN], 1), "not-applied was not sent exactly once by reprocess")

	wantX := lhstd.Reply(tgX, "E905", nil)
	rowX := getRow(t, db, gX)
	assert.Check(t, is.Equal(rowX.State.String+"/"+rowX.RspCode.String, "DONE/E905"))
	assert.Check(t, is.Equal(string(rowX.Response), string(wantX)))
	for i := 0; i < 2; i++ {
		assert.Check(t, is.Equal(string(send(t, r.addr, tgX)), string(wantX)), "the abandoned transfer's retransmission did not get E905 byte for byte")
	}
	res = runJob(t, "reprocess", "--db", path, "--core", c.url, "--max-attempts", "9")
	res.Assert(t, icmd.Success)
	assert.Check(t, is.Equal(c.stats(t).ByGUID[gX], 0), "an abandoned transfer was sent")
	assert.Check(t, is.Equal(c.stats(t).ByGUID[gA], 0))

	// inspect tells each story with its events; --events lists the period.
	ins := icmd.RunCmd(icmd.Command(bin("inspect"), "--db", path, gA))
	ins.Assert(t, icmd.Success)
	assert.Check(t, strings.Contains(ins.Stdout(), "propose by settle:"+kim+"(sudo uid "+uidOf(t, kim)+")@"), ins.Stdout())
	assert.Check(t, strings.Contains(ins.Stdout(), "approve by settle:"+lee+"(sudo uid "+uidOf(t, lee)+")@"), ins.Stdout())
	since := time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04:05")
	csv := icmd.RunCmd(icmd.Command(bin("inspect"), "--db", path, "--events", "--since", since, "--format", "csv"))
	csv.Assert(t, icmd.Success)
	assert.Check(t, strings.HasPrefix(csv.Stdout(), "id,guid,at,actor,action,from_state,to_state,rsp_code,attempts,detail\n"), csv.Stdout())
	js := icmd.RunCmd(icmd.Command(bin("inspect"), "--db", path, "--events", "--since", since, "--format", "json"))
	js.Assert(t, icmd.Success)
	actions := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(js.Stdout()), "\n") {
		var e struct{ Action string }
		assert.NilError(t, json.Unmarshal([]byte(line), &e), line)
		actions[e.Action]++
	}
	// reprocess's reclaim and its outcome are on the record too.
	assert.Check(t, is.DeepEqual(actions, map[string]int{"propose": 3, "approve": 3, "reclaim": 1, "outcome": 1}))
}

// Four eyes that one person cannot forge: the proposer's approval is
// refused through sudo, with another name in her environment
// (SUDO_USER, SUDO_UID) and with --operator; the same commands run as the
// ledger's owner or as root, with or without those variables, refuse to
// decide; the row is untouched until a second account approves.
func TestSettleNeedsASecondPerson(t *testing.T) {
	t.Parallel()
	path, db := newLedger(t)
	g := newGUID()
	insert(t, db, g, "UNKNOWN", "E901", telegram(t, g), nil, 1, "-600 seconds")
	id := propose(t, path, g, "--as", "not-applied", "--reason", "INC-1")
	forged := []string{"SUDO_USER=" + lee, "SUDO_UID=" + uidOf(t, lee)}
	for _, tc := range []struct {
		name string
		who  string
		env  []string
		want string
	}{
		{"the proposer through sudo", kim, nil, "needs another person's"},
		{"the proposer through sudo, SUDO_USER and SUDO_UID of another", kim, forged, "needs another person's"},
		{"the owner directly", ledgerOwner, nil, "sudo -u "},
		{"the owner directly, SUDO_USER and SUDO_UID of another", ledgerOwner, forged, "sudo -u "},
		{"root directly", "", nil, "sudo -u "},
		{"root directly, SUDO_USER and SUDO_UID of another", "", forged, "sudo -u "},
	} {
		for _, cmd := range []string{"approve", "reject"} {
			args := []string{cmd, id, "--reason", "forged"}
			res := settleCmd(t, path, tc.who, tc.env, args...)
			assert.Check(t, is.Equal(res.ExitCode, 1), "%s: %s was not refused", tc.name, cmd)
			assert.Check(t, strings.Contains(res.Stderr(), tc.want), "%s: %s", tc.name, res.Stderr())
			assert.Check(t, is.Equal(strings.Count(res.Stderr(), "settle: "), 1), "not one line: %s", res.Stderr())
		}
	}
	res := settleAs(t, path, kim, "approve", id, "--operator", lee)
	assert.Check(t, is.Equal(res.ExitCode, 2), "--operator is not a flag any more")
	assert.Equal(t, getRow(t, db, g).State.String, "UNKNOWN")
	assert.Equal(t, eventCount(t, db, g), 1)
	settleAs(t, path, lee, "reject", id, "--reason", "the core team has not confirmed yet").Assert(t, icmd.Success)
	res = settleAs(t, path, "e2eann", "approve", id)
	assert.Check(t, is.Equal(res.ExitCode, 1))
	assert.Check(t, strings.Contains(res.Stderr(), "already decided"), res.Stderr())
	assert.Equal(t, getRow(t, db, g).State.String, "UNKNOWN")
	// settle list and inspect stay the owner's to use directly.
	settleAs(t, path, ledgerOwner, "list").Assert(t, icmd.Success)
}

// uidOf is an account's uid as text.
func uidOf(t *testing.T, name string) string {
	t.Helper()
	operators(t)
	u, err := user.Lookup(name)
	assert.NilError(t, err)
	return u.Uid
}

// An approval after the row changed (a retransmission reclaimed it,
// resolve resolved it) is refused and changes nothing; so is one of a
// proposal older than 24 h, which is expired on the record.
func TestSettleApprovalIsFencedAndExpires(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	r := startRelay(t, path, c.url)
	gF, gU, gOld := newGUID(), newGUID(), newGUID()
	tgF := telegram(t, gF)
	insert(t, db, gF, "FAILED", "E902", tgF, nil, 1, "-600 seconds")
	insert(t, db, gU, "UNKNOWN", "E901", telegram(t, gU), nil, 1, "-600 seconds")
	idF := propose(t, path, gF, "--as", "abandoned", "--reason", "customer cancelled")
	idU := propose(t, path, gU, "--as", "not-applied", "--reason", "INC-2")

	assert.Equal(t, code(send(t, r.addr, tgF)), "0000") // the channel's retransmission reclaimed and sent it
	c.post(t, gU)                                       // the core has it after all: resolve finds it
	runJob(t, "resolve", "--db", path, "--core", c.url, "--min-age", "0").Assert(t, icmd.Success)
	for g, id := range map[string]string{gF: idF, gU: idU} {
		before := rowsSnapshot(t, db)[g]
		res := settleAs(t, path, lee, "approve", id)
		assert.Check(t, is.Equal(res.ExitCode, 1), g)
		assert.Check(t, strings.Contains(res.Stderr(), "changed since proposal"), res.Stderr())
		assert.Check(t, is.DeepEqual(rowsSnapshot(t, db)[g], before))
	}

	insert(t, db, gOld, "UNKNOWN", "E901", telegram(t, gOld), nil, 1, "-600 seconds")
	idOld := propose(t, path, gOld, "--as", "not-applied", "--reason", "INC-3")
	_, err := db.Exec("UPDATE tx_event SET at = datetime('now', '-25 hours') WHERE guid=?", gOld)
	assert.NilError(t, err)
	res := settleAs(t, path, lee, "approve", idOld)
	assert.Check(t, is.Equal(res.ExitCode, 1))
	assert.Check(t, strings.Contains(res.Stderr(), "expired"), res.Stderr())
	assert.Equal(t, getRow(t, db, gOld).State.String, "UNKNOWN")
	var expired int
	assert.NilError(t, db.QueryRow("SELECT count(*) FROM tx_event WHERE guid=? AND action='expire'", gOld).Scan(&expired))
	assert.Equal(t, expired, 1)
}

// A decision on a row in flight (SENT, RECEIVED) or final (DONE) is
// refused; bad input is exit 2 naming the flag; two approvals of one
// proposal racing each other: exactly one wins.
func TestSettleRefusalsUsageAndRacingApprovals(t *testing.T) {
	t.Parallel()
	path, db := newLedger(t)
	gS, gR, gD, gU := newGUID(), newGUID(), newGUID(), newGUID()
	insert(t, db, gS, "SENT", nil, telegram(t, gS), nil, 1, "-1 seconds")
	insert(t, db, gR, "RECEIVED", nil, telegram(t, gR), nil, 0, "-1 seconds")
	insert(t, db, gD, "DONE", "0000", telegram(t, gD), lhstd.Reply(telegram(t, gD), "0000", nil), 1, "-1 seconds")
	insert(t, db, gU, "UNKNOWN", "E901", telegram(t, gU), nil, 1, "-600 seconds")
	for _, g := range []string{gS, gR, gD} {
		for _, as := range []string{"not-applied", "abandoned"} {
			res := settleAs(t, path, kim, "propose", g, "--as", as, "--reason", "x")
			assert.Check(t, is.Equal(res.ExitCode, 1), "%s --as %s", g, as)
			assert.Check(t, strings.Contains(res.Stderr(), "settle: refused: "), res.Stderr())
		}
		assert.Check(t, is.Equal(eventCount(t, db, g), 0))
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"propose", gU, "--as", "not-applied"}, "--reason"},
		{[]string{"propose", gU, "--as", "applied", "--core-ref", "C1", "--reason", "x"}, "--core-ref, --balance and --processed-at"},
		{[]string{"propose", gU, "--as", "applied", "--core-ref", "C1", "--balance", "5", "--processed-at", "2026-11-29", "--reason", "x"}, "--processed-at"},
		{[]string{"propose", gU, "--as", "applied", "--core-ref", "C1", "--balance", "-5", "--processed-at", "20261129093001", "--reason", "x"}, "--balance"},
		{[]string{"propose", "20261201MOB000000000000000NOPE01", "--as", "not-applied", "--reason", "x"}, "no row"},
		{[]string{"propose", gU, "--as", "maybe", "--reason", "x"}, "--as"},
		{[]string{"reject", "1"}, "--reason"},
	} {
		res := settleAs(t, path, kim, tc.args...)
		assert.Check(t, is.Equal(res.ExitCode, 2), "%v", tc.args)
		assert.Check(t, strings.Contains(res.Stderr(), tc.want), "%v: %s", tc.args, res.Stderr())
		assert.Check(t, is.Equal(strings.Count(res.Stderr(), "settle: "), 1), "not one line: %s", res.Stderr())
	}
	assert.Check(t, is.Equal(eventCount(t, db, gU), 0))

	id := propose(t, path, gU, "--as", "not-applied", "--reason", "INC-9")
	var wg sync.WaitGroup
	codes := make([]int, 6)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = settleAs(t, path, fmt.Sprintf("e2eop%d", i), "approve", id).ExitCode
		}()
	}
	wg.Wait()
	wins := 0
	for _, c := range codes {
		if c == 0 {
			wins++
		}
	}
	assert.Equal(t, wins, 1, "exit codes %v", codes)
	var approvals int
	assert.NilError(t, db.QueryRow("SELECT count(*) FROM tx_event WHERE action='approve'").Scan(&approvals))
	assert.Equal(t, approvals, 1)
	assert.Equal(t, getRow(t, db, gU).State.String, "FAILED")
}

// On PostgreSQL each operator is a role of their own, a member of
// dedup_operator, and the database decides: kim's own approval is refused
// by the database whatever she claims, lee's is accepted, and kim's role
// can neither change a row, nor forge an event, nor delete one. Runs on
// a database of its own in the shared cluster, whichever ledger the other
// tests use.
func TestSettleAsPostgresRoles(t *testing.T) {
	t.Parallel()
	owner := pgtest.SharedDatabase(t)
	r := startRelay(t, owner, startCore(t).url) // the owner's binary applies the schema
	r.stop(t, syscall.SIGTERM)
	db := openDB(t, owner)
	g := newGUID()
	insert(t, db, g, "UNKNOWN", "E901", telegram(t, g), nil, 1, "-600 seconds")
	suffix := fmt.Sprintf("_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	as := map[string]string{}
	for _, who := range []string{"kim", "lee"} {
		role := who + suffix
		pgtest.Exec(t, owner, "CREATE ROLE "+role+" LOGIN IN ROLE dedup_operator")
		t.Cleanup(func() { pgtest.Exec(t, owner, "DROP OWNED BY "+role+"; DROP ROLE "+role) })
		as[who] = strings.Replace(owner, "postgres://postgres@", "postgres://"+role+"@", 1)
	}
	run := func(who string, env []string, args ...string) *icmd.Result {
		res := icmd.RunCmd(icmd.Command(bin("settle"), append([]string{"--db", as[who]}, args...)...),
			icmd.WithTimeout(60*time.Second), icmd.WithEnv(append(os.Environ(), env...)...))
		t.Logf("settle (role %s) %v: exit %d\n%s%s", who, args, res.ExitCode, res.Stdout(), res.Stderr())
		return res
	}
	res := run("kim", nil, "propose", g, "--as", "not-applied", "--reason", "INC-9")
	res.Assert(t, icmd.Success)
	m := proposedRE.FindStringSubmatch(lastLine(res.Stdout()))
	assert.Assert(t, m != nil, res.Stdout())
	for _, env := range [][]string{nil, {"SUDO_USER=" + lee, "SUDO_UID=" + uidOf(t, lee)}} {
		res = run("kim", env, "approve", m[1])
		assert.Check(t, is.Equal(res.ExitCode, 1), "kim approved her own proposal (env %v)", env)
		assert.Check(t, strings.Contains(res.Stderr(), "needs another person's approval"), res.Stderr())
	}
	assert.Equal(t, getRow(t, db, g).State.String, "UNKNOWN")
	for _, q := range []string{
		"UPDATE tx SET state='FAILED', rsp_code='E902' WHERE guid='" + g + "'",
		"INSERT INTO tx_event(guid, actor, action, detail) VALUES('" + g + "', 'settle:pg:someone@h', 'propose', '{}')",
		"DELETE FROM tx WHERE guid='" + g + "'",
	} {
		out, err := exec.Command("psql", as["kim"], "-v", "ON_ERROR_STOP=1", "-c", q).CombinedOutput()
		assert.Check(t, err != nil && strings.Contains(string(out), "permission denied"), "%s: %v %s", q, err, out)
	}
	run("lee", nil, "approve", m[1], "--reason", "confirmed").Assert(t, icmd.Success)
	row := getRow(t, db, g)
	assert.Check(t, is.Equal(row.State.String+"/"+row.RspCode.String, "FAILED/E902"))
	ins := icmd.RunCmd(icmd.Command(bin("inspect"), "--db", as["lee"], g))
	ins.Assert(t, icmd.Success)
	assert.Check(t, strings.Contains(ins.Stdout(), "propose by settle:pg:kim"+suffix+"@"), ins.Stdout())
	assert.Check(t, strings.Contains(ins.Stdout(), "approve by settle:pg:lee"+suffix+"@"), ins.Stdout())
}
