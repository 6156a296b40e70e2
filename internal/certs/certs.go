// Package certs loads the PEM files of the relay's TLS links: the channel
// listener's certificate, key and client CA bundle, and the core client's
// CA bundle and client certificate. Files are checked when they are loaded
// (readable, PEM, a key that matches its certificate, a certificate not
// already expired), and a Files can be reloaded (SIGHUP) without a restart:
// a reload that fails keeps what was loaded before.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Files names the PEM files of one side of a TLS link. Cert and Key go
// together (both or neither); CA is optional.
type Files struct {
	Cert, Key string
	CA        string
}

// Empty reports whether no file is named.
func (f Files) Empty() bool { return f.Cert == "" && f.Key == "" && f.CA == "" }

// Check reports a usage error in f that needs no file to be read: a
// certificate without its key, or a key without its certificate. certFlag
// and keyFlag name the flags in the message.
func (f Files) Check(certFlag, keyFlag string) error {
	if (f.Cert == "") != (f.Key == "") {
		return fmt.Errorf("%s and %s go together: give both or neither", certFlag, keyFlag)
	}
	return nil
}

// loaded is one successful load of a Files.
type loaded struct {
	cert *tls.Certificate // nil without Cert/Key
	leaf *x509.Certificate
	pool *x509.CertPool // nil without CA
}

// Set is a Files loaded, and reloadable. It is safe for concurrent use.
type Set struct {
	files Files
	cur   atomic.Pointer[loaded]
}

// Load reads and checks the files of f.
func Load(f Files) (*Set, error) {
	s := &Set{files: f}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again. On an error the previous files stay in use
// and the error names the file and the cause.
func (s *Set) Reload() error {
	l, err := load(s.files, time.Now())
	if err != nil {
		return err
	}
	s.cur.Store(l)
	return nil
}

// Files returns the file names.
func (s *Set) Files() Files { return s.files }

// NotAfter is the expiry of the loaded certificate (zero without one).
func (s *Set) NotAfter() time.Time {
	if l := s.cur.Load(); l.leaf != nil {
		return l.leaf.NotAfter
	}
	return time.Time{}
}

func load(f Files, now time.Time) (*loaded, error) {
	l := &loaded{}
	if f.Cert != "" {
		certPEM, err := readPEM(f.Cert, "CERTIFICATE")
		if err != nil {
			return nil, err
		}
		keyPEM, err := os.ReadFile(f.Key)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", f.Key, err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("key %s with certificate %s: %w", f.Key, f.Cert, err)
		}
		if now.After(pair.Leaf.NotAfter) {
			return nil, fmt.Errorf("certificate %s expired at %s", f.Cert, pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		l.cert, l.leaf = &pair, pair.Leaf
	}
	if f.CA != "" {
		caPEM, err := readPEM(f.CA, "CERTIFICATE")
		if err != nil {
			return nil, err
		}
		l.pool = x509.NewCertPool()
		if !l.pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("CA bundle %s: no usable certificate in it", f.CA)
		}
	}
	return l, nil
}

// readPEM reads path and checks that it holds at least one PEM block of
// the given type.
func readPEM(path, blockType string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("certificate file: %w", err)
	}
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			return nil, fmt.Errorf("%s: not PEM (no %s block)", path, blockType)
		}
		if blk.Type == blockType {
			return b, nil
		}
	}
}

// ServerConfig is the listener's TLS configuration: TLS 1.2 or newer, the
// certificate loaded last, and, with a CA, a client certificate that
// chains to it required of every peer. Each handshake uses the files
// loaded at its start, so a reload reaches the next connection.
func (s *Set) ServerConfig() (*tls.Config, error) {
	if s.cur.Load().cert == nil {
		return nil, errors.New("a TLS listener needs a certificate and a key")
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		l := s.cur.Load()
		c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*l.cert}}
		if l.pool != nil {
			c.ClientCAs, c.ClientAuth = l.pool, tls.RequireAndVerifyClientCert
		}
		return c, nil
	}
	return base, nil
}

// RequiresClientCert reports whether peers must present a client
// certificate (a CA was given).
func (s *Set) RequiresClientCert() bool { return s.files.CA != "" }

// ClientConfig is the TLS configuration for calling a server: the CA
// bundle as the roots (nil: the system's, found the platform's usual way),
// and the client certificate loaded last, if any, offered when the server
// asks for one. The roots are those of the first load.
func (s *Set) ClientConfig() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: s.cur.Load().pool}
	if s.cur.Load().cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.cur.Load().cert, nil
		}
	}
	return c
}
