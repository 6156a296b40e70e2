// Package pgtest starts throwaway PostgreSQL clusters for the tests: the
// Debian package's initdb and pg_ctl (run as the postgres user when the tests
// run as root), a temporary data directory, a free loopback port, fsync on,
// removed at the end. Nothing is mocked: the tests run against the real
// server the binaries will meet in production.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a running throwaway cluster.
type Cluster struct {
	Dir    string // data directory
	Host   string // address it listens on
	Port   int
	bin    string   // directory of initdb and pg_ctl
	prefix []string // runs a command as the cluster's owner (and in its namespace)
	dbSeq  atomic.Int64
	tls    *TLS
	env    []string // the server's extra environment (Options.Env)
	conf   []string // Options.Settings
	data   string   // the directory the server runs on
}

// TLS are the PEM files of a cluster that serves TLS: its certificate and
// key, and the CA that clients verify it with.
type TLS struct {
	Cert, Key, CA string
}

// Options configure Start.
type Options struct {
	// Host is the address to listen on; default 127.0.0.1.
	Host string
	// Netns, if set, runs the server inside that network namespace.
	Netns string
	// TLS, if set, turns ssl on with these files; clients on other hosts
	// are then accepted over TLS only (hostssl).
	TLS *TLS
	// Env is added to the server's environment (NAME=VALUE), e.g.
	// FakeClock's libfaketime settings.
	Env []string
	// Settings are server settings (NAME=VALUE) after the defaults, which
	// they override: "fsync=off" for a test of its refusal.
	Settings []string
	// DataOn, if set, is called with the new data directory after initdb
	// and returns the directory the server runs on instead (the same
	// files, reached another way: the power-loss campaign mounts a file
	// system that loses unsynced writes over it).
	DataOn func(data string) (string, error)
}

// FakeClock returns the environment that runs a server whose wall clock
// is offset from the host's (libfaketime, Debian's faketime package; the
// monotonic clock stays true), as after a failover to a node whose clock
// is off. offset is libfaketime's syntax: "+600" is ten minutes ahead.
func FakeClock(offset string) ([]string, error) {
	libs, _ := filepath.Glob("/usr/lib/*/faketime/libfaketime.so.1")
	if len(libs) == 0 {
		return nil, fmt.Errorf("libfaketime not found: install Debian's faketime (scripts/setup.sh does)")
	}
	return []string{"LD_PRELOAD=" + libs[0], "FAKETIME=" + offset, "FAKETIME_DONT_FAKE_MONOTONIC=1", "FAKETIME_NO_CACHE=1"}, nil
}

// BinDir finds the newest installed PostgreSQL's binaries (the HA
// harness's Patroni nodes use them too).
func BinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("PostgreSQL server binaries not found (install the Debian package postgresql: scripts/setup.sh does)")
}

// FreePort returns a TCP port nobody listens on at host.
func FreePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Start creates and starts a cluster.
func Start(opts Options) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Host: opts.Host, bin: bin, tls: opts.TLS, env: opts.Env, conf: opts.Settings}
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if opts.Netns != "" {
		c.prefix = []string{"ip", "netns", "exec", opts.Netns}
	}
	dir, err := os.MkdirTemp("", "dedup-pg-")
	if err != nil {
		return nil, err
	}
	c.Dir = dir
	if os.Geteuid() == 0 {
		// initdb refuses to run as root: the cluster belongs to postgres.
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		c.prefix = append(c.prefix, "runuser", "-u", "postgres", "--")
	}
	if out, err := c.run("initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	c.data = filepath.Join(dir, "data")
	if opts.DataOn != nil {
		if c.data, err = opts.DataOn(c.data); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("data directory: %w", err)
		}
	}
	if opts.TLS != nil {
		if err := c.installTLS(opts.TLS); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if c.Host != "127.0.0.1" {
		// Clients on other (test-made) hosts connect over their links:
		// with TLS, over TLS only.
		rule := "host all all 0.0.0.0/0 trust\n"
		if opts.TLS != nil {
			rule = "hostssl all all 0.0.0.0/0 trust\n"
		}
		f, err := os.OpenFile(filepath.Join(c.data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString(rule)
			f.Close()
		}
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pg_hba.conf: %w", err)
		}
	}
	if opts.Netns == "" {
		if c.Port, err = FreePort("127.0.0.1"); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	} else {
		c.Port = 5432 // a namespace of its own has every port free
	}
	if err := c.StartServer(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// installTLS copies the certificate and key into the data directory,
// owned by the server's user with the key 0600, as PostgreSQL requires.
func (c *Cluster) installTLS(t *TLS) error {
	for src, dst := range map[string]string{t.Cert: "server.crt", t.Key: "server.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		path := filepath.Join(c.data, dst)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
		if fi, err := os.Stat(c.data); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				os.Chown(path, int(st.Uid), int(st.Gid))
			}
		}
	}
	return nil
}

