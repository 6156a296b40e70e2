package send_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
	"dedup/internal/coreapi"
	"dedup/internal/fixturecore"
	"dedup/internal/send"
	"dedup/internal/testbed/pgtest"
	"dedup/ledger"
	"dedup/ledger/backend"
	"dedup/lhstd"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var ctx = context.Background()

// ledgers opens a fresh ledger of each kind, with a function that runs SQL
// on it as another tool would (AGO(n): n seconds before the database's now).
func ledgers(t *testing.T) map[string]func(t *testing.T) (ledger.Ledger, func(q string, args ...any)) {
	return map[string]func(t *testing.T) (ledger.Ledger, func(string, ...any)){
		"sqlite": func(t *testing.T) (ledger.Ledger, func(string, ...any)) {
			path := filepath.Join(t.TempDir(), "relay.db")
			l, err := backend.Open(path, ledger.Options{})
			assert.NilError(t, err)
			t.Cleanup(func() { l.Close() })
			db, err := sql.Open("sqlite3", path+"?_busy_timeout=10000")
			assert.NilError(t, err)
			t.Cleanup(func() { db.Close() })
			return l, func(q string, args ...any) {
				q = strings.NewReplacer("AGO(120)", "datetime('now','-120 seconds')", "AGO(30)", "datetime('now','-30 seconds')").Replace(q)
				_, err := db.Exec(q, args...)
				assert.NilError(t, err)
			}
		},
		"postgres": func(t *testing.T) (ledger.Ledger, func(string, ...any)) {
			url := pgtest.SharedDatabase(t)
			l, err := backend.Open(url, ledger.Options{})
			assert.NilError(t, err)
			t.Cleanup(func() { l.Close() })
			return l, func(q string, args ...any) {
				q = pgAgo.Replace(q)
				pgtest.Exec(t, url, pgtest.Rebind(q), args...)
			}
		},
	}
}

func core(t *testing.T) (*fixturecore.Core, *coreapi.Client) {
	t.Helper()
	c, err := fixturecore.New(fixturecore.Config{})
	assert.NilError(t, err)
	s, err := fixturecore.Listen(c, "127.0.0.1:0")
	assert.NilError(t, err)
	t.Cleanup(func() { s.Close() })
	cl, err := coreapi.New(coreapi.Config{BaseURL: s.URL, ConnectTimeout: time.Second, Timeout: 2 * time.Second})
	assert.NilError(t, err)
	t.Cleanup(cl.CloseIdle)
	return c, cl
}

func request(t *testing.T, guid string) *lhstd.Request {
	t.Helper()
	tg, err := lhstd.NewTransferRequest(guid, "MOB", "20261129093000", lhstd.Transfer{From: "11020030004001", To: "11020030004002", Amount: 150000, Memo: "frozen"})
	assert.NilError(t, err)
	r, err := lhstd.ParseRequest(tg)
	assert.NilError(t, err)
	return r
}

const lease = 7 * time.Second // ledger.Bounds{ConnectTimeout: time.Second}.Lease()

