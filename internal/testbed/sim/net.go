package sim

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// errRefused is a connection the simulated network did not make: the core
// down, a partition, a relay that crashed.
var errRefused = errors.New("sim: connection refused")

// listener is an in-memory net.Listener: Dial hands the server one end of
// a net.Pipe. Every end it made is kept, so that a crash can cut them.
type listener struct {
	name  string
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	open map[net.Conn]struct{}
}

func newListener(name string) *listener {
	return &listener{name: name, conns: make(chan net.Conn), done: make(chan struct{}), open: map[net.Conn]struct{}{}}
}

// Accept waits for the next connection, or the listener's close.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections already made stay.
func (l *listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr names the listener.
func (l *listener) Addr() net.Addr { return simAddr(l.name) }

// Dial makes a connection to the listener; server, if not nil, wraps the
// server's end (a late link).
func (l *listener) Dial(ctx context.Context, server func(net.Conn) net.Conn) (net.Conn, error) {
	client, srv := net.Pipe()
	if server != nil {
		srv = server(srv)
	}
	select {
	case l.conns <- srv:
	case <-l.done:
		return nil, errRefused
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	l.mu.Lock()
	l.open[client] = struct{}{}
	l.open[srv] = struct{}{}
	l.mu.Unlock()
	return client, nil
}

// Cut closes every connection the listener made, both ends: what a
// crashed process's peers see.
func (l *listener) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.open {
		c.Close()
	}
	clear(l.open)
}

type simAddr string

func (a simAddr) Network() string { return "sim" }
func (a simAddr) String() string  { return string(a) }

// lateConn is the core's end of a connection over a link that broke once
// the request was written and heals after heal: the request's bytes reach
// the core only then, and only if the relay has not given the connection
// up meanwhile (it aborts it, and a TCP_USER_TIMEOUT of --timeout makes
// the kernel drop bytes it could not deliver by then: docs/rules.md rule
// 12). After the heal the link carries bytes as usual.
type lateConn struct {
	net.Conn
	heal   time.Duration
	once   sync.Once
	closed chan struct{}
}

func newLateConn(c net.Conn, heal time.Duration) *lateConn {
	return &lateConn{Conn: c, heal: heal, closed: make(chan struct{})}
}

// Read holds back the first bytes until the link heals.
func (c *lateConn) Read(p []byte) (int, error) {
	var dropped bool
	c.once.Do(func() {
		select {
		case <-time.After(c.heal):
		case <-c.closed:
			dropped = true
		}
	})
	if dropped {
		return 0, net.ErrClosed
	}
	return c.Conn.Read(p)
}

// Close ends the connection: bytes not yet delivered are dropped.
func (c *lateConn) Close() error {
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	return c.Conn.Close()
}
