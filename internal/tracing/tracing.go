// Package tracing is dedup's OpenTelemetry tracing (docs/operations.md,
// "Traces"): one span per transfer in the relay, with children for the
// ledger's commits, the claim's confirmation, the wait for a core
// connection and the core exchange; spans for the jobs' core calls and
// decisions; W3C trace context on every core request.
//
// It is configured by the standard OTEL_ variables only. With no OTLP
// endpoint set (or OTEL_SDK_DISABLED=true, which the Go SDK does not honour
// itself) Start returns a nil *Tracer: every method of a nil *Tracer is a
// no-op that allocates nothing, so the hot path pays one nil check.
//
// What a span may carry is fixed here (Attr*): identifiers, codes, states
// and counts. A transfer's accounts, amount and memo are never recorded: a
// trace backend is not a place for customer data.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// The attributes a span may carry. Nothing else is ever recorded.
const (
	AttrGUID     = attribute.Key("dedup.guid")
	AttrTxCode   = attribute.Key("dedup.tx_code")
	AttrChannel  = attribute.Key("dedup.channel")
	AttrCode     = attribute.Key("dedup.code")     // the reply's (or outcome's) response code
	AttrState    = attribute.Key("dedup.state")    // the row's state change, "SENT->DONE"
	AttrAttempts = attribute.Key("dedup.attempts") // the claim's attempt number
	AttrOutcome  = attribute.Key("dedup.outcome")  // a job's or a call's verdict
	AttrClaimed  = attribute.Key("dedup.claimed")  // the claim (or write) took the row
	AttrStatus   = attribute.Key("http.response.status_code")
	AttrWrites   = attribute.Key("dedup.rows")        // rows a job's step changed
	AttrReused   = attribute.Key("dedup.conn_reused") // the core connection came from the pool
)

// Span names (docs/operations.md lists them with what each measures).
const (
	SpanTransfer     = "dedup.transfer"
	SpanClaim        = "ledger.claim"
	SpanRead         = "ledger.read"
	SpanReclaim      = "ledger.reclaim"
	SpanConfirm      = "ledger.confirm"
	SpanFinish       = "ledger.finish"
	SpanCore         = "core.transfer"
	SpanCoreConnect  = "core.connect"
	SpanCoreExchange = "core.exchange"
	SpanCoreLookup   = "core.lookup"
	SpanResolve      = "resolve.row"
	SpanReprocess    = "reprocess.row"
	SpanSettle       = "settle.decision"
	SpanLedgerWrite  = "ledger.write"
)

// Tracer starts spans. A nil *Tracer starts none.
type Tracer struct {
	t trace.Tracer
}

// Provider is what Start set up: its Tracer (nil when tracing is off) and
// a Shutdown that flushes what is queued, bounded by its context.
type Provider struct {
	Tracer   *Tracer
	provider *sdktrace.TracerProvider
}

// Shutdown flushes the spans still queued and stops the exporter; it gives
// up when ctx ends. A nil or disabled Provider has nothing to do.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.provider == nil {
		return nil
	}
	return p.provider.Shutdown(ctx)
}

// Enabled reports whether the environment asks for traces: an OTLP
// endpoint is set and OTEL_SDK_DISABLED is not true (nor OTEL_TRACES_EXPORTER
// "none").
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return endpoint(getenv) != ""
}

func endpoint(getenv func(string) string) string {
	if e := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); e != "" {
		return e
	}
	return strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

