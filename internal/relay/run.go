package relay

// This file is the relay binary's flags and wiring: Main parses the
// command line (docs/cli.md), binds its addresses, opens the ledger and the
// core client, sweeps the orphans, only then listens, serves until a
// signal, and shuts down cleanly. relay/ calls
// Main with no hooks; the tests' deliberately broken relays (e2e/testdata)
// call it with Hooks, so that no release binary carries a mutant or a
// test hook.

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

	"dedup/internal/certs"
	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/internal/coreapi"
	"dedup/internal/metrics"
	"dedup/internal/socket"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/ledger/backend"
)

// Flags are the relay's command-line flags.
type Flags struct {
	DB       string    `name:"db" default:"relay.db" help:"Ledger: a SQLite file path (on a local file system), or a postgres:// URL."`
	Listen   string    `name:"listen" default:"127.0.0.1:9101" help:"TCP address for channels (lhstd frames); port 0 picks a free port."`
	TLSCert  string    `name:"tls-cert" placeholder:"FILE" help:"PEM certificate chain: the channel listener speaks TLS (with --tls-key)."`
	TLSKey   string    `name:"tls-key" placeholder:"FILE" help:"PEM key of --tls-cert."`
	ClientCA string    `name:"client-ca" placeholder:"FILE" help:"PEM bundle: every channel must present a client certificate chaining to it; its urn:dedup:channel:XXX URI SANs name the channel codes it may send."`
	MaxConns cli.Whole `name:"max-conns" default:"1024" help:"Open channel connections (TLS handshakes included); one more is closed at once."`
	coreapi.Flags
	OrphanAfter    cli.Seconds `name:"orphan-after" default:"60" help:"Seconds after which a SENT/RECEIVED row is orphaned and swept to UNKNOWN; at least connect-timeout + timeout + 7."`
	IdleTimeout    cli.Seconds `name:"idle-timeout" default:"300" help:"Seconds an idle channel connection is kept."`
	MetricsListen  string      `name:"metrics-listen" placeholder:"ADDR" help:"HTTP address for /metrics, /healthz and /readyz (default off); port 0 picks a free port."`
	MetricsRefresh cli.Seconds `name:"metrics-refresh" default:"15" help:"Seconds between refreshes of the ledger gauges (dedup_ledger_rows, dedup_ledger_oldest_age_seconds)."`
	MaxClockSkew   cli.Seconds `name:"max-clock-skew" default:"5" help:"Seconds the ledger's clock may differ from this host's; past that no orphan is swept and no lease is judged by age."`
	Synchronous    string      `name:"synchronous" enum:"full,normal" default:"full" help:"Durability of each commit: full, or normal (SQLite NORMAL; PostgreSQL: accept synchronous_commit off/local)."`
	DBInsecure     bool        `name:"db-insecure" help:"Allow a PostgreSQL host that is not loopback without sslmode=verify-full or verify-ca (plain text or an unverified server)."`
	cli.Logging
}

// Validate checks everything that can be checked before anything is
// touched (docs/cli.md): the timeouts, the orphan bound, --db, --core and
// --listen. Kong calls it while parsing, so a bad flag exits 2 without
// creating a ledger file.
func (f *Flags) Validate() error {
	for _, c := range []struct {
		name string
		v    cli.Seconds
	}{{"--orphan-after", f.OrphanAfter}, {"--idle-timeout", f.IdleTimeout}, {"--max-clock-skew", f.MaxClockSkew}} {
		if c.v <= 0 {
			return fmt.Errorf("%s must be greater than 0", c.name)
		}
	}
	if err := backend.Check(f.DB, f.DBInsecure); err != nil {
		return fmt.Errorf("--db: %v", err)
	}
	if err := f.listenerFiles().Check("--tls-cert", "--tls-key"); err != nil {
		return err
	}
	if f.ClientCA != "" && f.TLSCert == "" {
		return fmt.Errorf("--client-ca needs --tls-cert and --tls-key")
	}
	if f.MaxConns < 1 {
		return fmt.Errorf("--max-conns must be at least 1")
	}
	if err := cli.CheckListen("--listen", f.Listen); err != nil {
		return err
	}
	if f.MetricsListen != "" {
		if err := cli.CheckListen("--metrics-listen", f.MetricsListen); err != nil {
			return err
		}
	}
	if f.MetricsRefresh <= 0 {
		return fmt.Errorf("--metrics-refresh must be greater than 0")
	}
	// An orphan must be older than any claim can live (ledger.Bounds).
	if err := f.bounds().Check(); err != nil {
		return err
	}
	return nil
}

