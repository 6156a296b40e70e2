// Package fixturecore is the fixture core of docs/core-api.md: a small, deliberately
// non-idempotent core banking system for tests, smoke runs, benchmarks and
// demos. Every POST it accepts is applied, even one whose GUID it has seen:
// a second POST debits again. /_stats tells whether that ever happened.
package fixturecore

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// OpeningBalance is every existing account's balance at start or reset.
const OpeningBalance = 100_000_000

// MissingAccount is the one 14-digit account that does not exist.
const MissingAccount = "00000000000000"

// Config configures a Core.
type Config struct {
	// Slow is how long a SLOW memo waits before applying.
	Slow time.Duration
	// StatePath, if set, is where the core keeps its state durably, saved
	// after every change and loaded at start.
	StatePath string
	// Logger logs one line per request; nil logs nothing.
	Logger *slog.Logger
}

// Stats is the JSON of GET /_stats.
type Stats struct {
	Transfers     int            `json:"transfers"`
	ByGUID        map[string]int `json:"by_guid"`
	AppliedByGUID map[string]int `json:"applied_by_guid"`
	LookupsByGUID map[string]int `json:"lookups_by_guid"`
	// TraceparentByGUID is the W3C traceparent header of the last request
	// (POST or GET) about each GUID that carried one: how the tests see
	// that the relay's trace reached the core.
	TraceparentByGUID map[string]string `json:"traceparent_by_guid,omitempty"`
}

// Applied is one applied transfer as the core answers it.
type Applied struct {
	GUID        string `json:"guid"`
	Ref         string `json:"ref"`
	Balance     int64  `json:"balance"`
	ProcessedAt string `json:"processed_at"`
}

// JournalLine is one application in the core's journal (docs/core-api.md,
// docs/reconcile.md): the POST's accounts and amount with what the core
// answered.
type JournalLine struct {
	GUID        string `json:"guid"`
	Ref         string `json:"ref"`
	From        string `json:"from"`
	To          string `json:"to"`
	Amount      int64  `json:"amount"`
	Balance     int64  `json:"balance"`
	ProcessedAt string `json:"processed_at"`
}

// JournalHeader is the journal's first line.
const JournalHeader = "guid,ref,from,to,amount,balance,processed_at"

// state is everything the core persists.
type state struct {
	Stats
	Balances map[string]int64   `json:"balances"`
	Applied  map[string]Applied `json:"applied"` // first application per GUID
	Seq      int64              `json:"seq"`
	// Journal is every application, in the order applied: a GUID applied
	// twice has two lines.
	Journal []JournalLine `json:"journal"`
}

func newState() state {
	return state{
		Stats: Stats{ByGUID: map[string]int{}, AppliedByGUID: map[string]int{}, LookupsByGUID: map[string]int{},
			TraceparentByGUID: map[string]string{}},
		Balances: map[string]int64{},
		Applied:  map[string]Applied{},
	}
}

// Core is the fixture core. It is safe for concurrent use.
type Core struct {
	cfg Config
	mu  sync.Mutex
	st  state
}

// New returns a core, loading its state from cfg.StatePath if that exists.
func New(cfg Config) (*Core, error) {
	c := &Core{cfg: cfg, st: newState()}
	if cfg.StatePath != "" {
		b, err := os.ReadFile(cfg.StatePath)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("load state %s: %w", cfg.StatePath, err)
		default:
			st := newState()
			if err := json.Unmarshal(b, &st); err != nil {
				return nil, fmt.Errorf("load state %s: %w", cfg.StatePath, err)
			}
			c.st = st
		}
	}
	return c, nil
}

// save writes the state durably (write, fsync, rename, fsync the directory).
// It is called with c.mu held.
func (c *Core) save() error {
	if c.cfg.StatePath == "" {
		return nil
	}
	b, err := json.Marshal(&c.st)
	if err != nil {
		return err
	}
	tmp := c.cfg.StatePath + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.cfg.StatePath); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(c.cfg.StatePath))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Stats returns a copy of the counters.
func (c *Core) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := func(m map[string]int) map[string]int {
		o := make(map[string]int, len(m))
		for k, v := range m {
			o[k] = v
		}
		return o
	}
	tps := make(map[string]string, len(c.st.TraceparentByGUID))
	for k, v := range c.st.TraceparentByGUID {
		tps[k] = v
	}
	return Stats{Transfers: c.st.Transfers, ByGUID: cp(c.st.ByGUID), AppliedByGUID: cp(c.st.AppliedByGUID), LookupsByGUID: cp(c.st.LookupsByGUID),
		TraceparentByGUID: tps}
}

