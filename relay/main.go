// Command relay is the dedup relay: it stands between channels and the core
// banking system and makes sure a transfer retransmitted with the same GUID
// is never applied twice (README.md, docs/cli.md). The relay, its flags
// and wiring live in package internal/relay.
package main

import (
	"os"

	"dedup/internal/relay"
)

func main() { os.Exit(relay.Main(os.Args[1:], relay.Hooks{})) }
