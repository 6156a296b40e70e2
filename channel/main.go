// Command channel is a channel simulator: it sends transfer telegrams to a
// relay the way mobile, internet banking and ATM channels do, retransmits
// them, and drives load. Its commands live in package internal/channel.
package main

import (
	"os"

	"dedup/internal/channel"
)

func main() { os.Exit(channel.Main(os.Args[1:])) }
