package e2e

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"
	"gotest.tools/v3/poll"

	"dedup/internal/certs"
	"dedup/internal/channel"
	"dedup/internal/testbed/pgtest"
	"dedup/internal/testbed/testpki"
)

// testPKI is a test's own certificate authority and the certificates the
// TLS tests need, made fresh in a temporary directory.
type testPKI struct {
	ca       *testpki.CA
	dir      string
	server   testpki.Issued // the relay listener's and the core's: loopback names
	relayCli testpki.Issued // the relay's client certificate for the core
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := testpki.NewCA(dir, "bank")
	assert.NilError(t, err)
	p := &testPKI{ca: ca, dir: dir}
	p.server = p.issue(t, testpki.Loopback("server", "relay.bank.internal"))
	p.relayCli = p.issue(t, testpki.Leaf{Name: "relay-client", CN: "relay-01"})
	return p
}

func (p *testPKI) issue(t *testing.T, leaf testpki.Leaf) testpki.Issued {
	t.Helper()
	is, err := p.ca.Issue(leaf)
	assert.NilError(t, err)
	return is
}

// channelCert issues a channel gateway's client certificate allowed to
// send the given channel codes.
func (p *testPKI) channelCert(t *testing.T, cn string, codes ...string) testpki.Issued {
	t.Helper()
	var uris []string
	for _, c := range codes {
		uris = append(uris, "urn:dedup:channel:"+c)
	}
	return p.issue(t, testpki.Leaf{Name: "chan-" + cn, CN: cn, URIs: uris})
}

// listenerArgs are the relay's flags for a TLS listener that requires
// client certificates of this CA.
func (p *testPKI) listenerArgs() []string {
	return []string{"--tls-cert", p.server.Cert, "--tls-key", p.server.Key, "--client-ca", p.ca.File}
}

// coreArgs are the flags of a binary calling the core over mutual TLS.
func (p *testPKI) coreArgs() []string {
	return []string{"--core-ca", p.ca.File, "--core-cert", p.relayCli.Cert, "--core-key", p.relayCli.Key}
}

