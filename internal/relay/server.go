package relay

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"dedup/internal/metrics"
	"dedup/internal/send"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/lhstd"
)

// Defaults of the wire protocol (docs/telegram.md, docs/cli.md).
const (
	// FrameTimeout bounds the arrival of a whole frame once its first byte
	// has arrived.
	FrameTimeout = 10 * time.Second
	// WriteTimeout bounds the one write of a reply frame.
	WriteTimeout = 10 * time.Second
	// SweepInterval is how often the orphan sweep runs while serving.
	SweepInterval = 10 * time.Second
)

// Config configures a Server.
type Config struct {
	Store       Store
	Core        Core
	Logger      *slog.Logger
	IdleTimeout time.Duration // an idle channel connection is closed after it
	OrphanAfter time.Duration // SENT/RECEIVED rows older than this are swept to UNKNOWN
	// Lease is how long after asking for a claim its holder may still
	// write the request to the core (0: no lease; see ledger.Bounds.Lease).
	Lease time.Duration
	// OutageAfter consecutive sends without a connection make the core
	// count as down (0: DefaultOutageAfter); see outage.
	OutageAfter int
	// Metrics, if not nil, counts what the relay does.
	Metrics *metrics.Relay
	// Tracer, if not nil, traces every transfer (package tracing).
	Tracer *tracing.Tracer
	// TLS, if not nil, makes the channel listener speak TLS (the
	// handshake has the frame timeout). With ClientCerts it must require
	// and verify a client certificate; each certificate then names the
	// channel codes it may send (channel binding, see Peer).
	TLS         *tls.Config
	ClientCerts bool
	// MaxConns bounds the open channel connections, TLS handshakes
	// included (0: DefaultMaxConns); one more is closed at once.
	MaxConns int
	// ConfirmClaims makes every holder confirm its claim on the ledger's
	// clock just before the request's first byte (docs/rules.md rule 13):
	// set for a ledger shared by several hosts (PostgreSQL).
	ConfirmClaims bool
	// MaxClockSkew is --max-clock-skew: past that difference between the
	// ledger's clock and the host's, nothing is decided by age (0:
	// ledger.DefaultMaxClockSkew).
	MaxClockSkew time.Duration
	// BeforeSend, if set, is called with the memo between a claim and its
	// send. It is a test hook (nil in every release binary): the
	// frozen-holder test's relay stops itself there.
	BeforeSend func(memo string)
	// FrameTimeout, WriteTimeout and SweepInterval default to the package
	// constants; tests shorten them.
	FrameTimeout  time.Duration
	WriteTimeout  time.Duration
	SweepInterval time.Duration
}

// DefaultMaxConns is the default of --max-conns.
const DefaultMaxConns = 1024

// ChannelURIPrefix begins the URI SANs of a channel's client certificate
// that name the channel codes it may send: urn:dedup:channel:MOB.
const ChannelURIPrefix = "urn:dedup:channel:"

// Peer is the channel at the other end of a connection, as far as the
// relay knows it.
type Peer struct {
	Addr string // the connection's remote address
	// Client is the client certificate's subject CN; empty when the
	// listener requires no client certificate.
	Client string
	// Channels are the channel codes the client certificate allows (its
	// urn:dedup:channel:XXX URI SANs). nil means any: the listener
	// requires no client certificate.
	Channels []string
}

// allows reports whether the peer may send telegrams of channel code.
func (p Peer) allows(code string) bool {
	if p.Channels == nil {
		return true
	}
	for _, c := range p.Channels {
		if c == code {
			return true
		}
	}
	return false
}

// peerOf reads the peer's identity from a completed TLS handshake.
func peerOf(addr string, cs tls.ConnectionState) Peer {
	p := Peer{Addr: addr, Channels: []string{}}
	if len(cs.PeerCertificates) == 0 {
		return p
	}
	leaf := cs.PeerCertificates[0]
	p.Client = leaf.Subject.CommonName
	for _, u := range leaf.URIs {
		if code, ok := strings.CutPrefix(u.String(), ChannelURIPrefix); ok && code != "" {
			p.Channels = append(p.Channels, code)
		}
	}
	return p
}

// Server is the relay server. Create it with New, then Serve.
type Server struct {
	store        Store
	core         Core
	log          *slog.Logger
	idleTimeout  time.Duration
	frameTimeout time.Duration
	writeTimeout time.Duration
	orphanAfter  time.Duration
	sweepEvery   time.Duration
	lease        time.Duration
	outage       *outage
	trouble      troubleLog
	refusals     *refusalLog
	metrics      *metrics.Relay
	tls          *tls.Config
	clientCerts  bool
	maxConns     int
	sender       *send.Sender
	clock        clockWatch
	tracer       *tracing.Tracer

	shuttingDown atomic.Bool
	mu           sync.Mutex
	listeners    map[net.Listener]struct{}
	conns        map[net.Conn]struct{}
	connWG       sync.WaitGroup
	sweeping     atomic.Bool
	stopSweep    chan struct{}
	sweepDone    chan struct{}
}

