// Package backend opens the ledger that a --db value names: a postgres:// or
// postgresql:// URL is the PostgreSQL backend, anything else a SQLite file.
// It is the one place that knows both backends; the relay and the jobs see
// only ledger.Ledger.
package backend

import (
	"strings"

	"dedup/ledger"
	"dedup/ledger/postgres"
	"dedup/ledger/sqlite"
)

// Open opens the ledger db names, applying its schema.
func Open(db string, opts ledger.Options) (ledger.Ledger, error) {
	if IsPostgresURL(db) {
		return postgres.Open(db, opts)
	}
	return sqlite.Open(db, opts)
}

// Check reports what is wrong with db without opening or creating anything,
// so that a binary can refuse a bad --db as a usage error. insecure
// (--db-insecure) allows a PostgreSQL host that is not loopback without a
// verified TLS connection.
func Check(db string, insecure bool) error {
	if IsPostgresURL(db) {
		return postgres.CheckURL(db, insecure)
	}
	return sqlite.CheckPath(db)
}

// CarriesPassword reports whether db holds a password itself (readable by
// every local user in the process list).
func CarriesPassword(db string) bool {
	return IsPostgresURL(db) && postgres.CarriesPassword(db)
}

// Describe returns db as it may be shown in logs, errors and summaries: a
// PostgreSQL URL without its password or any query parameter but sslmode,
// a SQLite path as it is.
func Describe(db string) string {
	if IsPostgresURL(db) {
		return postgres.Redact(db)
	}
	return db
}

// IsPostgresURL reports whether db names a PostgreSQL database (a URL with
// the postgres:// or postgresql:// scheme) rather than a SQLite file.
func IsPostgresURL(db string) bool {
	return strings.HasPrefix(db, "postgres://") || strings.HasPrefix(db, "postgresql://")
}

// Shared reports whether the ledger db names may be shared by processes on
// several hosts (PostgreSQL). A holder then confirms its claim on the
// ledger's clock before the first byte of its request (docs/rules.md
// rule 13): a pause of one host does not stop the others. A SQLite ledger
// lives on one host, where a pause stops every party at once.
func Shared(db string) bool { return IsPostgresURL(db) }
