package sqlite

import (
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkFsyncInPlace measures this disk's floor for one durable commit:
// overwrite a 16 KiB block of an existing file in place, then fsync. It
// reports the p50 of the fsyncs (scripts/bench.sh prints it beside the
// tables). Run it with the working directory on the disk to measure:
//
//	go test -run '^$' -bench FsyncInPlace -benchtime 500x ./ledger/sqlite/
func BenchmarkFsyncInPlace(b *testing.B) {
	dir := os.Getenv("DEDUP_FSYNC_DIR") // the disk to measure; default a temporary directory
	if dir == "" {
		dir = b.TempDir()
	}
	f, err := os.CreateTemp(dir, "fsync-*.bin")
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(filepath.Clean(f.Name()))
	defer f.Close()
	block := make([]byte, 16<<10)
	if _, err := f.WriteAt(block, 0); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		block[0] = byte(i)
		if _, err := f.WriteAt(block, 0); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "fsync-p50-ms")
}