func (c *Core) balance(acct string) int64 {
	if b, ok := c.st.Balances[acct]; ok {
		return b
	}
	return OpeningBalance
}

type transferJSON struct {
	GUID   string `json:"guid"`
	From   string `json:"from"`
	To     string `json:"to"`
	Amount int64  `json:"amount"`
	Memo   string `json:"memo"`
}

func accountExists(a string) bool {
	if len(a) != 14 || a == MissingAccount {
		return false
	}
	for i := 0; i < len(a); i++ {
		if a[i] < '0' || a[i] > '9' {
			return false
		}
	}
	return true
}

// apply applies one transfer, or rejects it with a B2xx code.
func (c *Core) apply(t transferJSON) (Applied, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case t.Amount <= 0:
		return Applied{}, "B203", nil
	case t.From == t.To:
		return Applied{}, "B204", nil
	case !accountExists(t.From) || !accountExists(t.To):
		return Applied{}, "B202", nil
	case t.Amount > c.balance(t.From):
		return Applied{}, "B201", nil
	}
	c.st.Balances[t.From] = c.balance(t.From) - t.Amount
	c.st.Balances[t.To] = c.balance(t.To) + t.Amount
	c.st.Seq++
	a := Applied{GUID: t.GUID, Ref: fmt.Sprintf("C%015d", c.st.Seq), Balance: c.st.Balances[t.From], ProcessedAt: time.Now().Format("20060102150405")}
	if _, seen := c.st.Applied[t.GUID]; !seen {
		c.st.Applied[t.GUID] = a
	}
	c.st.AppliedByGUID[t.GUID]++
	c.st.Transfers++
	c.st.Journal = append(c.st.Journal, JournalLine{GUID: t.GUID, Ref: a.Ref, From: t.From, To: t.To, Amount: t.Amount,
		Balance: a.Balance, ProcessedAt: a.ProcessedAt})
	return a, "", c.save()
}

// Handler returns the core's HTTP API.
func (c *Core) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/transfers", c.postTransfer)
	mux.HandleFunc("GET /v1/transfers/{guid}", c.getTransfer)
	mux.HandleFunc("GET /v1/journal", c.getJournal)
	// Anything else is logged too, so that a test can see every request a
	// relay made (the relay must send nothing but its claimed transfers).
	// The 404 carries no NOT_FOUND code: it proves nothing about a GUID.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.log("unknown request", "method", r.Method, "path", r.URL.Path, "status", 404)
		writeJSON(w, http.StatusNotFound, map[string]string{"code": "NO_SUCH_PATH"})
	})
	mux.HandleFunc("GET /_stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, c.Stats()) })
	mux.HandleFunc("POST /_reset", func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.st = newState()
		err := c.save()
		c.mu.Unlock()
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"code": "STATE", "error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "reset"})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (c *Core) log(msg string, args ...any) {
	if c.cfg.Logger != nil {
		c.cfg.Logger.Info(msg, args...)
	}
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func (c *Core) postTransfer(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var t transferJSON
	if err == nil {
		err = json.Unmarshal(body, &t)
	}
	if err != nil {
		c.log("POST /v1/transfers", "status", 400, "error", err)
		writeJSON(w, http.StatusBadRequest, map[string]string{"code": "BAD_REQUEST"})
		return
	}
	c.mu.Lock()
	c.st.ByGUID[t.GUID]++
	c.traceparent(t.GUID, r)
	err = c.save()
	c.mu.Unlock()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"code": "STATE"})
		return
	}
	switch {
	case strings.HasPrefix(t.Memo, "DROP"):
		c.log("POST /v1/transfers", "guid", t.GUID, "memo", "DROP", "status", "hang-up, not applied")
		hangUp(w)
		return
	case strings.HasPrefix(t.Memo, "FAIL500"):
		c.log("POST /v1/transfers", "guid", t.GUID, "memo", "FAIL500", "status", 500)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"code": "E500"})
		return
	case strings.HasPrefix(t.Memo, "SLOW"):
		// Applied after the wait even if the caller has gone away.
		time.Sleep(c.cfg.Slow)
	}
	a, code, err := c.apply(t)
	if err != nil {
		c.log("POST /v1/transfers", "guid", t.GUID, "status", 500, "error", err)
		writeJSON(w, http.StatusInternalServerError, map[string]string{"code": "STATE"})
		return
	}
	if strings.HasPrefix(t.Memo, "APPLYDROP") {
		c.log("POST /v1/transfers", "guid", t.GUID, "memo", "APPLYDROP", "code", code, "ref", a.Ref, "status", "hang-up after applying")
		hangUp(w)
		return
	}
	if code != "" {
		c.log("POST /v1/transfers", "guid", t.GUID, "status", 422, "code", code)
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"code": code})
		return
	}
	c.log("POST /v1/transfers", "guid", t.GUID, "status", 200, "ref", a.Ref)
	writeJSON(w, http.StatusOK, a)
}

