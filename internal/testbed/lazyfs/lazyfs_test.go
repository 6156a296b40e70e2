package lazyfs

import (
	"bufio"
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	_ "github.com/mattn/go-sqlite3"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

// mount mounts a fresh backing directory and returns the file system.
func mount(t *testing.T) *FS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("lazyfs mounts with mount(2): run the tests as root (CI does)")
	}
	backing, dir := t.TempDir(), t.TempDir()
	l, err := Mount(backing, dir)
	assert.NilError(t, err)
	t.Cleanup(func() { assert.Check(t, l.Unmount()) })
	return l
}

func write(t *testing.T, path string, data string, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644)
	assert.NilError(t, err)
	_, err = f.WriteString(data)
	assert.NilError(t, err)
	if sync {
		assert.NilError(t, f.Sync())
	}
	assert.NilError(t, f.Close())
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	assert.NilError(t, err)
	return string(b)
}

// Written and fsynced survives a cut; written and not fsynced does not,
// though reads saw it before the cut; a file created and never synced is
// left empty (its directory entry was not deferred).
func TestCutDropsWhatWasNotSynced(t *testing.T) {
	l := mount(t)
	a, b := filepath.Join(l.Dir, "a"), filepath.Join(l.Dir, "b")
	write(t, a, "synced", true)
	write(t, a, "SY", false) // overwrites the first two bytes, unsynced
	write(t, b, "never synced", false)
	assert.Check(t, is.Equal(read(t, a), "SYnced"), "reads must see unsynced writes")
	assert.Check(t, is.Equal(read(t, b), "never synced"))
	dropped := l.Cut()
	assert.Check(t, dropped > 0)
	assert.Check(t, is.Equal(read(t, a), "synced"))
	assert.Check(t, is.Equal(read(t, b), ""))
	fi, err := os.Stat(b)
	assert.NilError(t, err)
	assert.Check(t, is.Equal(fi.Size(), int64(0)), "the size must be the synced one")
	assert.Check(t, is.Equal(l.Stats().Cuts, int64(1)))
}

// A file unlinked (or replaced by a rename) takes its unsynced writes
// with it: a new file of the same name, even on a reused inode number,
// starts empty, before and after a cut.
func TestUnlinkedAndReplacedFilesLeaveNoOverlay(t *testing.T) {
	l := mount(t)
	p, q := filepath.Join(l.Dir, "wal"), filepath.Join(l.Dir, "other")
	for i := 0; i < 20; i++ {
		write(t, p, "old unsynced content", false)
		assert.NilError(t, os.Remove(p))
		write(t, p, "", false)
		assert.Check(t, is.Equal(read(t, p), ""), "round %d: the new file shows the old one's unsynced writes", i)
		assert.NilError(t, os.Remove(p))
	}
	write(t, p, "target unsynced", false)
	write(t, q, "renamed, synced", true)
	assert.NilError(t, os.Rename(q, p))
	assert.Check(t, is.Equal(read(t, p), "renamed, synced"))
	l.Cut()
	assert.Check(t, is.Equal(read(t, p), "renamed, synced"))
}

// An fsync of one file makes that file durable only: the other files'
// unsynced writes are still dropped.
func TestFsyncOfOneFileLeavesTheOthersUnsynced(t *testing.T) {
	l := mount(t)
	a, b := filepath.Join(l.Dir, "a"), filepath.Join(l.Dir, "b")
	fa, err := os.Create(a)
	assert.NilError(t, err)
	fb, err := os.Create(b)
	assert.NilError(t, err)
	_, err = fa.WriteString(strings.Repeat("A", 10000))
	assert.NilError(t, err)
	_, err = fb.WriteString(strings.Repeat("B", 10000))
	assert.NilError(t, err)
	assert.NilError(t, fa.Sync())
	assert.NilError(t, fa.Close())
	assert.NilError(t, fb.Close())
	l.Cut()
	assert.Check(t, is.Equal(read(t, a), strings.Repeat("A", 10000)))
	assert.Check(t, is.Equal(read(t, b), ""))
}

