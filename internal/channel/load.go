package channel

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"dedup/lhstd"
)

// LoadConfig configures Load.
type LoadConfig struct {
	Relay    string        // HOST:PORT
	Conns    int           // concurrent connections
	Duration time.Duration // run this long (ignored with Count), or
	Count    int           // send this many telegrams (if > 0)
	DupRatio float64       // fraction of sends that retransmit a recent GUID of another connection
	// Rate, if above 0, sends that many telegrams a second whatever the
	// answers do (open loop: OpenLoop); 0: each connection sends its next
	// once answered (closed loop), as fast as the relay answers.
	Rate     float64
	Timeout  time.Duration // per reply
	Channel  string
	From, To string
	Amount   int64
	Memo     string
	Progress io.Writer // if set, a progress line every second
	// TLS, if set, makes every connection speak TLS to the relay.
	TLS *tls.Config
	// Dial, if set, opens the plain connections (from another network
	// namespace, for example); TLS must then be nil.
	Dial func(addr string, timeout time.Duration) (net.Conn, error)
}

// LoadReport is the result of Load.
type LoadReport struct {
	Conns    int
	Sent     int // telegrams sent and answered
	New      int // of which first sends of a fresh GUID
	Dups     int // of which retransmissions
	Errors   int // connection errors (reconnected)
	Elapsed  time.Duration
	ByCode   map[string]int
	P50, P90 time.Duration
	P99, Max time.Duration
	GUIDs    []string // the fresh GUIDs this run sent
	// OpenLoop is an open-loop run's (Rate > 0) latencies from when each
	// telegram was due; nil for a closed-loop run.
	OpenLoop *OpenLoop
}

// TPS is answered telegrams per second.
func (r *LoadReport) TPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Sent) / r.Elapsed.Seconds()
}

// String formats the report for people.
func (r *LoadReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "load: conns=%d sent=%d new=%d retransmissions=%d errors=%d seconds=%.2f tps=%.0f\n",
		r.Conns, r.Sent, r.New, r.Dups, r.Errors, r.Elapsed.Seconds(), r.TPS())
	fmt.Fprintf(&b, "latency_ms: p50=%.3f p90=%.3f p99=%.3f max=%.3f\n", msf(r.P50), msf(r.P90), msf(r.P99), msf(r.Max))
	codes := make([]string, 0, len(r.ByCode))
	for c := range r.ByCode {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	b.WriteString("replies:")
	for _, c := range codes {
		fmt.Fprintf(&b, " %s=%d", c, r.ByCode[c])
	}
	b.WriteString("\n")
	if r.OpenLoop != nil {
		b.WriteString(r.OpenLoop.String())
	}
	return b.String()
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// recent keeps the last telegrams sent, for retransmissions on other
// connections.
type recent struct {
	mu    sync.Mutex
	items [1024]struct {
		conn int
		t    []byte
	}
	n int
}

func (r *recent) add(conn int, t []byte) {
	r.mu.Lock()
	r.items[r.n%len(r.items)] = struct {
		conn int
		t    []byte
	}{conn, t}
	r.n++
	r.mu.Unlock()
}

func (r *recent) pick(conn int, rng *rand.Rand) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	size := min(r.n, len(r.items))
	for try := 0; try < 4 && size > 0; try++ {
		// Prefer the newest: real retransmissions follow closely.
		back := rng.IntN(min(size, 64))
		it := r.items[(r.n-1-back)%len(r.items)]
		if it.conn != conn {
			return it.t
		}
	}
	return nil
}

// Load drives the relay with cfg.Conns connections until the duration or
// count is reached, then reports.
func Load(ctx context.Context, cfg LoadConfig) (*LoadReport, error) {
	cfg = cfg.withDefaults()
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	ld := &loader{cfg: cfg, report: &LoadReport{Conns: cfg.Conns, ByCode: map[string]int{}}, start: time.Now()}
	ld.budget.Store(int64(cfg.Count))
	stopProgress := make(chan struct{})
	if cfg.Progress != nil {
		go ld.progress(stopProgress)
	}
	if cfg.Rate > 0 {
		ld.openLoop(ctx)
	} else {
		var wg sync.WaitGroup
		for id := 0; id < cfg.Conns; id++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ld.connection(ctx, id)
			}()
		}
		wg.Wait()
	}
	close(stopProgress)
	return ld.finish(), ld.firstErr
}

