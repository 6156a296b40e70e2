// Command console is the operator's console: the in-doubt queue, a
// transfer's story and four-eyes decisions in a browser, over HTTPS, each
// person known by their operator certificate (internal/console).
package main

import (
	"os"

	"dedup/internal/cli"
	"dedup/internal/console"
)

func main() {
	var f console.Flags
	cli.Parse("console", "The operator's console: transfers in doubt, their story, and four-eyes decisions by certificate.", &f, os.Args[1:])
	os.Exit(console.Run(&f))
}
