// Package metrics is the relay's Prometheus instrumentation and its
// operator endpoint (docs/operations.md): /metrics, /healthz and /readyz.
// The names are a contract: dashboards and the alert rules in
// deploy/prometheus are written against them.
//
// Counting stays off the hot path's critical section: every label child is
// resolved once (states and results at start, response codes on first use),
// so a transaction costs a few atomic adds. The ledger gauges are refreshed
// by one goroutine, at most every RefreshEvery, through the ledger's read
// side; they never delay a claim.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"dedup"
	"dedup/ledger"
)

// RefreshEvery is how often the ledger gauges are refreshed by default.
const RefreshEvery = 15 * time.Second

// ReadyTimeout bounds the ledger read behind /readyz.
const ReadyTimeout = time.Second

// Relay holds the relay's metrics. Its methods are safe for concurrent use;
// a nil *Relay counts nothing, so code that runs without metrics needs no
// checks.
type Relay struct {
	reg *prometheus.Registry

	replies       *prometheus.CounterVec
	replyByCode   sync.Map // code -> prometheus.Counter
	answers       map[dedup.State]prometheus.Counter
	coreRequests  map[dedup.State]prometheus.Counter
	coreDuration  prometheus.Histogram
	txDuration    prometheus.Histogram
	inflight      prometheus.Gauge
	conns         prometheus.Gauge
	commitSeconds prometheus.Histogram
	commitWrites  prometheus.Histogram
	rows          map[dedup.State]prometheus.Gauge
	oldest        map[dedup.State]prometheus.Gauge
	rejected      map[string]prometheus.Counter
	certExpiry    *prometheus.GaugeVec
	openProposals prometheus.Gauge
	clockSkew     prometheus.Gauge
	clockSteps    prometheus.Counter
	ageSkipped    map[string]prometheus.Counter
	notCommitted  map[string]prometheus.Counter
}

// Age decisions the relay skips while the clocks disagree (the what label
// of dedup_age_decisions_skipped_total).
const (
	AgeDecisionSweep = "sweep"
	AgeDecisionLease = "lease"
)

// Reasons a channel connection or telegram is refused before the ledger
// (the reason label of dedup_channel_rejected_total).
const (
	RejectTLSHandshake      = "tls_handshake"
	RejectChannelNotAllowed = "channel_not_allowed"
	RejectMaxConns          = "max_conns"
)

// Certificates whose expiry is exported (the cert label of
// dedup_tls_cert_expiry_timestamp_seconds).
const (
	CertListener   = "listener"
	CertCoreClient = "core_client"
)

