package reconcile

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"

	"dedup"
	"dedup/ledger"
	"dedup/ledger/sqlite"
	"dedup/lhstd"
)

// BenchmarkRun reconciles a journal of b.N lines against a SQLite ledger
// of as many DONE/0000 rows, every one matched: the cost per line of the
// passes, without a relay beside it (scripts/bench.sh table 10 has that).
func BenchmarkRun(b *testing.B) {
	dir := b.TempDir()
	l, err := sqlite.Open(filepath.Join(dir, "relay.db"), ledger.Options{Actor: "reconcile@bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	path := filepath.Join(dir, "journal.csv")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "guid,ref,from,to,amount,balance,processed_at")
	for i := 0; i < b.N; i++ {
		g := fmt.Sprintf("20261129MOB%021d", i*7919)
		req, _ := lhstd.NewTransferRequest(g, "MOB", "20261129093000", lhstd.Transfer{From: "11020030004001", To: "11020030004002", Amount: 150000, Memo: "rent"})
		ref := fmt.Sprintf("C%015d", i+1)
		body, _ := lhstd.TransferResponseBody(ref, 99850000, "20261129093001")
		if _, err := l.Claim(ctx, g, lhstd.TxTransfer, req); err != nil {
			b.Fatal(err)
		}
		if _, err := l.Finish(ctx, g, 1, ledger.Outcome{State: dedup.StateDone, RspCode: dedup.CodeOK, Response: lhstd.Reply(req, dedup.CodeOK, body)}); err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(w, "%s,%s,11020030004001,11020030004002,150000,99850000,20261129093001\n", g, ref)
	}
	w.Flush()
	f.Close()
	b.ResetTimer()
	// DEDUP_RECONCILE_PROFILE=FILE: a CPU profile of the run alone (the
	// benchmark's -cpuprofile would mostly show the ledger being filled).
	if p := os.Getenv("DEDUP_RECONCILE_PROFILE"); p != "" {
		pf, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		pprof.StartCPUProfile(pf)
		defer func() { pprof.StopCPUProfile(); pf.Close() }()
	}
	sum, err := Run(ctx, l, Config{Date: "20261129", Source: FileSource{Path: path}, Out: io.Discard, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if sum.Counts[dedup.FindingMatched] != int64(b.N) {
		b.Fatalf("matched %d of %d", sum.Counts[dedup.FindingMatched], b.N)
	}
}
