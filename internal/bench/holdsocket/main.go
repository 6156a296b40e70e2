// Command holdsocket holds a listening socket the way systemd holds
// dedup-relay.socket, and runs the relay on it: the socket is passed as
// descriptor 3 with LISTEN_FDS=1, LISTEN_FDNAMES=listen and LISTEN_PID the
// child's own pid, so the relay takes it instead of binding --listen. On
// SIGHUP it restarts the relay as systemctl restart does (SIGTERM, wait for
// the exit, start again at once), while the socket stays open and queues
// the connections made meanwhile; on SIGTERM or SIGINT it stops the relay
// and exits. scripts/ledger-bench.sh day restarts the relay this way under
// load.
//
// It is a benchmark tool: the package never ships it (nothing under
// internal/ is packaged).
//
//	holdsocket --listen 127.0.0.1:9101 -- bin/relay --db relay.db --listen 127.0.0.1:9101 --core URL
//
// It prints "holding addr=HOST:PORT" once the socket listens, and one line
// per restart: "restarted in_ms=N" (from the SIGTERM to the new relay's
// start; the relay itself says when it is ready).
package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 5 || os.Args[1] != "--listen" || os.Args[3] != "--" {
		fmt.Fprintln(os.Stderr, "usage: holdsocket --listen HOST:PORT -- RELAY ARGS...")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", os.Args[2])
	if err != nil {
		fmt.Fprintf(os.Stderr, "holdsocket: %v\n", err)
		os.Exit(1)
	}
	held, err := ln.(*net.TCPListener).File()
	if err != nil {
		fmt.Fprintf(os.Stderr, "holdsocket: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("holding addr=%s\n", ln.Addr())
	argv := os.Args[4:]
	start := func() *exec.Cmd {
		cmd := exec.Command("/bin/sh", append([]string{"-c", `LISTEN_PID=$$ exec "$0" "$@"`}, argv...)...)
		cmd.Env = append(os.Environ(), "LISTEN_FDS=1", "LISTEN_FDNAMES=listen")
		cmd.ExtraFiles = []*os.File{held}
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "holdsocket: %v\n", err)
			os.Exit(1)
		}
		return cmd
	}
	child := start()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	for sig := range sigs {
		t0 := time.Now()
		child.Process.Signal(syscall.SIGTERM)
		child.Wait()
		if sig != syscall.SIGHUP {
			return
		}
		child = start()
		fmt.Printf("restarted in_ms=%d\n", time.Since(t0).Milliseconds())
	}
}
