package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"
	"gotest.tools/v3/poll"
)

// scrape reads the relay's /metrics and returns every sample by its
// series ("name{labels}") and the raw text.
func scrape(t *testing.T, addr string) (map[string]float64, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	assert.NilError(t, err)
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		assert.NilError(t, err, line)
		out[line[:i]] = v
	}
	return out, string(b)
}

// scrapeOnceWritten scrapes the relay's metrics once it has counted n
// replies with code. A reply is counted after the write to the channel
// returns, so the channel may read it a moment before the counter moves.
func scrapeOnceWritten(t *testing.T, addr, code string, n float64) map[string]float64 {
	t.Helper()
	var m map[string]float64
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		m, _ = scrape(t, addr)
		if got := m[`dedup_replies_total{code="`+code+`"}`]; got != n {
			return poll.Continue("%v replies %s counted, want %v", got, code, n)
		}
		return poll.Success()
	}, poll.WithTimeout(5*time.Second), poll.WithDelay(10*time.Millisecond))
	return m
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// docs/operations.md: each metric moves as documented.
func TestMetricsMoveAsTheSpecSays(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--slow", "3")
	db := tempDB(t)
	r := startRelay(t, db, c.url, "--timeout", "1", "--metrics-listen", "127.0.0.1:0", "--metrics-refresh", "0.5")
	assert.Assert(t, r.metricsAddr != "", "no metrics addr= line")

	g := newGUID()
	tg := telegram(t, g)
	assert.Equal(t, code(send(t, r.addr, tg)), "0000")
	m := scrapeOnceWritten(t, r.metricsAddr, "0000", 1)
	assert.Equal(t, m[`dedup_core_requests_total{result="done"}`], 1.0)
	assert.Equal(t, m[`dedup_ledger_answers_total{state="DONE"}`], 0.0)
	assert.Equal(t, m[`dedup_replies_total{code="0000"}`], 1.0)

	// A retransmission is answered from the ledger, not by the core.
	assert.Equal(t, code(send(t, r.addr, tg)), "0000")
	m = scrapeOnceWritten(t, r.metricsAddr, "0000", 2)
	assert.Equal(t, m[`dedup_ledger_answers_total{state="DONE"}`], 1.0)
	assert.Equal(t, m[`dedup_core_requests_total{result="done"}`], 1.0, "a retransmission reached the core")
	assert.Equal(t, m[`dedup_replies_total{code="0000"}`], 2.0)
	assert.Equal(t, m["dedup_transaction_duration_seconds_count"], 2.0)
	assert.Equal(t, m["dedup_core_request_duration_seconds_count"], 1.0)
	assert.Assert(t, m["dedup_ledger_commit_duration_seconds_count"] >= 2, "claim and outcome commits: %v", m["dedup_ledger_commit_duration_seconds_count"])
	assert.Equal(t, m["dedup_inflight_transactions"], 0.0)

	// An E901: the row stays UNKNOWN, and its age grows with each refresh.
	u := newGUID()
	assert.Equal(t, code(send(t, r.addr, telegram(t, u, memo("SLOW metrics")))), "E901")
	var first float64
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		m, _ := scrape(t, r.metricsAddr)
		if m[`dedup_ledger_rows{state="UNKNOWN"}`] == 1 && m[`dedup_ledger_oldest_age_seconds{state="UNKNOWN"}`] >= 1 {
			first = m[`dedup_ledger_oldest_age_seconds{state="UNKNOWN"}`]
			return poll.Success()
		}
		return poll.Continue("UNKNOWN rows %v", m[`dedup_ledger_rows{state="UNKNOWN"}`])
	}, poll.WithTimeout(20*time.Second), poll.WithDelay(200*time.Millisecond))
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		m, _ := scrape(t, r.metricsAddr)
		if age := m[`dedup_ledger_oldest_age_seconds{state="UNKNOWN"}`]; age > first {
			return poll.Success()
		}
		return poll.Continue("the UNKNOWN row's age did not grow past %v", first)
	}, poll.WithTimeout(20*time.Second), poll.WithDelay(200*time.Millisecond))
	m, text := scrape(t, r.metricsAddr)
	assert.Equal(t, m[`dedup_core_requests_total{result="unknown"}`], 1.0)
	assert.Equal(t, m[`dedup_ledger_rows{state="DONE"}`], 1.0)
	assert.Equal(t, m[`dedup_replies_total{code="E901"}`], 1.0)
	assert.Assert(t, m["go_goroutines"] > 0, "no Go runtime collector")
	assert.Assert(t, m["process_cpu_seconds_total"] >= 0)
	_, hasProcess := m["process_cpu_seconds_total"]
	assert.Assert(t, hasProcess, "no process collector")

	// promtool accepts the exposition.
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, "promtool check metrics: %s", out)

	status, body := httpGet(t, "http://"+r.metricsAddr+"/healthz")
	assert.Equal(t, status, 200)
	assert.Equal(t, strings.TrimSpace(body), "ok")
	status, body = httpGet(t, "http://"+r.metricsAddr+"/readyz")
	assert.Equal(t, status, 200, body)
}

