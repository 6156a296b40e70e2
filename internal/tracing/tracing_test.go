package tracing

import (
	"context"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"gotest.tools/v3/assert"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabledOnlyWithAnEndpointAndNotDisabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"a service name alone", map[string]string{"OTEL_SERVICE_NAME": "relay"}, false},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{"blank endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, false},
		{"SDK disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{"SDK disabled, upper case", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, false},
		{"SDK disabled false", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, true},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, Enabled(env(tc.env)), tc.want)
		})
	}
}

func TestWhereNamesNoCredentials(t *testing.T) {
	got := Where(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:s3cret@collector:4318/otlp?token=s3cret"}))
	assert.Equal(t, got, "https://collector:4318/otlp")
}

// A nil Tracer, the release default, costs no allocation per transfer.
func TestNilTracerAllocatesNothing(t *testing.T) {
	var tr *Tracer
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		c, span := tr.StartTransfer(ctx, "GUID", "TRF00001", "MOB")
		_, child := Child(c, SpanClaim)
		child.End()
		h := http.Header{}
		Inject(c, h)
		if TraceID(c) != "" || WithDetail(c, "d") != "d" {
			t.Fatal("an untraced context names a trace")
		}
		span.End()
	})
	assert.Equal(t, allocs, 1.0, "one allocation: the header map of the test itself") // http.Header{}
}

func TestChildSpansAndDetailCarryTheTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	tr := New(tp)
	ctx, root := tr.StartTransfer(context.Background(), "G1", "TRF00001", "MOB")
	cctx, core := ClientChild(ctx, SpanCore)
	h := http.Header{}
	Inject(cctx, h)
	id := root.SpanContext().TraceID().String()
	assert.Equal(t, WithDetail(ctx, "core answered 0000"), "core answered 0000 trace_id="+id)
	assert.Equal(t, WithDetail(ctx, ""), "trace_id="+id)
	core.End()
	root.End()
	assert.Equal(t, h.Get("traceparent"), "00-"+id+"-"+core.SpanContext().SpanID().String()+"-01")
	spans := rec.Ended()
	assert.Equal(t, len(spans), 2)
	assert.Equal(t, spans[0].Name(), SpanCore)
	assert.Equal(t, spans[0].Parent().SpanID(), root.SpanContext().SpanID())
}
