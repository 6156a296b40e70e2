// Package sim runs the relay's real code in a simulated world, under
// virtual time (testing/synctest): the real relay server, the real send
// sequence and core client, the real jobs (resolve, reprocess, purge,
// reconcile) and the real SQLite ledger, whose clock follows the virtual
// one (sqlite.FollowGoClock). Simulated: the network between channels,
// relays and the core (in-memory connections that are refused, cut, or
// deliver a request late), the core (the fixture core: non-idempotent,
// with its inquiry and journal, slow, dropping, failing on a memo's word),
// channels that retransmit the same GUID on their own timeouts, relays
// that crash (fail-stop) and restart on the same ledger, two relays on one
// ledger, holders frozen past their lease, and the jobs at any moment.
// Every choice is drawn from one seed: a failing seed is a bug report
// (docs/testing.md, "The simulation"). Run it with scripts/sim.sh.
package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"dedup"
	"dedup/internal/channel"
	"dedup/internal/coreapi"
	"dedup/internal/fixturecore"
	"dedup/internal/purge"
	"dedup/internal/reconcile"
	"dedup/internal/relay"
	"dedup/internal/reprocess"
	"dedup/internal/resolve"
	"dedup/internal/send"
	"dedup/internal/settle"
	"dedup/ledger"
	"dedup/ledger/sqlite"
	"dedup/lhstd"
)

// The relay's settings in the simulated world: the defaults of docs/cli.md.
const (
	connectTimeout = time.Second
	exchange       = 3 * time.Second // --timeout
	orphanAfter    = 60 * time.Second
	minAge         = 300 * time.Second // resolve --min-age
	maxAttempts    = 3                 // reprocess --max-attempts
	channelTimeout = 5 * time.Second   // a channel's own wait for a reply
)

// Schedule is what one seed draws: the workload and its faults.
type Schedule struct {
	Seed      uint64
	Relays    int // relays on the one ledger: 1 or 2
	Channels  int
	Transfers int // per channel
	Faults    int // fault events drawn (crashes, outages, late links, freezes, odd memos)
}

// Result is one schedule's outcome.
type Result struct {
	Schedule   Schedule
	Transfers  int
	Faults     int
	Violations []string       // each with the GUID's story
	Applied    int            // transfers the core received (POSTs)
	End        string         // the virtual time when the world was quiet
	Jobs       map[string]int // the jobs run, and the people's decisions, by name
	Replies    map[string]int // the replies channels received, by code ("-": none)
}

// world is one schedule's simulated world.
type world struct {
	sched Schedule
	net   *draw // the network's choices (late links)
	log   *slog.Logger
	path  string // the SQLite ledger

	core   *fixturecore.Core
	coreLn *listener
	coreHS *http.Server

	jobs      sync.Map       // job name → *atomic.Int64
	approvals sync.WaitGroup // the second person's approvals still to come
	restartMu sync.Mutex     // one restart of a relay at a time
	crashed   sync.Map       // the memos whose holder crashed once
	ended     chan struct{}  // closed when the world shuts down
	coreDown  atomic.Bool
	lateLink  atomic.Bool
	faults    atomic.Int64

	mu      sync.Mutex
	relays  []*node
	stories map[string]*story
	clients []*coreapi.Client
}

// story is everything that happened to one GUID, for a violation's report.
type story struct {
	lines   []string
	replies []string // the codes the channel received, in order
	final   []byte   // the last final reply (0000, B2xx, E500, E904, E905)
}

func (w *world) note(guid, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stories[guid]
	if s == nil {
		s = &story{}
		w.stories[guid] = s
	}
	s.lines = append(s.lines, fmt.Sprintf("%s %s", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...)))
}

// draw is one actor's stream of choices. Each actor (a channel, the fault
// loop, the job loop, the network) draws from a stream of its own, derived
// from the seed, so that what one actor draws does not depend on how the
// scheduler interleaved the others: a seed replays its schedule as closely
// as Go's scheduler allows.
type draw struct {
	mu sync.Mutex
	r  *rand.Rand
}

// stream returns the actor k's stream of choices for this seed.
func (w *world) stream(k uint64) *draw {
	return &draw{r: rand.New(rand.NewPCG(w.sched.Seed, k))}
}

func (d *draw) intn(n int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.r.IntN(n)
}

func (d *draw) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(d.intn(int(hi-lo)+1))
}

