// Command fixturecore is the fixture core of docs/core-api.md: a non-idempotent
// core banking system for tests, smoke runs, benchmarks and demos.
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"dedup/internal/certs"
	"dedup/internal/cli"
	"dedup/internal/fixturecore"
)

type flags struct {
	Listen   string      `name:"listen" default:"127.0.0.1:9201" help:"HTTP address; port 0 picks a free port."`
	Slow     cli.Seconds `name:"slow" default:"5" help:"Seconds a SLOW memo waits before applying."`
	State    string      `name:"state" help:"Keep balances, applied transfers and counters durably in this file (slower; for fault tests)."`
	Quiet    bool        `name:"quiet" help:"Log no requests."`
	TLSCert  string      `name:"tls-cert" placeholder:"FILE" help:"PEM certificate: serve https (with --tls-key)."`
	TLSKey   string      `name:"tls-key" placeholder:"FILE" help:"PEM key of --tls-cert."`
	ClientCA string      `name:"client-ca" placeholder:"FILE" help:"PEM bundle: require client certificates that chain to it (needs --tls-cert)."`
	cli.Logging
}

// Validate refuses a bad --listen or TLS flags as a usage error, as every
// binary does.
func (f *flags) Validate() error {
	if err := (certs.Files{Cert: f.TLSCert, Key: f.TLSKey}).Check("--tls-cert", "--tls-key"); err != nil {
		return err
	}
	if f.ClientCA != "" && f.TLSCert == "" {
		return fmt.Errorf("--client-ca needs --tls-cert and --tls-key")
	}
	return cli.CheckListen("--listen", f.Listen)
}

func main() {
	var f flags
	cli.Parse("fixturecore", "The fixture core: a non-idempotent core banking system for tests.", &f, os.Args[1:])
	log := f.Logger(os.Stderr)
	reqLog := log
	if f.Quiet {
		reqLog = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	core, err := fixturecore.New(fixturecore.Config{Slow: f.Slow.D(), StatePath: f.State, Logger: reqLog})
	if err != nil {
		cli.Fatal("fixturecore", err)
	}
	var tcfg *tls.Config
	if f.TLSCert != "" {
		set, err := certs.Load(certs.Files{Cert: f.TLSCert, Key: f.TLSKey, CA: f.ClientCA})
		if err != nil {
			cli.Fatal("fixturecore", err)
		}
		if tcfg, err = set.ServerConfig(); err != nil {
			cli.Fatal("fixturecore", err)
		}
	}
	srv, err := fixturecore.ListenTLS(core, f.Listen, tcfg)
	if err != nil {
		cli.Fatal("fixturecore", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("fixturecore started", "listen", srv.Addr, "url", srv.URL, "client_certs", f.ClientCA != "", "slow_s", f.Slow.D().Seconds(), "state", f.State)
	cli.Listening(os.Stderr, f.LogFormat, "listening addr="+srv.Addr)
	<-ctx.Done()
	srv.Shutdown(time.Duration(f.Slow.D()) + time.Second)
	log.Info("fixturecore stopped")
}
