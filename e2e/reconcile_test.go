package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"

	"dedup/lhstd"
)

// today is the fixture core's business date: the date of its local time.
func today() string { return time.Now().Format("20060102") }

// findingLines are reconcile's stdout lines but the summary, sorted.
func findingLines(out string) []string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	lines = lines[:len(lines)-1]
	sort.Strings(lines)
	return lines
}

// reconcileEvents are the reconcile events of guid.
func reconcileEvents(t *testing.T, db *ledgerDB, guid string) []string {
	t.Helper()
	rs, err := db.Query("SELECT actor, from_state, to_state, detail FROM tx_event WHERE guid=? AND action='reconcile' ORDER BY id", guid)
	assert.NilError(t, err)
	defer rs.Close()
	var out []string
	for rs.Next() {
		var actor, from, to, detail string
		assert.NilError(t, rs.Scan(&actor, &from, &to, &detail))
		out = append(out, fmt.Sprintf("%s %s->%s %s", strings.SplitN(actor, "@", 2)[0], from, to, detail))
	}
	return out
}

// Every class of docs/reconcile.md, made the way it arises: transfers
// through a real relay and the fixture core, a second POST straight to
// the core, rows a network element or a person wrote wrong. reconcile
// finds each, resolves what the journal proves (the replies byte for byte,
// each with its event), exits 3, and a second run changes nothing; after
// it reprocess sends nothing for a row reconcile resolved.
func TestReconcileFindsEveryClassAndResolvesWhatTheJournalProves(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	r := startRelay(t, path, c.url, "--timeout", "2")
	g := map[string]string{}
	req := map[string][]byte{}
	for _, name := range []string{"matched", "twice", "failed", "toldFailure", "unknown", "mismatch"} {
		g[name] = newGUID()
		opts := []reqOpt{}
		if name == "unknown" {
			opts = append(opts, memo("APPLYDROP"))
		}
		req[name] = telegram(t, g[name], opts...)
		reply := send(t, r.addr, req[name])
		want := "0000"
		if name == "unknown" {
			want = "E901"
		}
		assert.Equal(t, code(reply), want, name)
	}
	// A second application of the same GUID, straight to the core.
	c.post(t, g["twice"])
	// Rule 3 broken by hand: a row FAILED for a transfer the core applied;
	// a row told E500 for one it applied; a stored request whose amount is
	// not the one applied.
	_, err := db.Exec("UPDATE tx SET state='FAILED', rsp_code='E902', response=NULL WHERE guid=?", g["failed"])
	assert.NilError(t, err)
	_, err = db.Exec("UPDATE tx SET rsp_code='E500', response=? WHERE guid=?", lhstd.Reply(req["toldFailure"], "E500", nil), g["toldFailure"])
	assert.NilError(t, err)
	_, err = db.Exec("UPDATE tx SET request=? WHERE guid=?", telegram(t, g["mismatch"], amount(150001)), g["mismatch"])
	assert.NilError(t, err)
	// A claim still in flight for a transfer the core applied.
	g["inFlight"] = newGUID()
	insert(t, db, g["inFlight"], "SENT", nil, telegram(t, g["inFlight"], amount(1000)), nil, 1, "-1 seconds")
	c.post(t, g["inFlight"])
	// A DONE/0000 row told success with a reference the core never made.
	g["unapplied"] = newGUID()
	ureq := telegram(t, g["unapplied"])
	body, err := lhstd.TransferResponseBody("C999999999999999", 5, today()+"093001")
	assert.NilError(t, err)
	insert(t, db, g["unapplied"], "DONE", "0000", ureq, lhstd.Reply(ureq, "0000", body), 1, "-1 seconds")
	// A transfer that reached the core by another path.
	g["notInLedger"] = newGUID()
	c.post(t, g["notInLedger"])

	before := rowsSnapshot(t, db)
	dry := runJob(t, "reconcile", "--db", path, "--core", c.url, "--date", today(), "--dry-run")
	assert.Check(t, is.Equal(dry.ExitCode, 3), dry.Stderr())
	assert.Check(t, strings.HasSuffix(lastLine(dry.Stdout()), " would_resolve=2"), dry.Stdout())
	assert.DeepEqual(t, rowsSnapshot(t, db), before)

	prom := filepath.Join(t.TempDir(), "reconcile.prom")
	res := runJob(t, "reconcile", "--db", path, "--core", c.url, "--date", today(), "--metrics-textfile", prom)
	assert.Check(t, is.Equal(res.ExitCode, 3), "a critical finding must exit 3: %s", res.Stderr())
	text, err := os.ReadFile(prom)
	assert.NilError(t, err)
	for _, series := range []string{`dedup_reconcile_findings{class="applied_twice"} 1`, `dedup_reconcile_findings{class="matched"} 1`,
		`dedup_reconcile_journal_lines 9`, `dedup_job_last_success_timestamp_seconds{job="reconcile"} `} {
		assert.Check(t, strings.Contains(string(text), series+"\n") || strings.Contains(string(text), series), "textfile lacks %s:\n%s", series, text)
	}
	assert.Check(t, is.Equal(lastLine(res.Stdout()), fmt.Sprintf("reconcile: date=%s lines=9 amount=%d matched=1 resolved=1 applied_but_failed=1 applied_in_flight=1 applied_twice=1 mismatch=1 applied_told_failure=1 told_success_unapplied=1 not_in_ledger=1",
		today(), 6*150000+3*1000)))
	ref := func(name string) string {
		tr, err := lhstd.ParseTransferResponseBody(coreBody(t, c, g[name]))
		assert.NilError(t, err)
		return tr.Ref
	}
	twice := c.journalRefs(t, g["twice"])
	assert.Assert(t, is.Len(twice, 2))
	want := []string{
		fmt.Sprintf("applied_but_failed %s ledger=FAILED/E902 journal=%s amount=150000", g["failed"], ref("failed")),
		fmt.Sprintf("applied_in_flight %s ledger=SENT/ journal=%s amount=1000", g["inFlight"], ref("inFlight")),
		fmt.Sprintf("applied_told_failure %s ledger=DONE/E500 journal=%s amount=150000", g["toldFailure"], ref("toldFailure")),
		fmt.Sprintf("applied_twice %s ledger=DONE/0000 journal=%s amount=150000", g["twice"], strings.Join(twice, ",")),
		fmt.Sprintf("mismatch %s ledger=DONE/0000 journal=%s amount=150000", g["mismatch"], ref("mismatch")),
		fmt.Sprintf("resolved %s ledger=UNKNOWN/E901 journal=%s amount=150000", g["unknown"], ref("unknown")),
		fmt.Sprintf("told_success_unapplied %s ledger=DONE/0000 journal= amount=150000", g["unapplied"]),
	}
	sort.Strings(want)
	assert.Check(t, is.DeepEqual(findingLines(res.Stdout()), want))

	// The resolved rows: DONE/0000 with the reply the relay would have sent,
	// byte for byte, and a retransmission gets exactly that reply.
	for _, name := range []string{"failed", "unknown"} {
		row := getRow(t, db, g[name])
		wantReply := expectReply(req[name], "0000", coreBody(t, c, g[name]))
		assert.Check(t, is.Equal(row.State.String, "DONE"), name)
		assert.Check(t, is.Equal(row.RspCode.String, "0000"), name)
		assert.Check(t, is.DeepEqual(row.Response, wantReply), name)
		assert.Check(t, is.Equal(row.Attempts, before[g[name]].Attempts), "%s: attempts changed", name)
		assert.Check(t, is.DeepEqual(send(t, r.addr, req[name]), wantReply), "%s: the retransmission's reply", name)
		evs := reconcileEvents(t, db, g[name])
		assert.Check(t, is.Len(evs, 1), name)
		if len(evs) == 1 {
			assert.Check(t, strings.HasPrefix(evs[0], "reconcile "+before[g[name]].State.String+"->DONE journal date="+today()+" line="), evs[0])
			assert.Check(t, strings.HasSuffix(evs[0], " ref="+ref(name)), evs[0])
		}
	}
	// Nothing else changed.
	after := rowsSnapshot(t, db)
	for name, guid := range g {
		if name != "failed" && name != "unknown" {
			assert.Check(t, is.DeepEqual(after[guid], before[guid]), "%s was changed", name)
		}
	}

	// reprocess sends nothing for the row reconcile resolved.
	posts := c.stats(t).ByGUID[g["failed"]]
	runJob(t, "reprocess", "--db", path, "--core", c.url).Assert(t, icmd.Success)
	assert.Check(t, is.Equal(c.stats(t).ByGUID[g["failed"]], posts), "reprocess sent a row reconcile resolved")

	// A second run changes nothing, and still reports what needs a person.
	again := runJob(t, "reconcile", "--db", path, "--core", c.url, "--date", today())
	assert.Check(t, is.Equal(again.ExitCode, 3))
	assert.Check(t, strings.Contains(lastLine(again.Stdout()), " matched=3 resolved=0 applied_but_failed=0 "), again.Stdout())
	assert.DeepEqual(t, rowsSnapshot(t, db), after)
	for _, name := range []string{"failed", "unknown"} {
		assert.Check(t, is.Len(reconcileEvents(t, db, g[name]), 1), "%s: a second reconcile event", name)
	}

	// inspect shows the runs and a run's findings from the ledger.
	runs := runJob(t, "inspect", "--db", path, "--reconcile")
	runs.Assert(t, icmd.Success)
	assert.Check(t, strings.Contains(runs.Stdout(), "date="+today()), runs.Stdout())
	day := runJob(t, "inspect", "--db", path, "--reconcile", "--date", today())
	day.Assert(t, icmd.Success)
	assert.Check(t, strings.Contains(day.Stdout(), "told_success_unapplied "+g["unapplied"]), day.Stdout())
}

