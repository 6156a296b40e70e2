package sqlite

/*
#include "walbuf.h"
*/
import "C"

import (
	"fmt"
	"sync"
)

// walbufVFS is the SQLite VFS every ledger connection opens its files
// with (walbuf.c): the default one, but with each WAL frame written in one
// call, its header with its page, where SQLite makes two. A transfer's two
// commits write about six frames at one connection: twelve pwrite(2)
// calls, a quarter of the relay's system calls per transfer. Nothing is
// held once SQLite's write of a frame returns, so what a crash or a power
// cut can lose is unchanged.
const walbufVFS = "dedup-walbuf"

var walbuf struct {
	once sync.Once
	err  error
}

// registerWALBuffer registers walbufVFS with SQLite, once per process.
func registerWALBuffer() error {
	walbuf.once.Do(func() {
		if rc := C.walbuf_register(); rc != 0 {
			walbuf.err = fmt.Errorf("register SQLite VFS %s: SQLite error %d", walbufVFS, int(rc))
		}
	})
	return walbuf.err
}

// walBufferStats reports how many WAL frames this process wrote whole
// through walbufVFS, and how many writes its held headers took.
func walBufferStats() (frames, writes int64) {
	var f, w C.longlong
	C.walbuf_stats(&f, &w)
	return int64(f), int64(w)
}
