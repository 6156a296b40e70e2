// Package cli holds what the binaries share on the command line: flag types
// that accept exactly the numbers cli.md allows, parsing with exit status 2
// on a usage error, the logger, and the version.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"dedup/ledger"
	"dedup/ledger/backend"
)

// Version is the binaries' version, set at build time with
// -ldflags "-X dedup/cli.Version=...".
var Version = "dev"

// Exit statuses (cli.md).
const (
	ExitOK      = 0
	ExitRuntime = 1
	ExitUsage   = 2
)

var (
	decimalRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
	wholeRE   = regexp.MustCompile(`^[0-9]+$`)
)

// Seconds is a flag of seconds: a plain decimal number (300, 2.5). Negative
// numbers, NaN, Inf, exponents and the empty string are usage errors.
type Seconds time.Duration

// Decode implements kong.MapperValue.
func (s *Seconds) Decode(ctx *kong.DecodeContext) error {
	var v string
	if err := ctx.Scan.PopValueInto("seconds", &v); err != nil {
		return err
	}
	if !decimalRE.MatchString(v) {
		return fmt.Errorf("%q is not a number of seconds (digits, optionally with a decimal point)", v)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f > 1e9 {
		return fmt.Errorf("%q is out of range", v)
	}
	*s = Seconds(time.Duration(f * float64(time.Second)))
	return nil
}

// D returns s as a time.Duration.
func (s Seconds) D() time.Duration { return time.Duration(s) }

// Whole is a flag holding a whole number: digits only.
type Whole int

// Decode implements kong.MapperValue.
func (w *Whole) Decode(ctx *kong.DecodeContext) error {
	var v string
	if err := ctx.Scan.PopValueInto("number", &v); err != nil {
		return err
	}
	if !wholeRE.MatchString(v) {
		return fmt.Errorf("%q is not a whole number", v)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n > 1_000_000_000 {
		return fmt.Errorf("%q is out of range", v)
	}
	*w = Whole(n)
	return nil
}

// Logging are the flags every binary has for its logs.
type Logging struct {
	LogFormat string           `name:"log-format" enum:"text,json" default:"text" help:"Log format on stderr: text or json."`
	Version   kong.VersionFlag `help:"Print the version and exit."`
}

// Logger returns the logger the flags ask for, writing to w.
func (l Logging) Logger(w io.Writer) *slog.Logger {
	if l.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// Parse parses args into flags. --help and --version print and exit 0; a
// usage error prints one line naming the problem on stderr and exits 2.
func Parse(name, description string, flags any, args []string) *kong.Context {
	parser, err := kong.New(flags,
		kong.Name(name),
		kong.Description(description),
		kong.Vars{"version": name + " " + Version},
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	)
	if err != nil {
		// A programming error in the flag struct.
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(ExitRuntime)
	}
	parser.Stderr = os.Stderr
	ctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: usage error: %v (see --help)\n", name, err)
		os.Exit(ExitUsage)
	}
	return ctx
}

// Fatal prints one line on stderr and exits 1 (a runtime error).
func Fatal(name string, err error) {
	fmt.Fprintf(os.Stderr, "%s: error: %v\n", name, err)
	os.Exit(ExitRuntime)
}

// CoreFlags are the flags of a binary that calls the core.
type CoreFlags struct {
	Core           string  `name:"core" default:"http://127.0.0.1:9201" help:"The core's base URL."`
	Timeout        Seconds `name:"timeout" default:"3" help:"Seconds for the whole exchange with the core once connected."`
	ConnectTimeout Seconds `name:"connect-timeout" default:"1" help:"Seconds to obtain a connection to the core."`
}

// Validate checks that the timeouts are greater than 0.
func (c CoreFlags) Validate() error {
	if c.Timeout <= 0 {
		return fmt.Errorf("--timeout must be greater than 0")
	}
	if c.ConnectTimeout <= 0 {
		return fmt.Errorf("--connect-timeout must be greater than 0")
	}
	return nil
}

// Summary is a batch job's result: its String is the job's last stdout line.
type Summary interface{ String() string }

// Job is one run of a batch job against an open ledger. ctx ends on SIGINT
// or SIGTERM; a job stops between rows and returns its summary so far.
type Job func(ctx context.Context, l ledger.Ledger, log *slog.Logger) (Summary, error)

// RunJob runs a batch job the way every batch binary does: it opens the
// ledger at db (applying the schema), runs job, logs its start and end,
// prints the summary as the last line on stdout, and returns the exit
// status: 0 if the job ran to its end, 1 (one line on stderr naming the path
// and the cause) if it could not.
func RunJob(name, db string, log *slog.Logger, startAttrs []any, job Job) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	l, err := backend.Open(db, ledger.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: error: %v\n", name, err)
		return ExitRuntime
	}
	log.Info(name+" started", append([]any{"db", db}, startAttrs...)...)
	sum, err := job(ctx, l, log)
	if cerr := l.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		err = fmt.Errorf("ledger %s: %w", db, err)
	}
	log.Info(name+" finished", "summary", sum.String())
	fmt.Fprintln(os.Stdout, sum.String())
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: error: %v\n", name, err)
		return ExitRuntime
	}
	return ExitOK
}
