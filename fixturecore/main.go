// Command fixturecore is the fixture core of core-api.md: a non-idempotent
// core banking system for tests, smoke runs, benchmarks and demos.
package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"dedup/cli"
	"dedup/fakecore"
)

type flags struct {
	Listen string      `name:"listen" default:"127.0.0.1:9201" help:"HTTP address; port 0 picks a free port."`
	Slow   cli.Seconds `name:"slow" default:"5" help:"Seconds a SLOW memo waits before applying."`
	State  string      `name:"state" help:"Keep balances, applied transfers and counters durably in this file (slower; for fault tests)."`
	Quiet  bool        `name:"quiet" help:"Log no requests."`
	cli.Logging
}

// Validate refuses a bad --listen as a usage error, as every binary does.
func (f *flags) Validate() error { return cli.CheckListen("--listen", f.Listen) }

func main() {
	var f flags
	cli.Parse("fixturecore", "The fixture core: a non-idempotent core banking system for tests.", &f, os.Args[1:])
	log := f.Logger(os.Stderr)
	reqLog := log
	if f.Quiet {
		reqLog = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	core, err := fakecore.New(fakecore.Config{Slow: f.Slow.D(), StatePath: f.State, Logger: reqLog})
	if err != nil {
		cli.Fatal("fixturecore", err)
	}
	srv, err := fakecore.Listen(core, f.Listen)
	if err != nil {
		cli.Fatal("fixturecore", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("fixturecore started", "listen", srv.Addr, "slow_s", f.Slow.D().Seconds(), "state", f.State)
	cli.Listening(os.Stderr, f.LogFormat, "listening addr="+srv.Addr)
	<-ctx.Done()
	srv.Shutdown(time.Duration(f.Slow.D()) + time.Second)
	log.Info("fixturecore stopped")
}
