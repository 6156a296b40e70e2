package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/poll"

	"dedup"
	"dedup/internal/coreapi"
	"dedup/ledger"
	"dedup/lhstd"
)

// countingCore answers every transfer with res and counts the calls; Reach
// answers reachErr and counts the checks.
type countingCore struct {
	calls    atomic.Int32
	reaches  atomic.Int32
	res      coreapi.Result
	reachErr error
}

func (c *countingCore) Transfer(context.Context, coreapi.TransferRequest, time.Time, coreapi.Confirm) coreapi.Result {
	c.calls.Add(1)
	return c.res
}

func (c *countingCore) Reach(context.Context) error {
	c.reaches.Add(1)
	return c.reachErr
}

const g1 = "20261129MOB000000000000000000001"

var otherRequest, _ = lhstd.NewTransferRequest("20261129MOB000000000000000000002", "MOB", "20261129093000",
	lhstd.Transfer{From: "11020030004001", To: "11020030004002", Amount: 1, Memo: "m"})

func request(t *testing.T, amount int64) []byte {
	t.Helper()
	tg, err := lhstd.NewTransferRequest(g1, "MOB", "20261129093000", lhstd.Transfer{From: "11020030004001", To: "11020030004002", Amount: amount, Memo: "m"})
	assert.NilError(t, err)
	return tg
}

func okBody(t *testing.T) []byte {
	t.Helper()
	b, err := lhstd.TransferResponseBody("C000000000000042", 99850000, "20261129093001")
	assert.NilError(t, err)
	return b
}

// Rows written by other tools: the relay must read them by the rules of
// docs/rules.md even where this relay would never write them.
func TestRowsWrittenByOtherTools(t *testing.T) {
	for _, tc := range []struct {
		name      string
		row       ledger.Row
		wantCode  string
		wantCalls int32
		wantState dedup.State
	}{
		{"RECEIVED is treated like SENT", ledger.Row{State: dedup.StateReceived}, "E903", 0, dedup.StateReceived},
		{"NULL request compares as equal", ledger.Row{State: dedup.StateUnknown, RspCode: "E901"}, "E901", 0, dedup.StateUnknown},
		{"FAILED with another rsp_code is not reclaimed", ledger.Row{State: dedup.StateFailed, RspCode: "E999", Attempts: 1}, "E902", 0, dedup.StateFailed},
		{"FAILED E902 with NULL request is reclaimed and sent", ledger.Row{State: dedup.StateFailed, RspCode: "E902", Attempts: 1}, "0000", 1, dedup.StateDone},
		{"DONE without a stored reply and a B2xx code", ledger.Row{State: dedup.StateDone, RspCode: "B201", Attempts: 1}, "B201", 0, dedup.StateDone},
		{"DONE 0000 without a stored reply cannot be rebuilt", ledger.Row{State: dedup.StateDone, RspCode: "0000", Attempts: 1}, "E901", 0, dedup.StateDone},
		{"DONE with a 1-byte stored reply", ledger.Row{State: dedup.StateDone, RspCode: "0000", Response: []byte("x"), Attempts: 1}, "E901", 0, dedup.StateDone},
		{"DONE with a garbage stored reply", ledger.Row{State: dedup.StateDone, RspCode: "0000", Response: bytes.Repeat([]byte{0xff}, 200), Attempts: 1}, "E901", 0, dedup.StateDone},
		{"DONE with another GUID's reply", ledger.Row{State: dedup.StateDone, RspCode: "0000", Response: lhstd.Reply(otherRequest, "0000", nil), Attempts: 1}, "E901", 0, dedup.StateDone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore()
			r := tc.row
			r.GUID = g1
			st.rows[g1] = &r
			core := &countingCore{res: coreapi.Result{State: dedup.StateDone, Code: "0000", Body: okBody(t)}}
			s := New(Config{Store: st, Core: core})
			reply := s.Process(request(t, 150000))
			assert.Equal(t, lhstd.ReplyCode(reply), tc.wantCode)
			assert.Equal(t, core.calls.Load(), tc.wantCalls)
			assert.Equal(t, st.rows[g1].State, tc.wantState)
			if tc.wantCalls > 0 {
				assert.Equal(t, string(st.rows[g1].Request), string(request(t, 150000)), "the reclaim did not store the received request")
				assert.Equal(t, st.rows[g1].Attempts, 2)
			}
		})
	}
}

func TestProcessUnanswerableTelegramClosesConnection(t *testing.T) {
	s := New(Config{Store: newMemStore(), Core: &countingCore{}})
	assert.Assert(t, s.Process([]byte("short")) == nil)
}

func TestProcessMalformedIsE900WithoutRowOrCall(t *testing.T) {
	st := newMemStore()
	core := &countingCore{}
	s := New(Config{Store: st, Core: core})
	bad := request(t, 0) // amount zero
	reply := s.Process(bad)
	assert.Equal(t, string(reply), string(lhstd.Reply(bad, "E900", nil)))
	assert.Equal(t, len(st.rows), 0)
	assert.Equal(t, core.calls.Load(), int32(0))
}

