package socket

import (
	"fmt"
	"net"
	"os"
	"sort"

	"github.com/coreos/go-systemd/v22/activation"
)

// ListenName is the FileDescriptorName of the relay's channel socket in
// its socket unit (deploy/systemd/dedup-relay.socket). A single socket
// passed without a name (LISTEN_FD_3) is taken as it too.
const ListenName = "listen"

// Activated returns the listening sockets systemd passed this process
// (socket activation: LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES), by the
// FileDescriptorName of their socket unit, and takes the variables out of
// the environment so that no child inherits them. It returns none when the
// process was not started so. The sockets listen already: the kernel
// queues connections to them while no process accepts, which is how a
// restart or an upgrade refuses no one (docs/deploy.md).
func Activated() (map[string]net.Listener, error) {
	passed := os.Getenv("LISTEN_FDS") != "" && os.Getenv("LISTEN_PID") == fmt.Sprint(os.Getpid())
	byName, err := activation.ListenersWithNames()
	if err != nil {
		return nil, err
	}
	out := map[string]net.Listener{}
	var names []string
	for name, ls := range byName {
		names = append(names, name)
		if len(ls) != 1 {
			for _, l := range ls {
				l.Close()
			}
			return nil, fmt.Errorf("systemd passed %d sockets named %q; want one", len(ls), name)
		}
		out[name] = ls[0]
	}
	sort.Strings(names)
	if passed && len(out) == 0 {
		return nil, fmt.Errorf("systemd passed sockets (LISTEN_FDS), but none is a listening stream socket")
	}
	if l, ok := out["LISTEN_FD_3"]; ok && len(out) == 1 {
		delete(out, "LISTEN_FD_3")
		out[ListenName] = l
	}
	for name, l := range out {
		if name != ListenName {
			for _, l := range out {
				l.Close()
			}
			return nil, fmt.Errorf("systemd passed a socket named %q (sockets: %v); the relay takes one, FileDescriptorName=%s", name, names, ListenName)
		}
		_ = l
	}
	return out, nil
}

// SameAddr reports whether the listening address a is the one listen
// (HOST:PORT, as --listen takes it) names: the same port, and the same IP
// or both unspecified.
func SameAddr(a net.Addr, listen string) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	want, err := net.ResolveTCPAddr("tcp", listen)
	if err != nil || want.Port != ta.Port {
		return false
	}
	if want.IP == nil || want.IP.IsUnspecified() {
		return ta.IP == nil || ta.IP.IsUnspecified()
	}
	return want.IP.Equal(ta.IP)
}
