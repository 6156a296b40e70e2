// Command console is the operator's console: the in-doubt queue, a
// transfer's story and four-eyes decisions in a browser, over HTTPS, each
// person known by their operator certificate. It lives in package
// internal/console.
package main

import (
	"os"

	"dedup/internal/console"
)

func main() { os.Exit(console.Main(os.Args[1:])) }