// bounds are the relay's timing bounds (ledger.Bounds).
func (f *Flags) bounds() ledger.Bounds {
	return ledger.Bounds{ConnectTimeout: f.ConnectTimeout.D(), Timeout: f.Timeout.D(), OrphanAfter: f.OrphanAfter.D()}
}

func (f *Flags) listenerFiles() certs.Files {
	return certs.Files{Cert: f.TLSCert, Key: f.TLSKey, CA: f.ClientCA}
}

// Hooks change the relay for the tests' broken builds; the zero value is
// the relay itself, and every release binary passes the zero value.
type Hooks struct {
	// WrapStore, if set, wraps the ledger the relay serves from (a test
	// relay with a select-then-insert claim).
	WrapStore func(Store) Store
	// NoLease turns the claim's lease off (a test relay that shows what
	// the lease prevents).
	NoLease bool
	// NoConfirm turns off rule 13's confirmation on a shared ledger (the
	// benchmark's relay that measures what it costs).
	NoConfirm bool
	// BeforeSend, if set, is called between a claim and its send (a test
	// relay that freezes itself there); see Config.BeforeSend.
	BeforeSend func(memo string)
}

// Main runs the relay with args (without the program name) and returns its
// exit status.
func Main(args []string, hooks Hooks) int {
	var f Flags
	cli.Parse("relay", "The dedup relay: forwards each GUID to the core at most once.", &f, args)
	return run(&f, f.Logger(os.Stderr), hooks)
}

