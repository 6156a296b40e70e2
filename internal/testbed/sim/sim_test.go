package sim

import (
	"flag"
	"fmt"
	"os"
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
const quickSeeds = 6

// schedule is the workload and faults seed s draws.
func schedule(s uint64) Schedule {
	return Schedule{Seed: s, Relays: 1 + int(s%2), Channels: 4, Transfers: 25, Faults: 10}
}

// TestSimulation runs schedules under virtual time and fails on the first
// violated invariant, printing the seed and the GUID's story. Its last
// line is the report scripts/sim.sh prints.
func TestSimulation(t *testing.T) {
	if err := sqlite.FollowGoClock(true); err != nil {
		t.Fatal(err)
	}
	defer sqlite.FollowGoClock(false)
	start := time.Now()
	var seeds, transfers, faults, violations int
	run := func(s uint64) bool {
		dir, err := TempDir()
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		var res Result
		synctest.Test(t, func(t *testing.T) { res = Run(schedule(s), dir) })
		seeds++
		if *seed != 0 {
			t.Logf("seed %d: %d transfers, %d POSTs, replies %v, %d faults, virtual end %s", s, res.Transfers, res.Applied, res.Replies, res.Faults, res.End)
		}
		transfers += res.Transfers
		faults += res.Faults
		for _, v := range res.Violations {
			violations++
			t.Errorf("violation (replay: scripts/sim.sh --seed %d):\n%s", s, v)
		}
		return len(res.Violations) == 0
	}
	switch {
	case *seed != 0:
		run(*seed)
	case *minutes > 0:
		deadline := start.Add(time.Duration(*minutes * float64(time.Minute)))
		for s := *first; time.Now().Before(deadline); s++ {
			if !run(s) {
				break
			}
		}
	default:
		for s := *first; s < *first+quickSeeds; s++ {
			if !run(s) {
				break
			}
		}
	}
	took := time.Since(start).Seconds()
	fmt.Printf("sim: seeds=%d transfers=%d faults=%d violations=%d seconds=%.0f\n", seeds, transfers, faults, violations, took)
}
