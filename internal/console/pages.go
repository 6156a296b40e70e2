package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"dedup"
	"dedup/internal/inspect"
	"dedup/internal/metrics"
	"dedup/internal/settle"
	"dedup/ledger"
	"dedup/lhstd"
)

// pageSize is how many rows a list shows at once.
const pageSize = 50

// maxPages bounds how deep a list may be paged (every list is one
// indexed query with a limit: (page+1) * pageSize rows at most).
const maxPages = 100

// doubtStates are the states a transfer in doubt may be in.
var doubtStates = []dedup.State{dedup.StateUnknown, dedup.StateFailed, dedup.StateSent, dedup.StateReceived}

var funcs = template.FuncMap{
	"age": func(d time.Duration) string { return fmtAge(d) },
	"secs": func(d time.Duration) int64 {
		return int64(d / time.Second)
	},
	"add":     func(a, b int) int { return a + b },
	"seconds": func(n int64) time.Duration { return time.Duration(n) * time.Second },
	"won":     won,
	"words":   func(class string) string { return dedup.Finding(class).Words() },
	"action": func(class string) string {
		return dedup.Finding(class).Action()
	},
}

// won is an amount with thousands separators, as a person reads it
// (99,000,000); the CLIs print plain digits for scripts.
func won(v any) string {
	var n int64
	switch x := v.(type) {
	case int64:
		n = x
	case int:
		n = int64(x)
	case *int64:
		if x == nil {
			return ""
		}
		n = *x
	case string:
		p, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return x
		}
		n = p
	default:
		return fmt.Sprint(v)
	}
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	digits := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return sign + b.String()
}

// fmtAge is a duration as a person reads it.
func fmtAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
}

// render writes page with data, the person and their token.
func (s *Server) render(w http.ResponseWriter, page string, o *operator, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["Me"] = o
	if o != nil {
		data["CSRF"] = s.token(*o)
	}
	data["Page"] = page
	var buf bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&buf, "layout.html", data); err != nil {
		s.opts.Log.Error("console: render", "page", page, "err", err)
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

// ledgerTrouble answers a page whose ledger read failed: a page that says
// so (503), never an empty 5xx.
func (s *Server) ledgerTrouble(w http.ResponseWriter, r *http.Request, o operator, err error) {
	s.opts.Log.Error("console: ledger", "who", o.Actor(), "path", r.URL.Path, "err", err)
	w.WriteHeader(http.StatusServiceUnavailable)
	s.render(w, "refused", &o, map[string]any{"Code": http.StatusServiceUnavailable, "Why": "the ledger could not be read: " + err.Error()})
}

func ctxOf(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 20*time.Second)
}

// bar is one bar of the in-doubt chart, drawn by the server as SVG.
type bar struct {
	Label  string
	Count  int
	X, H   int
	Y      int
	Capped bool
	// Late is how late the bar's rows are against the alert rules: ok
	// (younger than the in-flight threshold), near (some may be past a
	// threshold), late (every row past the UNKNOWN threshold).
	Late string
}

// ageBuckets are the chart's bars: transfers in doubt by age.
var ageBuckets = []struct {
	label      string
	from, upTo time.Duration
}{{"< 1 min", 0, time.Minute}, {"1-5 min", time.Minute, 5 * time.Minute}, {"5-15 min", 5 * time.Minute, 15 * time.Minute},
	{"15 min-2 h", 15 * time.Minute, 2 * time.Hour}, {"2-24 h", 2 * time.Hour, 24 * time.Hour}, {"> 1 day", 24 * time.Hour, 1 << 62}}

// lateness is how late a bucket's rows are: late once every row in it is
// past the UNKNOWN threshold, near once some may be past the in-flight
// one, ok otherwise.
func lateness(from, upTo time.Duration) string {
	switch {
	case from >= unknownTooOld.After:
		return "late"
	case upTo > inFlightTooOld.After:
		return "near"
	}
	return "ok"
}

// chartRows bounds the rows the chart reads per state.
const chartRows = 2000

// countLimit bounds each state's count on the overview: a page view reads
// at most this many index entries per state, however large the ledger
// (a larger state shows "≥ 100000"; inspect --summary counts it all).
const countLimit = 100_000