// clientTLS is a channel's TLS configuration: this CA's roots and, if
// given, a client certificate.
func (p *testPKI) clientTLS(t *testing.T, cert *testpki.Issued) *tls.Config {
	t.Helper()
	set, err := certs.Load(certs.Files{CA: p.ca.File})
	assert.NilError(t, err)
	cfg := set.ClientConfig()
	cfg.ServerName = "127.0.0.1"
	if cert != nil {
		// Loaded as is: the tests present expired certificates too.
		pair, err := tls.LoadX509KeyPair(cert.Cert, cert.Key)
		assert.NilError(t, err)
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// startTLSCore starts a fixture core serving https with the PKI's server
// certificate, requiring client certificates if mtls.
func startTLSCore(t *testing.T, p *testPKI, mtls bool, args ...string) *core {
	t.Helper()
	a := []string{"--listen", "127.0.0.1:0", "--tls-cert", p.server.Cert, "--tls-key", p.server.Key}
	if mtls {
		a = append(a, "--client-ca", p.ca.File)
	}
	pr := start(t, "fixturecore", append(a, args...)...)
	return &core{proc: pr, url: "https://" + pr.addr, pki: p}
}

// sendTLS sends one telegram over a new TLS connection.
func sendTLS(addr string, cfg *tls.Config, tg []byte) ([]byte, error) {
	c, err := channel.DialTLS(addr, 10*time.Second, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.RoundTrip(tg)
}

// Channels over mutual TLS: only a certificate of the bank's CA, not
// expired, gets in, and it may send only as the channels it names; a
// plain-TCP client on the TLS port gets nothing. Nothing refused leaves a
// row or reaches the core.
func TestChannelsNeedACertificateForTheirChannel(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url, append(p.listenerArgs(), "--metrics-listen", "127.0.0.1:0")...)
	ldb := openDB(t, db)

	other := newTestPKI(t)
	foreign := other.channelCert(t, "mob-gw-99", "MOB")
	expired := p.issue(t, testpki.Leaf{Name: "expired", CN: "mob-gw-02", URIs: []string{"urn:dedup:channel:MOB"}, Expired: true})
	mob := p.channelCert(t, "mob-gw-01", "MOB")
	for _, tc := range []struct {
		name string
		cert *testpki.Issued
	}{{"no certificate", nil}, {"another CA's", &foreign}, {"expired", &expired}} {
		g := newGUID()
		reply, err := sendTLS(r.addr, p.clientTLS(t, tc.cert), telegram(t, g))
		assert.Check(t, err != nil, "%s: got a reply %q", tc.name, reply)
		assert.Check(t, is.Nil(getRow(t, ldb, g)), "%s: a row was written", tc.name)
	}
	// Plain TCP on the TLS port.
	g := newGUID()
	conn, err := channel.Dial(r.addr, 5*time.Second)
	assert.NilError(t, err)
	_, err = conn.RoundTrip(telegram(t, g))
	conn.Close()
	assert.Check(t, err != nil, "a plain-TCP client got a reply")
	assert.Check(t, is.Nil(getRow(t, ldb, g)))

	// The mobile gateway's certificate sending as internet banking.
	g = newGUID()
	tg := telegram(t, g, channelCode("IBK"))
	reply, err := sendTLS(r.addr, p.clientTLS(t, &mob), tg)
	assert.NilError(t, err)
	assert.DeepEqual(t, reply, expectReply(tg, "E900", nil))
	assert.Check(t, is.Nil(getRow(t, ldb, g)))
	r.waitLog(t, `detail="channel IBK not allowed for client certificate CN=mob-gw-01"`)

	// As itself.
	g = newGUID()
	reply, err = sendTLS(r.addr, p.clientTLS(t, &mob), telegram(t, g))
	assert.NilError(t, err)
	assert.Equal(t, code(reply), "0000")
	r.waitLog(t, "client=mob-gw-01 guid="+g)

	s := c.stats(t)
	assert.Equal(t, s.Transfers, 1, "a refused telegram reached the core: %v", s.ByGUID)
	m, _ := scrape(t, r.metricsAddr)
	assert.Check(t, m[`dedup_channel_rejected_total{reason="tls_handshake"}`] >= 4, "%v", m)
	assert.Check(t, is.Equal(m[`dedup_channel_rejected_total{reason="channel_not_allowed"}`], 1.0))
	assert.Check(t, m[`dedup_tls_cert_expiry_timestamp_seconds{cert="listener"}`] > float64(time.Now().Unix()))
}

// SIGHUP re-reads the listener's files: the next connection gets the new
// certificate; a broken file keeps the old one and the log names it.
func TestSighupReloadsCertificates(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "relay.pem"), filepath.Join(dir, "relay-key.pem")
	install := func(is testpki.Issued) {
		for src, dst := range map[string]string{is.Cert: cert, is.Key: key} {
			b, err := os.ReadFile(src)
			assert.NilError(t, err)
			assert.NilError(t, os.WriteFile(dst, b, 0o600))
		}
	}
	install(p.issue(t, testpki.Loopback("relay-a", "relay-a")))
	c := startCore(t)
	r := startRelay(t, tempDB(t), c.url, "--tls-cert", cert, "--tls-key", key)
	servedCN := func() string {
		conn, err := tls.Dial("tcp", r.addr, &tls.Config{RootCAs: p.clientTLS(t, nil).RootCAs, ServerName: "127.0.0.1"})
		assert.NilError(t, err)
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	assert.Equal(t, servedCN(), "relay-a")
	reply, err := sendTLS(r.addr, p.clientTLS(t, nil), telegram(t, newGUID()))
	assert.NilError(t, err)
	assert.Equal(t, code(reply), "0000")

	install(p.issue(t, testpki.Loopback("relay-b", "relay-b")))
	assert.NilError(t, r.cmd.Process.Signal(syscall.SIGHUP))
	r.waitLog(t, "certificates reloaded")
	assert.Equal(t, servedCN(), "relay-b")

	assert.NilError(t, os.WriteFile(cert, []byte("not a certificate\n"), 0o600))
	assert.NilError(t, r.cmd.Process.Signal(syscall.SIGHUP))
	r.waitLog(t, "certificate reload failed")
	assert.Assert(t, strings.Contains(r.log(), cert), "the failed reload does not name the file:\n%s", r.log())
	assert.Equal(t, servedCN(), "relay-b", "a broken file replaced the certificate")
}

// TLS files are checked at start, before the ledger is created: a file
// that is missing, not PEM, a key of another certificate, or an expired
// certificate exits 1 naming the file; half a pair is a usage error.
func TestBadTLSFilesAreRefusedAtStart(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	other := p.issue(t, testpki.Loopback("other", "other"))
	expired := p.issue(t, testpki.Leaf{Name: "old", CN: "old", Expired: true})
	junk := filepath.Join(p.dir, "junk.pem")
	assert.NilError(t, os.WriteFile(junk, []byte("junk"), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		exit int
		want string
	}{
		{"missing file", []string{"--tls-cert", p.dir + "/nope.pem", "--tls-key", p.server.Key}, 1, "nope.pem"},
		{"not PEM", []string{"--tls-cert", junk, "--tls-key", p.server.Key}, 1, junk},
		{"key of another certificate", []string{"--tls-cert", p.server.Cert, "--tls-key", other.Key}, 1, other.Key},
		{"expired", []string{"--tls-cert", expired.Cert, "--tls-key", expired.Key}, 1, "expired"},
		{"CA not PEM", []string{"--tls-cert", p.server.Cert, "--tls-key", p.server.Key, "--client-ca", junk}, 1, junk},
		{"core CA not PEM", []string{"--core", "https://127.0.0.1:1", "--core-ca", junk}, 1, junk},
		{"half a pair", []string{"--tls-cert", p.server.Cert}, 2, "--tls-cert and --tls-key go together"},
		{"client CA without a certificate", []string{"--client-ca", p.ca.File}, 2, "--client-ca needs"},
		{"core certificate over http", []string{"--core-ca", p.ca.File}, 2, "need an https:// --core"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "relay.db")
			res := icmd.RunCmd(icmd.Command(bin("relay"), append([]string{"--db", db, "--listen", "127.0.0.1:0"}, tc.args...)...),
				icmd.WithTimeout(30*time.Second))
			assert.Equal(t, res.ExitCode, tc.exit, res.Combined())
			assert.Assert(t, strings.Contains(res.Stderr(), tc.want), res.Stderr())
			_, err := os.Stat(db)
			assert.Assert(t, os.IsNotExist(err), "the ledger was created")
		})
	}
}

// The core over https: mutual TLS to a core that requires client
// certificates works, and each job verifies the core too; a relay
// without its client certificate, or facing an untrusted or misnamed core
// certificate, gets no connection: E902, FAILED, nothing applied.
func TestCoreOverHTTPS(t *testing.T) {
	t.Parallel()
	p := newTestPKI(t)
	c := startTLSCore(t, p, true)
	db := tempDB(t)
	r := startRelay(t, db, c.url, p.coreArgs()...)
	assert.Assert(t, strings.Contains(r.log(), "core_roots=\"--core-ca "+p.ca.File+"\""), r.log())
	g := newGUID()
	assert.Equal(t, code(send(t, r.addr, telegram(t, g))), "0000")
	assert.Equal(t, c.stats(t).AppliedByGUID[g], 1)

	other := newTestPKI(t)
	misnamed := p.issue(t, testpki.Leaf{Name: "misnamed", CN: "core.elsewhere", DNS: []string{"core.elsewhere"}})
	cMis := start(t, "fixturecore", "--listen", "127.0.0.1:0", "--tls-cert", misnamed.Cert, "--tls-key", misnamed.Key)
	for _, tc := range []struct {
		name string
		core string
		args []string
	}{
		{"no client certificate", c.url, []string{"--core-ca", p.ca.File}},
		{"untrusted core certificate", c.url, other.coreArgs()},
		{"misnamed core certificate", "https://" + cMis.addr, []string{"--core-ca", p.ca.File}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := tempDB(t)
			r := startRelay(t, db, tc.core, tc.args...)
			g := newGUID()
			assert.Equal(t, code(send(t, r.addr, telegram(t, g))), "E902")
			row := getRow(t, openDB(t, db), g)
			assert.Equal(t, row.State.String, "FAILED")
			assert.Equal(t, c.stats(t).ByGUID[g], 0)
			r.waitLog(t, "guid="+g)
			assert.Assert(t, strings.Contains(r.log(), "tls"), "the log does not name the TLS cause:\n%s", r.log())
		})
	}

	// resolve and reprocess over mutual TLS.
	u, f := newGUID(), newGUID()
	ldb := openDB(t, db)
	insert(t, ldb, u, "UNKNOWN", "E901", telegram(t, u), nil, 1, "-900 seconds")
	insert(t, ldb, f, "FAILED", "E902", telegram(t, f), nil, 1, "-900 seconds")
	res := runJob(t, "resolve", append([]string{"--db", db, "--core", c.url, "--min-age", "300"}, p.coreArgs()...)...)
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "resolve: candidates=1 done=0 failed=1 left=0")
	res = runJob(t, "reprocess", append([]string{"--db", db, "--core", c.url}, p.coreArgs()...)...)
	res.Assert(t, icmd.Success)
	assert.Equal(t, lastLine(res.Stdout()), "reprocess: candidates=2 sent=2 done=2 unknown=0 failed=0 skipped=0 exhausted=0")
	assert.Equal(t, c.stats(t).AppliedByGUID[u], 1)
	assert.Equal(t, c.stats(t).AppliedByGUID[f], 1)
}

