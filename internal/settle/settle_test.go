package settle_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/mattn/go-sqlite3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"

	"dedup/internal/settle"
	"dedup/internal/testbed/pgtest"
	"dedup/ledger"
	"dedup/ledger/postgres"
	"dedup/ledger/sqlite"
	"dedup/lhstd"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var ctx = context.Background()

// office is one ledger and the two people who decide on it, kim and lee,
// each with the Desk and the Person their own binary would have.
type office struct {
	desk   map[string]settle.Desk
	person map[string]settle.Person
	owner  ledger.Ledger // the relay's handle, for Get and Events
	// exec runs set-up SQL as the ledger's owner (?, NOW and AGO(n) as
	// in the conformance suite: here only ? and literal SQL).
	exec func(t *testing.T, q string, args ...any)
}

// sudoPerson is a person as FromSudo returns them.
func sudoPerson(name string, uid int) settle.Person {
	return settle.Person{Auth: settle.AuthSudo, Name: name, UID: uid, Host: "h1"}
}

func sqliteOffice(t *testing.T) *office {
	path := filepath.Join(t.TempDir(), "l.db")
	l, err := sqlite.Open(path, ledger.Options{Actor: "relay@h1"})
	assert.NilError(t, err)
	t.Cleanup(func() { l.Close() })
	db, err := sql.Open("sqlite3", path)
	assert.NilError(t, err)
	t.Cleanup(func() { db.Close() })
	d := settle.DeskFor(l)
	return &office{
		desk:   map[string]settle.Desk{"kim": d, "lee": d},
		person: map[string]settle.Person{"kim": sudoPerson("kim", 1001), "lee": sudoPerson("lee", 1002)},
		owner:  l,
		exec: func(t *testing.T, q string, args ...any) {
			_, err := db.Exec(strings.ReplaceAll(q, "now() - interval '25 hours'", "datetime('now', '-25 hours')"), args...)
			assert.NilError(t, err)
		},
	}
}

var roleSeq atomic.Int64

// certPerson is a person as the console knows them: by certificate.
func certPerson(name, serial string) settle.Person {
	return settle.Person{Auth: settle.AuthCertificate, Name: name, Serial: serial, Host: "h1"}
}

// postgresOffice is a PostgreSQL ledger; asRoles: kim and lee connect as
// roles of their own (members of dedup_operator), else as the owner
// through sudo.
func postgresOffice(t *testing.T, asRoles bool) *office {
	url := pgtest.SharedDatabase(t)
	l, err := postgres.Open(url, ledger.Options{Actor: "relay@h1"})
	assert.NilError(t, err)
	t.Cleanup(func() { l.Close() })
	exec := func(t *testing.T, q string, args ...any) { pgtest.Exec(t, url, pgtest.Rebind(q), args...) }
	o := &office{owner: l, exec: exec, desk: map[string]settle.Desk{}, person: map[string]settle.Person{}}
	if !asRoles {
		d := settle.DeskFor(l)
		o.desk["kim"], o.desk["lee"] = d, d
		o.person["kim"], o.person["lee"] = sudoPerson("kim", 1001), sudoPerson("lee", 1002)
		return o
	}
	n := roleSeq.Add(1)
	for _, who := range []string{"kim", "lee"} {
		role := fmt.Sprintf("%s_%d_%d", who, os.Getpid(), n)
		exec(t, "CREATE ROLE "+role+" LOGIN IN ROLE dedup_operator")
		t.Cleanup(func() { pgtest.Exec(t, url, "DROP OWNED BY "+role+"; DROP ROLE "+role) })
		ol, err := postgres.Open(strings.Replace(url, "postgres://postgres@", "postgres://"+role+"@", 1), ledger.Options{Actor: "settle@h1"})
		assert.NilError(t, err)
		t.Cleanup(func() { ol.Close() })
		o.desk[who] = settle.DeskFor(ol)
		// Without sudo: the database knows the person. Even a sudo
		// person claimed by an operator's session is ignored.
		o.person[who] = settle.Person{Host: "h1"}
		if who == "kim" {
			o.person[who] = sudoPerson("lee", 1002)
		}
	}
	return o
}

