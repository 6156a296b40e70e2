package sqlite

/*
#include "walbuf.h"
*/
import "C"

import "time"

// FollowGoClock makes the ledger's clock (datetime('now') in every
// statement, the clock of docs/ledger.md "Clocks") read Go's time.Now, on
// the goroutine that runs the statement, instead of the OS's. Inside a
// testing/synctest bubble that is the bubble's virtual clock: the
// simulation (internal/testbed/sim) turns it on so that ages, leases and
// --orphan-after pass in virtual time on the ledger as in the relay. Every
// release binary leaves it off; off, the ledger reads the OS's clock
// through SQLite's default VFS, as always.
func FollowGoClock(on bool) error {
	if err := registerWALBuffer(); err != nil {
		return err
	}
	v := C.int(0)
	if on {
		v = 1
	}
	C.walbuf_follow_go_clock(v)
	return nil
}

// walbufGoNowMs is the ledger's clock while FollowGoClock is on: Go's, in
// milliseconds since the Unix epoch.
//
//export walbufGoNowMs
func walbufGoNowMs() C.longlong { return C.longlong(time.Now().UnixMilli()) }