// --max-conns: the connection over the limit is closed at once and
// counted, and a transfer on one of the open connections still gets its
// answer.
func TestMaxConnsClosesTheOneTooMany(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	r := startRelay(t, tempDB(t), c.url, "--max-conns", "50", "--metrics-listen", "127.0.0.1:0")
	var conns []*channel.Conn
	for i := 0; i < 50; i++ {
		conn, err := dialRelay(r.addr)
		assert.NilError(t, err)
		defer conn.Close()
		conns = append(conns, conn)
	}
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if m, _ := scrape(t, r.metricsAddr); m["dedup_channel_connections"] != 50 {
			return poll.Continue("%v connections open", m["dedup_channel_connections"])
		}
		return poll.Success()
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(10*time.Millisecond))
	extra, err := net.Dial("tcp", r.addr)
	assert.NilError(t, err)
	defer extra.Close()
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := extra.Read(make([]byte, 1))
	assert.Assert(t, n == 0 && err != nil, "the 51st connection was kept open")
	assert.Assert(t, !isTimeout(err), "the 51st connection was not closed at once: %v", err)

	reply, err := conns[17].RoundTrip(telegram(t, newGUID()))
	assert.NilError(t, err)
	assert.Equal(t, code(reply), "0000")
	m, _ := scrape(t, r.metricsAddr)
	assert.Equal(t, m[`dedup_channel_rejected_total{reason="max_conns"}`], 1.0)
	r.waitLog(t, "--max-conns reached")
}