var offices = []struct {
	name string
	open func(t *testing.T) *office
}{
	{"sqlite", sqliteOffice},
	{"postgres-owner-through-sudo", func(t *testing.T) *office { return postgresOffice(t, false) }},
	{"postgres-operator-roles", func(t *testing.T) *office { return postgresOffice(t, true) }},
	{"postgres-owner-through-the-console", func(t *testing.T) *office {
		o := postgresOffice(t, false)
		o.person["kim"], o.person["lee"] = certPerson("kim", "1F"), certPerson("lee", "2E")
		return o
	}},
	{"sqlite-through-the-console", func(t *testing.T) *office {
		o := sqliteOffice(t)
		o.person["kim"], o.person["lee"] = certPerson("kim", "1F"), certPerson("lee", "2E")
		return o
	}},
}

var guidSeq atomic.Int64

func newGUID() string { return fmt.Sprintf("20261202MOB%021d", guidSeq.Add(1)) }

func request(t *testing.T, guid string) []byte {
	t.Helper()
	req, err := lhstd.NewTransferRequest(guid, "MOB", "20261202093000", lhstd.Transfer{From: "11020030004001", To: "11020030004002", Amount: 150000, Memo: "rent"})
	assert.NilError(t, err)
	return req
}

func (o *office) insert(t *testing.T, guid, state, code string, req []byte, attempts int) {
	t.Helper()
	var rsp any
	if code != "" {
		rsp = code
	}
	o.exec(t, "INSERT INTO tx(guid, tx_code, state, rsp_code, request, response, attempts) VALUES(?, 'TRF00001', ?, ?, ?, NULL, ?)",
		guid, state, rsp, req, attempts)
}

func (o *office) row(t *testing.T, guid string) *ledger.Row {
	t.Helper()
	r, err := o.owner.Get(ctx, guid)
	assert.NilError(t, err)
	assert.Assert(t, r != nil)
	return r
}

func (o *office) actions(t *testing.T, guid string) []string {
	t.Helper()
	evs, err := o.owner.Events(ctx, guid)
	assert.NilError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Action+" by "+e.Actor)
	}
	return out
}

