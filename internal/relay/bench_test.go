package relay

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"dedup"
	"dedup/internal/channel"
	"dedup/internal/coreapi"
	"dedup/internal/fixturecore"
	"dedup/internal/metrics"
	"dedup/internal/testbed/otlptest"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/ledger/sqlite"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// memStore is an in-memory Store with the ledger's semantics, used only by
// the benchmark as the ceiling that no durable ledger can beat.
type memStore struct {
	mu   sync.Mutex
	rows map[string]*ledger.Row
	// group, if set, makes every write wait for an fsync that started
	// after it: the "memory+fsync" store is the ideal durable ledger (no
	// SQL, writes sharing in-place fsyncs as a perfect group commit would),
	// the floor of a durable relay on this disk.
	group *groupSync
}

func newMemStore() *memStore { return &memStore{rows: map[string]*ledger.Row{}} }

// durable waits, after mu is released, until the write is on disk. A write
// that changed nothing (a lost claim, a fenced outcome) waits too: the row
// it was decided against may not be on disk yet, as in the real ledger,
// where it shares a commit with the writes around it.
func (m *memStore) durable() error {
	if m.group == nil {
		return nil
	}
	return m.group.wait()
}

// groupSync shares fsyncs between concurrent writers: a writer waits for a
// sync that starts after its write, and starts one itself if none is
// running.
type groupSync struct {
	mu      sync.Mutex
	cond    *sync.Cond
	started uint64 // syncs started
	done    uint64 // the last sync that completed
	syncing bool
	sync    func() error
}

func newGroupSync(fsync func() error) *groupSync {
	g := &groupSync{sync: fsync}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *groupSync) wait() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	need := g.started + 1 // a sync running now may have started before the write
	var err error
	for g.done < need {
		if g.syncing {
			g.cond.Wait()
			continue
		}
		g.syncing = true
		g.started++
		n := g.started
		g.mu.Unlock()
		err = g.sync()
		g.mu.Lock()
		g.syncing, g.done = false, n
		g.cond.Broadcast()
	}
	return err
}

