package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RefusalLinesPerSecond is how many lines a second, per reason, the relay
// writes about refusals: malformed frames and telegrams, refused TLS
// handshakes, connections over --max-conns, telegrams of a channel the
// client certificate does not allow. A peer that floods the relay must not
// flood its log; a transaction that reached the ledger always has its line.
const RefusalLinesPerSecond = 10

// refusalLog writes refusal lines, at most RefusalLinesPerSecond a second
// per reason; then, at the end of each second that had more, one line
// with how many it left out (suppressed=N reason=...).
type refusalLog struct {
	log *slog.Logger

	mu      sync.Mutex
	reasons map[string]*refusalWindow
}

type refusalWindow struct {
	start      time.Time
	n          int // lines asked for in this window
	suppressed int
	flush      *time.Timer
}

func newRefusalLog(log *slog.Logger) *refusalLog {
	return &refusalLog{log: log, reasons: map[string]*refusalWindow{}}
}

// Log writes one refusal line for reason unless this second's share is
// used up.
func (r *refusalLog) Log(reason string, level slog.Level, msg string, attrs ...slog.Attr) {
	now := time.Now()
	r.mu.Lock()
	w := r.reasons[reason]
	if w == nil {
		w = &refusalWindow{}
		r.reasons[reason] = w
	}
	if now.Sub(w.start) >= time.Second {
		w.start, w.n = now, 0
	}
	w.n++
	if w.n > RefusalLinesPerSecond {
		w.suppressed++
		if w.flush == nil {
			w.flush = time.AfterFunc(time.Until(w.start.Add(time.Second)), func() { r.flush(reason) })
		}
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	r.log.LogAttrs(context.Background(), level, msg, append(attrs, slog.String("reason", reason))...)
}

func (r *refusalLog) flush(reason string) {
	r.mu.Lock()
	w := r.reasons[reason]
	n := w.suppressed
	w.suppressed, w.flush = 0, nil
	r.mu.Unlock()
	if n > 0 {
		r.log.Warn("refusals not logged in the last second", "suppressed", n, "reason", reason)
	}
}
