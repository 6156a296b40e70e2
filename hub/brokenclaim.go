//go:build brokenclaim

package hub

import "context"

// This file exists only to prove that the fault campaign can fail: built
// with -tags brokenclaim, the relay claims a GUID by "select, then insert if
// absent" (domain.md's first common mistake). Two concurrent first sends
// both see no row and both go to the core. Release builds never include it.

func init() {
	wrapStore = func(s Store) Store { return selectThenInsert{s} }
}

type selectThenInsert struct{ Store }

// Claim selects, then inserts if absent: the race this project exists to avoid.
func (b selectThenInsert) Claim(ctx context.Context, guid, txCode string, request []byte) (bool, error) {
	row, err := b.Get(ctx, guid)
	if err != nil || row != nil {
		return false, err
	}
	_, err = b.Store.Claim(ctx, guid, txCode, request) // its row count is ignored: the bug
	return err == nil, err
}