// New returns the relay's metrics on a registry of their own (not the
// global default), with the Go runtime and process collectors.
func New() *Relay {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m := &Relay{reg: reg}
	m.replies = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_replies_total",
		Help: "Replies written to channels, by response code."}, []string{"code"})
	answers := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_ledger_answers_total",
		Help: "Requests answered from an existing ledger row without a core call (retransmissions absorbed), by the row's state."}, []string{"state"})
	core := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_core_requests_total",
		Help: "POSTs to the core, by how each ended: done, unknown (E901) or failed (E902)."}, []string{"result"})
	m.coreDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dedup_core_request_duration_seconds",
		Help: "One core call, from connect to answer.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	m.txDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dedup_transaction_duration_seconds",
		Help: "One telegram, from arrival to reply.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "dedup_inflight_transactions",
		Help: "Transactions between their claim and their recorded outcome."})
	m.conns = prometheus.NewGauge(prometheus.GaugeOpts{Name: "dedup_channel_connections", Help: "Open channel connections."})
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dedup_ledger_commit_duration_seconds",
		Help: "One ledger commit (a group commit counts once).", Buckets: prometheus.ExponentialBuckets(0.00005, 2, 18)})
	m.commitWrites = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dedup_ledger_commit_writes",
		Help: "Writes carried by one ledger commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)})
	rows := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_ledger_rows",
		Help: "Ledger rows per state, refreshed from the ledger every --metrics-refresh seconds."}, []string{"state"})
	oldest := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_ledger_oldest_age_seconds",
		Help: "Age of the oldest ledger row in the state, 0 if none; refreshed with dedup_ledger_rows."}, []string{"state"})
	rejected := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_channel_rejected_total",
		Help: "Channel connections or telegrams refused before the ledger, by reason."}, []string{"reason"})
	m.certExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "dedup_tls_cert_expiry_timestamp_seconds",
		Help: "NotAfter of the loaded TLS certificate, as a Unix time."}, []string{"cert"})
	m.clockSkew = prometheus.NewGauge(prometheus.GaugeOpts{Name: "dedup_ledger_clock_skew_seconds",
		Help: "The ledger's clock minus this host's, as last measured (before each sweep and each lease check)."})
	m.clockSteps = prometheus.NewCounter(prometheus.CounterOpts{Name: "dedup_clock_steps_total",
		Help: "Steps of this host's wall clock against its monotonic clock of more than 1 s."})
	ageSkipped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_age_decisions_skipped_total",
		Help: "Age decisions not taken because the ledger's clock and this host's disagreed by more than --max-clock-skew."}, []string{"what"})
	m.ageSkipped = map[string]prometheus.Counter{}
	for _, w := range []string{AgeDecisionSweep, AgeDecisionLease} {
		m.ageSkipped[w] = ageSkipped.WithLabelValues(w)
	}
	notCommitted := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_ledger_not_committed_total",
		Help: "PostgreSQL writes judged not a commit, by reason: not_primary (the server was no longer the primary: a failover) or commit_warning (committed without the synchronous standby). Always 0 on SQLite."}, []string{"reason"})
	m.notCommitted = map[string]prometheus.Counter{}
	for _, r := range []string{ledger.NotCommittedNotPrimary, ledger.NotCommittedWarning} {
		m.notCommitted[r] = notCommitted.WithLabelValues(r)
	}
	f(notCommitted)
	m.openProposals = prometheus.NewGauge(prometheus.GaugeOpts{Name: "dedup_settle_open_proposals",
		Help: "settle proposals waiting for a second person's decision; refreshed with dedup_ledger_rows."})
	f(m.openProposals)
	f(m.clockSkew)
	f(m.clockSteps)
	f(ageSkipped)
	m.rejected = map[string]prometheus.Counter{}
	for _, r := range []string{RejectTLSHandshake, RejectChannelNotAllowed, RejectMaxConns} {
		m.rejected[r] = rejected.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.replies, answers, core, m.coreDuration, m.txDuration, m.inflight, m.conns,
		m.commitSeconds, m.commitWrites, rows, oldest, rejected, m.certExpiry} {
		f(c)
	}
	// The relay's own codes are exported at 0 from the start, so that a
	// dashboard's rate of E902 reads 0, not "no data", until one happens;
	// the core's B2xx codes appear on first use.
	for _, code := range []string{dedup.CodeOK, dedup.CodeCoreFailed, dedup.CodeMalformed, dedup.CodeUnknown, dedup.CodeNotSent,
		dedup.CodeInProgress, dedup.CodeGUIDReused, dedup.CodeCancelled} {
		m.replyByCode.Store(code, m.replies.WithLabelValues(code))
	}
	m.answers = map[dedup.State]prometheus.Counter{}
	m.rows = map[dedup.State]prometheus.Gauge{}
	for _, st := range ledger.States {
		m.answers[st] = answers.WithLabelValues(string(st))
		m.rows[st] = rows.WithLabelValues(string(st))
	}
	m.coreRequests = map[dedup.State]prometheus.Counter{
		dedup.StateDone: core.WithLabelValues("done"), dedup.StateUnknown: core.WithLabelValues("unknown"),
		dedup.StateFailed: core.WithLabelValues("failed"),
	}
	m.oldest = map[dedup.State]prometheus.Gauge{}
	for _, st := range []dedup.State{dedup.StateSent, dedup.StateUnknown, dedup.StateFailed} {
		m.oldest[st] = oldest.WithLabelValues(string(st))
	}
	return m
}

// Rejected counts a channel connection or telegram refused before the
// ledger, for reason (one of the Reject constants).
func (m *Relay) Rejected(reason string) {
	if m == nil {
		return
	}
	if c, ok := m.rejected[reason]; ok {
		c.Inc()
	}
}

// ClockSkew records the last measured difference between the ledger's
// clock and the host's.
func (m *Relay) ClockSkew(d time.Duration) {
	if m != nil {
		m.clockSkew.Set(d.Seconds())
	}
}

// ClockStep counts a step of the host's wall clock.
func (m *Relay) ClockStep() {
	if m != nil {
		m.clockSteps.Inc()
	}
}

// AgeDecisionSkipped counts an age decision (AgeDecisionSweep,
// AgeDecisionLease) not taken because the clocks disagreed.
func (m *Relay) AgeDecisionSkipped(what string) {
	if m == nil {
		return
	}
	if c, ok := m.ageSkipped[what]; ok {
		c.Inc()
	}
}

