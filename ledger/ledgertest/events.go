package ledgertest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
	"dedup/ledger"
)

// The events of docs/ledger.md "Events" (the spec's settle.md): every change
// to a row but a first send's claim and outcome has its event, written in
// the same transaction; a change without its event, or an event without
// its change, cannot exist.

const actor = "suite@test"

// eventSummary is an event without its id and time, for comparisons.
func eventSummary(e ledger.Event) string {
	a := "-"
	if e.Attempts != nil {
		a = fmt.Sprint(*e.Attempts)
	}
	return fmt.Sprintf("%s %s %s->%s %s attempts=%s", e.Actor, e.Action, e.FromState, e.ToState, e.RspCode, a)
}

func events(t *testing.T, l ledger.Ledger, g string) []string {
	t.Helper()
	evs, err := l.Events(ctx, g)
	assert.NilError(t, err)
	out := []string{}
	for _, e := range evs {
		out = append(out, eventSummary(e))
	}
	return out
}

// testEventsOnEveryChange: the first send writes none; a reclaim, its
// outcome, the sweep and resolve each write theirs, naming the actor.
func testEventsOnEveryChange(t *testing.T, s suite) {
	db := s.New(t)
	l := s.open(t, db, ledger.Options{Actor: actor})
	ok, err := l.Claim(ctx, guid(1), "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, ok)
	recorded, err := l.Finish(ctx, guid(1), 1, ledger.Outcome{State: dedup.StateFailed, RspCode: "E902"})
	assert.NilError(t, err)
	assert.Assert(t, recorded)
	assert.DeepEqual(t, events(t, l, guid(1)), []string{}) // the first send: the row is its story

	attempt, _, ok, err := l.Reclaim(ctx, guid(1), nil, 0)
	assert.NilError(t, err)
	assert.Assert(t, ok)
	recorded, err = l.Finish(ctx, guid(1), attempt, ledger.Outcome{State: dedup.StateUnknown, RspCode: "E901", Reclaimed: true, Detail: "timeout"})
	assert.NilError(t, err)
	assert.Assert(t, recorded)
	assert.DeepEqual(t, events(t, l, guid(1)), []string{
		actor + " reclaim FAILED->SENT  attempts=2",
		actor + " outcome SENT->UNKNOWN E901 attempts=2",
	})
	evs, err := l.Events(ctx, guid(1))
	assert.NilError(t, err)
	assert.Check(t, is.Equal(evs[1].Detail, "timeout"))
	assert.Check(t, evs[0].ID < evs[1].ID && evs[0].At != "")

	s.insert(t, db, guid(2), "TRF00001", "SENT", nil, []byte("r"), nil, 1, 120)
	s.insert(t, db, guid(3), "TRF00001", "RECEIVED", nil, []byte("r"), nil, 0, 120)
	n, err := l.SweepOrphans(ctx, time.Minute)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(2))
	assert.DeepEqual(t, events(t, l, guid(2)), []string{actor + " sweep SENT->UNKNOWN E901 attempts=1"})
	assert.DeepEqual(t, events(t, l, guid(3)), []string{actor + " sweep RECEIVED->UNKNOWN E901 attempts=0"})

	s.Exec(t, db, "UPDATE tx SET updated_at=AGO(600) WHERE guid=?", guid(2))
	unknown, err := l.SelectUnknown(ctx, 300*time.Second)
	assert.NilError(t, err)
	assert.Equal(t, len(unknown), 1)
	recorded, err = l.Resolve(ctx, unknown[0], ledger.Outcome{State: dedup.StateFailed, RspCode: "E902", Detail: "core lookup: 404 NOT_FOUND"})
	assert.NilError(t, err)
	assert.Assert(t, recorded)
	assert.DeepEqual(t, events(t, l, guid(2)), []string{
		actor + " sweep SENT->UNKNOWN E901 attempts=1",
		actor + " resolve UNKNOWN->FAILED E902 attempts=1",
	})
	// A fenced write that changed nothing writes nothing.
	recorded, err = l.Resolve(ctx, unknown[0], ledger.Outcome{State: dedup.StateDone, RspCode: "0000"})
	assert.NilError(t, err)
	assert.Assert(t, !recorded)
	recorded, err = l.Finish(ctx, guid(1), 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Reclaimed: true})
	assert.NilError(t, err)
	assert.Assert(t, !recorded)
	assert.Equal(t, len(events(t, l, guid(2))), 2)
	assert.Equal(t, len(events(t, l, guid(1))), 2)
}

