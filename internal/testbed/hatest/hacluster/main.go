// Command hacluster runs a throwaway high-availability PostgreSQL (etcd and
// three Patroni nodes, internal/testbed/hatest) for the demo and the benchmark:
// it prints the ledger URL and one line per node, then runs until SIGINT
// or SIGTERM and removes everything. Not a production tool: it is never
// packaged.
//
//	go run ./internal/testbed/hatest/hacluster
//	url=postgres://postgres@127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/dedup?...
//	node name=node1 port=P1 api=http://127.0.0.1:A1 dir=/tmp/dedup-ha-.../node1
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"dedup/internal/testbed/hatest"
)

func main() {
	c, err := hatest.Start(hatest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "hacluster:", err)
		os.Exit(1)
	}
	defer c.Remove()
	fmt.Printf("url=%s\n", c.URL(c.DB))
	for _, n := range c.Nodes {
		fmt.Printf("node name=%s port=%d api=http://%s:%d dir=%s\n", n.Name, n.Port, n.Host, n.APIPort, n.Dir)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}
