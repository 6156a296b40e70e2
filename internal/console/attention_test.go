package console

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup/internal/metrics"
	"dedup/internal/reconcile"
	"dedup/internal/settle"
	"dedup/ledger"
)

// writeJob leaves job's textfile in dir as the job does, its last success
// ago before now.
func writeJob(t *testing.T, dir, job string, ago time.Duration, extra string) {
	t.Helper()
	path := filepath.Join(dir, "dedup_"+job+".prom")
	assert.NilError(t, metrics.WriteJobTextfile(path, job, time.Now(), time.Second, true, nil, extra))
	if ago == 0 {
		return
	}
	text, err := os.ReadFile(path)
	assert.NilError(t, err)
	series := fmt.Sprintf(`dedup_job_last_success_timestamp_seconds{job=%q}`, job)
	ok, err := metrics.SetSeries(path, series, fmt.Sprintf("%.3f", float64(time.Now().Add(-ago).UnixMilli())/1000))
	assert.NilError(t, err)
	assert.Assert(t, ok, "no %s in %s", series, text)
}

// attentionIDs are the ids of the overview's attention items, in order.
func attentionIDs(t *testing.T, ctx context.Context) []string {
	t.Helper()
	ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#attention li.item")).map(e => e.id)`))
	assert.NilError(t, err)
	return ids
}

