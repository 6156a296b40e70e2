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
	// dirty: a request was started (arm) and its answer has not been read
	// in full (answered). Close aborts a dirty connection.
	dirty bool
	gen   uint64 // requests armed on this connection: answered ignores a stale one
}

// arm starts a request on this connection under lease (zero: none) and
// returns its number for answered.
func (c *leaseConn) arm(lease time.Time) uint64 {
	c.mu.Lock()
	c.lease, c.written, c.refused, c.writes, c.dirty = lease, 0, false, 0, true
	c.gen++
	gen := c.gen
	c.mu.Unlock()
	c.Conn.SetWriteDeadline(lease) // zero clears a previous request's deadline
	return gen
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

// refuse makes the current request's writes fail as if its lease had
// ended: the holder found, just before the first byte, that its claim is
// no longer its own (docs/rules.md rule 13).
func (c *leaseConn) refuse() {
	c.mu.Lock()
	c.lease = time.Unix(0, 1) // long over
	c.mu.Unlock()
	c.Conn.SetWriteDeadline(time.Unix(0, 1))
}

// answered records that the current request's answer was read in full:
// the core has every byte of the request, nothing of it can arrive late,
// and the connection may be closed gracefully (or reused).
// gen is the request's number from arm: once the answer is read the
// transport may already have handed the connection to the next request,
// whose state must not be touched.
func (c *leaseConn) answered(gen uint64) {
	c.mu.Lock()
	if c.gen == gen {
		c.dirty = false
	}
	c.mu.Unlock()
}

func (c *leaseConn) isClean() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.dirty
}

// Close closes the connection. A connection left in any state but "answer
// read in full" is aborted (SO_LINGER 0: the kernel discards its send
// queue and sends a reset), never closed gracefully: after a graceful
// close the kernel keeps retransmitting the request's unacknowledged bytes
// and would deliver them when a broken link heals, after the holder gave
// up and the transfer may have been sent again (docs/rules.md rule 12).
func (c *leaseConn) Close() error {
	if !c.isClean() {
		if tc, ok := c.Conn.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
	}
	return c.Conn.Close()
}