// CertExpiry sets the NotAfter of the loaded certificate cert (one of the
// Cert constants).
func (m *Relay) CertExpiry(cert string, notAfter time.Time) {
	if m == nil {
		return
	}
	m.certExpiry.WithLabelValues(cert).Set(float64(notAfter.Unix()))
}

// Reply counts a reply written to a channel.
func (m *Relay) Reply(code string) {
	if m == nil {
		return
	}
	c, ok := m.replyByCode.Load(code)
	if !ok {
		c, _ = m.replyByCode.LoadOrStore(code, m.replies.WithLabelValues(code))
	}
	c.(prometheus.Counter).Inc()
}

// LedgerAnswer counts a request answered from an existing row in state.
func (m *Relay) LedgerAnswer(state dedup.State) {
	if m == nil {
		return
	}
	if c, ok := m.answers[state]; ok {
		c.Inc()
	}
}

// CoreRequest counts one POST to the core that ended in state, and its
// duration, with the transfer's trace id as the exemplar ("" for none).
func (m *Relay) CoreRequest(state dedup.State, d time.Duration, traceID string) {
	if m == nil {
		return
	}
	if c, ok := m.coreRequests[state]; ok {
		c.Inc()
	}
	observe(m.coreDuration, d, traceID)
}

// Transaction observes one telegram's time from arrival to reply, with its
// trace id as the exemplar ("" for none): a dashboard's slow bucket links
// to a trace that fell in it.
func (m *Relay) Transaction(d time.Duration, traceID string) {
	if m != nil {
		observe(m.txDuration, d, traceID)
	}
}

// observe observes d on h, with an exemplar when traceID is set.
func observe(h prometheus.Histogram, d time.Duration, traceID string) {
	if traceID == "" {
		h.Observe(d.Seconds())
		return
	}
	h.(prometheus.ExemplarObserver).ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": traceID})
}

// Inflight adds n to the transactions between claim and recorded outcome.
func (m *Relay) Inflight(n int) {
	if m != nil {
		m.inflight.Add(float64(n))
	}
}

// Connections adds n to the open channel connections.
func (m *Relay) Connections(n int) {
	if m != nil {
		m.conns.Add(float64(n))
	}
}

// Commit observes one ledger commit carrying writes writes.
func (m *Relay) Commit(d time.Duration, writes int) {
	if m != nil {
		m.commitSeconds.Observe(d.Seconds())
		m.commitWrites.Observe(float64(writes))
	}
}

// NotCommitted counts a write the ledger judged not a commit, for reason
// (ledger.NotCommittedNotPrimary or ledger.NotCommittedWarning).
func (m *Relay) NotCommitted(reason string) {
	if m == nil {
		return
	}
	if c, ok := m.notCommitted[reason]; ok {
		c.Inc()
	}
}

// SetLedgerStats sets the ledger gauges from one reading.
func (m *Relay) SetLedgerStats(stats []ledger.StateStat) {
	if m == nil {
		return
	}
	for _, s := range stats {
		if g, ok := m.rows[s.State]; ok {
			g.Set(float64(s.Rows))
		}
		if g, ok := m.oldest[s.State]; ok {
			g.Set(s.Oldest.Seconds())
		}
	}
}

// GaugeLimit bounds each state's count in a refresh of the ledger gauges,
// so that the refresh reads at most this many index entries per state
// whatever the ledger's size (a whole count of 10 million DONE rows reads
// hundreds of megabytes of index every refresh). A state past it is
// counted by the background counter instead.
const GaugeLimit = 100_000

// countSlice is how many index entries one step of the background count
// reads; countIdle is how many times as long as the step took it then
// sleeps: under 5 % of one core, and no read snapshot held for longer
// than a step (a held snapshot keeps SQLite's WAL from being checkpointed).
const (
	countSlice = 10_000
	countIdle  = 19
)

// Server is the relay's operator endpoint.
type Server struct {
	m       *Relay
	l       ledger.Ledger
	every   time.Duration
	serving func() bool
	log     *slog.Logger

	// limit and slice are GaugeLimit and countSlice (tests shrink them).
	limit int64
	slice int
	// mu guards large and counted: the states whose refresh stopped at
	// limit, and the last whole background count of each.
	mu      sync.Mutex
	large   map[dedup.State]bool
	counted map[dedup.State]int64
}

