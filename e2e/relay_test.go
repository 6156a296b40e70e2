package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/poll"

	"dedup/internal/channel"
	"dedup/lhstd"
)

// coreBody returns the 45-byte reply body for what the core applied under
// guid, read from its lookup API.
func coreBody(t *testing.T, c *core, guid string) []byte {
	t.Helper()
	resp, err := http.Get(c.url + "/v1/transfers/" + guid)
	assert.NilError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, resp.StatusCode, 200)
	var a struct {
		Ref         string `json:"ref"`
		Balance     int64  `json:"balance"`
		ProcessedAt string `json:"processed_at"`
	}
	decodeJSON(t, resp.Body, &a)
	b, err := lhstd.TransferResponseBody(a.Ref, a.Balance, a.ProcessedAt)
	assert.NilError(t, err)
	return b
}

// Rule 1 and the DONE row of the state table: a transfer is claimed,
// sent once, recorded DONE with the reply it got, and replayed byte for
// byte, even when a retransmission carries another sent_at.
func TestTransferIsRecordedAndRetransmissionReplayedFromLedger(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url)
	g := newGUID()
	tg := telegram(t, g)

	reply := send(t, r.addr, tg)
	want := expectReply(tg, "0000", coreBody(t, c, g))
	assert.Equal(t, string(reply), string(want))

	ldb := openDB(t, db)
	row := getRow(t, ldb, g)
	assert.Assert(t, row != nil)
	assert.Check(t, is.Equal(row.State.String, "DONE"))
	assert.Check(t, is.Equal(row.RspCode.String, "0000"))
	assert.Check(t, is.Equal(row.TxCode.String, "TRF00001"))
	assert.Check(t, is.Equal(string(row.Request), string(tg)))
	assert.Check(t, is.Equal(string(row.Response), string(reply)))
	assert.Check(t, is.Equal(row.Attempts, 1))
	if !onPostgres() { // SQLite's datetime('now'); PostgreSQL keeps a timestamptz
		assert.Check(t, regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`).MatchString(row.UpdatedAt), row.UpdatedAt)
	}

	again := send(t, r.addr, tg)
	assert.Equal(t, string(again), string(reply), "retransmission not answered byte for byte")
	later := send(t, r.addr, telegram(t, g, sentAt("20261129094500")))
	assert.Equal(t, string(later), string(reply), "retransmission with another sent_at must get the first reply, first sent_at included")
	s := c.stats(t)
	assert.Equal(t, s.ByGUID[g], 1, "the core was called for a retransmission")
	assert.Equal(t, s.AppliedByGUID[g], 1)
}

// Definite rejections and the core's own 500 are final: DONE, replayed.
func TestRejectionsAndCore500AreDoneAndReplayed(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url)
	ldb := openDB(t, db)
	for _, tc := range []struct {
		name string
		opts []reqOpt
		want string
	}{
		{"insufficient funds", []reqOpt{amount(999_000_000)}, "B201"},
		{"no such account", []reqOpt{accounts("00000000000000", "11020030004002")}, "B202"},
		{"same account", []reqOpt{accounts("11020030004001", "11020030004001")}, "B204"},
		{"core 500", []reqOpt{memo("FAIL500")}, "E500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGUID()
			tg := telegram(t, g, tc.opts...)
			reply := send(t, r.addr, tg)
			assert.Equal(t, string(reply), string(expectReply(tg, tc.want, nil)))
			row := getRow(t, ldb, g)
			assert.Check(t, is.Equal(row.State.String, "DONE"))
			assert.Check(t, is.Equal(row.RspCode.String, tc.want))
			assert.Check(t, is.Equal(string(row.Response), string(reply)))
			assert.Equal(t, string(send(t, r.addr, tg)), string(reply))
			assert.Equal(t, c.stats(t).ByGUID[g], 1)
		})
	}
}

// The SENT row of the state table: retransmissions while the first send is
// in flight get E903 at once and never reach the core.
func TestRetransmissionsDuringSlowSendGetE903AndCoreCalledOnce(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--slow", "2")
	db := tempDB(t)
	r := startRelay(t, db, c.url, "--timeout", "5")
	g := newGUID()
	tg := telegram(t, g, memo("SLOW rent"))

	first := make(chan []byte, 1)
	go func() {
		conn, err := channel.Dial(r.addr, 30*time.Second)
		if err != nil {
			first <- nil
			return
		}
		defer conn.Close()
		reply, _ := conn.RoundTrip(tg)
		first <- reply
	}()
	ldb := openDB(t, db)
	waitState(t, ldb, g, "SENT", 10*time.Second)

	var wg sync.WaitGroup
	replies := make([][]byte, 5)
	for i := range replies {
		wg.Add(1)
		go func() { defer wg.Done(); replies[i] = send(t, r.addr, tg) }()
	}
	wg.Wait()
	// Prompt: all five were answered while the first send was still waiting
	// for the core.
	select {
	case <-first:
		t.Fatal("the first send finished before the retransmissions were answered: E903 was not immediate")
	default:
	}
	for i, rep := range replies {
		assert.Check(t, is.Equal(string(rep), string(expectReply(tg, "E903", nil))), "retransmission %d", i)
	}
	assert.Equal(t, code(<-first), "0000")
	assert.Equal(t, c.stats(t).ByGUID[g], 1)
}

// Rule 2 under load: 20 GUIDs, each sent 8 times at once on separate
// connections; the core sees each GUID once.
func TestStormOfSimultaneousFirstSendsCallsCoreOncePerGUID(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url)
	storm(t, []string{r.addr}, c, 20, 8)
}

// Two relay processes on one ledger file, same storm: claims stay atomic
// across processes.
func TestTwoRelaysOneLedgerStormCallsCoreOncePerGUID(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r1 := startRelay(t, db, c.url)
	r2 := startRelay(t, db, c.url)
	storm(t, []string{r1.addr, r2.addr}, c, 30, 8)
}

func storm(t *testing.T, addrs []string, c *core, guids, per int) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	codes := make([][]string, guids)
	gs := make([]string, guids)
	for i := range gs {
		gs[i] = newGUID()
		codes[i] = make([]string, per)
		tg := telegram(t, gs[i], amount(int64(1+i)))
		for k := 0; k < per; k++ {
			// Connect first so that the sends leave together.
			conn, err := channel.Dial(addrs[k%len(addrs)], 30*time.Second)
			assert.NilError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				<-start
				reply, err := conn.RoundTrip(tg)
				if err != nil {
					codes[i][k] = err.Error()
					return
				}
				codes[i][k] = code(reply)
			}()
		}
	}
	close(start)
	wg.Wait()
	s := c.stats(t)
	for i, g := range gs {
		assert.Check(t, is.Equal(s.ByGUID[g], 1), "GUID %s reached the core %d times", g, s.ByGUID[g])
		ok := 0
		for _, cd := range codes[i] {
			assert.Check(t, cd == "0000" || cd == "E903", "reply %q", cd)
			if cd == "0000" {
				ok++
			}
		}
		assert.Check(t, ok >= 1, "no sender of %s got 0000", g)
	}
}

// Rules 3 and 5: a read timeout is UNKNOWN (E901), and a retransmission of
// an UNKNOWN row is answered E901 without calling the core, even after the
// core finished applying it.
func TestReadTimeoutIsUnknownAndNeverResent(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--slow", "2")
	db := tempDB(t)
	r := startRelay(t, db, c.url, "--timeout", "0.5")
	g := newGUID()
	tg := telegram(t, g, memo("SLOW"))
	assert.Equal(t, string(send(t, r.addr, tg)), string(expectReply(tg, "E901", nil)))
	ldb := openDB(t, db)
	row := getRow(t, ldb, g)
	assert.Equal(t, row.State.String, "UNKNOWN")
	assert.Equal(t, row.RspCode.String, "E901")
	assert.Assert(t, row.Response == nil)

	poll.WaitOn(t, func(poll.LogT) poll.Result {
		if c.stats(t).AppliedByGUID[g] == 1 {
			return poll.Success()
		}
		return poll.Continue("core still applying")
	}, poll.WithTimeout(10*time.Second))
	assert.Equal(t, code(send(t, r.addr, tg)), "E901")
	assert.Equal(t, c.stats(t).ByGUID[g], 1, "an UNKNOWN transaction was resent")
}

// Rule 3: no connection to the core is FAILED/E902; a retransmission once
// the core is back is sent again with attempts 2 and ends DONE.
func TestCoreDownIsFailedAndRetransmissionResendsWithAttempt2(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	db := tempDB(t)
	r := startRelay(t, db, "http://"+addr)
	g := newGUID()
	tg := telegram(t, g)
	assert.Equal(t, string(send(t, r.addr, tg)), string(expectReply(tg, "E902", nil)))
	ldb := openDB(t, db)
	row := getRow(t, ldb, g)
	assert.Equal(t, row.State.String, "FAILED")
	assert.Equal(t, row.RspCode.String, "E902")
	assert.Equal(t, row.Attempts, 1)

	c := startCoreAt(t, addr)
	reply := send(t, r.addr, telegram(t, g, sentAt("20261129094000")))
	assert.Equal(t, code(reply), "0000")
	row = getRow(t, ldb, g)
	assert.Equal(t, row.State.String, "DONE")
	assert.Equal(t, row.Attempts, 2)
	// The stored reply is built from the stored (first) request.
	assert.Equal(t, string(row.Response), string(expectReply(tg, "0000", coreBody(t, c, g))))
	assert.Equal(t, c.stats(t).ByGUID[g], 1)
}

// Rule 3: once connected, a hang-up is UNKNOWN, whether or not the core
// applied the transfer.
func TestResetAfterSendIsUnknownNotFailed(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url)
	ldb := openDB(t, db)
	for _, m := range []string{"DROP", "APPLYDROP"} {
		t.Run(m, func(t *testing.T) {
			g := newGUID()
			tg := telegram(t, g, memo(m))
			assert.Equal(t, string(send(t, r.addr, tg)), string(expectReply(tg, "E901", nil)))
			row := getRow(t, ldb, g)
			assert.Equal(t, row.State.String, "UNKNOWN")
			assert.Equal(t, code(send(t, r.addr, tg)), "E901")
			assert.Equal(t, c.stats(t).ByGUID[g], 1)
		})
	}
}

// stubCore answers by memo with the status the memo names ("S502"), for
// the answers the fixture core cannot give.
// stubCore answers transfers by their memo; before runs before each POST
// (the relay's start-up probe, a GET, gets a 404 and runs nothing).
func stubCore(t *testing.T, before func(memo string)) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"code":"NOT_FOUND"}`)
			return
		}
		var tr struct {
			GUID string `json:"guid"`
			Memo string `json:"memo"`
		}
		json.NewDecoder(r.Body).Decode(&tr)
		if before != nil {
			before(tr.Memo)
		}
		var status int
		fmt.Sscanf(tr.Memo, "S%d", &status)
		switch {
		case strings.Contains(tr.Memo, "B201"):
			w.WriteHeader(422)
			io.WriteString(w, `{"code":"B201"}`)
		case status == 0:
			fmt.Fprintf(w, `{"guid":%q,"ref":"C000000000000777","balance":42,"processed_at":"20261129100000"}`, tr.GUID)
		default:
			w.WriteHeader(status)
			io.WriteString(w, `{"error":"stub"}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestUnexpectedCoreStatusesAreUnknown(t *testing.T) {
	t.Parallel()
	stub := stubCore(t, nil)
	db := tempDB(t)
	r := startRelay(t, db, stub.URL)
	ldb := openDB(t, db)
	for _, tc := range []struct{ memo, want, state string }{
		{"S502", "E901", "UNKNOWN"},
		{"S503", "E901", "UNKNOWN"},
		{"S504", "E901", "UNKNOWN"},
		{"S400", "E901", "UNKNOWN"},
		{"S404", "E901", "UNKNOWN"},
		{"S409", "E901", "UNKNOWN"},
		{"S302", "E901", "UNKNOWN"},
		{"S202", "E901", "UNKNOWN"},
		{"S500", "E500", "DONE"},
	} {
		t.Run(tc.memo, func(t *testing.T) {
			g := newGUID()
			tg := telegram(t, g, memo(tc.memo))
			assert.Equal(t, code(send(t, r.addr, tg)), tc.want)
			assert.Equal(t, getRow(t, ldb, g).State.String, tc.state)
		})
	}
}

// Rule 10: the ledger is locked by another writer while the core answers,
// past the busy timeout, so the outcome cannot be recorded. An applied
// transfer is still answered 0000 (the telegram that would have been
// stored); a rejection is answered E901, never B201.
func TestOutcomeThatCannotBeRecorded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		memo, want string
	}{
		{"APPLIED", "0000"},
		{"B201", "E901"},
	} {
		t.Run(tc.memo, func(t *testing.T) {
			t.Parallel()
			db := tempDB(t)
			lock := openDB(t, db)
			unlocked := make(chan func(), 1)
			stub := stubCore(t, func(string) {
				// Take the write lock before answering: the relay's record
				// of the outcome will wait past its busy timeout.
				unlocked <- lock.lock(t)
			})
			r := startRelay(t, db, stub.URL)
			g := newGUID()
			tg := telegram(t, g, memo(tc.memo))
			reply := send(t, r.addr, tg)
			(<-unlocked)()
			if tc.want == "0000" {
				body, err := lhstd.TransferResponseBody("C000000000000777", 42, "20261129100000")
				assert.NilError(t, err)
				assert.Equal(t, string(reply), string(expectReply(tg, "0000", body)))
			} else {
				assert.Equal(t, string(reply), string(expectReply(tg, tc.want, nil)))
			}
			// The claim stays SENT: the orphan sweep and resolve settle it.
			assert.Equal(t, getRow(t, openDB(t, db), g).State.String, "SENT")
			r.waitLog(t, "not recorded")
		})
	}
}

// Same GUID, different request: E904 whatever the row's state, nothing
// changed, nothing sent.
func TestSameGUIDDifferentRequestIsE904(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	db := tempDB(t)
	r := startRelay(t, db, "http://"+addr)
	ldb := openDB(t, db)

	// A FAILED row (core down) must not be reclaimed by a different request.
	gf := newGUID()
	assert.Equal(t, code(send(t, r.addr, telegram(t, gf))), "E902")
	c := startCoreAt(t, addr)
	g := newGUID()
	tg := telegram(t, g)
	assert.Equal(t, code(send(t, r.addr, tg)), "0000")

	for _, tc := range []struct {
		name string
		guid string
		opts []reqOpt
	}{
		{"DONE, other amount", g, []reqOpt{amount(150001)}},
		{"DONE, other channel", g, []reqOpt{channelCode("IBK")}},
		{"DONE, other memo", g, []reqOpt{memo("other")}},
		{"DONE, other account", g, []reqOpt{accounts("11020030004001", "11020030004009")}},
		{"FAILED, other amount", gf, []reqOpt{amount(7)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := getRow(t, ldb, tc.guid)
			other := telegram(t, tc.guid, tc.opts...)
			assert.Equal(t, string(send(t, r.addr, other)), string(expectReply(other, "E904", nil)))
			after := getRow(t, ldb, tc.guid)
			assert.DeepEqual(t, after, before)
		})
	}
	s := c.stats(t)
	assert.Equal(t, s.ByGUID[g], 1)
	assert.Equal(t, s.ByGUID[gf], 0)
	r.waitLog(t, "GUID reused")
}

// Rule 9: a channel that hangs up right after sending does not cancel the
// transaction: it completes and is recorded.
func TestChannelHangUpDoesNotCancelTheTransaction(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--slow", "1")
	db := tempDB(t)
	r := startRelay(t, db, c.url, "--timeout", "5")
	g := newGUID()
	tg := telegram(t, g, memo("SLOW"))
	conn, err := channel.Dial(r.addr, 5*time.Second)
	assert.NilError(t, err)
	assert.NilError(t, conn.Send(tg))
	conn.Close()
	ldb := openDB(t, db)
	waitState(t, ldb, g, "DONE", 15*time.Second)
	assert.Equal(t, getRow(t, ldb, g).RspCode.String, "0000")
	// The channel asks again and gets the recorded reply.
	assert.Equal(t, code(send(t, r.addr, tg)), "0000")
	assert.Equal(t, c.stats(t).ByGUID[g], 1)
}

// Rule 1 and orphaned claims: the relay is killed while the core is
// applying; on restart the row is SENT (E903 to a retransmission), and the
// orphan sweep moves it to UNKNOWN, never resending it.
func TestKilledRelayLeavesSentRowThatIsSweptToUnknown(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--slow", "3")
	db := tempDB(t)
	args := []string{"--connect-timeout", "0.5", "--timeout", "0.5", "--orphan-after", "8"}
	// Raise --timeout above the slow wait for the first relay so that it is
	// killed while the transfer is in flight.
	r := startRelay(t, db, c.url, "--connect-timeout", "0.5", "--timeout", "5", "--orphan-after", "13")
	g := newGUID()
	tg := telegram(t, g, memo("SLOW"))
	conn, err := channel.Dial(r.addr, 5*time.Second)
	assert.NilError(t, err)
	defer conn.Close()
	assert.NilError(t, conn.Send(tg))
	ldb := openDB(t, db)
	waitState(t, ldb, g, "SENT", 10*time.Second)
	waitPosted(t, c, g)
	r.kill()

	r2 := startRelay(t, db, c.url, args...)
	assert.Equal(t, string(send(t, r2.addr, tg)), string(expectReply(tg, "E903", nil)))
	waitState(t, ldb, g, "UNKNOWN", 40*time.Second)
	row := getRow(t, ldb, g)
	assert.Equal(t, row.RspCode.String, "E901")
	assert.Equal(t, row.Attempts, 1)
	assert.Equal(t, code(send(t, r2.addr, tg)), "E901")
	assert.Equal(t, c.stats(t).ByGUID[g], 1)
	r2.waitLog(t, "orphan sweep")
}

// Graceful stop: SIGTERM while a transfer is in flight lets it finish, be
// recorded, and be answered; the relay exits 0. Started again, it warms the
// ledger it left and answers the GUID from its row.
func TestSigtermDuringSlowTransferFinishesItAndExits0(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--slow", "1.5")
	db := tempDB(t)
	r := startRelay(t, db, c.url, "--timeout", "5")
	g := newGUID()
	tg := telegram(t, g, memo("SLOW"))
	idle, err := channel.Dial(r.addr, 5*time.Second)
	assert.NilError(t, err)
	defer idle.Close()
	conn, err := channel.Dial(r.addr, 10*time.Second)
	assert.NilError(t, err)
	defer conn.Close()
	assert.NilError(t, conn.Send(tg))
	ldb := openDB(t, db)
	waitState(t, ldb, g, "SENT", 10*time.Second)
	exited := make(chan int, 1)
	go func() { exited <- r.stop(t, syscall.SIGTERM) }()
	reply, err := conn.Receive()
	assert.NilError(t, err)
	assert.Equal(t, code(reply), "0000")
	assert.Equal(t, <-exited, 0)
	assert.Equal(t, getRow(t, ldb, g).State.String, "DONE")
	// The idle connection was closed, not left hanging.
	_, err = idle.Receive()
	assert.Assert(t, err != nil)
	r.waitLog(t, "relay stopped cleanly")

	// Started again on the ledger the clean stop left (checkpointed into
	// the file once the test's own connection closes too), the relay warms
	// the GUID index's leaf that the row's GUID is on. A PostgreSQL ledger
	// keeps its own buffer cache on its server: there the relay opens its
	// pool's connections before it listens.
	assert.NilError(t, ldb.Close())
	r2 := startRelay(t, db, c.url)
	if onPostgres() {
		r2.waitLog(t, "ledger warmed")
		assert.Assert(t, regexp.MustCompile(`ledger warmed.* conns=(1[0-9]|[2-9])`).MatchString(r2.log()), r2.log())
		assert.Assert(t, !strings.Contains(r2.log(), "guid_index_leaves"), r2.log())
		assert.Equal(t, code(send(t, r2.addr, tg)), "0000")
		return
	}
	r2.waitLog(t, "ledger warmed")
	assert.Assert(t, strings.Contains(r2.log(), "guid_index_leaves=1"), r2.log())
	assert.Equal(t, code(send(t, r2.addr, tg)), "0000")
}

// Bad input gets E900 or a closed connection, never a row, and the relay
// keeps serving.
func TestMalformedInputGetsE900OrClosedConnectionAndNoRow(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url)
	ldb := openDB(t, db)
	good := telegram(t, newGUID())
	mut := func(off int, s string) []byte {
		b := bytes.Clone(good)
		copy(b[off:], s)
		return lhstd.AppendFrame(nil, b)
	}
	for _, tc := range []struct {
		name  string
		wire  []byte
		close bool // closed without a reply, else E900
	}{
		{"garbage length", []byte("HELLO!!!" + strings.Repeat("x", 127)), true},
		{"oversize length", []byte("99999999"), true},
		{"length below header", append([]byte("00000010"), good[:10]...), true},
		{"truncated frame", append([]byte("00000127"), good[:50]...), true},
		{"kind R", mut(40, "R"), false},
		{"bad GUID", mut(3, "-"), false},
		{"unknown tx_code", mut(32, "TRF00009"), false},
		{"wrong body length", lhstd.AppendFrame(nil, good[:120]), false},
		{"zero amount", mut(92, "000000000000000"), false},
		{"invalid memo", mut(107, "\xff\xfe"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := countRows(t, ldb)
			conn, err := channel.Dial(r.addr, 15*time.Second)
			assert.NilError(t, err)
			defer conn.Close()
			assert.NilError(t, conn.SendRaw(tc.wire))
			if tc.name == "truncated frame" {
				assert.NilError(t, conn.CloseWrite()) // end of file inside the frame
			}
			reply, err := conn.Receive()
			if tc.close {
				assert.Assert(t, err != nil, "got a reply %q to an unanswerable frame", reply)
				assert.Assert(t, !isTimeout(err), "the relay neither answered nor closed: %v", err)
			} else {
				assert.NilError(t, err)
				assert.Equal(t, code(reply), "E900")
				assert.Equal(t, len(reply), 64)
			}
			assert.Equal(t, countRows(t, ldb), before, "malformed input left a ledger row")
			// The relay still serves the next channel.
			assert.Equal(t, code(send(t, r.addr, telegram(t, newGUID()))), "0000")
			assert.Equal(t, countRows(t, ldb), before+1)
		})
	}
}

// A channel that sends half a frame and stalls is cut off after the frame
// deadline, and does not block anyone else meanwhile.
func TestStalledFrameIsClosedAndOthersAreServed(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url)
	conn, err := channel.Dial(r.addr, 30*time.Second)
	assert.NilError(t, err)
	defer conn.Close()
	assert.NilError(t, conn.SendRaw([]byte("00000127"+"20261129")))
	assert.Equal(t, code(send(t, r.addr, telegram(t, newGUID()))), "0000")
	_, err = conn.Receive()
	assert.Assert(t, err != nil, "a stalled frame got a reply")
	assert.Assert(t, !isTimeout(err), "the relay never closed the stalled connection")
	assert.Equal(t, countRows(t, openDB(t, db)), 1)
}

// waitPosted waits until the core has received guid's POST ("" for any).
func waitPosted(t *testing.T, c *core, guid string) {
	t.Helper()
	poll.WaitOn(t, func(poll.LogT) poll.Result {
		s := c.stats(t)
		if s.ByGUID[guid] > 0 || guid == "" && len(s.ByGUID) > 0 {
			return poll.Success()
		}
		return poll.Continue("core has not received %s", guid)
	}, poll.WithTimeout(10*time.Second), poll.WithDelay(20*time.Millisecond))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Rule 1 and docs/cli.md: when the ledger is locked by another writer past the
// busy timeout, a new GUID cannot be claimed, so it is not sent: E902, no
// row, and the core never hears of it.
func TestLedgerLockedAtClaimAnswersE902AndSendsNothing(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	db := tempDB(t)
	r := startRelay(t, db, c.url)
	lock := openDB(t, db)
	unlock := lock.lock(t)
	g := newGUID()
	tg := telegram(t, g)
	assert.Equal(t, string(send(t, r.addr, tg)), string(expectReply(tg, "E902", nil)))
	unlock()
	assert.Assert(t, getRow(t, lock, g) == nil, "a failed claim left a row")
	assert.Equal(t, c.stats(t).ByGUID[g], 0, "the core was called without a committed claim")
	// Once the lock is gone the same GUID goes through normally.
	assert.Equal(t, code(send(t, r.addr, tg)), "0000")
}

// Rule 11: while the core call was under way the row stopped being this
// holder's (swept, resolved and reclaimed by someone else: attempts 2). The
// stale holder's outcome must not overwrite it, and the channel is answered
// by rule 10.
func TestStaleHolderDoesNotOverwriteARowSomeoneElseChanged(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ memo, want string }{
		{"APPLIED", "0000"},
		{"B201", "E901"},
	} {
		t.Run(tc.memo, func(t *testing.T) {
			t.Parallel()
			db := tempDB(t)
			other := openDB(t, db)
			stub := stubCore(t, func(string) {
				_, err := other.Exec("UPDATE tx SET state='SENT', attempts=2, request=request WHERE state='SENT'")
				assert.Check(t, err)
			})
			r := startRelay(t, db, stub.URL)
			g := newGUID()
			tg := telegram(t, g, memo(tc.memo))
			assert.Equal(t, code(send(t, r.addr, tg)), tc.want)
			row := getRow(t, other, g)
			assert.Equal(t, row.State.String, "SENT", "the stale holder overwrote the new holder's claim")
			assert.Equal(t, row.Attempts, 2)
			assert.Assert(t, row.Response == nil)
			r.waitLog(t, "fenced")
		})
	}
}

// A silent channel is disconnected after --idle-timeout.
func TestIdleChannelIsDisconnected(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	r := startRelay(t, tempDB(t), c.url, "--idle-timeout", "0.5")
	conn, err := channel.Dial(r.addr, 30*time.Second)
	assert.NilError(t, err)
	defer conn.Close()
	_, err = conn.Receive()
	assert.Assert(t, err != nil && !isTimeout(err), "the idle connection was not closed by the relay: %v", err)
}

// A second signal during the graceful stop exits 1 at once, without waiting
// for the transaction in flight.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	c := startCore(t, "--slow", "20")
	db := tempDB(t)
	r := startRelay(t, db, c.url, "--timeout", "30", "--orphan-after", "40")
	conn, err := channel.Dial(r.addr, 30*time.Second)
	assert.NilError(t, err)
	defer conn.Close()
	assert.NilError(t, conn.Send(telegram(t, newGUID(), memo("SLOW"))))
	waitPosted(t, c, "")
	assert.NilError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	r.waitLog(t, "relay stopping")
	assert.Equal(t, r.stop(t, syscall.SIGTERM), 1)
}