func (cfg LoadConfig) withDefaults() LoadConfig {
	if cfg.Conns < 1 {
		cfg.Conns = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Count > 0 {
		// A count is sent in full, however long it takes (the flag's
		// promise): a slow relay must not turn "send 3,000" into "send
		// what fits in the default 10 s".
		cfg.Duration = 0
	} else if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Channel == "" {
		cfg.Channel = "LOD"
	}
	return cfg
}

// loader is one Load run: what the connections share.
type loader struct {
	cfg      LoadConfig
	rec      recent
	budget   atomic.Int64 // telegrams left to send, with Count
	answered atomic.Int64
	start    time.Time

	mu       sync.Mutex
	report   *LoadReport
	lats     []time.Duration
	firstErr error
}

// progress prints a line every second until stop.
func (ld *loader) progress(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			fmt.Fprint(ld.cfg.Progress, "\r\033[K")
			return
		case <-t.C:
			n := ld.answered.Load()
			el := time.Since(ld.start).Seconds()
			fmt.Fprintf(ld.cfg.Progress, "\r\033[K%6.1fs  %d answered  %.0f/s", el, n, float64(n)/el)
		}
	}
}

func (ld *loader) fail(err error) {
	ld.mu.Lock()
	if ld.firstErr == nil {
		ld.firstErr = err
	}
	ld.mu.Unlock()
}

// connStats is what one connection counted, merged into the report at
// its end.
type connStats struct {
	lats             []time.Duration
	codes            map[string]int
	guids            []string
	nNew, nDup, nErr int
}

// connection is one channel connection's closed loop: it sends its next
// telegram once the last is answered: fresh GUIDs, and retransmissions of
// other connections' recent GUIDs at DupRatio.
func (ld *loader) connection(ctx context.Context, id int) {
	cfg := ld.cfg
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(id)))
	st := connStats{codes: map[string]int{}}
	var conn *Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
		ld.merge(st)
	}()
	for ctx.Err() == nil {
		if cfg.Count > 0 && ld.budget.Add(-1) < 0 {
			return
		}
		t, dup, err := ld.next(id, rng, len(st.guids))
		if err != nil {
			ld.fail(err)
			return
		}
		if !dup {
			h, _ := lhstd.ParseHeader(t)
			st.guids = append(st.guids, h.GUID)
		}
		if conn == nil {
			c, err := cfg.dial()
			if err != nil {
				st.nErr++
				if st.nErr > 100 {
					ld.fail(fmt.Errorf("connection %d: %w", id, err))
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			conn = c
		}
		sent := time.Now()
		reply, err := conn.RoundTrip(t)
		if err != nil {
			st.nErr++
			conn.Close()
			conn = nil
			continue
		}
		st.lats = append(st.lats, time.Since(sent))
		ld.answered.Add(1)
		st.codes[lhstd.ReplyCode(reply)]++
		if dup {
			st.nDup++
		} else {
			st.nNew++
			ld.rec.add(id, t)
		}
	}
}

// next is the next telegram to send: a retransmission of a recent GUID of
// another connection (dup), or a fresh transfer, the direction alternating
// so that the two accounts' balances swing around their opening amounts
// and never run dry, however long the load runs.
func (ld *loader) next(id int, rng *rand.Rand, sentFresh int) (t []byte, dup bool, err error) {
	cfg := ld.cfg
	if cfg.DupRatio > 0 && rng.Float64() < cfg.DupRatio {
		if t = ld.rec.pick(id, rng); t != nil {
			return t, true, nil
		}
	}
	from, to := cfg.From, cfg.To
	if sentFresh%2 == 1 {
		from, to = to, from
	}
	t, err = lhstd.NewTransferRequest(NewGUID(cfg.Channel), cfg.Channel, Now(), lhstd.Transfer{From: from, To: to, Amount: cfg.Amount, Memo: cfg.Memo})
	return t, false, err
}

func (ld *loader) merge(st connStats) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	ld.lats = append(ld.lats, st.lats...)
	for c, n := range st.codes {
		ld.report.ByCode[c] += n
	}
	ld.report.GUIDs = append(ld.report.GUIDs, st.guids...)
	ld.report.New += st.nNew
	ld.report.Dups += st.nDup
	ld.report.Errors += st.nErr
}

// finish computes the report's totals and percentiles.
func (ld *loader) finish() *LoadReport {
	r, lats := ld.report, ld.lats
	r.Elapsed = time.Since(ld.start)
	r.Sent = len(lats)
	if len(lats) > 0 {
		slices.Sort(lats)
		pct := func(p float64) time.Duration { return lats[min(len(lats)-1, int(p*float64(len(lats))))] }
		r.P50, r.P90, r.P99, r.Max = pct(0.50), pct(0.90), pct(0.99), lats[len(lats)-1]
	}
	return r
}

// dial opens one connection to the relay as cfg says.
func (cfg *LoadConfig) dial() (*Conn, error) {
	if cfg.Dial == nil {
		return DialTLS(cfg.Relay, cfg.Timeout, cfg.TLS)
	}
	c, err := cfg.Dial(cfg.Relay, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	return NewConn(c, cfg.Timeout), nil
}
