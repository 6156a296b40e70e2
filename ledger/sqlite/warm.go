package sqlite

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"dedup/ledger"
)

// A restart on a large ledger with a cold page cache (after a reboot) used
// to serve its first second well below its steady rate: nearly every new
// GUID's claim read the leaf of tx's GUID index its GUID falls on from
// disk, inside the write lock, one read after another (the figures and the
// trace: docs/benchmarks.md, "Figures the code's choices rest on"). Warming (Options.WarmAtOpen, the relay) reads
// those leaves before the ledger opens, warmReaders at a time and in the
// file's order: the leaves that hold the GUIDs of the warmSample rows
// written last, their neighbours, and the leaves in a gap of up to
// warmGap between two of them. A bank's channels number their transfers
// by day and channel (20261204MOB...), so the day's new GUIDs fall among
// the day's earlier ones, and 4,096 of those leave the day's leaves
// sampled densely enough for the gaps to fill them all. GUIDs with no such
// order spread over the whole index, which no read short of all of it
// warms; warming then helps little and costs at most its budget. Leaves
// the cache already holds (a restart on a host that stayed up) are not
// read again.
//
// It reads the file's b-tree pages itself (SQLite's file format,
// https://www.sqlite.org/fileformat2.html), through a read-only descriptor,
// before any SQLite connection of this process has the file open, because
// it must close that descriptor again: closing any descriptor of a file
// drops every POSIX lock the process holds on it, SQLite's included
// (https://www.sqlite.org/howtocorrupt.html section 2.2), and in WAL mode a
// connection's SHARED lock on the file is what keeps another process from
// deleting the WAL under it. warmGUIDIndex refuses to run if the process
// already has the file open.
//
// It is a hint and nothing more: it never writes, SQLite reads and checks
// every page again when it uses it, and pages still in the WAL are read as
// the file has them (at worst the wrong leaves are warmed). A page that
// does not parse stops it with an error; the ledger opens all the same,
// and is checked as it always is (the scrub, `inspect --check`).

// warmSample is how many of the latest rows' GUIDs say where the next
// claims will fall.
const warmSample = 4096

// warmBudget bounds what warming reads: at most this many bytes of pages
// (128 MiB: about the leaves of a day of 3 million GUIDs) and for at most
// warmDeadline, so that a slow disk or a huge day delays the relay's
// listening by at most that (on the disk measured, about 20,000 leaves a
// second: a day of 2 million GUIDs).
const (
	warmBudget   = 128 << 20
	warmDeadline = time.Second
)

// warmReaders is how many reads are in flight at once: the disk measured
// read 12,848 leaves in 1.02 s with 1 reader, 0.62-0.71 s with 4 or 8,
// and no faster with 16 or 32 (one traced run; git log holds it).
const warmReaders = 8

// warmMaxDepth bounds the b-tree's depth (a 4 KiB-page tree of a billion
// GUIDs is 5 deep), so that a damaged file's loop of pages ends.
const warmMaxDepth = 20

// Page types of SQLite's b-tree pages.
const (
	indexInterior = 0x02
	tableInterior = 0x05
	indexLeaf     = 0x0a
	tableLeaf     = 0x0d
)

// dbFile reads pages of a ledger file as SQLite's format lays them out.
type dbFile struct {
	r        io.ReaderAt
	fd       int // r's descriptor, for mincore; -1 if none
	pageSize int // bytes per page
	usable   int // pageSize less the reserved bytes at each page's end
	pages    uint32
	read     int // pages read so far
	limit    int // pages read at most
	deadline time.Time
}

// errBudget ends warming when it has read what it may.
var errBudget = errors.New("warming budget spent")

// warmGUIDIndex warms path's GUID index (see the comment above) within
// budget bytes and the deadline, and reports what it read. It never changes
// the file.
func warmGUIDIndex(path string, budget int, deadline time.Time) (ledger.WarmReport, error) {
	rep, _, err := warm(path, budget, deadline)
	return rep, err
}