// A truncation is deferred like a write; fdatasync and O_DSYNC count as
// syncs; a write past a shrunk end reads zeros in the gap, before and
// after its sync.
func TestTruncationsAndSyncFlavours(t *testing.T) {
	l := mount(t)
	p := filepath.Join(l.Dir, "t")
	write(t, p, "0123456789", true)
	assert.NilError(t, os.Truncate(p, 4))
	assert.Check(t, is.Equal(read(t, p), "0123"))
	l.Cut()
	assert.Check(t, is.Equal(read(t, p), "0123456789"), "an unsynced truncation survived the cut")

	f, err := os.OpenFile(p, os.O_RDWR, 0)
	assert.NilError(t, err)
	assert.NilError(t, f.Truncate(2))
	_, err = f.WriteAt([]byte("X"), 6)
	assert.NilError(t, err)
	assert.NilError(t, syscall.Fdatasync(int(f.Fd())))
	assert.NilError(t, f.Close())
	want := "01\x00\x00\x00\x00X"
	assert.Check(t, is.Equal(read(t, p), want))
	l.Cut()
	assert.Check(t, is.Equal(read(t, p), want), "fdatasync did not make the write durable")

	d, err := os.OpenFile(filepath.Join(l.Dir, "d"), os.O_CREATE|os.O_WRONLY|syscall.O_DSYNC, 0o644)
	assert.NilError(t, err)
	_, err = d.WriteString("dsync")
	assert.NilError(t, err)
	assert.NilError(t, d.Close())
	l.Cut()
	assert.Check(t, is.Equal(read(t, filepath.Join(l.Dir, "d")), "dsync"))
}

// A shared mmap works (SQLite's -shm): what one mapping writes another
// descriptor reads; unsynced, it is gone after a cut. The mapping is made
// by a child process: a page fault of the file system's own process on its
// own files would wait for its server goroutines, which a garbage
// collection's stop-the-world may be holding (the processes that use the
// ledger are never the one that serves it).
func TestSharedMmapWorksAndIsLostUnsynced(t *testing.T) {
	l := mount(t)
	p := filepath.Join(l.Dir, "shm")
	write(t, p, strings.Repeat("\x00", 8192), true)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LAZYFS_TEST_MMAP="+p)
	out, err := cmd.CombinedOutput()
	assert.NilError(t, err, string(out))
	got := read(t, p)
	assert.Check(t, is.Equal(got[100:106], "mapped"))
	l.Cut()
	assert.Check(t, bytes.Equal([]byte(read(t, p)), make([]byte, 8192)), "the unsynced mapped write survived the cut")
}

// mapper writes "mapped" at offset 100 of path through a shared mapping.
func mapper(path string) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		panic(err)
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, 8192, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		panic(err)
	}
	copy(m[100:], "mapped")
	if err := syscall.Munmap(m); err != nil {
		panic(err)
	}
	f.Close()
}

// SQLite on the file system: with synchronous=FULL a committed row
// survives a cut; with synchronous=OFF (no fsync at all) it does not. So
// the campaign's control can fail.
func TestSQLiteCommitsSurviveOnlyWhenSynced(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Fatal("the sqlite3 shell is not installed (scripts/setup.sh installs it)")
	}
	l := mount(t)
	for _, tc := range []struct {
		sync string
		want string
	}{{"FULL", "1"}, {"OFF", "0"}} {
		db := filepath.Join(l.Dir, tc.sync+".db")
		out, err := exec.Command("sqlite3", db, "PRAGMA journal_mode=WAL", "CREATE TABLE t(x)", "PRAGMA wal_checkpoint(TRUNCATE)").CombinedOutput()
		assert.NilError(t, err, string(out))
		out, err = exec.Command("sqlite3", db, "PRAGMA synchronous="+tc.sync, "INSERT INTO t VALUES(1)").CombinedOutput()
		assert.NilError(t, err, string(out))
		// Force the fsync that the first connection's checkpoint-on-close
		// would otherwise give: the rows are in the WAL only.
		l.Cut()
		out, err = exec.Command("sqlite3", db, "SELECT count(*) FROM t").CombinedOutput()
		assert.NilError(t, err, string(out))
		assert.Check(t, is.Equal(strings.TrimSpace(string(out)), tc.want), "synchronous=%s", tc.sync)
	}
}