// The decision cases, on each Desk: the same person cannot approve or
// reject their own proposal, whatever name they give; another person's
// approval changes the row as settle.md's table says, with both events
// naming their authenticated persons.
func TestFourEyesOnEveryDesk(t *testing.T) {
	for _, of := range offices {
		t.Run(of.name, func(t *testing.T) {
			o := of.open(t)
			kim, lee := o.person["kim"], o.person["lee"]
			wantKim, wantLee := "settle:kim(sudo uid 1001)@h1", "settle:lee(sudo uid 1002)@h1"
			switch {
			case strings.HasSuffix(of.name, "roles"):
				wantKim, wantLee = "settle:pg:kim_", "settle:pg:lee_"
			case strings.HasSuffix(of.name, "console"):
				wantKim, wantLee = "console:kim(cert 1F)@h1", "console:lee(cert 2E)@h1"
			}
			gN, gA, gX := newGUID(), newGUID(), newGUID()
			reqA, reqX := request(t, gA), request(t, gX)
			o.insert(t, gN, "UNKNOWN", "E901", request(t, gN), 1)
			o.insert(t, gA, "UNKNOWN", "E901", reqA, 1)
			o.insert(t, gX, "FAILED", "E902", reqX, 3)

			id, err := o.desk["kim"].Propose(ctx, settle.Proposal{GUID: gN, As: settle.NotApplied, Reason: "INC-1"}, kim)
			assert.NilError(t, err)
			_, err = o.desk["kim"].Approve(ctx, id, kim, "me again")
			assert.Check(t, errors.Is(err, settle.ErrRefused), "kim approved her own proposal: %v", err)
			assert.Check(t, is.ErrorContains(err, "another person"))
			err = o.desk["kim"].Reject(ctx, id, kim, "me again")
			assert.Check(t, errors.Is(err, settle.ErrRefused), "kim rejected her own proposal: %v", err)
			assert.Check(t, is.Equal(string(o.row(t, gN).State), "UNKNOWN"))
			a, err := o.desk["lee"].Approve(ctx, id, lee, "checked with the core team")
			assert.NilError(t, err)
			assert.Check(t, is.Equal(string(a.Row.State)+"/"+a.Row.RspCode, "FAILED/E902"))
			r := o.row(t, gN)
			assert.Check(t, is.Equal(string(r.State)+"/"+r.RspCode, "FAILED/E902"))
			acts := o.actions(t, gN)
			assert.Assert(t, is.Len(acts, 2))
			assert.Check(t, strings.HasPrefix(acts[0], "propose by "+wantKim), acts[0])
			assert.Check(t, strings.HasPrefix(acts[1], "approve by "+wantLee), acts[1])
			_, err = o.desk["lee"].Approve(ctx, id, lee, "")
			assert.Check(t, is.ErrorContains(err, "already decided"))

			bal := int64(99850000)
			id, err = o.desk["kim"].Propose(ctx, settle.Proposal{GUID: gA, As: settle.Applied, Reason: "INC-2",
				CoreRef: "C000000000000042", Balance: &bal, ProcessedAt: "20261129093001"}, kim)
			assert.NilError(t, err)
			_, err = o.desk["lee"].Approve(ctx, id, lee, "")
			assert.NilError(t, err)
			body, err := lhstd.TransferResponseBody("C000000000000042", bal, "20261129093001")
			assert.NilError(t, err)
			r = o.row(t, gA)
			assert.Check(t, is.Equal(string(r.State)+"/"+r.RspCode, "DONE/0000"))
			assert.Check(t, is.Equal(string(r.Response), string(lhstd.Reply(reqA, "0000", body))), "the approved reply is not Reply(request, 0000, body) byte for byte")

			id, err = o.desk["lee"].Propose(ctx, settle.Proposal{GUID: gX, As: settle.Abandoned, Reason: "customer cancelled"}, lee)
			assert.NilError(t, err)
			_, err = o.desk["lee"].Approve(ctx, id, lee, "")
			assert.Check(t, errors.Is(err, settle.ErrRefused), "lee approved her own proposal: %v", err)
			_, err = o.desk["kim"].Approve(ctx, id, kim, "")
			assert.NilError(t, err)
			r = o.row(t, gX)
			assert.Check(t, is.Equal(string(r.State)+"/"+r.RspCode, "DONE/E905"))
			assert.Check(t, is.Equal(string(r.Response), string(lhstd.Reply(reqX, "E905", nil))))
		})
	}
}

