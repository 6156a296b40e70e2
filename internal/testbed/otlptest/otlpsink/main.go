// Command otlpsink is an OTLP/HTTP trace endpoint for scripts/bench.sh: it
// prints "listening addr=HOST:PORT" on stderr, accepts (and decodes) every
// export, or with --hang accepts and never answers, and prints the spans it
// received when it is stopped. A benchmark tool: it ships in no package.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"dedup/internal/testbed/otlptest"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	hang := flag.Bool("hang", false, "accept every export and never answer it")
	discard := flag.Bool("discard", false, "count the exports' bytes, keep and decode nothing (a collector on another host: its cost is not the relay's)")
	flag.Parse()
	c, err := otlptest.StartWith(*listen, otlptest.Options{Discard: *discard})
	if err != nil {
		fmt.Fprintln(os.Stderr, "otlpsink:", err)
		os.Exit(1)
	}
	if *hang {
		c.Hang()
	}
	fmt.Fprintln(os.Stderr, "listening addr="+c.URL()[len("http://"):])
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	fmt.Printf("spans=%d requests=%d bytes=%d undecodable=%d\n", len(c.Spans()), c.Requests(), c.Bytes(), len(c.Undecodable()))
	c.Close()
}