// journalRefs are the refs of guid's lines in the core's journal of today.
func (c *core) journalRefs(t *testing.T, guid string) []string {
	t.Helper()
	resp, err := http.Get(c.url + "/v1/journal?date=" + today())
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.NilError(t, err)
	var refs []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ","); len(f) == 7 && f[0] == guid {
			refs = append(refs, f[1])
		}
	}
	return refs
}

// A journal that is not sound changes nothing: every bad input exits 1
// with one line naming the line number (or the core's answer), and the
// ledger is as it was, its record of runs included.
func TestReconcileRefusesABadJournalAndChangesNothing(t *testing.T) {
	t.Parallel()
	path, db := newLedger(t)
	g := newGUID()
	insert(t, db, g, "UNKNOWN", "E901", telegram(t, g, amount(1000)), nil, 1, "-600 seconds")
	before := rowsSnapshot(t, db)
	good := fmt.Sprintf("%s,C000000000000001,11020030004001,11020030004002,1000,99999000,%s120000\n", g, today())
	head := "guid,ref,from,to,amount,balance,processed_at\n"
	dir := t.TempDir()
	file := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		assert.NilError(t, os.WriteFile(p, []byte(content), mode))
		assert.NilError(t, os.Chmod(p, mode))
		return p
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"a bad amount on line 3", file("amount.csv", head+good+strings.Replace(good, ",1000,", ",10x0,", 1), 0o600), "journal line 3: amount"},
		{"a processed_at on another day", file("day.csv", head+strings.Replace(good, today()+"120000", "20200101120000", 1), 0o600), "journal line 2: processed_at"},
		{"a missing header", file("header.csv", good, 0o600), "journal line 1: header"},
		{"ends inside a quoted field", file("quote.csv", head+good+`"`+g, 0o600), "journal line 3"},
		{"writable by its group", file("group.csv", head+good, 0o660), "writable by others than its owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runJob(t, "reconcile", "--db", path, "--journal", tc.path, "--date", today())
			assert.Check(t, is.Equal(res.ExitCode, 1))
			assert.Check(t, strings.Contains(res.Stderr(), "reconcile: error: "), res.Stderr())
			assert.Check(t, strings.Contains(res.Stderr(), tc.want), res.Stderr())
			assert.Check(t, is.Equal(res.Stdout(), ""), "a refused journal printed a summary")
			assert.DeepEqual(t, rowsSnapshot(t, db), before)
		})
	}
	// A journal file that cannot be opened is refused before the ledger
	// is opened: a mistyped --db is not even created.
	nowhere := filepath.Join(t.TempDir(), "relay.db")
	missing := filepath.Join(dir, "missing.csv")
	res0 := runJob(t, "reconcile", "--db", nowhere, "--journal", missing, "--date", today())
	assert.Check(t, is.Equal(res0.ExitCode, 1))
	assert.Check(t, strings.Contains(res0.Stderr(), "reconcile: error: --journal: open "+missing+": no such file or directory"), res0.Stderr())
	_, err := os.Stat(nowhere)
	assert.Check(t, os.IsNotExist(err), "a refused journal created the ledger %s", nowhere)

	// A refused journal's textfile records a failed run and no counts.
	prom := filepath.Join(t.TempDir(), "reconcile.prom")
	res := runJob(t, "reconcile", "--db", path, "--journal", file("bad.csv", head+strings.Replace(good, ",1000,", ",x,", 1), 0o600), "--date", today(), "--metrics-textfile", prom)
	assert.Check(t, is.Equal(res.ExitCode, 1))
	text, err := os.ReadFile(prom)
	assert.NilError(t, err)
	assert.Check(t, strings.Contains(string(text), `dedup_job_last_run_timestamp_seconds{job="reconcile"}`), string(text))
	for _, absent := range []string{"dedup_job_last_success_timestamp_seconds", "dedup_reconcile_findings", "dedup_reconcile_journal_lines"} {
		assert.Check(t, !strings.Contains(string(text), absent), "a refused journal's textfile has %s:\n%s", absent, text)
	}

	// A core that answers anything but 200 text/csv, or closes early.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("date") {
		case "20261101":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "20261102":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, "{}")
		default: // a chunked CSV cut short by a closed connection
			w.Header().Set("Content-Type", "text/csv")
			io.WriteString(w, head+good)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
	}))
	t.Cleanup(bad.Close)
	for date, want := range map[string]string{"20261101": "HTTP 503", "20261102": "not text/csv", today(): "ended early"} {
		res := runJob(t, "reconcile", "--db", path, "--core", bad.URL, "--date", date)
		assert.Check(t, is.Equal(res.ExitCode, 1), date)
		assert.Check(t, strings.Contains(res.Stderr(), want), "%s: %s", date, res.Stderr())
		assert.DeepEqual(t, rowsSnapshot(t, db), before)
	}
	var runs int
	assert.NilError(t, db.QueryRow("SELECT count(*) FROM reconcile_run").Scan(&runs))
	assert.Check(t, is.Equal(runs, 0), "a refused run was kept")

	// Usage errors: exit 2, one line naming the flag, nothing created.
	for _, args := range [][]string{
		{"--date", today()},
		{"--journal", "x.csv", "--core", "http://127.0.0.1:1"},
		{"--journal", "x.csv", "--date", "20261131"},
	} {
		fresh := filepath.Join(t.TempDir(), "relay.db")
		res := runJob(t, "reconcile", append([]string{"--db", fresh}, args...)...)
		assert.Check(t, is.Equal(res.ExitCode, 2), "%v", args)
		assert.Check(t, is.Equal(strings.Count(strings.TrimSpace(res.Stderr()), "\n"), 0), res.Stderr())
		_, err := os.Stat(fresh)
		assert.Check(t, os.IsNotExist(err), "a usage error created the ledger")
	}
}