// warm is warmGUIDIndex, and also returns the GUID index's leaves it read.
func warm(path string, budget int, deadline time.Time) (rep ledger.WarmReport, leaves []uint32, err error) {
	start := time.Now()
	if open, err := openInThisProcess(path); err != nil {
		return rep, nil, err
	} else if open {
		return rep, nil, errors.New("this process already has the file open (closing a second descriptor would drop its locks)")
	}
	f, err := os.Open(path)
	if err != nil {
		return rep, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return rep, nil, err
	}
	if fi.Size() == 0 {
		return rep, nil, nil // a new ledger: nothing to warm
	}
	// Exactly the pages asked for: the kernel's read-ahead (8 MiB here)
	// would otherwise take the reads, in the file's order, for a
	// sequential read and fill the cache with the table's pages between.
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
		return rep, nil, fmt.Errorf("fadvise: %w", err)
	}
	db, err := readHeader(f, fi.Size())
	if err != nil {
		return rep, nil, err
	}
	db.fd = int(f.Fd())
	db.limit, db.deadline = budget/db.pageSize, deadline
	defer func() {
		rep.Pages, rep.Took = db.read, time.Since(start)
		if errors.Is(err, errBudget) {
			err = nil // what the budget allowed is what it is for
		}
	}()
	txRoot, guidRoot, err := db.roots()
	if err != nil {
		return rep, nil, err
	}
	if guidRoot == 0 {
		return rep, nil, errors.New("tx has no separate GUID index (WITHOUT ROWID)")
	}
	guids, err := db.latestGUIDs(txRoot, warmSample)
	if err != nil {
		return rep, nil, fmt.Errorf("table tx: %w", err)
	}
	leaves, err = db.warmLeaves(guidRoot, guids)
	rep.Leaves = len(leaves)
	if err != nil {
		return rep, leaves, fmt.Errorf("GUID index: %w", err)
	}
	return rep, leaves, nil
}

// openInThisProcess reports whether any descriptor of this process refers
// to path's file.
func openInThisProcess(path string) (bool, error) {
	want, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false, fmt.Errorf("list this process's files: %w", err)
	}
	for _, fd := range fds {
		if fi, err := os.Stat(filepath.Join("/proc/self/fd", fd.Name())); err == nil && os.SameFile(fi, want) {
			return true, nil
		}
	}
	return false, nil
}

// readHeader reads the file's 100-byte header (the page size and the bytes
// reserved at each page's end); the pages are those of the file's size
// (the header's own count is stale when an old writer last wrote it, and
// a running writer grows the file).
func readHeader(r io.ReaderAt, size int64) (*dbFile, error) {
	var h [100]byte
	if _, err := r.ReadAt(h[:], 0); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if string(h[:16]) != "SQLite format 3\x00" {
		return nil, errors.New("header: not an SQLite file")
	}
	ps := int(binary.BigEndian.Uint16(h[16:18]))
	if ps == 1 {
		ps = 65536
	}
	if ps < 512 || ps&(ps-1) != 0 {
		return nil, fmt.Errorf("header: page size %d", ps)
	}
	usable := ps - int(h[20])
	if usable < 480 {
		return nil, fmt.Errorf("header: usable page size %d", usable)
	}
	return &dbFile{r: r, fd: -1, pageSize: ps, usable: usable, pages: uint32(min(size/int64(ps), 1<<32-1))}, nil
}

// page reads page n.
func (db *dbFile) page(n uint32) ([]byte, error) {
	if n == 0 || n > db.pages {
		return nil, fmt.Errorf("page %d is not in the file's %d pages", n, db.pages)
	}
	if db.read >= db.limit || time.Now().After(db.deadline) {
		return nil, errBudget
	}
	db.read++
	b := make([]byte, db.pageSize)
	if _, err := db.r.ReadAt(b, int64(n-1)*int64(db.pageSize)); err != nil {
		return nil, fmt.Errorf("page %d: %w", n, err)
	}
	return b, nil
}

// btreePage is a parsed b-tree page: its type, its cells and, for an
// interior page, its right-most child.
type btreePage struct {
	kind  byte
	cells [][]byte // each cell from its start to the page's usable end
	right uint32
}