// unwritable is a store whose writes all fail, as a full disk or a
// database that is down makes them; reads still work.
type unwritable struct{ *memStore }

func (u unwritable) Claim(context.Context, string, string, []byte) (bool, error) {
	return false, errors.New("database or disk is full")
}

func (u unwritable) Reclaim(context.Context, string, []byte, int) (int, []byte, bool, error) {
	return 0, nil, false, errors.New("database or disk is full")
}

func (u unwritable) Finish(context.Context, string, int, ledger.Outcome) (bool, error) {
	return false, errors.New("database or disk is full")
}

// When a claim cannot be committed nothing is sent, and a GUID that has a
// row is answered from it exactly as the state table says (docs/rules.md
// rule 14): only a GUID without a row, or a FAILED row that cannot be
// reclaimed now, gets E902 ("not delivered"). A SENT row may be this very
// claim, committed ambiguously: E903 is the truth about it either way.
func TestWriteOutageAnswersKnownGUIDsFromTheirRows(t *testing.T) {
	stored := lhstd.Reply(request(t, 150000), dedup.CodeOK, okBody(t))
	for _, tc := range []struct {
		name     string
		row      *ledger.Row
		request  []byte // nil: the row's own request
		wantCode string
	}{
		{"new GUID", nil, nil, "E902"},
		{"a SENT row", &ledger.Row{State: dedup.StateSent, Attempts: 1}, nil, "E903"},
		{"a RECEIVED row", &ledger.Row{State: dedup.StateReceived}, nil, "E903"},
		{"an UNKNOWN row", &ledger.Row{State: dedup.StateUnknown, RspCode: "E901", Attempts: 1}, nil, "E901"},
		{"a FAILED row", &ledger.Row{State: dedup.StateFailed, RspCode: "E902", Attempts: 1}, nil, "E902"},
		{"a DONE row is answered from the ledger", &ledger.Row{State: dedup.StateDone, RspCode: "0000", Response: stored, Attempts: 1}, nil, "0000"},
		{"another request under an UNKNOWN row", &ledger.Row{State: dedup.StateUnknown, RspCode: "E901", Attempts: 1}, request(t, 7), "E904"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore()
			if tc.row != nil {
				r := *tc.row
				r.GUID, r.Request = g1, request(t, 150000)
				st.rows[g1] = &r
			}
			req := tc.request
			if req == nil {
				req = request(t, 150000)
			}
			before := ""
			if tc.row != nil {
				before = fmt.Sprintf("%+v", *st.rows[g1])
			}
			core := &countingCore{res: coreapi.Result{State: dedup.StateDone, Code: "0000", Body: okBody(t)}}
			s := New(Config{Store: unwritable{st}, Core: core})
			reply := s.Process(req)
			assert.Equal(t, lhstd.ReplyCode(reply), tc.wantCode)
			assert.Equal(t, core.calls.Load(), int32(0), "a transfer was sent without a committed claim")
			if tc.wantCode == "0000" {
				assert.Equal(t, string(reply), string(stored))
			} else {
				assert.Equal(t, string(reply), string(lhstd.Reply(req, tc.wantCode, nil)), "not built from the request just received")
			}
			if tc.row != nil {
				assert.Equal(t, fmt.Sprintf("%+v", *st.rows[g1]), before, "the row changed")
			} else {
				assert.Equal(t, len(st.rows), 0)
			}
		})
	}
}

// An outage burns no attempts and the core's return is used at once: while
// fewer than 3 sends have obtained no connection a FAILED/E902 row's
// retransmission is reclaimed and sent; from the third on it is reclaimed
// only after a connection check succeeds, and the first check that
// succeeds lets it go at once.
func TestOutageBurnsNoAttemptsAndTheCoresReturnIsUsedAtOnce(t *testing.T) {
	st := newMemStore()
	down := coreapi.Result{State: dedup.StateFailed, Code: dedup.CodeNotSent, NoConnection: true}
	core := &countingCore{res: down, reachErr: errors.New("connection refused")}
	s := New(Config{Store: st, Core: core})
	req := request(t, 150000)

	for i, want := range []int{1, 2, 3} { // the first send, then two reclaims
		assert.Equal(t, lhstd.ReplyCode(s.Process(req)), "E902")
		assert.Equal(t, st.rows[g1].Attempts, want, "send %d", i+1)
	}
	assert.Equal(t, core.reaches.Load(), int32(0), "checked the core before it counted as down")
	for i := 0; i < 10; i++ {
		assert.Equal(t, lhstd.ReplyCode(s.Process(req)), "E902")
	}
	assert.Equal(t, st.rows[g1].Attempts, 3, "retransmissions during the outage burnt attempts")
	assert.Equal(t, core.calls.Load(), int32(3), "a send went to a core known to be down")
	assert.Equal(t, core.reaches.Load(), int32(10))

	// The core accepts connections again: the next retransmission goes.
	core.reachErr, core.res = nil, coreapi.Result{State: dedup.StateDone, Code: "0000", Body: okBody(t)}
	assert.Equal(t, lhstd.ReplyCode(s.Process(req)), "0000")
	assert.Equal(t, st.rows[g1].Attempts, 4)
	assert.Equal(t, core.calls.Load(), int32(4))

	// A lease that ran out says nothing about the core.
	o := newOutage(3)
	for i := 0; i < 5; i++ {
		o.record(coreapi.Result{State: dedup.StateFailed, Code: dedup.CodeNotSent, LeaseExpired: true})
	}
	assert.Assert(t, !o.down())
}