// /readyz turns 503 while the ledger cannot be read (the database stopped)
// and 200 again once it is back, without a restart.
func TestReadyzFollowsTheLedger(t *testing.T) {
	t.Parallel()
	pg, db := ownPostgres(t)
	c := startCore(t)
	r := startRelay(t, db, c.url, "--metrics-listen", "127.0.0.1:0")
	readyz := "http://" + r.metricsAddr + "/readyz"
	// Ready once the channel listener is served: a load balancer polls,
	// and a probe in the first milliseconds may see 503.
	ready := func(poll.LogT) poll.Result {
		if status, body := httpGet(t, readyz); status != 200 {
			return poll.Continue("%d %s", status, body)
		}
		return poll.Success()
	}
	poll.WaitOn(t, ready, poll.WithTimeout(30*time.Second), poll.WithDelay(50*time.Millisecond))
	assert.NilError(t, pg.StopServer("immediate"))
	status, body := httpGet(t, readyz)
	assert.Equal(t, status, 503, body)
	// The network learns which part; the cause (naming the host) goes to the log.
	assert.Equal(t, strings.TrimSpace(body), "not ready: ledger")
	r.waitLog(t, "readiness check failed")
	assert.NilError(t, pg.StartServer())
	poll.WaitOn(t, ready, poll.WithTimeout(30*time.Second), poll.WithDelay(200*time.Millisecond))
	status, _ = httpGet(t, "http://"+r.metricsAddr+"/healthz")
	assert.Equal(t, status, 200)
}