// The overview opens with what needs a person, most urgent first, on both
// ledgers, in a real browser. A clean ledger with every job on time says
// there is nothing to do. Then, each made for real: a transfer UNKNOWN for
// 20 minutes, a reconciliation that finds a FAILED row the core applied,
// kim's proposal waiting for a second person, resolve's last success two
// hours old: the four show first, in that order. A viewer is offered no
// close and a forged one is refused; lee closes the finding with a note in
// her browser (an event on the transfer, reconcile's textfile at 0), and
// approves kim's proposal; resolve reports again; and the overview says
// once more that nothing needs a person. Screenshots of each page at
// 1280 px (DEDUP_DOCS_IMG=docs/img keeps the SQLite ones for the docs).
func TestAttentionFirstInABrowser(t *testing.T) {
	requireBrowser(t)
	for _, lg := range ledgers {
		t.Run(lg.name, func(t *testing.T) {
			textfiles := t.TempDir()
			d := newDesk(t, lg.open, func(o *Options) { o.TextfileDir = textfiles })
			d.allowCertificates(t)
			ctx := context.Background()
			for _, job := range []string{"resolve", "reprocess", "purge", "check", "reconcile"} {
				writeJob(t, textfiles, job, time.Minute, "")
			}
			// Rows a clean day leaves: done transfers and a young UNKNOWN
			// that resolve will take.
			for i := 0; i < 3; i++ {
				d.insertRow(t, newGUID(), "DONE", "0000", 30)
			}
			d.insertRow(t, newGUID(), "UNKNOWN", "E901", 2)
			kim := d.browser(t, "kim")
			assert.NilError(t, chromedp.Do(kim, chromedp.Navigate(d.url+"/"), chromedp.WaitReady(chromedp.ID("all-clear"))))
			assert.Check(t, is.Len(attentionIDs(t, kim), 0))
			shoot(t, kim, "console-overview-clear")

			// The causes, made for real.
			old := newGUID()
			d.insertRow(t, old, "UNKNOWN", "E901", 20)
			failed := newGUID()
			d.insertRow(t, failed, "FAILED", "E902", 40)
			now, err := d.l.Now(ctx)
			assert.NilError(t, err)
			date := now.Local().Format("20060102")
			journal := filepath.Join(t.TempDir(), "journal.csv")
			assert.NilError(t, os.WriteFile(journal, []byte("guid,ref,from,to,amount,balance,processed_at\n"+
				failed+",C000000000000042,11020030004001,11020030009999,150000,99850000,"+date+"093001\n"), 0o644))
			sum, err := reconcile.Run(ctx, d.l, reconcile.Config{Date: date, Source: reconcile.FileSource{Path: journal}, Out: io.Discard,
				Log: slog.New(slog.DiscardHandler)})
			assert.NilError(t, err)
			assert.Check(t, sum.NeedsPerson(), "the reconciliation found nothing critical: %s", sum)
			writeJob(t, textfiles, "reconcile", time.Second, sum.Textfile())
			prom := filepath.Join(textfiles, "dedup_reconcile.prom")
			assert.Check(t, strings.Contains(readFile(t, prom), "\ndedup_reconcile_open_critical 1\n"))
			id, err := settle.DeskFor(d.l).Propose(ctx, settle.Proposal{GUID: old, As: settle.NotApplied, Reason: "core team: never received (INC-4712)"},
				settle.Person{Auth: settle.AuthCertificate, Name: "kim", Serial: "1", Host: "h1"})
			assert.NilError(t, err)
			writeJob(t, textfiles, "resolve", 2*time.Hour, "")

			assert.NilError(t, chromedp.Do(kim, chromedp.Navigate(d.url+"/"), chromedp.WaitReady(chromedp.ID("attention"))))
			assert.Check(t, is.DeepEqual(attentionIDs(t, kim), []string{"att-unknown", "att-findings", "att-proposals", "att-job-resolve"}))
			shoot(t, kim, "console-overview")
			for _, page := range []struct{ path, ready, name string }{
				{"/reconcile", "open-findings", "console-reconciliation"},
				{"/doubt?state=UNKNOWN", "rows", "console-in-doubt"},
				{"/tx/" + old, "events", "console-transfer"},
				{"/proposals", "open", "console-proposals"},
			} {
				assert.NilError(t, chromedp.Do(kim, chromedp.Navigate(d.url+page.path), chromedp.WaitReady(chromedp.ID(page.ready))))
				shoot(t, kim, page.name)
			}
			// The page fits 1280 px: nothing scrolls sideways.
			wide, err := chromedp.Run(kim, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > document.documentElement.clientWidth`))
			assert.NilError(t, err)
			assert.Check(t, !wide, "the transfer page is wider than 1280 px")

			open, total, err := d.l.OpenFindings(ctx, 10)
			assert.NilError(t, err)
			assert.Assert(t, is.Equal(total, int64(1)))
			fid := open[0].ID
			// A viewer reads, and may not close.
			code, body := d.get(t, "vic", "/reconcile")
			assert.Equal(t, code, 200)
			assert.Check(t, !strings.Contains(body, fmt.Sprintf(`id="close-%d"`, fid)), "a viewer is offered a close")
			code, _ = d.post(t, "vic", fmt.Sprintf("/findings/%d/close", fid), map[string][]string{"csrf": {d.token(t, "kim", old)}, "note": {"vic tries"}}, nil)
			assert.Check(t, is.Equal(code, 403), "a viewer's close")

			lee := d.browser(t, "lee")
			assert.NilError(t, chromedp.Do(lee, chromedp.Navigate(d.url+"/reconcile"), chromedp.WaitReady(chromedp.ID(fmt.Sprintf("close-%d", fid)))))
			wide, err = chromedp.Run(lee, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > document.documentElement.clientWidth`))
			assert.NilError(t, err)
			assert.Check(t, !wide, "the reconciliation page is wider than 1280 px")
			assert.NilError(t, chromedp.Do(lee,
				chromedp.SendKeys(chromedp.CSS(fmt.Sprintf(`#finding-%d input[name="note"]`, fid)), "Rule 3 broken by hand in the test; nothing to reverse"),
				chromedp.Click(chromedp.ID(fmt.Sprintf("close-%d", fid)))))
			waitFor(t, func() bool { _, n, err := d.l.OpenFindings(ctx, 1); return err == nil && n == 0 }, "lee's close reached the ledger")
			assert.NilError(t, chromedp.Do(lee, chromedp.WaitReady(chromedp.ID("no-open"))))
			evs, err := d.l.Events(ctx, failed)
			assert.NilError(t, err)
			last := evs[len(evs)-1]
			assert.Check(t, is.Equal(last.Action, ledger.ActionCloseFinding))
			assert.Check(t, strings.HasPrefix(last.Actor, "console:lee(cert "), last.Actor)
			assert.Check(t, strings.Contains(readFile(t, prom), "\ndedup_reconcile_open_critical 0\n"), "the alert's series after the close:\n%s", readFile(t, prom))

			assert.NilError(t, chromedp.Do(lee, chromedp.Navigate(d.url+"/tx/"+old), chromedp.WaitReady(chromedp.ID(fmt.Sprintf("approve-%d", id)))))
			assert.NilError(t, chromedp.Do(lee, chromedp.Click(chromedp.ID(fmt.Sprintf("approve-%d", id)))))
			waitFor(t, func() bool { return d.state(t, old) == "FAILED/E902" }, "lee's approval reached the ledger")
			writeJob(t, textfiles, "resolve", time.Second, "")

			assert.NilError(t, chromedp.Do(kim, chromedp.Navigate(d.url+"/"), chromedp.WaitReady(chromedp.ID("all-clear"))))
			assert.Check(t, is.Len(attentionIDs(t, kim), 0))
			assert.NilError(t, chromedp.Do(kim, chromedp.Navigate(d.url+"/audit"), chromedp.WaitReady(chromedp.ID("csv"))))
			shoot(t, kim, "console-audit")
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	assert.NilError(t, err)
	return string(b)
}

// A damaged ledger, as the daily check's textfile says, comes before
// everything else; a check that found none adds nothing.
func TestDamagedLedgerComesFirst(t *testing.T) {
	textfiles := t.TempDir()
	d := newDesk(t, ledgers[0].open, func(o *Options) { o.TextfileDir = textfiles })
	for _, job := range []string{"resolve", "reprocess", "purge", "reconcile"} {
		writeJob(t, textfiles, job, time.Minute, "")
	}
	d.insertRow(t, newGUID(), "UNKNOWN", "E901", 30)
	for _, tc := range []struct {
		damaged int
		first   string
	}{{0, `id="att-unknown"`}, {1, `id="att-damaged"`}} {
		assert.NilError(t, metrics.WriteJobTextfile(filepath.Join(textfiles, "dedup_check.prom"), "check", time.Now(), time.Second, true,
			[]metrics.JobCount{{Outcome: "ok", Rows: int64(1 - tc.damaged)}, {Outcome: "damaged", Rows: int64(tc.damaged)}}, ""))
		code, body := d.get(t, "vic", "/")
		assert.Equal(t, code, 200)
		i := strings.Index(body, `<li class="item`)
		assert.Assert(t, i >= 0, "no attention item")
		assert.Check(t, strings.Contains(body[i:i+200], tc.first), "damaged=%d: the first item is not %s:\n%s", tc.damaged, tc.first, body[i:i+200])
	}
}
