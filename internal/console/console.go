// Package console is the operator's console: the in-doubt queue, a
// transfer's story and four-eyes decisions in a browser, over HTTPS only,
// each person known by the operator certificate their browser presents
// (docs/security.md "Who decides"; the spec's settle.md "Who a person
// is"). It reads through ledger.Ledger and decides through
// settle.Desk, the same fenced decisions as settle: it has no SQL of
// its own.
//
// Who you are: the TLS listener requires a client certificate that chains
// to the operator CA; the person is its URI SAN urn:dedup:operator:NAME,
// and a second URI SAN urn:dedup:role:viewer or urn:dedup:role:operator
// says what they may do (viewers read; operators also propose, approve and
// reject). No role SAN is a viewer. Every action is a POST with a token
// bound to the certificate, its Origin or Sec-Fetch-Site checked; pages
// carry a strict Content-Security-Policy and no script at all.
package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"dedup/internal/settle"
	"dedup/ledger"
)

// Roles a certificate may name.
const (
	RoleViewer   = "viewer"
	RoleOperator = "operator"
)

// The URI SANs of an operator certificate.
const (
	operatorSAN = "urn:dedup:operator:"
	roleSAN     = "urn:dedup:role:"
)

// nameRE is what an operator's name may be: it appears in events, logs
// and pages.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

//go:embed templates/*.html static/*
var assets embed.FS

// Options configure a Server.
type Options struct {
	// Host names this host in the events' actors (console:NAME(cert
	// SERIAL)@HOST).
	Host string
	// TextfileDir is node_exporter's textfile directory, where the jobs
	// write their last runs ("" to show none).
	TextfileDir string
	// MaxAttempts is reprocess's --max-attempts: FAILED rows at it are
	// shown as exhausted.
	MaxAttempts int
	// Log receives one line per action and per refused request.
	Log *slog.Logger
	// Registerer receives the console's metrics (nil: none).
	Registerer prometheus.Registerer
	// Now is the host's clock (tests); nil: time.Now.
	Now func() time.Time
}

// Server serves the console's pages over a ledger.
type Server struct {
	l     ledger.Ledger
	desk  settle.Desk
	opts  Options
	key   []byte // the CSRF tokens' key, made at start
	pages map[string]*template.Template
	limit *limiter
	m     consoleMetrics
}

type consoleMetrics struct {
	requests *prometheus.CounterVec
	actions  *prometheus.CounterVec
	refused  *prometheus.CounterVec
}

// New returns a console over l.
func New(l ledger.Ledger, opts Options) (*Server, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Host == "" {
		opts.Host = settle.Hostname()
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 3
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("console: session key: %w", err)
	}
	s := &Server{l: l, desk: settle.DeskFor(l), opts: opts, key: key, pages: map[string]*template.Template{},
		limit: newLimiter(opts.Now)}
	for _, p := range []string{"overview", "doubt", "transfer", "proposals", "audit", "reconcile", "refused"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+p+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", p, err)
		}
		s.pages[p] = t
	}
	s.m = consoleMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_console_requests_total",
			Help: "Console requests answered, by HTTP status code."}, []string{"code"}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_console_actions_total",
			Help: "Console actions (propose, approve, reject, close_finding) by outcome: done, refused."}, []string{"action", "outcome"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dedup_console_requests_refused_total",
			Help: "Console requests refused before any page: no operator certificate, a viewer's action, a bad token, too many requests."}, []string{"reason"}),
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{s.m.requests, s.m.actions, s.m.refused} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("console: metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Handler is the console's HTTP handler, to be served over TLS that
// requires a client certificate chaining to the operator CA (certs.Set's
// ServerConfig with the CA: an unknown CA, an expired certificate or none
// at all fail the handshake, and no page is served to them).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.page(s.overview))
	mux.HandleFunc("GET /doubt", s.page(s.doubt))
	mux.HandleFunc("GET /tx", s.page(s.search))
	mux.HandleFunc("GET /tx/{guid}", s.page(s.transfer))
	mux.HandleFunc("POST /tx/{guid}/propose", s.action("propose", s.propose))
	mux.HandleFunc("POST /proposals/{id}/approve", s.action("approve", s.approve))
	mux.HandleFunc("POST /proposals/{id}/reject", s.action("reject", s.reject))
	mux.HandleFunc("GET /proposals", s.page(s.proposals))
	mux.HandleFunc("GET /audit", s.page(s.audit))
	mux.HandleFunc("GET /reconcile", s.page(s.reconcile))
	mux.HandleFunc("POST /findings/{id}/close", s.action("close_finding", s.closeFinding))
	return s.secure(mux)
}