// New returns a server for cfg.
func New(cfg Config) *Server {
	s := &Server{
		store: cfg.Store, core: cfg.Core, log: cfg.Logger,
		idleTimeout: cfg.IdleTimeout, frameTimeout: cfg.FrameTimeout, writeTimeout: cfg.WriteTimeout,
		orphanAfter: cfg.OrphanAfter, sweepEvery: cfg.SweepInterval, lease: cfg.Lease,
		outage: newOutage(cfg.OutageAfter), metrics: cfg.Metrics,
		tls: cfg.TLS, clientCerts: cfg.ClientCerts, maxConns: cfg.MaxConns, tracer: cfg.Tracer,
		listeners: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{},
		stopSweep: make(chan struct{}), sweepDone: make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s.refusals = newRefusalLog(s.log)
	if s.maxConns <= 0 {
		s.maxConns = DefaultMaxConns
	}
	if s.idleTimeout <= 0 {
		s.idleTimeout = 300 * time.Second
	}
	if s.frameTimeout <= 0 {
		s.frameTimeout = FrameTimeout
	}
	if s.writeTimeout <= 0 {
		s.writeTimeout = WriteTimeout
	}
	if s.sweepEvery <= 0 {
		s.sweepEvery = SweepInterval
	}
	s.clock = clockWatch{max: cfg.MaxClockSkew, log: s.log, metrics: s.metrics, start: time.Now()}
	if s.clock.max <= 0 {
		s.clock.max = ledger.DefaultMaxClockSkew
	}
	s.sender = &send.Sender{Ledger: s.store, Core: s.core, Lease: cfg.Lease, Confirm: cfg.ConfirmClaims,
		MaxClockSkew: s.clock.max, OnClock: s.clock.leaseChecked, BeforeSend: cfg.BeforeSend}
	return s
}

// SweepOrphans moves SENT/RECEIVED rows older than the orphan bound to
// UNKNOWN, so that resolve resolves them by inquiry. The relay runs it before
// it starts listening and then every sweep interval.
//
// It first compares the ledger's clock with this host's (docs/ledger.md
// "Clocks"): while they differ by more than --max-clock-skew it sweeps
// nothing, since a ledger clock that runs ahead would take live claims
// from their holders.
func (s *Server) SweepOrphans(ctx context.Context) error {
	if s.orphanAfter <= 0 {
		return nil
	}
	s.clock.observeWall(time.Now())
	r, err := ledger.MeasureClock(ctx, s.store)
	if err != nil {
		return err
	}
	if !s.clock.ageDecisionsAllowed(r, metrics.AgeDecisionSweep) {
		return nil
	}
	n, err := s.store.SweepOrphans(ctx, s.orphanAfter)
	if err != nil {
		return err
	}
	if n > 0 {
		s.log.Warn("orphan sweep: SENT/RECEIVED rows moved to UNKNOWN for resolve to settle", "rows", n, "older_than_s", s.orphanAfter.Seconds())
	}
	return nil
}

// StartSweeper runs the orphan sweep every sweep interval until Shutdown.
func (s *Server) StartSweeper() {
	if s.sweeping.Swap(true) {
		return
	}
	go func() {
		defer close(s.sweepDone)
		t := time.NewTicker(s.sweepEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stopSweep:
				return
			case <-t.C:
				if err := s.SweepOrphans(context.Background()); err != nil {
					s.ledgerTrouble(err)
				}
			}
		}
	}()
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("relay: server closed")

// Serve accepts channel connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.shuttingDown.Load() {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.shuttingDown.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.refusals.Log("accept", slog.LevelWarn, "accept failed, retrying", slog.Any("error", err), slog.Duration("backoff", backoff))
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		switch s.track(c) {
		case closed:
			c.Close()
			return ErrServerClosed
		case full:
			// Closed at once, nothing read: a flood of idle connections
			// must not take the file descriptors that real channels,
			// the ledger and /readyz need.
			c.Close()
			s.metrics.Rejected(metrics.RejectMaxConns)
			s.refusals.Log(metrics.RejectMaxConns, slog.LevelWarn, "connection refused: --max-conns reached",
				slog.String("peer", c.RemoteAddr().String()), slog.Int("max_conns", s.maxConns))
			continue
		}
		go s.serveConn(c)
	}
}

func isTemporary(err error) bool {
	// EMFILE and friends: wait and retry rather than give up serving.
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

type trackResult int

const (
	tracked trackResult = iota
	closed              // the server is shutting down
	full                // --max-conns connections are open
)

func (s *Server) track(c net.Conn) trackResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shuttingDown.Load() {
		return closed
	}
	if len(s.conns) >= s.maxConns {
		return full
	}
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.metrics.Connections(1)
	return tracked
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.metrics.Connections(-1)
	s.connWG.Done()
}