func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	return c.runEnv(nil, name, args...)
}

// runEnv is run with env added to the command's environment (through
// env(1), so that it survives runuser and ip netns exec).
func (c *Cluster) runEnv(env []string, name string, args ...string) ([]byte, error) {
	argv := append([]string{}, c.prefix...)
	if len(env) > 0 {
		argv = append(append(argv, "env"), env...)
	}
	argv = append(argv, filepath.Join(c.bin, name))
	argv = append(argv, args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = c.Dir
	return cmd.CombinedOutput()
}

// StartServer starts the server (again, after StopServer) on the same port
// and data directory, and waits until it accepts connections.
func (c *Cluster) StartServer() error {
	o := fmt.Sprintf("-p %d -k %s -c listen_addresses=%s -c fsync=on -c synchronous_commit=on -c max_connections=300 -c shared_buffers=64MB",
		c.Port, c.Dir, c.Host)
	if c.tls != nil {
		o += " -c ssl=on"
	}
	for _, kv := range c.conf {
		o += " -c " + kv
	}
	if out, err := c.runEnv(c.env, "pg_ctl", "-D", c.data, "-l", filepath.Join(c.Dir, "log"), "-w", "-t", "60", "-o", o, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.Dir, "log"))
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	return nil
}

// StopServer stops the server; mode is pg_ctl's: "fast" or "immediate" (a
// crash: no shutdown checkpoint, connections cut).
func (c *Cluster) StopServer(mode string) error {
	if out, err := c.run("pg_ctl", "-D", c.data, "-m", mode, "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

// Remove stops the server and deletes the cluster.
func (c *Cluster) Remove() {
	c.StopServer("immediate")
	os.RemoveAll(c.Dir)
}

// URL returns the TCP URL of database db at the cluster's address.
func (c *Cluster) URL(db string) string { return c.URLAt(c.Host, db) }

// URLAt returns the TCP URL of database db at host (a cluster listening on
// several addresses, "*", is reached at one of them).
func (c *Cluster) URLAt(host, db string) string {
	mode := "sslmode=disable"
	if c.tls != nil {
		mode = "sslmode=verify-full&sslrootcert=" + c.tls.CA
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?%s", net.JoinHostPort(host, strconv.Itoa(c.Port)), db, mode)
}

// SocketURL returns the URL of database db through the cluster's Unix
// socket, which works from any network namespace.
func (c *Cluster) SocketURL(db string) string {
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", db, c.Dir, c.Port)
}

// NewDatabase creates an empty database and returns its name: URL,
// URLAt and SocketURL reach it.
func (c *Cluster) NewDatabase() (string, error) {
	name := fmt.Sprintf("t%d_%d", os.Getpid(), c.dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.SocketURL("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return name, nil
}

var shared struct {
	sync.Mutex
	c *Cluster
}

// Shared returns the test binary's shared cluster, starting it on first
// use. It fails the test if PostgreSQL cannot be started: a ledger test
// that silently skipped its PostgreSQL half would hide a gap. TestMain
// calls RemoveShared after the tests.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.c == nil {
		c, err := Start(Options{})
		if err != nil {
			t.Fatalf("start PostgreSQL: %v", err)
		}
		shared.c = c
	}
	return shared.c
}

// SharedDatabase creates an empty database in the shared cluster and
// returns its URL.
func SharedDatabase(t testing.TB) string {
	t.Helper()
	c := Shared(t)
	name, err := c.NewDatabase()
	if err != nil {
		t.Fatalf("create database: %v", err)
	}
	return c.URL(name)
}

// RemoveShared removes the shared cluster, if one was started.
func RemoveShared() {
	shared.Lock()
	defer shared.Unlock()
	if shared.c != nil {
		shared.c.Remove()
		shared.c = nil
	}
}

// Main runs a test binary's tests and then removes the shared cluster.
func Main(m *testing.M) int {
	code := m.Run()
	RemoveShared()
	return code
}

// Exec runs statements on url (test set-up by SQL, as another tool would).
func Exec(t testing.TB, url, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("exec %q: %v", strings.TrimSpace(sql), err)
	}
}

// Rebind turns ? placeholders into PostgreSQL's $1, $2, ... (the tests
// write SQL once for both ledgers; none of their literals holds a '?').
func Rebind(query string) string {
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}