// traceparent records the request's traceparent header for guid. It is
// called with c.mu held.
func (c *Core) traceparent(guid string, r *http.Request) {
	tp := r.Header.Get("traceparent")
	if tp == "" {
		return
	}
	if c.st.TraceparentByGUID == nil { // a state file saved before the field
		c.st.TraceparentByGUID = map[string]string{}
	}
	c.st.TraceparentByGUID[guid] = tp
}

func (c *Core) getTransfer(w http.ResponseWriter, r *http.Request) {
	guid := r.PathValue("guid")
	c.mu.Lock()
	c.st.LookupsByGUID[guid]++
	c.traceparent(guid, r)
	a, ok := c.st.Applied[guid]
	err := c.save()
	c.mu.Unlock()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"code": "STATE"})
		return
	}
	if !ok {
		c.log("GET /v1/transfers", "guid", guid, "status", 404)
		writeJSON(w, http.StatusNotFound, map[string]string{"code": "NOT_FOUND"})
		return
	}
	c.log("GET /v1/transfers", "guid", guid, "status", 200, "ref", a.Ref)
	writeJSON(w, http.StatusOK, a)
}

// Journal returns the lines of business date date (YYYYMMDD), in the
// order applied.
func (c *Core) Journal(date string) []JournalLine {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []JournalLine
	for _, l := range c.st.Journal {
		if strings.HasPrefix(l.ProcessedAt, date) {
			out = append(out, l)
		}
	}
	return out
}

// getJournal streams the journal of ?date=YYYYMMDD as CSV.
func (c *Core) getJournal(w http.ResponseWriter, r *http.Request) {
	date := r.URL.Query().Get("date")
	if _, err := time.Parse("20060102", date); err != nil || len(date) != 8 {
		c.log("GET /v1/journal", "date", date, "status", 400)
		writeJSON(w, http.StatusBadRequest, map[string]string{"code": "BAD_DATE"})
		return
	}
	lines := c.Journal(date)
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	bw.WriteString(JournalHeader + "\n")
	for _, l := range lines {
		fmt.Fprintf(bw, "%s,%s,%s,%s,%d,%d,%s\n", l.GUID, l.Ref, l.From, l.To, l.Amount, l.Balance, l.ProcessedAt)
	}
	if err := bw.Flush(); err != nil {
		c.log("GET /v1/journal", "date", date, "lines", len(lines), "error", err)
		return
	}
	c.log("GET /v1/journal", "date", date, "status", 200, "lines", len(lines))
}

// Server is a running fixture core.
type Server struct {
	Core *Core
	Addr string // HOST:PORT it listens on
	URL  string // http://HOST:PORT
	srv  *http.Server
	done chan error
}

// Listen starts core on addr (port 0 picks a free port).
func Listen(core *Core, addr string) (*Server, error) { return ListenTLS(core, addr, nil) }

// ListenTLS is Listen for https with cfg (nil: plain http). With client
// certificates required by cfg, a client without one is refused by the
// TLS layer before any request is read.
func ListenTLS(core *Core, addr string, cfg *tls.Config) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	scheme := "http://"
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"http/1.1"}
		ln, scheme = tls.NewListener(ln, cfg), "https://"
	}
	s := &Server{Core: core, Addr: ln.Addr().String(), URL: scheme + ln.Addr().String(), done: make(chan error, 1),
		srv: &http.Server{Handler: core.Handler(), IdleTimeout: 120 * time.Second, ReadHeaderTimeout: 10 * time.Second}}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server at once, dropping connections.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	return err
}

// Shutdown stops accepting and waits up to timeout for requests in flight.
func (s *Server) Shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}