// node is one relay process: its listener, its ledger handle, its server.
type node struct {
	id   int
	ln   *listener
	l    *sqlite.Ledger
	srv  *relay.Server
	core *coreapi.Client
	dead atomic.Bool
}

// Run runs one schedule in the caller's synctest bubble, with the ledger in
// dir, and returns what it found.
func Run(sched Schedule, dir string) Result {
	w := &world{sched: sched, stories: map[string]*story{}, ended: make(chan struct{}),
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), path: filepath.Join(dir, "relay.db")}
	res := Result{Schedule: sched}
	w.net = w.stream(3)
	w.core, _ = fixturecore.New(fixturecore.Config{Slow: 8 * time.Second})
	w.coreLn = newListener("core")
	w.coreHS = &http.Server{Handler: w.observe(w.core.Handler())}
	go w.coreHS.Serve(w.coreLn)

	for i := range sched.Relays {
		if err := w.start(i); err != nil {
			res.Violations = append(res.Violations, fmt.Sprintf("relay %d did not start: %v", i, err))
			return res
		}
	}
	stopFaults := make(chan struct{})
	var faultsDone sync.WaitGroup
	faultsDone.Go(func() { w.faultLoop(stopFaults) })
	faultsDone.Go(func() { w.jobLoop(stopFaults) })

	var chans sync.WaitGroup
	for c := range sched.Channels {
		chans.Go(func() { w.channel(c) })
	}
	chans.Wait()
	close(stopFaults)
	faultsDone.Wait()
	w.approvals.Wait()
	res.Transfers = sched.Channels * sched.Transfers
	res.Faults = int(w.faults.Load())

	// Heal: the core up, the links sound, every relay running; then the
	// jobs until nothing moves.
	w.coreDown.Store(false)
	w.lateLink.Store(false)
	for i := range sched.Relays {
		w.restart(i, 0)
		if w.relay(i).dead.Load() {
			res.Violations = append(res.Violations, fmt.Sprintf("relay %d did not restart", i))
		}
	}
	w.quiesce()
	res.Violations = append(res.Violations, w.check()...)
	res.Applied = w.core.Stats().Transfers
	res.End = time.Now().UTC().Format(time.TimeOnly)
	res.Jobs = map[string]int{}
	w.jobs.Range(func(k, v any) bool { res.Jobs[k.(string)] = int(v.(*atomic.Int64).Load()); return true })
	res.Replies = map[string]int{}
	for _, st := range w.stories {
		for _, c := range st.replies {
			res.Replies[c]++
		}
	}
	w.shutdown()
	return res
}

// observe records every call the core receives in the GUID's story.
func (w *world) observe(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if g, ok := strings.CutPrefix(r.URL.Path, "/v1/transfers/"); ok {
			w.note(g, "core: inquiry")
		} else if r.URL.Path == "/v1/transfers" && r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var t struct {
				GUID string `json:"guid"`
			}
			json.Unmarshal(body, &t)
			w.note(t.GUID, "core: POST received")
		}
		h.ServeHTTP(rw, r)
	})
}

// coreClient is a core client over the simulated network.
func (w *world) coreClient() *coreapi.Client {
	c, err := coreapi.New(coreapi.Config{BaseURL: "http://core:80", ConnectTimeout: connectTimeout, Timeout: exchange,
		Dial: func(ctx context.Context, _ string) (net.Conn, error) {
			if w.coreDown.Load() {
				return nil, errRefused
			}
			var wrap func(net.Conn) net.Conn
			if w.lateLink.Load() && w.net.intn(3) == 0 {
				heal := w.net.dur(time.Second, 2*exchange)
				wrap = func(c net.Conn) net.Conn { return newLateConn(c, heal) }
			}
			return w.coreLn.Dial(ctx, wrap)
		}})
	if err != nil {
		panic(err) // the URL and timeouts above are constants
	}
	w.mu.Lock()
	w.clients = append(w.clients, c)
	w.mu.Unlock()
	return c
}

