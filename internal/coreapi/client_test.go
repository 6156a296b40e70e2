package coreapi

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
	"dedup/internal/certs"
	"dedup/internal/fixturecore"
	"dedup/internal/testbed/testpki"
)

var ctx = context.Background()

const g1 = "20261129MOB000000000000000000001"

func transfer(memo string) TransferRequest {
	return TransferRequest{GUID: g1, From: "11020030004001", To: "11020030004002", Amount: 150000, Memo: memo}
}

func newClient(t *testing.T, url string, timeout time.Duration) *Client {
	t.Helper()
	c, err := New(Config{BaseURL: url, ConnectTimeout: time.Second, Timeout: timeout})
	assert.NilError(t, err)
	t.Cleanup(c.CloseIdle)
	return c
}

func startFixture(t *testing.T, slow time.Duration) *fixturecore.Server {
	t.Helper()
	core, err := fixturecore.New(fixturecore.Config{Slow: slow})
	assert.NilError(t, err)
	s, err := fixturecore.Listen(core, "127.0.0.1:0")
	assert.NilError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestTransferAgainstFixture(t *testing.T) {
	s := startFixture(t, 2*time.Second)
	c := newClient(t, s.URL, 500*time.Millisecond)
	for _, tc := range []struct {
		memo      string
		from, to  string
		amount    int64
		wantState dedup.State
		wantCode  string
		applied   int
	}{
		{"ok", "11020030004001", "11020030004002", 150000, dedup.StateDone, "0000", 1},
		{"poor", "11020030004001", "11020030004002", 900_000_000, dedup.StateDone, "B201", 0},
		{"nobody", "00000000000000", "11020030004002", 1, dedup.StateDone, "B202", 0},
		{"zero", "11020030004001", "11020030004002", 0, dedup.StateDone, "B203", 0},
		{"self", "11020030004001", "11020030004001", 1, dedup.StateDone, "B204", 0},
		{"FAIL500", "11020030004001", "11020030004002", 1, dedup.StateDone, "E500", 0},
		{"DROP", "11020030004001", "11020030004002", 1, dedup.StateUnknown, "E901", 0},
		{"APPLYDROP", "11020030004001", "11020030004002", 1, dedup.StateUnknown, "E901", 1},
		{"SLOW", "11020030004001", "11020030004002", 1, dedup.StateUnknown, "E901", 0},
	} {
		t.Run(tc.memo, func(t *testing.T) {
			g := "20261129MOB0000000000000000" + tc.memo[:min(5, len(tc.memo))]
			g = (g + "00000000")[:32]
			r := c.Transfer(ctx, TransferRequest{GUID: g, From: tc.from, To: tc.to, Amount: tc.amount, Memo: tc.memo}, time.Time{}, nil)
			assert.Check(t, is.Equal(r.State, tc.wantState), r.Detail)
			assert.Check(t, is.Equal(r.Code, tc.wantCode), r.Detail)
			if tc.wantCode == "0000" {
				assert.Check(t, is.Len(r.Body, 45))
			}
			assert.Check(t, is.Equal(s.Core.Stats().ByGUID[g], 1), "the client sent the POST more than once")
			assert.Check(t, is.Equal(s.Core.Stats().AppliedByGUID[g], tc.applied))
		})
	}
}

// TestTransferAnswerMapping covers every row of docs/core-api.md's mapping that
// the fixture cannot produce.
func TestTransferAnswerMapping(t *testing.T) {
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		wantCode string
	}{
		{"200 readable", 200, `{"ref":"C000000000000042","balance":99850000,"processed_at":"20261129093001"}`, "0000"},
		{"200 same guid", 200, `{"guid":"` + g1 + `","ref":"C1","balance":1,"processed_at":"20261129093001"}`, "0000"},
		{"200 another guid", 200, `{"guid":"X0261129MOB000000000000000000001","ref":"C1","balance":1,"processed_at":"20261129093001"}`, "E901"},
		{"200 not JSON", 200, `<html>`, "E901"},
		{"200 missing ref", 200, `{"balance":1,"processed_at":"20261129093001"}`, "E901"},
		{"200 fractional balance", 200, `{"ref":"C1","balance":1.5,"processed_at":"20261129093001"}`, "E901"},
		{"201", 201, `{"ref":"C1","balance":1,"processed_at":"20261129093001"}`, "E901"},
		{"204", 204, ``, "E901"},
		{"302", 302, ``, "E901"},
		{"400 without code", 400, `{"error":"bad"}`, "E901"},
		{"404 bare", 404, `not found`, "E901"},
		{"409 B-code-like", 409, `{"code":"B2X1"}`, "E901"},
		{"422 B201", 422, `{"code":"B201"}`, "B201"},
		{"400 B299", 400, `{"code":"B299"}`, "B299"},
		{"500", 500, `oops`, "E500"},
		{"502", 502, ``, "E901"},
		{"503", 503, ``, "E901"},
		{"504", 504, ``, "E901"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var posts atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				posts.Add(1)
				if tc.status == 302 {
					w.Header().Set("Location", "/v1/transfers")
				}
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			r := newClient(t, srv.URL, time.Second).Transfer(ctx, transfer("x"), time.Time{}, nil)
			assert.Check(t, is.Equal(r.Code, tc.wantCode), r.Detail)
			assert.Check(t, is.Equal(posts.Load(), int32(1)), "POSTs sent")
		})
	}
}

