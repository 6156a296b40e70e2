package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"

	"dedup"
	"dedup/internal/testbed/otlptest"
)

// The test's customer data: none of it may appear in an exported byte.
const (
	tracedFrom  = "11020030098761"
	tracedTo    = "11020030098762"
	tracedMemo  = "private memo 4471"
	droppedMemo = "DROP privy 9902"
)

func startCollector(t *testing.T, addr string) *otlptest.Collector {
	t.Helper()
	c, err := otlptest.Start(addr)
	assert.NilError(t, err)
	t.Cleanup(c.Close)
	return c
}

func otelEnv(c *otlptest.Collector) []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.URL(), "OTEL_TRACES_SAMPLER=always_on"}
}

// spanTree indexes one collector's spans.
type spanTree struct{ spans []otlptest.Span }

// only returns the one span named name in trace (failing otherwise).
func (s spanTree) only(t *testing.T, trace, name string) otlptest.Span {
	t.Helper()
	var found []otlptest.Span
	for _, sp := range s.spans {
		if sp.TraceID == trace && sp.Name == name {
			found = append(found, sp)
		}
	}
	assert.Equal(t, len(found), 1, "spans named %s in trace %s: %+v", name, trace, found)
	return found[0]
}

func (s spanTree) count(trace, name string) int {
	n := 0
	for _, sp := range s.spans {
		if sp.TraceID == trace && sp.Name == name {
			n++
		}
	}
	return n
}

// transferSpan finds the relay's root span for guid whose reply was code.
func (s spanTree) transferSpans(guid string) []otlptest.Span {
	var out []otlptest.Span
	for _, sp := range s.spans {
		if sp.Name == "dedup.transfer" && sp.Attrs["dedup.guid"] == guid {
			out = append(out, sp)
		}
	}
	return out
}