func textfileValue(t *testing.T, path, series string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	assert.NilError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// The textfile's last-success timestamp advances only on a successful run;
// the file is valid for promtool; --summary-format json is one JSON object.
func TestJobTextfileAndJSONSummary(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	insert(t, db, newGUID(), "UNKNOWN", "E901", telegram(t, "x"), nil, 1, "-600 seconds")
	prom := filepath.Join(t.TempDir(), "resolve.prom")

	res := runJob(t, "resolve", "--db", path, "--core", c.url, "--min-age", "300", "--metrics-textfile", prom, "--summary-format", "json")
	res.Assert(t, icmd.Success)
	var sum map[string]any
	assert.NilError(t, json.Unmarshal([]byte(lastLine(res.Stdout())), &sum), res.Stdout())
	assert.DeepEqual(t, sum, map[string]any{"job": "resolve", "candidates": 1.0, "done": 0.0, "failed": 1.0, "left": 0.0})
	assert.Equal(t, strings.Count(res.Stdout()+res.Stderr(), `"candidates"`), 1, "the summary was printed more than once")
	ok1 := textfileValue(t, prom, `dedup_job_last_success_timestamp_seconds{job="resolve"}`)
	run1 := textfileValue(t, prom, `dedup_job_last_run_timestamp_seconds{job="resolve"}`)
	assert.Assert(t, ok1 != "" && run1 != "")
	assert.Equal(t, textfileValue(t, prom, `dedup_job_rows{job="resolve",outcome="failed"}`), "1")
	f, err := os.Open(prom)
	assert.NilError(t, err)
	cmd := exec.Command("promtool", "check", "metrics")
	cmd.Stdin = f
	out, err := cmd.CombinedOutput()
	f.Close()
	assert.NilError(t, err, "promtool: %s", out)

	time.Sleep(1100 * time.Millisecond) // timestamps have millisecond resolution; make them differ
	// A run that cannot open its ledger: exit 1, last run advances, last success kept.
	res = runJob(t, "resolve", "--db", filepath.Join(t.TempDir(), "missing-dir", "x.db"), "--core", c.url, "--metrics-textfile", prom)
	assert.Equal(t, res.ExitCode, 1)
	assert.Equal(t, textfileValue(t, prom, `dedup_job_last_success_timestamp_seconds{job="resolve"}`), ok1, "a failed run advanced the last success")
	assert.Assert(t, textfileValue(t, prom, `dedup_job_last_run_timestamp_seconds{job="resolve"}`) != run1, "a failed run did not advance the last run")

	// A successful run advances it again.
	res = runJob(t, "resolve", "--db", path, "--core", c.url, "--metrics-textfile", prom)
	res.Assert(t, icmd.Success)
	assert.Assert(t, textfileValue(t, prom, `dedup_job_last_success_timestamp_seconds{job="resolve"}`) != ok1)
}

// --dry-run changes nothing and says what a real run would do.
func TestDryRunsChangeNothing(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	f := newGUID()
	insert(t, db, f, "FAILED", "E902", telegram(t, f), nil, 1, "-10 seconds")
	insert(t, db, newGUID(), "DONE", "0000", telegram(t, "y"), []byte("r"), 1, "-8 days")
	before := rowsSnapshot(t, db)
	res := runJob(t, "reprocess", "--db", path, "--core", c.url, "--dry-run")
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "reprocess: candidates=1 sent=0 done=0 unknown=0 failed=0 skipped=0 exhausted=0 would_send=1")
	res = runJob(t, "purge", "--db", path, "--days", "7", "--dry-run")
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "purge: deleted=0 would_delete=1")
	assert.DeepEqual(t, rowsSnapshot(t, db), before)
	assert.Equal(t, c.stats(t).ByGUID[f], 0, "a dry run sent a transfer")
}

// Usage errors name their flag, exit 2, and create nothing.
func TestUsageErrorsNameTheFlagAndCreateNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		bin  string
		args []string
		want string
	}{
		{"purge", []string{"--days", "-1"}, "--days: -1 is negative"},
		{"purge", []string{"--days=-1"}, "--days: -1 is negative"},
		{"relay", []string{"--timeout", "-1"}, "--timeout: -1 is negative"},
		{"relay", []string{"--timeout=-1"}, "--timeout: -1 is negative"},
		{"channel", []string{"send", "--amount", "-5"}, "--amount: -5 is negative"},
		{"relay", []string{"--db"}, "--db needs a value"},
		{"relay", []string{"--core", "notaurl"}, "--core:"},
		{"relay", []string{"--core", "ftp://x"}, "--core:"},
		{"relay", []string{"--listen", "999.0.0.1:1"}, "--listen:"},
		{"relay", []string{"--db", "file:x.db?mode=memory"}, "--db:"},
		{"relay", []string{"--db", "postgres://u:pw@h:notaport/d"}, "--db:"},
		{"resolve", []string{"--core", "notaurl"}, "--core:"},
		{"reprocess", []string{"--max-attempts", "0"}, "--max-attempts"},
		{"relay", []string{"--orphan-after", "3"}, "--orphan-after"},
		{"relay", []string{"--listen", "foo"}, "--listen:"},
		{"fixturecore", []string{"--listen", "foo"}, "--listen:"},
		{"relay", []string{"--core", "gopher://x"}, "want http://HOST:PORT or https://HOST:PORT"},
	} {
		t.Run(tc.bin+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			dir := t.TempDir()
			args := tc.args
			if tc.bin != "channel" && tc.bin != "fixturecore" && !strings.HasPrefix(strings.Join(args, " "), "--db") {
				args = append([]string{"--db", filepath.Join(dir, "ledger.db")}, args...)
			}
			cmd := icmd.Command(bin(tc.bin), args...)
			cmd.Dir = dir
			res := icmd.RunCmd(cmd, icmd.WithTimeout(30*time.Second))
			assert.Equal(t, res.ExitCode, 2, res.Combined())
			lines := strings.Split(strings.TrimSpace(res.Stderr()), "\n")
			assert.Equal(t, len(lines), 1, "not one line: %q", res.Stderr())
			assert.Assert(t, strings.Contains(lines[0], tc.want), lines[0])
			entries, err := os.ReadDir(dir)
			assert.NilError(t, err)
			assert.Equal(t, len(entries), 0, "a usage error created files: %v", entries)
		})
	}
}

