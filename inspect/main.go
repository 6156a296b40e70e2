// Command inspect tells a GUID's story without SQL: its ledger row decoded
// for a person (accounts masked, memo never shown), lists of rows by state
// and age, a summary per state, the events of a period, the
// reconciliations kept and the daily file check (docs/cli.md). It only
// reads, and never creates a ledger. Its flags and modes live in package
// internal/inspect.
package main

import (
	"os"

	"dedup/internal/inspect"
)

func main() { os.Exit(inspect.Main(os.Args[1:])) }
