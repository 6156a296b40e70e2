// Command frozenrelay is the relay that, after committing the claim of a
// transfer whose memo starts with FREEZE, stops itself (SIGSTOP) before
// sending it, as a paused VM or a stopped process would: the frozen-holder
// test (e2e TestFrozenHolderNeverSendsItsStaleClaim). Given --no-lease as
// its first argument it also runs without the lease, which must make that
// test apply the transfer twice: the proof that the test can fail. It lives under testdata, so that go build ./... never
// builds it; the tests build it by its path.
package main

import (
	"os"
	"strings"
	"syscall"
	"time"

	"dedup/internal/relay"
)

func freeze(memo string) {
	if strings.HasPrefix(memo, "FREEZE") {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		// The stop reaches every thread asynchronously; make sure this one
		// is inside a system call (and so stopped) before it could go on to
		// the send. After SIGCONT the sleep ends and the send proceeds, its
		// lease long over.
		time.Sleep(500 * time.Millisecond)
	}
}

func main() {
	args := os.Args[1:]
	hooks := relay.Hooks{BeforeSend: freeze}
	if len(args) > 0 && args[0] == "--no-lease" {
		hooks.NoLease, args = true, args[1:]
	}
	os.Exit(relay.Main(args, hooks))
}
