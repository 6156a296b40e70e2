// Command relay is the dedup relay: it stands between channels and the core
// banking system and makes sure a transfer retransmitted with the same GUID
// is never applied twice (README.md, docs/cli.md). Its flags and wiring
// live in package relayd.
package main

import (
	"os"

	"dedup/relayd"
)

func main() { os.Exit(relayd.Main(os.Args[1:], relayd.Hooks{})) }
