package sqlite

import (
	"bytes"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gotest.tools/v3/assert"

	"dedup"
	"dedup/ledger"
)

// warmLedger writes a closed ledger file of days days of perDay rows each,
// in the order a bank's channels send them: GUIDs of a day and a channel
// followed by random digits, day after day. It returns the path and the
// GUIDs of the last warmSample rows.
func warmLedger(t *testing.T, days, perDay int) (string, []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sql.Open("sqlite3", path+"?_journal_mode=WAL")
	assert.NilError(t, err)
	_, err = db.Exec(dedup.Schema)
	assert.NilError(t, err)
	tx, err := db.Begin()
	assert.NilError(t, err)
	ins, err := tx.Prepare(`INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts) VALUES (?, 'TRF00001', 'DONE', '0000', ?, ?, 1)`)
	assert.NilError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	var guids []string
	for d := range days {
		for i := range perDay {
			g := fmt.Sprintf("202611%02d%s%021d", d+1, []string{"MOB", "IBK", "ATM"}[i%3], rng.Int64N(1e18))
			_, err := ins.Exec(g, bytes.Repeat([]byte("q"), 120), bytes.Repeat([]byte("r"), 100))
			assert.NilError(t, err)
			guids = append(guids, g)
		}
	}
	assert.NilError(t, tx.Commit())
	_, err = db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	assert.NilError(t, err)
	assert.NilError(t, db.Close())
	return path, guids[max(len(guids)-warmSample, 0):]
}

// guidIndexPages lists the GUID index's pages of a type ('leaf' or
// 'internal') as SQLite's own dbstat (in the sqlite3 shell) finds them.
func guidIndexPages(t *testing.T, path, kind string) map[uint32]bool {
	t.Helper()
	out, err := exec.Command("sqlite3", path, "SELECT pageno FROM dbstat WHERE name = 'sqlite_autoindex_tx_1' AND pagetype = '"+kind+"'").CombinedOutput()
	assert.NilError(t, err, "the sqlite3 shell (scripts/setup.sh installs it): %s", out)
	leaves := map[uint32]bool{}
	for _, f := range strings.Fields(string(out)) {
		n, err := strconv.ParseUint(f, 10, 32)
		assert.NilError(t, err)
		leaves[uint32(n)] = true
	}
	return leaves
}

// openFile opens path as warming reads it, allowed limit pages; the caller
// closes the file.
func openFile(t *testing.T, path string, limit int) (*dbFile, *os.File) {
	t.Helper()
	f, err := os.Open(path)
	assert.NilError(t, err)
	fi, err := f.Stat()
	assert.NilError(t, err)
	db, err := readHeader(f, fi.Size())
	assert.NilError(t, err)
	db.fd, db.limit, db.deadline = int(f.Fd()), limit, time.Now().Add(time.Minute)
	return db, f
}

// pageKeys reads the GUIDs on the given pages of path's GUID index.
func pageKeys(t *testing.T, path string, pages []uint32) map[string]bool {
	t.Helper()
	db, f := openFile(t, path, len(pages)+1)
	defer f.Close()
	keys := map[string]bool{}
	for _, n := range pages {
		b, err := db.page(n)
		assert.NilError(t, err)
		p, err := db.parse(n, b)
		assert.NilError(t, err)
		for _, c := range p.cells {
			if p.kind == indexInterior {
				c = c[4:]
			}
			rec, err := db.payload(c, false)
			assert.NilError(t, err)
			cols, err := columns(rec, 1)
			assert.NilError(t, err)
			g, ok := cols[0].text()
			assert.Assert(t, ok)
			keys[string(g)] = true
		}
	}
	return keys
}