// The fence, the expiry, a rejection, the refusals of rows in flight or
// final and of bad input, and a proposal that names no authenticated
// person (recorded by an older settle): on each Desk, nothing changes.
func TestDecisionsAreFencedAndRefusedOnEveryDesk(t *testing.T) {
	for _, of := range offices {
		t.Run(of.name, func(t *testing.T) {
			o := of.open(t)
			kim, lee := o.person["kim"], o.person["lee"]
			gF, gOld, gR, gLegacy := newGUID(), newGUID(), newGUID(), newGUID()
			o.insert(t, gF, "UNKNOWN", "E901", request(t, gF), 1)
			o.insert(t, gOld, "UNKNOWN", "E901", request(t, gOld), 1)
			o.insert(t, gR, "UNKNOWN", "E901", request(t, gR), 1)
			o.insert(t, gLegacy, "UNKNOWN", "E901", request(t, gLegacy), 1)

			id, err := o.desk["kim"].Propose(ctx, settle.Proposal{GUID: gF, As: settle.NotApplied, Reason: "INC-3"}, kim)
			assert.NilError(t, err)
			o.exec(t, "UPDATE tx SET state='SENT', attempts=2 WHERE guid=?", gF) // a reclaim meanwhile
			_, err = o.desk["lee"].Approve(ctx, id, lee, "")
			assert.Check(t, is.ErrorContains(err, "changed since proposal"))
			assert.Check(t, is.Equal(string(o.row(t, gF).State), "SENT"))

			id, err = o.desk["kim"].Propose(ctx, settle.Proposal{GUID: gOld, As: settle.NotApplied, Reason: "INC-4"}, kim)
			assert.NilError(t, err)
			o.exec(t, "UPDATE tx_event SET at = now() - interval '25 hours' WHERE guid=?", gOld)
			_, err = o.desk["lee"].Approve(ctx, id, lee, "")
			assert.Check(t, is.ErrorContains(err, "expired"))
			assert.Check(t, is.Equal(string(o.row(t, gOld).State), "UNKNOWN"))
			acts := o.actions(t, gOld)
			assert.Check(t, is.Len(acts, 2))
			assert.Check(t, strings.HasPrefix(acts[len(acts)-1], "expire by "), "%v", acts)

			id, err = o.desk["kim"].Propose(ctx, settle.Proposal{GUID: gR, As: settle.NotApplied, Reason: "INC-5"}, kim)
			assert.NilError(t, err)
			assert.Check(t, errors.Is(o.desk["lee"].Reject(ctx, id, lee, ""), settle.ErrUsage))
			assert.NilError(t, o.desk["lee"].Reject(ctx, id, lee, "not confirmed"))
			_, err = o.desk["lee"].Approve(ctx, id, lee, "")
			assert.Check(t, is.ErrorContains(err, "already decided"))
			assert.Check(t, is.Equal(string(o.row(t, gR).State), "UNKNOWN"))

			for _, st := range []string{"SENT", "RECEIVED", "DONE"} {
				g := newGUID()
				o.insert(t, g, st, "", request(t, g), 1)
				_, err := o.desk["kim"].Propose(ctx, settle.Proposal{GUID: g, As: settle.NotApplied, Reason: "x"}, kim)
				assert.Check(t, errors.Is(err, settle.ErrRefused), "%s: %v", st, err)
				assert.Check(t, is.Len(o.actions(t, g), 0))
			}
			_, err = o.desk["kim"].Propose(ctx, settle.Proposal{GUID: gR, As: settle.NotApplied}, kim)
			assert.Check(t, errors.Is(err, settle.ErrUsage), "%v", err)

			o.exec(t, `INSERT INTO tx_event(guid, actor, action, from_state, attempts, detail) VALUES(?, 'settle:kim(kim)@h1', 'propose', 'UNKNOWN', 1, ?)`,
				gLegacy, `{"as":"not-applied","reason":"old","operator":"kim","os_user":"kim","row_updated_at":"x"}`)
			evs, err := o.owner.Events(ctx, gLegacy)
			assert.NilError(t, err)
			_, err = o.desk["lee"].Approve(ctx, evs[0].ID, lee, "")
			assert.Check(t, is.ErrorContains(err, "names no authenticated person"))
			assert.Check(t, is.Equal(string(o.row(t, gLegacy).State), "UNKNOWN"))
		})
	}
}

