package sqlite

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"dedup"
	"dedup/ledger"
)

// BenchmarkClaimFinish measures the ledger's hot path (one claim and one
// outcome per transaction) with concurrent callers, FULL and NORMAL,
// batched (group commit) and unbatched (one commit per write). It reports
// transactions per second; ns/op is per transaction.
//
//	go test -run '^$' -bench ClaimFinish ./ledger/
func BenchmarkClaimFinish(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		for _, batch := range []int{DefaultMaxBatch, 1} {
			for _, callers := range []int{1, 16, 64, 256} {
				mode := "batched"
				if batch == 1 {
					mode = "unbatched"
				}
				b.Run(fmt.Sprintf("%s/%s/callers=%d", sync, mode, callers), func(b *testing.B) {
					benchClaimFinish(b, ledger.Options{Synchronous: sync, MaxBatch: batch}, callers)
				})
			}
		}
	}
}

var benchSeq atomic.Int64

func benchClaimFinish(b *testing.B, opts ledger.Options, callers int) {
	l, err := Open(filepath.Join(b.TempDir(), "bench.db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	req := make([]byte, 127)
	resp := make([]byte, 109)
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
				ok, err := l.Claim(ctx, g, "TRF00001", req)
				if err != nil || !ok {
					b.Errorf("claim %s: %v %v", g, ok, err)
					return
				}
				if ok, err := l.Finish(ctx, g, 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: resp}); err != nil || !ok {
					b.Errorf("finish %s: %v %v", g, ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tx/s")
}
