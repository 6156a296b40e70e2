// Command noconfirmrelay is the relay without rule 13's confirmation on a
// shared ledger (docs/rules.md): what the confirmation costs is measured
// against it, in the same run, by scripts/bench.sh. It lives under
// testdata, so that go build ./... never builds it, and it is never
// released: without the confirmation a paused host can send a claim that
// the others already swept and resent.
package main

import (
	"os"

	"dedup/internal/relay"
)

func main() { os.Exit(relay.Main(os.Args[1:], relay.Hooks{NoConfirm: true})) }
