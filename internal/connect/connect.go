// Package connect turns the flags that name the ledger into an open one:
// --db, --db-insecure, --synchronous, and the bound on the ledger's clock
// (--max-clock-skew). Package cli parses the command line; this package
// opens what the parsed flags name, so that a binary without a ledger
// (fixturecore, channel) links none. The core's flags live with the core's
// client (coreapi.Flags).
package connect

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"dedup/internal/cli"

	"dedup/ledger"
	"dedup/ledger/backend"
)

// LedgerFlags are the ledger flags of the binaries other than the relay
// (which has its own, with the same --synchronous): every binary that
// writes obeys the same durability rule, so that the runbook's jobs run on
// a ledger the relay was allowed to use.
type LedgerFlags struct {
	DB          string `name:"db" default:"relay.db" help:"Ledger: a SQLite file path, or a postgres:// URL."`
	DBInsecure  bool   `name:"db-insecure" help:"Allow a PostgreSQL host that is not loopback without sslmode=verify-full or verify-ca."`
	Synchronous string `name:"synchronous" enum:"full,normal" default:"full" help:"Durability of each commit: full, or normal (SQLite NORMAL; PostgreSQL: accept synchronous_commit off/local, fsync or full_page_writes off), as the relay's flag."`
	// Existing, set by the binaries that never create a ledger (reconcile,
	// inspect, settle, console), makes Open refuse a --db with no ledger
	// behind it instead of creating an empty one: a mistyped path must
	// never be proven clean or shown empty.
	Existing bool `kong:"-"`
}

// Open opens the ledger --db names, applying its schema. What can be
// found without writing is found first: a SQLite path that is a directory
// is refused naming the flag, before any file is created or read. A path
// with no file yet gets an empty ledger, as the lab's scripts expect, and
// log (if not nil) says so in one line: a mistyped --db is seen. With
// Existing, no ledger is created: a --db with none behind it (no file, a
// PostgreSQL database without the ledger's tables) is refused as "no
// ledger at DB".
func (l LedgerFlags) Open(opts ledger.Options, log *slog.Logger) (ledger.Ledger, error) {
	if !l.Existing {
		return Open(l.DB, opts, log)
	}
	opts.Existing = true
	lg, err := Open(l.DB, opts, log)
	if errors.Is(err, ledger.ErrNoLedger) {
		return nil, l.noLedger()
	}
	return lg, err
}

// CheckExists refuses, as Open with Existing would, a SQLite --db with no
// file behind it, without opening anything (settle learns who decides from
// the file's owner before it opens the ledger). A PostgreSQL database is
// checked by Open, which needs the server.
func (l LedgerFlags) CheckExists() error {
	if backend.IsPostgresURL(l.DB) {
		return nil
	}
	if _, err := os.Stat(l.DB); errors.Is(err, fs.ErrNotExist) {
		return l.noLedger()
	}
	return nil
}

// noLedger is the refusal of a --db with no ledger behind it.
func (l LedgerFlags) noLedger() error {
	return fmt.Errorf("no ledger at %s (nothing was created; is --db mistyped?)", backend.Describe(l.DB))
}

// Open is LedgerFlags.Open for a binary with a --db of its own (the relay).
func Open(db string, opts ledger.Options, log *slog.Logger) (ledger.Ledger, error) {
	created := false
	if !backend.IsPostgresURL(db) {
		fi, err := os.Stat(db)
		switch {
		case err == nil && fi.IsDir():
			return nil, fmt.Errorf("--db %s: is a directory, not a ledger file", db)
		case errors.Is(err, fs.ErrNotExist):
			created = true
		}
	}
	lg, err := backend.Open(db, opts)
	if err != nil {
		return nil, err
	}
	if created && log != nil {
		log.Warn("no ledger at "+db+": created an empty one", "db", db)
	}
	return lg, nil
}

// Options returns the ledger options these flags ask for.
func (l LedgerFlags) Options(warn func(string, ...any), actor string) ledger.Options {
	return ledger.Options{Synchronous: l.Synchronous, Warn: warn, Actor: actor}
}

// ClockFlags are the flag of the binaries that decide by age (docs/cli.md:
// relay, resolve, purge): past --max-clock-skew between the ledger's clock
// and the host's, nothing is decided by age.
type ClockFlags struct {
	MaxClockSkew cli.Seconds `name:"max-clock-skew" default:"5" help:"Seconds the ledger's clock may differ from this host's; past that the job decides nothing by age and exits 1."`
}

// Validate checks that --max-clock-skew is greater than 0.
func (c ClockFlags) Validate() error {
	if c.MaxClockSkew <= 0 {
		return fmt.Errorf("--max-clock-skew must be greater than 0")
	}
	return nil
}

// WarnInsecure logs what --db itself exposes: a password in the process
// list, or a PostgreSQL connection allowed without verified TLS.
func (l LedgerFlags) WarnInsecure(log *slog.Logger) {
	WarnDB(log, l.DB, l.DBInsecure)
}

// WarnDB logs what a --db value exposes (see LedgerFlags.WarnInsecure).
func WarnDB(log *slog.Logger, db string, insecure bool) {
	if backend.CarriesPassword(db) {
		log.Warn("--db carries a password: every local user can read it in the process list; use passfile= or PGPASSFILE (mode 0600), PGPASSWORD in the service's environment, or a client certificate",
			"db", backend.Describe(db))
	}
	if insecure {
		log.Warn("--db-insecure: the PostgreSQL connection may be plain text or reach an unverified server, which would receive the password",
			"db", backend.Describe(db))
	}
}

// Validate checks --db without opening or creating anything.
func (l LedgerFlags) Validate() error {
	if err := backend.Check(l.DB, l.DBInsecure); err != nil {
		return fmt.Errorf("--db: %v", err)
	}
	return nil
}