// TestTracedTransferEndToEnd: a relay and resolve export to a real OTLP
// endpoint; the spans' names, parents and attributes are as documented, the
// core saw the transfer's trace context, the log lines and the events name
// the same trace, and no exported byte holds an account number or a memo.
func TestTracedTransferEndToEnd(t *testing.T) {
	col := startCollector(t, "127.0.0.1:0")
	c := startCore(t)
	db := tempDB(t)
	r := startEnv(t, append(otelEnv(col), "OTEL_SERVICE_NAME=relay-e2e"), "relay",
		"--db", db, "--listen", "127.0.0.1:0", "--core", c.url, "--metrics-listen", "127.0.0.1:0")
	r.waitLog(t, "tracing on")

	g := newGUID()
	tg := telegram(t, g, accounts(tracedFrom, tracedTo), memo(tracedMemo))
	first := send(t, r.addr, tg)
	assert.Equal(t, code(first), dedup.CodeOK)
	again := send(t, r.addr, tg)
	assert.Equal(t, code(again), dedup.CodeOK)

	// A transfer the core drops (UNKNOWN), resolved by resolve (FAILED),
	// then retransmitted: reclaimed and sent again, with its events.
	gd := newGUID()
	tgd := telegram(t, gd, accounts(tracedFrom, tracedTo), memo(droppedMemo))
	assert.Equal(t, code(send(t, r.addr, tgd)), dedup.CodeUnknown)

	// Exemplars: the transaction histogram carries trace ids in OpenMetrics.
	req, err := http.NewRequest("GET", "http://"+r.metricsAddr+"/metrics", nil)
	assert.NilError(t, err)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}).Do(req)
	assert.NilError(t, err)
	exposition, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.NilError(t, err)

	res := icmd.RunCmd(icmd.Command(bin("resolve"), "--db", db, "--core", c.url, "--min-age", "0"),
		icmd.WithTimeout(60*time.Second), icmd.WithEnv(append(otelEnvList(), otelEnv(col)...)...))
	t.Logf("resolve: %s%s", res.Stdout(), res.Stderr())
	assert.Equal(t, res.ExitCode, 0)
	assert.Equal(t, code(send(t, r.addr, tgd)), dedup.CodeUnknown) // reclaimed, dropped again
	assert.Equal(t, r.stop(t, syscall.SIGTERM), 0)                 // flushes the spans

	// Resolved FAILED/E902 once more (dropped again: the core has nothing),
	// then resent by reprocess: its own trace, carried to the core.
	resolveAgain := icmd.RunCmd(icmd.Command(bin("resolve"), "--db", db, "--core", c.url, "--min-age", "0"),
		icmd.WithTimeout(60*time.Second), icmd.WithEnv(append(otelEnvList(), otelEnv(col)...)...))
	assert.Equal(t, resolveAgain.ExitCode, 0, resolveAgain.Stderr())
	rep := icmd.RunCmd(icmd.Command(bin("reprocess"), "--db", db, "--core", c.url),
		icmd.WithTimeout(60*time.Second), icmd.WithEnv(append(otelEnvList(), otelEnv(col)...)...))
	t.Logf("reprocess: exit %d\n%s%s", rep.ExitCode, rep.Stdout(), rep.Stderr())
	assert.Assert(t, is.Contains(rep.Stdout(), "sent=1"), "reprocess resent nothing")

	// settle, run by two operators through sudo the way the runbook says,
	// the collector's variables kept by the shipped sudoers rule: one
	// settle.decision trace per run, named by its log line and its event.
	// Dropped once more, the row is UNKNOWN again.
	settleEnv := otelEnv(col)
	prop := settleCmd(t, db, kim, settleEnv, "propose", gd, "--as", "not-applied", "--reason", "INC-7 core has no trace of it")
	assert.Equal(t, prop.ExitCode, 0, prop.Stderr())
	id := strings.TrimPrefix(strings.Fields(prop.Stdout())[2], "id=")
	appr := settleCmd(t, db, lee, settleEnv, "approve", id, "--reason", "checked with the core team")
	assert.Equal(t, appr.ExitCode, 0, appr.Stderr())

	spans := spanTree{col.Spans()}
	assert.Assert(t, len(col.Undecodable()) == 0, "undecodable exports: %v", col.Undecodable())

	// The first send: one trace, its tree as docs/operations.md draws it.
	roots := spans.transferSpans(g)
	assert.Equal(t, len(roots), 2, "one dedup.transfer span per request: %+v", roots)
	root, retx := roots[0], roots[1]
	if root.Attrs["dedup.state"] != "none->DONE" {
		root, retx = retx, root
	}
	assert.Equal(t, root.Service, "relay-e2e")
	assert.Equal(t, root.Kind, "server")
	assert.Equal(t, root.ParentID, "", "the transfer span is a root")
	assert.DeepEqual(t, pick(root.Attrs, "dedup.guid", "dedup.tx_code", "dedup.channel", "dedup.code", "dedup.state", "dedup.attempts"),
		map[string]string{"dedup.guid": g, "dedup.tx_code": "TRF00001", "dedup.channel": "MOB", "dedup.code": "0000",
			"dedup.state": "none->DONE", "dedup.attempts": "1"})
	tid := root.TraceID
	claim := spans.only(t, tid, "ledger.claim")
	assert.Equal(t, claim.ParentID, root.SpanID)
	assert.Equal(t, claim.Attrs["dedup.claimed"], "true")
	coreSpan := spans.only(t, tid, "core.transfer")
	assert.Equal(t, coreSpan.ParentID, root.SpanID)
	assert.Equal(t, coreSpan.Kind, "client")
	assert.Equal(t, coreSpan.Attrs["http.response.status_code"], "200")
	connect := spans.only(t, tid, "core.connect")
	assert.Equal(t, connect.ParentID, coreSpan.SpanID)
	exchange := spans.only(t, tid, "core.exchange")
	assert.Equal(t, exchange.ParentID, coreSpan.SpanID)
	assert.Assert(t, !exchange.Start.Before(connect.End), "the exchange starts once connected")
	finish := spans.only(t, tid, "ledger.finish")
	assert.Equal(t, finish.ParentID, root.SpanID)
	assert.Assert(t, !finish.Start.Before(coreSpan.End), "the finish's commit follows the core's answer")
	if onPostgres() { // rule 13's confirmation, on the shared ledger only
		confirm := spans.only(t, tid, "ledger.confirm")
		assert.Equal(t, confirm.ParentID, coreSpan.SpanID)
		assert.Assert(t, !confirm.Start.Before(connect.End) && !exchange.Start.Before(confirm.End))
	} else {
		assert.Equal(t, spans.count(tid, "ledger.confirm"), 0)
	}

	// The retransmission: answered from the row, no core call in its trace.
	assert.Assert(t, retx.TraceID != tid, "each request is its own trace")
	assert.Equal(t, retx.Attrs["dedup.state"], "DONE")
	assert.Equal(t, retx.Attrs["dedup.code"], "0000")
	assert.Equal(t, spans.count(retx.TraceID, "core.transfer"), 0)
	assert.Equal(t, spans.count(retx.TraceID, "ledger.read"), 1)

	// The core saw the trace context of the core.transfer span; the log
	// line names the trace; a histogram bucket links to it.
	st := c.stats(t)
	assert.Equal(t, st.TraceparentByGUID[g], fmt.Sprintf("00-%s-%s-01", tid, coreSpan.SpanID))
	assert.Assert(t, is.Contains(r.log(), "guid="+g+" tx_code=TRF00001"))
	assert.Assert(t, txLineHas(r.log(), g, "state=none->DONE", "trace_id="+tid), "the tx log line names the trace:\n%s", r.log())
	// Each bucket keeps its last exemplar: every one must be a transfer's trace.
	exemplars := exemplarTraces(exposition, "dedup_transaction_duration_seconds_bucket")
	assert.Assert(t, len(exemplars) > 0, "no exemplar on the transaction histogram:\n%s", exposition)
	transfers := map[string]bool{}
	for _, sp := range spans.spans {
		if sp.Name == "dedup.transfer" {
			transfers[sp.TraceID] = true
		}
	}
	for _, id := range exemplars {
		assert.Assert(t, transfers[id], "exemplar trace %s is no exported transfer's", id)
	}
	assert.Assert(t, len(exemplarTraces(exposition, "dedup_core_request_duration_seconds_bucket")) > 0, "no exemplar on the core histogram")

	// resolve: one resolve.row trace per row, its lookup carried to the
	// core, and the resolve event's detail names it.
	var resolveSpan otlptest.Span
	for _, sp := range spans.spans {
		if sp.Name == "resolve.row" && sp.Attrs["dedup.guid"] == gd {
			resolveSpan = sp // the first run's (exported first): its event is read below
			break
		}
	}
	assert.Equal(t, resolveSpan.Service, "resolve")
	assert.Equal(t, resolveSpan.Attrs["dedup.outcome"], "FAILED")
	lookup := spans.only(t, resolveSpan.TraceID, "core.lookup")
	assert.Equal(t, lookup.ParentID, resolveSpan.SpanID)
	assert.Equal(t, lookup.Attrs["dedup.code"], "not_found")
	assert.Assert(t, is.Contains(res.Stderr(), "trace_id="+resolveSpan.TraceID))
	ldb := openDB(t, db)
	var detail string
	assert.NilError(t, ldb.QueryRow("SELECT detail FROM tx_event WHERE guid=? AND action='resolve'", gd).Scan(&detail))
	assert.Assert(t, is.Contains(detail, "trace_id="+resolveSpan.TraceID))

	// The reclaim after it: its outcome event names the relay's trace.
	var reclaimed otlptest.Span
	for _, sp := range spans.transferSpans(gd) {
		if sp.Attrs["dedup.state"] == "FAILED->UNKNOWN" {
			reclaimed = sp
		}
	}
	assert.Equal(t, reclaimed.Attrs["dedup.attempts"], "2", "the reclaim's span: %+v", spans.transferSpans(gd))
	assert.Equal(t, spans.count(reclaimed.TraceID, "ledger.reclaim"), 1)
	assert.NilError(t, ldb.QueryRow("SELECT detail FROM tx_event WHERE guid=? AND action='outcome'", gd).Scan(&detail))
	assert.Assert(t, is.Contains(detail, "trace_id="+reclaimed.TraceID))

	// reprocess: one reprocess.row trace for the row it resent, with the
	// relay's core.transfer (connect, exchange) and ledger.finish under
	// it; the core saw its traceparent; its log line and the outcome event
	// of the resend name it.
	var rp otlptest.Span
	for _, sp := range spans.spans {
		if sp.Name == "reprocess.row" && sp.Attrs["dedup.guid"] == gd {
			rp = sp
		}
	}
	assert.Equal(t, rp.Service, "reprocess", "no reprocess.row span for %s", gd)
	assert.Equal(t, rp.ParentID, "", "the reprocess span is a root")
	assert.Equal(t, rp.Attrs["dedup.attempts"], "3")
	rpCore := spans.only(t, rp.TraceID, "core.transfer")
	assert.Equal(t, rpCore.ParentID, rp.SpanID)
	assert.Equal(t, spans.only(t, rp.TraceID, "core.connect").ParentID, rpCore.SpanID)
	assert.Equal(t, spans.only(t, rp.TraceID, "ledger.finish").ParentID, rp.SpanID)
	assert.Equal(t, c.stats(t).TraceparentByGUID[gd], fmt.Sprintf("00-%s-%s-01", rp.TraceID, rpCore.SpanID))
	assert.Assert(t, is.Contains(rep.Stderr(), "trace_id="+rp.TraceID))
	var rpDetail string
	assert.NilError(t, ldb.QueryRow("SELECT detail FROM tx_event WHERE guid=? AND action='outcome' ORDER BY id DESC LIMIT 1", gd).Scan(&rpDetail))
	assert.Assert(t, is.Contains(rpDetail, "trace_id="+rp.TraceID))

	// settle: a decision per run, each its own trace, its event naming it.
	var decisions []otlptest.Span
	for _, sp := range spans.spans {
		if sp.Name == "settle.decision" {
			decisions = append(decisions, sp)
		}
	}
	assert.Equal(t, len(decisions), 2, "one settle.decision span per run: %+v", decisions)
	byOutcome := map[string]otlptest.Span{}
	for _, sp := range decisions {
		assert.Equal(t, sp.Service, "settle")
		assert.Equal(t, sp.ParentID, "")
		byOutcome[sp.Attrs["dedup.outcome"]] = sp
	}
	for action, verb := range map[string]string{"propose": "propose", "approve": "approve"} {
		sp, ok := byOutcome[verb]
		assert.Assert(t, ok, "no settle.decision span for %s: %+v", verb, decisions)
		var d string
		assert.NilError(t, ldb.QueryRow("SELECT detail FROM tx_event WHERE guid=? AND action=?", gd, action).Scan(&d))
		var detail struct {
			TraceID string `json:"trace_id"`
		}
		assert.NilError(t, json.Unmarshal([]byte(d), &detail), d)
		assert.Equal(t, detail.TraceID, sp.TraceID, "the %s event does not name its settle run's trace: %s", action, d)
	}
	assert.Assert(t, is.Contains(prop.Stderr(), "trace_id="+byOutcome["propose"].TraceID))
	assert.Assert(t, is.Contains(appr.Stderr(), "trace_id="+byOutcome["approve"].TraceID))

	// Never an account number, an amount's telegram field or a memo.
	raw := col.Raw()
	for _, secret := range []string{tracedFrom, tracedTo, tracedMemo, droppedMemo, "privy", "private memo"} {
		assert.Assert(t, !bytes.Contains(raw, []byte(secret)), "an exported span holds %q", secret)
	}
}

