package coreapi

import (
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// ErrLeaseExpired is returned by a write refused because the holder's lease
// on its claim had ended.
var ErrLeaseExpired = errors.New("lease expired: request not written")

var errDeadline = os.ErrDeadlineExceeded

// leaseConn enforces a claim's lease as late as possible: at the write of
// the request's bytes. A holder frozen anywhere between its claim and this
// write (a paused VM, SIGSTOP, a long stall) finds its lease over when it
// resumes and writes nothing, because by then the sweep, resolve and
// reprocess may have sent the transfer again (docs/rules.md, operating
// assumptions).
//
// The check is made twice: explicitly, on the monotonic clock, just before
// the write; and by the connection's own write deadline set to the lease,
// which Go's poller checks again right before the system call, so that a
// freeze between the two checks is still caught. The transport writes a
// request's headers and body in one write (its buffer is flushed once), so
// no deadline can fall between them; TestTransferIsOneWrite proves it.
type leaseConn struct {
	net.Conn
	mu      sync.Mutex
	lease   time.Time // zero: no lease
	written int64     // bytes written since arm
	refused bool      // a write was refused for the lease since arm
	writes  int       // write calls since arm (for the one-write test)
}

// arm starts a request on this connection under lease (zero: none).
func (c *leaseConn) arm(lease time.Time) {
	c.mu.Lock()
	c.lease, c.written, c.refused, c.writes = lease, 0, false, 0
	c.mu.Unlock()
	c.Conn.SetWriteDeadline(lease) // zero clears a previous request's deadline
}

// Write writes b unless the lease is over.
func (c *leaseConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	lease := c.lease
	c.writes++
	if !lease.IsZero() && !time.Now().Before(lease) {
		c.refused = true
		c.mu.Unlock()
		return 0, ErrLeaseExpired
	}
	c.mu.Unlock()
	n, err := c.Conn.Write(b)
	c.mu.Lock()
	c.written += int64(n)
	if n == 0 && err != nil && errors.Is(err, errDeadline) {
		c.refused = true
	}
	c.mu.Unlock()
	return n, err
}

// refusedUnwritten reports whether the current request was refused for
// its lease without a byte written.
func (c *leaseConn) refusedUnwritten() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused && c.written == 0
}