// Serving reports whether the server accepts channel connections (for
// the readiness check).
func (s *Server) Serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.listeners) > 0 && !s.shuttingDown.Load()
}

// handshake completes the TLS handshake of a new connection within the
// frame timeout and returns the connection to read from and its peer.
func (s *Server) handshake(c net.Conn, remote string) (net.Conn, Peer, error) {
	if s.tls == nil {
		return c, Peer{Addr: remote}, nil
	}
	tc := tls.Server(c, s.tls)
	c.SetDeadline(time.Now().Add(s.frameTimeout))
	if err := tc.Handshake(); err != nil {
		return nil, Peer{}, err
	}
	c.SetDeadline(time.Time{})
	if !s.clientCerts {
		return tc, Peer{Addr: remote}, nil
	}
	return tc, peerOf(remote, tc.ConnectionState()), nil
}

// serveConn reads frames one after another and writes each reply before
// reading the next frame.
func (s *Server) serveConn(raw net.Conn) {
	defer s.untrack(raw)
	defer raw.Close()
	remote := raw.RemoteAddr().String()
	// A failure inside one connection's handling closes that connection,
	// never the process.
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("failure while serving a channel connection; connection closed", "peer", remote,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	c, peer, err := s.handshake(raw, remote)
	if err != nil {
		s.metrics.Rejected(metrics.RejectTLSHandshake)
		s.refusals.Log(metrics.RejectTLSHandshake, slog.LevelWarn, "TLS handshake refused, connection closed",
			slog.String("peer", remote), slog.String("error", err.Error()))
		return
	}
	br := bufio.NewReader(c)
	for {
		// Idle: wait for the first byte of the next frame. Setting the
		// deadline before checking for shutdown means Shutdown's "deadline
		// now" cannot be overwritten unnoticed.
		raw.SetReadDeadline(time.Now().Add(s.idleTimeout))
		if s.shuttingDown.Load() {
			return
		}
		if _, err := br.Peek(1); err != nil {
			if !errors.Is(err, io.EOF) && !s.shuttingDown.Load() {
				s.log.Info("channel connection closed", "remote", remote, "reason", err)
			}
			return
		}
		raw.SetReadDeadline(time.Now().Add(s.frameTimeout))
		t, err := lhstd.ReadFrame(br)
		if err != nil {
			s.refusals.Log("malformed", slog.LevelWarn, "bad or incomplete frame, closing connection without reply",
				slog.String("peer", remote), slog.String("error", err.Error()))
			return
		}
		reply := s.ProcessFrom(peer, t)
		if reply == nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(s.writeTimeout))
		if _, err := c.Write(lhstd.AppendFrame(make([]byte, 0, lhstd.LengthFieldLen+len(reply)), reply)); err != nil {
			// The outcome is already recorded; the channel will retransmit
			// and get it from the ledger.
			s.log.Info("reply not delivered, channel gone", "peer", remote, "guid", printable(string(reply[:min(len(reply), 32)])), "error", err)
			return
		}
		s.metrics.Reply(lhstd.ReplyCode(reply))
	}
}

// Shutdown stops accepting, closes idle connections, and waits until every
// transaction in flight has been recorded and its reply written, or until
// ctx ends. It stops the orphan sweeper too.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	first := !s.shuttingDown.Swap(true)
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		// Wakes connections waiting for a frame; a connection processing
		// a transaction finishes it, writes the reply, then sees the flag.
		c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	if first {
		close(s.stopSweep)
	}
	done := make(chan struct{})
	go func() { s.connWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if s.sweeping.Load() {
		select {
		case <-s.sweepDone:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// LedgerTroubleEvery is how often, at most, the relay says that its ledger
// cannot be written: a full disk fails every claim, and one line per
// request would bury everything else.
const LedgerTroubleEvery = time.Minute

// troubleLog counts ledger write failures between two log lines.
type troubleLog struct {
	mu     sync.Mutex
	last   time.Time
	failed int
}

// ledgerTrouble notes a ledger write that failed and, at most once per
// LedgerTroubleEvery, says so with what it means for channels. Each
// transaction's own line still names its error.
func (s *Server) ledgerTrouble(err error) {
	s.trouble.mu.Lock()
	s.trouble.failed++
	if !s.trouble.last.IsZero() && time.Since(s.trouble.last) < LedgerTroubleEvery {
		s.trouble.mu.Unlock()
		return
	}
	n := s.trouble.failed
	s.trouble.last, s.trouble.failed = time.Now(), 0
	s.trouble.mu.Unlock()
	s.log.Error("the ledger cannot be written: new transfers get E902 and are not sent; retransmissions of finished ones are still answered from it; the relay keeps serving and recovers by itself once the ledger can be written",
		"failed_writes", n, "error", err, "repeats_at_most_every", LedgerTroubleEvery.String())
}