// A flood of malformed frames is logged at most about 10 lines a second
// plus the suppressed= lines, and the relay keeps answering.
func TestMalformedFloodIsLoggedAtARate(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	r := startRelay(t, tempDB(t), c.url)
	begin := time.Now()
	for i := 0; i < 2000; i++ {
		conn, err := dialRelay(r.addr)
		assert.NilError(t, err)
		conn.SendRaw([]byte("garbage!"))
		conn.Close()
	}
	reply := send(t, r.addr, telegram(t, newGUID()))
	assert.Equal(t, code(reply), "0000")
	r.waitLog(t, "suppressed=")
	secs := time.Since(begin).Seconds() + 1
	lines := strings.Count(r.log(), "bad or incomplete frame")
	assert.Assert(t, float64(lines) <= 10*(secs+1), "%d lines about bad frames in %.1f s", lines, secs)
	assert.Assert(t, lines >= 10, "only %d lines: the refusals are not logged at all", lines)
}

// A DONE row written by another tool with a 1-byte or garbage response is
// answered E901 (logged), even to a client that never reads, and the relay
// keeps serving.
func TestUnusableStoredReplyIsE901AndTheRelayKeepsServing(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url)
	ldb := openDB(t, db)
	for _, resp := range [][]byte{[]byte("x"), []byte(strings.Repeat("\xff", 300))} {
		g := newGUID()
		tg := telegram(t, g)
		insert(t, ldb, g, "DONE", "0000", tg, resp, 1, "-10 seconds")
		// A client that sends and never reads.
		conn, err := dialRelay(r.addr)
		assert.NilError(t, err)
		assert.NilError(t, conn.Send(tg))
		conn.Close()
		assert.DeepEqual(t, send(t, r.addr, tg), expectReply(tg, "E901", nil))
		r.waitLog(t, "stored reply is unusable")
	}
	assert.Equal(t, code(send(t, r.addr, telegram(t, newGUID()))), "0000")
	assert.Equal(t, c.stats(t).Transfers, 1)
}

