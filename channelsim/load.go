package channelsim

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
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
	Duration time.Duration // run this long, or
	Count    int           // send this many telegrams (if > 0)
	DupRatio float64       // fraction of sends that retransmit a recent GUID of another connection
	Timeout  time.Duration // per reply
	Channel  string
	From, To string
	Amount   int64
	Memo     string
	Progress io.Writer // if set, a progress line every second
	// TLS, if set, makes every connection speak TLS to the relay.
	TLS *tls.Config
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
	if cfg.Conns < 1 {
		cfg.Conns = 1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Count <= 0 && cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Channel == "" {
		cfg.Channel = "LOD"
	}
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	var (
		rec      recent
		budget   atomic.Int64
		answered atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		report   = &LoadReport{Conns: cfg.Conns, ByCode: map[string]int{}}
		lats     []time.Duration
		firstErr error
	)
	budget.Store(int64(cfg.Count))
	start := time.Now()
	stopProgress := make(chan struct{})
	if cfg.Progress != nil {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-stopProgress:
					fmt.Fprint(cfg.Progress, "\r\033[K")
					return
				case <-t.C:
					n := answered.Load()
					fmt.Fprintf(cfg.Progress, "\r\033[K%6.1fs  %d answered  %.0f/s", time.Since(start).Seconds(), n, float64(n)/time.Since(start).Seconds())
				}
			}
		}()
	}
	for id := 0; id < cfg.Conns; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(id)))
			var (
				myLats []time.Duration
				codes  = map[string]int{}
				guids  []string
				nNew   int
				nDup   int
				nErr   int
				conn   *Conn
			)
			defer func() {
				if conn != nil {
					conn.Close()
				}
				mu.Lock()
				lats = append(lats, myLats...)
				for c, n := range codes {
					report.ByCode[c] += n
				}
				report.GUIDs = append(report.GUIDs, guids...)
				report.New += nNew
				report.Dups += nDup
				report.Errors += nErr
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				if cfg.Count > 0 && budget.Add(-1) < 0 {
					return
				}
				var t []byte
				dup := false
				if cfg.DupRatio > 0 && rng.Float64() < cfg.DupRatio {
					t = rec.pick(id, rng)
					dup = t != nil
				}
				if t == nil {
					g := NewGUID(cfg.Channel)
					var err error
					// Alternate the direction, so that the two accounts'
					// balances swing around their opening amounts and never
					// run dry, however long the load runs.
					from, to := cfg.From, cfg.To
					if len(guids)%2 == 1 {
						from, to = to, from
					}
					t, err = lhstd.NewTransferRequest(g, cfg.Channel, Now(), lhstd.Transfer{From: from, To: to, Amount: cfg.Amount, Memo: cfg.Memo})
					if err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
					guids = append(guids, g)
				}
				if conn == nil {
					c, err := DialTLS(cfg.Relay, cfg.Timeout, cfg.TLS)
					if err != nil {
						nErr++
						if nErr > 100 {
							mu.Lock()
							if firstErr == nil {
								firstErr = fmt.Errorf("connection %d: %w", id, err)
							}
							mu.Unlock()
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
					nErr++
					conn.Close()
					conn = nil
					continue
				}
				myLats = append(myLats, time.Since(sent))
				answered.Add(1)
				codes[lhstd.ReplyCode(reply)]++
				if dup {
					nDup++
				} else {
					nNew++
					rec.add(id, t)
				}
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	report.Elapsed = time.Since(start)
	report.Sent = len(lats)
	if len(lats) > 0 {
		slices.Sort(lats)
		pct := func(p float64) time.Duration { return lats[min(len(lats)-1, int(p*float64(len(lats))))] }
		report.P50, report.P90, report.P99, report.Max = pct(0.50), pct(0.90), pct(0.99), lats[len(lats)-1]
	}
	return report, firstErr
}
