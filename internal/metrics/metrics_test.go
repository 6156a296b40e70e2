package metrics

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
	"dedup/ledger"
	"dedup/ledger/sqlite"
)

// doneRows claims and finishes n new GUIDs starting at from.
func doneRows(t *testing.T, l ledger.Ledger, from, n int) {
	t.Helper()
	ctx := context.Background()
	for i := from; i < from+n; i++ {
		g := fmt.Sprintf("20261202MOB%021d", i)
		claimed, err := l.Claim(ctx, g, "TRF00001", []byte("req"))
		assert.NilError(t, err)
		assert.Assert(t, claimed)
		ok, err := l.Finish(ctx, g, 1, ledger.Outcome{State: dedup.StateDone, RspCode: "0000", Response: []byte("rsp")})
		assert.NilError(t, err)
		assert.Assert(t, ok)
	}
}

// gauge reads g's value.
func gauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var out dto.Metric
	assert.NilError(t, g.Write(&out))
	return out.GetGauge().GetValue()
}

// waitGauge polls the DONE gauge until it reads want, failing after a
// deadline with what it last read.
func waitGauge(t *testing.T, m *Relay, want float64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got float64
	for time.Now().Before(deadline) {
		if got = gauge(t, m.rows[dedup.StateDone]); got == want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("dedup_ledger_rows{state=DONE} is %v, want %v", got, want)
}

// TestGaugesCountALargeStateInSlicesAndTheRestWithinTheLimit: a refresh
// reads at most the limit per state; a state past it shows the limit
// until the background count, in slices, reports every row; once the
// state is back under the limit the refresh's own count is shown.
func TestGaugesCountALargeStateInSlicesAndTheRestWithinTheLimit(t *testing.T) {
	l, err := sqlite.Open(filepath.Join(t.TempDir(), "relay.db"), ledger.Options{})
	assert.NilError(t, err)
	defer l.Close()
	doneRows(t, l, 0, 23)
	m := New()
	s := NewServer(m, l, time.Hour, func() bool { return true })
	s.limit, s.slice = 5, 2

	assert.NilError(t, s.Refresh(context.Background()))
	assert.Check(t, is.Equal(gauge(t, m.rows[dedup.StateDone]), 5.0), "a refresh past the limit must show the limit, not count on")
	assert.Check(t, is.Equal(gauge(t, m.rows[dedup.StateUnknown]), 0.0))

	// The background count runs after the first refresh and every hour
	// (the interval): the gauge reaches 23 only through its slices.
	s.every = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 10)
	go s.RunRefresher(ctx, func(err error) { errs <- err })
	waitGauge(t, m, 23)

	doneRows(t, l, 100, 7)
	waitGauge(t, m, 30)
	cancel()
	select {
	case err := <-errs:
		t.Fatalf("the refresher reported %v", err)
	default:
	}

	n, err := l.PurgeBatch(context.Background(), 0, 27)
	assert.NilError(t, err)
	assert.Equal(t, n, int64(27))
	assert.NilError(t, s.Refresh(context.Background()))
	assert.Check(t, is.Equal(gauge(t, m.rows[dedup.StateDone]), 3.0), "a state back under the limit must show the refresh's own count, not the last background one")
}

// TestNotCommittedCountsEachReason: what a PostgreSQL ledger tells
// OnNotCommitted (ledger/postgres's HA tests make it tell) lands in
// dedup_ledger_not_committed_total under its own reason, and a reason the
// ledger does not define makes no series of its own.
func TestNotCommittedCountsEachReason(t *testing.T) {
	m := New()
	m.NotCommitted(ledger.NotCommittedWarning)
	m.NotCommitted(ledger.NotCommittedWarning)
	m.NotCommitted(ledger.NotCommittedNotPrimary)
	m.NotCommitted("something else")
	var nilRelay *Relay
	nilRelay.NotCommitted(ledger.NotCommittedWarning) // metrics off: no panic, nothing counted
	read := func(reason string) float64 {
		var out dto.Metric
		assert.NilError(t, m.notCommitted[reason].Write(&out))
		return out.GetCounter().GetValue()
	}
	assert.Check(t, is.Equal(read(ledger.NotCommittedWarning), 2.0))
	assert.Check(t, is.Equal(read(ledger.NotCommittedNotPrimary), 1.0))
	assert.Check(t, is.Len(m.notCommitted, 2))
}