// An operator's role reads and calls the functions, nothing else: it
// cannot change a row, forge an event or delete one; the owner's session
// decides nothing without the person sudo authenticated; a role outside
// dedup_operator cannot even propose.
func TestOperatorRoleCanOnlyCallTheFunctions(t *testing.T) {
	url := pgtest.SharedDatabase(t)
	l, err := postgres.Open(url, ledger.Options{Actor: "relay@h1"})
	assert.NilError(t, err)
	defer l.Close()
	g := newGUID()
	pgtest.Exec(t, url, "INSERT INTO tx(guid, state, rsp_code, request, attempts) VALUES($1, 'UNKNOWN', 'E901', $2, 1)", g, request(t, g))
	n := roleSeq.Add(1)
	kim := fmt.Sprintf("kim_%d_%d", os.Getpid(), n)
	eve := fmt.Sprintf("eve_%d_%d", os.Getpid(), n)
	pgtest.Exec(t, url, "CREATE ROLE "+kim+" LOGIN IN ROLE dedup_operator; CREATE ROLE "+eve+" LOGIN")
	t.Cleanup(func() {
		pgtest.Exec(t, url, "DROP OWNED BY "+kim+"; DROP ROLE "+kim+"; DROP OWNED BY "+eve+"; DROP ROLE "+eve)
	})
	c, err := pgx.Connect(ctx, strings.Replace(url, "postgres://postgres@", "postgres://"+kim+"@", 1))
	assert.NilError(t, err)
	defer c.Close(ctx)
	for _, q := range []string{
		"UPDATE tx SET state='FAILED', rsp_code='E902' WHERE guid='" + g + "'",
		"INSERT INTO tx_event(guid, actor, action, detail) VALUES('" + g + "', 'settle:pg:lee@h1', 'propose', '{}')",
		"DELETE FROM tx WHERE guid='" + g + "'",
		"DELETE FROM tx_event",
		`SELECT public.dedup_settle_person('h1', '{"auth":"sudo","name":"lee","uid":1002}')`,
		"CREATE TABLE public.shadow(x int)",
	} {
		_, err := c.Exec(ctx, q)
		var pe *pgconn.PgError
		assert.Check(t, errors.As(err, &pe) && pe.Code == "42501", "%s: want permission denied, got %v", q, err)
	}
	var n2 int
	assert.NilError(t, c.QueryRow(ctx, "SELECT count(*) FROM tx").Scan(&n2))
	assert.Check(t, is.Equal(n2, 1))

	// The owner without a sudo person decides nothing.
	_, err = settle.DeskFor(l).Propose(ctx, settle.Proposal{GUID: g, As: settle.NotApplied, Reason: "x"}, settle.Person{Host: "h1"})
	assert.Check(t, errors.Is(err, settle.ErrRefused), "%v", err)
	assert.Check(t, is.ErrorContains(err, "decides nothing by itself"))

	le, err := postgres.Open(strings.Replace(url, "postgres://postgres@", "postgres://"+eve+"@", 1), ledger.Options{})
	assert.NilError(t, err) // the schema is checked, not applied: a read-only open works
	defer le.Close()
	_, err = settle.DeskFor(le).Propose(ctx, settle.Proposal{GUID: g, As: settle.NotApplied, Reason: "x"}, settle.Person{Host: "h1"})
	assert.Check(t, errors.Is(err, settle.ErrRefused), "%v", err)
	assert.Check(t, is.ErrorContains(err, "dedup_operator"))
	evs, err := l.Events(ctx, g)
	assert.NilError(t, err)
	assert.Check(t, is.Len(evs, 0))
}