// start starts relay i on the ledger as the relay binary does: open,
// sweep the orphans, then serve.
func (w *world) start(i int) error {
	l, err := sqlite.Open(w.path, ledger.Options{Actor: fmt.Sprintf("relay@sim%d", i)})
	if err != nil {
		return err
	}
	n := &node{id: i, ln: newListener(fmt.Sprintf("relay%d", i)), l: l, core: w.coreClient()}
	bounds := ledger.Bounds{ConnectTimeout: connectTimeout, Timeout: exchange, OrphanAfter: orphanAfter}
	n.srv = relay.New(relay.Config{Store: l, Core: n.core, Logger: w.log, IdleTimeout: 300 * time.Second,
		OrphanAfter: orphanAfter, Lease: bounds.Lease(),
		BeforeSend: func(memo string) {
			var secs int
			if _, err := fmt.Sscanf(memo, "FRZ%d", &secs); err == nil { // a holder paused past its lease
				time.Sleep(bounds.Lease() + time.Duration(secs)*time.Second)
			}
			if strings.Contains(memo, "CRASH") && w.crashOnce(memo) {
				// The process dies between the claim and the send, once per
				// transfer: the claim is left SENT, nothing reached the core.
				// This goroutine is the dead process's: it stays stopped
				// until the world ends, its lease long spent.
				w.crash(n)
				go w.restart(i, 5*time.Second)
				<-w.ended
			}
		}})
	if err := n.srv.SweepOrphans(context.Background()); err != nil {
		l.Close()
		return err
	}
	n.srv.StartSweeper()
	go n.srv.Serve(n.ln)
	w.mu.Lock()
	if i < len(w.relays) {
		w.relays[i] = n
	} else {
		w.relays = append(w.relays, n)
	}
	w.mu.Unlock()
	return nil
}

// restart starts relay i again after a while, unless it runs already.
func (w *world) restart(i int, after time.Duration) {
	time.Sleep(after)
	w.restartMu.Lock()
	defer w.restartMu.Unlock()
	if !w.relay(i).dead.Load() {
		return
	}
	if err := w.start(i); err != nil {
		w.note("world", "relay %d restart: %v", i, err)
	}
}

// crashOnce reports whether the transfer with this memo has not crashed
// its holder yet.
func (w *world) crashOnce(memo string) bool {
	_, done := w.crashed.LoadOrStore(memo, true)
	return !done
}

func (w *world) relay(i int) *node {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.relays[i]
}

// crash stops relay i fail-stop: no new connection, every connection cut,
// its ledger handle closed, whatever it was doing lost.
func (w *world) crash(n *node) {
	if n.dead.Swap(true) {
		return
	}
	// The ledger handle first: nothing the process was doing is recorded
	// after this instant (a write already committing may still land, as
	// one would before a real crash).
	n.l.Close()
	n.ln.Close()
	n.ln.Cut()
	n.core.CloseIdle()
	go func() { // its goroutines end; their writes fail
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n.srv.Shutdown(ctx)
		cancel()
	}()
}

// faultLoop draws the faults of the schedule while the channels work: the
// core down for a while, the link to it breaking and healing late, a
// relay crashing and restarting.
func (w *world) faultLoop(stop <-chan struct{}) {
	d := w.stream(1)
	for range w.sched.Faults {
		select {
		case <-stop:
			return
		case <-time.After(d.dur(time.Second, 40*time.Second)):
		}
		w.faults.Add(1)
		switch d.intn(3) {
		case 0:
			w.coreDown.Store(true)
			time.Sleep(d.dur(time.Second, 60*time.Second))
			w.coreDown.Store(false)
		case 1:
			w.lateLink.Store(true)
			time.Sleep(d.dur(time.Second, 10*time.Second))
			w.lateLink.Store(false)
		case 2:
			i := d.intn(w.sched.Relays)
			w.crash(w.relay(i))
			w.restart(i, d.dur(0, 10*time.Second))
		}
	}
}

// jobLoop runs resolve, reprocess and purge at random moments, each on a
// ledger handle of its own, as the timers' processes would.
func (w *world) jobLoop(stop <-chan struct{}) {
	d := w.stream(2)
	for {
		select {
		case <-stop:
			return
		case <-time.After(d.dur(5*time.Second, 60*time.Second)):
		}
		w.job(d.intn(5), d)
	}
}

