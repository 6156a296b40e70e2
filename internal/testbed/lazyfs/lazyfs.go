// Package lazyfs is a test file system that loses unsynced writes, as a
// power cut does: a FUSE loopback over a backing directory that remembers,
// for every file, what each write and truncation since the file's last
// fsync overwrote, and that Cut puts back, for every file at once: each
// file returns to its content at its last fsync (fsync, fdatasync, or a
// write through a descriptor opened O_SYNC/O_DSYNC). Until then every
// read and write goes to the backing file as it comes (an undo log, not a
// write cache), so the processes that use the files see exactly what a
// local file system shows them, shared mmaps included (SQLite's -shm,
// whose pages reach the file system when the kernel writes them back, and
// are undone at a cut unless synced, which SQLite never does: it rebuilds
// the file).
//
// What it cannot see: directory operations (create, rename, unlink,
// mkdir) go through at once and are never undone, so a missing fsync of a
// directory is not caught; sync_file_range is the kernel's business (no
// durability promise, and FUSE is not told); syncfs is not passed to FUSE
// servers. Cut is for a moment when every process that wrote the files has
// been killed, as in a power cut. The process that serves the file system
// must not map its files itself: a page fault there waits for the server's
// goroutines, which a garbage collection may be stopping (cgo's SQLite and
// system calls are not affected). The power-loss campaign
// (scripts/faults.sh --power-loss) puts the ledger on it; it is a test
// tool and no binary ships it.
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
	"golang.org/x/sys/unix"
)

// pageSize is the unit of the undo log.
const pageSize = 4096

// FS is a mounted lose-unsynced-writes file system.
type FS struct {
	// Dir is where it is mounted; Backing the directory it serves.
	Dir, Backing string
	server       *fuse.Server
	mu           sync.Mutex
	dirty        map[*node]struct{} // the files written since their last sync
	stats        Stats
}

// Stats counts what the file system saw.
type Stats struct {
	Syncs        int64 // fsyncs of files that had unsynced writes
	Cuts         int64
	DroppedBytes int64 // unsynced bytes (whole pages) undone by the cuts
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
// ended). What was not synced is undone first, as at a cut.
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

// Cut undoes every write and truncation since each file's last sync, as a
// power cut would, and returns how many bytes (whole pages) it undid.
// Call it once the processes that used the files are stopped (killed: a
// cut gives nothing a chance to sync). Dirty pages of a shared mmap that
// the kernel still holds are written back into the files first, and undone
// with the rest; the kernel's cached pages are dropped after.
func (l *FS) Cut() int64 {
	nodes := l.dirtyNodes()
	for _, n := range nodes {
		n.NotifyContent(0, 0) // write back what the kernel holds
	}
	var dropped, files int64
	for _, n := range l.dirtyNodes() {
		if b, err := n.undo(); err == nil && b >= 0 {
			dropped += b
			files++
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.NotifyContent(0, 0) // the kernel's copies are of the lost writes
	}
	l.mu.Lock()
	l.stats.Cuts++
	l.stats.DroppedBytes += dropped
	l.stats.DroppedFiles += files
	l.mu.Unlock()
	return dropped
}

func (l *FS) dirtyNodes() []*node {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*node, 0, len(l.dirty))
	for n := range l.dirty {
		out = append(out, n)
	}
	return out
}

// undoLog is what a file held at its last sync, where it was overwritten
// since: the original bytes of each page first changed, and the size.
type undoLog struct {
	size  int64            // the file's size at its last sync
	pages map[int64][]byte // page index -> its bytes at the last sync (up to size)
	fd    *os.File         // the backing file, for the undo
}

// node is one file or directory: a loopback node with the undo log of its
// unsynced writes (per inode, so every descriptor of a file shares it).
type node struct {
	fs.LoopbackNode
	lfs *FS
	mu  sync.Mutex
	log *undoLog
}

func (n *node) backingPath() string {
	return filepath.Join(n.RootData.Path, n.Path(nil))
}

// logLocked returns n's undo log, starting one at the file's present
// (synced) state.
func (n *node) logLocked() (*undoLog, error) {
	if n.log != nil {
		return n.log, nil
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
	n.log = &undoLog{size: fi.Size(), pages: map[int64][]byte{}, fd: fd}
	n.lfs.mu.Lock()
	n.lfs.dirty[n] = struct{}{}
	n.lfs.mu.Unlock()
	return n.log, nil
}

// save keeps the synced bytes of the pages in [off, end) not saved yet.
func (u *undoLog) save(off, end int64) error {
	end = min(end, u.size)
	for pi := off / pageSize; pi*pageSize < end; pi++ {
		if _, ok := u.pages[pi]; ok {
			continue
		}
		start := pi * pageSize
		b := make([]byte, min(pageSize, u.size-start))
		if _, err := u.fd.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		u.pages[pi] = b
	}
	return nil
}

// write writes data at off into the backing file through fd, saving what
// it overwrites first.
func (n *node) write(fd *os.File, data []byte, off int64) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	u, err := n.logLocked()
	if err != nil {
		return 0, err
	}
	if err := u.save(off, off+int64(len(data))); err != nil {
		return 0, err
	}
	return fd.WriteAt(data, off)
}

// truncate sets the backing file's size, saving what a shrink drops.
func (n *node) truncate(size int64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	u, err := n.logLocked()
	if err != nil {
		return err
	}
	if err := u.save(size, u.size); err != nil {
		return err
	}
	return u.fd.Truncate(size)
}

// sync makes the backing file durable and forgets its undo log.
func (n *node) sync(fd *os.File) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	target := fd
	if target == nil && n.log != nil {
		target = n.log.fd
	}
	if target != nil {
		if err := target.Sync(); err != nil {
			return err
		}
	}
	if n.log != nil {
		n.dropLocked()
		n.lfs.mu.Lock()
		n.lfs.stats.Syncs++
		n.lfs.mu.Unlock()
	}
	return nil
}

