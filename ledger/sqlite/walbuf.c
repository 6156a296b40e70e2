// walbuf.c: the "dedup-walbuf" VFS, SQLite's default VFS with each WAL
// frame written in one call instead of two (see walbuf.go for why).
//
// SQLite writes a WAL frame as two calls, its 24-byte header and then its
// page, each one pwrite(2) (walWriteOneFrame). This VFS holds a new frame's
// header and writes it together with its page, which SQLite writes in the
// very next call. Nothing else is ever held: once SQLite's write of a
// frame's page returns, the whole frame is in the operating system, as it
// was without this VFS, whatever SQLite does next (commit, sync, roll
// back, spill a page, release its locks). Any other call on the file while
// a header is held (which SQLite does not make) writes the header first.
//
// Frames are not gathered across calls on purpose: SQLite writes the
// frames of a transaction that is not committed yet when it spills pages,
// and may roll that transaction back without another call on the WAL;
// frames held then would be written later, possibly over frames another
// process committed meanwhile.
//
// Anything that is not a new frame appended to the WAL (the WAL's header,
// a page or checksum rewritten in place, every other file) goes straight to
// the default VFS.

#include <stdlib.h>
#include <string.h>

#include "walbuf.h"

// The parts of sqlite3.h this file uses: the VFS and file objects are
// SQLite's stable interface (https://sqlite.org/c3ref/vfs.html), declared
// here because the driver's header is not on this package's include path.
typedef long long sqlite3_int64;
typedef struct sqlite3_file sqlite3_file;
typedef struct sqlite3_io_methods sqlite3_io_methods;
typedef struct sqlite3_vfs sqlite3_vfs;
typedef void (*sqlite3_syscall_ptr)(void);

struct sqlite3_file {
	const sqlite3_io_methods *pMethods;
};

struct sqlite3_io_methods {
	int iVersion;
	int (*xClose)(sqlite3_file *);
	int (*xRead)(sqlite3_file *, void *, int iAmt, sqlite3_int64 iOfst);
	int (*xWrite)(sqlite3_file *, const void *, int iAmt, sqlite3_int64 iOfst);
	int (*xTruncate)(sqlite3_file *, sqlite3_int64 size);
	int (*xSync)(sqlite3_file *, int flags);
	int (*xFileSize)(sqlite3_file *, sqlite3_int64 *pSize);
	int (*xLock)(sqlite3_file *, int);
	int (*xUnlock)(sqlite3_file *, int);
	int (*xCheckReservedLock)(sqlite3_file *, int *pResOut);
	int (*xFileControl)(sqlite3_file *, int op, void *pArg);
	int (*xSectorSize)(sqlite3_file *);
	int (*xDeviceCharacteristics)(sqlite3_file *);
	int (*xShmMap)(sqlite3_file *, int iPg, int pgsz, int, void volatile **);
	int (*xShmLock)(sqlite3_file *, int offset, int n, int flags);
	void (*xShmBarrier)(sqlite3_file *);
	int (*xShmUnmap)(sqlite3_file *, int deleteFlag);
	int (*xFetch)(sqlite3_file *, sqlite3_int64 iOfst, int iAmt, void **pp);
	int (*xUnfetch)(sqlite3_file *, sqlite3_int64 iOfst, void *p);
};

struct sqlite3_vfs {
	int iVersion;
	int szOsFile;
	int mxPathname;
	sqlite3_vfs *pNext;
	const char *zName;
	void *pAppData;
	int (*xOpen)(sqlite3_vfs *, const char *zName, sqlite3_file *, int flags, int *pOutFlags);
	int (*xDelete)(sqlite3_vfs *, const char *zName, int syncDir);
	int (*xAccess)(sqlite3_vfs *, const char *zName, int flags, int *pResOut);
	int (*xFullPathname)(sqlite3_vfs *, const char *zName, int nOut, char *zOut);
	void *(*xDlOpen)(sqlite3_vfs *, const char *zFilename);
	void (*xDlError)(sqlite3_vfs *, int nByte, char *zErrMsg);
	void (*(*xDlSym)(sqlite3_vfs *, void *, const char *zSymbol))(void);
	void (*xDlClose)(sqlite3_vfs *, void *);
	int (*xRandomness)(sqlite3_vfs *, int nByte, char *zOut);
	int (*xSleep)(sqlite3_vfs *, int microseconds);
	int (*xCurrentTime)(sqlite3_vfs *, double *);
	int (*xGetLastError)(sqlite3_vfs *, int, char *);
	int (*xCurrentTimeInt64)(sqlite3_vfs *, sqlite3_int64 *);
	int (*xSetSystemCall)(sqlite3_vfs *, const char *zName, sqlite3_syscall_ptr);
	sqlite3_syscall_ptr (*xGetSystemCall)(sqlite3_vfs *, const char *zName);
	const char *(*xNextSystemCall)(sqlite3_vfs *, const char *zName);
};

