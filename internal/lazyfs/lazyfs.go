// Package lazyfs is a test file system that loses unsynced writes, as a
// power cut does: a FUSE loopback over a backing directory whose file
// writes stay in the file system's own memory until the file is fsynced
// (fsync, fdatasync, or a descriptor opened O_SYNC/O_DSYNC), and that
// Cut drops, everything unsynced at once. Reads see unsynced data, as a
// real page cache would, and a shared mmap works (SQLite's -shm): its pages
// reach the file system when the kernel writes them back and are lost at a
// cut unless synced, which SQLite never does (it rebuilds the file).
//
// What it cannot see: directory operations (create, rename, unlink,
// mkdir) go through to the backing directory at once, so a missing fsync
// of a directory is not caught; sync_file_range is the kernel's business
// (no durability promise, and FUSE is not told); syncfs is not passed to
// FUSE servers. The power-loss campaign (scripts/faults.sh --power-loss)
// puts the ledger on it; it is a test tool and no binary ships it.
package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// pageSize is the unit of the unsynced overlay.
const pageSize = 4096

// FS is a mounted lose-unsynced-writes file system.
type FS struct {
	// Dir is where it is mounted; Backing the directory it serves.
	Dir, Backing string
	server       *fuse.Server
	mu           sync.Mutex
	dirty        map[*node]struct{} // the files with unsynced writes
	stats        Stats
}

// Stats counts what the file system saw.
type Stats struct {
	Syncs        int64 // fsyncs of files that had unsynced writes
	Cuts         int64
	DroppedBytes int64 // unsynced bytes (whole pages) dropped by the cuts
	DroppedFiles int64 // files that had unsynced writes at a cut
}

// Mount serves backing at dir (both must exist) until Unmount. It needs
// root (it mounts with mount(2); other users' processes, such as a
// PostgreSQL server run as postgres, may use it, with the kernel checking
// permissions as on any file system).
func Mount(backing, dir string) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("lazyfs: backing %s: %w", backing, err)
	}
	l := &FS{Dir: dir, Backing: backing, dirty: map[*node]struct{}{}}
	root := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, lfs: l}
	}
	rootNode := root.NewNode(root, nil, "", &st)
	root.RootNode = rootNode
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:        true,
			DirectMountStrict: true,
			FsName:            "lazyfs:" + backing,
			Name:              "lazyfs",
			Options:           []string{"default_permissions"},
		},
	}
	srv, err := fs.Mount(dir, rootNode, opts)
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s on %s: %w", backing, dir, err)
	}
	l.server = srv
	return l, nil
}

// Unmount unmounts the file system (the processes using it must have
// ended). Unsynced writes are dropped, as at a cut.
func (l *FS) Unmount() error {
	l.Cut()
	return l.server.Unmount()
}

// Stats returns the counts so far.
func (l *FS) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Cut drops every unsynced write and truncation, as a power cut would,
// and returns how many bytes it dropped. Call it once the processes that
// used the files are stopped (killed: a cut gives nothing a chance to
// sync): dirty pages of a shared mmap the kernel still holds are written
// back into the file system first, and then dropped with the rest.
func (l *FS) Cut() int64 {
	l.mu.Lock()
	nodes := make([]*node, 0, len(l.dirty))
	for n := range l.dirty {
		nodes = append(nodes, n)
	}
	l.mu.Unlock()
	// The kernel's own copies: written back, then forgotten below.
	for _, n := range nodes {
		n.NotifyContent(0, 0)
	}
	l.mu.Lock()
	var dropped int64
	files := int64(0)
	for n := range l.dirty {
		n.mu.Lock()
		if n.ov != nil {
			dropped += int64(len(n.ov.pages)) * pageSize
			files++
			n.ov.close()
			n.ov = nil
		}
		n.mu.Unlock()
		delete(l.dirty, n)
		nodes = append(nodes, n)
	}
	l.stats.Cuts++
	l.stats.DroppedBytes += dropped
	l.stats.DroppedFiles += files
	l.mu.Unlock()
	for _, n := range nodes {
		n.NotifyContent(0, 0) // the kernel's cached pages and size are the lost ones
	}
	return dropped
}

// overlay is a file's unsynced state: its dirty pages, its logical size,
// and how much of the backing file still holds its content (less after a
// truncation not yet synced).
type overlay struct {
	pages map[int64][]byte
	size  int64
	base  int64
	fd    *os.File // the backing file, open for the flush
}

func (o *overlay) close() {
	if o.fd != nil {
		o.fd.Close()
	}
}