func run(f *Flags, log *slog.Logger, hooks Hooks) int {
	// The signals before anything else: a SIGINT that arrives the instant
	// the port accepts (or earlier) ends in a clean stop, never in death
	// by the signal.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "relay: error: "+format+"\n", args...)
		return cli.ExitRuntime
	}
	// Certificates first: a bad file is refused before the ledger is
	// opened or anything is created.
	var listenerCerts *certs.Set
	if f.TLSCert != "" {
		var err error
		if listenerCerts, err = certs.Load(f.listenerFiles()); err != nil {
			return fail("listener TLS: %v", err)
		}
	}
	core, coreCerts, err := f.CoreClient(0)
	if err != nil {
		return fail("%v", err)
	}
	connect.WarnDB(log, f.DB, f.DBInsecure)
	// The addresses next, bound but not listening: one that is taken or
	// not this host's is refused naming its flag before the ledger is
	// opened or created, and no connection is accepted (not even into the
	// kernel's backlog) before the ledger is open and swept (docs/cli.md,
	// "Ready before it listens").
	// Started by systemd with its socket (dedup-relay.socket), the relay
	// takes that socket instead: it listens already, so connections made
	// while the relay restarts or is upgraded wait in the kernel's backlog
	// instead of being refused, and are accepted once this process is
	// ready, as any other (docs/deploy.md, "Restarts that refuse no one").
	activated, err := socket.Activated()
	if err != nil {
		return fail("the sockets systemd passed: %v", err)
	}
	held := activated[socket.ListenName]
	var bound *socket.Bound
	if held != nil {
		defer held.Close()
		if !socket.SameAddr(held.Addr(), f.Listen) {
			return fail("--listen %s: systemd passed the channel socket %s (dedup-relay.socket): make them one (ListenStream= in systemctl edit dedup-relay.socket, or --listen)", f.Listen, held.Addr())
		}
	} else {
		if bound, err = socket.Bind(f.Listen); err != nil {
			return fail("--listen %s: %v", f.Listen, err)
		}
		defer bound.Close()
	}
	var mbound *socket.Bound
	if f.MetricsListen != "" {
		if mbound, err = socket.Bind(f.MetricsListen); err != nil {
			return fail("--metrics-listen %s: %v", f.MetricsListen, err)
		}
		defer mbound.Close()
	}
	// Tracing as the OTEL_ variables ask (none set: off, nothing exported
	// or attempted). A malformed variable is refused before the ledger is
	// opened, like a bad flag's file.
	tp, err := tracing.Start(context.Background(), "relay", cli.VersionString(), log)
	if err != nil {
		return fail("%v", err)
	}
	defer tracing.Flush(log, tp)
	var m *metrics.Relay
	opts := ledger.Options{Synchronous: f.Synchronous, Warn: log.Warn, Actor: ledger.Actor("relay")}
	// A restart must not wait for a whole-file read (seconds per gigabyte
	// of a SQLite ledger): the structural check runs while the relay
	// serves, and a damaged file stops every write (rule 14's path: known
	// GUIDs are answered from their rows, new ones get E902).
	opts.CheckInBackground = func(took time.Duration, err error) {
		if err != nil {
			log.Error("ledger check failed: the file is damaged; every write is refused from now on (new transfers get E902, known GUIDs are answered from their rows) and /readyz answers 503; this does not heal by itself: stop the relay and restore the ledger from a backup",
				"db", backend.Describe(f.DB), "took_s", took.Seconds(), "error", err)
			return
		}
		log.Info("ledger check ok", "db", backend.Describe(f.DB), "took_s", took.Seconds())
	}
	// A restart after a reboot reads, before it opens the ledger, the
	// GUID index's leaves that today's claims will read (at most 128 MiB,
	// 1 s), so that its first seconds do not read them one by one inside
	// the write lock. On PostgreSQL it opens the pool's connections
	// before it listens.
	opts.WarmAtOpen = func(r ledger.WarmReport, err error) {
		args := []any{"db", backend.Describe(f.DB), "pages", r.Pages, "guid_index_leaves", r.Leaves, "took_s", r.Took.Seconds()}
		if backend.IsPostgresURL(f.DB) {
			args = []any{"db", backend.Describe(f.DB), "conns", r.Conns, "took_s", r.Took.Seconds()}
		}
		if err != nil {
			log.Info("ledger not warmed: its first claims after a start wait for what was not read or opened; nothing else changes", append(args, "reason", err)...)
			return
		}
		log.Info("ledger warmed", args...)
	}
	if f.MetricsListen != "" {
		m = metrics.New()
		opts.OnCommit = m.Commit
		opts.OnNotCommitted = m.NotCommitted
	}
	l, err := connect.Open(f.DB, opts, log)
	if err != nil {
		return fail("%v", err)
	}
	defer l.Close()
	srv, lease, err := newServer(f, log, hooks, l, core, m, listenerCerts, coreCerts, tp.Tracer)
	if err != nil {
		return fail("listener TLS: %v", err)
	}

	// Orphans first: a row left SENT by a crash must not answer E903 forever.
	// Another process holding the write lock past the busy timeout (a
	// backup, a frozen relay) does not keep the relay from starting: it
	// serves retransmissions from the rows (rule 14), and its sweeper tries
	// again every sweep interval.
	// A file the background check has already found damaged (a small
	// one is checked in milliseconds) is served the same way as when the
	// damage is found later: writes refused, known GUIDs answered, /readyz
	// 503; which of the two comes first must not decide whether it starts.
	if err := srv.SweepOrphans(context.Background()); errors.Is(err, ledger.ErrBusy) {
		log.Warn("orphan sweep at start: the ledger is locked by another writer; starting anyway, the sweep runs again shortly", "error", err)
	} else if errors.Is(err, ledger.ErrDamaged) {
		log.Warn("orphan sweep at start: the ledger file is damaged; serving known GUIDs from it, refusing every write", "error", err)
	} else if err != nil {
		return fail("ledger %s: %v", backend.Describe(f.DB), err)
	}
	if ctx.Err() != nil { // a signal while the ledger was being opened
		return shutdown(f, log, srv, l)
	}
	// Ready: only now do the ports accept connections (or, on systemd's
	// socket, only now is its backlog taken).
	ln := held
	if ln == nil {
		if ln, err = bound.Listen(); err != nil {
			return fail("--listen %s: %v", f.Listen, err)
		}
	}
	defer ln.Close()
	metricsAddr := "off"
	if m != nil {
		mln, err := mbound.Listen()
		if err != nil {
			return fail("--metrics-listen %s: %v", f.MetricsListen, err)
		}
		addr, closeMetrics := serveMetrics(f, log, m, l, srv, mln)
		defer closeMetrics()
		metricsAddr = addr
	}
	srv.StartSweeper()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	go reloadOnHangup(ctx, log, m, listenerCerts, coreCerts)
	// Say it once, at start, if the core accepts no connection: every new
	// GUID would get E902 until it does. The check opens a connection and
	// sends nothing on it (the relay sends the core nothing but claimed
	// transfers); the relay serves meanwhile, the core may come.
	go func() {
		if err := core.Reach(ctx); err != nil && ctx.Err() == nil {
			log.Warn("the core accepts no connection: every new GUID will get E902 until it does; serving anyway", "core", f.Core, "error", err)
		}
	}()
	socketFrom := "bound by the relay"
	if held != nil {
		socketFrom = "systemd (held across restarts)"
	}
	log.Info("relay started", "listen", ln.Addr().String(), "socket", socketFrom, "tls", listenerMode(listenerCerts), "max_conns", int(f.MaxConns),
		"db", backend.Describe(f.DB), "core", f.Core, "core_roots", f.CoreRoots(),
		"timeout_s", f.Timeout.D().Seconds(), "connect_timeout_s", f.ConnectTimeout.D().Seconds(),
		"orphan_after_s", f.OrphanAfter.D().Seconds(), "idle_timeout_s", f.IdleTimeout.D().Seconds(),
		"lease_s", lease.Seconds(), "confirm_claims", backend.Shared(f.DB), "max_clock_skew_s", f.MaxClockSkew.D().Seconds(), "synchronous", f.Synchronous, "metrics", metricsAddr,
		"version", cli.VersionString())
	// Scripts that pass port 0 read the port from this line.
	cli.Listening(os.Stderr, f.LogFormat, "listening addr="+ln.Addr().String())

	select {
	case err := <-served:
		log.Error("relay stopped serving", "error", err)
		return cli.ExitRuntime
	case <-ctx.Done():
	}
	stop()
	return shutdown(f, log, srv, l)
}