// A cold restart's first claims read the GUID index's leaves that today's
// GUIDs fall on: warming must read every leaf the latest rows' GUIDs sit
// on (else a claim still reads its leaf from disk inside the write lock),
// only leaves of that index, and not the whole index (else it costs as
// much as reading the index, which takes seconds on a large ledger).
func TestWarmReadsTheLeavesTheLatestGUIDsFallOn(t *testing.T) {
	path, latest := warmLedger(t, 7, 5000)
	before, err := os.ReadFile(path)
	assert.NilError(t, err)
	evict(t, path)
	rep, leaves, err := warm(path, warmBudget, time.Now().Add(time.Minute))
	assert.NilError(t, err)
	after, err := os.ReadFile(path)
	assert.NilError(t, err)
	assert.Assert(t, bytes.Equal(before, after), "warming changed the ledger file")
	assert.Equal(t, rep.Leaves, len(leaves))
	assert.Assert(t, rep.Pages > rep.Leaves, "the leaves, the table's last rows and the index's interior pages are read: %+v", rep)

	all := guidIndexPages(t, path, "leaf")
	for _, n := range leaves {
		assert.Assert(t, all[n], "page %d is not a leaf of the GUID index", n)
	}
	// An index b-tree keeps some entries in its interior pages, which
	// every lookup reads first anyway: the latest GUIDs are on the leaves
	// read or there.
	var interior []uint32
	for n := range guidIndexPages(t, path, "internal") {
		interior = append(interior, n)
	}
	onLeaves, inInterior := pageKeys(t, path, leaves), pageKeys(t, path, interior)
	for _, g := range latest {
		assert.Assert(t, onLeaves[g] || inInterior[g], "the leaf of %s, one of the latest rows' GUIDs, was not read", g)
	}
	assert.Assert(t, len(leaves) < len(all)/2, "%d of the index's %d leaves read: the latest day's are about a seventh", len(leaves), len(all))

	// Read, they are in the cache; warmed again (a restart on a host that
	// stayed up), none is read again.
	evict(t, path)
	rep, leaves, err = warm(path, warmBudget, time.Now().Add(time.Minute))
	assert.NilError(t, err)
	db, f := openFile(t, path, 0)
	cached := db.residency(1, db.pages)
	assert.NilError(t, f.Close())
	for _, n := range leaves {
		assert.Assert(t, cached(n), "leaf %d was warmed but is not in the page cache", n)
	}
	again, _, err := warm(path, warmBudget, time.Now().Add(time.Minute))
	assert.NilError(t, err)
	assert.Equal(t, again.Leaves, rep.Leaves)
	assert.Assert(t, again.Pages < rep.Pages-rep.Leaves/2, "the cached leaves were read again: %+v then %+v", rep, again)
}

// evict drops path's pages from the page cache (they are clean: the file
// was synced), as a reboot would. The kernel skips a page it has just
// added to a CPU's batch, so it asks again until at most 5 % stay.
func evict(t *testing.T, path string) {
	t.Helper()
	db, f := openFile(t, path, 0)
	defer f.Close()
	assert.NilError(t, f.Sync())
	cached := 0
	for range 20 {
		assert.NilError(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
		in := db.residency(1, db.pages)
		cached = 0
		for n := uint32(1); n <= db.pages; n++ {
			if in(n) {
				cached++
			}
		}
		if cached*20 <= int(db.pages) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%d of %s's %d pages stay in the page cache after FADV_DONTNEED (a tmpfs?): run the tests with TMPDIR on a disk", cached, path, db.pages)
}

// Warming must stop at its budget: a slow disk or a huge index delays the
// relay's listening by at most that, and the ledger opens all the same.
func TestWarmStopsAtItsBudget(t *testing.T) {
	path, _ := warmLedger(t, 2, 3000)
	for _, tc := range []struct {
		name     string
		budget   int
		deadline time.Duration
		pages    int
	}{
		{"three pages", 3 * 4096, time.Minute, 3},
		{"deadline passed", warmBudget, -time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, _, err := warm(path, tc.budget, time.Now().Add(tc.deadline))
			assert.NilError(t, err, "a spent budget is not an error")
			assert.Assert(t, rep.Pages <= tc.pages, "read %d pages", rep.Pages)
			l, err := Open(path, ledger.Options{})
			assert.NilError(t, err)
			assert.NilError(t, l.Close())
		})
	}
}

// Closing any descriptor of a file drops every POSIX lock the process
// holds on it: warming must refuse to run while this process has the
// ledger open, and the handle that has it open must keep working.
func TestWarmRefusesAFileThisProcessHasOpen(t *testing.T) {
	path, _ := warmLedger(t, 1, 100)
	first, err := Open(path, ledger.Options{})
	assert.NilError(t, err)
	defer first.Close()

	var warmErr error
	second, err := Open(path, ledger.Options{WarmAtOpen: func(_ ledger.WarmReport, err error) { warmErr = err }})
	assert.NilError(t, err)
	defer second.Close()
	assert.ErrorContains(t, warmErr, "already has the file open")
	claimed, err := first.Claim(ctx, "G-after-a-refused-warm-up", "TRF00001", []byte("r"))
	assert.NilError(t, err)
	assert.Assert(t, claimed)
}

// The relay warms every ledger it opens: a new one (nothing to read), one
// whose tx is WITHOUT ROWID (no separate GUID index) and a sound one.
func TestWarmAtOpenReportsWhatItRead(t *testing.T) {
	withoutRowid := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sql.Open("sqlite3", withoutRowid)
	assert.NilError(t, err)
	_, err = db.Exec(withoutRowidTx)
	assert.NilError(t, err)
	assert.NilError(t, db.Close())
	sound, _ := warmLedger(t, 1, 2000)

	for _, tc := range []struct {
		name    string
		path    string
		wantErr string
		leaves  bool
	}{
		{"new", filepath.Join(t.TempDir(), "ledger.db"), "", false},
		{"without rowid", withoutRowid, "no separate GUID index", false},
		{"sound", sound, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rep ledger.WarmReport
			var warmErr error
			l, err := Open(tc.path, ledger.Options{WarmAtOpen: func(r ledger.WarmReport, err error) { rep, warmErr = r, err }})
			assert.NilError(t, err)
			defer l.Close()
			if tc.wantErr != "" {
				assert.ErrorContains(t, warmErr, tc.wantErr)
			} else {
				assert.NilError(t, warmErr)
			}
			assert.Equal(t, rep.Leaves > 0, tc.leaves, "%+v", rep)
			claimed, err := l.Claim(ctx, "G-after-warming", "TRF00001", []byte("r"))
			assert.NilError(t, err)
			assert.Assert(t, claimed)
		})
	}
}

