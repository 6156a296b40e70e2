package sim

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"dedup/ledger/sqlite"
)

var (
	minutes = flag.Float64("sim.minutes", 0, "run seeds for this many minutes of real time (0: the quick budget of go test)")
	seed    = flag.Uint64("sim.seed", 0, "replay this one seed")
	first   = flag.Uint64("sim.first", 1, "the first seed of a run")
)

// quickSeeds is what a plain go test runs: a few schedules, so that the
// simulation itself is tested on every change; scripts/sim.sh runs more.
const quickSeeds = 8

// schedule is the workload and faults seed s draws.
func schedule(s uint64) Schedule {
	return Schedule{Seed: s, Relays: 1 + int(s%2), Channels: 4, Transfers: 25, Faults: 10}
}

// TestSimulation runs schedules under virtual time, one bubble per seed,
// as many at once as there are cores, and stops at the first violated
// invariant, printing its seed and the GUID's story. Its last line is the
// report scripts/sim.sh prints.
func TestSimulation(t *testing.T) {
	if err := sqlite.FollowGoClock(true); err != nil {
		t.Fatal(err)
	}
	defer sqlite.FollowGoClock(false)
	start := time.Now()
	var seeds, transfers, faults, violations atomic.Int64
	var failed atomic.Bool
	run := func(t *testing.T, s uint64) {
		dir, err := TempDir()
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		var res Result
		synctest.Test(t, func(t *testing.T) { res = Run(schedule(s), dir) })
		seeds.Add(1)
		transfers.Add(int64(res.Transfers))
		faults.Add(int64(res.Faults))
		if *seed != 0 {
			t.Logf("seed %d: %d transfers, %d POSTs, replies %v, %d faults, jobs %v, quiet at %s", s, res.Transfers, res.Applied, res.Replies, res.Faults, res.Jobs, res.End)
		}
		for _, v := range res.Violations {
			violations.Add(1)
			failed.Store(true)
			t.Errorf("violation (replay: scripts/sim.sh --seed %d):\n%s", s, v)
		}
	}
	// next hands out the seeds to run; false when the run is over.
	var mu sync.Mutex
	nextSeed := *first
	next := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if failed.Load() {
			return 0, false
		}
		switch {
		case *seed != 0:
			if nextSeed != *first {
				return 0, false
			}
			nextSeed++
			return *seed, true
		case *minutes > 0:
			if time.Since(start) > time.Duration(*minutes*float64(time.Minute)) {
				return 0, false
			}
		case nextSeed >= *first+quickSeeds:
			return 0, false
		}
		nextSeed++
		return nextSeed - 1, true
	}
	t.Run("seeds", func(t *testing.T) {
		for w := range runtime.GOMAXPROCS(0) {
			t.Run(fmt.Sprint("worker", w), func(t *testing.T) {
				t.Parallel()
				for s, ok := next(); ok; s, ok = next() {
					run(t, s)
				}
			})
		}
	})
	took := time.Since(start).Seconds()
	fmt.Printf("sim: seeds=%d transfers=%d faults=%d violations=%d seconds=%.0f\n",
		seeds.Load(), transfers.Load(), faults.Load(), violations.Load(), took)
}
