package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gotest.tools/v3/assert"
	"gotest.tools/v3/icmd"
)

// The host's four-eyes set-up as the Debian package makes it, for the
// tests: an owner account (the package's dedup), the operators' group,
// operator accounts with passwords of their own, and the shipped sudoers
// rule (deploy/sudoers/dedup) with the test's names and binaries put in.
// Made once per test binary (root only: CI runs as root), removed by
// removeOperators.
const (
	ledgerOwner    = "e2e-dedup"
	operatorsGroup = "e2e-dedup-ops"
)

// e2eOperators are the accounts the tests decide as.
var e2eOperators = []string{"e2ekim", "e2elee", "e2eann", "e2eop0", "e2eop1", "e2eop2", "e2eop3", "e2eop4", "e2eop5"}

// kim and lee are the two operators most tests use.
const kim, lee = "e2ekim", "e2elee"

var operatorsSetUp struct {
	sync.Once
	err     error
	sudoers string
}

func runCmd(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// operators makes the accounts, the group and the sudoers rule once.
func operators(t *testing.T) {
	t.Helper()
	o := &operatorsSetUp
	o.Do(func() {
		if os.Geteuid() != 0 {
			o.err = fmt.Errorf("settle's four eyes are tested with real accounts and sudo: run the tests as root (CI does)")
			return
		}
		if _, err := exec.LookPath("sudo"); err != nil {
			o.err = fmt.Errorf("sudo is not installed (scripts/setup.sh installs it): %v", err)
			return
		}
		if _, err := user.LookupGroup(operatorsGroup); err != nil {
			if o.err = runCmd("groupadd", operatorsGroup); o.err != nil {
				return
			}
		}
		if _, err := user.Lookup(ledgerOwner); err != nil {
			if o.err = runCmd("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", ledgerOwner); o.err != nil {
				return
			}
		}
		var pw strings.Builder
		for _, who := range e2eOperators {
			if _, err := user.Lookup(who); err != nil {
				if o.err = runCmd("useradd", "--no-create-home", "-G", operatorsGroup, who); o.err != nil {
					return
				}
			}
			fmt.Fprintf(&pw, "%s:pw-%s\n", who, who)
		}
		cmd := exec.Command("chpasswd")
		cmd.Stdin = strings.NewReader(pw.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			o.err = fmt.Errorf("chpasswd: %v: %s", err, out)
			return
		}
		shipped, err := os.ReadFile("../deploy/sudoers/dedup")
		if err != nil {
			o.err = err
			return
		}
		rule := strings.NewReplacer("%dedup-operators", "%"+operatorsGroup, "(dedup)", "("+ledgerOwner+")",
			"/usr/bin/settle", bin("settle"), "/usr/bin/inspect", bin("inspect"), "/usr/bin/reconcile", bin("reconcile")).Replace(string(shipped))
		o.sudoers = fmt.Sprintf("/etc/sudoers.d/dedup-e2e-%d", os.Getpid())
		if err := os.WriteFile(o.sudoers+".new", []byte(rule), 0o440); err != nil {
			o.err = err
			return
		}
		if o.err = runCmd("visudo", "-cf", o.sudoers+".new"); o.err != nil {
			os.Remove(o.sudoers + ".new")
			return
		}
		o.err = os.Rename(o.sudoers+".new", o.sudoers)
	})
	assert.NilError(t, o.err)
}

// removeOperators removes what operators made (TestMain, at the end).
func removeOperators() {
	if operatorsSetUp.sudoers != "" {
		os.Remove(operatorsSetUp.sudoers)
	}
}

// ownLedger makes the SQLite ledger at path the owner account's, as the
// package's ledger is dedup's: its directory and files, and a way to it.
// A PostgreSQL ledger needs nothing: settle reaches it by its URL.
func ownLedger(t *testing.T, path string) {
	t.Helper()
	operators(t)
	if onPostgres() || strings.HasPrefix(path, "postgres") {
		return
	}
	dir := filepath.Dir(path)
	assert.NilError(t, runCmd("chown", "-R", ledgerOwner+":", dir))
	files, _ := filepath.Glob(path + "*") // the file, its -wal and -shm
	for _, f := range files {
		assert.NilError(t, os.Chmod(f, 0o600))
	}
	// A way to it: every directory above it that others cannot enter
	// (test directories are 0700 root) gets o+x, nothing more.
	for up := filepath.Dir(dir); up != "/" && up != "."; up = filepath.Dir(up) {
		fi, err := os.Stat(up)
		assert.NilError(t, err)
		if fi.Mode().Perm()&0o001 == 0 {
			assert.NilError(t, os.Chmod(up, fi.Mode().Perm()|0o011))
		}
	}
}

// settleAs runs settle as operator who, the way the runbook says: from
// who's own account, through sudo as the ledger's owner, with who's
// password. who "" runs it as this process (root) without sudo, and
// ledgerOwner as the owner itself, without sudo.
func settleAs(t *testing.T, db, who string, args ...string) *icmd.Result {
	t.Helper()
	return settleCmd(t, db, who, nil, args...)
}

// settleCmd is settleAs with extra environment for the account's own
// command line (SUDO_USER=..., to prove it changes nothing).
func settleCmd(t *testing.T, db, who string, env []string, args ...string) *icmd.Result {
	t.Helper()
	return operatorCmd(t, db, who, env, append([]string{bin("settle"), "--db", db}, args...))
}

// closeFindingAs runs `reconcile close` as operator who, as settleAs runs
// settle.
func closeFindingAs(t *testing.T, db, who string, args ...string) *icmd.Result {
	t.Helper()
	return operatorCmd(t, db, who, nil, append([]string{bin("reconcile"), "close", "--db", db}, args...))
}

// operatorCmd runs argv as operator who (settleAs says how).
func operatorCmd(t *testing.T, db, who string, env []string, argv []string) *icmd.Result {
	t.Helper()
	ownLedger(t, db)
	args := argv[1:]
	var cmd icmd.Cmd
	switch who {
	case "":
		cmd = icmd.Command("env", append(env, argv...)...)
	case ledgerOwner:
		cmd = icmd.Command("runuser", append(append([]string{"-u", ledgerOwner, "--", "env"}, env...), argv...)...)
	default:
		full := append([]string{"-u", who, "--", "env"}, env...)
		full = append(full, "sudo", "-S", "-p", "", "-u", ledgerOwner)
		cmd = icmd.Command("runuser", append(full, argv...)...)
		cmd.Stdin = strings.NewReader("pw-" + who + "\n")
	}
	res := icmd.RunCmd(cmd, icmd.WithTimeout(60*time.Second))
	t.Logf("%s (as %q) %v: exit %d\nstdout: %s\nstderr: %s", filepath.Base(argv[0]), who, args, res.ExitCode, res.Stdout(), res.Stderr())
	return res
}