// testEventsCommitWithTheirChange: a commit that fails leaves neither the
// change nor its event; one that happened but was not acknowledged leaves
// both.
func testEventsCommitWithTheirChange(t *testing.T, s suite) {
	for _, tc := range []struct {
		name  string
		fault func(f func() error) *ledger.Faults
		both  bool
	}{
		{"failed", func(f func() error) *ledger.Faults { return &ledger.Faults{BeforeCommit: f} }, false},
		{"ambiguous", func(f func() error) *ledger.Faults { return &ledger.Faults{AfterCommit: f} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := s.New(t)
			var failing atomic.Bool
			l := s.open(t, db, ledger.Options{Actor: actor, Faults: tc.fault(func() error {
				if failing.Load() {
					return errInjected
				}
				return nil
			})})
			s.insert(t, db, guid(1), "TRF00001", "FAILED", "E902", []byte("r"), nil, 1, 0)
			s.insert(t, db, guid(2), "TRF00001", "SENT", nil, []byte("r"), nil, 1, 120)
			s.insert(t, db, guid(3), "TRF00001", "UNKNOWN", "E901", []byte("r"), nil, 1, 600)
			unknown, err := l.SelectUnknown(ctx, time.Minute)
			assert.NilError(t, err)
			failing.Store(true)
			_, _, _, err = l.Reclaim(ctx, guid(1), nil, 0)
			assert.Check(t, err != nil)
			_, err = l.SweepOrphans(ctx, time.Minute)
			assert.Check(t, err != nil)
			_, err = l.Resolve(ctx, unknown[0], ledger.Outcome{State: dedup.StateFailed, RspCode: "E902"})
			assert.Check(t, err != nil)
			failing.Store(false)
			// (States as parameters: the suite's dialect rewrites the word NOW.)
			for g, changed := range map[string]string{guid(1): "SENT", guid(2): "UNKNOWN", guid(3): "FAILED"} {
				rows := s.QueryInt(t, db, "SELECT count(*) FROM tx WHERE guid=? AND state=?", g, changed)
				evs := s.QueryInt(t, db, "SELECT count(*) FROM tx_event WHERE guid=?", g)
				want := int64(0)
				if tc.both {
					want = 1
				}
				assert.Check(t, is.Equal(rows, want), "%s: change", g)
				assert.Check(t, is.Equal(evs, want), "%s: event", g)
			}
		})
	}
}

// proposal adds a proposal about row r and returns its id.
func proposal(t *testing.T, l ledger.Ledger, r *ledger.Row) int64 {
	t.Helper()
	a := r.Attempts
	id, err := l.AddEvent(ctx, ledger.Event{GUID: r.GUID, Actor: "settle:kim(kim)@test", Action: ledger.ActionPropose,
		FromState: string(r.State), Attempts: &a, Detail: `{"as":"not-applied"}`})
	assert.NilError(t, err)
	return id
}

func decision(id int64, r *ledger.Row, action string, to ledger.Outcome) ledger.Decision {
	a := r.Attempts
	d := ledger.Decision{Proposal: id, Event: ledger.Event{GUID: r.GUID, Actor: "settle:lee(lee)@test", Action: action,
		FromState: string(r.State), Attempts: &a, Detail: ledger.ProposalRef(id) + `"reason":"checked"}`}}
	if action == ledger.ActionApprove {
		d.From, d.To = r, to
		d.Event.ToState, d.Event.RspCode = string(to.State), to.RspCode
	}
	return d
}

