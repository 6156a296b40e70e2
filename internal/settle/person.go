package settle

import (
	"bufio"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
)

// How a person was authenticated (Person.Auth).
const (
	// AuthSudo: the account sudo authenticated on this host, when settle
	// runs through "sudo -u dedup settle ...".
	AuthSudo = "sudo"
	// AuthPostgres: the PostgreSQL role the operator connected as
	// (session_user), authenticated by the database.
	AuthPostgres = "pg"
	// AuthCertificate: the operator certificate a browser presented to the
	// console.
	AuthCertificate = "cert"
)

// Person is who decides, as an authentication that person cannot forge
// alone established them (the spec's settle.md "Who a person is";
// docs/security.md). A name typed on the command line or found in the
// environment is never a Person: four eyes is two of these, not two
// strings.
type Person struct {
	Auth   string `json:"auth"`
	Name   string `json:"name"`             // the account, the role, the certificate's operator name
	UID    int    `json:"uid,omitempty"`    // AuthSudo: the account's uid
	Serial string `json:"serial,omitempty"` // AuthCertificate: the certificate's serial number
	Host   string `json:"host"`             // where the decision was taken
}

// Actor is the person as events name them: settle:kim(sudo uid 1001)@HOST,
// settle:pg:kim@HOST, console:kim(cert 1F)@HOST.
func (p Person) Actor() string {
	switch p.Auth {
	case AuthSudo:
		return fmt.Sprintf("settle:%s(sudo uid %d)@%s", p.Name, p.UID, p.Host)
	case AuthPostgres:
		return fmt.Sprintf("settle:pg:%s@%s", p.Name, p.Host)
	case AuthCertificate:
		return fmt.Sprintf("console:%s(cert %s)@%s", p.Name, p.Serial, p.Host)
	}
	return fmt.Sprintf("settle:%s(unauthenticated)@%s", p.Name, p.Host)
}

// Same reports whether p and q may be one person: the same name (an OS
// account, a role and a certificate named alike are taken for one person),
// or the same uid on the same host. dedup_settle_same on PostgreSQL is the
// same rule. An empty name is nobody's and matches everyone, so that it can
// never approve.
func (p Person) Same(q Person) bool {
	return p.Name == "" || q.Name == "" || p.Name == q.Name ||
		p.Auth == AuthSudo && q.Auth == AuthSudo && p.UID == q.UID && p.Host == q.Host
}

// authenticated refuses a Person that no authentication produced.
func (p Person) authenticated() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("%w: no authenticated person", ErrRefused)
	case p.Auth != AuthSudo && p.Auth != AuthPostgres && p.Auth != AuthCertificate:
		return fmt.Errorf("%w: %s is not an authenticated person", ErrRefused, p.Name)
	}
	return nil
}

// Hostname is this host's name for actors ("unknown-host" if it has none).
func Hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown-host"
	}
	return h
}

// procStatus is what /proc/PID/status says of a process.
type procStatus struct {
	name       string
	ppid       int
	ruid, euid int
}

func readStatus(proc string, pid int) (procStatus, error) {
	f, err := os.Open(fmt.Sprintf("%s/%d/status", proc, pid))
	if err != nil {
		return procStatus{}, err
	}
	defer f.Close()
	st := procStatus{ppid: -1, ruid: -1, euid: -1}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		switch k {
		case "Name":
			st.name = strings.TrimSpace(v)
		case "PPid":
			if len(fields) == 1 {
				st.ppid, _ = strconv.Atoi(fields[0])
			}
		case "Uid":
			if len(fields) == 4 {
				st.ruid, _ = strconv.Atoi(fields[0])
				st.euid, _ = strconv.Atoi(fields[1])
			}
		}
	}
	if err := sc.Err(); err != nil {
		return procStatus{}, err
	}
	if st.ppid < 0 || st.ruid < 0 || st.euid < 0 {
		return procStatus{}, fmt.Errorf("%s/%d/status: no PPid or Uid line", proc, pid)
	}
	return st, nil
}

// Sudo is what the process knows of how it was started, for FromSudo:
// its own ids, its parent, the SUDO_UID that sudo set, and where /proc
// is. SudoOf fills it for this process.
type Sudo struct {
	UID, EUID int
	PPID      int
	SudoUID   string // the environment's SUDO_UID ("" if unset)
	Proc      string // "/proc"
	Host      string
}