// TestMain lets the test binary be the writer child of
// TestCommitsAcknowledgedBeforeAKillSurviveTheCut.
func TestMain(m *testing.M) {
	if db := os.Getenv("LAZYFS_TEST_WRITER"); db != "" {
		writer(db, os.Getenv("LAZYFS_TEST_SYNC"))
		return
	}
	if path := os.Getenv("LAZYFS_TEST_MMAP"); path != "" {
		mapper(path)
		return
	}
	os.Exit(m.Run())
}

// writer commits one row per transaction, as the relay's ledger does
// (WAL, the given synchronous), and prints each id once committed.
func writer(path, sync string) {
	db, err := sql.Open("sqlite3", path+"?_journal_mode=WAL&_synchronous="+sync+"&_busy_timeout=5000")
	if err != nil {
		panic(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, pad BLOB)"); err != nil {
		panic(err)
	}
	var last int
	base, _ := strconv.Atoi(os.Getenv("LAZYFS_TEST_BASE"))
	if err := db.QueryRow("SELECT coalesce(max(id), ?) FROM t WHERE id > ?", base, base).Scan(&last); err != nil {
		panic(err)
	}
	for i := last + 1; ; i++ {
		if _, err := db.Exec("INSERT INTO t VALUES(?, randomblob(300))", i); err != nil {
			panic(err)
		}
		fmt.Println(i)
	}
}

// The relay's way of committing, through the real SQLite driver in a
// process of its own, killed (-9) mid-stream and the power then cut: with
// synchronous=FULL every commit acknowledged before the kill survives,
// through checkpoints and WAL restarts; with OFF, acknowledged commits
// are lost (so this test can fail).
func TestCommitsAcknowledgedBeforeAKillSurviveTheCut(t *testing.T) {
	l := mount(t)
	for _, tc := range []struct {
		sync     string
		wantLoss bool
	}{{"FULL", false}, {"OFF", true}} {
		path := filepath.Join(l.Dir, tc.sync+".db")
		acked := 0
		for round := 0; round < 3; round++ {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "LAZYFS_TEST_WRITER="+path, "LAZYFS_TEST_SYNC="+tc.sync)
			out, err := cmd.StdoutPipe()
			assert.NilError(t, err)
			assert.NilError(t, cmd.Start())
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				n, _ := strconv.Atoi(sc.Text())
				acked = max(acked, n)
				if n >= 1500*(round+1) {
					break
				}
			}
			cmd.Process.Kill()
			cmd.Wait()
			l.Cut()
			// Read by another process, as the restarted relay would (not
			// by this one, which serves the file system).
			got, err := exec.Command("sqlite3", path, "SELECT coalesce(max(id), 0) FROM t").CombinedOutput()
			have := 0
			if err == nil || !strings.Contains(string(got), "no such table") { // OFF may lose the table itself
				assert.NilError(t, err, "synchronous=%s round %d: %s", tc.sync, round, got)
				have, err = strconv.Atoi(strings.TrimSpace(string(got)))
				assert.NilError(t, err, string(got))
			}
			if tc.wantLoss {
				if have < acked {
					return // lost, as it must be
				}
				continue
			}
			assert.Assert(t, have >= acked, "synchronous=%s round %d: %d commits acknowledged, %d survived the cut", tc.sync, round, acked, have)
			acked = have
		}
		assert.Check(t, !tc.wantLoss, "synchronous=%s lost nothing over three cuts: the cut is not injected", tc.sync)
	}
}
