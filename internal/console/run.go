package console

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"dedup/internal/certs"
	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/ledger"
	"dedup/ledger/backend"
)

// Flags are the console binary's command line.
type Flags struct {
	connect.LedgerFlags
	Listen        string `name:"listen" default:"127.0.0.1:9443" help:"HTTPS address of the console (there is no plain HTTP listener)."`
	TLSCert       string `name:"tls-cert" required:"" placeholder:"FILE" help:"The console's server certificate (PEM)."`
	TLSKey        string `name:"tls-key" required:"" placeholder:"FILE" help:"Its private key (PEM)."`
	OperatorCA    string `name:"operator-ca" required:"" placeholder:"FILE" help:"The CA (PEM) that issues operator certificates; every connection must present one (URI SAN urn:dedup:operator:NAME, and urn:dedup:role:operator to decide)."`
	MetricsListen string `name:"metrics-listen" placeholder:"ADDR" help:"HTTP address for /metrics (default off); port 0 picks a free port."`
	TextfileDir   string `name:"textfile-dir" default:"/var/lib/node_exporter/textfile" placeholder:"DIR" help:"Where the jobs write their textfiles: the overview shows their last runs."`
	MaxAttempts   int    `name:"max-attempts" default:"3" help:"reprocess's --max-attempts: FAILED rows at it are shown as exhausted."`
	cli.Logging
}

// Validate checks the flags that need no file.
func (f *Flags) Validate() error {
	if err := backend.Check(f.DB, f.DBInsecure); err != nil {
		return fmt.Errorf("--db: %v", err)
	}
	if err := cli.CheckListen("--listen", f.Listen); err != nil {
		return err
	}
	if f.MetricsListen != "" {
		if err := cli.CheckListen("--metrics-listen", f.MetricsListen); err != nil {
			return err
		}
	}
	if f.MaxAttempts < 1 {
		return fmt.Errorf("--max-attempts must be at least 1")
	}
	return (certs.Files{Cert: f.TLSCert, Key: f.TLSKey, CA: f.OperatorCA}).Check("--tls-cert", "--tls-key")
}

// Main runs the console with args (without the program name): it serves
// until SIGTERM or SIGINT and returns the exit status.
func Main(args []string) int {
	var f Flags
	cli.Parse("console", "The operator's console: transfers in doubt, their story, and four-eyes decisions by certificate.", &f, args)
	return run(&f)
}

// run starts the console and serves until SIGTERM or SIGINT; it returns
// the exit status.
func run(f *Flags) int {
	log := f.Logger(os.Stderr)
	f.WarnInsecure(log)
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "console: error: "+format+"\n", a...)
		return cli.ExitRuntime
	}
	f.Existing = true // the console never creates a ledger
	if err := f.CheckExists(); err != nil {
		return fail("%v", err)
	}
	set, err := certs.Load(certs.Files{Cert: f.TLSCert, Key: f.TLSKey, CA: f.OperatorCA})
	if err != nil {
		return fail("%v", err)
	}
	tlsConfig, err := set.ServerConfig()
	if err != nil {
		return fail("%v", err)
	}
	l, err := f.LedgerFlags.Open(f.LedgerFlags.Options(log.Warn, ledger.Actor("console")), log)
	if err != nil {
		return fail("%v", err)
	}
	defer l.Close()
	reg := prometheus.NewRegistry()
	srv, err := New(l, Options{TextfileDir: f.TextfileDir, MaxAttempts: f.MaxAttempts, Log: log, Registerer: reg})
	if err != nil {
		return fail("%v", err)
	}
	ln, err := net.Listen("tcp", f.Listen)
	if err != nil {
		return fail("--listen %s: %v", f.Listen, err)
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
		// A refused handshake (no certificate, an unknown CA, an expired
		// one) is logged here.
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	metricsAddr := "off"
	if f.MetricsListen != "" {
		mln, err := net.Listen("tcp", f.MetricsListen)
		if err != nil {
			return fail("--metrics-listen %s: %v", f.MetricsListen, err)
		}
		metricsAddr = mln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ms := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go ms.Serve(mln)
		defer ms.Close()
	}
	served := make(chan error, 1)
	go func() { served <- hs.ServeTLS(ln, "", "") }()
	log.Info("console started", "listen", ln.Addr().String(), "db", backend.Describe(f.DB), "operator_ca", f.OperatorCA,
		"metrics", metricsAddr, "version", cli.VersionString())
	cli.Listening(os.Stderr, f.LogFormat, "listening addr="+ln.Addr().String())
	select {
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			return fail("serve: %v", err)
		}
	case <-ctx.Done():
		log.Info("console stopping")
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}
	log.Info("console stopped")
	return cli.ExitOK
}
