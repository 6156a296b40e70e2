// Package hatest starts a throwaway high-availability PostgreSQL for the
// tests, the demo and the benchmark: one etcd member and three
// Patroni-managed PostgreSQL nodes (Debian's etcd-server and patroni) on
// loopback, in synchronous mode strict with one synchronous standby and
// short timings (ttl 10, loop_wait 1, retry_timeout 3), all in a temporary
// directory that Remove deletes. It also does to the cluster what a bad day
// does to a database host: kill -9 of a node's postmaster, of its Patroni
// and PostgreSQL together, freezing a node's processes, a planned
// switchover.
package hatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"dedup/internal/testbed/pgtest"
)

// Timings of the cluster (Patroni's dynamic configuration): a failover
// takes about TTL after the leader is lost.
const (
	TTL          = 10
	LoopWait     = 1
	RetryTimeout = 3
)

// Cluster is a running etcd and its Patroni nodes.
type Cluster struct {
	Dir   string
	Scope string
	Nodes []*Node
	DB    string // the database the relays use
	// Hosts of their own (Options.Netns): the bridge, its address, and
	// per node its namespace, the bridge side of its link, its address.
	netns      bool
	bridge     string
	bridgeIP   string
	subnet     string
	namespaces []string
	veths      []string
	hostIPs    []string
	etcd       *exec.Cmd
	etcdC      string // etcd's client address
	uid        int
	gid        int
	log        *os.File
}

// Node is one Patroni-managed PostgreSQL.
type Node struct {
	Name    string
	Host    string
	Port    int // PostgreSQL
	APIPort int // Patroni's REST API
	Dir     string
	config  string
	patroni *exec.Cmd
	c       *Cluster
	netns   string // its namespace, with Options.Netns
	veth    string // the bridge side of its link
}

// Options configure Start.
type Options struct {
	// Nodes is how many PostgreSQL nodes (default 3: after a failover a
	// synchronous standby is left and writes go on).
	Nodes int
	// Netns puts each node on a host of its own: a network namespace
	// joined to a bridge in this one, where etcd and the clients are, so
	// that a node can be cut off the network (Isolate). Needs root.
	Netns bool
}

var netSeq atomic.Int64