func TestTransferTruncatedBodyIsUnknown(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "200")
		w.WriteHeader(200)
		w.Write([]byte(`{"ref":"C1",`))
		hangUp(w)
	}))
	defer srv.Close()
	r := newClient(t, srv.URL, time.Second).Transfer(ctx, transfer("x"), time.Time{}, nil)
	assert.Equal(t, r.Code, "E901", r.Detail)
}

func hangUp(w http.ResponseWriter) {
	conn, _, _ := w.(http.Hijacker).Hijack()
	conn.Close()
}

func TestTransferConnectionRefusedIsNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	r := newClient(t, "http://"+addr, time.Second).Transfer(ctx, transfer("x"), time.Time{}, nil)
	assert.Equal(t, r.State, dedup.StateFailed)
	assert.Equal(t, r.Code, "E902", r.Detail)
}

// TestTransferStalledBodyIsUnknownAfterTimeout: the timeout covers the body,
// not only the headers.
func TestTransferStalledBodyIsUnknownAfterTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	r := newClient(t, srv.URL, 200*time.Millisecond).Transfer(ctx, transfer("x"), time.Time{}, nil)
	assert.Equal(t, r.Code, "E901", r.Detail)
}

// TestNoRetryOnReusedConnectionReset: a keep-alive connection that the core
// closes after reading the request must not make the transport replay the
// POST.
func TestNoRetryOnReusedConnectionReset(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if posts.Add(1) == 2 {
			hangUp(w)
			return
		}
		w.Write([]byte(`{"ref":"C1","balance":1,"processed_at":"20261129093001"}`))
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, time.Second)
	assert.Equal(t, c.Transfer(ctx, transfer("x"), time.Time{}, nil).Code, "0000")
	r := c.Transfer(ctx, transfer("x"), time.Time{}, nil)
	assert.Equal(t, r.Code, "E901", r.Detail)
	assert.Equal(t, posts.Load(), int32(2), "the POST was replayed")
}

func TestNoProxyFromEnvironment(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	s := startFixture(t, time.Second)
	r := newClient(t, s.URL, time.Second).Transfer(ctx, transfer("x"), time.Time{}, nil)
	assert.Equal(t, r.Code, "0000", r.Detail)
}

func TestNoIdempotencyHeader(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Idempotency-Key") != "" {
			w.WriteHeader(418)
			return
		}
		w.Write([]byte(`{"ref":"C1","balance":1,"processed_at":"20261129093001"}`))
	}))
	defer srv.Close()
	assert.Equal(t, newClient(t, srv.URL, time.Second).Transfer(ctx, transfer("x"), time.Time{}, nil).Code, "0000")
}

func TestLookup(t *testing.T) {
	s := startFixture(t, time.Second)
	c := newClient(t, s.URL, time.Second)
	assert.Equal(t, c.Lookup(ctx, g1).Verdict, NotFound)
	assert.Equal(t, c.Transfer(ctx, transfer("x"), time.Time{}, nil).Code, "0000")
	l := c.Lookup(ctx, g1)
	assert.Equal(t, l.Verdict, Found)
	assert.Assert(t, is.Len(l.Body, 45))

	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"bare 404", 404, "404 page not found"},
		{"404 other code", 404, `{"code":"NOPE"}`},
		{"500", 500, ""},
		{"503", 503, ""},
		{"200 unreadable", 200, "{"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			assert.Equal(t, newClient(t, srv.URL, time.Second).Lookup(ctx, g1).Verdict, Undetermined)
		})
	}
}