// SudoOf returns this process's Sudo.
func SudoOf() Sudo {
	return Sudo{UID: os.Getuid(), EUID: os.Geteuid(), PPID: os.Getppid(), SudoUID: os.Getenv("SUDO_UID"), Proc: "/proc", Host: Hostname()}
}

// ErrNotSudo is wrapped by FromSudo's refusals: this process was not
// started by sudo for another account.
var ErrNotSudo = fmt.Errorf("%w: not started by sudo for an operator's own account", ErrRefused)

// FromSudo returns the person that sudo authenticated for this process:
// the account whose uid sudo put in SUDO_UID, looked up in the passwd
// database. The variable alone proves nothing (the ledger's owner or root
// can set it), so the parent process must vouch for it: sudo runs with
// root's effective uid and the caller's real uid, and stays the parent of
// the command it runs (or of its monitor, itself a sudo with the same
// ids). A parent that runs with root's effective uid is root's own or a
// set-user-ID program; under that name and with SUDO_UID as its real uid
// it is sudo, or root itself, which is trusted. FromSudo refuses root as a
// person (root is not an operator) and an account that is this process's
// own (sudo to oneself).
func FromSudo(s Sudo) (Person, error) {
	if s.UID != s.EUID {
		return Person{}, fmt.Errorf("%w (real uid %d, effective uid %d)", ErrNotSudo, s.UID, s.EUID)
	}
	if s.SudoUID == "" {
		return Person{}, fmt.Errorf("%w (no SUDO_UID)", ErrNotSudo)
	}
	uid, err := strconv.Atoi(s.SudoUID)
	if err != nil || uid < 0 {
		return Person{}, fmt.Errorf("%w (SUDO_UID %q is not a uid)", ErrNotSudo, s.SudoUID)
	}
	parent, err := readStatus(s.Proc, s.PPID)
	if err != nil {
		return Person{}, fmt.Errorf("%w (parent process: %v)", ErrNotSudo, err)
	}
	if parent.name != "sudo" || parent.euid != 0 || parent.ruid != uid {
		return Person{}, fmt.Errorf("%w (the parent process, %q with real uid %d and effective uid %d, is not sudo started by uid %d)",
			ErrNotSudo, parent.name, parent.ruid, parent.euid, uid)
	}
	if uid == 0 {
		return Person{}, fmt.Errorf("%w (sudo was run by root, which is trusted but is not an operator)", ErrNotSudo)
	}
	if uid == s.UID {
		return Person{}, fmt.Errorf("%w (sudo was run by this account itself)", ErrNotSudo)
	}
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return Person{}, fmt.Errorf("%w (uid %d: %v)", ErrNotSudo, uid, err)
	}
	return Person{Auth: AuthSudo, Name: u.Username, UID: uid, Host: s.Host}, nil
}

// OnHost returns the person deciding about the SQLite ledger at path. The
// decision is taken only when this process runs as the file's owner (the
// dedup account) and was started by sudo for another account, the person
// (FromSudo); run any other way, the one line of the refusal says how to
// run command ("settle", "reconcile close").
func OnHost(command, path string, s Sudo) (Person, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Person{}, fmt.Errorf("%w: ledger %s: %v", ErrRefused, path, err)
	}
	owner := fileOwner(fi)
	name := strconv.Itoa(owner)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	how := fmt.Sprintf("run it from your own account as: sudo -u %s %s --db %s ...", name, command, path)
	if s.EUID != owner {
		return Person{}, fmt.Errorf("%w: a decision is taken as the ledger's owner %s, through sudo, by an operator's own account (this process runs as uid %d): %s",
			ErrRefused, name, s.EUID, how)
	}
	p, err := FromSudo(s)
	if err != nil {
		return Person{}, fmt.Errorf("%w: %s", err, how)
	}
	return p, nil
}

// WhoDecides is the person deciding about ledger db with command, found
// before the ledger is opened: on SQLite the person sudo authenticated on
// this host (OnHost), or a refusal; on PostgreSQL the person sudo
// authenticated, if any, and otherwise nobody yet: the database names the
// session's role (dedup_settle_person).
func WhoDecides(command, db string, postgres bool) (Person, error) {
	if !postgres {
		return OnHost(command, db, SudoOf())
	}
	if who, err := FromSudo(SudoOf()); err == nil {
		return who, nil
	}
	return Person{Host: Hostname()}, nil
}
