package postgres

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"dedup"
	"dedup/internal/testbed/pgtest"
	"dedup/ledger"
)

// BenchmarkClaimFinish measures PostgreSQL's hot path (one claim and one
// outcome per transaction) with concurrent callers, two ways:
//
//   - plain (MaxBatch 1): one autocommit statement per write on pooled
//     connections; PostgreSQL groups the WAL flushes of concurrent commits
//     itself.
//   - batched (the default): the group-commit writer, sending the waiting
//     writes of many callers as one pgx batch (pipelined, one round trip) in
//     one transaction, one commit; a lone write as one statement.
//
// It reports transactions per second; docs/benchmarks.md quotes the comparison
// behind the backend's choice.
//
//	go test -run '^$' -bench ClaimFinish ./ledger/postgres/
func BenchmarkClaimFinish(b *testing.B) {
	for _, mode := range []string{"plain", "batched"} {
		for _, callers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/callers=%d", mode, callers), func(b *testing.B) {
				db := pgtest.SharedDatabase(b)
				batch := 1 // plain: every write its own statement
				if mode == "batched" {
					batch = 0 // the default group commit
				}
				l, err := Open(db, ledger.Options{Conns: 32, MaxBatch: batch})
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				benchClaimFinish(b, l, callers)
			})
		}
	}
}

var benchSeq atomic.Int64

func benchClaimFinish(b *testing.B, w ledger.Ledger, callers int) {
	req, resp := make([]byte, 127), make([]byte, 109)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				g := fmt.Sprintf("B%031d", benchSeq.Add(1))
				if ok, err := w.Claim(ctx, g, "TRF00001", req); err != nil || !ok {
					b.Errorf("claim %s: %v %v", g, ok, err)
					return
				}
				if ok, err := w.Finish(ctx, g, 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: resp}); err != nil || !ok {
					b.Errorf("finish %s: %v %v", g, ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tx/s")
}
