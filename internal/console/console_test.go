package console

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"dedup"

	_ "github.com/mattn/go-sqlite3"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup/internal/testbed/pgtest"
	"dedup/internal/testbed/testpki"
	"dedup/ledger"
	"dedup/ledger/postgres"
	"dedup/ledger/sqlite"
	"dedup/lhstd"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// desk is a console over a fresh ledger, served over real TLS, with the
// certificates of its people.
type desk struct {
	url   string
	l     ledger.Ledger
	exec  func(t *testing.T, q string, args ...any)
	ca    *testpki.CA
	certs map[string]tls.Certificate
	files map[string]testpki.Issued
	pool  *x509.CertPool
}

var ledgers = []struct {
	name string
	open func(t *testing.T) (ledger.Ledger, func(t *testing.T, q string, args ...any))
}{
	{"sqlite", func(t *testing.T) (ledger.Ledger, func(t *testing.T, q string, args ...any)) {
		path := filepath.Join(t.TempDir(), "l.db")
		l, err := sqlite.Open(path, ledger.Options{Actor: "relay@h1"})
		assert.NilError(t, err)
		t.Cleanup(func() { l.Close() })
		db, err := sql.Open("sqlite3", path)
		assert.NilError(t, err)
		t.Cleanup(func() { db.Close() })
		return l, func(t *testing.T, q string, args ...any) {
			_, err := db.Exec(minutesAgo.ReplaceAllString(q, "datetime('now', '-$1 minutes')"), args...)
			assert.NilError(t, err)
		}
	}},
	{"postgres", func(t *testing.T) (ledger.Ledger, func(t *testing.T, q string, args ...any)) {
		url := pgtest.SharedDatabase(t)
		l, err := postgres.Open(url, ledger.Options{Actor: "relay@h1"})
		assert.NilError(t, err)
		t.Cleanup(func() { l.Close() })
		return l, func(t *testing.T, q string, args ...any) { pgtest.Exec(t, url, pgtest.Rebind(q), args...) }
	}},
}

// minutesAgo is PostgreSQL's "now() - interval 'N minutes'", which the
// SQLite ledger's exec turns into its own.
var minutesAgo = regexp.MustCompile(`now\(\) - interval '(\d+) minutes'`)

// newDesk starts a console over a fresh ledger from open; with, if given,
// changes its options.
func newDesk(t *testing.T, open func(t *testing.T) (ledger.Ledger, func(t *testing.T, q string, args ...any)), with ...func(*Options)) *desk {
	t.Helper()
	l, exec := open(t)
	dir := t.TempDir()
	ca, err := testpki.NewCA(dir, "operators")
	assert.NilError(t, err)
	other, err := testpki.NewCA(dir, "other")
	assert.NilError(t, err)
	d := &desk{l: l, exec: exec, ca: ca, certs: map[string]tls.Certificate{}, files: map[string]testpki.Issued{}, pool: x509.NewCertPool()}
	d.pool.AddCert(ca.Cert)
	issue := func(ca *testpki.CA, name string, leaf testpki.Leaf) {
		leaf.Name = name
		f, err := ca.Issue(leaf)
		assert.NilError(t, err)
		c, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		assert.NilError(t, err)
		d.certs[name] = c
		d.files[name] = f
	}
	issue(ca, "server", testpki.Loopback("server", "console"))
	issue(ca, "kim", testpki.Leaf{CN: "kim", URIs: []string{"urn:dedup:operator:kim", "urn:dedup:role:operator"}})
	issue(ca, "lee", testpki.Leaf{CN: "lee", URIs: []string{"urn:dedup:operator:lee", "urn:dedup:role:operator"}})
	issue(ca, "vic", testpki.Leaf{CN: "vic", URIs: []string{"urn:dedup:operator:vic", "urn:dedup:role:viewer"}})
	issue(ca, "nosan", testpki.Leaf{CN: "someone"})
	issue(ca, "expired", testpki.Leaf{CN: "kim", URIs: []string{"urn:dedup:operator:kim", "urn:dedup:role:operator"}, Expired: true})
	issue(other, "foreign", testpki.Leaf{CN: "kim", URIs: []string{"urn:dedup:operator:kim", "urn:dedup:role:operator"}})
	opts := Options{Host: "h1", Log: slog.New(slog.NewTextHandler(testLog{t}, nil))}
	for _, w := range with {
		w(&opts)
	}
	s, err := New(l, opts)
	assert.NilError(t, err)
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{d.certs["server"]},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: d.pool}
	ts.StartTLS()
	t.Cleanup(ts.Close)
	d.url = ts.URL
	return d
}