// operator is the person a request comes from, and what they may do.
type operator struct {
	settle.Person
	Role string
}

func (o operator) CanDecide() bool { return o.Role == RoleOperator }

// errNoOperator is why a request without an operator identity is refused.
var errNoOperator = errors.New("no operator certificate")

// identify reads the verified client certificate's operator identity.
func identify(r *http.Request, host string) (operator, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return operator{}, fmt.Errorf("%w: the connection carries no verified client certificate", errNoOperator)
	}
	cert := r.TLS.VerifiedChains[0][0]
	var names, roles []string
	for _, u := range cert.URIs {
		v := u.String()
		switch {
		case strings.HasPrefix(v, operatorSAN):
			names = append(names, strings.TrimPrefix(v, operatorSAN))
		case strings.HasPrefix(v, roleSAN):
			roles = append(roles, strings.TrimPrefix(v, roleSAN))
		}
	}
	if len(names) != 1 || !nameRE.MatchString(names[0]) {
		return operator{}, fmt.Errorf("%w: the certificate (serial %X) must name exactly one operator as a URI SAN %sNAME, NAME of [a-z0-9._-]", errNoOperator, cert.SerialNumber, operatorSAN)
	}
	role := RoleViewer
	switch {
	case len(roles) > 1:
		return operator{}, fmt.Errorf("%w: the certificate (serial %X) names %d roles; it must name one", errNoOperator, cert.SerialNumber, len(roles))
	case len(roles) == 1 && roles[0] == RoleOperator:
		role = RoleOperator
	case len(roles) == 1 && roles[0] != RoleViewer:
		return operator{}, fmt.Errorf("%w: the certificate (serial %X) names the unknown role %q", errNoOperator, cert.SerialNumber, roles[0])
	}
	return operator{Person: settle.Person{Auth: settle.AuthCertificate, Name: names[0],
		Serial: fmt.Sprintf("%X", cert.SerialNumber), Host: host}, Role: role}, nil
}

// token is the CSRF token of a person: bound to their certificate and to
// this run of the console (its key is made at start).
func (s *Server) token(o operator) string {
	mac := hmac.New(sha256.New, s.key)
	fmt.Fprintf(mac, "csrf\x00%s\x00%s", o.Name, o.Serial)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// secure sets the headers every answer carries and counts the answers.
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Strict-Transport-Security", "max-age=31536000")
		// same-origin: no-referrer would make browsers send "Origin: null"
		// with the forms, which the origin check must refuse.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		s.m.requests.WithLabelValues(fmt.Sprint(rec.code)).Inc()
	})
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

// refuse answers a refused request with a page that says why, and logs it.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, o *operator, code int, reason, why string) {
	who := "-"
	if o != nil {
		who = o.Actor()
	}
	s.m.refused.WithLabelValues(reason).Inc()
	s.opts.Log.Warn("console: refused", "who", who, "method", r.Method, "path", r.URL.Path, "status", code, "why", why)
	w.WriteHeader(code)
	s.render(w, "refused", o, map[string]any{"Code": code, "Why": why})
}

// page wraps a GET handler: the person must be known by their certificate.
func (s *Server) page(h func(w http.ResponseWriter, r *http.Request, o operator)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		o, err := identify(r, s.opts.Host)
		if err != nil {
			s.refuse(w, r, nil, http.StatusForbidden, "no_operator", err.Error())
			return
		}
		if !s.limit.allow(o.Name, false) {
			s.refuse(w, r, &o, http.StatusTooManyRequests, "rate", "too many requests; try again in a few seconds")
			return
		}
		h(w, r, o)
	}
}