// job runs one job: 0 resolve, 1 reprocess, 2 purge, 3 two people's
// settle decision on the oldest row in doubt, 4 reconcile of the day so far
// (it resolves what the journal proves and keeps its run).
func (w *world) job(which int, d *draw) (moved int) {
	l, err := sqlite.Open(w.path, ledger.Options{Actor: "job@sim"})
	if err != nil {
		w.note("world", "job: open: %v", err)
		return 0
	}
	defer l.Close()
	ctx := context.Background()
	core := w.coreClient()
	defer core.CloseIdle()
	name := [...]string{"resolve", "reprocess", "purge", "settle", "reconcile"}[min(which, 4)]
	n, _ := w.jobs.LoadOrStore(name, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	switch which {
	case 0:
		s, _ := resolve.Run(ctx, l, core, minAge, ledger.DefaultMaxClockSkew, w.log)
		return s.Done + s.Failed
	case 1:
		sender := &send.Sender{Ledger: l, Core: core, Lease: ledger.Bounds{ConnectTimeout: connectTimeout, Timeout: exchange}.Lease()}
		s, _ := reprocess.Run(ctx, l, sender, maxAttempts, false, w.log)
		return s.Sent
	case 2:
		purge.Run(ctx, l, 1, 1, ledger.DefaultMaxClockSkew, false, nil, w.log)
	case 3:
		return w.settle(ctx, l, d.dur(0, 15*time.Minute))
	default:
		date := time.Now().Format("20060102")
		s, _ := reconcile.Run(ctx, l, reconcile.Config{Date: date, Out: io.Discard, Log: w.log,
			Source: reconcile.CoreSource{Client: core, URL: "http://core:80", Date: date}})
		return int(s.Counts[dedup.FindingResolved] + s.Counts[dedup.FindingAppliedButFailed])
	}
	return 0
}

// The two people who decide, as sudo authenticated them.
var (
	proposer = settle.Person{Auth: settle.AuthSudo, Name: "kim", UID: 1001, Host: "sim"}
	approver = settle.Person{Auth: settle.AuthSudo, Name: "lee", UID: 1002, Host: "sim"}
)

// settle has two people decide the oldest UNKNOWN row past resolve's
// --min-age the way the runbook has them: from the core team's answer,
// which is the truth (the core's journal) at the moment they ask. One
// proposes; the other approves after a while (the row may have moved
// meanwhile: the approval is fenced on the row as proposed).
func (w *world) settle(ctx context.Context, l ledger.Ledger, after time.Duration) int {
	rows, err := l.SelectUnknown(ctx, minAge)
	if err != nil || len(rows) == 0 {
		return 0
	}
	row := rows[0]
	p := settle.Proposal{GUID: row.GUID, As: settle.NotApplied, Reason: "the core team: not applied"}
	for _, line := range w.core.Journal(time.Now().Format("20060102")) {
		if line.GUID == row.GUID {
			balance := line.Balance
			p = settle.Proposal{GUID: row.GUID, As: settle.Applied, Reason: "the core team: applied",
				CoreRef: line.Ref, Balance: &balance, ProcessedAt: line.ProcessedAt}
		}
	}
	desk := settle.DeskFor(l)
	id, err := desk.Propose(ctx, p, proposer)
	if err != nil {
		w.note(row.GUID, "settle: propose %s refused: %v", p.As, err)
		return 0
	}
	w.note(row.GUID, "settle: %s proposed (id %d)", p.As, id)
	w.approvals.Go(func() {
		time.Sleep(after)
		l, err := sqlite.Open(w.path, ledger.Options{Actor: "settle@sim"})
		if err != nil {
			w.note(row.GUID, "settle: open: %v", err)
			return
		}
		defer l.Close()
		if _, err := settle.DeskFor(l).Approve(ctx, id, approver, "checked"); err != nil {
			w.note(row.GUID, "settle: approval refused: %v", err)
			return
		}
		w.note(row.GUID, "settle: %s approved", p.As)
		n, _ := w.jobs.LoadOrStore("decisions", new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	})
	return 1
}

// memo draws how the core and the holder will treat a transfer.
func (w *world) memo(d *draw) (memo, to string) {
	to = "11020030004002"
	switch n := d.intn(100); {
	case n < 6:
		return "SLOW sim", to // applied after the relay's timeout
	case n < 10:
		return "APPLYDROP sim", to // applied, the answer lost
	case n < 13:
		return "DROP sim", to // read, nothing applied, no answer
	case n < 15:
		return "FAIL500 sim", to
	case n < 18:
		return fmt.Sprintf("FRZ%d sim", d.intn(600)), to // its holder frozen past the lease, for up to 10 minutes more
	case n < 20:
		return "sim", "11020030004001" // B204: the same accounts
	case n < 23:
		// Its holder dies between the claim and the send; the resend
		// is applied and its answer lost.
		return fmt.Sprintf("APPLYDROP CRASH%d", d.intn(100_000)), to
	}
	return "sim", to
}

// channel sends its transfers one after another, retransmitting each
// under the same GUID until it gets a final answer or gives up.
func (w *world) channel(c int) {
	d := w.stream(100 + uint64(c))
	for i := range w.sched.Transfers {
		guid := fmt.Sprintf("20000101SIM%07d%02d%012d", w.sched.Seed%10_000_000, c%100, i)
		memo, to := w.memo(d)
		tg, err := lhstd.NewTransferRequest(guid, "MOB", "20000101000000",
			lhstd.Transfer{From: "11020030004001", To: to, Amount: int64(1000 + d.intn(100000)), Memo: memo})
		if err != nil {
			panic(err) // every field above is valid
		}
		for try := 0; try < 8; try++ {
			code, reply := w.roundTrip(d, guid, tg)
			if isFinal(code) {
				w.mu.Lock()
				w.stories[guid].final = reply
				w.mu.Unlock()
				break
			}
			time.Sleep(d.dur(time.Second, 20*time.Second))
		}
	}
}

// roundTrip sends tg to a running relay and returns the reply's code ("-"
// when none came).
func (w *world) roundTrip(d *draw, guid string, tg []byte) (string, []byte) {
	n := w.relay(d.intn(w.sched.Relays))
	conn, err := n.ln.Dial(context.Background(), nil)
	if err != nil {
		w.note(guid, "channel: relay%d refused", n.id)
		w.reply(guid, "-")
		return "-", nil
	}
	cc := channel.NewConn(conn, channelTimeout)
	defer cc.Close()
	reply, err := cc.RoundTrip(tg)
	if err != nil {
		w.note(guid, "channel: relay%d: no reply (%v)", n.id, err)
		w.reply(guid, "-")
		return "-", nil
	}
	code := lhstd.ReplyCode(reply)
	w.note(guid, "channel: relay%d answered %s", n.id, code)
	w.reply(guid, code)
	return code, reply
}

func (w *world) reply(guid, code string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.stories[guid]
	s.replies = append(s.replies, code)
}

func isFinal(code string) bool {
	return code == dedup.CodeOK || strings.HasPrefix(code, "B2") || code == "E500" || code == "E904" || code == "E905"
}

// quiesce runs the jobs, letting virtual time pass for the sweep and
// resolve's --min-age, until a round moves nothing.
func (w *world) quiesce() {
	for round := 0; round < 12; round++ {
		time.Sleep(orphanAfter + minAge + 10*time.Second)
		moved := w.job(0, nil) + w.job(1, nil)
		if moved == 0 && (round > 0 || !w.inDoubt()) {
			return
		}
	}
}

// inDoubt reports whether a row is still SENT, RECEIVED or UNKNOWN.
func (w *world) inDoubt() bool {
	l, err := sqlite.Open(w.path, ledger.Options{Actor: "check@sim"})
	if err != nil {
		return true
	}
	defer l.Close()
	for _, st := range []dedup.State{dedup.StateSent, dedup.StateReceived, dedup.StateUnknown} {
		if rows, err := l.SelectState(context.Background(), st, 0, 1); err != nil || len(rows) > 0 {
			return true
		}
	}
	return false
}

// shutdown stops every process of the world, so that the bubble ends.
func (w *world) shutdown() {
	close(w.ended)
	for i := range w.sched.Relays {
		w.crash(w.relay(i))
	}
	w.coreHS.Close()
	w.coreLn.Close()
	w.coreLn.Cut()
	w.mu.Lock()
	clients := w.clients
	w.mu.Unlock()
	for _, c := range clients {
		c.CloseIdle()
	}
}

// check states the invariants once the world is quiet, and returns each
// violation with the GUID's story.
func (w *world) check() []string {
	var out []string
	stats := w.core.Stats()
	refs := map[string][]string{} // applications per GUID, from the journal
	for _, date := range w.dates() {
		for _, line := range w.core.Journal(date) {
			refs[line.GUID] = append(refs[line.GUID], line.Ref)
		}
	}
	l, err := sqlite.Open(w.path, ledger.Options{Actor: "check@sim"})
	if err != nil {
		return []string{"the ledger cannot be opened after the run: " + err.Error()}
	}
	defer l.Close()
	ctx := context.Background()
	guids := make([]string, 0, len(w.stories))
	for g := range w.stories {
		if len(g) == 32 {
			guids = append(guids, g)
		}
	}
	sort.Strings(guids)
	for _, g := range guids {
		s := w.stories[g]
		applied := refs[g]
		var why []string
		if len(applied) > 1 {
			why = append(why, fmt.Sprintf("applied %d times by the core", len(applied)))
		}
		if stats.ByGUID[g] > len(applied) && len(applied) > 0 && stats.ByGUID[g] > maxAttempts+1 {
			why = append(why, fmt.Sprintf("POSTed %d times", stats.ByGUID[g]))
		}
		if s.final != nil {
			code := lhstd.ReplyCode(s.final)
			switch {
			case code == dedup.CodeOK && len(applied) == 0:
				why = append(why, "the channel was told 0000 and nothing was applied")
			case code == dedup.CodeOK && !replyHasRef(s.final, applied[0]):
				why = append(why, "the channel's 0000 carries another ref than the core's")
			case code != dedup.CodeOK && code != "E904" && len(applied) > 0:
				why = append(why, "the channel was told "+code+" and the core applied it")
			}
		}
		row, err := l.Get(ctx, g)
		switch {
		case err != nil:
			why = append(why, "row: "+err.Error())
		case row == nil:
		case row.State == dedup.StateDone && row.RspCode == dedup.CodeOK && (len(applied) == 0 || !replyHasRef(row.Response, applied[0])):
			why = append(why, "DONE/0000 and the core disagrees")
		case row.State == dedup.StateDone && row.RspCode != dedup.CodeOK && len(applied) > 0:
			why = append(why, "DONE/"+row.RspCode+" and the core applied it")
		case row.State == dedup.StateFailed && len(applied) > 0:
			why = append(why, "FAILED and the core applied it")
		}
		if row != nil {
			if evs, err := l.Events(ctx, g); err == nil {
				reclaims := 0
				for _, e := range evs {
					if e.Action == "reclaim" {
						reclaims++
					}
				}
				if reclaims != row.Attempts-1 {
					why = append(why, fmt.Sprintf("attempts=%d with %d reclaim events: a change without its event", row.Attempts, reclaims))
				}
			}
		}
		if len(why) > 0 {
			out = append(out, w.report(ctx, l, g, why, applied, row))
		}
	}
	for _, date := range w.dates() {
		sum, err := reconcile.Run(ctx, l, reconcile.Config{Date: date, DryRun: true, Out: io.Discard, Log: w.log,
			Source: reconcile.CoreSource{Client: w.coreClient(), URL: "http://core:80", Date: date}})
		if err != nil {
			out = append(out, fmt.Sprintf("reconcile %s: %v", date, err))
		} else if sum.NeedsPerson() {
			out = append(out, fmt.Sprintf("reconcile %s found a critical finding: %s", date, sum))
		}
	}
	return out
}

// dates are the business dates the run spanned (virtual time starts at
// midnight, 2000-01-01 UTC).
func (w *world) dates() []string {
	if today := time.Now().Format("20060102"); today != "20000101" {
		return []string{"20000101", today}
	}
	return []string{"20000101"}
}

// replyHasRef reports whether a stored or received 0000 reply carries ref.
func replyHasRef(reply []byte, ref string) bool {
	if len(reply) != lhstd.HeaderLen+lhstd.TransferResponseBodyLen {
		return false
	}
	r, err := lhstd.ParseTransferResponseBody(reply[lhstd.HeaderLen:])
	return err == nil && r.Ref == ref
}

// report is one violation: the invariants broken and the GUID's story.
func (w *world) report(ctx context.Context, l ledger.Ledger, g string, why, applied []string, row *ledger.Row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s: %s\n", w.sched.Seed, g, strings.Join(why, "; "))
	fmt.Fprintf(&b, "  core: applications %v\n", applied)
	for _, line := range w.stories[g].lines {
		fmt.Fprintf(&b, "  %s\n", line)
	}
	if row != nil {
		fmt.Fprintf(&b, "  row: %s/%s attempts=%d updated_at=%s\n", row.State, row.RspCode, row.Attempts, row.UpdatedAt)
	}
	evs, _ := l.Events(ctx, g)
	for _, e := range evs {
		fmt.Fprintf(&b, "  event: %s %s %s %s->%s %s\n", e.At, e.Actor, e.Action, e.FromState, e.ToState, e.RspCode)
	}
	return b.String()
}

// TempDir is where a schedule's ledger goes: memory when the host has it
// (the simulation measures the code, not the disk).
func TempDir() (string, error) {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		return os.MkdirTemp("/dev/shm", "dedup-sim-")
	}
	return os.MkdirTemp("", "dedup-sim-")
}
