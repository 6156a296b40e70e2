//go:build faults

package e2e

// The power cut (scripts/faults.sh --power-loss): the ledger (the SQLite
// file, or the PostgreSQL data directory) on a file system that loses every
// write not fsynced (internal/testbed/lazyfs); at seeded moments under load every
// relay, job and operator is killed, the database crashes, the unsynced
// writes are dropped, the files are checked (PRAGMA integrity_check,
// amcheck), and everything starts again on the same files.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"dedup/internal/testbed/lazyfs"
	"dedup/internal/testbed/pgtest"
)

var (
	fPowerLoss   = flag.Bool("faults.powerloss", false, "the ledger on a file system that loses unsynced writes, and power cuts join the faults (sqlite and postgres)")
	fSynchronous = flag.String("faults.synchronous", "full", "every binary's --synchronous; normal (PostgreSQL: with synchronous_commit=off) is the power-loss campaign's control, which must lose transfers")
)

// expectLoss reports whether this is the control: the power cuts must
// then lose acknowledged transfers, or the fault is not injected.
func expectLoss() bool { return *fPowerLoss && *fSynchronous == "normal" }

// children are the jobs' and operators' processes that run now, so that a
// power cut kills them with everything else.
type children struct {
	mu    sync.Mutex
	procs map[*os.Process]struct{}
	down  bool  // the power is off: nothing starts
	cuts  int64 // power cuts so far
	power sync.RWMutex
}

// errPowerOff is what a child that could not start during a cut gets.
var errPowerOff = errors.New("the power is off")

// runChild runs cmd (in a process group of its own, killed whole at a
// cut) and reports whether a power cut killed it.
func (c *campaign) runChild(cmd *exec.Cmd) (cut bool, err error) {
	k := &c.kids
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	k.mu.Lock()
	if k.down {
		k.mu.Unlock()
		return true, errPowerOff
	}
	if k.procs == nil {
		k.procs = map[*os.Process]struct{}{}
	}
	gen := k.cuts
	if err := cmd.Start(); err != nil {
		k.mu.Unlock()
		return false, err
	}
	k.procs[cmd.Process] = struct{}{}
	k.mu.Unlock()
	err = cmd.Wait()
	k.mu.Lock()
	delete(k.procs, cmd.Process)
	cut = k.cuts != gen
	k.mu.Unlock()
	return cut, err
}

// setUpPowerLoss puts the run's ledger on lazyfs.
func (c *campaign) setUpPowerLoss() {
	t := c.t
	mount := func(backing, dir string) (*lazyfs.FS, error) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		return lazyfs.Mount(backing, dir)
	}
	switch *fLedger {
	case "sqlite":
		backing := filepath.Join(c.dir, "ledger-disk")
		if err := os.MkdirAll(backing, 0o700); err != nil {
			t.Fatal(err)
		}
		l, err := mount(backing, filepath.Join(c.dir, "ledger"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.unmount() })
		c.lfs = l
		c.db = filepath.Join(l.Dir, "relay.db")
	case "postgres":
		// The mount point beside the data directory, in the cluster's own
		// directory, where the server's account may go.
		opts := pgtest.Options{DataOn: func(data string) (string, error) {
			l, err := mount(data, data+"-lazyfs")
			if err != nil {
				return "", err
			}
			c.lfs = l
			return l.Dir, nil
		}}
		if *fSynchronous == "normal" {
			// The control: commits acknowledged before their WAL is
			// flushed, and the WAL writer's flush as rare as it can be
			// (10 s), so that every cut loses what was acknowledged
			// since: without it a cut at a quiet moment may lose
			// nothing, and the control would prove nothing.
			opts.Settings = []string{"synchronous_commit=off", "wal_writer_delay=10s"}
		}
		pg, err := pgtest.Start(opts)
		if err != nil {
			t.Fatal(err)
		}
		c.pg = pg
		t.Cleanup(func() {
			// The server first, then the file system under it, then the
			// cluster's directory.
			pg.StopServer("immediate")
			c.unmount()
			pg.Remove()
		})
		name, err := pg.NewDatabase()
		if err != nil {
			t.Fatal(err)
		}
		c.db = pg.URL(name)
	default:
		t.Fatalf("-faults.powerloss runs on sqlite or postgres, not %s", *fLedger)
	}
	if *fSynchronous != "full" {
		c.dbFlags = append(c.dbFlags, "--synchronous", *fSynchronous)
	}
}

