package settle

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

// fakeProc writes a /proc/PID/status for a parent named name with the
// given real and effective uids.
func fakeProc(t *testing.T, pid int, name string, ruid, euid int) string {
	t.Helper()
	dir := t.TempDir()
	assert.NilError(t, os.MkdirAll(filepath.Join(dir, strconv.Itoa(pid)), 0o755))
	status := fmt.Sprintf("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nPPid:\t1\nUid:\t%d\t%d\t%d\t%d\nGid:\t0\t0\t0\t0\n", name, ruid, euid, euid, euid)
	assert.NilError(t, os.WriteFile(filepath.Join(dir, strconv.Itoa(pid), "status"), []byte(status), 0o644))
	return dir
}

// FromSudo believes SUDO_UID only when the parent is sudo, privileged, run
// by that uid; never root, never the account itself, never a variable set
// by hand under another parent.
func TestFromSudoNeedsSudoAsTheParent(t *testing.T) {
	// A real non-root account of the passwd database to be the person,
	// seen from a process that runs as another uid (the owner, 4242).
	me, err := user.Lookup("nobody")
	assert.NilError(t, err, "the passwd database has no nobody account")
	uid, _ := strconv.Atoi(me.Uid)
	for _, tc := range []struct {
		name       string
		parent     string
		ruid, euid int
		sudoUID    string
		selfUID    int
		want       string // "" = accepted
	}{
		{"sudo by an operator", "sudo", uid, 0, me.Uid, 4242, ""},
		{"no SUDO_UID", "sudo", uid, 0, "", 4242, "no SUDO_UID"},
		{"SUDO_UID set by hand under a shell", "bash", 4242, 4242, me.Uid, 4242, "is not sudo"},
		{"SUDO_UID naming another than sudo's caller", "sudo", 4243, 0, me.Uid, 4242, "is not sudo"},
		{"a program named sudo without privilege", "sudo", uid, uid, me.Uid, 4242, "is not sudo"},
		{"sudo run by root", "sudo", 0, 0, "0", 4242, "run by root"},
		{"sudo to oneself", "sudo", 4242, 0, "4242", 4242, "this account itself"},
		{"garbage SUDO_UID", "sudo", uid, 0, "kim", 4242, "not a uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proc := fakeProc(t, 77, tc.parent, tc.ruid, tc.euid)
			p, err := FromSudo(Sudo{UID: tc.selfUID, EUID: tc.selfUID, PPID: 77, SudoUID: tc.sudoUID, Proc: proc, Host: "h1"})
			if tc.want == "" {
				assert.NilError(t, err)
				assert.Check(t, is.DeepEqual(p, Person{Auth: AuthSudo, Name: me.Username, UID: uid, Host: "h1"}))
				return
			}
			assert.Check(t, errors.Is(err, ErrRefused), "%v", err)
			assert.Check(t, is.ErrorContains(err, tc.want))
		})
	}
}

// OnHost decides only as the ledger file's owner, and says how to run it.
func TestOnHostNeedsTheLedgersOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	assert.NilError(t, os.WriteFile(path, nil, 0o600))
	_, err := OnHost("settle", path, Sudo{UID: os.Getuid() + 1, EUID: os.Getuid() + 1, PPID: 1, SudoUID: "1", Proc: "/proc"})
	assert.Check(t, errors.Is(err, ErrRefused))
	assert.Check(t, is.ErrorContains(err, "sudo -u "))
	assert.Check(t, is.ErrorContains(err, "settle --db "+path))
	_, err = OnHost("settle", path, Sudo{UID: os.Getuid(), EUID: os.Getuid(), PPID: os.Getppid(), Proc: "/proc"})
	assert.Check(t, errors.Is(err, ErrNotSudo), "%v", err)
	assert.Check(t, is.ErrorContains(err, "sudo -u "))
}

// Two persons are one if they share a name, or a uid on one host; an
// unnamed person matches everyone (and so can never approve).
func TestSamePerson(t *testing.T) {
	kim := Person{Auth: AuthSudo, Name: "kim", UID: 1001, Host: "a"}
	for _, tc := range []struct {
		other Person
		same  bool
	}{
		{Person{Auth: AuthSudo, Name: "lee", UID: 1002, Host: "a"}, false},
		{Person{Auth: AuthSudo, Name: "kim2", UID: 1001, Host: "a"}, true},
		{Person{Auth: AuthSudo, Name: "lee", UID: 1001, Host: "b"}, false},
		{Person{Auth: AuthPostgres, Name: "kim", Host: "b"}, true},
		{Person{Auth: AuthCertificate, Name: "kim", Serial: "1F"}, true},
		{Person{}, true},
	} {
		assert.Check(t, is.Equal(kim.Same(tc.other), tc.same), "%+v", tc.other)
		assert.Check(t, is.Equal(tc.other.Same(kim), tc.same), "%+v (reversed)", tc.other)
	}
}
