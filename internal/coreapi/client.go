// Package coreapi is the client of the core banking system's HTTP API
// (docs/core-api.md), shared by the relay, reprocess and resolve (transfers
// and inquiries) and reconcile (the day's journal).
//
// The core is not idempotent, so the client makes exactly one POST per call:
// no retry layer, no redirects followed, no idempotency headers (which would
// let Go's transport replay a POST on a broken keep-alive connection), no
// proxy from the environment. Whether a connection to the core was obtained
// decides between "surely not sent" (E902) and "unknown" (E901).
package coreapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"dedup"
	"dedup/internal/tracing"
	"dedup/lhstd"
)

// maxBody bounds how much of an answer the client reads.
const maxBody = 1 << 20

// IdleConnTimeout is shorter than the core's own idle timeout (120 s for the
// fixture core) so that a pooled connection is rarely closed under a request.
const IdleConnTimeout = 30 * time.Second

// TransferRequest is the JSON body of POST /v1/transfers.
type TransferRequest struct {
	GUID   string `json:"guid"`
	From   string `json:"from"`
	To     string `json:"to"`
	Amount int64  `json:"amount"`
	Memo   string `json:"memo"`
}

// NewTransferRequest maps a validated request telegram to the core's JSON.
func NewTransferRequest(r *lhstd.Request) TransferRequest {
	return TransferRequest{GUID: r.GUID, From: r.Transfer.From, To: r.Transfer.To, Amount: r.Transfer.Amount, Memo: r.Transfer.Memo}
}

// Applied is the core's JSON for an applied transfer (a POST's 200 and a
// lookup's 200).
type Applied struct {
	GUID        string `json:"guid,omitempty"`
	Ref         string `json:"ref"`
	Balance     int64  `json:"balance"`
	ProcessedAt string `json:"processed_at"`
}

// Result is the relay's reading of one transfer call (docs/core-api.md, the
// complete mapping).
type Result struct {
	State  dedup.State // DONE, UNKNOWN or FAILED
	Code   string      // 0000, B2xx, E500, E901 or E902
	Body   []byte      // the 45-byte reply body for 0000; nil otherwise
	Status int         // the HTTP status, 0 if none was read
	Detail string      // why, for the log, when not a clean answer
	// LeaseExpired: the holder's lease ended before a byte of the request
	// was written; nothing was sent (State FAILED, Code E902).
	LeaseExpired bool
	// NoConnection: no connection to the core was obtained (E902).
	NoConnection bool
}

// Confirm is a holder's last check of its claim, made after a connection
// to the core was obtained and before the request's first byte: an error
// means "do not send".
type Confirm func(ctx context.Context) error

// Applied reports whether the core applied the transfer.
func (r Result) Applied() bool { return r.Code == dedup.CodeOK }

// LookupVerdict is what an inquiry proves.
type LookupVerdict int

// Lookup verdicts.
const (
	// Undetermined: no proof either way (connection error, timeout, 5xx,
	// a bare 404, an unreadable 200). The row must stay as it is.
	Undetermined LookupVerdict = iota
	// Found: the core applied the transfer.
	Found
	// NotFound: 404 with code NOT_FOUND: the core has no applied transfer.
	NotFound
)

// LookupResult is the reading of one inquiry.
type LookupResult struct {
	Verdict LookupVerdict
	Body    []byte // the 45-byte reply body when Found
	Status  int
	Detail  string
}

// Client calls one core. It is safe for concurrent use.
type Client struct {
	base           string
	addr           string // host:port of the core
	connectTimeout time.Duration
	timeout        time.Duration
	dialer         *dialer
	http           *http.Client
	// onConn, if set, is told of the connection each request is handed
	// (this package's tests count its writes); nil otherwise.
	onConn func(*leaseConn)
}

// Config configures a Client.
type Config struct {
	BaseURL        string        // e.g. http://127.0.0.1:9201 or https://core:9443
	ConnectTimeout time.Duration // to obtain a connection (TCP and TLS handshake); then E902
	Timeout        time.Duration // the whole exchange once connected; then E901
	MaxConns       int           // idle keep-alive connections kept per host; 0 means 512
	// TLS configures https (roots, client certificate); nil means the
	// system roots and no client certificate. Ignored for http. The
	// server name is always verified: it defaults to the URL's host.
	TLS *tls.Config
	// Dial, if set, obtains the connection in place of the TCP connect:
	// the simulation's in-memory network (internal/testbed/sim). Every
	// binary leaves it nil: the TCP connect, with TCP_USER_TIMEOUT.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// CheckBaseURL reports what is wrong with a core base URL, so that a
// binary can refuse a bad --core before it touches anything.
func CheckBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("%q is not a core base URL: want http://HOST:PORT or https://HOST:PORT", s)
	}
	return nil
}

