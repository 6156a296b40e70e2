package coreapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// dialer obtains connections to the core: the TCP connect and, for https,
// the TLS handshake, both within the connect timeout (a connection is
// "obtained" only once both are done: until then no byte of a request has
// been written, so a failure is E902).
//
// Every connection it returns carries a *leaseConn directly over the TCP
// socket, beneath TLS when there is TLS, so that the lease is enforced on
// the bytes that actually leave the process, whatever wraps them. The
// handshake's own writes happen here, before any lease is armed: they are
// not request bytes.
type dialer struct {
	tcp     net.Dialer
	tls     *tls.Config // nil for http://
	timeout time.Duration
}

// leased is a connection whose request writes are subject to a lease.
type leased interface {
	net.Conn
	leaseConn() *leaseConn
}

// tlsLeaseConn is a TLS connection over a leaseConn.
type tlsLeaseConn struct {
	*tls.Conn
	lc *leaseConn
}

func (c *tlsLeaseConn) leaseConn() *leaseConn { return c.lc }

func (c *leaseConn) leaseConn() *leaseConn { return c }

// dial connects to addr ("host:port").
func (d *dialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	raw, err := d.tcp.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	lc := &leaseConn{Conn: raw}
	if d.tls == nil {
		return lc, nil
	}
	tc := tls.Client(lc, d.tls)
	// The handshake shares the connect timeout with the TCP connect; the
	// deadline is cleared once it is done (the exchange has its own).
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > d.timeout {
		raw.SetDeadline(time.Now().Add(d.timeout))
	} else {
		raw.SetDeadline(dl)
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
	}
	raw.SetDeadline(time.Time{})
	return &tlsLeaseConn{Conn: tc, lc: lc}, nil
}

// refusedByTLS reports whether err is a TLS alert by which the core's TLS
// layer refused the connection before its application read a byte: under
// TLS 1.3 the client's handshake ends before the server has judged the
// client's certificate, so that refusal arrives as an alert in place of
// the response, after the request was written. Nothing was applied, so it
// is E902 (docs/security.md in docs/security.md); any other failure after the
// request may have been written stays E901.
func refusedByTLS(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" || op.Err == nil {
		return false
	}
	for _, a := range refusalAlerts {
		// The received alert's type is unexported; its text is the same as
		// the exported AlertError's for the same number.
		if op.Err.Error() == tls.AlertError(a).Error() {
			return true
		}
	}
	return false
}

// refusalAlerts are the TLS alerts (RFC 8446 section 6) that a server's
// TLS layer sends when it refuses a client: handshake_failure (40),
// bad_certificate (42), certificate_revoked (44), certificate_expired (45),
// unknown_ca (48), access_denied (49), certificate_required (116).
var refusalAlerts = []uint8{40, 42, 44, 45, 48, 49, 116}