// newServer builds the relay server over the ledger l and the core, with
// the test hooks (none in a release binary) and the listener's TLS.
func newServer(f *Flags, log *slog.Logger, hooks Hooks, l ledger.Ledger, core *coreapi.Client, m *metrics.Relay,
	listenerCerts, coreCerts *certs.Set, tracer *tracing.Tracer) (*Server, time.Duration, error) {
	var store Store = l
	if hooks.WrapStore != nil {
		store = hooks.WrapStore(store)
	}
	lease := f.bounds().Lease()
	if hooks.NoLease {
		lease = 0
	}
	cfg := Config{Store: store, Core: core, Logger: log, IdleTimeout: f.IdleTimeout.D(), OrphanAfter: f.OrphanAfter.D(),
		Lease: lease, Metrics: m, Tracer: tracer, MaxConns: int(f.MaxConns), BeforeSend: hooks.BeforeSend,
		ConfirmClaims: backend.Shared(f.DB) && !hooks.NoLease && !hooks.NoConfirm, MaxClockSkew: f.MaxClockSkew.D()}
	if listenerCerts != nil {
		var err error
		if cfg.TLS, err = listenerCerts.ServerConfig(); err != nil {
			return nil, 0, err
		}
		cfg.ClientCerts = listenerCerts.RequiresClientCert()
		m.CertExpiry(metrics.CertListener, listenerCerts.NotAfter())
	}
	if coreCerts != nil && !coreCerts.NotAfter().IsZero() {
		m.CertExpiry(metrics.CertCoreClient, coreCerts.NotAfter())
	}
	return New(cfg), lease, nil
}