// parse parses page n's b-tree header and cell pointers.
func (db *dbFile) parse(n uint32, b []byte) (btreePage, error) {
	off := 0
	if n == 1 {
		off = 100
	}
	b = b[:db.usable]
	if len(b) < off+12 {
		return btreePage{}, fmt.Errorf("page %d: too short", n)
	}
	p := btreePage{kind: b[off]}
	hdr := 8
	switch p.kind {
	case indexInterior, tableInterior:
		hdr = 12
		p.right = binary.BigEndian.Uint32(b[off+8 : off+12])
	case indexLeaf, tableLeaf:
	default:
		return p, fmt.Errorf("page %d: not a b-tree page (type %#x)", n, p.kind)
	}
	count := int(binary.BigEndian.Uint16(b[off+3 : off+5]))
	ptrs := off + hdr
	if ptrs+2*count > len(b) {
		return p, fmt.Errorf("page %d: %d cells do not fit", n, count)
	}
	p.cells = make([][]byte, count)
	for i := range p.cells {
		c := int(binary.BigEndian.Uint16(b[ptrs+2*i:]))
		if c < ptrs+2*count || c >= len(b) {
			return p, fmt.Errorf("page %d: cell %d at %d is outside the page", n, i, c)
		}
		p.cells[i] = b[c:]
	}
	return p, nil
}

// child is an interior cell's left child.
func child(cell []byte) (uint32, error) {
	if len(cell) < 4 {
		return 0, errors.New("cell too short")
	}
	return binary.BigEndian.Uint32(cell), nil
}