// New returns a client for cfg.BaseURL.
func New(cfg Config) (*Client, error) {
	if err := CheckBaseURL(cfg.BaseURL); err != nil {
		return nil, err
	}
	if cfg.ConnectTimeout <= 0 || cfg.Timeout <= 0 {
		return nil, errors.New("core timeouts must be greater than 0")
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 512
	}
	u, _ := url.Parse(cfg.BaseURL) // checked above
	d := newDialer(cfg.ConnectTimeout, cfg.Timeout)
	d.custom = cfg.Dial
	addr := u.Host
	tr := &http.Transport{
		Proxy:               nil, // never a proxy from the environment
		MaxIdleConns:        cfg.MaxConns,
		MaxIdleConnsPerHost: cfg.MaxConns,
		IdleConnTimeout:     IdleConnTimeout,
		ForceAttemptHTTP2:   false,
		DisableCompression:  true,
	}
	if u.Scheme == "https" {
		d.tls = clientTLS(cfg.TLS, u.Hostname())
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "443")
		}
		// The handshake is done by our dialer, over the lease connection:
		// the transport's own TLS (and its HTTP/2 upgrade) is never used.
		tr.DialTLSContext = d.dial
	} else {
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
		tr.DialContext = d.dial
	}
	return &Client{
		base:           strings.TrimRight(cfg.BaseURL, "/"),
		addr:           addr,
		connectTimeout: cfg.ConnectTimeout,
		timeout:        cfg.Timeout,
		dialer:         d,
		http: &http.Client{
			Transport: tr,
			// A redirect is answered as is (E901), never followed: following
			// it could apply the transfer twice.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// clientTLS completes a TLS configuration for the core at host: TLS 1.2 or
// newer, HTTP/1.1 only, the host name verified, session resumption on (a
// reconnect after an idle close costs one round trip less).
func clientTLS(base *tls.Config, host string) *tls.Config {
	var c *tls.Config
	if base != nil {
		c = base.Clone()
	} else {
		c = &tls.Config{}
	}
	if c.ServerName == "" {
		c.ServerName = host
	}
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	c.NextProtos = []string{"http/1.1"}
	if c.ClientSessionCache == nil {
		c.ClientSessionCache = tls.NewLRUClientSessionCache(64)
	}
	return c
}

// Reach reports whether a connection to the core can be obtained now: it
// opens one (TCP, and the TLS handshake for https) within the connect
// timeout and closes it, having sent nothing on it. It is how the relay
// learns that the core is reachable without sending it anything but
// transfers (no probe request: a core audits every request it gets).
func (c *Client) Reach(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	conn, err := c.dialer.dial(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	// Close the socket itself: not even a TLS close_notify is written.
	return conn.(leased).leaseConn().Conn.Close()
}

// CloseIdle closes idle pooled connections.
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }

var (
	errConnectTimeout = errors.New("connect timeout")
	errTimeout        = errors.New("timeout")
)

// exchange performs one HTTP request under the timing rule: obtaining a
// connection is bounded by the connect timeout, the rest of the exchange
// (body included) by the timeout. connected reports whether a connection was
// ever obtained; when in doubt it says true, which only ever turns an E902
// into the safe E901.
//
// lease, if not zero, is the moment after which no byte of the request may
// be written (see leaseConn); refused reports that the request was refused
// for it with nothing written.
//
// confirm, if not nil, is called once a connection was obtained and before
// any byte of the request is written; if it fails, nothing is written and
// the request counts as refused for its lease.
func (c *Client) exchange(ctx context.Context, method, url string, body []byte, lease time.Time, confirm Confirm) (status int, respBody []byte, connected, refused bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// One timer: first the connect deadline; on GotConn it is reset to the
	// exchange deadline. If it fires in between, the cause it reports is
	// read from got, so a race can only ever report "timeout" (E901).
	var got atomic.Bool
	timer := time.AfterFunc(c.connectTimeout, func() {
		if got.Load() {
			cancel(errTimeout)
		} else {
			cancel(errConnectTimeout)
		}
	})
	defer timer.Stop()
	var lcMu sync.Mutex
	var lcs []*leaseConn // every connection this request was handed (a retry gets another)
	var lastGen uint64   // the request's number on the last of them
	// The spans of a traced call: the wait for a connection, then the
	// exchange from the confirmation's end to the answer's last byte.
	_, connectSpan := tracing.Child(ctx, tracing.SpanCoreConnect)
	exchangeSpan := noSpan
	defer func() { connectSpan.End(); exchangeSpan.End() }()
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		// Connected: from here the exchange's timeout bounds the rest,
		// the confirmation below included (a confirmation cut short by
		// it refuses the request, with nothing written: E902).
		if got.CompareAndSwap(false, true) {
			timer.Reset(c.timeout)
			if connectSpan.IsRecording() {
				connectSpan.SetAttributes(tracing.AttrReused.Bool(info.Reused))
				connectSpan.End()
			}
		}
		if l, ok := info.Conn.(leased); ok {
			lc := l.leaseConn()
			gen := lc.arm(lease)
			if confirm != nil {
				// Rule 13: connected, and no byte written yet. A claim
				// that is no longer the holder's, or too old by the
				// ledger's clock, writes nothing.
				if err := confirm(ctx); err != nil {
					lc.refuse()
				}
			}
			if c.onConn != nil {
				c.onConn(lc)
			}
			if !exchangeSpan.IsRecording() {
				_, exchangeSpan = tracing.Child(ctx, tracing.SpanCoreExchange)
			}
			lcMu.Lock()
			lcs = append(lcs, lc)
			lastGen = gen
			lcMu.Unlock()
		}
	}}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), method, url, rd)
	if err != nil {
		return 0, nil, false, false, err
	}
	if body != nil {
		req.Header["Content-Type"] = jsonContentType
	}
	// W3C trace context (traceparent, tracestate) when the call is traced.
	tracing.Inject(ctx, req.Header)
	resp, err := c.http.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%v)", cause, err)
		}
		// Refused for the lease only if every connection it was handed
		// refused it and wrote nothing: then no byte left this process.
		lcMu.Lock()
		refused = len(lcs) > 0
		for _, lc := range lcs {
			refused = refused && lc.refusedUnwritten()
		}
		lcMu.Unlock()
		return 0, nil, got.Load(), refused, err
	}
	defer resp.Body.Close()
	respBody, err = io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		if cause := context.Cause(ctx); cause != nil {
			err = fmt.Errorf("%w reading body (%v)", cause, err)
		}
		return resp.StatusCode, nil, true, false, err
	}
	if len(respBody) > maxBody {
		// Not read to its end: the connection is closed unread, and so
		// aborted (rule 12).
		return resp.StatusCode, nil, true, false, fmt.Errorf("answer longer than %d bytes", maxBody)
	}
	lcMu.Lock()
	if n := len(lcs); n > 0 {
		lcs[n-1].answered(lastGen)
	}
	lcMu.Unlock()
	return resp.StatusCode, respBody, true, false, nil
}