// Where is the endpoint as the start-up line names it: scheme, host and
// path, never a user, password or query.
func Where(getenv func(string) string) string {
	e := endpoint(getenv)
	u, err := url.Parse(e)
	if err != nil || u.Host == "" {
		return "(unparsable endpoint)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// ExportTimeout bounds one export to the collector: an endpoint that hangs
// costs the exporter's goroutine this long, never a transfer.
const ExportTimeout = 5 * time.Second

// QueueSize is how many finished spans wait for export; past it spans are
// dropped (counted by the SDK), never waited for.
const QueueSize = 8192

// Start sets up tracing for service (the binary's name, unless
// OTEL_SERVICE_NAME says otherwise) as the environment asks, and logs one
// line saying whether it is on. With tracing off it returns a Provider
// whose Tracer is nil. An error (a malformed variable) is the caller's to
// report: a binary asked to trace that cannot should not start silently
// without it.
func Start(ctx context.Context, service, version string, log *slog.Logger) (*Provider, error) {
	if !Enabled(os.Getenv) {
		if log != nil && strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") && endpoint(os.Getenv) != "" {
			log.Info("tracing off: OTEL_SDK_DISABLED=true")
		}
		return &Provider{}, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithTimeout(ExportTimeout),
		// The exporter's own retries would hold spans in memory while
		// the endpoint is down; a span is worth less than the memory.
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES override
		resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: the resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider( // the sampler from OTEL_TRACES_SAMPLER/_ARG
		sdktrace.WithResource(res),
		sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(QueueSize), sdktrace.WithExportTimeout(ExportTimeout),
			sdktrace.WithBatchTimeout(time.Second)),
	)
	// An export that fails is logged by the SDK's handler, at most once a
	// minute here: the endpoint's address, never its headers.
	otel.SetErrorHandler(&rateLimited{log: log, every: time.Minute})
	otel.SetTextMapPropagator(propagation.TraceContext{})
	otel.SetTracerProvider(tp)
	if log != nil {
		name, _ := res.Set().Value(semconv.ServiceNameKey)
		log.Info("tracing on", "endpoint", Where(os.Getenv), "service", name.Emit())
	}
	t := tp.Tracer("dedup")
	setActive(t)
	return &Provider{Tracer: &Tracer{t: t}, provider: tp}, nil
}

// New returns a Tracer on tp (tests wire an in-memory provider).
func New(tp trace.TracerProvider) *Tracer {
	t := tp.Tracer("dedup")
	setActive(t)
	return &Tracer{t: t}
}

// active is the tracer of the last Start or New: Child and ClientChild
// start their spans with it rather than asking the parent's provider for a
// tracer on every span (a lock and a map lookup each time).
var active atomic.Pointer[trace.Tracer]

func setActive(t trace.Tracer) { active.Store(&t) }

// tracerFor returns the tracer to start a child of parent with.
func tracerFor(parent trace.Span) trace.Tracer {
	if t := active.Load(); t != nil {
		return *t
	}
	return parent.TracerProvider().Tracer("dedup")
}

// noSpan is the span a nil Tracer hands out: it records nothing.
var noSpan = trace.SpanFromContext(context.Background())

// StartTransfer starts the relay's span for one transfer (a root span: a
// channel's telegram carries no trace context). Its parameters are not
// variadic so that a nil Tracer costs no allocation.
func (t *Tracer) StartTransfer(ctx context.Context, guid, txCode, channel string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	return t.t.Start(ctx, SpanTransfer, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(AttrGUID.String(guid), AttrTxCode.String(txCode), AttrChannel.String(channel)))
}

// Root starts a root span on the global provider (set by Start): the jobs'
// spans, one per row or run. With tracing off it records nothing.
func Root(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return otel.GetTracerProvider().Tracer("dedup").Start(ctx, name, trace.WithAttributes(attrs...))
}

// Child starts an internal span under ctx's span, if ctx has one that
// records; otherwise it starts nothing. It is how the ledger and the core
// client time their parts without being told whether tracing is on.
func Child(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noSpan
	}
	return tracerFor(parent).Start(ctx, name, trace.WithAttributes(attrs...))
}

// ClientChild is Child for a span that calls out (the core), whose context
// is carried by the request.
func ClientChild(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noSpan
	}
	return tracerFor(parent).Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrs...))
}

// Inject writes ctx's trace context (traceparent, tracestate) into h, if
// ctx has a span that records; a request without one carries no header.
func Inject(ctx context.Context, h map[string][]string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !trace.SpanFromContext(ctx).IsRecording() {
		return
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
}

// TraceID is the trace id of ctx's recording span, in hex, or "".
func TraceID(ctx context.Context) string {
	s := trace.SpanFromContext(ctx)
	if !s.IsRecording() {
		return ""
	}
	return s.SpanContext().TraceID().String()
}

// Fail marks span as failed with err's message (an error of dedup's, which
// never carries a transfer's accounts or memo).
func Fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
}

// WithDetail appends ctx's trace id to an event's detail, so that the
// ledger's event, the log line and the trace find each other.
func WithDetail(ctx context.Context, detail string) string {
	id := TraceID(ctx)
	switch {
	case id == "":
		return detail
	case detail == "":
		return "trace_id=" + id
	default:
		return detail + " trace_id=" + id
	}
}

// rateLimited logs the SDK's errors (an endpoint that refuses, a full
// queue) at most once per every.
type rateLimited struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  time.Time
}

func (r *rateLimited) Handle(err error) {
	if r.log == nil {
		return
	}
	r.mu.Lock()
	now := time.Now()
	if !r.last.IsZero() && now.Sub(r.last) < r.every {
		r.mu.Unlock()
		return
	}
	r.last = now
	r.mu.Unlock()
	r.log.Warn("tracing: export failed (spans dropped; transfers are not affected)", "error", err.Error())
}

// Flush exports the spans still queued at a binary's exit, bounded by
// ExportTimeout: an endpoint that is down must not hold up the exit (the
// binary's outcome is already recorded).
func Flush(log *slog.Logger, tp *Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), ExportTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("tracing: spans still queued at exit were not exported", "error", err)
	}
}

// LogAttrs is a log line's attributes with the trace id of ctx's span
// added when it is traced, so that a job's line leads to its trace.
func LogAttrs(ctx context.Context, args ...any) []any {
	if id := TraceID(ctx); id != "" {
		return append(args, "trace_id", id)
	}
	return args
}
