package channel

// This file is the channel binary's commands: Main parses the command line
// (docs/cli.md), then sends one transfer (send) or drives a load (load)
// and checks the core's /_stats for a GUID applied twice. channel/ calls
// Main.

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"dedup"
	"dedup/internal/certs"
	"dedup/internal/cli"
	"dedup/lhstd"
)

// ExitNotOK is the exit status when a reply was not 0000 (send) or a check
// failed (load).
const ExitNotOK = 3

type transferFlags struct {
	Relay   string      `name:"relay" default:"127.0.0.1:9101" help:"The relay's HOST:PORT."`
	Channel string      `name:"channel" default:"MOB" help:"Channel code, 3 characters of [0-9A-Z]."`
	From    string      `name:"from" default:"11020030004001" help:"Debit account, 14 digits."`
	To      string      `name:"to" default:"11020030004002" help:"Credit account, 14 digits."`
	Memo    string      `name:"memo" default:"" help:"Memo (CP949, at most 20 bytes). SLOW, FAIL500, DROP, APPLYDROP prefixes steer the fixture core."`
	Timeout cli.Seconds `name:"timeout" default:"10" help:"Seconds to wait for each reply."`
	TLS     bool        `name:"tls" help:"Speak TLS to the relay."`
	TLSCA   string      `name:"tls-ca" placeholder:"FILE" help:"With --tls: PEM bundle the relay's certificate must chain to (default: the system roots)."`
	TLSCert string      `name:"tls-cert" placeholder:"FILE" help:"With --tls: PEM client certificate (with --tls-key)."`
	TLSKey  string      `name:"tls-key" placeholder:"FILE" help:"With --tls: PEM key of --tls-cert."`
	TLSName string      `name:"tls-server-name" placeholder:"NAME" help:"With --tls: the name to verify in the relay's certificate (default: the host of --relay)."`
}

// Validate checks the TLS flags.
func (f *transferFlags) Validate() error {
	files := certs.Files{Cert: f.TLSCert, Key: f.TLSKey, CA: f.TLSCA}
	if err := files.Check("--tls-cert", "--tls-key"); err != nil {
		return err
	}
	if !f.TLS && (!files.Empty() || f.TLSName != "") {
		return fmt.Errorf("--tls-ca, --tls-cert, --tls-key and --tls-server-name need --tls")
	}
	return nil
}

// tlsConfig loads the TLS files (nil without --tls): errors name the file.
func (f *transferFlags) tlsConfig() (*tls.Config, error) {
	if !f.TLS {
		return nil, nil
	}
	set, err := certs.Load(certs.Files{Cert: f.TLSCert, Key: f.TLSKey, CA: f.TLSCA})
	if err != nil {
		return nil, err
	}
	cfg := set.ClientConfig()
	cfg.ServerName = f.TLSName
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(f.Relay)
		if err != nil {
			return nil, fmt.Errorf("--relay %q: %w", f.Relay, err)
		}
		cfg.ServerName = host
	}
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(1024) // resumption, as a real gateway would
	return cfg, nil
}

type sendCmd struct {
	transferFlags
	Amount     cli.Whole `name:"amount" default:"150000" help:"Amount in won."`
	GUID       string    `name:"guid" help:"GUID (32 of [0-9A-Za-z]); generated when omitted."`
	SentAt     string    `name:"sent-at" help:"sent_at, YYYYMMDDhhmmss; now when omitted."`
	Repeat     cli.Whole `name:"repeat" default:"1" help:"Send the same telegram this many times."`
	Concurrent bool      `name:"concurrent" help:"Send the repeats all at once, each on its own connection."`
	Raw        bool      `name:"raw" help:"Also print the frames as sent and received."`
}