// Start starts etcd and the nodes, waits until there is a leader, a
// synchronous standby and every node runs, and creates the database DB.
func Start(opts Options) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	for _, b := range []string{"etcd", "patroni"} {
		if _, err := exec.LookPath(b); err != nil {
			return nil, fmt.Errorf("%s not found (scripts/setup.sh installs Debian's etcd-server and patroni): %w", b, err)
		}
	}
	bin, err := pgtest.BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dedup-ha-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Scope: filepath.Base(dir), DB: "dedup", netns: opts.Netns}
	ok := false
	defer func() {
		if !ok {
			c.Remove()
		}
	}()
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if c.log, err = os.Create(filepath.Join(dir, "cluster.log")); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs the postgres user: %w", err)
		}
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
	} else {
		c.uid, c.gid = os.Geteuid(), os.Getegid()
	}
	ports, err := freePorts(2 + 2*opts.Nodes)
	if err != nil {
		return nil, err
	}
	etcdHost := "127.0.0.1"
	if opts.Netns {
		if os.Geteuid() != 0 {
			return nil, errors.New("hosts of their own (network namespaces) need root")
		}
		if err := c.makeNetwork(opts.Nodes); err != nil {
			return nil, err
		}
		etcdHost = c.bridgeIP
	}
	c.etcdC = fmt.Sprintf("%s:%d", etcdHost, ports[0])
	c.etcd = exec.Command("etcd", "--name", "e1", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", "http://"+c.etcdC, "--advertise-client-urls", "http://"+c.etcdC,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		"--initial-cluster", fmt.Sprintf("e1=http://127.0.0.1:%d", ports[1]), "--log-level", "warn")
	c.etcd.Stdout, c.etcd.Stderr = c.log, c.log
	if err := c.etcd.Start(); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	for i := 0; i < opts.Nodes; i++ {
		n := &Node{Name: fmt.Sprintf("node%d", i+1), Host: "127.0.0.1", Port: ports[2+2*i], APIPort: ports[3+2*i],
			Dir: filepath.Join(dir, fmt.Sprintf("node%d", i+1)), c: c}
		if opts.Netns {
			n.Host, n.netns, n.veth = c.hostIPs[i], c.namespaces[i], c.veths[i]
		}
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			return nil, err
		}
		if err := os.Chown(n.Dir, c.uid, c.gid); err != nil {
			return nil, err
		}
		n.config = filepath.Join(n.Dir, "patroni.yml")
		if err := os.WriteFile(n.config, []byte(n.yaml(bin)), 0o644); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	// The first node bootstraps alone; the others clone it.
	if err := c.Nodes[0].Start(); err != nil {
		return nil, err
	}
	if _, err := c.WaitLeader(90 * time.Second); err != nil {
		return nil, err
	}
	for _, n := range c.Nodes[1:] {
		if err := n.Start(); err != nil {
			return nil, err
		}
	}
	if err := c.WaitHealthy(120 * time.Second); err != nil {
		return nil, err
	}
	leader, _ := c.Leader()
	if err := c.exec(leader, "CREATE DATABASE "+c.DB); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

func (n *Node) yaml(bin string) string {
	return fmt.Sprintf(`scope: %[1]s
name: %[2]s
log:
  level: WARNING
restapi:
  listen: %[11]s:%[3]d
  connect_address: %[11]s:%[3]d
etcd3:
  hosts: %[4]s
bootstrap:
  dcs:
    ttl: %[8]d
    loop_wait: %[9]d
    retry_timeout: %[10]d
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    synchronous_mode_strict: true
    synchronous_node_count: 1
    primary_start_timeout: 0
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 300
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        fsync: "on"
        synchronous_commit: "on"
        shared_buffers: 64MB
        # A standby whose primary went away retries every 0.5 s, not 5 s:
        # in strict mode writes wait until a standby attaches to the new
        # primary as synchronous.
        wal_retrieve_retry_interval: 500ms
  initdb:
    - encoding: UTF8
  pg_hba:
    - local all all trust
    - host all all %[12]s trust
    - host replication all %[12]s trust
postgresql:
  listen: %[11]s:%[5]d
  connect_address: %[11]s:%[5]d
  data_dir: %[6]s/data
  bin_dir: %[7]s
  pgpass: %[6]s/pgpass
  authentication:
    replication:
      username: replicator
      password: rep
    superuser:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: %[6]s
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
  nosync: false
`, n.c.Scope, n.Name, n.APIPort, n.c.etcdC, n.Port, n.Dir, bin, TTL, LoopWait, RetryTimeout, n.Host, n.c.clients())
}

// clients is the network PostgreSQL accepts clients and standbys from.
func (c *Cluster) clients() string {
	if c.netns {
		return c.subnet
	}
	return "127.0.0.1/32"
}

// Start starts the node's Patroni (again, after Kill).
func (n *Node) Start() error {
	cmd := exec.Command("patroni", n.config)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	switch {
	case n.netns != "":
		// ip netns exec and setpriv both exec: the pid is Patroni's.
		cmd = exec.Command("ip", "netns", "exec", n.netns, "setpriv", "--reuid", strconv.Itoa(n.c.uid),
			"--regid", strconv.Itoa(n.c.gid), "--init-groups", "patroni", n.config)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	case os.Geteuid() == 0:
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(n.c.uid), Gid: uint32(n.c.gid)}
	}
	cmd.Dir = n.Dir
	cmd.Stdout, cmd.Stderr = n.c.log, n.c.log
	cmd.Env = append(os.Environ(), "HOME="+n.Dir)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("patroni %s: %w", n.Name, err)
	}
	n.patroni = cmd
	go cmd.Wait()
	return nil
}