// Rule 13: a holder frozen between its claim and its send (a paused VM:
// its monotonic clock stood still, so its own lease looks unspent) wakes
// after the row was swept, resolved "not found" and resent by reprocess.
// With the confirmation on the ledger's clock it sends nothing; without it
// (the mutant) the core applies the transfer twice.
func TestFrozenHolderWhoseClaimWasSweptSendsNothing(t *testing.T) {
	for kind, open := range ledgers(t) {
		t.Run(kind, func(t *testing.T) {
			for _, confirm := range []bool{true, false} {
				l, exec := open(t)
				fc, cl := core(t)
				g := "20261129MOB0000000000000000FRZ01"
				if !confirm {
					g = "20261129MOB0000000000000000FRZ02"
				}
				req := request(t, g)
				ok, err := l.Claim(ctx, g, req.TxCode, req.Raw)
				assert.NilError(t, err)
				assert.Assert(t, ok)
				// The pause: the claim grows old on the ledger's clock,
				// the sweep, resolve and reprocess run their course.
				exec("UPDATE tx SET updated_at=AGO(120) WHERE guid=?", g)
				n, err := l.SweepOrphans(ctx, time.Minute)
				assert.NilError(t, err)
				assert.Equal(t, n, int64(1))
				unknown, err := l.SelectUnknown(ctx, 0)
				assert.NilError(t, err)
				assert.Equal(t, len(unknown), 1)
				resolved, err := l.Resolve(ctx, unknown[0], ledger.Outcome{State: dedup.StateFailed, RspCode: dedup.CodeNotSent})
				assert.NilError(t, err)
				assert.Assert(t, resolved)
				attempt, stored, ok, err := l.Reclaim(ctx, g, nil, 3)
				assert.NilError(t, err)
				assert.Assert(t, ok)
				fresh := &send.Sender{Ledger: l, Core: cl, Lease: lease, Confirm: true}
				sent := fresh.Send(ctx, send.Claim{Request: req, Attempt: attempt, Asked: time.Now(), Received: stored})
				assert.Equal(t, sent.Result.Code, "0000", "%+v", sent.Result)
				assert.Assert(t, sent.Recorded)

				// The frozen holder wakes: to its monotonic clock no time
				// has passed (the injected Asked).
				stale := &send.Sender{Ledger: l, Core: cl, Lease: lease, Confirm: confirm}
				late := stale.Send(ctx, send.Claim{Request: req, Attempt: 1, Asked: time.Now(), Received: req.Raw})
				assert.Check(t, !late.Recorded, "a stale holder recorded an outcome")
				if confirm {
					assert.Check(t, late.Result.LeaseExpired && late.Result.Code == dedup.CodeNotSent, "%+v", late.Result)
					assert.Check(t, is.Equal(fc.Stats().ByGUID[g], 1), "the stale holder's request reached the core")
				} else {
					assert.Check(t, is.Equal(fc.Stats().AppliedByGUID[g], 2), "the mutant without confirmation did not double-apply: the test shows nothing")
				}
			}
		})
	}
}

// Rule 13's age: a claim still SENT with the holder's attempt, but older
// than the lease on the ledger's clock (the sweep may move it any moment),
// sends nothing; a young one is sent.
func TestClaimOlderThanItsLeaseOnTheLedgersClockSendsNothing(t *testing.T) {
	for kind, open := range ledgers(t) {
		t.Run(kind, func(t *testing.T) {
			l, exec := open(t)
			fc, cl := core(t)
			s := &send.Sender{Ledger: l, Core: cl, Lease: lease, Confirm: true}
			old, young := "20261129MOB0000000000000000OLD01", "20261129MOB0000000000000000YNG01"
			for _, g := range []string{old, young} {
				req := request(t, g)
				ok, err := l.Claim(ctx, g, req.TxCode, req.Raw)
				assert.NilError(t, err)
				assert.Assert(t, ok)
			}
			exec("UPDATE tx SET updated_at=AGO(30) WHERE guid=?", old)
			r := s.Send(ctx, send.Claim{Request: request(t, old), Attempt: 1, Asked: time.Now(), Received: request(t, old).Raw})
			assert.Check(t, r.Result.LeaseExpired, "%+v", r.Result)
			assert.Check(t, is.Equal(fc.Stats().ByGUID[old], 0), "a claim past its lease on the ledger's clock was sent")
			assert.Check(t, r.Recorded, "the unsent claim's E902 was not recorded")
			r = s.Send(ctx, send.Claim{Request: request(t, young), Attempt: 1, Asked: time.Now(), Received: request(t, young).Raw})
			assert.Check(t, is.Equal(r.Result.Code, "0000"), "%+v", r.Result)
			assert.Check(t, is.Equal(fc.Stats().ByGUID[young], 1))
		})
	}
}