func (s *Server) overview(w http.ResponseWriter, r *http.Request, o operator) {
	ctx, cancel := ctxOf(r)
	defer cancel()
	stats, err := s.l.Stats(ctx, countLimit)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	counts := make([]int, len(ageBuckets))
	capped := false
	for _, st := range doubtStates {
		rows, err := s.l.SelectState(ctx, st, 0, chartRows)
		if err != nil {
			s.ledgerTrouble(w, r, o, err)
			return
		}
		if len(rows) == chartRows {
			capped = true
		}
		for _, row := range rows {
			for i, b := range ageBuckets {
				if row.Age < b.upTo {
					counts[i]++
					break
				}
			}
		}
	}
	most := 1
	for _, c := range counts {
		most = max(most, c)
	}
	bars := make([]bar, len(counts))
	for i, c := range counts {
		h := c * 120 / most
		bars[i] = bar{Label: ageBuckets[i].label, Count: c, X: 10 + i*95, H: h, Y: 140 - h, Late: lateness(ageBuckets[i].from, ageBuckets[i].upTo)}
	}
	open, err := settle.List(ctx, s.l)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	skew := s.ledgerSkew(ctx)
	skewText := "unknown (the ledger's clock could not be read)"
	if skew != nil {
		skewText = fmt.Sprintf("%+.3f s", skew.Seconds())
	}
	jobs := s.readJobs()
	items, err := s.attention(ctx, skew, open, jobs)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	s.render(w, "overview", &o, map[string]any{"Attention": items, "Stats": stats, "Bars": bars, "Capped": capped, "ChartRows": chartRows,
		"Open": open, "Skew": skewText, "SkewAlert": fmtSpan(ledgerClockSkew.After), "Jobs": jobs,
		"UnknownAfter": fmtSpan(unknownTooOld.After), "InFlightAfter": fmtSpan(inFlightTooOld.After)})
}

// doubtRow is one transfer in the in-doubt list.
type doubtRow struct {
	inspect.Row
	Age       time.Duration
	Exhausted bool
}