func (n *node) dropLocked() {
	if n.log != nil {
		n.log.fd.Close()
		n.log = nil
	}
	n.lfs.mu.Lock()
	delete(n.lfs.dirty, n)
	n.lfs.mu.Unlock()
}

// undo puts the synced content back and returns how many bytes it
// restored (-1: nothing to undo).
func (n *node) undo() (int64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	u := n.log
	if u == nil {
		return -1, nil
	}
	defer n.dropLocked()
	var restored int64
	if err := u.fd.Truncate(u.size); err != nil {
		return 0, err
	}
	for pi, b := range u.pages {
		if _, err := u.fd.WriteAt(b, pi*pageSize); err != nil {
			return 0, err
		}
		restored += int64(len(b))
	}
	return restored, nil
}

// forget drops n's undo log: its file is gone (unlinked, or replaced by
// a rename), or n now stands for a new file.
func (n *node) forget() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropLocked()
}

// The node's operations: open and create hand out handles that log what
// they overwrite; a size change is logged; unlink and rename forget.

var (
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.wrap(fh, flags), fuseFlags, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	var st syscall.Stat_t
	existed := syscall.Lstat(filepath.Join(n.backingPath(), name), &st) == nil
	in, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	child, ok := in.Operations().(*node)
	if !ok {
		return nil, nil, 0, syscall.EIO
	}
	if !existed {
		// A new file: if the backing file system reused an inode number
		// (and go-fuse the node), nothing of the old file's log is this
		// one's.
		child.forget()
	}
	return in, child.wrap(fh, flags), fuseFlags, 0
}

func (n *node) wrap(fh fs.FileHandle, flags uint32) fs.FileHandle {
	h := &handle{inner: fh, n: n, sync: flags&(syscall.O_SYNC|syscall.O_DSYNC) != 0}
	if pf, ok := fh.(interface{ PassthroughFd() (int, bool) }); ok {
		// A second *os.File on a dup of the loopback's descriptor, which
		// the loopback handle keeps and closes at release.
		if fd, ok := pf.PassthroughFd(); ok {
			if d, err := syscall.Dup(fd); err == nil {
				h.f = os.NewFile(uintptr(d), n.backingPath())
			}
		}
	}
	return h
}

// childNode is the node of name in n, if the kernel has looked it up.
func (n *node) childNode(name string) *node {
	if in := n.GetChild(name); in != nil {
		if c, ok := in.Operations().(*node); ok {
			return c
		}
	}
	return nil
}

// Unlink removes the file at once (a directory operation); its unsynced
// writes go with it.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	child := n.childNode(name)
	errno := n.LoopbackNode.Unlink(ctx, name)
	if errno == 0 && child != nil {
		child.forget()
	}
	return errno
}

// Rename renames at once; a file it replaces loses its undo log.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	var replaced *node
	if np, ok := newParent.(*node); ok {
		replaced = np.childNode(newName)
	}
	errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
	if errno == 0 && replaced != nil && flags&unix.RENAME_EXCHANGE == 0 {
		replaced.forget()
	}
	return errno
}

// Setattr logs a size change before it is made.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if err := n.truncate(int64(size)); err != nil {
			return fs.ToErrno(err)
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	return n.LoopbackNode.Setattr(ctx, nil, in, out)
}

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	return fs.ToErrno(n.sync(nil))
}

// CopyFileRange is refused: the kernel then copies by read and write,
// which the log sees.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle,
	offOut uint64, size uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

// Tmpfile (O_TMPFILE) is not supported.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// handle is an open file: reads go to the backing file, writes through
// its node's log.
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
	_ fs.FileAllocater = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if r, ok := h.inner.(fs.FileReader); ok {
		return r.Read(ctx, dest, off)
	}
	return nil, syscall.EBADF
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.f == nil {
		return 0, syscall.EBADF
	}
	m, err := h.n.write(h.f, data, off)
	if err != nil {
		return uint32(m), fs.ToErrno(err)
	}
	if h.sync {
		if err := h.n.sync(h.f); err != nil {
			return 0, fs.ToErrno(err)
		}
	}
	return uint32(m), 0
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
		return g.Getattr(ctx, out)
	}
	return syscall.ENOSYS
}

// Allocate logs what a change of size may drop, then allocates (mode 0
// only extends: nothing to save).
func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if mode != 0 {
		return syscall.EOPNOTSUPP
	}
	h.n.mu.Lock()
	_, err := h.n.logLocked()
	h.n.mu.Unlock()
	if err != nil {
		return fs.ToErrno(err)
	}
	if a, ok := h.inner.(fs.FileAllocater); ok {
		return a.Allocate(ctx, off, size, mode)
	}
	return syscall.EOPNOTSUPP
}
