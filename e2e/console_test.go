package e2e

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"

	"dedup/internal/testbed/testpki"
)

// The console binary end to end, on either ledger: it needs only --db,
// --listen, --tls-cert, --tls-key and --operator-ca, prints its listening
// line, serves no plain HTTP, refuses a connection without an operator
// certificate, and the runbook's manual settlement goes through it with
// two certificates: kim proposes, lee approves, the channel then gets
// E902's truth (FAILED, sent again by reprocess). Bad flags exit 2.
func TestConsoleSettlesWithTwoCertificates(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	path, db := newLedger(t)
	g := newGUID()
	insert(t, db, g, "UNKNOWN", "E901", telegram(t, g), nil, 1, "-600 seconds")
	p := newTestPKI(t)
	kim := p.issue(t, testpki.Leaf{Name: "kim", CN: "kim", URIs: []string{"urn:dedup:operator:kim", "urn:dedup:role:operator"}})
	lee := p.issue(t, testpki.Leaf{Name: "lee", CN: "lee", URIs: []string{"urn:dedup:operator:lee", "urn:dedup:role:operator"}})
	con := start(t, "console", "--db", path, "--listen", "127.0.0.1:0", "--tls-cert", p.server.Cert, "--tls-key", p.server.Key,
		"--operator-ca", p.ca.File)
	base := "https://" + con.addr
	browser := func(who *testpki.Issued) *http.Client {
		cfg := p.clientTLS(t, who)
		return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, Proxy: nil},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	_, err := browser(nil).Get(base + "/")
	assert.Check(t, err != nil, "a connection without a certificate got a page")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + con.addr + "/")
	if err == nil {
		assert.Check(t, resp.StatusCode == http.StatusBadRequest, "plain HTTP got %d", resp.StatusCode)
		resp.Body.Close()
	}
	page := func(who *testpki.Issued, path string) string {
		resp, err := browser(who).Get(base + path)
		assert.NilError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		assert.Equal(t, resp.StatusCode, 200, string(b))
		return string(b)
	}
	token := func(who *testpki.Issued) string {
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page(who, "/tx/"+g))
		assert.Assert(t, m != nil)
		return m[1]
	}
	post := func(who *testpki.Issued, path string, form url.Values) int {
		req, err := http.NewRequest("POST", base+path, strings.NewReader(form.Encode()))
		assert.NilError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base)
		resp, err := browser(who).Do(req)
		assert.NilError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Check(t, strings.Contains(page(&kim, "/doubt"), g), "the in-doubt list does not show the UNKNOWN row")
	assert.Equal(t, post(&kim, "/tx/"+g+"/propose", url.Values{"csrf": {token(&kim)}, "as": {"not-applied"}, "reason": {"core team: never received"}}), 303)
	id := regexp.MustCompile(`id="approve-(\d+)"`).FindStringSubmatch(page(&lee, "/tx/"+g))
	assert.Assert(t, id != nil, "lee is offered no approval")
	assert.Check(t, is.Equal(post(&kim, "/proposals/"+id[1]+"/approve", url.Values{"csrf": {token(&kim)}}), 403))
	assert.Equal(t, getRow(t, db, g).State.String, "UNKNOWN")
	assert.Equal(t, post(&lee, "/proposals/"+id[1]+"/approve", url.Values{"csrf": {token(&lee)}}), 303)
	row := getRow(t, db, g)
	assert.Check(t, is.Equal(row.State.String+"/"+row.RspCode.String, "FAILED/E902"))
	story := page(&lee, "/tx/"+g)
	assert.Check(t, strings.Contains(story, "console:kim(cert ") && strings.Contains(story, "console:lee(cert "), "the events do not name both certificates")
	runJob(t, "reprocess", "--db", path, "--core", c.url).Assert(t, icmd.Success)
	assert.Check(t, is.Equal(c.stats(t).ByGUID[g], 1), "not-applied was not sent exactly once")
	con.waitLog(t, "console: approved")
	assert.Check(t, is.Equal(con.stop(t, syscall.SIGTERM), 0))

	res := icmd.RunCmd(icmd.Command(bin("console"), "--db", path, "--tls-cert", p.server.Cert))
	assert.Check(t, is.Equal(res.ExitCode, 2), res.Stderr())
	assert.Check(t, strings.Contains(res.Stderr(), "--operator-ca") || strings.Contains(res.Stderr(), "--tls-key"), res.Stderr())
}
