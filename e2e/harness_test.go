// Package e2e runs the real binaries (relay, fixturecore, resolve,
// reprocess, purge, channel) as processes on loopback with temporary
// ledgers, and checks the money-safety rules of docs/rules.md from the outside.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3"
	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"

	"dedup"
	"dedup/internal/channel"
	"dedup/internal/socket"
	"dedup/internal/testbed/pgtest"
	"dedup/ledger/backend"
	"dedup/lhstd"
)

// binDir holds the binaries built once by TestMain.
var binDir string

// ledgerKind is the ledger the end-to-end tests run against: "sqlite" (a
// temporary file per test, the default) or "postgres" (a fresh database per
// test in a throwaway cluster), from DEDUP_E2E_LEDGER. The test command runs
// the package once on each (scripts/test.sh).
var ledgerKind = "sqlite"

func TestMain(m *testing.M) {
	if k := os.Getenv("DEDUP_E2E_LEDGER"); k != "" {
		if k != "sqlite" && k != "postgres" {
			fmt.Fprintln(os.Stderr, "DEDUP_E2E_LEDGER must be sqlite or postgres")
			os.Exit(2)
		}
		ledgerKind = k
	}
	dir, err := os.MkdirTemp("", "dedup-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	args := []string{"build", "-o", dir + "/"}
	if exec.Command("git", "-C", "..", "rev-parse", "--git-dir").Run() == nil {
		args = append(args, "-buildvcs=true") // --version shows the revision
	}
	if os.Getenv("DEDUP_E2E_RACE") != "" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = ".."
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the binaries:", err)
		os.Exit(1)
	}
	binDir = dir
	// The operators' accounts run settle and inspect from here.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := pgtest.Main(m)
	removeOperators()
	os.RemoveAll(dir)
	os.Exit(code)
}

func bin(name string) string { return filepath.Join(binDir, name) }

// proc is a running binary whose stderr is kept for the test's log.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	addr string
	// metricsAddr is the relay's --metrics-listen address, printed before
	// its listening line.
	metricsAddr string
	mu          sync.Mutex
	stderr      bytes.Buffer
	exited      chan struct{}
	err         error
}

// start runs a server binary and waits for its "listening addr=" line.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, name, args...)
}

// startEnv is start with env added to the test's environment.
func startEnv(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p, addrc := spawn(t, env, name, args...)
	select {
	case p.addr = <-addrc:
	case <-p.exited:
		t.Fatalf("%s exited before listening: %v\n%s", name, p.err, p.log())
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not print its listening line\n%s", name, p.log())
	}
	return p
}

// spawn runs a binary, keeps its stderr, and returns at once with the
// channel that will carry the address of its "listening addr=" line.
func spawn(t *testing.T, env []string, name string, args ...string) (*proc, <-chan string) {
	t.Helper()
	return spawnWith(t, env, nil, name, args...)
}

// spawnWith is spawn with prepare, if not nil, changing the command before
// it starts.
func spawnWith(t *testing.T, env []string, prepare func(*exec.Cmd), name string, args ...string) (*proc, <-chan string) {
	t.Helper()
	p := &proc{t: t, name: name, exited: make(chan struct{})}
	path := bin(name)
	if strings.Contains(name, "/") {
		path = name // an explicit path, e.g. a test-only build
	}
	p.cmd = exec.Command(path, args...)
	p.cmd.Env = append(append(os.Environ(), "HTTP_PROXY=http://127.0.0.1:9", "http_proxy=http://127.0.0.1:9"), env...)
	if prepare != nil {
		prepare(p.cmd)
	}
	pipe, err := p.cmd.StderrPipe()
	assert.NilError(t, err)
	assert.NilError(t, p.cmd.Start())
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			text := line
			if strings.HasPrefix(line, "{") { // --log-format json
				var obj struct{ Msg string }
				if json.Unmarshal([]byte(line), &obj) == nil {
					text = obj.Msg
				}
			}
			if a, ok := strings.CutPrefix(text, "metrics addr="); ok {
				p.metricsAddr = a
			}
			if a, ok := strings.CutPrefix(text, "listening addr="); ok {
				select {
				case addrc <- a:
				default:
				}
			}
		}
		io.Copy(io.Discard, pipe)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- %s %v stderr:\n%s", name, args, p.log())
		}
	})
	return p, addrc
}

