package coreapi

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup"
)

// userTimeout reads TCP_USER_TIMEOUT (ms) from a connection's socket.
func userTimeout(t *testing.T, c net.Conn) int {
	t.Helper()
	tc, ok := c.(*net.TCPConn)
	assert.Assert(t, ok, "not a TCP connection: %T", c)
	rc, err := tc.SyscallConn()
	assert.NilError(t, err)
	var v int
	var gerr error
	assert.NilError(t, rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) }))
	assert.NilError(t, gerr)
	return v
}

// Rule 12: every connection to the core, over http and https, for a
// transfer and for an inquiry, carries TCP_USER_TIMEOUT of --timeout, so
// that the kernel drops bytes the core has not acknowledged by then, even
// if the process is frozen.
func TestEveryCoreConnectionCarriesTCPUserTimeout(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			_, _, c := fixtureOver(t, scheme, time.Second)
			var got []int
			c.onConn = func(lc *leaseConn) { got = append(got, userTimeout(t, lc.Conn)) }
			assert.Equal(t, c.Transfer(ctx, transfer("opts"), time.Now().Add(time.Minute), nil).Code, "0000")
			c.CloseIdle()
			c.Lookup(ctx, g1)
			ms := int(time.Second.Milliseconds())
			assert.Check(t, is.DeepEqual(got, []int{ms, ms}))
		})
	}
}

// silentCore accepts connections, reads each request's head and never
// answers; it reports how each connection ended as seen from the core's
// side: "reset" (ECONNRESET) or "closed" (a graceful FIN, io.EOF).
func silentCore(t *testing.T) (addr string, ended <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	t.Cleanup(func() { ln.Close() })
	out := make(chan string, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				if _, err := http.ReadRequest(r); err != nil {
					out <- "unreadable: " + err.Error()
					return
				}
				c.SetReadDeadline(time.Now().Add(30 * time.Second))
				_, err := io.Copy(io.Discard, r)
				switch {
				case errors.Is(err, syscall.ECONNRESET):
					out <- "reset"
				case err == nil:
					out <- "closed"
				default:
					out <- err.Error()
				}
			}()
		}
	}()
	return ln.Addr().String(), out
}

// Rule 12: a connection given up on (the core wrote nothing back within
// --timeout) is aborted with a reset, its send queue discarded, never
// closed gracefully: after a graceful close the kernel would keep
// retransmitting the request and deliver it when a broken link heals. A
// connection whose answer was read in full is closed gracefully.
func TestAConnectionGivenUpOnIsReset(t *testing.T) {
	addr, ended := silentCore(t)
	c := newClient(t, "http://"+addr, 200*time.Millisecond)
	r := c.Transfer(ctx, transfer("never answered"), time.Now().Add(time.Minute), nil)
	assert.Equal(t, r.Code, dedup.CodeUnknown, "%+v", r)
	select {
	case how := <-ended:
		assert.Equal(t, how, "reset", "the abandoned connection was not aborted")
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned connection was neither closed nor reset")
	}
}

// The same over https: the reset happens beneath TLS, with no close_notify
// queued first.
func TestAConnectionGivenUpOnIsResetOverTLS(t *testing.T) {
	pki := newPKI(t)
	srvCfg := pki.server(t, "", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	t.Cleanup(func() { ln.Close() })
	ended := make(chan string, 1)
	go func() {
		raw, err := ln.Accept()
		if err != nil {
			return
		}
		defer raw.Close()
		tc := tlsServer(raw, srvCfg)
		if _, err := http.ReadRequest(bufio.NewReader(tc)); err != nil {
			ended <- "unreadable: " + err.Error()
			return
		}
		raw.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err = io.Copy(io.Discard, raw) // beneath TLS: a close_notify would arrive as bytes, then EOF
		switch {
		case errors.Is(err, syscall.ECONNRESET):
			ended <- "reset"
		case err == nil:
			ended <- "closed"
		default:
			ended <- err.Error()
		}
	}()
	c, err := New(Config{BaseURL: "https://" + ln.Addr().String(), ConnectTimeout: time.Second, Timeout: 200 * time.Millisecond, TLS: pki.clientConfig(t, "")})
	assert.NilError(t, err)
	r := c.Transfer(ctx, transfer("never answered"), time.Now().Add(time.Minute), nil)
	assert.Equal(t, r.Code, dedup.CodeUnknown, "%+v", r)
	select {
	case how := <-ended:
		assert.Equal(t, how, "reset", "the abandoned TLS connection was not aborted")
	case <-time.After(10 * time.Second):
		t.Fatal("the abandoned connection was neither closed nor reset")
	}
}

// A pooled connection whose answer was read in full is closed gracefully
// when the pool lets it go: nothing of a request can be pending on it.
func TestAnAnsweredConnectionIsClosedGracefully(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	t.Cleanup(func() { ln.Close() })
	ended := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		if _, err := http.ReadRequest(r); err != nil {
			ended <- err.Error()
			return
		}
		body := `{"guid":"` + g1 + `","ref":"C000000000000042","balance":99850000,"processed_at":"20261129093001"}`
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+itoa(len(body))+"\r\n\r\n"+body)
		_, err = io.Copy(io.Discard, r)
		if err == nil {
			ended <- "closed"
		} else if errors.Is(err, syscall.ECONNRESET) {
			ended <- "reset"
		} else {
			ended <- err.Error()
		}
	}()
	c := newClient(t, "http://"+ln.Addr().String(), time.Second)
	assert.Equal(t, c.Transfer(ctx, transfer("answered"), time.Now().Add(time.Minute), nil).Code, "0000")
	c.CloseIdle()
	assert.Equal(t, <-ended, "closed")
}

func itoa(n int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}

func tlsServer(c net.Conn, cfg *tls.Config) *tls.Conn {
	s := tls.Server(c, cfg)
	s.Handshake()
	return s
}