var jsonContentType = []string{"application/json"}

// Transfer sends one POST /v1/transfers and maps the answer. It never
// repeats the request. The caller's ctx should not be tied to the channel's
// connection: a hang-up must not cancel a transfer in flight.
//
// lease is the holder's lease on its claim: no byte of the request is
// written at or after it (zero: no lease). A request refused for the lease
// with nothing written is FAILED/E902 with LeaseExpired set; refused after
// a byte was written it is E901 like any failure once connected.
//
// confirm, if not nil, is asked once a connection was obtained, just before
// the first byte of the request (docs/rules.md rule 13); an error from it
// makes the call write nothing, like an expired lease.
func (c *Client) Transfer(ctx context.Context, tr TransferRequest, lease time.Time, confirm Confirm) Result {
	ctx, span := tracing.ClientChild(ctx, tracing.SpanCore)
	res := c.transfer(ctx, tr, lease, confirm)
	endCall(span, res.Code, res.Status, res.State != dedup.StateDone, res.Detail)
	return res
}

// endCall ends a traced core call's span with what it ended in; failed
// marks the span's status an error (with detail, which names no account,
// amount or memo).
func endCall(span trace.Span, code string, status int, failed bool, detail string) {
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrCode.String(code), tracing.AttrStatus.Int(status))
		if failed {
			span.SetStatus(codes.Error, detail)
		}
	}
	span.End()
}

// noSpan is a span that records nothing.
var noSpan = trace.SpanFromContext(context.Background())