// otelEnvList is the environment without any OTEL_ variable of the
// test's own.
func otelEnvList() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}

func pick(m map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

// txLineHas reports whether the tx log line of guid holds every part.
func txLineHas(log, guid string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "msg=tx ") || !strings.Contains(line, "guid="+guid) {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// exemplarTraces returns the trace ids of the exemplars on metric's series.
func exemplarTraces(exposition []byte, metric string) []string {
	var ids []string
	for _, line := range strings.Split(string(exposition), "\n") {
		if !strings.HasPrefix(line, metric) {
			continue
		}
		if _, ex, ok := strings.Cut(line, `# {trace_id="`); ok {
			id, _, _ := strings.Cut(ex, `"`)
			ids = append(ids, id)
		}
	}
	return ids
}

// TestNoTracingWithoutAnEndpoint: with no endpoint set (or
// OTEL_SDK_DISABLED=true), nothing is exported and nothing is attempted,
// not even to the SDK's default endpoint; the core sees no trace context
// and the log line names no trace.
func TestNoTracingWithoutAnEndpoint(t *testing.T) {
	// The OTLP/HTTP default endpoint, which an exporter configured by
	// default would try.
	ln, err := net.Listen("tcp", "127.0.0.1:4318")
	assert.NilError(t, err, "the test needs the OTLP default port 4318 free")
	ln.Close()
	def := startCollector(t, "127.0.0.1:4318")
	other := startCollector(t, "127.0.0.1:0")
	cases := []struct {
		name string
		env  []string
	}{
		{"no endpoint", []string{"OTEL_SERVICE_NAME=quiet", "OTEL_TRACES_SAMPLER=always_on"}},
		{"OTEL_SDK_DISABLED", []string{"OTEL_SDK_DISABLED=true", "OTEL_EXPORTER_OTLP_ENDPOINT=" + other.URL()}},
		{"OTEL_TRACES_EXPORTER=none", []string{"OTEL_TRACES_EXPORTER=none", "OTEL_EXPORTER_OTLP_ENDPOINT=" + other.URL()}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := startCore(t)
			db := tempDB(t)
			r := startEnv(t, tc.env, "relay", "--db", db, "--listen", "127.0.0.1:0", "--core", c.url)
			g := newGUID()
			assert.Equal(t, code(send(t, r.addr, telegram(t, g))), dedup.CodeOK)
			assert.Equal(t, r.stop(t, syscall.SIGTERM), 0)
			assert.Equal(t, def.Requests()+other.Requests(), 0, "an export was attempted")
			assert.Equal(t, c.stats(t).TraceparentByGUID[g], "", "the core was sent a trace context")
			assert.Assert(t, !strings.Contains(r.log(), "trace_id="), "a log line names a trace:\n%s", r.log())
			assert.Assert(t, !strings.Contains(r.log(), "tracing on"))
		})
	}
}