type loadCmd struct {
	transferFlags
	Amount   cli.Whole   `name:"amount" default:"1" help:"Amount in won of each transfer; load alternates the direction between --from and --to, so the balances never run dry."`
	Conns    cli.Whole   `name:"conns" default:"16" help:"Concurrent connections."`
	Duration cli.Seconds `name:"duration" default:"10" help:"Seconds to run (unless --count)."`
	Count    cli.Whole   `name:"count" default:"0" help:"Send this many telegrams, then stop (0: use --duration)."`
	DupRatio float64     `name:"dup-ratio" default:"0" help:"Fraction (0..1) of sends that retransmit a recent GUID of another connection."`
	Rate     float64     `name:"rate" default:"0" help:"Open loop: send this many telegrams a second whatever the answers do, each latency counted from when it was due; more connections are opened when all wait (0: closed loop, as fast as --conns connections are answered)."`
	Core     string      `name:"core" help:"The fixture core's URL: check /_stats for GUIDs applied more than once (https: with the --tls-* files)."`
}

type flags struct {
	Send sendCmd `cmd:"" help:"Send one transfer (optionally repeated) and print the reply."`
	Load loadCmd `cmd:"" help:"Drive load (closed loop, or open loop with --rate) and report throughput, latency, replies and double applications."`
	cli.Logging
}

// Validate checks the load flags that kong cannot.
func (l *loadCmd) Validate() error {
	if l.DupRatio < 0 || l.DupRatio > 1 || l.DupRatio != l.DupRatio {
		return fmt.Errorf("--dup-ratio must be between 0 and 1")
	}
	if l.Conns < 1 {
		return fmt.Errorf("--conns must be at least 1")
	}
	if l.Rate < 0 || l.Rate != l.Rate {
		return fmt.Errorf("--rate must be 0 or more")
	}
	return nil
}

// Validate checks the send flags that kong cannot.
func (s *sendCmd) Validate() error {
	if s.GUID != "" && !lhstd.IsGUID(s.GUID) {
		return fmt.Errorf("--guid must be 32 characters of [0-9A-Za-z]")
	}
	if s.Repeat < 1 {
		return fmt.Errorf("--repeat must be at least 1")
	}
	return nil
}

// Main runs the channel simulator with args (without the program name) and
// returns its exit status.
func Main(args []string) int {
	var f flags
	kctx := cli.Parse("channel", "Channel simulator for the dedup relay.", &f, args,
		"3 send: the reply was not 0000; load: a GUID was applied twice")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch kctx.Command() {
	case "send":
		return send(&f.Send)
	case "load":
		return load(ctx, &f.Load)
	}
	return cli.ExitUsage
}

func send(c *sendCmd) int {
	tcfg, err := c.tlsConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "channel: error: %v\n", err)
		return cli.ExitRuntime
	}
	guid := c.GUID
	if guid == "" {
		guid = NewGUID(c.Channel)
	}
	sentAt := c.SentAt
	if sentAt == "" {
		sentAt = Now()
	}
	t, err := lhstd.NewTransferRequest(guid, c.Channel, sentAt, lhstd.Transfer{From: c.From, To: c.To, Amount: int64(c.Amount), Memo: c.Memo})
	if err != nil {
		fmt.Fprintf(os.Stderr, "channel: usage error: %v\n", err)
		return cli.ExitUsage
	}
	fmt.Printf("guid=%s from=%s to=%s amount=%d\n", guid, lhstd.MaskAccount(c.From), lhstd.MaskAccount(c.To), int64(c.Amount))
	if c.Raw {
		fmt.Printf("> %s\n", lhstd.AppendFrame(nil, t))
	}
	n := int(c.Repeat)
	type result struct {
		reply []byte
		err   error
		took  time.Duration
	}
	results := make([]result, n)
	one := func(i int) {
		start := time.Now()
		conn, err := DialTLS(c.Relay, c.Timeout.D(), tcfg)
		if err != nil {
			results[i] = result{err: err}
			return
		}
		defer conn.Close()
		r, err := conn.RoundTrip(t)
		results[i] = result{reply: r, err: err, took: time.Since(start)}
	}
	if c.Concurrent {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); one(i) }()
		}
		wg.Wait()
	} else {
		for i := range n {
			one(i)
		}
	}
	status := cli.ExitOK
	for i, r := range results {
		if r.err != nil {
			fmt.Printf("reply %d/%d: no reply: %v\n", i+1, n, r.err)
			status = cli.ExitRuntime
			continue
		}
		fmt.Printf("reply %d/%d: %s\n", i+1, n, describe(r.reply, sentAt, r.took))
		if c.Raw {
			fmt.Printf("< %s\n", lhstd.AppendFrame(nil, r.reply))
		}
		if lhstd.ReplyCode(r.reply) != dedup.CodeOK && status == cli.ExitOK {
			status = ExitNotOK
		}
	}
	return status
}

