// Package command is what dedup's binaries share beyond the command line
// itself: the flags that open the ledger (--db), bound its clock
// (--max-clock-skew) and reach the core (--core and its TLS files), and how
// a batch job (resolve, reprocess, purge) runs, reports and exits. Package
// cli parses; this package wires what the flags name to the packages that
// do the work.
package command

import (
	"fmt"
	"log/slog"
	"strings"

	"dedup/certs"
	"dedup/cli"
	"dedup/coreapi"
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
}

// Options returns the ledger options these flags ask for.
func (l LedgerFlags) Options(warn func(string, ...any), actor string) ledger.Options {
	return ledger.Options{Synchronous: l.Synchronous, Warn: warn, Actor: actor}
}

// ClockFlags are the flag of the binaries that decide by age (docs/cli.md:
// relay, resolve, purge): past --max-clock-skew between the ledger's clock
// and the host's, nothing is decided by age.
type ClockFlags struct {
	MaxClockSkew cli.Seconds `name:"max-clock-skew" default:"5" help:"cli.Seconds the ledger's clock may differ from this host's; past that the job decides nothing by age and exits 1."`
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

// CoreFlags are the flags of a binary that calls the core.
type CoreFlags struct {
	Core           string      `name:"core" default:"http://127.0.0.1:9201" help:"The core's base URL, http:// or https://."`
	Timeout        cli.Seconds `name:"timeout" default:"3" help:"cli.Seconds for the whole exchange with the core once connected; then E901."`
	ConnectTimeout cli.Seconds `name:"connect-timeout" default:"1" help:"cli.Seconds to obtain a connection to the core (TCP and TLS handshake); then E902."`
	CoreCA         string      `name:"core-ca" placeholder:"FILE" help:"PEM bundle the core's certificate must chain to (default: the system roots). The host name is always verified."`
	CoreCert       string      `name:"core-cert" placeholder:"FILE" help:"PEM client certificate for mutual TLS to the core (with --core-key)."`
	CoreKey        string      `name:"core-key" placeholder:"FILE" help:"PEM key of --core-cert."`
}

// Validate checks that the core URL is one, the timeouts are greater than
// 0, and the client certificate comes with its key.
func (c CoreFlags) Validate() error {
	if err := coreapi.CheckBaseURL(c.Core); err != nil {
		return fmt.Errorf("--core: %v", err)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("--timeout must be greater than 0")
	}
	if c.ConnectTimeout <= 0 {
		return fmt.Errorf("--connect-timeout must be greater than 0")
	}
	if err := c.tlsFiles().Check("--core-cert", "--core-key"); err != nil {
		return err
	}
	if !strings.HasPrefix(c.Core, "https://") && !c.tlsFiles().Empty() {
		return fmt.Errorf("--core-ca, --core-cert and --core-key need an https:// --core")
	}
	return nil
}

func (c CoreFlags) tlsFiles() certs.Files {
	return certs.Files{Cert: c.CoreCert, Key: c.CoreKey, CA: c.CoreCA}
}

// CoreClient reads the TLS files (errors name the file: a runtime error)
// and returns the core client, with the loaded files (nil for http://) for
// a reload and the certificate-expiry metric.
func (c CoreFlags) CoreClient(maxConns int) (*coreapi.Client, *certs.Set, error) {
	cfg := coreapi.Config{BaseURL: c.Core, ConnectTimeout: c.ConnectTimeout.D(), Timeout: c.Timeout.D(), MaxConns: maxConns}
	var set *certs.Set
	if strings.HasPrefix(c.Core, "https://") {
		var err error
		if set, err = certs.Load(c.tlsFiles()); err != nil {
			return nil, nil, fmt.Errorf("core TLS: %w", err)
		}
		cfg.TLS = set.ClientConfig()
	}
	client, err := coreapi.New(cfg)
	return client, set, err
}

// MustCoreClient is CoreClient for a job (no connection bound, no reload):
// a file it cannot read ends the job with its message (cli.Fatal).
func (c CoreFlags) MustCoreClient(name string) *coreapi.Client {
	client, _, err := c.CoreClient(0)
	if err != nil {
		cli.Fatal(name, err)
	}
	return client
}

// CoreRoots says, for a start-up line, which roots the core's certificate
// is checked against.
func (c CoreFlags) CoreRoots() string {
	switch {
	case !strings.HasPrefix(c.Core, "https://"):
		return "none (http)"
	case c.CoreCA != "":
		return "--core-ca " + c.CoreCA
	}
	return "the system's"
}