// reconcile's edges, tried as a careless operator would (docs/reconcile.md
// "Edges"): a mistyped --db is refused and not created, dry run or not; a
// date after the ledger's today and a date in the wrong format are usage
// errors; a dry run keeps no run, writes no event and leaves the
// textfile's last success where it was; an empty day says so.
func TestReconcileEdgesRefuseWhatWouldProveNothing(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	oneLine := func(t *testing.T, res *icmd.Result) {
		t.Helper()
		assert.Check(t, is.Equal(strings.Count(strings.TrimSpace(res.Stderr()), "\n"), 0), "want one line on stderr: %s", res.Stderr())
		assert.Check(t, is.Equal(res.Stdout(), ""), "a refused run printed a summary")
	}
	for _, dry := range []bool{false, true} {
		mistyped := tempDB(t) // no ledger behind it: no file, or a database without tables
		args := []string{"--db", mistyped, "--core", c.url, "--date", today()}
		if dry {
			args = append(args, "--dry-run")
		}
		res := runJob(t, "reconcile", args...)
		assert.Check(t, is.Equal(res.ExitCode, 1), "dry run %v", dry)
		assert.Check(t, is.Contains(res.Stderr(), "no ledger at "), res.Stderr())
		oneLine(t, res)
		assert.Check(t, !ledgerExists(t, mistyped), "dry run %v: reconcile created the ledger it was to prove", dry)
	}

	path, db := newLedger(t)
	if !onPostgres() {
		assert.NilError(t, os.Chmod(path, 0o600)) // no warning line about its mode
	}
	g := newGUID()
	insert(t, db, g, "UNKNOWN", "E901", telegram(t, g, amount(1000)), nil, 1, "-600 seconds")
	c.post(t, g) // the journal proves it applied: a real run would resolve it
	before := rowsSnapshot(t, db)
	nextYear := time.Now().AddDate(1, 0, 0).Format("20060102")
	for _, date := range []string{nextYear, "2026-12-07"} {
		res := runJob(t, "reconcile", "--db", path, "--core", c.url, "--date", date)
		assert.Check(t, is.Equal(res.ExitCode, 2), date)
		assert.Check(t, is.Contains(res.Stderr(), "--date"), res.Stderr())
		oneLine(t, res)
	}

	// A dry run: the textfile of the last real run keeps its success time
	// and its findings; the dry run changes no row, keeps no run, writes no
	// event.
	prom := filepath.Join(t.TempDir(), "reconcile.prom")
	kept := "# HELP dedup_job_last_success_timestamp_seconds x\n# TYPE dedup_job_last_success_timestamp_seconds gauge\n" +
		"dedup_job_last_success_timestamp_seconds{job=\"reconcile\"} 1000.000\n" +
		"# HELP dedup_reconcile_findings x\n# TYPE dedup_reconcile_findings gauge\ndedup_reconcile_findings{class=\"applied_twice\"} 1\n"
	assert.NilError(t, os.WriteFile(prom, []byte(kept), 0o644))
	res := runJob(t, "reconcile", "--db", path, "--core", c.url, "--date", today(), "--dry-run", "--metrics-textfile", prom)
	assert.Check(t, is.Equal(res.ExitCode, 0), res.Stderr())
	assert.Check(t, is.Contains(lastLine(res.Stdout()), "would_resolve=1"))
	text, err := os.ReadFile(prom)
	assert.NilError(t, err)
	assert.Check(t, is.Contains(string(text), "dedup_job_last_success_timestamp_seconds{job=\"reconcile\"} 1000.000\n"), "a dry run advanced the last success:\n%s", text)
	assert.Check(t, is.Contains(string(text), "dedup_reconcile_findings{class=\"applied_twice\"} 1\n"), "a dry run replaced the last run's findings:\n%s", text)
	assert.Check(t, is.Contains(string(text), "dedup_job_last_run_timestamp_seconds{job=\"reconcile\"}"), string(text))
	assert.DeepEqual(t, rowsSnapshot(t, db), before)
	var runs, events int
	assert.NilError(t, db.QueryRow("SELECT count(*) FROM reconcile_run").Scan(&runs))
	assert.NilError(t, db.QueryRow("SELECT count(*) FROM tx_event").Scan(&events))
	assert.Check(t, is.Equal(runs, 0), "a dry run was kept")
	assert.Check(t, is.Equal(events, 0), "a dry run wrote an event")

	// An empty day: no journal line, no row; it runs, and says so.
	empty := time.Now().AddDate(0, 0, -40).Format("20060102")
	res = runJob(t, "reconcile", "--db", path, "--core", c.url, "--date", empty)
	assert.Check(t, is.Equal(res.ExitCode, 0), res.Stderr())
	assert.Check(t, is.Contains(res.Stderr(), "no journal lines and no ledger rows for "+empty), res.Stderr())

	// inspect's --date is checked the same way.
	res = runJob(t, "inspect", "--db", path, "--reconcile", "--date", "2026-12-07")
	assert.Check(t, is.Equal(res.ExitCode, 2), res.Combined())
	oneLine(t, res)
}