// describe prints a reply for a person. A stored reply carries the first
// request's sent_at (a DONE row's retransmission is answered byte for
// byte), so a 0000 whose sent_at is not the one just sent came from the
// relay's ledger, not from a new call to the core; with the same sent_at
// the reply cannot tell the two apart and says only what the code means.
func describe(reply []byte, sentAt string, took time.Duration) string {
	code := lhstd.ReplyCode(reply)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s (%.1f ms)", code, dedup.CodeMeaning(code), float64(took.Microseconds())/1000)
	if len(reply) >= lhstd.HeaderLen && code == dedup.CodeOK && string(reply[48:62]) != sentAt {
		fmt.Fprintf(&b, " answered from the relay's ledger (a retransmission; the first request was sent at %s)", reply[48:62])
	}
	if code == dedup.CodeOK && len(reply) == lhstd.HeaderLen+lhstd.TransferResponseBodyLen {
		if tr, err := lhstd.ParseTransferResponseBody(reply[lhstd.HeaderLen:]); err == nil {
			fmt.Fprintf(&b, " ref=%s balance=%d processed_at=%s", tr.Ref, tr.Balance, tr.ProcessedAt)
		}
	}
	if len(reply) >= lhstd.HeaderLen {
		fmt.Fprintf(&b, " sent_at=%s", reply[48:62])
	}
	return b.String()
}

func load(ctx context.Context, c *loadCmd) int {
	var progress io.Writer
	if cli.IsTerminal(os.Stderr) {
		progress = os.Stderr
	}
	tcfg, err := c.tlsConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "channel: error: %v\n", err)
		return cli.ExitRuntime
	}
	rep, err := Load(ctx, LoadConfig{TLS: tcfg,
		Relay: c.Relay, Conns: int(c.Conns), Duration: c.Duration.D(), Count: int(c.Count), DupRatio: c.DupRatio, Rate: c.Rate,
		Timeout: c.Timeout.D(), Channel: c.Channel, From: c.From, To: c.To, Amount: int64(c.Amount), Memo: c.Memo, Progress: progress,
	})
	if rep != nil {
		fmt.Print(rep.String())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "channel: error: %v\n", err)
		return cli.ExitRuntime
	}
	if c.Core == "" {
		return cli.ExitOK
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	if strings.HasPrefix(c.Core, "https://") && tcfg != nil {
		// The fixture core over https: the same CA and client certificate.
		cc := tcfg.Clone()
		cc.ServerName = ""
		client.Transport = &http.Transport{Proxy: nil, TLSClientConfig: cc}
	}
	stats, err := FetchStatsVia(context.Background(), client, c.Core)
	if err != nil {
		fmt.Fprintf(os.Stderr, "channel: error: %v\n", err)
		return cli.ExitRuntime
	}
	cc := stats.Check(rep.GUIDs)
	fmt.Printf("core: guids=%d applied=%d applied_twice=%d received_twice=%d\n", cc.GUIDs, cc.Applied, cc.AppliedTwice, cc.ReceivedTwice)
	if cc.Applied == 0 {
		fmt.Fprintln(os.Stderr, "channel: warning: the core applied no transfer, so applied_twice=0 proves nothing (rejected amounts? drained accounts? the core down?)")
	}
	if cc.AppliedTwice > 0 {
		fmt.Fprintf(os.Stderr, "channel: DOUBLE DEBIT: %d GUIDs applied more than once, e.g. %s\n", cc.AppliedTwice, cc.Doubles[0])
		return ExitNotOK
	}
	return cli.ExitOK
}