func (s *Server) doubt(w http.ResponseWriter, r *http.Request, o operator) {
	ctx, cancel := ctxOf(r)
	defer cancel()
	q := r.URL.Query()
	state := dedup.State(strings.ToUpper(q.Get("state")))
	if state == "" {
		state = dedup.StateUnknown
	}
	valid := false
	for _, st := range doubtStates {
		valid = valid || st == state
	}
	if !valid {
		s.refuse(w, r, &o, http.StatusBadRequest, "input", fmt.Sprintf("state %q is not one of UNKNOWN, FAILED, SENT, RECEIVED", state))
		return
	}
	channel := strings.ToUpper(q.Get("channel"))
	if channel != "" && (len(channel) > 3 || strings.Trim(channel, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") != "") {
		s.refuse(w, r, &o, http.StatusBadRequest, "input", "channel must be a channel code such as MOB")
		return
	}
	minAge, err := strconv.Atoi(q.Get("min_age"))
	if q.Get("min_age") == "" {
		minAge, err = 0, nil
	}
	if err != nil || minAge < 0 {
		s.refuse(w, r, &o, http.StatusBadRequest, "input", "min_age must be a whole number of seconds")
		return
	}
	page, err := strconv.Atoi(q.Get("page"))
	if q.Get("page") == "" {
		page, err = 0, nil
	}
	if err != nil || page < 0 || page >= maxPages {
		s.refuse(w, r, &o, http.StatusBadRequest, "input", fmt.Sprintf("page must be from 0 to %d", maxPages-1))
		return
	}
	order := q.Get("sort")
	if order != "" && order != "oldest" && order != "attempts" {
		s.refuse(w, r, &o, http.StatusBadRequest, "input", "sort must be oldest or attempts")
		return
	}
	// One indexed query with a limit: (state, updated_at), oldest first.
	// A channel filter reads a bounded window of the oldest rows.
	limit := (page+1)*pageSize + 1
	if channel != "" {
		limit = maxPages * pageSize
	}
	rows, err := s.l.SelectState(ctx, state, time.Duration(minAge)*time.Second, limit)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	var list []doubtRow
	for _, row := range rows {
		d := inspect.Decode(row)
		if channel != "" && (d.Request == nil || d.Request.Channel != channel) {
			continue
		}
		list = append(list, doubtRow{Row: d, Age: row.Age,
			Exhausted: row.State == dedup.StateFailed && row.RspCode == dedup.CodeNotSent && row.Attempts >= s.opts.MaxAttempts})
	}
	if order == "attempts" {
		sort.SliceStable(list, func(i, j int) bool { return list[i].Attempts > list[j].Attempts })
	}
	from := min(page*pageSize, len(list))
	to := min(from+pageSize, len(list))
	more := len(list) > to
	link := func(p int) string {
		v := url.Values{"state": {string(state)}, "page": {strconv.Itoa(p)}}
		if channel != "" {
			v.Set("channel", channel)
		}
		if minAge > 0 {
			v.Set("min_age", strconv.Itoa(minAge))
		}
		if order != "" {
			v.Set("sort", order)
		}
		return "/doubt?" + v.Encode()
	}
	data := map[string]any{"Rows": list[from:to], "State": string(state), "Channel": channel, "MinAge": minAge, "Sort": order,
		"Page": page, "States": doubtStates, "From": from + 1, "To": to, "Filtered": channel != ""}
	if more && page+1 < maxPages {
		data["Next"] = link(page + 1)
	}
	if page > 0 {
		data["Prev"] = link(page - 1)
	}
	s.render(w, "doubt", &o, data)
}

func (s *Server) search(w http.ResponseWriter, r *http.Request, o operator) {
	g := strings.TrimSpace(r.URL.Query().Get("guid"))
	if !lhstd.IsGUID(g) {
		s.refuse(w, r, &o, http.StatusBadRequest, "input", "a GUID is 32 characters of [0-9A-Za-z]")
		return
	}
	http.Redirect(w, r, "/tx/"+g, http.StatusSeeOther)
}

func (s *Server) transfer(w http.ResponseWriter, r *http.Request, o operator) {
	g := r.PathValue("guid")
	if !lhstd.IsGUID(g) {
		s.refuse(w, r, &o, http.StatusBadRequest, "input", "a GUID is 32 characters of [0-9A-Za-z]")
		return
	}
	ctx, cancel := ctxOf(r)
	defer cancel()
	row, err := s.l.Get(ctx, g)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	if row == nil {
		s.refuse(w, r, &o, http.StatusNotFound, "input", "the ledger has no row for GUID "+g)
		return
	}
	evs, err := s.l.Events(ctx, g)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	open, err := settle.List(ctx, s.l)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	type openView struct {
		settle.Open
		Mine bool
	}
	var mine []openView
	for _, p := range open {
		if p.GUID == g {
			mine = append(mine, openView{Open: p, Mine: p.By == o.Name})
		}
	}
	d := inspect.Decode(*row)
	s.render(w, "transfer", &o, map[string]any{"Row": d, "Age": row.Age, "Events": inspect.Events(evs), "Open": mine,
		"CanApply":   row.State == dedup.StateUnknown,
		"CanAbandon": row.State == dedup.StateFailed && row.RspCode == dedup.CodeNotSent})
}

func (s *Server) propose(w http.ResponseWriter, r *http.Request, o operator) error {
	f := r.PostForm
	p := settle.Proposal{GUID: r.PathValue("guid"), As: f.Get("as"), Reason: strings.TrimSpace(f.Get("reason")),
		CoreRef: strings.TrimSpace(f.Get("core_ref")), ProcessedAt: strings.TrimSpace(f.Get("processed_at"))}
	if b := strings.TrimSpace(f.Get("balance")); b != "" {
		v, err := strconv.ParseInt(b, 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("%w: balance %q is not a whole number of won", settle.ErrUsage, b)
		}
		p.Balance = &v
	}
	if p.As != settle.Applied {
		p.CoreRef, p.ProcessedAt, p.Balance = "", "", nil
	}
	if err := p.Check(); err != nil {
		return err
	}
	ctx, cancel := ctxOf(r)
	defer cancel()
	id, err := s.desk.Propose(ctx, p, o.Person)
	if err != nil {
		return err
	}
	s.opts.Log.Info("console: proposed", "who", o.Actor(), "id", id, "guid", p.GUID, "as", p.As, "reason", p.Reason)
	http.Redirect(w, r, "/tx/"+p.GUID, http.StatusSeeOther)
	return nil
}

// proposalOf finds open proposal id, refusing its own proposer's decision
// before the ledger is asked (the ledger refuses it again: the page is a
// convenience, the desk the control).
func (s *Server) openProposal(ctx context.Context, id int64, o operator) (*settle.Open, error) {
	open, err := settle.List(ctx, s.l)
	if err != nil {
		return nil, err
	}
	for _, p := range open {
		if p.ID == id {
			if p.By == o.Name {
				return nil, fmt.Errorf("%w: %w: proposal %d was made by %s: it needs another person's decision", settle.ErrRefused, errSamePerson, id, o.Name)
			}
			return &p, nil
		}
	}
	return nil, nil
}

func proposalID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: %q is not a proposal id", settle.ErrUsage, r.PathValue("id"))
	}
	return id, nil
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, o operator) error {
	id, err := proposalID(r)
	if err != nil {
		return err
	}
	ctx, cancel := ctxOf(r)
	defer cancel()
	if _, err := s.openProposal(ctx, id, o); err != nil {
		return err
	}
	a, err := s.desk.Approve(ctx, id, o.Person, strings.TrimSpace(r.PostForm.Get("reason")))
	if err != nil {
		return err
	}
	s.opts.Log.Info("console: approved", "who", o.Actor(), "id", id, "guid", a.GUID, "state", a.Row.State, "code", a.Row.RspCode)
	http.Redirect(w, r, "/tx/"+a.GUID, http.StatusSeeOther)
	return nil
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request, o operator) error {
	id, err := proposalID(r)
	if err != nil {
		return err
	}
	ctx, cancel := ctxOf(r)
	defer cancel()
	p, err := s.openProposal(ctx, id, o)
	if err != nil {
		return err
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if err := s.desk.Reject(ctx, id, o.Person, reason); err != nil {
		return err
	}
	s.opts.Log.Info("console: rejected", "who", o.Actor(), "id", id, "reason", reason)
	target := "/proposals"
	if p != nil {
		target = "/tx/" + p.GUID
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
	return nil
}

// period reads since and until (YYYY-MM-DD, UTC) with their defaults: the
// last days days, to now.
func period(q url.Values, days int, now time.Time) (time.Time, time.Time, error) {
	since := now.UTC().Add(-time.Duration(days) * 24 * time.Hour).Truncate(24 * time.Hour)
	var until time.Time
	if v := q.Get("since"); v != "" {
		t, err := time.Parse("2006-01-02", v)
		if err != nil {
			return since, until, fmt.Errorf("since %q is not YYYY-MM-DD", v)
		}
		since = t
	}
	if v := q.Get("until"); v != "" {
		t, err := time.Parse("2006-01-02", v)
		if err != nil {
			return since, until, fmt.Errorf("until %q is not YYYY-MM-DD", v)
		}
		until = t.Add(24 * time.Hour) // the day itself included
	}
	if !until.IsZero() && !until.After(since) {
		return since, until, errors.New("until must be after since")
	}
	return since, until, nil
}

func (s *Server) proposals(w http.ResponseWriter, r *http.Request, o operator) {
	ctx, cancel := ctxOf(r)
	defer cancel()
	since, until, err := period(r.URL.Query(), 7, s.opts.Now())
	if err != nil {
		s.refuse(w, r, &o, http.StatusBadRequest, "input", err.Error())
		return
	}
	open, err := settle.List(ctx, s.l)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	evs, err := s.l.EventsBetween(ctx, since, until)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	var decided []inspect.Event
	for _, e := range inspect.Events(evs) {
		if e.Action == ledger.ActionApprove || e.Action == ledger.ActionReject || e.Action == ledger.ActionExpire {
			decided = append(decided, e)
		}
	}
	s.render(w, "proposals", &o, map[string]any{"Open": open, "Decided": decided,
		"Since": since.Format("2006-01-02"), "Until": untilText(until)})
}

func untilText(until time.Time) string {
	if until.IsZero() {
		return ""
	}
	return until.Add(-24 * time.Hour).Format("2006-01-02")
}

func (s *Server) audit(w http.ResponseWriter, r *http.Request, o operator) {
	ctx, cancel := ctxOf(r)
	defer cancel()
	q := r.URL.Query()
	since, until, err := period(q, 1, s.opts.Now())
	if err != nil {
		s.refuse(w, r, &o, http.StatusBadRequest, "input", err.Error())
		return
	}
	format := q.Get("format")
	if format != "" && format != "csv" && format != "json" {
		s.refuse(w, r, &o, http.StatusBadRequest, "input", "format must be csv or json")
		return
	}
	evs, err := s.l.EventsBetween(ctx, since, until)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	out := inspect.Events(evs)
	name := "dedup-events-" + since.Format("20060102")
	switch format {
	case "csv":
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.csv"`)
		inspect.WriteEventsCSV(w, out)
		s.opts.Log.Info("console: audit export", "who", o.Actor(), "format", "csv", "events", len(out))
		return
	case "json":
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.json"`)
		inspect.WriteEventsJSON(w, out)
		s.opts.Log.Info("console: audit export", "who", o.Actor(), "format", "json", "events", len(out))
		return
	}
	v := url.Values{"since": {since.Format("2006-01-02")}}
	if !until.IsZero() {
		v.Set("until", untilText(until))
	}
	shown := out
	if len(shown) > 500 {
		shown = shown[len(shown)-500:]
	}
	s.render(w, "audit", &o, map[string]any{"Events": shown, "Total": len(out), "Since": since.Format("2006-01-02"),
		"Until": untilText(until), "CSV": "/audit?" + v.Encode() + "&format=csv", "JSON": "/audit?" + v.Encode() + "&format=json"})
}

// reconcile shows the open critical findings of every run first, each
// with the one action that fits its class and, for an operator, a form to
// close it; then the last reconciliations against the core's journal, and
// one run's findings (?run=ID, default the newest), critical ones first.
func (s *Server) reconcile(w http.ResponseWriter, r *http.Request, o operator) {
	ctx, cancel := ctxOf(r)
	defer cancel()
	openFs, total, err := s.openFindings(ctx)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	runs, err := s.l.ReconcileRuns(ctx, "", 30)
	if err != nil {
		s.ledgerTrouble(w, r, o, err)
		return
	}
	shown := inspect.Runs(runs)
	var run *inspect.Run
	want := r.URL.Query().Get("run")
	for i := range shown {
		if want == "" && i == 0 || want == strconv.FormatInt(shown[i].ID, 10) {
			run = &shown[i]
		}
	}
	if want != "" && run == nil {
		s.refuse(w, r, &o, http.StatusNotFound, "input", "no such reconciliation run among the last 30")
		return
	}
	if run != nil {
		fs, err := s.l.ReconcileFindings(ctx, run.ID)
		if err != nil {
			s.ledgerTrouble(w, r, o, err)
			return
		}
		run.Findings = inspect.Findings(fs)
	}
	var critical, rest []dedup.Finding
	for _, c := range dedup.Findings {
		if c.Critical() {
			critical = append(critical, c)
		} else {
			rest = append(rest, c)
		}
	}
	s.render(w, "reconcile", &o, map[string]any{"OpenFindings": inspect.OpenFindings(openFs), "OpenTotal": total,
		"Runs": shown, "Run": run, "Critical": critical, "Rest": rest})
}

// closeFinding closes an open critical finding for the operator, with
// their note: one person suffices (closing changes no money and no row),
// and the desk records the close as an event on the transfer.
func (s *Server) closeFinding(w http.ResponseWriter, r *http.Request, o operator) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return fmt.Errorf("%w: %q is not a finding's id", settle.ErrUsage, r.PathValue("id"))
	}
	note := strings.TrimSpace(r.PostForm.Get("note"))
	ctx, cancel := ctxOf(r)
	defer cancel()
	f, err := s.desk.CloseFinding(ctx, id, o.Person, note)
	if err != nil {
		return err
	}
	s.opts.Log.Info("console: finding closed", "who", o.Actor(), "finding", id, "guid", f.GUID, "class", f.Class, "note", note)
	s.updateOpenCritical(ctx)
	http.Redirect(w, r, "/reconcile#open", http.StatusSeeOther)
	return nil
}

// updateOpenCritical sets reconcile's textfile's count of open critical
// findings, so that the page alert clears once the last one is closed
// rather than at the next run. A textfile the console cannot write (or
// none yet) is left for the next run, and said so in the log.
func (s *Server) updateOpenCritical(ctx context.Context) {
	if s.opts.TextfileDir == "" {
		return
	}
	path := filepath.Join(s.opts.TextfileDir, reconcileTextfile)
	_, open, err := s.l.OpenFindings(ctx, 0)
	if err == nil {
		var ok bool
		ok, err = metrics.SetSeries(path, metrics.OpenCriticalSeries, strconv.FormatInt(open, 10))
		if err == nil && !ok {
			err = fmt.Errorf("it has no %s series yet", metrics.OpenCriticalSeries)
		}
	}
	if err != nil {
		s.opts.Log.Warn("console: reconcile's textfile was not updated: the page alert follows at reconcile's next run", "textfile", path, "err", err)
	}
}

// reconcileTextfile is the name of reconcile's textfile as the package's
// timer writes it.
const reconcileTextfile = "dedup_reconcile.prom"
