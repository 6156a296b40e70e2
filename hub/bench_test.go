package hub

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"dedup"
	"dedup/channelsim"
	"dedup/coreapi"
	"dedup/fakecore"
	"dedup/ledger"
	"dedup/ledger/sqlite"
	"dedup/metrics"
)

// memStore is an in-memory Store with the ledger's semantics, used only by
// the benchmark as the ceiling that no durable ledger can beat.
type memStore struct {
	mu   sync.Mutex
	rows map[string]*ledger.Row
}

func newMemStore() *memStore { return &memStore{rows: map[string]*ledger.Row{}} }

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
	defer m.mu.Unlock()
	if _, ok := m.rows[guid]; ok {
		return false, nil
	}
	m.rows[guid] = &ledger.Row{GUID: guid, TxCode: txCode, State: dedup.StateSent, Request: req, Attempts: 1}
	return true, nil
}

func (m *memStore) Reclaim(_ context.Context, guid string, req []byte, max int) (int, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rows[guid]
	if !ok || r.State != dedup.StateFailed || r.RspCode != dedup.CodeNotSent || (max > 0 && r.Attempts >= max) {
		return 0, false, nil
	}
	r.State, r.RspCode = dedup.StateSent, ""
	r.Attempts++
	if r.Request == nil {
		r.Request = req
	}
	return r.Attempts, true, nil
}

func (m *memStore) Finish(_ context.Context, guid string, attempt int, o ledger.Outcome) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rows[guid]
	if !ok || r.State != dedup.StateSent || r.Attempts != attempt {
		return false, nil
	}
	r.State, r.RspCode, r.Response = o.State, o.RspCode, o.Response
	return true, nil
}

func (m *memStore) SweepOrphans(context.Context, time.Duration) (int64, error) { return 0, nil }

// BenchmarkRelay drives the relay server end to end (channel connections →
// relay → fixture core over loopback) with 10 % retransmissions, once with
// the in-memory store (the ceiling) and once with the SQLite ledger at
// synchronous FULL and NORMAL, and FULL again with the Prometheus metrics
// on (full+metrics). b.N is the number of telegrams. cpu-us/tx is this
// process's CPU (getrusage: relay, load generator and core together) per
// telegram.
//
//	go test -run '^$' -bench Relay -benchtime 20000x ./hub/
func BenchmarkRelay(b *testing.B) {
	for _, conns := range []int{1, 16, 64} {
		for _, store := range []string{"memory", "full", "normal", "full+metrics"} {
			b.Run(fmt.Sprintf("conns=%d/store=%s", conns, store), func(b *testing.B) {
				benchRelay(b, store, conns)
			})
		}
	}
}

func benchRelay(b *testing.B, store string, conns int) {
	core, err := fakecore.New(fakecore.Config{})
	if err != nil {
		b.Fatal(err)
	}
	cs, err := fakecore.Listen(core, "127.0.0.1:0")
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
	if store == "memory" {
		st = newMemStore()
	} else {
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
	srv := New(Config{Store: st, Core: client, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())

	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	rep, err := channelsim.Load(context.Background(), channelsim.LoadConfig{
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
	for _, g := range rep.GUIDs {
		if cc.AppliedByGUID[g] > 1 {
			b.Fatalf("GUID %s applied %d times", g, cc.AppliedByGUID[g])
		}
	}
	b.ReportMetric(rep.TPS(), "tx/s")
	b.ReportMetric(float64(rep.P50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(rep.P99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}