// A damaged file must never crash or hang the relay's start: warming
// parses pages it did not write. Every byte of a small ledger is garbled
// in turn (and runs of bytes, and the file cut short): warming returns,
// with an error or not, and reads within its budget.
func TestWarmSurvivesAGarbledFile(t *testing.T) {
	path, _ := warmLedger(t, 1, 300)
	orig, err := os.ReadFile(path)
	assert.NilError(t, err)
	garbled := filepath.Join(t.TempDir(), "garbled.db")
	rng := rand.New(rand.NewPCG(3, 4))
	try := func(what string, b []byte) {
		t.Helper()
		assert.NilError(t, os.WriteFile(garbled, b, 0o600))
		rep, _, err := warm(garbled, 64*4096, time.Now().Add(time.Minute))
		assert.Assert(t, rep.Pages <= 64, "%s: read %d pages, beyond the budget", what, rep.Pages)
		if err != nil && errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for i := 0; i < len(orig); i += 1 + i/4096*7 {
		b := bytes.Clone(orig)
		b[i] ^= byte(1 + rng.IntN(255))
		try(fmt.Sprintf("byte %d", i), b)
	}
	for range 300 {
		b := bytes.Clone(orig)
		at := rng.IntN(len(b) - 64)
		for j := range 64 {
			b[at+j] = byte(rng.IntN(256))
		}
		try(fmt.Sprintf("bytes %d-%d", at, at+63), b)
	}
	for _, n := range []int{0, 50, 100, 4096, 4097, len(orig) / 2} {
		try(fmt.Sprintf("cut at %d", n), orig[:n])
	}
	// A page whose every child is itself: the walk must end.
	b := bytes.Clone(orig)
	db, f := openFile(t, path, 10)
	defer f.Close()
	_, guidRoot, err := db.roots()
	assert.NilError(t, err)
	p := b[int(guidRoot-1)*db.pageSize:]
	assert.Equal(t, p[0], byte(indexInterior), "the GUID index's root must be an interior page for this case")
	for i := range int(p[3])<<8 | int(p[4]) {
		c := int(p[12+2*i])<<8 | int(p[13+2*i])
		binary.BigEndian.PutUint32(p[c:], guidRoot)
	}
	binary.BigEndian.PutUint32(p[8:], guidRoot)
	try("a page that is its own child", b)
}

// Which children of an interior page warming reads: those a sampled GUID
// falls in, each one's neighbours, and every child in a gap of at most
// warmGap between two sampled ones; a wider gap is not read (GUIDs with
// no order would have warming read the whole index).
func TestWarmedChildren(t *testing.T) {
	g := [][]byte{[]byte("g")}
	for _, tc := range []struct {
		name    string
		sampled []int // children with a sampled GUID
		n       int   // children
		want    []int
	}{
		{"none", nil, 5, nil},
		{"one in the middle", []int{2}, 5, []int{1, 2, 3}},
		{"the first", []int{0}, 5, []int{0, 1}},
		{"the last", []int{4}, 5, []int{3, 4}},
		{"two side by side", []int{1, 2}, 5, []int{0, 1, 2, 3}},
		{"a gap of warmGap", []int{0, warmGap + 1}, warmGap + 3, seq(0, warmGap+3)},
		{"a gap wider than warmGap", []int{0, warmGap + 2}, warmGap + 4, []int{0, 1, warmGap + 1, warmGap + 2, warmGap + 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kids := make([]routed, tc.n)
			for i := range kids {
				kids[i].page = uint32(i + 1)
			}
			for _, i := range tc.sampled {
				kids[i].guids = g
			}
			var got []int
			for _, k := range warmed(kids) {
				got = append(got, int(k.page)-1)
			}
			assert.DeepEqual(t, got, tc.want)
		})
	}
}

// seq is from, from+1, ..., to-1.
func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}