// Every event a traced decision writes (the proposal, the approval, the
// rejection, the expiry) names its trace in its detail, on each Desk, so
// that a GUID's events, settle's log line and the trace find each other;
// an untraced decision names none.
func TestDecisionEventsNameTheirTrace(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { tp.Shutdown(ctx) })
	traced := func() (context.Context, string) {
		c, span := tp.Tracer("test").Start(ctx, "settle.decision")
		t.Cleanup(func() { span.End() })
		return c, span.SpanContext().TraceID().String()
	}
	for _, of := range offices {
		t.Run(of.name, func(t *testing.T) {
			o := of.open(t)
			kim, lee := o.person["kim"], o.person["lee"]
			details := func(guid string) map[string]string {
				evs, err := o.owner.Events(ctx, guid)
				assert.NilError(t, err)
				out := map[string]string{}
				for _, e := range evs {
					out[e.Action] = e.Detail
				}
				return out
			}
			names := func(detail, trace string) bool {
				var d struct {
					TraceID string `json:"trace_id"`
				}
				return json.Unmarshal([]byte(detail), &d) == nil && d.TraceID == trace
			}

			gA, gR, gE, gU := newGUID(), newGUID(), newGUID(), newGUID()
			for _, g := range []string{gA, gR, gE, gU} {
				o.insert(t, g, "UNKNOWN", "E901", request(t, g), 1)
			}
			cP, tP := traced()
			id, err := o.desk["kim"].Propose(cP, settle.Proposal{GUID: gA, As: settle.NotApplied, Reason: "INC-1"}, kim)
			assert.NilError(t, err)
			cA, tA := traced()
			_, err = o.desk["lee"].Approve(cA, id, lee, "checked")
			assert.NilError(t, err)
			d := details(gA)
			assert.Check(t, names(d["propose"], tP), "the proposal does not name its trace %s: %s", tP, d["propose"])
			assert.Check(t, names(d["approve"], tA), "the approval does not name its trace %s: %s", tA, d["approve"])
			assert.Check(t, strings.HasPrefix(d["approve"], fmt.Sprintf(`{"proposal":%d,`, id)), "the decision lost its proposal prefix: %s", d["approve"])

			id, err = o.desk["kim"].Propose(ctx, settle.Proposal{GUID: gR, As: settle.NotApplied, Reason: "INC-2"}, kim)
			assert.NilError(t, err)
			cR, tR := traced()
			assert.NilError(t, o.desk["lee"].Reject(cR, id, lee, "not proven"))
			d = details(gR)
			assert.Check(t, !strings.Contains(d["propose"], "trace_id"), "an untraced proposal names a trace: %s", d["propose"])
			assert.Check(t, names(d["reject"], tR), "the rejection does not name its trace %s: %s", tR, d["reject"])

			id, err = o.desk["kim"].Propose(ctx, settle.Proposal{GUID: gE, As: settle.NotApplied, Reason: "INC-3"}, kim)
			assert.NilError(t, err)
			o.exec(t, "UPDATE tx_event SET at = now() - interval '25 hours' WHERE guid=?", gE)
			cE, tE := traced()
			_, err = o.desk["lee"].Approve(cE, id, lee, "late")
			assert.Check(t, errors.Is(err, settle.ErrRefused))
			assert.Check(t, names(details(gE)["expire"], tE), "the expiry does not name its trace %s: %v", tE, details(gE))

			// After traced decisions on the same handle, an untraced one
			// names no trace (nothing carried over on a pooled session).
			id, err = o.desk["kim"].Propose(ctx, settle.Proposal{GUID: gU, As: settle.NotApplied, Reason: "INC-4"}, kim)
			assert.NilError(t, err)
			_, err = o.desk["lee"].Approve(ctx, id, lee, "")
			assert.NilError(t, err)
			for action, detail := range details(gU) {
				assert.Check(t, !strings.Contains(detail, "trace_id"), "untraced %s names a trace: %s", action, detail)
			}
		})
	}
}

// PostgreSQL's settle functions take from dedup.trace_id only a trace id
// (32 hex digits): a caller cannot write anything else into an event.
func TestSettleFunctionsTakeOnlyATraceID(t *testing.T) {
	url := pgtest.SharedDatabase(t)
	l, err := postgres.Open(url, ledger.Options{Actor: "relay@h1"})
	assert.NilError(t, err)
	l.Close()
	c, err := pgx.Connect(ctx, url)
	assert.NilError(t, err)
	defer c.Close(ctx)
	for value, want := range map[string]string{
		"":                                   "{}",
		"0af7651916cd43dd8448eb211c80319c":   `{"trace_id": "0af7651916cd43dd8448eb211c80319c"}`,
		"0AF7651916CD43DD8448EB211C80319C":   "{}",
		"0af7651916cd43dd8448eb211c80319":    "{}",
		`0af7651916cd43dd8448eb211c80319c"x`: "{}",
		"0af7651916cd43dd8448eb211c80319c\n": "{}",
	} {
		var got string
		assert.NilError(t, c.QueryRow(ctx, "SELECT set_config('dedup.trace_id', $1, false), public.dedup_settle_trace()::text", value).Scan(new(string), &got))
		assert.Check(t, is.Equal(got, want), "dedup.trace_id=%q", value)
	}
}