func (c *Client) transfer(ctx context.Context, tr TransferRequest, lease time.Time, confirm Confirm) Result {
	payload, err := json.Marshal(tr)
	if err != nil {
		// Cannot happen for these field types; nothing was sent.
		return Result{State: dedup.StateFailed, Code: dedup.CodeNotSent, Detail: "encode: " + err.Error()}
	}
	var unconfirmed error // why confirm said "do not send"
	if confirm != nil {
		inner := confirm
		confirm = func(ctx context.Context) error {
			err := inner(ctx)
			unconfirmed = err
			return err
		}
	}
	status, body, connected, refused, err := c.exchange(ctx, http.MethodPost, c.base+"/v1/transfers", payload, lease, confirm)
	if err != nil {
		if refused && unconfirmed != nil {
			return Result{State: dedup.StateFailed, Code: dedup.CodeNotSent, LeaseExpired: true,
				Detail: "the claim could not be confirmed before the request was written (" + unconfirmed.Error() + "): nothing sent"}
		}
		if refused {
			return Result{State: dedup.StateFailed, Code: dedup.CodeNotSent, LeaseExpired: true,
				Detail: "the claim's lease expired before the request was written (the holder was frozen or stalled): nothing sent"}
		}
		if !connected {
			return Result{State: dedup.StateFailed, Code: dedup.CodeNotSent, NoConnection: true, Detail: "no connection: " + err.Error()}
		}
		if status == 0 && refusedByTLS(err) {
			return Result{State: dedup.StateFailed, Code: dedup.CodeNotSent, NoConnection: true,
				Detail: "the core's TLS layer refused the connection before reading the request: " + err.Error()}
		}
		return unknown(status, "after connecting: "+err.Error())
	}
	switch {
	case status == http.StatusOK:
		b, err := appliedBody(body, tr.GUID)
		if err != nil {
			return unknown(status, err.Error())
		}
		return Result{State: dedup.StateDone, Code: dedup.CodeOK, Body: b, Status: status}
	case status == http.StatusInternalServerError:
		return Result{State: dedup.StateDone, Code: dedup.CodeCoreFailed, Status: status}
	case status >= 400 && status < 500:
		var rej struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(body, &rej) == nil && dedup.IsBusinessReject(rej.Code) {
			return Result{State: dedup.StateDone, Code: rej.Code, Status: status}
		}
		return unknown(status, fmt.Sprintf("HTTP %d without a B2xx code", status))
	default:
		return unknown(status, fmt.Sprintf("unexpected HTTP %d", status))
	}
}

func unknown(status int, detail string) Result {
	return Result{State: dedup.StateUnknown, Code: dedup.CodeUnknown, Status: status, Detail: detail}
}

// appliedBody reads the core's applied-transfer JSON and builds the 45-byte
// reply body from it. The JSON must carry ref, balance and processed_at, and
// a guid, if present, must be the expected one.
func appliedBody(body []byte, guid string) ([]byte, error) {
	var a struct {
		GUID        *string `json:"guid"`
		Ref         *string `json:"ref"`
		Balance     *int64  `json:"balance"`
		ProcessedAt *string `json:"processed_at"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("unreadable 200: %v", err)
	}
	if a.Ref == nil || a.Balance == nil || a.ProcessedAt == nil {
		return nil, errors.New("200 without ref, balance or processed_at")
	}
	if a.GUID != nil && *a.GUID != guid {
		return nil, fmt.Errorf("200 names another GUID %q", *a.GUID)
	}
	b, err := lhstd.TransferResponseBody(*a.Ref, *a.Balance, *a.ProcessedAt)
	if err != nil {
		return nil, fmt.Errorf("unusable 200: %v", err)
	}
	return b, nil
}

// Lookup asks the core whether it applied guid (GET /v1/transfers/{guid}).
// Only a 200 with a readable body and a 404 whose code is NOT_FOUND are
// proof; anything else is Undetermined.
func (c *Client) Lookup(ctx context.Context, guid string) LookupResult {
	ctx, span := tracing.ClientChild(ctx, tracing.SpanCoreLookup, tracing.AttrGUID.String(guid))
	res := c.lookup(ctx, guid)
	endCall(span, []string{"undetermined", "found", "not_found"}[res.Verdict], res.Status, res.Verdict == Undetermined, res.Detail)
	return res
}

func (c *Client) lookup(ctx context.Context, guid string) LookupResult {
	if !lhstd.IsGUID(guid) {
		return LookupResult{Detail: "not a GUID"}
	}
	status, body, _, _, err := c.exchange(ctx, http.MethodGet, c.base+"/v1/transfers/"+guid, nil, time.Time{}, nil)
	if err != nil {
		return LookupResult{Status: status, Detail: err.Error()}
	}
	switch status {
	case http.StatusOK:
		b, err := appliedBody(body, guid)
		if err != nil {
			return LookupResult{Status: status, Detail: err.Error()}
		}
		return LookupResult{Verdict: Found, Body: b, Status: status}
	case http.StatusNotFound:
		var nf struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(body, &nf) == nil && nf.Code == "NOT_FOUND" {
			return LookupResult{Verdict: NotFound, Status: status}
		}
		return LookupResult{Status: status, Detail: "404 without code NOT_FOUND (wrong --core URL?)"}
	default:
		return LookupResult{Status: status, Detail: fmt.Sprintf("unexpected HTTP %d", status)}
	}
}
