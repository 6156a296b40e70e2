package coreapi

import (
	"fmt"
	"strings"

	"dedup/internal/certs"
	"dedup/internal/cli"
)

// Flags are the flags of a binary that calls the core: its URL, the
// timeouts and the TLS files. Their help speaks of the relay's calls (E901,
// E902); a binary whose timeouts end otherwise says so through the kong
// variables timeout_help and connect_timeout_help (resolve, reconcile).
type Flags struct {
	Core           string      `name:"core" default:"${core_default=http://127.0.0.1:9201}" placeholder:"${core_placeholder=}" help:"The core's base URL, http:// or https://."`
	Timeout        cli.Seconds `name:"timeout" default:"3" help:"${timeout_help=Seconds for the whole exchange with the core once connected; then E901.}"`
	ConnectTimeout cli.Seconds `name:"connect-timeout" default:"1" help:"${connect_timeout_help=Seconds to obtain a connection to the core (TCP and TLS handshake); then E902.}"`
	CoreCA         string      `name:"core-ca" placeholder:"FILE" help:"PEM bundle the core's certificate must chain to (default: the system roots). The host name is always verified."`
	CoreCert       string      `name:"core-cert" placeholder:"FILE" help:"PEM client certificate for mutual TLS to the core (with --core-key)."`
	CoreKey        string      `name:"core-key" placeholder:"FILE" help:"PEM key of --core-cert."`
}

// Validate checks that the core URL is one, the timeouts are greater than
// 0, and the client certificate comes with its key.
func (c Flags) Validate() error {
	if err := CheckBaseURL(c.Core); err != nil {
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

func (c Flags) tlsFiles() certs.Files {
	return certs.Files{Cert: c.CoreCert, Key: c.CoreKey, CA: c.CoreCA}
}

// CoreClient reads the TLS files (errors name the file: a runtime error)
// and returns the core client, with the loaded files (nil for http://) for
// a reload and the certificate-expiry metric.
func (c Flags) CoreClient(maxConns int) (*Client, *certs.Set, error) {
	cfg := Config{BaseURL: c.Core, ConnectTimeout: c.ConnectTimeout.D(), Timeout: c.Timeout.D(), MaxConns: maxConns}
	var set *certs.Set
	if strings.HasPrefix(c.Core, "https://") {
		var err error
		if set, err = certs.Load(c.tlsFiles()); err != nil {
			return nil, nil, fmt.Errorf("core TLS: %w", err)
		}
		cfg.TLS = set.ClientConfig()
	}
	client, err := New(cfg)
	return client, set, err
}

// MustCoreClient is CoreClient for a job (no connection bound, no reload):
// a file it cannot read ends the job with its message (cli.Fatal).
func (c Flags) MustCoreClient(name string) *Client {
	client, _, err := c.CoreClient(0)
	if err != nil {
		cli.Fatal(name, err)
	}
	return client
}

// CoreRoots says, for a start-up line, which roots the core's certificate
// is checked against.
func (c Flags) CoreRoots() string {
	switch {
	case !strings.HasPrefix(c.Core, "https://"):
		return "none (http)"
	case c.CoreCA != "":
		return "--core-ca " + c.CoreCA
	}
	return "the system's"
}