// Channel binding: a telegram whose channel code the client certificate
// does not name gets E900, and neither the ledger nor the core hears of it.
func TestChannelNotAllowedForTheCertificateIsE900WithoutRowOrCall(t *testing.T) {
	st := newMemStore()
	core := &countingCore{res: coreapi.Result{State: dedup.StateDone, Code: "0000", Body: okBody(t)}}
	s := New(Config{Store: st, Core: core, ClientCerts: true})
	req := request(t, 150000) // channel MOB
	for _, p := range []Peer{{Client: "ibk-gw", Channels: []string{"IBK"}}, {Client: "nobody", Channels: []string{}}} {
		reply := s.ProcessFrom(p, req)
		assert.Equal(t, string(reply), string(lhstd.Reply(req, "E900", nil)))
	}
	assert.Equal(t, len(st.rows), 0)
	assert.Equal(t, core.calls.Load(), int32(0))
	reply := s.ProcessFrom(Peer{Client: "mob-gw", Channels: []string{"ATM", "MOB"}}, req)
	assert.Equal(t, lhstd.ReplyCode(reply), "0000")
}

// A flood of refusals writes at most RefusalLinesPerSecond lines a second
// for its reason, then one line that counts the rest.
func TestRefusalLogIsRateLimitedAndCountsWhatItLeftOut(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	r := newRefusalLog(log)
	for i := 0; i < 500; i++ {
		r.Log("malformed", slog.LevelWarn, "bad frame")
	}
	r.Log("max_conns", slog.LevelWarn, "refused") // another reason has its own share
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		mu.Lock()
		defer mu.Unlock()
		if !strings.Contains(buf.String(), "suppressed=") {
			return poll.Continue("no suppressed line yet")
		}
		return poll.Success()
	}, poll.WithTimeout(5*time.Second), poll.WithDelay(20*time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	out := buf.String()
	assert.Equal(t, strings.Count(out, "msg=\"bad frame\""), RefusalLinesPerSecond, out)
	assert.Equal(t, strings.Count(out, "msg=refused"), 1, out)
	assert.Assert(t, strings.Contains(out, "suppressed=490 reason=malformed"), out)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// recordingCore answers 0000 and keeps what it was sent.
type recordingCore struct {
	countingCore
	mu   sync.Mutex
	sent []coreapi.TransferRequest
}

func (c *recordingCore) Transfer(ctx context.Context, tr coreapi.TransferRequest, lease time.Time, confirm coreapi.Confirm) coreapi.Result {
	c.mu.Lock()
	c.sent = append(c.sent, tr)
	c.mu.Unlock()
	return c.countingCore.Transfer(ctx, tr, lease, confirm)
}

// storingFirst is a store where, between the relay's read of a FAILED row
// without a request and its reclaim, another holder stored a different
// request in the row.
type storingFirst struct {
	*memStore
	other []byte
}

func (s storingFirst) Reclaim(ctx context.Context, guid string, req []byte, max int) (int, []byte, bool, error) {
	s.mu.Lock()
	if r := s.rows[guid]; r != nil && r.Request == nil {
		r.Request = s.other
	}
	s.mu.Unlock()
	return s.memStore.Reclaim(ctx, guid, req, max)
}

// A reclaim sends the request the row holds (RETURNING request), not the
// one just received, when another holder stored a different one meanwhile;
// the channel whose request differs is told E904.
func TestReclaimSendsTheRequestTheRowHolds(t *testing.T) {
	st := newMemStore()
	st.rows[g1] = &ledger.Row{GUID: g1, State: dedup.StateFailed, RspCode: dedup.CodeNotSent, Attempts: 1}
	core := &recordingCore{countingCore: countingCore{res: coreapi.Result{State: dedup.StateDone, Code: "0000", Body: okBody(t)}}}
	stored := request(t, 777)
	s := New(Config{Store: storingFirst{st, stored}, Core: core})
	reply := s.Process(request(t, 150000))
	assert.Equal(t, lhstd.ReplyCode(reply), dedup.CodeGUIDReused)
	assert.Equal(t, len(core.sent), 1)
	assert.Equal(t, core.sent[0].Amount, int64(777), "the relay sent the request it received, not the one the row holds")
	assert.Equal(t, st.rows[g1].State, dedup.StateDone)
	assert.Equal(t, string(st.rows[g1].Response), string(lhstd.Reply(stored, "0000", okBody(t))))
}