// NewServer returns the endpoint for m, reading l for the ledger gauges
// every `every` (0: RefreshEvery) and asking serving whether the channel
// listener accepts.
func NewServer(m *Relay, l ledger.Ledger, every time.Duration, serving func() bool) *Server {
	if every <= 0 {
		every = RefreshEvery
	}
	return &Server{m: m, l: l, every: every, serving: serving, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		limit: GaugeLimit, slice: countSlice, large: map[dedup.State]bool{}, counted: map[dedup.State]int64{}}
}

// SetLogger sets where /readyz logs why the relay is not ready (the
// network is told only which part is not).
func (s *Server) SetLogger(l *slog.Logger) { s.log = l }

// Refresh reads the ledger's per-state counts once, each bounded by
// GaugeLimit, and sets the gauges. A state that reached the limit shows
// the background counter's last whole count of it (RunRefresher), or the
// limit itself until the first count ends.
func (s *Server) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stats, err := s.l.Stats(ctx, s.limit)
	if err != nil {
		return err
	}
	s.mu.Lock()
	for i, st := range stats {
		if !st.AtLeast {
			delete(s.large, st.State)
			delete(s.counted, st.State)
			continue
		}
		s.large[st.State] = true
		if n, ok := s.counted[st.State]; ok && n > st.Rows {
			stats[i].Rows = n
		}
	}
	s.mu.Unlock()
	s.m.SetLedgerStats(stats)
	open, err := s.l.OpenProposals(ctx)
	if err != nil {
		return err
	}
	s.m.openProposals.Set(float64(len(open)))
	return nil
}

// RunRefresher refreshes the ledger gauges until ctx ends, and counts the
// states too large for a refresh in the background; errors go to onError
// (the readiness check reports the ledger's health itself).
func (s *Server) RunRefresher(ctx context.Context, onError func(error)) {
	go s.countLarge(ctx, onError)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		if err := s.Refresh(ctx); err != nil && ctx.Err() == nil && onError != nil {
			onError(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// countLarge counts, every refresh interval, each state the last refresh
// found at GaugeLimit or more, slice by slice, and keeps the whole count
// for the next refreshes: O(rows) work spread thin, never on a refresh.
func (s *Server) countLarge(ctx context.Context, onError func(error)) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		s.mu.Lock()
		var states []dedup.State
		for _, st := range ledger.States {
			if s.large[st] {
				states = append(states, st)
			}
		}
		s.mu.Unlock()
		for _, st := range states {
			n, err := s.countState(ctx, st)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				if onError != nil {
					onError(err)
				}
				continue
			}
			s.mu.Lock()
			if s.large[st] {
				s.counted[st] = n
			}
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// countState counts state's rows in slices of s.slice, sleeping countIdle
// times each slice's duration after it.
func (s *Server) countState(ctx context.Context, state dedup.State) (int64, error) {
	var total int64
	var after *ledger.Mark
	for {
		start := time.Now()
		n, next, err := s.l.CountSlice(ctx, state, after, s.slice)
		if err != nil {
			return 0, err
		}
		total += n
		if next == nil {
			return total, nil
		}
		after = next
		idle := time.NewTimer(time.Since(start) * countIdle)
		select {
		case <-ctx.Done():
			idle.Stop()
			return 0, ctx.Err()
		case <-idle.C:
		}
	}
}

// readyProbeGUID is read by /readyz: a GUID no channel sends.
const readyProbeGUID = "00000000RDY000000000000000000000"

// Handler serves /metrics, /healthz and /readyz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{Registry: s.m.reg,
		// OpenMetrics when the scraper asks for it: the histograms'
		// exemplars (trace ids) are only in that format.
		EnableOpenMetrics: true}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if why, err := s.notReady(r.Context()); why != "" {
			s.log.Warn("readiness check failed", "part", why, "error", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, why)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// notReady says which part is not ready ("" if all are) and, for the log
// only, why: an error may name a database host.
func (s *Server) notReady(ctx context.Context) (string, error) {
	if s.serving != nil && !s.serving() {
		return "not ready: listener", errors.New("the channel listener is not accepting")
	}
	// A ledger whose file was found damaged answers reads but refuses
	// every write: not ready, whatever a read says.
	if d, ok := s.l.(interface{ Damaged() error }); ok {
		if err := d.Damaged(); err != nil {
			return "not ready: ledger", err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	if _, err := s.l.Get(ctx, readyProbeGUID); err != nil {
		return "not ready: ledger", fmt.Errorf("the ledger did not answer a read within %v: %w", ReadyTimeout, err)
	}
	return "", nil
}
