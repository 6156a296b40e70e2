package settle

// This file is the settle binary's commands: Main parses the command line
// (docs/settle.md), finds who decides before anything is opened, opens the
// ledger (never creating one) and carries out propose, list, approve or
// reject. settle/ calls Main.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"dedup/internal/cli"
	"dedup/internal/connect"
	"dedup/internal/metrics"
	"dedup/internal/tracing"
	"dedup/ledger"
	"dedup/ledger/backend"
)

type proposeCmd struct {
	GUID        string `arg:"" help:"The GUID to decide about."`
	As          string `name:"as" required:"" help:"applied, not-applied (UNKNOWN rows) or abandoned (FAILED/E902 rows)."`
	Reason      string `name:"reason" help:"Why, with the evidence (a ticket, the core team's answer). Required."`
	CoreRef     string `name:"core-ref" help:"--as applied: the core's reference of the transfer."`
	Balance     string `name:"balance" help:"--as applied: the balance after it, in won."`
	ProcessedAt string `name:"processed-at" help:"--as applied: when the core processed it, YYYYMMDDhhmmss."`
}

type listCmd struct{}

type approveCmd struct {
	ID     int64  `arg:"" help:"The proposal's id (settle list)."`
	Reason string `name:"reason" help:"Why you approve (optional)."`
}

type rejectCmd struct {
	ID     int64  `arg:"" help:"The proposal's id (settle list)."`
	Reason string `name:"reason" help:"Why you reject it. Required."`
}

type flags struct {
	connect.LedgerFlags
	MetricsTextfile string     `name:"metrics-textfile" placeholder:"PATH" help:"At exit, write node_exporter textfile metrics to PATH (atomically); its name must end in .prom."`
	Propose         proposeCmd `cmd:"" help:"Propose a decision about one GUID (changes nothing but the record)."`
	List            listCmd    `cmd:"" help:"List the open proposals."`
	Approve         approveCmd `cmd:"" help:"Approve another person's proposal: the row changes, fenced."`
	Reject          rejectCmd  `cmd:"" help:"Reject another person's proposal: the row stays."`
	cli.Logging
}

var balanceRE = regexp.MustCompile(`^[0-9]+$`)

// proposal is the propose command's flags as a Proposal.
func (p *proposeCmd) proposal() (Proposal, error) {
	out := Proposal{GUID: p.GUID, As: p.As, Reason: p.Reason, CoreRef: p.CoreRef, ProcessedAt: p.ProcessedAt}
	if p.Balance != "" {
		if !balanceRE.MatchString(p.Balance) {
			return out, fmt.Errorf("%w: --balance %q is not a whole number of won", ErrUsage, p.Balance)
		}
		b, err := strconv.ParseInt(p.Balance, 10, 64)
		if err != nil {
			return out, fmt.Errorf("%w: --balance %q: %v", ErrUsage, p.Balance, err)
		}
		out.Balance = &b
	}
	return out, out.Check()
}

// Main runs settle with args (without the program name) and returns its
// exit status.
func Main(args []string) int {
	f := flags{LedgerFlags: connect.LedgerFlags{Existing: true}} // settle never creates a ledger
	kctx := cli.Parse("settle", "Decide, with four eyes and on the record, what inquiry cannot resolve.", &f, args,
		"1 also when refused (the row changed, the proposal is decided or expired, the same person)")
	log := f.Logger(os.Stderr)
	f.WarnInsecure(log)
	start := time.Now()
	if f.MetricsTextfile != "" && !strings.HasSuffix(f.MetricsTextfile, ".prom") {
		// Run through sudo as the ledger's owner, settle must not be a way
		// to replace the owner's files (the ledger) with a textfile.
		fmt.Fprintf(os.Stderr, "settle: usage error: --metrics-textfile %s: the name must end in .prom\n", f.MetricsTextfile)
		return cli.ExitUsage
	}
	status, counts := run(kctx.Command(), &f, log)
	if f.MetricsTextfile != "" {
		if err := metrics.WriteJobTextfile(f.MetricsTextfile, "settle", start, time.Since(start), status == cli.ExitOK, counts, ""); err != nil {
			fmt.Fprintf(os.Stderr, "settle: error: metrics textfile: %v\n", err)
			if status == cli.ExitOK {
				status = cli.ExitRuntime
			}
		}
	}
	return status
}