// inPlaceFsync returns a function that overwrites 16 KiB of a file in dir in
// place and fsyncs it, as BenchmarkFsyncInPlace measures.
func inPlaceFsync(b *testing.B, dir string) func() error {
	f, err := os.Create(filepath.Join(dir, "fsync.bin"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	block := make([]byte, 16<<10)
	if _, err := f.WriteAt(block, 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return func() error {
		block[0]++
		if _, err := f.WriteAt(block, 0); err != nil {
			return err
		}
		return f.Sync()
	}
}

func (m *memStore) Get(_ context.Context, guid string) (*ledger.Row, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rows[guid]
	if !ok {
		return nil, nil
	}
	cp := *r
	return &cp, nil
}

func (m *memStore) Claim(_ context.Context, guid, txCode string, req []byte) (bool, error) {
	m.mu.Lock()
	if _, ok := m.rows[guid]; ok {
		m.mu.Unlock()
		return false, m.durable()
	}
	m.rows[guid] = &ledger.Row{GUID: guid, TxCode: txCode, State: dedup.StateSent, Request: req, Attempts: 1}
	m.mu.Unlock()
	return true, m.durable()
}

func (m *memStore) Reclaim(_ context.Context, guid string, req []byte, max int) (int, []byte, bool, error) {
	m.mu.Lock()
	r, ok := m.rows[guid]
	if !ok || r.State != dedup.StateFailed || r.RspCode != dedup.CodeNotSent || (max > 0 && r.Attempts >= max) {
		m.mu.Unlock()
		return 0, nil, false, m.durable()
	}
	r.State, r.RspCode = dedup.StateSent, ""
	r.Attempts++
	if r.Request == nil {
		r.Request = req
	}
	n, stored := r.Attempts, r.Request
	m.mu.Unlock()
	return n, stored, true, m.durable()
}

func (m *memStore) ConfirmClaim(_ context.Context, guid string, attempt int) (ledger.ClaimCheck, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rows[guid]
	return ledger.ClaimCheck{Held: ok && r.State == dedup.StateSent && r.Attempts == attempt, Now: time.Now()}, nil
}

func (m *memStore) Now(context.Context) (time.Time, error) { return time.Now(), nil }

func (m *memStore) Finish(_ context.Context, guid string, attempt int, o ledger.Outcome) (bool, error) {
	m.mu.Lock()
	r, ok := m.rows[guid]
	if !ok || r.State != dedup.StateSent || r.Attempts != attempt {
		m.mu.Unlock()
		return false, m.durable()
	}
	r.State, r.RspCode, r.Response = o.State, o.RspCode, o.Response
	m.mu.Unlock()
	return true, m.durable()
}

func (m *memStore) SweepOrphans(context.Context, time.Duration) (int64, error) { return 0, nil }

// BenchmarkRelay drives the relay server end to end (channel connections →
// relay → fixture core over loopback) with 10 % retransmissions, once with
// the in-memory store (the ceiling) and once with the SQLite ledger at
// synchronous FULL and NORMAL, and FULL again with the Prometheus metrics
// on (full+metrics), and memory+fsync: the in-memory store whose writes
// share in-place fsyncs (a perfect group commit with no SQL), the floor of
// any durable ledger on this disk. b.N is the number of telegrams.
// cpu-us/tx is this process's CPU (getrusage: relay, load generator and
// core together) per telegram.
//
//	go test -run '^$' -bench Relay -benchtime 20000x ./internal/relay/
func BenchmarkRelay(b *testing.B) {
	for _, conns := range []int{1, 16, 64} {
		for _, store := range []string{"memory", "memory+fsync", "full", "normal", "full+metrics", "memory+tracing", "memory+tracing-10%"} {
			b.Run(fmt.Sprintf("conns=%d/store=%s", conns, store), func(b *testing.B) {
				benchRelay(b, store, conns)
			})
		}
	}
}

func benchRelay(b *testing.B, store string, conns int) {
	core, err := fixturecore.New(fixturecore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	cs, err := fixturecore.Listen(core, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	client, err := coreapi.New(coreapi.Config{BaseURL: cs.URL, ConnectTimeout: time.Second, Timeout: 3 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer client.CloseIdle()
	var st Store
	var m *metrics.Relay
	if store == "full+metrics" {
		store, m = "full", metrics.New()
	}
	// memory+tracing: every transfer traced and exported over OTLP/HTTP
	// to a live endpoint on loopback that discards what it reads (the
	// SDK's whole cost: spans, batching, protobuf, HTTP); -10%: sampled.
	var tracer *tracing.Tracer
	if strings.HasPrefix(store, "memory+tracing") {
		col, err := otlptest.StartWith("127.0.0.1:0", otlptest.Options{Discard: true})
		if err != nil {
			b.Fatal(err)
		}
		defer col.Close()
		sampler := sdktrace.AlwaysSample()
		if strings.HasSuffix(store, "-10%") {
			sampler = sdktrace.TraceIDRatioBased(0.1)
		}
		exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(col.URL()+"/v1/traces"))
		if err != nil {
			b.Fatal(err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sampler)),
			sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(tracing.QueueSize), sdktrace.WithBatchTimeout(time.Second)))
		defer tp.Shutdown(context.Background())
		tracer = tracing.New(tp)
		store = "memory"
	}
	switch store {
	case "memory":
		st = newMemStore()
	case "memory+fsync":
		m := newMemStore()
		m.group = newGroupSync(inPlaceFsync(b, b.TempDir()))
		st = m
	default:
		opts := ledger.Options{Synchronous: store}
		if m != nil {
			opts.OnCommit = m.Commit
		}
		l, err := sqlite.Open(filepath.Join(b.TempDir(), "bench.db"), opts)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		st = l
	}
	srv := New(Config{Store: st, Core: client, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m, Tracer: tracer})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())

	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	rep, err := channel.Load(context.Background(), channel.LoadConfig{
		Relay: ln.Addr().String(), Conns: conns, Count: b.N, DupRatio: 0.1,
		From: "11020030004001", To: "11020030004002", Amount: 1, Channel: "BEN",
	})
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	if err != nil {
		b.Fatal(err)
	}
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/tx")
	if rep.Errors > 0 {
		b.Fatalf("%d connection errors", rep.Errors)
	}
	cc := core.Stats()
	twice := 0
	for _, g := range rep.GUIDs {
		if cc.AppliedByGUID[g] > 1 {
			twice++
			b.Errorf("GUID %s applied %d times", g, cc.AppliedByGUID[g])
		}
	}
	b.ReportMetric(float64(twice), "applied-twice")
	b.ReportMetric(rep.TPS(), "tx/s")
	b.ReportMetric(float64(rep.P50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(rep.P99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}