// serveMetrics serves /metrics, /healthz and /readyz on --metrics-listen
// (bound by run before the ledger was opened, listening once it was swept) and refreshes the ledger
// gauges; it returns the bound address and what stops both.
func serveMetrics(f *Flags, log *slog.Logger, m *metrics.Relay, l ledger.Ledger, srv *Server, mln net.Listener) (string, func()) {
	ms := metrics.NewServer(m, l, f.MetricsRefresh.D(), srv.Serving)
	ms.SetLogger(log)
	hs := &http.Server{Handler: ms.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(mln)
	rctx, stopRefresh := context.WithCancel(context.Background())
	go ms.RunRefresher(rctx, func(err error) { log.Warn("ledger gauges not refreshed", "error", err) })
	addr := mln.Addr().String()
	cli.Listening(os.Stderr, f.LogFormat, "metrics addr="+addr)
	return addr, func() { stopRefresh(); hs.Close() }
}

// shutdown stops accepting, lets every transaction in flight finish and be
// recorded (bounded), closes the ledger and returns the exit status. A
// second signal exits at once.
func shutdown(f *Flags, log *slog.Logger, srv *Server, l ledger.Ledger) int {
	again := make(chan os.Signal, 1)
	signal.Notify(again, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-again
		fmt.Fprintln(os.Stderr, "relay: second signal, exiting at once")
		os.Exit(cli.ExitRuntime)
	}()
	bound := f.bounds().InFlight()
	log.Info("relay stopping: no new connections; finishing transactions in flight", "bound_s", bound.Seconds())
	sctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("relay stopped before every transaction in flight finished", "error", err)
		return cli.ExitRuntime
	}
	if err := l.Close(); err != nil {
		log.Error("closing the ledger failed", "db", f.DB, "error", err)
		return cli.ExitRuntime
	}
	log.Info("relay stopped cleanly")
	return cli.ExitOK
}

func listenerMode(c *certs.Set) string {
	switch {
	case c == nil:
		return "off (plain TCP)"
	case c.RequiresClientCert():
		return "on, client certificates required (--client-ca " + c.Files().CA + ")"
	}
	return "on, no client certificates"
}

// reloadOnHangup re-reads the certificate files on every SIGHUP until ctx
// ends: connections opened afterwards use them. A reload that fails keeps
// the files loaded before and says which file is wrong.
func reloadOnHangup(ctx context.Context, log *slog.Logger, m *metrics.Relay, listener, core *certs.Set) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		for _, c := range []struct {
			name string
			set  *certs.Set
		}{{metrics.CertListener, listener}, {metrics.CertCoreClient, core}} {
			if c.set == nil {
				continue
			}
			if err := c.set.Reload(); err != nil {
				log.Error("SIGHUP: certificate reload failed; the files loaded before stay in use", "cert", c.name, "error", err)
				continue
			}
			if !c.set.NotAfter().IsZero() {
				m.CertExpiry(c.name, c.set.NotAfter())
			}
			log.Info("SIGHUP: certificates reloaded; new connections use them", "cert", c.name, "not_after", c.set.NotAfter().UTC().Format(time.RFC3339))
		}
	}
}