// run carries out the command and returns the exit status and the counts
// for the textfile.
func run(verb string, f *flags, log *slog.Logger) (int, []metrics.JobCount) {
	// Usage first: nothing is opened for a proposal that cannot stand.
	var p Proposal
	if verb == "propose <guid>" {
		var err error
		if p, err = f.Propose.proposal(); err != nil {
			return fail(err), nil
		}
	}
	if verb == "reject <id>" && f.Reject.Reason == "" {
		return fail(fmt.Errorf("%w: --reason is required", ErrUsage)), nil
	}
	// Who decides, before anything is opened: on a SQLite ledger the
	// person sudo authenticated, or nothing is decided. settle never
	// creates a ledger (run through sudo, it must not make files as the
	// owner where an operator says).
	decides := verb != "list"
	postgres := backend.IsPostgresURL(f.DB)
	if !postgres {
		if err := f.CheckExists(); err != nil {
			return fail(err), nil
		}
	}
	var who Person
	if decides {
		var err error
		if who, err = WhoDecides("settle", f.DB, postgres); err != nil {
			return fail(err), refusedCount(verb)
		}
	}
	l, err := f.LedgerFlags.Open(f.LedgerFlags.Options(log.Warn, ledger.Actor("settle")), log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "settle: error: %v\n", err)
		return cli.ExitRuntime, nil
	}
	defer l.Close()
	// Traced as the OTEL_ variables ask; run through sudo (env_reset)
	// they are not passed unless the sudoers rule keeps them.
	tp, err := tracing.Start(context.Background(), "settle", cli.VersionString(), log)
	if err != nil {
		return fail(err), nil
	}
	defer tracing.Flush(log, tp)
	ctx, span := tracing.Root(context.Background(), tracing.SpanSettle, tracing.AttrOutcome.String(strings.Fields(verb)[0]))
	status, counts := decide(ctx, verb, f, l, p, who, log)
	if span.IsRecording() {
		span.SetAttributes(tracing.AttrCode.String(fmt.Sprint(status)))
	}
	span.End()
	return status, counts
}

// decide carries out verb on the open ledger l.
func decide(ctx context.Context, verb string, f *flags, l ledger.Ledger, p Proposal, who Person, log *slog.Logger) (int, []metrics.JobCount) {
	log = log.With(traced(ctx)...)
	desk := DeskFor(l)
	switch verb {
	case "propose <guid>":
		id, err := desk.Propose(ctx, p, who)
		if err != nil {
			return fail(err), nil
		}
		log.Info("settle: proposed", "id", id, "guid", p.GUID, "as", p.As, "by", by(who), "reason", p.Reason)
		fmt.Printf("settle: proposed id=%d guid=%s as=%s\n", id, p.GUID, p.As)
		return cli.ExitOK, []metrics.JobCount{{Outcome: "proposed", Rows: 1}}
	case "list":
		open, err := List(ctx, l)
		if err != nil {
			return fail(err), nil
		}
		if len(open) == 0 {
			fmt.Println("settle: no open proposals")
		}
		for _, o := range open {
			fmt.Printf("id=%d guid=%s as=%s by=%s age=%d reason=%q\n", o.ID, o.GUID, o.As, o.By, int64(o.Age.Seconds()), o.Reason)
		}
		return cli.ExitOK, []metrics.JobCount{{Outcome: "open", Rows: int64(len(open))}}
	case "approve <id>":
		a, err := desk.Approve(ctx, f.Approve.ID, who, f.Approve.Reason)
		if err != nil {
			return fail(err), []metrics.JobCount{{Outcome: "refused", Rows: 1}}
		}
		log.Info("settle: approved", "id", a.ID, "guid", a.GUID, "state", a.Row.State, "code", a.Row.RspCode, "by", by(who))
		fmt.Printf("settle: approved id=%d guid=%s state=%s code=%s\n", a.ID, a.GUID, a.Row.State, a.Row.RspCode)
		return cli.ExitOK, []metrics.JobCount{{Outcome: "approved", Rows: 1}}
	case "reject <id>":
		if err := desk.Reject(ctx, f.Reject.ID, who, f.Reject.Reason); err != nil {
			return fail(err), []metrics.JobCount{{Outcome: "refused", Rows: 1}}
		}
		log.Info("settle: rejected", "id", f.Reject.ID, "by", by(who), "reason", f.Reject.Reason)
		fmt.Printf("settle: rejected id=%d\n", f.Reject.ID)
		return cli.ExitOK, []metrics.JobCount{{Outcome: "rejected", Rows: 1}}
	}
	return fail(fmt.Errorf("%w: unknown verb %q", ErrUsage, verb)), nil
}

// traced is the trace id attribute of ctx's span for the log lines, if
// it is traced.
func traced(ctx context.Context) []any {
	if id := tracing.TraceID(ctx); id != "" {
		return []any{"trace_id", id}
	}
	return nil
}

// by names who in the log line: the authenticated actor, or, on
// PostgreSQL without sudo, the database's session role (its events say
// which).
func by(who Person) string {
	if who.Auth == "" {
		return "the database's session role"
	}
	return who.Actor()
}

// refusedCount is the textfile's count of a refused decision.
func refusedCount(command string) []metrics.JobCount {
	if command == "propose <guid>" {
		return nil
	}
	return []metrics.JobCount{{Outcome: "refused", Rows: 1}}
}

// fail prints err as one line and returns its exit status: 2 for what the
// operator gave, 1 for a refusal or a runtime error.
func fail(err error) int {
	switch {
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(os.Stderr, "settle: usage error: %s\n", strings.TrimPrefix(err.Error(), ErrUsage.Error()+": "))
		return cli.ExitUsage
	case errors.Is(err, ErrRefused):
		fmt.Fprintf(os.Stderr, "settle: refused: %s\n", strings.TrimPrefix(err.Error(), ErrRefused.Error()+": "))
		return cli.ExitRuntime
	}
	fmt.Fprintf(os.Stderr, "settle: error: %v\n", err)
	return cli.ExitRuntime
}
