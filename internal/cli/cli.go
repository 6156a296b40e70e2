// Package cli holds what the binaries share on the command line itself:
// flag types that accept exactly the numbers docs/cli.md allows, parsing
// with exit status 2 on a usage error, the exit codes, the logger, and the
// version. It imports no package of dedup; the flags that open the ledger
// are package connect's, the core's are coreapi.Flags, and how a batch job
// runs is package job's.
package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
)

// Version is the binaries' version, set at build time with
// -ldflags "-X dedup/internal/cli.Version=..."; otherwise the module version that
// go build embeds ("(devel)" for a build from a checkout).
var Version = ""

// VersionString describes the build: the version, the VCS revision and time
// that go build embeds from a git checkout (with "+dirty" for uncommitted
// changes), and the Go version.
func VersionString() string {
	v := Version
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if v == "" {
			v = "unknown"
		}
		return v
	}
	if v == "" {
		v = info.Main.Version
	}
	var rev, at, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	out := v
	if rev != "" {
		out += " revision " + rev + dirty
	}
	if at != "" {
		out += " (" + at + ")"
	}
	return out + " " + info.GoVersion
}

// missingValueRE matches kong's words for a flag given no value.
var missingValueRE = regexp.MustCompile(`^(--[\w-]+): expected \w+ value but got "[^"]*" \((<EOL>|long flag|short flag)\)`)

// usageMessage rewrites kong's error text where it would puzzle an operator.
func usageMessage(err error) string {
	msg := err.Error()
	if m := missingValueRE.FindStringSubmatch(msg); m != nil {
		return m[1] + " needs a value"
	}
	return msg
}

// Exit statuses (docs/cli.md).
const (
	ExitOK      = 0
	ExitRuntime = 1
	ExitUsage   = 2
	// ExitNeedsPerson: the run completed and its report is complete, and
	// a person must look at it (reconcile's critical findings).
	ExitNeedsPerson = 3
)

var (
	decimalRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)
	wholeRE   = regexp.MustCompile(`^[0-9]+$`)
)

// popNumber takes a flag's value. A negative number is taken too (kong
// would read "-1" as a short flag and suggest --days="-1"), so that both
// forms get the same refusal; a missing value says so.
func popNumber(ctx *kong.DecodeContext, what string) (string, error) {
	tok := ctx.Scan.Peek()
	if tok.IsEOL() {
		return "", fmt.Errorf("needs a value (%s)", what)
	}
	if v, ok := tok.Value.(string); ok && tok.Type == kong.UntypedToken && len(v) > 1 && v[0] == '-' &&
		(v[1] >= '0' && v[1] <= '9' || v[1] == '.') {
		ctx.Scan.Pop()
		return v, nil
	}
	var v string
	if err := ctx.Scan.PopValueInto(what, &v); err != nil {
		return "", err
	}
	return v, nil
}

// negative is the one refusal of a negative number, whichever form it came in.
func negative(v, what string) error {
	return fmt.Errorf("%s is negative: give %s (0 or more)", v, what)
}

// Seconds is a flag of seconds: a plain decimal number (300, 2.5). Negative
// numbers, NaN, Inf, exponents and the empty string are usage errors.
type Seconds time.Duration

// Decode implements kong.MapperValue.
func (s *Seconds) Decode(ctx *kong.DecodeContext) error {
	v, err := popNumber(ctx, "seconds")
	if err != nil {
		return err
	}
	if strings.HasPrefix(v, "-") {
		return negative(v, "a number of seconds")
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

// AtLeastOne reports a Whole below 1, naming its flag.
func (w Whole) AtLeastOne(flag string) error {
	if w < 1 {
		return fmt.Errorf("%s must be at least 1", flag)
	}
	return nil
}

// Decode implements kong.MapperValue.
func (w *Whole) Decode(ctx *kong.DecodeContext) error {
	v, err := popNumber(ctx, "number")
	if err != nil {
		return err
	}
	if strings.HasPrefix(v, "-") {
		return negative(v, "a whole number")
	}
	if !wholeRE.MatchString(v) {
		return fmt.Errorf("%q is not a whole number", v)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n > 1_000_000_000_000_000 {
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

// Listening prints a line that scripts wait for ("listening addr=HOST:PORT"):
// plain text, or with --log-format json a JSON object whose msg is exactly
// that text, so that the stream stays JSON and the text can still be found.
func Listening(w io.Writer, logFormat, line string) {
	if logFormat == "json" {
		b, _ := json.Marshal(map[string]string{"time": time.Now().Format(time.RFC3339Nano), "level": "INFO", "msg": line})
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	fmt.Fprintln(w, line)
}

// Parse parses args into flags. --help and --version print and exit 0; a
// usage error prints one line naming the problem on stderr and exits 2.
// --help ends its description with the exit statuses: the three every
// binary shares, then the binary's own (moreExits, e.g. "3 a GUID asked
// for has no row").
func Parse(name, description string, flags any, args []string, moreExits ...string) *kong.Context {
	exits := "Exit status: 0 done; 1 runtime error (one line on stderr); 2 usage error (one line naming the flag)"
	for _, e := range moreExits {
		exits += "; " + e
	}
	parser, err := kong.New(flags,
		kong.Name(name),
		kong.Description(description+"\n\n"+exits+"."),
		kong.Vars{"version": name + " " + VersionString()},
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
		fmt.Fprintf(os.Stderr, "%s: usage error: %s (see --help)\n", name, usageMessage(err))
		os.Exit(ExitUsage)
	}
	return ctx
}

// Fatal prints one line on stderr and exits 1 (a runtime error).
func Fatal(name string, err error) {
	fmt.Fprintf(os.Stderr, "%s: error: %v\n", name, err)
	os.Exit(ExitRuntime)
}

// CheckListen reports a listen address this host cannot listen on, naming
// its flag, so that every binary refuses a bad one as a usage error.
func CheckListen(flag, addr string) error {
	if _, err := net.ResolveTCPAddr("tcp", addr); err != nil {
		return fmt.Errorf("%s: %q is not a HOST:PORT this host can listen on: %v", flag, addr, err)
	}
	return nil
}

// CheckDate reports a business date flag's value that is not a date
// YYYYMMDD that exists (reconcile's and inspect's --date).
func CheckDate(flag, v string) error {
	if t, err := time.Parse("20060102", v); err != nil || len(v) != 8 || t.Format("20060102") != v {
		return fmt.Errorf("%s: %q is not a date YYYYMMDD that exists", flag, v)
	}
	return nil
}

// IsTerminal reports whether f is a terminal (progress lines go only there:
// under cron the logs stay one line per event).
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