// fixtureOver starts a fixture core over scheme (http or https, with
// certificates made for the test) and returns it with a client that
// trusts it. clientCA, for https, makes the core require client
// certificates from that CA's file.
func fixtureOver(t *testing.T, scheme string, slow time.Duration) (*fixturecore.Core, *fixturecore.Server, *Client) {
	t.Helper()
	core, err := fixturecore.New(fixturecore.Config{Slow: slow})
	assert.NilError(t, err)
	var cfg *tls.Config
	var ccfg *tls.Config
	if scheme == "https" {
		pki := newPKI(t)
		cfg = pki.server(t, "", "")
		ccfg = pki.clientConfig(t, "")
	}
	s, err := fixturecore.ListenTLS(core, "127.0.0.1:0", cfg)
	assert.NilError(t, err)
	t.Cleanup(func() { s.Close() })
	c, err := New(Config{BaseURL: s.URL, ConnectTimeout: time.Second, Timeout: time.Second, TLS: ccfg})
	assert.NilError(t, err)
	t.Cleanup(c.CloseIdle)
	return core, s, c
}

// The request leaves in one write, headers and body together (one TLS
// record over https), so that a lease deadline can never fall between
// them; on a reused connection too.
func TestTransferIsOneWrite(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			_, _, c := fixtureOver(t, scheme, time.Second)
			var writes []int
			var got *leaseConn
			c.onConn = func(lc *leaseConn) { got = lc }
			for i := 0; i < 3; i++ {
				got = nil
				r := c.Transfer(ctx, transfer("one write"), time.Now().Add(time.Minute), nil)
				assert.Equal(t, r.Code, "0000")
				assert.Assert(t, got != nil)
				got.mu.Lock()
				writes = append(writes, got.writes)
				got.mu.Unlock()
			}
			assert.DeepEqual(t, writes, []int{1, 1, 1})
		})
	}
}

// A lease that is over when the request would be written: nothing is
// written, the result is E902 with LeaseExpired, and the core never saw
// the request; on a fresh and on a pooled connection, over http and over
// https (where the lease sits beneath TLS, on the socket itself).
func TestExpiredLeaseWritesNothing(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			core, _, c := fixtureOver(t, scheme, time.Second)
			for _, pooled := range []bool{false, true} {
				if pooled { // leave a keep-alive connection in the pool
					assert.Equal(t, c.Transfer(ctx, TransferRequest{GUID: "20261129MOB000000000000000000009", From: "11020030004001", To: "11020030004002", Amount: 1, Memo: "warm"}, time.Time{}, nil).Code, "0000")
				}
				r := c.Transfer(ctx, transfer("late"), time.Now().Add(-time.Millisecond), nil)
				assert.Check(t, r.LeaseExpired, "pooled=%v: %+v", pooled, r)
				assert.Check(t, is.Equal(r.Code, dedup.CodeNotSent))
				assert.Check(t, is.Equal(r.State, dedup.StateFailed))
				assert.Check(t, is.Equal(core.Stats().ByGUID[g1], 0), "pooled=%v: the core saw a request sent after its lease", pooled)
			}
			// A live lease still goes through on the same client.
			assert.Equal(t, c.Transfer(ctx, transfer("in time"), time.Now().Add(time.Minute), nil).Code, "0000")
		})
	}
}

