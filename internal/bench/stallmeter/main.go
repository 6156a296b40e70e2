// Command stallmeter measures the machine's own stalls: it sleeps 1 ms at a
// time and records every wake-up that came late by more than --over. A
// process that does nothing but sleep cannot be late because of a ledger,
// a lock or a queue; if it is late by 100 ms at the moment a relay's replies
// all stall by 100 ms, the stall was the machine's (its scheduler, its
// hypervisor), not the relay's. scripts/bench.sh runs it beside every
// load point and prints the worst stall beside the slowest reply.
//
// It is a benchmark tool: the package never ships it (nothing under
// internal/ is packaged).
//
// It runs until --duration has passed or it is sent SIGINT or SIGTERM, then
// prints one line per stall ("stall at=... ms=...") and a last line
// "stalls: count=N max_ms=X over_ms=Y seconds=Z".
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"dedup/internal/cli"
)

type flags struct {
	Duration cli.Seconds `name:"duration" default:"0" help:"Seconds to run (0: until SIGINT or SIGTERM)."`
	Over     cli.Seconds `name:"over" default:"0.02" help:"Seconds late past which a wake-up counts as a stall."`
}

// stall is one wake-up that came late.
type stall struct {
	at   time.Time
	late time.Duration
}

// measure sleeps tick at a time until ctx ends and returns every gap
// between two wake-ups longer than tick by more than over. The gap runs
// from one wake-up to the next, so a freeze counts whether it caught the
// meter asleep or between two sleeps.
func measure(ctx context.Context, tick, over time.Duration) []stall {
	var stalls []stall
	t := time.NewTimer(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return stalls
		case <-t.C:
			now := time.Now()
			if late := now.Sub(last) - tick; late > over {
				stalls = append(stalls, stall{now, late})
			}
			last = now
			t.Reset(tick)
		}
	}
}

// report writes the stalls and the summary line.
func report(w io.Writer, stalls []stall, over, ran time.Duration) {
	var worst time.Duration
	for _, s := range stalls {
		fmt.Fprintf(w, "stall at=%s ms=%.1f\n", s.at.UTC().Format("15:04:05.000"), ms(s.late))
		worst = max(worst, s.late)
	}
	fmt.Fprintf(w, "stalls: count=%d max_ms=%.1f over_ms=%.1f seconds=%.1f\n", len(stalls), ms(worst), ms(over), ran.Seconds())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func main() { run(os.Args[1:], os.Stdout) }

// run measures as args ask and reports to w.
func run(args []string, w io.Writer) {
	var f flags
	cli.Parse("stallmeter", "Measures the machine's own stalls (a benchmark tool).", &f, args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.Duration.D() > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.Duration.D())
		defer cancel()
	}
	start := time.Now()
	stalls := measure(ctx, time.Millisecond, f.Over.D())
	report(w, stalls, f.Over.D(), time.Since(start))
}
