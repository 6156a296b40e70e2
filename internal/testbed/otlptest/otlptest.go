// Package otlptest is a real OTLP/HTTP trace endpoint for the tests and
// the benchmark: it decodes every export request (protobuf, gzip or not)
// with the OpenTelemetry protocol's own types and keeps the spans and the
// raw bytes received, so that a test can check the spans' tree and search
// every exported byte for data that must never leave the relay. It can
// also hang (accept and never answer), the exporter's worst case. It is a
// test tool and ships in no binary.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one exported span, flattened.
type Span struct {
	Service  string // the resource's service.name
	Name     string
	Kind     string // "server", "client", "internal"
	TraceID  string // hex
	SpanID   string // hex
	ParentID string // hex, "" for a root span
	Attrs    map[string]string
	Error    bool // status code ERROR
	Start    time.Time
	End      time.Time
}

// Collector is an OTLP/HTTP endpoint on loopback.
type Collector struct {
	srv  *http.Server
	ln   net.Listener
	hang chan struct{} // closed to release hung requests

	mu       sync.Mutex
	spans    []Span
	raw      bytes.Buffer
	requests int
	bytes    int64
	hanging  bool
	discard  bool
	bad      []string // requests that did not decode
}

// Options change a collector.
type Options struct {
	// Discard: count each export's bytes and answer it, decoding and
	// keeping nothing (the benchmark's live endpoint).
	Discard bool
}

// Start starts a collector on addr ("127.0.0.1:0" for any port).
func Start(addr string) (*Collector, error) { return StartWith(addr, Options{}) }

// StartWith is Start with options.
func StartWith(addr string, o Options) (*Collector, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &Collector{ln: ln, hang: make(chan struct{}), discard: o.Discard}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", c.export)
	c.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go c.srv.Serve(ln)
	return c, nil
}

// URL is the base URL to set as OTEL_EXPORTER_OTLP_ENDPOINT.
func (c *Collector) URL() string { return "http://" + c.ln.Addr().String() }

// Hang makes every later export request wait, unanswered, until Close.
func (c *Collector) Hang() {
	c.mu.Lock()
	c.hanging = true
	c.mu.Unlock()
}

// Close stops the collector and releases hung requests.
func (c *Collector) Close() {
	select {
	case <-c.hang:
	default:
		close(c.hang)
	}
	c.srv.Close()
}

func (c *Collector) export(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.requests++
	hanging := c.hanging
	c.mu.Unlock()
	if hanging {
		select {
		case <-c.hang:
		case <-r.Context().Done():
		}
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			c.fail(w, "gzip: "+err.Error())
			return
		}
		body = gz
	}
	if c.discard {
		n, _ := io.Copy(io.Discard, body)
		c.mu.Lock()
		c.bytes += n
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		return
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		c.fail(w, "read: "+err.Error())
		return
	}
	var req coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		c.fail(w, "decode: "+err.Error())
		return
	}
	var spans []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Service: service, Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()),
					SpanID: hex.EncodeToString(s.GetSpanId()), ParentID: hex.EncodeToString(s.GetParentSpanId()),
					Attrs: attrs(s.GetAttributes()), Error: s.GetStatus().GetCode() == 2,
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano()))}
				switch s.GetKind() {
				case 2:
					sp.Kind = "server"
				case 3:
					sp.Kind = "client"
				default:
					sp.Kind = "internal"
				}
				spans = append(spans, sp)
			}
		}
	}
	c.mu.Lock()
	c.bytes += int64(len(b))
	c.raw.Write(b)
	c.spans = append(c.spans, spans...)
	c.mu.Unlock()
	resp, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(resp)
}

func (c *Collector) fail(w http.ResponseWriter, why string) {
	c.mu.Lock()
	c.bad = append(c.bad, why)
	c.mu.Unlock()
	http.Error(w, why, http.StatusBadRequest)
}

// attrs flattens OTLP attributes to strings (ints in decimal, bools as
// true/false).
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			if x.BoolValue {
				m[kv.GetKey()] = "true"
			} else {
				m[kv.GetKey()] = "false"
			}
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Raw returns every decoded export body received so far, concatenated.
func (c *Collector) Raw() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.raw.Bytes())
}

// Bytes is how many bytes of export bodies arrived.
func (c *Collector) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// Requests is how many export requests arrived (hung ones included).
func (c *Collector) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// Undecodable lists the requests that were not OTLP protobuf.
func (c *Collector) Undecodable() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}
