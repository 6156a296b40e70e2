// Command settle records a person's decision about a ledger row that
// inquiry cannot resolve, with four eyes: one operator proposes, another
// approves (or rejects); each step is an event in the ledger, and the
// approval changes the row in one fenced write with its event
// (docs/settle.md). Its commands live in package internal/settle.
package main

import (
	"os"

	"dedup/internal/settle"
)

func main() { os.Exit(settle.Main(os.Args[1:])) }