// spawnOn runs a server binary whose address the test chose and returns
// the instant that address accepts a TCP connection, as a grader that
// polls the port would: not waiting for any line the process prints.
func spawnOn(t *testing.T, addr, name string, args ...string) *proc {
	t.Helper()
	p, _ := spawn(t, nil, name, args...)
	p.addr = addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited before %s accepted: %v\n%s", name, addr, p.err, p.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s accepted no connection in 30 s\n%s", name, addr, p.log())
		}
		time.Sleep(time.Millisecond)
	}
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitLog waits until the process has logged a line containing substr
// (its stderr is read by another goroutine, so a line may arrive a moment
// after the reply it accompanies).
func (p *proc) waitLog(t *testing.T, substr string) {
	t.Helper()
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if strings.Contains(p.log(), substr) {
			return poll.Success()
		}
		return poll.Continue("%s has not logged %q", p.name, substr)
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(10*time.Millisecond))
}

func (p *proc) kill() {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// stop sends sig and waits for the exit, returning the exit status.
func (p *proc) stop(t *testing.T, sig syscall.Signal) int {
	t.Helper()
	assert.NilError(t, p.cmd.Process.Signal(sig))
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit after %v", p.name, sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

// core is a running fixture core.
type core struct {
	*proc
	url string
	pki *testPKI // for an https core: the CA and the client certificate to read /_stats with
}

func startCore(t *testing.T, args ...string) *core {
	t.Helper()
	p := start(t, "fixturecore", append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	return &core{proc: p, url: "http://" + p.addr}
}

// startCoreAt starts a fixture core on a fixed address (a restart of a core
// the relay already points at).
func startCoreAt(t *testing.T, addr string, args ...string) *core {
	t.Helper()
	p := start(t, "fixturecore", append([]string{"--listen", addr}, args...)...)
	return &core{proc: p, url: "http://" + p.addr}
}

func (c *core) stats(t *testing.T) *channel.Stats {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	if c.pki != nil {
		cfg := c.pki.clientTLS(t, &c.pki.relayCli)
		cfg.ServerName = ""
		client.Transport = &http.Transport{Proxy: nil, TLSClientConfig: cfg}
	}
	s, err := channel.FetchStatsVia(context.Background(), client, c.url)
	assert.NilError(t, err)
	return s
}

// post applies a transfer directly at the core, bypassing the relay.
func (c *core) post(t *testing.T, guid string) {
	t.Helper()
	body := fmt.Sprintf(`{"guid":%q,"from":"11020030004001","to":"11020030004002","amount":1000,"memo":"direct"}`, guid)
	resp, err := http.Post(c.url+"/v1/transfers", "application/json", strings.NewReader(body))
	assert.NilError(t, err)
	resp.Body.Close()
	assert.Equal(t, resp.StatusCode, 200)
}

// freeAddr returns a loopback address nobody listens on, reserved for the
// test's lifetime: the port stays bound (SO_REUSEADDR, not listening), so a
// connection to it is refused, no other test's port 0 lands on it, and the
// test's own core or relay may still bind and listen on it later. A port
// closed at once was taken by another test's fixture core during an outage
// test, which then heard 0000 where nothing should have answered.
func freeAddr(t *testing.T) string {
	t.Helper()
	b, err := socket.Bind("127.0.0.1:0")
	assert.NilError(t, err)
	t.Cleanup(func() { b.Close() })
	return b.Addr().String()
}

// tempDB returns the --db value of a new, empty ledger of ledgerKind.
func tempDB(t *testing.T) string {
	t.Helper()
	if ledgerKind == "postgres" {
		return pgtest.SharedDatabase(t)
	}
	return filepath.Join(t.TempDir(), "relay.db")
}

// ownPostgres starts a PostgreSQL cluster for this test alone (a test that
// stops and starts the server must not disturb the others) and returns it
// with the URL of an empty database in it.
func ownPostgres(t *testing.T) (*pgtest.Cluster, string) {
	t.Helper()
	pg, err := pgtest.Start(pgtest.Options{})
	assert.NilError(t, err)
	t.Cleanup(pg.Remove)
	name, err := pg.NewDatabase()
	assert.NilError(t, err)
	return pg, pg.URL(name)
}

// onPostgres reports whether the tests run against PostgreSQL.
func onPostgres() bool { return ledgerKind == "postgres" }

func startRelay(t *testing.T, db, coreURL string, args ...string) *proc {
	t.Helper()
	return start(t, "relay", append([]string{"--db", db, "--listen", "127.0.0.1:0", "--core", coreURL}, args...)...)
}

var guidSeq struct {
	sync.Mutex
	n int
}

// newGUID returns a GUID unique within this test binary run.
func newGUID() string {
	guidSeq.Lock()
	defer guidSeq.Unlock()
	guidSeq.n++
	return fmt.Sprintf("%sE2E%013d%08d", time.Now().Format("20060102"), os.Getpid(), guidSeq.n)
}

type reqOpt func(*lhstd.Transfer, *string, *string)

func memo(m string) reqOpt        { return func(tr *lhstd.Transfer, _, _ *string) { tr.Memo = m } }
func amount(a int64) reqOpt       { return func(tr *lhstd.Transfer, _, _ *string) { tr.Amount = a } }
func sentAt(s string) reqOpt      { return func(_ *lhstd.Transfer, at, _ *string) { *at = s } }
func channelCode(c string) reqOpt { return func(_ *lhstd.Transfer, _, ch *string) { *ch = c } }
func accounts(from, to string) reqOpt {
	return func(tr *lhstd.Transfer, _, _ *string) { tr.From, tr.To = from, to }
}

// telegram builds a TRF00001 request.
func telegram(t *testing.T, guid string, opts ...reqOpt) []byte {
	t.Helper()
	tr := lhstd.Transfer{From: "11020030004001", To: "11020030004002", Amount: 150000, Memo: "e2e"}
	at, ch := "20261129093000", "MOB"
	for _, o := range opts {
		o(&tr, &at, &ch)
	}
	tg, err := lhstd.NewTransferRequest(guid, ch, at, tr)
	assert.NilError(t, err)
	return tg
}

// dialRelay opens a channel connection to a relay.
func dialRelay(addr string) (*channel.Conn, error) { return channel.Dial(addr, 60*time.Second) }

// send sends one telegram on a new connection and returns the reply.
func send(t *testing.T, addr string, tg []byte) []byte {
	t.Helper()
	c, err := channel.Dial(addr, 30*time.Second)
	assert.NilError(t, err)
	defer c.Close()
	r, err := c.RoundTrip(tg)
	assert.NilError(t, err)
	return r
}

func code(reply []byte) string { return lhstd.ReplyCode(reply) }

// row is a ledger row read the way an operator would, with SQL.
type row struct {
	State, RspCode, TxCode sql.NullString
	Request, Response      []byte
	Attempts               int
	UpdatedAt              string
}

// ledgerDB is a connection to a ledger as another tool (sqlite3, psql)
// would have it. Tests write SQLite's dialect; on PostgreSQL, ? becomes
// $n, datetime('now') becomes now() and datetime('now', ?) takes its
// modifier ("-600 seconds", "-8 days") as an interval.
type ledgerDB struct {
	*sql.DB
	pg bool
}

var (
	datetimeModRE = regexp.MustCompile(`datetime\('now',\s*\?\)`)
	datetimeLitRE = regexp.MustCompile(`datetime\('now',\s*'([^']*)'\)`)
)

func (d *ledgerDB) q(query string) string {
	if !d.pg {
		return query
	}
	query = datetimeModRE.ReplaceAllString(query, "(now() + CAST(? AS interval))")
	query = datetimeLitRE.ReplaceAllString(query, "(now() + interval '$1')")
	return pgtest.Rebind(strings.ReplaceAll(query, "datetime('now')", "now()"))
}

// Exec runs a statement written in SQLite's dialect.
func (d *ledgerDB) Exec(query string, args ...any) (sql.Result, error) {
	return d.DB.Exec(d.q(query), args...)
}

// QueryRow runs a query written in SQLite's dialect.
func (d *ledgerDB) QueryRow(query string, args ...any) *sql.Row {
	return d.DB.QueryRow(d.q(query), args...)
}

// Query runs a query written in SQLite's dialect.
func (d *ledgerDB) Query(query string, args ...any) (*sql.Rows, error) {
	return d.DB.Query(d.q(query), args...)
}

// applySchema creates the table as a fresh relay would.
func (d *ledgerDB) applySchema(t *testing.T) {
	t.Helper()
	schema := dedup.Schema
	if d.pg {
		schema = dedup.SchemaPostgres
	}
	_, err := d.DB.Exec(schema)
	assert.NilError(t, err)
}

// lock takes, from a connection of its own, the write lock that a claim or
// an outcome needs (SQLite: BEGIN IMMEDIATE; PostgreSQL: LOCK TABLE), and
// returns the function that releases it.
func (d *ledgerDB) lock(t *testing.T) (unlock func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := d.DB.Conn(ctx)
	assert.NilError(t, err)
	if d.pg {
		_, err = conn.ExecContext(ctx, "BEGIN; LOCK TABLE tx IN EXCLUSIVE MODE")
	} else {
		_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	}
	assert.NilError(t, err)
	return func() {
		_, err := conn.ExecContext(ctx, "ROLLBACK")
		assert.Check(t, err)
		conn.Close()
	}
}

// insertOldDone inserts n DONE rows 30 days old named OLD<29 digits>, for
// purge to delete.
func (d *ledgerDB) insertOldDone(t *testing.T, n int, request, response []byte) {
	t.Helper()
	q := `WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i < ?)
INSERT INTO tx SELECT printf('OLD%029d', i), 'TRF00001', 'DONE', '0000', ?, ?, 1, datetime('now','-30 days') FROM s`
	if d.pg {
		q = `INSERT INTO tx SELECT 'OLD' || lpad(i::text, 29, '0'), 'TRF00001', 'DONE', '0000', ?, ?, 1, datetime('now','-30 days') FROM generate_series(1, ?) i`
		_, err := d.Exec(q, request, response, n)
		assert.NilError(t, err)
		return
	}
	_, err := d.Exec(q, n, request, response)
	assert.NilError(t, err)
}

func openDB(t *testing.T, dsn string) *ledgerDB {
	t.Helper()
	if backend.IsPostgresURL(dsn) {
		db, err := sql.Open("pgx", dsn)
		assert.NilError(t, err)
		t.Cleanup(func() { db.Close() })
		return &ledgerDB{DB: db, pg: true}
	}
	db, err := sql.Open("sqlite3", dsn+"?_busy_timeout=10000&_journal_mode=WAL")
	assert.NilError(t, err)
	t.Cleanup(func() { db.Close() })
	return &ledgerDB{DB: db}
}

// getRow returns guid's row, or nil.
func getRow(t *testing.T, db *ledgerDB, guid string) *row {
	t.Helper()
	var r row
	err := db.QueryRow("SELECT tx_code, state, rsp_code, request, response, attempts, updated_at FROM tx WHERE guid=?", guid).
		Scan(&r.TxCode, &r.State, &r.RspCode, &r.Request, &r.Response, &r.Attempts, &r.UpdatedAt)
	if err == sql.ErrNoRows {
		return nil
	}
	assert.NilError(t, err)
	return &r
}

func countRows(t *testing.T, db *ledgerDB) int {
	t.Helper()
	var n int
	assert.NilError(t, db.QueryRow("SELECT count(*) FROM tx").Scan(&n))
	return n
}

// waitState polls until guid's row is in state.
func waitState(t *testing.T, db *ledgerDB, guid, state string, timeout time.Duration) {
	t.Helper()
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		r := getRow(t, db, guid)
		if r != nil && r.State.String == state {
			return poll.Success()
		}
		if r == nil {
			return poll.Continue("no row yet")
		}
		return poll.Continue("state %s", r.State.String)
	}, poll.WithTimeout(timeout), poll.WithDelay(50*time.Millisecond))
}

// expectReply builds the reply the relay must send for request tg.
func expectReply(tg []byte, code string, body []byte) []byte { return lhstd.Reply(tg, code, body) }

// decodeJSON is for answers the tests read directly.
func decodeJSON(t *testing.T, r io.Reader, v any) {
	t.Helper()
	assert.NilError(t, json.NewDecoder(r).Decode(v))
}

// waitSQL polls until the query (one boolean) is true, for 30 s at most.
func waitSQL(t *testing.T, db *ledgerDB, q string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		assert.NilError(t, db.QueryRow(q, args...).Scan(&ok))
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", q)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
