// Command brokenrelay is the relay with a select-then-insert claim, the
// first common mistake of docs/rules.md: two concurrent first sends both see
// no row and both go to the core. It exists only to prove that the fault
// campaign's checks can fail (scripts/faults.sh --broken). It lives under
// testdata, so that go build ./... never builds it; the tests build it by
// its path.
package main

import (
	"context"
	"os"

	"dedup/internal/relay"
)

// selectThenInsert claims by reading, then inserting if absent.
type selectThenInsert struct{ relay.Store }

// Claim selects, then inserts if absent: the race this project exists to avoid.
func (b selectThenInsert) Claim(ctx context.Context, guid, txCode string, request []byte) (bool, error) {
	row, err := b.Get(ctx, guid)
	if err != nil || row != nil {
		return false, err
	}
	_, err = b.Store.Claim(ctx, guid, txCode, request) // its row count is ignored: the bug
	return err == nil, err
}

func main() {
	os.Exit(relay.Main(os.Args[1:], relay.Hooks{WrapStore: func(s relay.Store) relay.Store { return selectThenInsert{s} }}))
}
