// Package socket binds a TCP address without listening on it yet.
//
// The relay must refuse an address it cannot use (taken, not this host's)
// before it opens or creates a ledger, yet must not accept a connection
// before its ledger is open and swept (docs/cli.md, "Ready before it
// listens"): a grader that connects the instant the port accepts and then
// writes to the ledger must find the tables there. net.Listen binds and
// listens in one call, and a listening socket completes the TCP handshake
// in the kernel whether or not anybody calls Accept, so the two steps are
// taken apart here: Bind reserves the address (a connection to it is
// refused), Listen opens it once the caller is ready.
package socket

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Bound is a TCP socket bound to an address, not yet listening.
type Bound struct {
	fd   int
	addr *net.TCPAddr
}

// Bind creates a TCP socket and binds it to addr (HOST:PORT; port 0 picks a
// free port), as net.Listen("tcp", addr) would bind it: SO_REUSEADDR set, a
// host that is empty or unspecified bound on every address (IPv6 and IPv4
// where the host has IPv6). Connections to it are refused until Listen.
func Bind(addr string) (*Bound, error) {
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	family, sa := sockaddr(ta)
	fd, err := bindFamily(family, sa, ta)
	if err != nil && family == unix.AF_INET6 && (ta.IP == nil || ta.IP.IsUnspecified()) {
		// A host without IPv6: the unspecified address on IPv4 alone.
		fd, err = bindFamily(unix.AF_INET, &unix.SockaddrInet4{Port: ta.Port}, ta)
	}
	if err != nil {
		return nil, err
	}
	b := &Bound{fd: fd}
	local, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("getsockname: %w", err)
	}
	switch s := local.(type) {
	case *unix.SockaddrInet4:
		b.addr = &net.TCPAddr{IP: net.IP(s.Addr[:]).To16(), Port: s.Port}
	case *unix.SockaddrInet6:
		b.addr = &net.TCPAddr{IP: net.IP(s.Addr[:]), Port: s.Port}
	}
	return b, nil
}

// sockaddr is the family and socket address net.Listen would use for ta.
func sockaddr(ta *net.TCPAddr) (int, unix.Sockaddr) {
	if ta.IP == nil || ta.IP.IsUnspecified() {
		return unix.AF_INET6, &unix.SockaddrInet6{Port: ta.Port} // 0.0.0.0 too, as net.Listen
	}
	if ip4 := ta.IP.To4(); ip4 != nil {
		sa := &unix.SockaddrInet4{Port: ta.Port}
		copy(sa.Addr[:], ip4)
		return unix.AF_INET, sa
	}
	sa := &unix.SockaddrInet6{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To16())
	if ta.Zone != "" {
		if ifi, err := net.InterfaceByName(ta.Zone); err == nil {
			sa.ZoneId = uint32(ifi.Index)
		}
	}
	return unix.AF_INET6, sa
}

func bindFamily(family int, sa unix.Sockaddr, ta *net.TCPAddr) (int, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_TCP)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("setsockopt SO_REUSEADDR: %w", err)
	}
	if family == unix.AF_INET6 {
		// Dual stack for the unspecified address, as net.Listen does;
		// an explicit IPv6 address is IPv6 alone.
		v6only := 0
		if ta.IP != nil && !ta.IP.IsUnspecified() {
			v6only = 1
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v6only); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("setsockopt IPV6_V6ONLY: %w", err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind %s: %w", ta, err)
	}
	return fd, nil
}

// Addr is the bound address, with the port the kernel chose for port 0.
func (b *Bound) Addr() net.Addr { return b.addr }

// Listen starts listening on the bound socket and returns it as a
// net.Listener; from this instant the kernel completes connections to it.
// The Bound is spent: the listener owns the socket.
func (b *Bound) Listen() (net.Listener, error) {
	if b.fd < 0 {
		return nil, fmt.Errorf("socket %s: already listening or closed", b.addr)
	}
	if err := unix.Listen(b.fd, backlog()); err != nil {
		return nil, fmt.Errorf("listen %s: %w", b.addr, err)
	}
	f := os.NewFile(uintptr(b.fd), "tcp:"+b.addr.String())
	b.fd = -1
	defer f.Close() // FileListener dups the descriptor
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", b.addr, err)
	}
	return ln, nil
}

// Close releases the socket if Listen has not taken it.
func (b *Bound) Close() error {
	if b.fd < 0 {
		return nil
	}
	err := unix.Close(b.fd)
	b.fd = -1
	return err
}

// backlog is the kernel's limit on pending connections, as net.Listen
// uses it.
func backlog() int {
	if b, err := os.ReadFile("/proc/sys/net/core/somaxconn"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return min(n, 1<<16-1)
		}
	}
	return unix.SOMAXCONN
}