// With --log-format json every stderr line is JSON, the listening line
// included, whose msg is exactly "listening addr=HOST:PORT".
func TestJSONLogsListeningLineIsJSON(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	r := startRelay(t, tempDB(t), c.url, "--log-format", "json")
	assert.Equal(t, code(send(t, r.addr, telegram(t, newGUID()))), "0000")
	r.waitLog(t, `"msg":"tx"`)
	found := false
	for _, line := range strings.Split(strings.TrimSpace(r.log()), "\n") {
		var obj map[string]any
		assert.NilError(t, json.Unmarshal([]byte(line), &obj), "not JSON: %s", line)
		if obj["msg"] == "listening addr="+r.addr {
			found = true
		}
		if obj["msg"] == "tx" {
			assert.Assert(t, strings.HasPrefix(fmt.Sprint(obj["peer"]), "127.0.0.1:"), "the tx line does not name the peer: %s", line)
		}
	}
	assert.Assert(t, found, "no JSON listening line:\n%s", r.log())
}

// --version names the VCS revision of a build from a git checkout and the
// Go version.
func TestVersionShowsRevision(t *testing.T) {
	t.Parallel()
	for _, b := range []string{"relay", "resolve", "reprocess", "purge", "inspect", "fixturecore", "channel"} {
		res := icmd.RunCmd(icmd.Command(bin(b), "--version"))
		res.Assert(t, icmd.Success)
		assert.Check(t, is.Regexp(`^`+b+` \S+ revision [0-9a-f]{40}(\+dirty)? \(\S+\) go1\.\d+`, strings.TrimSpace(res.Stdout())), b)
	}
}