// varint decodes SQLite's big-endian variable-length integer.
func varint(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < 9; i++ {
		if i >= len(b) {
			return 0, 0, errors.New("varint runs off the cell")
		}
		if i == 8 {
			return v<<8 | uint64(b[i]), 9, nil
		}
		v = v<<7 | uint64(b[i]&0x7f)
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	panic("unreachable")
}

// localPayload is how many of a payload's bytes are on its page (the rest
// is on overflow pages), for a table leaf or an index page.
func (db *dbFile) localPayload(size uint64, table bool) int {
	u := uint64(db.usable)
	x := (u-12)*64/255 - 23
	if table {
		x = u - 35
	}
	if size <= x {
		return int(size)
	}
	m := (u-12)*32/255 - 23
	k := m + (size-m)%(u-4)
	if k <= x {
		return int(k)
	}
	return int(m)
}

// payload returns the local part of a cell's payload, which starts at
// b[0] with its size; a table leaf's cell then has its rowid.
func (db *dbFile) payload(b []byte, table bool) ([]byte, error) {
	size, n, err := varint(b)
	if err != nil {
		return nil, err
	}
	b = b[n:]
	if table {
		if _, n, err = varint(b); err != nil {
			return nil, err
		}
		b = b[n:]
	}
	local := db.localPayload(size, table)
	if local > len(b) {
		return nil, errors.New("payload runs off the page")
	}
	return b[:local], nil
}

// column is one column's value in a record: its serial type and its bytes.
type column struct {
	serial uint64
	data   []byte
}

// columns decodes the first n columns of a record (fewer if it has fewer);
// a column whose bytes are on an overflow page ends the list.
func columns(rec []byte, n int) ([]column, error) {
	hsize, k, err := varint(rec)
	if err != nil {
		return nil, err
	}
	if hsize > uint64(len(rec)) {
		return nil, errors.New("record header runs off the payload")
	}
	hdr, body := rec[k:hsize], rec[hsize:]
	var cols []column
	for len(hdr) > 0 && len(cols) < n {
		st, k, err := varint(hdr)
		if err != nil {
			return nil, err
		}
		hdr = hdr[k:]
		var size uint64
		switch {
		case st <= 4:
			size = st
		case st == 5:
			size = 6
		case st == 6 || st == 7:
			size = 8
		case st >= 12:
			size = (st - 12) / 2
		}
		if size > uint64(len(body)) {
			break
		}
		cols = append(cols, column{st, body[:size]})
		body = body[size:]
	}
	return cols, nil
}

// text is a text column's value.
func (c column) text() ([]byte, bool) {
	return c.data, c.serial >= 13 && c.serial%2 == 1
}

// int is an integer column's value.
func (c column) int() (int64, bool) {
	switch {
	case c.serial >= 1 && c.serial <= 6:
		v := int64(int8(c.data[0]))
		for _, b := range c.data[1:] {
			v = v<<8 | int64(b)
		}
		return v, true
	case c.serial == 8:
		return 0, true
	case c.serial == 9:
		return 1, true
	}
	return 0, false
}

// roots reads the schema (sqlite_schema, rooted at page 1) for the root
// pages of table tx and of its GUID index (0 if tx is WITHOUT ROWID).
func (db *dbFile) roots() (tx, guid uint32, err error) {
	err = db.eachTableRow(1, func(rec []byte) bool {
		cols, err := columns(rec, 4)
		if err != nil || len(cols) < 4 {
			return true
		}
		kind, _ := cols[0].text()
		name, _ := cols[1].text()
		table, _ := cols[2].text()
		root, ok := cols[3].int()
		if !ok || root <= 0 || root > int64(db.pages) || string(table) != "tx" {
			return true
		}
		switch {
		case string(kind) == "table" && string(name) == "tx":
			tx = uint32(root)
		case string(kind) == "index" && bytes.HasPrefix(name, []byte("sqlite_autoindex_tx_")):
			guid = uint32(root)
		}
		return true
	}, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("schema: %w", err)
	}
	if tx == 0 {
		return 0, 0, errors.New("schema: no table tx")
	}
	return tx, guid, nil
}

// eachTableRow calls row with each row's record of the table b-tree rooted
// at n, from its last row to its first, until row returns false.
func (db *dbFile) eachTableRow(n uint32, row func(rec []byte) bool, depth int) error {
	if depth > warmMaxDepth {
		return errors.New("b-tree deeper than any ledger's")
	}
	b, err := db.page(n)
	if err != nil {
		return err
	}
	p, err := db.parse(n, b)
	if err != nil {
		return err
	}
	switch p.kind {
	case tableLeaf:
		for i := len(p.cells) - 1; i >= 0; i-- {
			rec, err := db.payload(p.cells[i], true)
			if err != nil {
				return fmt.Errorf("page %d: %w", n, err)
			}
			if !row(rec) {
				return errStop
			}
		}
		return nil
	case tableInterior:
		kids := []uint32{p.right}
		for i := len(p.cells) - 1; i >= 0; i-- {
			c, err := child(p.cells[i])
			if err != nil {
				return fmt.Errorf("page %d: %w", n, err)
			}
			kids = append(kids, c)
		}
		for _, c := range kids {
			if err := db.eachTableRow(c, row, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("page %d: not a table b-tree page (type %#x)", n, p.kind)
}

// errStop ends a walk that has found what it looked for.
var errStop = errors.New("stop")

// latestGUIDs returns the GUIDs of table tx's last n rows (in rowid order:
// the order they were claimed in), sorted.
func (db *dbFile) latestGUIDs(root uint32, n int) ([][]byte, error) {
	var guids [][]byte
	err := db.eachTableRow(root, func(rec []byte) bool {
		if cols, err := columns(rec, 1); err == nil && len(cols) == 1 {
			if g, ok := cols[0].text(); ok {
				guids = append(guids, bytes.Clone(g))
			}
		}
		return len(guids) < n
	}, 0)
	if err != nil && !errors.Is(err, errStop) {
		return nil, err
	}
	sort.Slice(guids, func(i, j int) bool { return bytes.Compare(guids[i], guids[j]) < 0 })
	return guids, nil
}

// warmLeaves reads, level by level of the index b-tree rooted at root, the
// pages that the sorted guids fall on, and the pages warmed chooses beside
// them (a page with no guid of its own is read, and its own children are
// not). It returns the leaves it warmed.
func (db *dbFile) warmLeaves(root uint32, guids [][]byte) ([]uint32, error) {
	level := []routed{{root, guids}}
	seen := map[uint32]bool{root: true}
	for depth := 0; len(level) > 0; depth++ {
		if depth > warmMaxDepth {
			return nil, errors.New("b-tree deeper than any ledger's")
		}
		sort.Slice(level, func(i, j int) bool { return level[i].page < level[j].page })
		// A b-tree's leaves are all at one depth: the level's first page
		// says whether this is theirs.
		first, err := db.page(level[0].page)
		if err != nil {
			return nil, err
		}
		p, err := db.parse(level[0].page, first)
		if err != nil {
			return nil, err
		}
		if p.kind == indexLeaf {
			return db.warmLeafLevel(level)
		}
		pages, err := db.readAll(level[1:])
		pages = append([][]byte{first}, pages...)
		var next []routed
		for i, b := range pages {
			v := level[i]
			p, perr := db.parse(v.page, b)
			if perr != nil {
				return nil, perr
			}
			if p.kind != indexInterior {
				return nil, fmt.Errorf("page %d: not an interior page of an index b-tree (type %#x)", v.page, p.kind)
			}
			if len(v.guids) == 0 {
				continue
			}
			kids, rerr := db.route(v.page, p, v.guids)
			if rerr != nil {
				return nil, rerr
			}
			for _, k := range warmed(kids) {
				if k.page != 0 && !seen[k.page] {
					seen[k.page] = true
					next = append(next, k)
				}
			}
		}
		if err != nil {
			return nil, err
		}
		level = next
	}
	return nil, nil
}

// warmLeafLevel brings level's leaves (in the file's order, the first
// already read) into the page cache: those the cache does not hold yet
// are read, warmReaders at a time, into buffers that are reused (the
// bytes are not kept: the cache is what is warmed). A restart on a host
// that stayed up finds them cached and reads none. It returns the leaves
// warmed, read or found cached, up to where the budget stopped it.
func (db *dbFile) warmLeafLevel(level []routed) ([]uint32, error) {
	cached := db.residency(level[0].page, level[len(level)-1].page)
	leaves := []uint32{level[0].page}
	var over error
	next := make(chan uint32)
	errs := make(chan error, warmReaders)
	var wg sync.WaitGroup
	for range warmReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, db.pageSize)
			for n := range next {
				if _, err := db.r.ReadAt(b, int64(n-1)*int64(db.pageSize)); err != nil {
					errs <- fmt.Errorf("page %d: %w", n, err)
					return
				}
			}
		}()
	}
	stopped := make(chan struct{})
	go func() { wg.Wait(); close(stopped) }()
send:
	for _, v := range level[1:] {
		if v.page > db.pages {
			over = fmt.Errorf("page %d is not in the file's %d pages", v.page, db.pages)
			break
		}
		if !cached(v.page) {
			if db.read >= db.limit || time.Now().After(db.deadline) {
				over = errBudget
				break
			}
			select {
			case next <- v.page:
				db.read++
			case err := <-errs:
				over = err
				break send
			}
		}
		leaves = append(leaves, v.page)
	}
	close(next)
	<-stopped
	select {
	case err := <-errs:
		if over == nil {
			over = err
		}
	default:
	}
	return leaves, over
}

// residency returns whether page n, for n from first to last, is in the
// page cache (mincore on a read-only mapping of the file, made and
// unmade here; its bytes are never touched). If the kernel cannot say,
// no page is.
func (db *dbFile) residency(first, last uint32) func(n uint32) bool {
	none := func(uint32) bool { return false }
	if db.fd < 0 || last < first {
		return none
	}
	os := unix.Getpagesize()
	start := int64(first-1) * int64(db.pageSize) / int64(os) * int64(os)
	end := int64(last) * int64(db.pageSize)
	m, err := unix.Mmap(db.fd, start, int(end-start), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return none
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os-1)/os)
	// x/sys/unix has no wrapper for mincore(2).
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		return none
	}
	return func(n uint32) bool {
		if n < first || n > last {
			return false
		}
		from := (int64(n-1)*int64(db.pageSize) - start) / int64(os)
		to := (int64(n)*int64(db.pageSize) - start + int64(os) - 1) / int64(os)
		for i := from; i < to; i++ {
			if vec[i]&1 == 0 {
				return false
			}
		}
		return true
	}
}