// The ledger a relay creates, and its -wal and -shm, are 0600 under umask
// 022; purge leaves no purged memo in the file.
func TestLedgerFilesArePrivateAndPurgeLeavesNoMemo(t *testing.T) {
	t.Parallel() // SQLite only: scripts/test.sh leaves it out of the PostgreSQL pass
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url)
	g := newGUID()
	assert.Equal(t, code(send(t, r.addr, telegram(t, g, memo("MEMO-7f3a")))), "0000")
	for _, f := range []string{db, db + "-wal", db + "-shm"} {
		fi, err := os.Stat(f)
		assert.NilError(t, err)
		assert.Check(t, is.Equal(fi.Mode().Perm(), os.FileMode(0o600)), f)
	}
	assert.Equal(t, r.stop(t, syscall.SIGTERM), 0)
	ldb := openDB(t, db)
	_, err := ldb.Exec("UPDATE tx SET updated_at = datetime('now', '-30 days')")
	assert.NilError(t, err)
	res := runJob(t, "purge", "--db", db, "--days", "7")
	res.Assert(t, icmd.Success)
	for _, f := range []string{db, db + "-wal"} {
		b, err := os.ReadFile(f)
		if os.IsNotExist(err) {
			continue
		}
		assert.NilError(t, err)
		assert.Check(t, !strings.Contains(string(b), "MEMO-7f3a"), "the purged memo is still in %s", f)
	}
}

// No ledger URL form shows its password: not in any log line, error,
// metric, /readyz answer or summary; and a --db carrying one is warned
// about at start.
func TestNoPasswordLeavesTheProcess(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-pw-91"
	base := pgtest.SharedDatabase(t) // postgres://postgres@127.0.0.1:PORT/DB?sslmode=disable
	withUser := strings.Replace(base, "postgres://postgres@", "postgres://postgres:"+secret+"@", 1)
	dead := "postgres://relay:" + secret + "@127.0.0.1:1/dedup?sslmode=disable&password=" + secret
	c := startCore(t)
	for _, url := range []string{withUser, base + "&password=" + secret, base + "&sslpassword=" + secret} {
		t.Run(strings.Replace(url, secret, "SECRET", -1), func(t *testing.T) {
			r := startRelay(t, url, c.url, "--metrics-listen", "127.0.0.1:0")
			assert.Equal(t, code(send(t, r.addr, telegram(t, newGUID()))), "0000")
			_, metricsText := scrape(t, r.metricsAddr)
			_, ready := httpGet(t, "http://"+r.metricsAddr+"/readyz")
			res := runJob(t, "resolve", "--db", url, "--core", c.url, "--summary-format", "json")
			res.Assert(t, icmd.Success)
			r.stop(t, syscall.SIGTERM)
			r.waitLog(t, "carries a password")
			for what, text := range map[string]string{"relay log": r.log(), "metrics": metricsText, "readyz": ready,
				"resolve output": res.Combined()} {
				assert.Check(t, !strings.Contains(text, secret), "the password is in the %s:\n%s", what, text)
			}
		})
	}
	for _, b := range []string{"relay", "resolve", "purge", "inspect"} {
		args := []string{"--db", dead}
		switch b {
		case "relay":
			args = append(args, "--listen", "127.0.0.1:0")
		case "inspect":
			args = append(args, "--summary")
		}
		res := icmd.RunCmd(icmd.Command(bin(b), args...), icmd.WithTimeout(60*time.Second))
		assert.Check(t, res.ExitCode == 1, "%s: %s", b, res.Combined())
		assert.Check(t, strings.Contains(res.Stderr(), "127.0.0.1:1"), "%s: the error does not name the host: %s", b, res.Stderr())
		assert.Check(t, !strings.Contains(res.Combined(), secret), "%s: the password leaked:\n%s", b, res.Combined())
	}
}