// Postmaster is the pid of the node's PostgreSQL (0 if it is not running).
func (n *Node) Postmaster() int {
	b, err := os.ReadFile(filepath.Join(n.Dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if pid > 0 && syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// KillPostmaster kills the node's PostgreSQL with SIGKILL (its Patroni
// lives on and restarts it, or demotes it).
func (n *Node) KillPostmaster() error {
	pid := n.Postmaster()
	if pid == 0 {
		return fmt.Errorf("%s: no postmaster", n.Name)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// Kill kills the node's Patroni and PostgreSQL together (the host is
// lost), and every backend.
func (n *Node) Kill() {
	pids := n.pgPids()
	if n.patroni != nil && n.patroni.Process != nil {
		syscall.Kill(-n.patroni.Process.Pid, syscall.SIGKILL)
		n.patroni.Process.Kill()
	}
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
}

// Freeze stops every PostgreSQL process of the node (SIGSTOP), as a
// stalled host or disk would; Thaw resumes them.
func (n *Node) Freeze() error { return n.signalPg(syscall.SIGSTOP) }

// Thaw resumes what Freeze stopped.
func (n *Node) Thaw() error { return n.signalPg(syscall.SIGCONT) }

func (n *Node) signalPg(sig syscall.Signal) error {
	pids := n.pgPids()
	if len(pids) == 0 {
		return fmt.Errorf("%s: no PostgreSQL processes", n.Name)
	}
	for _, p := range pids {
		syscall.Kill(p, sig)
	}
	return nil
}

// pgPids are the postmaster and its children.
func (n *Node) pgPids() []int {
	pm := n.Postmaster()
	if pm == 0 {
		return nil
	}
	pids := []int{pm}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 1 && f[1] == strconv.Itoa(pm) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Member is one node as Patroni's /cluster reports it.
type Member struct {
	Name  string `json:"name"`
	Role  string `json:"role"` // leader, sync_standby, replica
	State string `json:"state"`
	Port  int    `json:"port"`
}

// Members asks any node's Patroni for the cluster's view.
func (c *Cluster) Members() ([]Member, error) {
	var last error
	for _, n := range c.Nodes {
		var v struct {
			Members []Member `json:"members"`
		}
		if err := getJSON(fmt.Sprintf("http://%s:%d/cluster", n.Host, n.APIPort), &v); err != nil {
			last = err
			continue
		}
		return v.Members, nil
	}
	return nil, fmt.Errorf("no Patroni answered: %w", last)
}

// StuckReplica is how long WaitHealthy lets a replica fail to run before
// it reinitializes it.
const StuckReplica = 30 * time.Second

func postJSON(url, body string) error {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

func getJSON(url string, v any) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// node returns the node of a member name.
func (c *Cluster) node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Leader returns the node that holds the leader key.
func (c *Cluster) Leader() (*Node, error) { return c.withRole("leader") }

// SyncStandby returns the synchronous standby.
func (c *Cluster) SyncStandby() (*Node, error) { return c.withRole("sync_standby") }

// Replicas returns the standbys that are not synchronous.
func (c *Cluster) Replicas() []*Node {
	ms, _ := c.Members()
	var out []*Node
	for _, m := range ms {
		if m.Role == "replica" {
			out = append(out, c.node(m.Name))
		}
	}
	return out
}

func (c *Cluster) withRole(role string) (*Node, error) {
	ms, err := c.Members()
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if m.Role == role && (m.State == "running" || m.State == "streaming") {
			return c.node(m.Name), nil
		}
	}
	return nil, fmt.Errorf("no running %s", role)
}

// WaitLeader waits until a node holds the leader key and runs.
func (c *Cluster) WaitLeader(timeout time.Duration) (*Node, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, err := c.Leader()
		if err == nil {
			return n, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no leader after %v: %w\n%s", timeout, err, c.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitHealthy waits until every node runs, with a leader and a
// synchronous standby.
//
// A replica that has not run for StuckReplica (Patroni's "starting" while
// its WAL is ahead of the new primary's timeline, which it cannot follow and
// Patroni does not rewind) is reinitialized from the primary, once, as an
// operator would (patronictl reinit); the harness says so on stderr. That
// heals the test cluster, not the relay: the tests' checks of what the
// relay did are unchanged.
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	notRunning := map[string]time.Time{}
	reinit := map[string]bool{}
	for {
		ms, err := c.Members()
		if err == nil && len(ms) == len(c.Nodes) {
			roles := map[string]int{}
			for _, m := range ms {
				roles[m.Role]++
			}
			running := 0
			for _, m := range ms {
				if m.State == "running" || m.State == "streaming" {
					running++
					delete(notRunning, m.Name)
					continue
				}
				if _, ok := notRunning[m.Name]; !ok {
					notRunning[m.Name] = time.Now()
				}
				if m.Role != "leader" && roles["leader"] > 0 && !reinit[m.Name] && time.Since(notRunning[m.Name]) > StuckReplica {
					if n := c.node(m.Name); n != nil {
						reinit[m.Name] = true
						err := postJSON(fmt.Sprintf("http://%s:%d/reinitialize", n.Host, n.APIPort), `{"force": true}`)
						fmt.Fprintf(os.Stderr, "hatest: replica %s has not run for %v (%s): reinitialized from the primary (%v)\n", m.Name, StuckReplica, m.State, err)
					}
				}
			}
			if roles["leader"] == 1 && roles["sync_standby"] >= 1 && running == len(ms) {
				return nil
			}
			err = fmt.Errorf("members %+v", ms)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not healthy after %v: %v\n%s", timeout, err, c.Log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitWritable waits until a client of the multi-host URL finds a primary
// that takes writes: the cluster is healthy again as the relays see it,
// not only as Patroni's last loop reported it.
func (c *Cluster) WaitWritable(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.writable()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no writable primary after %v: %w", timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *Cluster) writable() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL(c.DB))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// A write that commits only once the synchronous standby has it.
	_, err = conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS hatest_probe (n int); TRUNCATE hatest_probe")
	return err
}

// Switchover asks Patroni for a planned switchover from the leader to
// candidate (empty: any standby Patroni picks).
func (c *Cluster) Switchover(candidate string) error {
	leader, err := c.Leader()
	if err != nil {
		return err
	}
	body := fmt.Sprintf(`{"leader":%q`, leader.Name)
	if candidate != "" {
		body += fmt.Sprintf(`,"candidate":%q`, candidate)
	}
	body += "}"
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Post(fmt.Sprintf("http://%s:%d/switchover", leader.Host, leader.APIPort), "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var b [512]byte
		n, _ := resp.Body.Read(b[:])
		return fmt.Errorf("switchover: HTTP %d: %s", resp.StatusCode, b[:n])
	}
	return nil
}

// URL is the multi-host URL of database db: every node, the writable one
// found by target_session_attrs=read-write.
func (c *Cluster) URL(db string) string {
	hosts := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		hosts = append(hosts, fmt.Sprintf("%s:%d", n.Host, n.Port))
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2",
		strings.Join(hosts, ","), db)
}

// NodeURL is the URL of database db on node n alone (to look at one
// server's own rows).
func (c *Cluster) NodeURL(n *Node, db string) string {
	return fmt.Sprintf("postgres://postgres@%s:%d/%s?sslmode=disable", n.Host, n.Port, db)
}

// exec runs SQL on node n with psql.
func (c *Cluster) exec(n *Node, sql string) error {
	out, err := exec.Command("psql", c.NodeURL(n, "postgres"), "-v", "ON_ERROR_STOP=1", "-qc", sql).CombinedOutput()
	if err != nil {
		return fmt.Errorf("psql %q on %s: %v: %s", sql, n.Name, err, out)
	}
	return nil
}

// Log is what etcd and Patroni wrote, for a failing test's output.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "cluster.log"))
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// Isolate cuts the node off the network (its link to the bridge down): it
// reaches neither etcd, nor the other nodes, nor the clients, and they do
// not reach it. Needs Options.Netns.
func (n *Node) Isolate() error { return n.link("down") }

// Reconnect undoes Isolate.
func (n *Node) Reconnect() error { return n.link("up") }

func (n *Node) link(state string) error {
	if n.veth == "" {
		return errors.New("a node on loopback cannot be cut off: start the cluster with Options.Netns")
	}
	return run("ip", "link", "set", n.veth, state)
}

// makeNetwork makes a bridge here and a namespace per node linked to it.
func (c *Cluster) makeNetwork(nodes int) error {
	k := (os.Getpid() + int(netSeq.Add(1))) % 200
	tag := fmt.Sprintf("%d", k)
	c.subnet = fmt.Sprintf("10.233.%d.0/24", k)
	c.bridgeIP = fmt.Sprintf("10.233.%d.1", k)
	c.bridge = "dhbr" + tag
	if err := run("ip", "link", "add", "name", c.bridge, "type", "bridge"); err != nil {
		return err
	}
	if err := run("ip", "addr", "add", c.bridgeIP+"/24", "dev", c.bridge); err != nil {
		return err
	}
	if err := run("ip", "link", "set", c.bridge, "up"); err != nil {
		return err
	}
	for i := 0; i < nodes; i++ {
		ns := fmt.Sprintf("dh%s-%d", tag, i+1)
		veth, peer := fmt.Sprintf("dhv%s-%d", tag, i+1), fmt.Sprintf("dhp%s-%d", tag, i+1)
		ip := fmt.Sprintf("10.233.%d.%d", k, 10+i)
		for _, argv := range [][]string{
			{"ip", "netns", "add", ns},
			{"ip", "link", "add", veth, "type", "veth", "peer", "name", peer},
			{"ip", "link", "set", peer, "netns", ns},
			{"ip", "link", "set", veth, "master", c.bridge},
			{"ip", "link", "set", veth, "up"},
			{"ip", "-n", ns, "addr", "add", ip + "/24", "dev", peer},
			{"ip", "-n", ns, "link", "set", peer, "up"},
			{"ip", "-n", ns, "link", "set", "lo", "up"},
		} {
			if err := run(argv[0], argv[1:]...); err != nil {
				return err
			}
			if argv[2] == "add" && argv[1] == "netns" {
				c.namespaces = append(c.namespaces, ns)
			}
		}
		c.veths = append(c.veths, veth)
		c.hostIPs = append(c.hostIPs, ip)
	}
	return nil
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// Remove stops everything and deletes the directory (and the namespaces).
func (c *Cluster) Remove() {
	for _, n := range c.Nodes {
		n.Kill()
	}
	if c.etcd != nil && c.etcd.Process != nil {
		c.etcd.Process.Kill()
		c.etcd.Wait()
	}
	for _, ns := range c.namespaces {
		exec.Command("ip", "netns", "del", ns).Run()
	}
	if c.bridge != "" {
		exec.Command("ip", "link", "del", c.bridge).Run()
	}
	if c.log != nil {
		c.log.Close()
	}
	os.RemoveAll(c.Dir)
}

func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