// warmGap is how many children with no sampled GUID, between two with
// one, are read too. 4,096 GUIDs sampled over a day's leaves leave gaps
// that are, roughly, exponentially distributed: over 33,000 leaves (a day
// of 3 million GUIDs) 8 on average, and the gaps longer than 32 hold about
// 0.1 % of the leaves, where those longer than 8 hold a third. GUIDs with
// no order leave gaps of 27 on average over 10 million rows' 111,000
// leaves, and the budget ends that read.
const warmGap = 32

// warmed returns which of an interior page's children (in key order) to
// read: those a sampled GUID falls in, their neighbours, and the children
// in a gap of at most warmGap between two of them.
func warmed(kids []routed) []routed {
	var out []routed
	last := -1 // the last child with a sampled GUID
	for i, k := range kids {
		if k.guids == nil {
			continue
		}
		from := i - 1
		if last >= 0 && i-last-1 <= warmGap {
			from = last + 1
		} else if last >= 0 {
			out = append(out, kids[last+1]) // last's right neighbour
		}
		for j := max(from, 0); j < i; j++ {
			if j > last {
				out = append(out, kids[j])
			}
		}
		out = append(out, k)
		last = i
	}
	if last >= 0 && last+1 < len(kids) {
		out = append(out, kids[last+1])
	}
	return out
}