// Weak: cgo links this package's objects once on their own, without the
// driver's SQLite, to learn what they import; in the program itself the
// driver's definitions are linked in. walbuf_register refuses to run if
// they are not.
extern sqlite3_vfs *sqlite3_vfs_find(const char *zVfsName) __attribute__((weak));
extern int sqlite3_vfs_register(sqlite3_vfs *, int makeDflt) __attribute__((weak));

#define SQLITE_OK 0
#define SQLITE_ERROR 1
#define SQLITE_NOMEM 7
#define SQLITE_OPEN_WAL 0x00080000

// frameHeader is the size of a WAL frame's header.
#define frameHeader 24

// bufferSize holds a frame of the largest page SQLite has (64 KiB).
#define bufferSize (frameHeader + 65536)

// walFile is an open WAL file: our methods, the default VFS's file (in
// the memory right after this struct), and a frame's header held until
// its page.
typedef struct walFile {
	sqlite3_file base;
	sqlite3_file *real;
	char *buf;           // the held header, then its whole frame; allocated at the first header held
	int len;             // bytes in buf: 0, or frameHeader while a header is held
	sqlite3_int64 at;    // the file offset of buf[0]
	sqlite3_int64 end;   // end of the highest byte written since the WAL's header
} walFile;

// realOffset is where the default VFS's file starts in a walFile's memory,
// rounded up so that it stays aligned.
#define realOffset ((sizeof(walFile) + 15) / 16 * 16)

static sqlite3_vfs *defaultVFS;
static sqlite3_vfs walbufVFS;
static const sqlite3_io_methods walMethods;

// Counts over every WAL file this process opened, for the tests: how many
// frames were written whole, and how many writes held headers took.
static volatile long long totalWrites, totalFrames;

// flush writes what buf holds (a lone header, or a whole frame).
static int flush(walFile *p) {
	int rc = SQLITE_OK;
	if (p->len > 0) {
		rc = p->real->pMethods->xWrite(p->real, p->buf, p->len, p->at);
		__atomic_add_fetch(&totalWrites, 1, __ATOMIC_RELAXED);
		if (rc == SQLITE_OK && p->at + p->len > p->end) p->end = p->at + p->len;
	}
	p->len = 0;
	return rc;
}

static int walWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 off) {
	walFile *p = (walFile *)f;
	int rc;
	if (p->len > 0) {
		if (off == p->at + frameHeader && n != frameHeader && frameHeader + n <= bufferSize) {
			// The held header's page: the frame in one write.
			memcpy(p->buf + frameHeader, z, n);
			p->len += n;
			__atomic_add_fetch(&totalFrames, 1, __ATOMIC_RELAXED);
			return flush(p);
		}
		if ((rc = flush(p)) != SQLITE_OK) return rc;
	}
	if (off == 0) p->end = 0; // the WAL's header: the WAL starts again
	if (n == frameHeader && off > 0 && off >= p->end) {
		// A new frame's header (a checksum rewritten in place is at
		// an offset written before): held until its page.
		if (p->buf == NULL && (p->buf = malloc(bufferSize)) == NULL) return SQLITE_NOMEM;
		memcpy(p->buf, z, n);
		p->len = n;
		p->at = off;
		return SQLITE_OK;
	}
	rc = p->real->pMethods->xWrite(p->real, z, n, off);
	if (rc == SQLITE_OK && off + n > p->end) p->end = off + n;
	return rc;
}

static int walClose(sqlite3_file *f) {
	walFile *p = (walFile *)f;
	int rc = flush(p);
	int rc2 = p->real->pMethods->xClose(p->real);
	free(p->buf);
	p->buf = NULL;
	return rc != SQLITE_OK ? rc : rc2;
}