// action wraps a POST handler: an operator (not a viewer), the token bound
// to their certificate, a same-origin request, a bounded body.
func (s *Server) action(name string, h func(w http.ResponseWriter, r *http.Request, o operator) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		o, err := identify(r, s.opts.Host)
		if err != nil {
			s.refuse(w, r, nil, http.StatusForbidden, "no_operator", err.Error())
			return
		}
		if !s.limit.allow(o.Name, true) {
			s.refuse(w, r, &o, http.StatusTooManyRequests, "rate", "too many actions; try again in a minute")
			return
		}
		if !o.CanDecide() {
			s.refuse(w, r, &o, http.StatusForbidden, "viewer", "your certificate names you a viewer: viewers read, operators decide")
			return
		}
		if why := sameOrigin(r); why != "" {
			s.refuse(w, r, &o, http.StatusForbidden, "origin", why)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
		if err := r.ParseForm(); err != nil {
			s.refuse(w, r, &o, http.StatusBadRequest, "form", "the form could not be read: "+err.Error())
			return
		}
		if got := r.PostForm.Get("csrf"); subtle.ConstantTimeCompare([]byte(got), []byte(s.token(o))) != 1 {
			s.refuse(w, r, &o, http.StatusForbidden, "token", "the form's token is missing or not yours (reload the page and try again)")
			return
		}
		err = h(w, r, o)
		outcome := "done"
		if err != nil {
			outcome = "refused"
		}
		s.m.actions.WithLabelValues(name, outcome).Inc()
		if err == nil {
			return
		}
		code := http.StatusConflict
		switch {
		case errors.Is(err, settle.ErrUsage):
			code = http.StatusBadRequest
		case errors.Is(err, errSamePerson), strings.Contains(err.Error(), "another person"):
			code = http.StatusForbidden
		case !errors.Is(err, settle.ErrRefused):
			// The ledger could not be read or written: still a page that
			// says so, never a 5xx with nothing in it.
			code = http.StatusServiceUnavailable
		}
		s.opts.Log.Warn("console: action refused", "who", o.Actor(), "action", name, "path", r.URL.Path, "status", code, "why", err.Error())
		w.WriteHeader(code)
		s.render(w, "refused", &o, map[string]any{"Code": code, "Why": strings.TrimPrefix(strings.TrimPrefix(err.Error(), "refused: "), "usage: ")})
	}
}

// errSamePerson is the console's own refusal of a decision by the
// proposer, before the ledger is asked.
var errSamePerson = errors.New("the same person")

// sameOrigin refuses a request another site made the browser send.
func sameOrigin(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return fmt.Sprintf("the request came from another site (Sec-Fetch-Site: %s)", site)
	}
	if origin := r.Header.Get("Origin"); origin != "" && origin != "https://"+r.Host {
		return fmt.Sprintf("the request came from another origin (%s)", origin)
	}
	return ""
}

// limiter bounds each person's requests: reads per second, actions per
// minute.
type limiter struct {
	mu      sync.Mutex
	now     func() time.Time
	buckets map[string]*bucket
}

type bucket struct {
	reads, actions float64
	at             time.Time
}

const (
	readsPerSecond   = 20.0
	readBurst        = 60.0
	actionsPerMinute = 30.0
	actionBurst      = 10.0
)

func newLimiter(now func() time.Time) *limiter {
	return &limiter{now: now, buckets: map[string]*bucket{}}
}

func (l *limiter) allow(who string, action bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.buckets[who]
	if !ok {
		b = &bucket{reads: readBurst, actions: actionBurst, at: now}
		l.buckets[who] = b
	}
	dt := now.Sub(b.at).Seconds()
	b.at = now
	b.reads = min(readBurst, b.reads+dt*readsPerSecond)
	b.actions = min(actionBurst, b.actions+dt*actionsPerMinute/60)
	if b.reads < 1 || action && b.actions < 1 {
		return false
	}
	b.reads--
	if action {
		b.actions--
	}
	return true
}