// unmount unmounts the ledger's file system at the end of the run (its
// processes stopped: the test's own stop them as it ends).
func (c *campaign) unmount() {
	if c.lfs == nil {
		return
	}
	var err error
	for i := 0; i < 50; i++ { // the processes' last file releases may lag their exit
		if err = c.lfs.Unmount(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Errorf("seed %d: unmount %s: %v", c.seed, c.lfs.Dir, err)
}

// powerCut is one power cut of the relay's host: every relay, job and
// operator killed (SIGKILL), the database crashed (pg_ctl stop -m
// immediate), the unsynced writes dropped, the ledger checked, then the
// database and the relays started again on the same files. The channels
// keep sending throughout, as channels do.
func (c *campaign) powerCut() {
	k := &c.kids
	k.power.Lock() // no test query holds the ledger open meanwhile
	defer k.power.Unlock()
	c.n.powerCut.Add(1)
	k.mu.Lock()
	k.down = true
	k.cuts++
	for p := range k.procs {
		syscall.Kill(-p.Pid, syscall.SIGKILL)
	}
	k.mu.Unlock()
	for {
		k.mu.Lock()
		n := len(k.procs)
		k.mu.Unlock()
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, r := range c.relays {
		r.kill()
	}
	if c.pg != nil {
		if err := c.pg.StopServer("immediate"); err != nil {
			c.t.Errorf("seed %d: %v", c.seed, err)
		}
	}
	dropped := c.lfs.Cut()
	c.logf("power cut: relays, jobs and operators killed, %d unsynced bytes dropped", dropped)
	if c.pg != nil {
		if err := c.pg.StartServer(); err != nil {
			c.t.Errorf("seed %d: PostgreSQL did not start after the power cut: %v", c.seed, err)
		}
	}
	if err := c.ledgerIntact(); err != nil {
		c.integrity = append(c.integrity, fmt.Sprintf("integrity: after power cut %d: %v", k.cuts, err))
	}
	k.mu.Lock()
	k.down = false
	k.mu.Unlock()
	for i := range c.relays {
		c.startRelay(i)
	}
}

// ledgerIntact checks the ledger's files after a cut: SQLite's
// integrity_check, or amcheck on every index of the ledger (with every
// heap tuple looked up in it) and on the tables' heap.
func (c *campaign) ledgerIntact() error {
	if c.pg == nil {
		out, err := exec.Command("sqlite3", c.db, "PRAGMA integrity_check").CombinedOutput()
		if err != nil {
			return fmt.Errorf("sqlite3 integrity_check: %v: %s", err, out)
		}
		if s := strings.TrimSpace(string(out)); s != "ok" {
			return fmt.Errorf("integrity_check: %s", s)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.db)
	if err != nil {
		return fmt.Errorf("connect after the cut: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS amcheck"); err != nil {
		return fmt.Errorf("amcheck: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT bt_index_check(c.oid, true) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam WHERE am.amname = 'btree' AND c.relnamespace = 'public'::regnamespace`); err != nil {
		return fmt.Errorf("amcheck bt_index_check: %w", err)
	}
	var bad bytes.Buffer
	for _, table := range []string{"tx", "tx_event"} {
		rows, err := conn.Query(ctx, "SELECT blkno, coalesce(offnum, 0), msg FROM verify_heapam($1)", table)
		if err != nil {
			return fmt.Errorf("amcheck verify_heapam(%s): %w", table, err)
		}
		for rows.Next() {
			var blk int64
			var off int32
			var msg string
			if err := rows.Scan(&blk, &off, &msg); err != nil {
				rows.Close()
				return err
			}
			fmt.Fprintf(&bad, "%s block %d offset %d: %s; ", table, blk, off, msg)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	if bad.Len() > 0 {
		return fmt.Errorf("verify_heapam: %s", bad.String())
	}
	return nil
}