static int walRead(sqlite3_file *f, void *z, int n, sqlite3_int64 off) {
	walFile *p = (walFile *)f;
	int rc = flush(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xRead(p->real, z, n, off);
}

static int walTruncate(sqlite3_file *f, sqlite3_int64 size) {
	walFile *p = (walFile *)f;
	int rc = flush(p);
	if (rc != SQLITE_OK) return rc;
	if (p->end > size) p->end = size;
	return p->real->pMethods->xTruncate(p->real, size);
}

static int walSync(sqlite3_file *f, int flags) {
	walFile *p = (walFile *)f;
	int rc = flush(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xSync(p->real, flags);
}

static int walFileSize(sqlite3_file *f, sqlite3_int64 *size) {
	walFile *p = (walFile *)f;
	int rc = flush(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xFileSize(p->real, size);
}

static int walLock(sqlite3_file *f, int level) {
	walFile *p = (walFile *)f;
	return p->real->pMethods->xLock(p->real, level);
}

static int walUnlock(sqlite3_file *f, int level) {
	walFile *p = (walFile *)f;
	return p->real->pMethods->xUnlock(p->real, level);
}

static int walCheckReservedLock(sqlite3_file *f, int *out) {
	walFile *p = (walFile *)f;
	return p->real->pMethods->xCheckReservedLock(p->real, out);
}

static int walFileControl(sqlite3_file *f, int op, void *arg) {
	walFile *p = (walFile *)f;
	int rc = flush(p);
	return rc != SQLITE_OK ? rc : p->real->pMethods->xFileControl(p->real, op, arg);
}

static int walSectorSize(sqlite3_file *f) {
	walFile *p = (walFile *)f;
	return p->real->pMethods->xSectorSize(p->real);
}

static int walDeviceCharacteristics(sqlite3_file *f) {
	walFile *p = (walFile *)f;
	return p->real->pMethods->xDeviceCharacteristics(p->real);
}

// walMethods are version 1: SQLite maps and locks shared memory through
// the database file, never through the WAL.
static const sqlite3_io_methods walMethods = {
	1,
	walClose,
	walRead,
	walWrite,
	walTruncate,
	walSync,
	walFileSize,
	walLock,
	walUnlock,
	walCheckReservedLock,
	walFileControl,
	walSectorSize,
	walDeviceCharacteristics,
};

// walbufOpen opens every file but a WAL as the default VFS does, in the
// same memory; a WAL is the default VFS's file wrapped in a walFile.
static int walbufOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *outFlags) {
	(void)vfs;
	if (!(flags & SQLITE_OPEN_WAL)) {
		return defaultVFS->xOpen(defaultVFS, name, f, flags, outFlags);
	}
	walFile *p = (walFile *)f;
	memset(p, 0, sizeof(*p));
	p->real = (sqlite3_file *)((char *)p + realOffset);
	int rc = defaultVFS->xOpen(defaultVFS, name, p->real, flags, outFlags);
	if (rc != SQLITE_OK) {
		p->base.pMethods = NULL;
		return rc;
	}
	p->base.pMethods = &walMethods;
	return SQLITE_OK;
}

// The ledger's clock, datetime('now'): the default VFS's (the OS's) unless
// walbuf_follow_go_clock turned on Go's (walbufGoNowMs, clock.go), which a
// simulation sets so that the ledger's clock follows its virtual time.
// Every release binary leaves it off.
extern long long walbufGoNowMs(void);
static int goClock;

void walbuf_follow_go_clock(int on) { __atomic_store_n(&goClock, on, __ATOMIC_RELAXED); }

// Milliseconds from the Julian day's origin to the Unix epoch.
#define JULIAN_EPOCH_MS 210866760000000LL

static int walbufCurrentTimeInt64(sqlite3_vfs *vfs, sqlite3_int64 *now) {
	(void)vfs;
	if (__atomic_load_n(&goClock, __ATOMIC_RELAXED)) {
		*now = (sqlite3_int64)walbufGoNowMs() + JULIAN_EPOCH_MS;
		return SQLITE_OK;
	}
	return defaultVFS->xCurrentTimeInt64(defaultVFS, now);
}

static int walbufCurrentTime(sqlite3_vfs *vfs, double *now) {
	(void)vfs;
	if (__atomic_load_n(&goClock, __ATOMIC_RELAXED)) {
		*now = (double)((sqlite3_int64)walbufGoNowMs() + JULIAN_EPOCH_MS) / 86400000.0;
		return SQLITE_OK;
	}
	return defaultVFS->xCurrentTime(defaultVFS, now);
}

int walbuf_register(void) {
	if (defaultVFS != NULL) return SQLITE_OK;
	if (sqlite3_vfs_find == NULL || sqlite3_vfs_register == NULL) return SQLITE_ERROR;
	sqlite3_vfs *d = sqlite3_vfs_find(NULL);
	if (d == NULL) return SQLITE_ERROR;
	walbufVFS = *d;
	walbufVFS.pNext = NULL;
	walbufVFS.zName = WALBUF_VFS;
	// Room for a walFile and, after it, the default VFS's own file.
	walbufVFS.szOsFile = (int)realOffset + d->szOsFile;
	walbufVFS.xOpen = walbufOpen;
	if (d->iVersion >= 2 && d->xCurrentTimeInt64 != NULL) walbufVFS.xCurrentTimeInt64 = walbufCurrentTimeInt64;
	walbufVFS.xCurrentTime = walbufCurrentTime;
	defaultVFS = d;
	return sqlite3_vfs_register(&walbufVFS, 0);
}

void walbuf_stats(long long *frames, long long *writes) {
	*frames = __atomic_load_n(&totalFrames, __ATOMIC_RELAXED);
	*writes = __atomic_load_n(&totalWrites, __ATOMIC_RELAXED);
}
