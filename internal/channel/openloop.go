package channel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"dedup/lhstd"
)

// maxOpenConns bounds the connections an open-loop run opens when every
// one waits for an answer: below the relay's default --max-conns (1024),
// so that the load never makes the refusals it counts.
const maxOpenConns = 1000

// overSecond is a reply a channel would not have waited for: by then it
// retransmits, and the transfer is in doubt for its customer.
const overSecond = time.Second

// OpenLoop is an open-loop run's figures: every latency is counted from
// when its telegram was due, not from when a connection got round to
// sending it, so a stall shows as the whole wait it caused (HdrHistogram's
// and wrk2's "no coordinated omission").
type OpenLoop struct {
	Rate       float64
	Due        int // telegrams that fell due
	Answered   int
	Unanswered int // no reply within the timeout of being due (given up)
	Refused    int // connections the relay's address refused (nothing listening)
	MaxConns   int // connections open at once, at most
	Late       int // telegrams the load itself sent more than 10 ms after they were due
	P50, P99   time.Duration
	P999, Max  time.Duration
	Over1s     int // replies more than 1 s after their telegram was due
}

// String is the report's open-loop line.
func (o *OpenLoop) String() string {
	return fmt.Sprintf("open_loop: rate=%g due=%d answered=%d p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f over_1s=%d refused=%d unanswered=%d conns=%d late_sends=%d\n",
		o.Rate, o.Due, o.Answered, msf(o.P50), msf(o.P99), msf(o.P999), msf(o.Max), o.Over1s, o.Refused, o.Unanswered, o.MaxConns, o.Late)
}

// due is one telegram and when it should have been sent.
type due struct {
	t   []byte
	dup bool
	at  time.Time
}

// openLoop sends cfg.Rate telegrams a second whatever the answers do: the
// i-th falls due at start + i/Rate and goes to an idle connection, or to a
// new one when every connection waits for an answer (a bank's customers
// do not wait for each other), up to maxOpenConns. A telegram whose
// connection fails, or is refused, is sent again (the same GUID, as a
// channel retransmits) on a new connection until cfg.Timeout after it fell
// due.
func (ld *loader) openLoop(ctx context.Context) {
	cfg := ld.cfg
	every := time.Duration(float64(time.Second) / cfg.Rate)
	queue := make(chan due, 1<<16)
	var (
		wg          sync.WaitGroup
		idle, conns atomic.Int64
		maxConns    atomic.Int64
		mu          sync.Mutex
		ol          = &OpenLoop{Rate: cfg.Rate}
		lats        []time.Duration
	)
	spawn := func(id int) {
		n := conns.Add(1)
		for m := maxConns.Load(); n > m && !maxConns.CompareAndSwap(m, n); m = maxConns.Load() {
		}
		idle.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, refused, unanswered, got := ld.openConnection(id, queue, &idle)
			ld.merge(st)
			mu.Lock()
			defer mu.Unlock()
			ol.Refused += refused
			ol.Unanswered += unanswered
			lats = append(lats, got...)
		}()
	}
	for id := 0; id < cfg.Conns; id++ {
		spawn(id)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x6f70656e))
	start := time.Now()
	for i := 0; ; i++ {
		if cfg.Count > 0 && i >= cfg.Count {
			break
		}
		at := start.Add(time.Duration(i) * every)
		if wait := time.Until(at); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		if time.Since(at) > 10*time.Millisecond {
			ol.Late++
		}
		t, dup, err := ld.next(-1, rng, i)
		if err != nil {
			ld.fail(err)
			break
		}
		if idle.Load() <= 0 && conns.Load() < maxOpenConns {
			spawn(int(conns.Load()))
		}
		ol.Due++
		queue <- due{t: t, dup: dup, at: at}
	}
	close(queue)
	wg.Wait()
	ol.MaxConns = int(maxConns.Load())
	ol.Answered = len(lats)
	if len(lats) > 0 {
		slices.Sort(lats)
		pct := func(p float64) time.Duration { return lats[min(len(lats)-1, int(p*float64(len(lats))))] }
		ol.P50, ol.P99, ol.P999, ol.Max = pct(0.50), pct(0.99), pct(0.999), lats[len(lats)-1]
		for _, l := range lats {
			if l > overSecond {
				ol.Over1s++
			}
		}
	}
	ld.mu.Lock()
	ld.report.OpenLoop = ol
	ld.mu.Unlock()
}

// openConnection is one connection of an open-loop run: it takes the
// telegrams due from queue until it is closed, and returns what it counted
// and each latency from due to answer.
func (ld *loader) openConnection(id int, queue <-chan due, idle *atomic.Int64) (st connStats, refused, unanswered int, lats []time.Duration) {
	cfg := ld.cfg
	st.codes = map[string]int{}
	var conn *Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for d := range queue {
		idle.Add(-1)
		if !d.dup {
			h, _ := lhstd.ParseHeader(d.t)
			st.guids = append(st.guids, h.GUID)
		}
		for {
			if time.Since(d.at) > cfg.Timeout {
				unanswered++
				break
			}
			if conn == nil {
				c, err := cfg.dial()
				if err != nil {
					if errors.Is(err, syscall.ECONNREFUSED) {
						refused++
					} else {
						st.nErr++
					}
					time.Sleep(5 * time.Millisecond)
					continue
				}
				conn = c
			}
			reply, err := conn.RoundTrip(d.t)
			if err != nil {
				st.nErr++
				conn.Close()
				conn = nil
				continue
			}
			lat := time.Since(d.at)
			lats = append(lats, lat)
			st.lats = append(st.lats, lat)
			ld.answered.Add(1)
			st.codes[lhstd.ReplyCode(reply)]++
			if d.dup {
				st.nDup++
			} else {
				st.nNew++
				ld.rec.add(id, d.t)
			}
			break
		}
		idle.Add(1)
	}
	return st, refused, unanswered, lats
}
