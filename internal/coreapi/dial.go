package coreapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
	custom  func(ctx context.Context, addr string) (net.Conn, error) // Config.Dial
	tls     *tls.Config                                              // nil for http://
	timeout time.Duration
}

// newDialer returns a dialer whose every socket carries TCP_USER_TIMEOUT
// of userTimeout (docs/rules.md rule 12): the kernel abandons bytes the
// core has not acknowledged by then, even if the process that wrote them
// is frozen, so that a request stuck behind a broken link is never
// delivered when the link heals, after resolve and reprocess may have
// sent the transfer again.
func newDialer(connectTimeout, userTimeout time.Duration) *dialer {
	ms := int(max(userTimeout.Milliseconds(), 1))
	return &dialer{
		tcp: net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second,
			Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				if err := rc.Control(func(fd uintptr) {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, ms)
				}); err != nil {
					return err
				}
				if serr != nil {
					// Never send without it: a connection that could
					// deliver a request late is no connection at all.
					return fmt.Errorf("set TCP_USER_TIMEOUT: %w", serr)
				}
				return nil
			}},
		timeout: connectTimeout,
	}
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

// Close closes the TLS connection. One given up on is aborted beneath TLS
// at once (see leaseConn.Close): no close_notify is queued behind a
// request the core may not have received.
func (c *tlsLeaseConn) Close() error {
	if !c.lc.isClean() {
		return c.lc.Close()
	}
	return c.Conn.Close()
}

func (c *leaseConn) leaseConn() *leaseConn { return c }

// dial connects to addr ("host:port").
func (d *dialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var raw net.Conn
	var err error
	if d.custom != nil {
		cctx, cancel := context.WithTimeout(ctx, d.timeout)
		raw, err = d.custom(cctx, addr)
		cancel()
	} else {
		raw, err = d.tcp.DialContext(ctx, network, addr)
	}
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
// is E902 (docs/security.md); any other failure after the
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