// Rule 3 over TLS: a handshake that fails (an untrusted or misnamed
// certificate) wrote no byte of the request: E902, nothing applied; a core
// that requires client certificates refuses a client without one (under
// TLS 1.3 by an alert after the client's handshake) and that is E902 too;
// with the certificate the transfer goes through.
func TestTLSFailuresBeforeTheCoreReadsAreE902(t *testing.T) {
	pki := newPKI(t)
	other := newPKI(t)
	for _, tc := range []struct {
		name       string
		serverCert string // "" the loopback certificate; "misnamed": for another host
		clientCA   bool   // the core requires client certificates
		clientTLS  *tls.Config
		want       string
	}{
		{"trusted", "", false, pki.clientConfig(t, ""), "0000"},
		{"untrusted CA", "", false, other.clientConfig(t, ""), "E902"},
		{"misnamed certificate", "misnamed", false, pki.clientConfig(t, ""), "E902"},
		{"client certificate required, none given", "", true, pki.clientConfig(t, ""), "E902"},
		{"client certificate required, one from another CA", "", true, pki.clientConfig(t, "foreign"), "E902"},
		{"client certificate required and given", "", true, pki.clientConfig(t, "relay"), "0000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, err := fixturecore.New(fixturecore.Config{})
			assert.NilError(t, err)
			cfg := pki.server(t, tc.serverCert, map[bool]string{true: pki.ca.File}[tc.clientCA])
			s, err := fixturecore.ListenTLS(core, "127.0.0.1:0", cfg)
			assert.NilError(t, err)
			defer s.Close()
			if tc.name == "client certificate required, one from another CA" {
				tc.clientTLS = other.clientConfig(t, "relay")
				tc.clientTLS.RootCAs = pki.clientConfig(t, "").RootCAs
			}
			c, err := New(Config{BaseURL: s.URL, ConnectTimeout: time.Second, Timeout: time.Second, TLS: tc.clientTLS})
			assert.NilError(t, err)
			defer c.CloseIdle()
			r := c.Transfer(ctx, transfer("tls"), time.Now().Add(time.Minute), nil)
			assert.Equal(t, r.Code, tc.want, "%+v", r)
			want := 0
			if tc.want == "0000" {
				want = 1
			}
			assert.Equal(t, core.Stats().AppliedByGUID[g1], want)
			if tc.want == "E902" {
				assert.Assert(t, r.NoConnection, "%+v", r)
				assert.Equal(t, core.Stats().ByGUID[g1], 0, "the core read a request")
			}
		})
	}
}

// pki is a test CA with the files the TLS tests need.
type pki struct {
	ca  *testpki.CA
	dir string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	ca, err := testpki.NewCA(dir, "test")
	assert.NilError(t, err)
	return &pki{ca: ca, dir: dir}
}

// server returns a server TLS configuration with a certificate for
// loopback ("misnamed": for another host), requiring client certificates
// from clientCA if given.
func (p *pki) server(t *testing.T, which, clientCA string) *tls.Config {
	t.Helper()
	leaf := testpki.Loopback("core", "core")
	if which == "misnamed" {
		leaf = testpki.Leaf{Name: "core-misnamed", CN: "other", DNS: []string{"other.example"}}
	}
	is, err := p.ca.Issue(leaf)
	assert.NilError(t, err)
	set, err := certs.Load(certs.Files{Cert: is.Cert, Key: is.Key, CA: clientCA})
	assert.NilError(t, err)
	cfg, err := set.ServerConfig()
	assert.NilError(t, err)
	return cfg
}

// clientConfig trusts this CA and, if name is given, presents a client
// certificate of that name issued by it.
func (p *pki) clientConfig(t *testing.T, name string) *tls.Config {
	t.Helper()
	files := certs.Files{CA: p.ca.File}
	if name != "" {
		is, err := p.ca.Issue(testpki.Leaf{Name: name, CN: name})
		assert.NilError(t, err)
		files.Cert, files.Key = is.Cert, is.Key
	}
	set, err := certs.Load(files)
	assert.NilError(t, err)
	return set.ClientConfig()
}

func TestCheckBaseURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://127.0.0.1:9201", true}, {"https://core.bank:443/", true},
		{"notaurl", false}, {"ftp://x", false}, {"http://", false}, {"http://u:p@h:1", false}, {"http://h:1/v1", false},
	} {
		assert.Check(t, is.Equal(CheckBaseURL(tc.url) == nil, tc.ok), tc.url)
	}
}

// Reach obtains a connection and sends nothing on it: the server sees no
// request. With nothing listening it fails.
func TestReachSendsNothing(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	defer srv.Close()
	c := newClient(t, srv.URL, time.Second)
	assert.NilError(t, c.Reach(ctx))
	assert.Equal(t, requests.Load(), int32(0))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	assert.Assert(t, newClient(t, "http://"+addr, time.Second).Reach(ctx) != nil)
}
