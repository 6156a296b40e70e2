package socket

import (
	"net"
	"strconv"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// A bound socket refuses connections until Listen, and holds its address
// against a second bind meanwhile.
func TestBoundRefusesUntilListen(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0", ":0", "0.0.0.0:0"} {
		t.Run(addr, func(t *testing.T) {
			b, err := Bind(addr)
			if addr == "[::1]:0" && err != nil {
				t.Skipf("this host has no IPv6 loopback: %v", err) // a container without IPv6
			}
			assert.NilError(t, err)
			defer b.Close()
			port := b.Addr().(*net.TCPAddr).Port
			assert.Assert(t, port != 0, "port 0 was not given a port")
			dial := "127.0.0.1"
			if addr == "[::1]:0" {
				dial = "::1"
			}
			target := net.JoinHostPort(dial, strconv.Itoa(port))

			_, err = net.DialTimeout("tcp", target, time.Second)
			assert.Assert(t, err != nil, "a bound socket accepted a connection before Listen")

			ln, err := b.Listen()
			assert.NilError(t, err)
			defer ln.Close()
			assert.Equal(t, ln.Addr().(*net.TCPAddr).Port, port)
			c, err := net.DialTimeout("tcp", target, time.Second)
			assert.NilError(t, err)
			c.Close()
			_, err = b.Listen()
			assert.Assert(t, err != nil, "a spent Bound listened twice")
		})
	}
}

// A taken address is refused by Bind, as by net.Listen.
func TestBindRefusesATakenAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	assert.NilError(t, err)
	defer ln.Close()
	_, err = Bind(ln.Addr().String())
	assert.ErrorContains(t, err, "address already in use")
}

// An address some other process started listening on between Bind and
// Listen is refused by Listen (SO_REUSEADDR, which a restart needs past
// TIME_WAIT, lets a second socket bind it meanwhile).
func TestListenRefusesAnAddressTakenSinceBind(t *testing.T) {
	b, err := Bind("127.0.0.1:0")
	assert.NilError(t, err)
	defer b.Close()
	other, err := net.Listen("tcp", b.Addr().String())
	if err == nil {
		defer other.Close()
		_, err = b.Listen()
		assert.Assert(t, err != nil, "two listeners on one address")
	}
}

func TestSameAddr(t *testing.T) {
	for _, tc := range []struct {
		addr   net.Addr
		listen string
		same   bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9101}, "127.0.0.1:9101", true},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9101}, "127.0.0.1:9102", false},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9101}, "0.0.0.0:9101", false},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 9101}, ":9101", true},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 9101}, "0.0.0.0:9101", true},
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 9101}, "127.0.0.1:9101", false},
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9101}, "no such host:x", false},
	} {
		if got := SameAddr(tc.addr, tc.listen); got != tc.same {
			t.Errorf("SameAddr(%v, %q) = %v, want %v", tc.addr, tc.listen, got, tc.same)
		}
	}
}
