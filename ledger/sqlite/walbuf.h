// walbuf.h: the "dedup-walbuf" VFS (walbuf.c, walbuf.go).
#ifndef DEDUP_WALBUF_H
#define DEDUP_WALBUF_H

#define WALBUF_VFS "dedup-walbuf"

// walbuf_register registers the VFS (not as the default), once; it
// returns an SQLite result code.
int walbuf_register(void);

// walbuf_stats reports how many WAL frames this process wrote whole, and
// how many writes its held headers took (frames, and lone headers).
void walbuf_stats(long long *frames, long long *writes);

// walbuf_follow_go_clock makes datetime('now') on every connection of the
// VFS read Go's clock (walbufGoNowMs) when on is not 0, the OS's when 0.
void walbuf_follow_go_clock(int on);

#endif
