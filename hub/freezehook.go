//go:build freezehook

package hub

import (
	"os"
	"strings"
	"syscall"
	"time"
)

// This file exists only for the frozen-holder test (e2e): built with -tags
// freezehook, a relay that has committed the claim of a transfer whose memo
// starts with FREEZE stops itself (SIGSTOP) before sending it, as a paused
// VM or a stopped process would. Release builds never include it.

func init() {
	beforeSend = func(memo string) {
		if strings.HasPrefix(memo, "FREEZE") {
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			// The stop reaches every thread asynchronously; make sure this
			// one is inside a system call (and so stopped) before it could
			// go on to the send. After SIGCONT the sleep ends and the send
			// proceeds, its lease long over.
			time.Sleep(500 * time.Millisecond)
		}
	}
}