// inspect: a GUID's row decoded for a person (accounts masked, the memo
// never shown), rows by state and age, a summary per state, JSON; an
// unknown GUID exits 3.
func TestInspect(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url)
	g := newGUID()
	assert.Equal(t, code(send(t, r.addr, telegram(t, g, memo("secret memo"), accounts("11020030004001", "11020030009876")))), "0000")
	ldb := openDB(t, db)
	u := newGUID()
	insert(t, ldb, u, "UNKNOWN", "E901", telegram(t, u), nil, 1, "-900 seconds")

	res := runJob(t, "inspect", "--db", db, g)
	res.Assert(t, icmd.Success)
	out := res.Stdout()
	for _, want := range []string{"guid        " + g, "state       DONE 0000", "attempts    1", "tx_code=TRF00001", "channel=MOB",
		"from=**********4001", "to=**********9876", "amount=150000", "reply       0000 ref=C"} {
		assert.Check(t, strings.Contains(out, want), "%q not in\n%s", want, out)
	}
	assert.Check(t, !strings.Contains(out, "secret"), "the memo was shown")
	assert.Check(t, !strings.Contains(out, "11020030009876"), "an account was shown unmasked")

	res = runJob(t, "inspect", "--db", db, "--format", "json", g)
	res.Assert(t, icmd.Success)
	var row map[string]any
	assert.NilError(t, json.Unmarshal([]byte(res.Stdout()), &row))
	assert.Equal(t, row["state"], "DONE")
	assert.Equal(t, row["request"].(map[string]any)["to"], "**********9876")

	res = runJob(t, "inspect", "--db", db, "--state", "unknown", "--older-than", "600")
	res.Assert(t, icmd.Success)
	assert.Assert(t, strings.Contains(res.Stdout(), "guid        "+u))
	res = runJob(t, "inspect", "--db", db, "--state", "UNKNOWN", "--older-than", "1200")
	res.Assert(t, icmd.Success)
	assert.Assert(t, !strings.Contains(res.Stdout(), u), "a row younger than --older-than was listed")

	res = runJob(t, "inspect", "--db", db, "--summary", "--format", "json")
	res.Assert(t, icmd.Success)
	sums := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout()), "\n") {
		var s struct {
			State string
			Rows  float64
		}
		assert.NilError(t, json.Unmarshal([]byte(line), &s))
		sums[s.State] = s.Rows
	}
	assert.DeepEqual(t, sums, map[string]float64{"RECEIVED": 0, "SENT": 0, "DONE": 1, "UNKNOWN": 1, "FAILED": 0})

	missing := newGUID()
	res = runJob(t, "inspect", "--db", db, g, missing)
	assert.Equal(t, res.ExitCode, 3)
	assert.Assert(t, strings.Contains(res.Stdout(), g), "the known GUID was not shown")
	assert.Assert(t, strings.Contains(res.Stderr(), missing+": no row"))
	res = runJob(t, "inspect", "--db", db, "not-a-guid")
	assert.Equal(t, res.ExitCode, 2)
}

// A long purge shows its progress on stderr when stderr is a terminal
// (here a pseudo-terminal from script(1)), and stays silent otherwise.
func TestPurgeProgressOnlyOnATerminal(t *testing.T) {
	t.Parallel()
	path, db := newLedger(t)
	db.insertOldDone(t, 1200, nil, nil)
	res := runJob(t, "purge", "--db", path, "--days", "7")
	res.Assert(t, icmd.Success)
	assert.Assert(t, !strings.Contains(res.Stderr(), "deleted 500 of"), "progress without a terminal: %q", res.Stderr())

	// bsdutils' script runs the command on a pseudo-terminal.
	cmdline := fmt.Sprintf("%s --db %s --days 7", bin("purge"), path)
	db.insertOldDone(t, 1200, nil, nil)
	res = icmd.RunCmd(icmd.Command("script", "-qec", cmdline, "/dev/null"), icmd.WithTimeout(60*time.Second))
	res.Assert(t, icmd.Success)
	assert.Assert(t, strings.Contains(res.Stdout(), "purge: deleted 1200 of 1200"), "no progress on a terminal: %q", res.Stdout())
	assert.Assert(t, strings.Contains(res.Stdout(), "purge: deleted=1200"), res.Stdout())
}

// TestDamagedSQLiteLedgerFoundWhileServingRefusesEveryNewClaim: the relay
// no longer waits for the whole-file check before it listens (seconds per
// gigabyte on a large ledger). It checks while serving; when the check
// finds the damage, it says so, and from then on claims nothing: a new
// transfer gets E902 and the core is not called.
func TestDamagedSQLiteLedgerFoundWhileServingRefusesEveryNewClaim(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := filepath.Join(t.TempDir(), "relay.db")
	damagedLedger(t, db, true)

	r := startRelay(t, db, c.url, "--metrics-listen", "127.0.0.1:0")
	r.waitLog(t, "ledger check failed")
	g := newGUID()
	tg := telegram(t, g)
	assert.Equal(t, code(send(t, r.addr, tg)), "E902", "a new transfer on a damaged ledger was not refused")
	assert.Equal(t, c.stats(t).ByGUID[g], 0, "the core was called for a transfer the ledger could not record")
	// Out of service: the load balancer and DedupRelayNotReady see it.
	status, body := httpGet(t, "http://"+r.metricsAddr+"/readyz")
	assert.Equal(t, status, 503, body)
	assert.Equal(t, strings.TrimSpace(body), "not ready: ledger")
}

