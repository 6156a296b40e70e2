package sqlite

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup/ledger"
)

// copyFile copies src to dst, as the bytes are in the operating system now.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	assert.NilError(t, err)
	defer in.Close()
	out, err := os.Create(dst)
	assert.NilError(t, err)
	_, err = io.Copy(out, in)
	assert.NilError(t, err)
	assert.NilError(t, out.Close())
}

// TestCommittedFramesAreInTheFileWhenTheCommitReturns: the ledger's file
// and its WAL, copied as they are right after the last commit returned
// (what a kill -9 at that moment leaves; no -shm, so the copy recovers from
// the WAL alone), hold every committed row, byte for byte: walbufVFS holds
// nothing once a commit returned. Under synchronous NORMAL nothing is
// synced at a commit, so the copy sees only what the process had written.
// Small commits, commits of many writers at once, and one of a request
// spread over a hundred overflow pages.
func TestCommittedFramesAreInTheFileWhenTheCommitReturns(t *testing.T) {
	for _, synchronous := range []string{"normal", "full"} {
		t.Run(synchronous, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "ledger.db")
			l, err := Open(path, ledger.Options{Synchronous: synchronous})
			assert.NilError(t, err)
			defer l.Close()
			want := map[string][]byte{}
			var mu sync.Mutex
			claim := func(i int, request []byte) {
				guid := fmt.Sprintf("20261205WAL%021d", i)
				claimed, err := l.Claim(ctx, guid, "TRF00001", request)
				assert.Check(t, err)
				assert.Check(t, claimed)
				mu.Lock()
				want[guid] = request
				mu.Unlock()
			}
			frames0, writes0 := walBufferStats()
			for i := 0; i < 20; i++ { // one writer: a commit each
				claim(i, bytes.Repeat([]byte{byte('a' + i%26)}, 100+i*700))
			}
			var wg sync.WaitGroup
			for w := 0; w < 8; w++ { // eight writers: batches of several commits' writes
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; i < 25; i++ {
						claim(1000+w*100+i, bytes.Repeat([]byte{byte('A' + w)}, 300))
					}
				}(w)
			}
			wg.Wait()
			claim(2000, bytes.Repeat([]byte("0123456789"), 40000)) // 400 KB
			claim(2001, []byte("the last commit, one frame set"))
			frames, writes := walBufferStats()

			copied := t.TempDir()
			copyFile(t, path, filepath.Join(copied, "ledger.db"))
			copyFile(t, path+"-wal", filepath.Join(copied, "ledger.db-wal"))
			db := rawDB(t, filepath.Join(copied, "ledger.db"))
			var check string
			assert.NilError(t, db.QueryRow("PRAGMA integrity_check").Scan(&check))
			assert.Equal(t, check, "ok")
			var n int
			assert.NilError(t, db.QueryRow("SELECT count(*) FROM tx").Scan(&n))
			assert.Equal(t, n, len(want), "committed rows missing from the copy")
			for guid, request := range want {
				var got []byte
				assert.NilError(t, db.QueryRow("SELECT request FROM tx WHERE guid=?", guid).Scan(&got), guid)
				assert.Check(t, bytes.Equal(got, request), "%s: the copy's request differs (%d bytes, want %d)", guid, len(got), len(request))
			}

			// Each frame went out whole, in one write.
			assert.Check(t, frames-frames0 >= 222, "frames written whole: %d for 222 claims", frames-frames0)
			assert.Check(t, is.Equal(writes-writes0, frames-frames0), "frames %d in %d writes", frames-frames0, writes-writes0)
		})
	}
}
