//go:build freezehook

package hub

import (
	"os"
	"strings"
	"syscall"
)

// This file exists only for the frozen-holder test (e2e): built with -tags
// freezehook, a relay that has committed the claim of a transfer whose memo
// starts with FREEZE stops itself (SIGSTOP) before sending it, as a paused
// VM or a stopped process would. Release builds never include it.

func init() {
	beforeSend = func(memo string) {
		if strings.HasPrefix(memo, "FREEZE") {
			syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		}
	}
}