// testLog writes the console's log lines to the test's log.
type testLog struct{ t *testing.T }

func (w testLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// client is a browser holding who's certificate ("" for none).
func (d *desk) client(who string) *http.Client {
	cfg := &tls.Config{RootCAs: d.pool, MinVersion: tls.VersionTLS12}
	if who != "" {
		cfg.Certificates = []tls.Certificate{d.certs[who]}
	}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, Proxy: nil},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (d *desk) get(t *testing.T, who, path string) (int, string) {
	t.Helper()
	resp, err := d.client(who).Get(d.url + path)
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token is who's CSRF token, as their page carries it.
func (d *desk) token(t *testing.T, who, guid string) string {
	t.Helper()
	code, body := d.get(t, who, "/tx/"+guid)
	assert.Equal(t, code, 200, body)
	m := csrfRE.FindStringSubmatch(body)
	assert.Assert(t, m != nil, "no token in the page of %s", who)
	return m[1]
}

func (d *desk) post(t *testing.T, who, path string, form url.Values, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", d.url+path, strings.NewReader(form.Encode()))
	assert.NilError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", d.url)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := d.client(who).Do(req)
	assert.NilError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var guidSeq atomic.Int64

func newGUID() string { return fmt.Sprintf("20261202MOB%021d", guidSeq.Add(1)) }

func (d *desk) insertUnknown(t *testing.T, guid string) {
	t.Helper()
	d.insertRow(t, guid, "UNKNOWN", "E901", 10)
}

// insertRow writes a row of a 150,000-won transfer in state with code, last
// changed minutes ago, as the relay leaves it.
func (d *desk) insertRow(t *testing.T, guid, state, code string, minutes int) {
	t.Helper()
	req, err := lhstd.NewTransferRequest(guid, "MOB", "20261202093000", lhstd.Transfer{From: "11020030004001", To: "11020030009999", Amount: 150000, Memo: "rent"})
	assert.NilError(t, err)
	d.exec(t, fmt.Sprintf("INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts, updated_at) VALUES(?, 'TRF00001', ?, ?, ?, NULL, 1, now() - interval '%d minutes')", minutes), guid, state, code, req)
}

func (d *desk) state(t *testing.T, guid string) string {
	t.Helper()
	r, err := d.l.Get(context.Background(), guid)
	assert.NilError(t, err)
	return string(r.State) + "/" + r.RspCode
}

func (d *desk) events(t *testing.T, guid string) []string {
	t.Helper()
	evs, err := d.l.Events(context.Background(), guid)
	assert.NilError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Action+" "+e.Actor)
	}
	return out
}

// A connection without an operator certificate gets no page: none at all,
// another CA's or an expired one fail the handshake; one with no operator
// SAN is refused (403); the headers of every page are strict.
func TestOnlyOperatorCertificatesGetAPage(t *testing.T) {
	for _, lg := range ledgers {
		t.Run(lg.name, func(t *testing.T) {
			d := newDesk(t, lg.open)
			for _, who := range []string{"", "foreign", "expired"} {
				_, err := d.client(who).Get(d.url + "/")
				assert.Check(t, err != nil, "%q got a page", who)
			}
			code, body := d.get(t, "nosan", "/")
			assert.Check(t, is.Equal(code, 403))
			assert.Check(t, strings.Contains(body, "must name exactly one operator"), body)
			resp, err := d.client("vic").Get(d.url + "/")
			assert.NilError(t, err)
			resp.Body.Close()
			assert.Check(t, is.Equal(resp.StatusCode, 200))
			for h, want := range map[string]string{"Content-Security-Policy": "default-src 'self'", "X-Frame-Options": "DENY",
				"Strict-Transport-Security": "max-age=", "X-Content-Type-Options": "nosniff"} {
				assert.Check(t, strings.Contains(resp.Header.Get(h), want), "%s: %q", h, resp.Header.Get(h))
			}
		})
	}
}

// Four eyes by certificate: kim proposes not-applied; a viewer's POST, a
// POST without the token or from another origin, and kim's own approval
// are refused with nothing changed; lee approves; the events name both
// certificates; a proposal whose row changed since is refused (fence).
func TestFourEyesByCertificate(t *testing.T) {
	for _, lg := range ledgers {
		t.Run(lg.name, func(t *testing.T) {
			d := newDesk(t, lg.open)
			g := newGUID()
			d.insertUnknown(t, g)
			code, page := d.get(t, "kim", "/tx/"+g)
			assert.Equal(t, code, 200)
			assert.Check(t, strings.Contains(page, "**********4001"), "the account is not masked")
			assert.Check(t, !strings.Contains(page, "11020030004001") && !strings.Contains(page, "rent"), "an account number or the memo is in the page")
			tok := d.token(t, "kim", g)
			propose := url.Values{"csrf": {tok}, "as": {"not-applied"}, "reason": {"core team: never received (INC-1)"}}

			vicTok := "none: a viewer is refused before the token is read"
			code, body := d.post(t, "vic", "/tx/"+g+"/propose", url.Values{"csrf": {vicTok}, "as": {"not-applied"}, "reason": {"x"}}, nil)
			assert.Check(t, is.Equal(code, 403), body)
			assert.Check(t, strings.Contains(body, "viewer"), body)
			code, _ = d.post(t, "kim", "/tx/"+g+"/propose", url.Values{"as": {"not-applied"}, "reason": {"x"}}, nil)
			assert.Check(t, is.Equal(code, 403), "a POST without the token was taken")
			code, _ = d.post(t, "kim", "/tx/"+g+"/propose", url.Values{"csrf": {d.token(t, "lee", g)}, "as": {"not-applied"}, "reason": {"x"}}, nil)
			assert.Check(t, is.Equal(code, 403), "a POST with another person's token was taken")
			code, _ = d.post(t, "kim", "/tx/"+g+"/propose", propose, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
			assert.Check(t, is.Equal(code, 403), "a cross-site POST was taken")
			assert.Check(t, is.Len(d.events(t, g), 0))

			code, body = d.post(t, "kim", "/tx/"+g+"/propose", propose, nil)
			assert.Assert(t, is.Equal(code, 303), body)
			evs := d.events(t, g)
			assert.Assert(t, is.Len(evs, 1))
			var id int64
			ev, err := d.l.Events(context.Background(), g)
			assert.NilError(t, err)
			id = ev[0].ID
			_, page = d.get(t, "kim", "/tx/"+g)
			assert.Check(t, !strings.Contains(page, fmt.Sprintf(`id="approve-%d"`, id)), "kim is offered to approve her own proposal")
			code, body = d.post(t, "kim", fmt.Sprintf("/proposals/%d/approve", id), url.Values{"csrf": {tok}}, nil)
			assert.Check(t, is.Equal(code, 403), body)
			assert.Check(t, strings.Contains(body, "another person"), body)
			assert.Check(t, is.Equal(d.state(t, g), "UNKNOWN/E901"))

			_, page = d.get(t, "lee", "/tx/"+g)
			assert.Check(t, strings.Contains(page, fmt.Sprintf(`id="approve-%d"`, id)), "lee is not offered to approve")
			code, body = d.post(t, "lee", fmt.Sprintf("/proposals/%d/approve", id), url.Values{"csrf": {d.token(t, "lee", g)}, "reason": {"checked"}}, nil)
			assert.Check(t, is.Equal(code, 303), body)
			assert.Check(t, is.Equal(d.state(t, g), "FAILED/E902"))
			evs = d.events(t, g)
			assert.Assert(t, is.Len(evs, 2))
			assert.Check(t, strings.HasPrefix(evs[0], "propose console:kim(cert "), evs[0])
			assert.Check(t, strings.HasPrefix(evs[1], "approve console:lee(cert "), evs[1])

			// The fence: the row changes after the proposal.
			g2 := newGUID()
			d.insertUnknown(t, g2)
			code, _ = d.post(t, "kim", "/tx/"+g2+"/propose", url.Values{"csrf": {tok}, "as": {"not-applied"}, "reason": {"INC-2"}}, nil)
			assert.Assert(t, is.Equal(code, 303))
			ev, err = d.l.Events(context.Background(), g2)
			assert.NilError(t, err)
			d.exec(t, "UPDATE tx SET state='SENT', attempts=2 WHERE guid=?", g2)
			code, body = d.post(t, "lee", fmt.Sprintf("/proposals/%d/approve", ev[0].ID), url.Values{"csrf": {d.token(t, "lee", g)}}, nil)
			assert.Check(t, is.Equal(code, 409), body)
			assert.Check(t, strings.Contains(body, "changed since proposal"), body)
			assert.Check(t, is.Equal(d.state(t, g2), "SENT/E901"), "the fenced approval changed the row")

			// The audit downloads in inspect --events' format.
			code, csv := d.get(t, "vic", "/audit?format=csv")
			assert.Check(t, is.Equal(code, 200))
			assert.Check(t, strings.HasPrefix(csv, "id,guid,at,actor,action,from_state,to_state,rsp_code,attempts,detail\n"), csv)
			assert.Check(t, strings.Contains(csv, "console:lee(cert "), csv)
		})
	}
}

// The in-doubt list pages through a preloaded ledger 50 rows at a time,
// oldest first, and bad filters are a 400 page, never a 5xx.
func TestInDoubtPaginates(t *testing.T) {
	for _, lg := range ledgers {
		t.Run(lg.name, func(t *testing.T) {
			d := newDesk(t, lg.open)
			for i := 0; i < 120; i++ {
				d.insertUnknown(t, newGUID())
			}
			rowRE := regexp.MustCompile(`<td><a href="/tx/\w{32}">`)
			code, body := d.get(t, "vic", "/doubt")
			assert.Equal(t, code, 200)
			assert.Check(t, is.Len(rowRE.FindAllString(body, -1), 50))
			assert.Check(t, strings.Contains(body, `id="next"`))
			_, body = d.get(t, "vic", "/doubt?state=UNKNOWN&page=2")
			assert.Check(t, is.Len(rowRE.FindAllString(body, -1), 20))
			assert.Check(t, !strings.Contains(body, `id="next"`))
			_, body = d.get(t, "vic", "/doubt?state=UNKNOWN&channel=IBK")
			assert.Check(t, is.Len(rowRE.FindAllString(body, -1), 0))
			for _, q := range []string{"state=DONE", "page=-1", "page=1000", "min_age=x", "channel=%3Cscript%3E", "sort=random"} {
				code, _ := d.get(t, "vic", "/doubt?"+q)
				assert.Check(t, is.Equal(code, 400), q)
			}
			code, _ = d.get(t, "vic", "/tx/notaguid")
			assert.Check(t, is.Equal(code, 400))
			code, _ = d.get(t, "vic", "/tx/"+newGUID())
			assert.Check(t, is.Equal(code, 404))
			code, body = d.get(t, "vic", "/")
			assert.Check(t, is.Equal(code, 200))
			assert.Check(t, strings.Contains(body, "<svg"), "no chart")
		})
	}
}

// The overview counts each state up to countLimit rows, whatever the
// ledger's size: a state past it shows "≥ countLimit", not a count that
// looks exact, and a state within it its exact count.
func TestOverviewShowsALargeStateAsAtLeastTheLimit(t *testing.T) {
	for _, lg := range ledgers {
		t.Run(lg.name, func(t *testing.T) {
			d := newDesk(t, lg.open)
			insert := `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < ?)
INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts)
SELECT printf('20261202IBK%021d', i), 'TRF00001', 'DONE', '0000', X'00', X'00', 1 FROM n`
			if lg.name == "postgres" {
				insert = `INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts)
SELECT '20261202IBK' || lpad(i::text, 21, '0'), 'TRF00001', 'DONE', '0000', '\x00'::bytea, '\x00'::bytea, 1
FROM generate_series(1, ?::int) AS i`
			}
			d.exec(t, insert, countLimit+1)
			for i := 0; i < 3; i++ {
				d.insertUnknown(t, newGUID())
			}
			code, body := d.get(t, "vic", "/")
			assert.Equal(t, code, 200)
			card := regexp.MustCompile(`<span class="badge st-(\w+)">\w+</span><div class="n">([^<]*)</div>`)
			shown := map[string]string{}
			for _, m := range card.FindAllStringSubmatch(body, -1) {
				shown[m[1]] = m[2]
			}
			assert.Check(t, is.Equal(shown["DONE"], "&ge; "+won(countLimit)), "the DONE card: %v", shown)
			assert.Check(t, is.Equal(shown["UNKNOWN"], "3"), "the UNKNOWN card: %v", shown)
		})
	}
}

// The Reconciliation page shows the kept runs, a run's findings with the
// critical ones first, each linking to its transfer's page, where a person
// proposes a decision; an unknown run is a 404, and without a run the page
// says so.
func TestReconciliationPageShowsRunsAndLinksEachFinding(t *testing.T) {
	for _, lg := range ledgers {
		t.Run(lg.name, func(t *testing.T) {
			d := newDesk(t, lg.open)
			code, body := d.get(t, "vic", "/reconcile")
			assert.Equal(t, code, 200)
			assert.Check(t, strings.Contains(body, `id="none"`), "an empty ledger's page does not say there is no run")

			twice, unapplied, resolved := newGUID(), newGUID(), newGUID()
			d.insertUnknown(t, twice)
			counts := map[dedup.Finding]int64{dedup.FindingMatched: 7, dedup.FindingAppliedTwice: 1, dedup.FindingToldSuccessUnapplied: 1, dedup.FindingResolved: 1}
			id, err := d.l.AddReconcileRun(context.Background(), ledger.ReconcileRun{Date: "20261201", Actor: "reconcile@h1", Source: "journal.csv",
				Lines: 10, Amount: 1500000, Counts: counts, Findings: []ledger.ReconcileFinding{
					{Class: dedup.FindingResolved, GUID: resolved, State: "UNKNOWN", Code: "E901", Refs: []string{"C3"}, Amount: 100, Resolved: true},
					{Class: dedup.FindingAppliedTwice, GUID: twice, State: "DONE", Code: "0000", Refs: []string{"C1", "C2"}, Amount: 150000},
					{Class: dedup.FindingToldSuccessUnapplied, GUID: unapplied, State: "DONE", Code: "0000", Amount: 150000},
				}})
			assert.NilError(t, err)
			code, body = d.get(t, "vic", "/reconcile")
			assert.Equal(t, code, 200)
			assert.Check(t, strings.Contains(body, fmt.Sprintf(`<a href="/reconcile?run=%d#findings">`, id)))
			assert.Check(t, strings.Contains(body, `<td class="t">20261201</td>`))
			for _, g := range []string{twice, unapplied, resolved} {
				assert.Check(t, strings.Contains(body, `<a href="/tx/`+g+`">`), "finding %s does not link to its transfer", g)
			}
			assert.Check(t, strings.Index(body, twice) < strings.Index(body, resolved), "a critical finding is not listed first")
			assert.Check(t, strings.Contains(body, "<code>C1</code>, <code>C2</code>"))
			assert.Check(t, strings.Contains(body, "Resolved DONE/0000 by reconcile."))
			assert.Check(t, strings.Contains(body, `<td class="num">1,500,000</td>`), "the control total without thousands separators")
			// The finding's transfer page is where a person proposes.
			code, body = d.get(t, "kim", "/tx/"+twice)
			assert.Equal(t, code, 200)
			assert.Check(t, strings.Contains(body, `action="/tx/`+twice+`/propose"`), "no proposal form on the finding's transfer")
			code, _ = d.get(t, "vic", "/reconcile?run=999999")
			assert.Check(t, is.Equal(code, 404))
		})
	}
}
