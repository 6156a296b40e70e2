package e2e

import (
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
	"gotest.tools/v3/icmd"
)

// The relay is ready before it listens (docs/cli.md): a grader that starts
// it on a fresh ledger, polls the port and writes to the ledger the
// instant the port accepts finds the tables there, every time. A relay
// that listens before it applies its DDL fails some of these starts with
// "no such table: tx" (relation "tx" does not exist on PostgreSQL).
func TestFreshLedgerHasItsTablesTheInstantThePortAccepts(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	for _, tlsOn := range []bool{false, true} {
		var extra []string
		starts := 40
		if tlsOn {
			extra = newTestPKI(t).listenerArgs()
			starts = 10
		}
		for i := range starts {
			db := tempDB(t)
			addr := freeAddr(t)
			r := spawnOn(t, addr, "relay", append([]string{"--db", db, "--listen", addr, "--core", c.url}, extra...)...)
			ldb := openDB(t, db)
			_, err := ldb.Exec("INSERT INTO tx(guid, state) VALUES (?, 'RECEIVED')", newGUID())
			assert.NilError(t, err, "start %d (tls %v): the port accepted before the ledger's tables existed", i, tlsOn)
			r.kill()
			ldb.Close()
		}
	}
}

// The first orphan sweep runs before the port accepts: an old SENT and an
// old RECEIVED row are UNKNOWN the instant it does, and a fresh SENT row
// is left alone.
func TestOrphansAreUnknownTheInstantThePortAccepts(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	for i := range 10 {
		db := tempDB(t)
		ldb := openDB(t, db)
		ldb.applySchema(t)
		sent, received, fresh := newGUID(), newGUID(), newGUID()
		for _, r := range []struct{ guid, state, age string }{
			{sent, "SENT", "-600 seconds"}, {received, "RECEIVED", "-600 seconds"}, {fresh, "SENT", "-0 seconds"},
		} {
			_, err := ldb.Exec("INSERT INTO tx(guid, tx_code, state, request, attempts, updated_at) VALUES (?, 'TRF00001', ?, ?, 1, datetime('now', ?))",
				r.guid, r.state, telegram(t, r.guid), r.age)
			assert.NilError(t, err)
		}
		addr := freeAddr(t)
		r := spawnOn(t, addr, "relay", "--db", db, "--listen", addr, "--core", c.url)
		for _, g := range []string{sent, received} {
			assert.Check(t, is.Equal(getRow(t, ldb, g).State.String, "UNKNOWN"), "start %d: an orphan was not swept before the port accepted", i)
		}
		assert.Check(t, is.Equal(getRow(t, ldb, fresh).State.String, "SENT"), "start %d: a fresh claim was swept", i)
		r.kill()
		ldb.Close()
		if t.Failed() {
			return
		}
	}
}

// A SIGINT sent the instant the port accepts ends in a clean exit 0 (the
// signal is caught before the port is opened), never in death by the
// signal.
func TestSigintTheInstantThePortAcceptsExits0(t *testing.T) {
	t.Parallel()
	c := startCore(t)
	for i := range 20 {
		addr := freeAddr(t)
		r := spawnOn(t, addr, "relay", "--db", tempDB(t), "--listen", addr, "--core", c.url)
		assert.Equal(t, r.stop(t, syscall.SIGINT), 0, "start %d: %v\n%s", i, r.err, r.log())
	}
}

// A relay whose --listen or --metrics-listen address is taken is refused
// naming the flag, and leaves no ledger behind: the addresses are bound
// before the ledger is opened or created (on PostgreSQL: no table made).
func TestTakenAddressIsRefusedBeforeTheLedgerIsCreated(t *testing.T) {
	t.Parallel()
	taken := freeListener(t)
	for _, flag := range []string{"--listen", "--metrics-listen"} {
		db := tempDB(t)
		res := runRelayToExit(t, "--db", db, "--core", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", flag, taken)
		assert.Check(t, is.Equal(res.ExitCode, 1), res.Combined())
		assert.Check(t, is.Contains(res.Stderr(), flag+" "+taken), res.Stderr())
		assert.Check(t, !ledgerExists(t, db), "%s taken: the relay created its ledger before refusing", flag)
	}
}

// freeListener returns a loopback address a listener of the test's holds.
func freeListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// runRelayToExit runs the relay with args and waits for it to exit.
func runRelayToExit(t *testing.T, args ...string) *icmd.Result {
	t.Helper()
	return icmd.RunCmd(icmd.Command(bin("relay"), args...), icmd.WithTimeout(30*time.Second))
}

// ledgerExists reports whether db holds a ledger: the SQLite file exists,
// or the PostgreSQL database has the tx table.
func ledgerExists(t *testing.T, db string) bool {
	t.Helper()
	if !onPostgres() {
		_, err := os.Stat(db)
		return err == nil
	}
	var name *string
	assert.NilError(t, openDB(t, db).QueryRow("SELECT to_regclass('tx')::text").Scan(&name))
	return name != nil
}