// node is one file or directory: a loopback node with the overlay of its
// unsynced writes (per inode, so every descriptor of a file sees them).
type node struct {
	fs.LoopbackNode
	lfs *FS
	mu  sync.Mutex
	ov  *overlay
}

func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(nil))
}

// overlayLocked returns n's overlay, making it from the backing file's
// size.
func (n *node) overlayLocked() (*overlay, error) {
	if n.ov != nil {
		return n.ov, nil
	}
	fd, err := os.OpenFile(n.backingPath(), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	fi, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, err
	}
	n.ov = &overlay{pages: map[int64][]byte{}, size: fi.Size(), base: fi.Size(), fd: fd}
	n.lfs.mu.Lock()
	n.lfs.dirty[n] = struct{}{}
	n.lfs.mu.Unlock()
	return n.ov, nil
}

// readBase fills b with the backing content at off, zeros past base
// (and past the backing file's end).
func (o *overlay) readBase(b []byte, off int64) error {
	clear(b)
	if off >= o.base {
		return nil
	}
	want := b
	if rest := o.base - off; int64(len(want)) > rest {
		want = want[:rest]
	}
	if _, err := o.fd.ReadAt(want, off); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func (n *node) read(fd *os.File, dest []byte, off int64) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := n.ov
	if o == nil {
		m, err := fd.ReadAt(dest, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		return m, nil
	}
	if off >= o.size {
		return 0, nil
	}
	end := min(off+int64(len(dest)), o.size)
	for pos := off; pos < end; {
		pi, po := pos/pageSize, pos%pageSize
		chunk := min(pageSize-po, end-pos)
		out := dest[pos-off : pos-off+chunk]
		if p, ok := o.pages[pi]; ok {
			copy(out, p[po:po+chunk])
		} else if err := o.readBase(out, pos); err != nil {
			return 0, err
		}
		pos += chunk
	}
	return int(end - off), nil
}

func (n *node) write(data []byte, off int64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	o, err := n.overlayLocked()
	if err != nil {
		return err
	}
	end := off + int64(len(data))
	for pos := off; pos < end; {
		pi, po := pos/pageSize, pos%pageSize
		chunk := min(pageSize-po, end-pos)
		p, ok := o.pages[pi]
		if !ok {
			p = make([]byte, pageSize)
			if err := o.readBase(p, pi*pageSize); err != nil {
				return err
			}
			// Bytes past the logical size are zeros, whatever the
			// backing file still holds there.
			if lim := o.size - pi*pageSize; lim < pageSize {
				clear(p[max(lim, 0):])
			}
			o.pages[pi] = p
		}
		copy(p[po:po+chunk], data[pos-off:pos-off+chunk])
		pos += chunk
	}
	o.size = max(o.size, end)
	return nil
}

func (n *node) truncate(size int64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	o, err := n.overlayLocked()
	if err != nil {
		return err
	}
	if size < o.size {
		for pi := range o.pages {
			if pi*pageSize >= size {
				delete(o.pages, pi)
			}
		}
		if po := size % pageSize; po != 0 {
			pi := size / pageSize
			p, ok := o.pages[pi]
			if !ok {
				p = make([]byte, pageSize)
				if err := o.readBase(p, pi*pageSize); err != nil {
					return err
				}
				o.pages[pi] = p
			}
			clear(p[po:])
		}
		o.base = min(o.base, size)
	}
	o.size = size
	return nil
}

// sync makes n's unsynced state the backing file's, durably.
func (n *node) sync(fd *os.File) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	o := n.ov
	if o == nil {
		if fd != nil {
			return fd.Sync()
		}
		return nil
	}
	// What lies between the content kept and the logical size is zeros.
	if err := o.fd.Truncate(o.base); err != nil {
		return err
	}
	if err := o.fd.Truncate(o.size); err != nil {
		return err
	}
	for pi, p := range o.pages {
		off := pi * pageSize
		if off >= o.size {
			continue
		}
		if _, err := o.fd.WriteAt(p[:min(pageSize, o.size-off)], off); err != nil {
			return err
		}
	}
	if err := o.fd.Sync(); err != nil {
		return err
	}
	o.close()
	n.ov = nil
	n.lfs.mu.Lock()
	delete(n.lfs.dirty, n)
	n.lfs.stats.Syncs++
	n.lfs.mu.Unlock()
	return nil
}

// The node's operations: open and create hand out handles that go through
// the overlay; getattr shows the logical size; a size change is deferred.

