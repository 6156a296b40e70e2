package lazyfs

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"gotest.tools/v3/assert"
)

// A random mix of writes, truncations (shrinking and growing), syncs,
// reads and cuts through the mount agrees with a model of what a disk
// that loses unsynced writes holds: the file's content now, and its
// content as of the last sync.
func TestRandomOperationsAgreeWithTheModel(t *testing.T) {
	l := mount(t)
	rng := rand.New(rand.NewPCG(1, 2))
	p := filepath.Join(l.Dir, "f")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	assert.NilError(t, err)
	assert.NilError(t, f.Sync())
	var now, synced []byte
	for i := 0; i < 3000; i++ {
		switch op := rng.IntN(10); {
		case op < 5:
			off := rng.IntN(5 * pageSize)
			data := make([]byte, 1+rng.IntN(2*pageSize))
			for j := range data {
				data[j] = byte(rng.IntN(250) + 1)
			}
			_, err := f.WriteAt(data, int64(off))
			assert.NilError(t, err)
			if need := off + len(data); need > len(now) {
				now = append(now, make([]byte, need-len(now))...)
			}
			copy(now[off:], data)
		case op < 7:
			size := rng.IntN(6 * pageSize)
			assert.NilError(t, f.Truncate(int64(size)))
			if size < len(now) {
				now = now[:size]
			} else {
				now = append(now, make([]byte, size-len(now))...)
			}
		case op < 8:
			assert.NilError(t, f.Sync())
			synced = append([]byte(nil), now...)
		case op < 9:
			f.Close()
			l.Cut()
			now = append([]byte(nil), synced...)
			f, err = os.OpenFile(p, os.O_RDWR, 0)
			assert.NilError(t, err)
		default:
		}
		got, err := os.ReadFile(p)
		assert.NilError(t, err)
		if !bytes.Equal(got, now) {
			t.Fatalf("step %d: the file (%d bytes) differs from the model (%d bytes)", i, len(got), len(now))
		}
	}
	f.Close()
}