// testDecisions: a proposal changes nothing but the events and is listed
// open; an approval changes the row fenced, with its event, once; a
// decision on a closed proposal or a changed row writes nothing; two
// approvals racing each other on two handles: exactly one wins.
func testDecisions(t *testing.T, s suite) {
	db := s.New(t)
	l := s.open(t, db, ledger.Options{Actor: actor})
	l2 := s.open(t, db, ledger.Options{Actor: actor})
	s.insert(t, db, guid(1), "TRF00001", "UNKNOWN", "E901", []byte("r"), nil, 1, 600)
	r, err := l.Get(ctx, guid(1))
	assert.NilError(t, err)
	id := proposal(t, l, r)
	same, err := l.Get(ctx, guid(1))
	assert.NilError(t, err)
	assert.Check(t, same.State == r.State && same.Attempts == r.Attempts && same.UpdatedAt == r.UpdatedAt && same.RspCode == r.RspCode,
		"a proposal changed the row: %+v, was %+v", same, r)
	open, err := l.OpenProposals(ctx)
	assert.NilError(t, err)
	assert.Equal(t, len(open), 1)
	assert.Equal(t, open[0].ID, id)
	e, err := l.EventByID(ctx, id)
	assert.NilError(t, err)
	assert.Assert(t, e != nil && e.Action == ledger.ActionPropose)

	to := ledger.Outcome{State: dedup.StateFailed, RspCode: "E902"}
	var wins, closed, changed atomic.Int32
	var wg sync.WaitGroup
	for k := 0; k < 6; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := l
			if k%2 == 1 {
				h = l2
			}
			err := h.Decide(ctx, decision(id, r, ledger.ActionApprove, to))
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, ledger.ErrProposalClosed):
				closed.Add(1)
			case errors.Is(err, ledger.ErrRowChanged):
				changed.Add(1)
			default:
				t.Errorf("approve: %v", err)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, wins.Load(), int32(1), "closed=%d changed=%d", closed.Load(), changed.Load())
	assert.Equal(t, s.QueryInt(t, db, "SELECT count(*) FROM tx_event WHERE action='approve'"), int64(1))
	now, _ := l.Get(ctx, guid(1))
	assert.Equal(t, now.State, dedup.StateFailed)
	open, err = l.OpenProposals(ctx)
	assert.NilError(t, err)
	assert.Equal(t, len(open), 0)
	err = l.Decide(ctx, decision(id, r, ledger.ActionReject, ledger.Outcome{}))
	assert.Assert(t, errors.Is(err, ledger.ErrProposalClosed), "%v", err)

	// A row that changed after the proposal: nothing is written.
	s.insert(t, db, guid(2), "TRF00001", "UNKNOWN", "E901", []byte("r"), nil, 1, 600)
	r2, _ := l.Get(ctx, guid(2))
	id2 := proposal(t, l, r2)
	s.Exec(t, db, "UPDATE tx SET attempts=2 WHERE guid=?", guid(2))
	err = l.Decide(ctx, decision(id2, r2, ledger.ActionApprove, to))
	assert.Assert(t, errors.Is(err, ledger.ErrRowChanged), "%v", err)
	assert.Equal(t, s.QueryInt(t, db, "SELECT count(*) FROM tx_event WHERE guid=?", guid(2)), int64(1))
	// A rejection writes its event only.
	assert.NilError(t, l.Decide(ctx, decision(id2, r2, ledger.ActionReject, ledger.Outcome{})))
	assert.Equal(t, s.QueryInt(t, db, "SELECT count(*) FROM tx WHERE guid=? AND state=?", guid(2), "UNKNOWN"), int64(1))
	assert.DeepEqual(t, events(t, l, guid(2)), []string{
		"settle:kim(kim)@test propose UNKNOWN->  attempts=1",
		"settle:lee(lee)@test reject UNKNOWN->  attempts=1",
	})
}

// testPurgeEvents: only events older than the limit go; EventsBetween
// lists a period.
func testPurgeEvents(t *testing.T, s suite) {
	db := s.New(t)
	l := s.open(t, db, ledger.Options{Actor: actor})
	s.Exec(t, db, "INSERT INTO tx_event(guid, at, actor, action) VALUES(?, AGO(86400000), 'x', 'sweep')", guid(1))
	s.Exec(t, db, "INSERT INTO tx_event(guid, at, actor, action) VALUES(?, AGO(10), 'x', 'sweep')", guid(2))
	all, err := l.EventsBetween(ctx, time.Now().Add(-2000*24*time.Hour), time.Time{})
	assert.NilError(t, err)
	assert.Equal(t, len(all), 2)
	recent, err := l.EventsBetween(ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	assert.NilError(t, err)
	assert.Equal(t, len(recent), 1)
	assert.Equal(t, recent[0].GUID, guid(2))
	n, err := l.PurgeEvents(ctx, 900, 100)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(1))
	assert.Equal(t, s.QueryInt(t, db, "SELECT count(*) FROM tx_event"), int64(1))
}
