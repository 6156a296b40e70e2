package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"gotest.tools/v3/assert"
)

// TestMain lets a test run the command itself in a child process (the
// child is this test binary, with STALLMETER_CHILD set).
func TestMain(m *testing.M) {
	if os.Getenv("STALLMETER_CHILD") != "" {
		run(os.Args[1:], os.Stdout)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A process frozen from outside (SIGSTOP, as a paused VM freezes every
// process) is reported as one stall at least as long as the freeze; a
// meter that measured its sleeps by anything but the wall clock, or
// dropped late wake-ups, would report none.
func TestAFrozenProcessIsReportedAsAStallAtLeastAsLongAsTheFreeze(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--over", "0.05")
	cmd.Env = append(os.Environ(), "STALLMETER_CHILD=1")
	var out bytes.Buffer
	cmd.Stdout = &out
	assert.NilError(t, cmd.Start())
	time.Sleep(300 * time.Millisecond) // let it start measuring
	assert.NilError(t, cmd.Process.Signal(syscall.SIGSTOP))
	time.Sleep(400 * time.Millisecond)
	assert.NilError(t, cmd.Process.Signal(syscall.SIGCONT))
	time.Sleep(100 * time.Millisecond)
	assert.NilError(t, cmd.Process.Signal(syscall.SIGINT))
	assert.NilError(t, cmd.Wait())

	m := regexp.MustCompile(`(?m)^stalls: count=(\d+) max_ms=([0-9.]+) over_ms=50\.0 `).FindStringSubmatch(out.String())
	assert.Assert(t, m != nil, out.String())
	count, _ := strconv.Atoi(m[1])
	worst, _ := strconv.ParseFloat(m[2], 64)
	assert.Assert(t, count >= 1, out.String())
	assert.Assert(t, worst >= 390, "the 400 ms freeze was reported as %.1f ms:\n%s", worst, out.String())
	assert.Assert(t, regexp.MustCompile(`(?m)^stall at=\d\d:\d\d:\d\d\.\d{3} ms=`).MatchString(out.String()), out.String())
}

// A bad flag is a one-line usage error with exit status 2.
func TestABadFlagExits2(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--over", "-1")
	cmd.Env = append(os.Environ(), "STALLMETER_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	assert.Assert(t, err != nil, string(out))
	assert.Assert(t, errors.As(err, &ee), err)
	assert.Equal(t, ee.ExitCode(), 2, string(out))
}