// routed is a page of the index and the sorted guids that fall in it.
type routed struct {
	page  uint32
	guids [][]byte
}

// route splits the sorted guids among interior page p's children, in key
// order (the right-most child last).
func (db *dbFile) route(n uint32, p btreePage, guids [][]byte) ([]routed, error) {
	kids := make([]routed, 0, len(p.cells)+1)
	for _, cell := range p.cells {
		c, err := child(cell)
		if err != nil {
			return nil, fmt.Errorf("page %d: %w", n, err)
		}
		rec, err := db.payload(cell[4:], false)
		if err != nil {
			return nil, fmt.Errorf("page %d: %w", n, err)
		}
		cols, err := columns(rec, 1)
		if err != nil || len(cols) == 0 {
			return nil, fmt.Errorf("page %d: a cell's key does not parse", n)
		}
		key, _ := cols[0].text()
		i := sort.Search(len(guids), func(i int) bool { return bytes.Compare(guids[i], key) > 0 })
		kids = append(kids, routed{c, guids[:i:i]})
		guids = guids[i:]
	}
	kids = append(kids, routed{p.right, guids})
	for i := range kids {
		if len(kids[i].guids) == 0 {
			kids[i].guids = nil
		}
	}
	return kids, nil
}

// readAll reads the pages of level, warmReaders at a time, as many as the
// budget allows (errBudget if not all) and as they are in the file
// (an error if one is not).
func (db *dbFile) readAll(level []routed) ([][]byte, error) {
	var over error
	if n := db.limit - db.read; len(level) > n {
		level, over = level[:max(n, 0)], errBudget
	}
	if time.Now().After(db.deadline) {
		return nil, errBudget
	}
	pages := make([][]byte, len(level))
	errs := make([]error, len(level))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(warmReaders, len(level)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				n := level[i].page
				if n == 0 || n > db.pages {
					errs[i] = fmt.Errorf("page %d is not in the file's %d pages", n, db.pages)
					continue
				}
				b := make([]byte, db.pageSize)
				if _, err := db.r.ReadAt(b, int64(n-1)*int64(db.pageSize)); err != nil {
					errs[i] = fmt.Errorf("page %d: %w", n, err)
					continue
				}
				pages[i] = b
			}
		}()
	}
	for i := range level {
		if time.Now().After(db.deadline) {
			over = errBudget
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	// The pages read before the first that failed or was not read.
	for i := range pages {
		if pages[i] == nil {
			if errs[i] != nil {
				over = errs[i]
			} else if over == nil {
				over = errBudget
			}
			pages = pages[:i]
			break
		}
	}
	db.read += len(pages)
	return pages, over
}