// TestInspectCheckFindsADamagedFile: inspect --check (the daily timer's
// whole-file check) exits 0 with ok=1 on a sound ledger and 1, naming the
// ledger, with damaged=1 in its textfile on a file damaged inside, which
// every other binary opens without reading it whole.
func TestInspectCheckFindsADamagedFile(t *testing.T) {
	dir := t.TempDir()
	if onPostgres() {
		// The server checks its own pages: the check says so and succeeds,
		// so that one timer serves both ledgers.
		db, _ := newLedger(t)
		res := runJob(t, "inspect", "--db", db, "--check", "--metrics-textfile", filepath.Join(dir, "check.prom"))
		assert.Equal(t, res.ExitCode, 0)
		assert.Equal(t, lastLine(res.Stdout()), "check: ok=1 damaged=0")
		assert.Assert(t, strings.Contains(res.Stderr(), "the server checks its own pages"), res.Stderr())
		return
	}
	db := filepath.Join(dir, "relay.db")
	damagedLedger(t, db, false)

	prom := filepath.Join(dir, "check.prom")
	res := runJob(t, "inspect", "--db", db, "--check", "--metrics-textfile", prom)
	assert.Equal(t, res.ExitCode, 0)
	assert.Equal(t, lastLine(res.Stdout()), "check: ok=1 damaged=0")
	b, err := os.ReadFile(prom)
	assert.NilError(t, err)
	assert.Assert(t, strings.Contains(string(b), `dedup_job_rows{job="check",outcome="damaged"} 0`), string(b))
	assert.Assert(t, strings.Contains(string(b), `dedup_job_last_success_timestamp_seconds{job="check"}`), string(b))

	damageMiddle(t, db)

	// A job opens it without reading it whole (and has nothing to do).
	res = runJob(t, "resolve", "--db", db, "--min-age", "300")
	assert.Equal(t, res.ExitCode, 0)

	res = runJob(t, "inspect", "--db", db, "--check", "--metrics-textfile", prom)
	assert.Equal(t, res.ExitCode, 1)
	assert.Equal(t, lastLine(res.Stdout()), "check: ok=0 damaged=1")
	assert.Assert(t, strings.Contains(res.Stderr(), "ledger "+db), res.Stderr())
	assert.Assert(t, strings.Contains(res.Stderr(), "integrity check"), res.Stderr())
	b, err = os.ReadFile(prom)
	assert.NilError(t, err)
	assert.Assert(t, strings.Contains(string(b), `dedup_job_rows{job="check",outcome="damaged"} 1`), string(b))
}

// damagedLedger writes a SQLite ledger of 3,000 old DONE rows at db, all in
// the main file, and overwrites 4 pages in its middle if damage: the header
// and the schema still read fine, only a check of the pages finds it.
func damagedLedger(t *testing.T, db string, damage bool) {
	t.Helper()
	ldb := openDB(t, db)
	ldb.applySchema(t)
	ldb.insertOldDone(t, 3000, make([]byte, 135), make([]byte, 117))
	_, err := ldb.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	assert.NilError(t, err)
	assert.NilError(t, ldb.Close())
	if damage {
		damageMiddle(t, db)
	}
}

// damageMiddle overwrites 4 pages in the middle of the file at db.
func damageMiddle(t *testing.T, db string) {
	t.Helper()
	st, err := os.Stat(db)
	assert.NilError(t, err)
	f, err := os.OpenFile(db, os.O_WRONLY, 0)
	assert.NilError(t, err)
	_, err = f.WriteAt([]byte(strings.Repeat("garbage!", 4*4096/8)), st.Size()/2/4096*4096)
	assert.NilError(t, err)
	assert.NilError(t, f.Close())
}