var (
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeFsyncer   = (*node)(nil)
)

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.wrap(fh, flags), fuseFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	child, ok := in.Operations().(*node)
	if !ok {
		return nil, nil, 0, syscall.EIO
	}
	return in, child.wrap(fh, flags), fuseFlags, 0
}

func (n *node) wrap(fh fs.FileHandle, flags uint32) fs.FileHandle {
	var f *os.File
	if pf, ok := fh.(interface{ PassthroughFd() (int, bool) }); ok {
		// A second *os.File on a dup of the loopback's descriptor, which
		// the loopback handle keeps and closes at release.
		if fd, ok := pf.PassthroughFd(); ok {
			if d, err := syscall.Dup(fd); err == nil {
				f = os.NewFile(uintptr(d), n.backingPath())
			}
		}
	}
	return &handle{inner: fh, f: f, n: n, sync: flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0}
}

// Statx is refused, so that the kernel asks Getattr (which knows the
// logical size) instead.
func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return syscall.ENOSYS
}

// CopyFileRange is refused: the kernel then copies by read and write,
// through the overlay.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle,
	offOut uint64, size uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

// Tmpfile (O_TMPFILE) is not supported.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// Lookup shows a file with unsynced writes at its logical size.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	in, errno := n.LoopbackNode.Lookup(ctx, name, out)
	if errno == 0 {
		if child, ok := in.Operations().(*node); ok {
			child.logicalSize(&out.Attr)
		}
	}
	return in, errno
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.LoopbackNode.Getattr(ctx, nil, out); errno != 0 {
		return errno
	}
	n.logicalSize(&out.Attr)
	return 0
}

func (n *node) logicalSize(a *fuse.Attr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ov != nil {
		a.Size = uint64(n.ov.size)
		a.Blocks = (a.Size + 511) / 512
	}
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if err := n.truncate(int64(size)); err != nil {
			return fs.ToErrno(err)
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	if errno := n.LoopbackNode.Setattr(ctx, nil, in, out); errno != 0 {
		return errno
	}
	n.logicalSize(&out.Attr)
	return 0
}

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	return fs.ToErrno(n.sync(nil))
}

// handle is an open file: reads and writes through its node's overlay.
type handle struct {
	inner fs.FileHandle
	f     *os.File
	n     *node
	sync  bool // opened O_SYNC or O_DSYNC: every write is durable
}

var (
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileGetattrer = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileGetlker   = (*handle)(nil)
	_ fs.FileSetlker   = (*handle)(nil)
	_ fs.FileSetlkwer  = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h.f == nil {
		return nil, syscall.EBADF
	}
	m, err := h.n.read(h.f, dest, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:m]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if err := h.n.write(data, off); err != nil {
		return 0, fs.ToErrno(err)
	}
	if h.sync {
		if err := h.n.sync(h.f); err != nil {
			return 0, fs.ToErrno(err)
		}
	}
	return uint32(len(data)), 0
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return fs.ToErrno(h.n.sync(h.f))
}

func (h *handle) Flush(ctx context.Context) syscall.Errno {
	if fl, ok := h.inner.(fs.FileFlusher); ok {
		return fl.Flush(ctx)
	}
	return 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	if h.f != nil {
		h.f.Close()
	}
	if r, ok := h.inner.(fs.FileReleaser); ok {
		return r.Release(ctx)
	}
	return 0
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	if g, ok := h.inner.(fs.FileGetattrer); ok {
		if errno := g.Getattr(ctx, out); errno != 0 {
			return errno
		}
	}
	h.n.logicalSize(&out.Attr)
	return 0
}

// Locks (SQLite's and PostgreSQL's) are the backing file's.
func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	if l, ok := h.inner.(fs.FileGetlker); ok {
		return l.Getlk(ctx, owner, lk, flags, out)
	}
	return syscall.ENOTSUP
}

func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	if l, ok := h.inner.(fs.FileSetlker); ok {
		return l.Setlk(ctx, owner, lk, flags)
	}
	return syscall.ENOTSUP
}

func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	if l, ok := h.inner.(fs.FileSetlkwer); ok {
		return l.Setlkw(ctx, owner, lk, flags)
	}
	return syscall.ENOTSUP
}

// Allocate extends the logical size (mode 0), unsynced like a write of
// zeros; other modes are not supported.
func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if mode != 0 {
		return syscall.EOPNOTSUPP
	}
	h.n.mu.Lock()
	o, err := h.n.overlayLocked()
	if err == nil && int64(off+size) > o.size {
		o.size = int64(off + size)
	}
	h.n.mu.Unlock()
	return fs.ToErrno(err)
}
