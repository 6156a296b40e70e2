package relay

import (
	"testing"

	"gotest.tools/v3/assert"

	"dedup"
	"dedup/ledger"
	"dedup/lhstd"
)

// answerKnown is the state table of docs/rules.md with rule 14: every row
// state, with the ledger writable and not, with the same and another
// request. What a known GUID is told never depends on whether the ledger
// can be written, except that a FAILED/E902 row is reclaimed only when it
// can.
func TestAnswerKnownIsTheStateTable(t *testing.T) {
	req := request(t, 150000)
	parsed, err := lhstd.ParseRequest(req)
	assert.NilError(t, err)
	other := request(t, 7)
	stored := lhstd.Reply(req, dedup.CodeOK, okBody(t))
	const reclaim = "reclaim"
	for _, tc := range []struct {
		name     string
		row      ledger.Row
		writable string // reply code when the ledger can be written
		outage   string // reply code when it cannot
	}{
		{"SENT", ledger.Row{State: dedup.StateSent, Request: req}, "E903", "E903"},
		{"RECEIVED", ledger.Row{State: dedup.StateReceived, Request: req}, "E903", "E903"},
		{"UNKNOWN", ledger.Row{State: dedup.StateUnknown, RspCode: "E901", Request: req}, "E901", "E901"},
		{"DONE", ledger.Row{State: dedup.StateDone, RspCode: "0000", Request: req, Response: stored}, "0000", "0000"},
		{"DONE B201 without a stored reply", ledger.Row{State: dedup.StateDone, RspCode: "B201", Request: req}, "B201", "B201"},
		{"FAILED E902", ledger.Row{State: dedup.StateFailed, RspCode: "E902", Request: req}, reclaim, "E902"},
		{"FAILED with another code", ledger.Row{State: dedup.StateFailed, RspCode: "E999", Request: req}, "E902", "E902"},
		{"another request under SENT", ledger.Row{State: dedup.StateSent, Request: other}, "E904", "E904"},
		{"another request under UNKNOWN", ledger.Row{State: dedup.StateUnknown, RspCode: "E901", Request: other}, "E904", "E904"},
		{"another request under DONE", ledger.Row{State: dedup.StateDone, RspCode: "0000", Request: other, Response: stored}, "E904", "E904"},
		{"another request under FAILED", ledger.Row{State: dedup.StateFailed, RspCode: "E902", Request: other}, "E904", "E904"},
		{"NULL request compares as equal", ledger.Row{State: dedup.StateUnknown, RspCode: "E901"}, "E901", "E901"},
	} {
		for _, writable := range []bool{true, false} {
			want := tc.outage
			if writable {
				want = tc.writable
			}
			a := answerKnown(&tc.row, parsed, writable)
			if want == reclaim {
				assert.Check(t, a.reclaim && a.reply == nil, "%s writable=%v: want a reclaim, got %+v", tc.name, writable, a)
				continue
			}
			assert.Check(t, !a.reclaim, "%s writable=%v: reclaimed", tc.name, writable)
			assert.Check(t, lhstd.ReplyCode(a.reply) == want, "%s writable=%v: got %s, want %s", tc.name, writable, lhstd.ReplyCode(a.reply), want)
			if want == "0000" {
				assert.Check(t, string(a.reply) == string(stored), "%s: the stored reply was not answered byte for byte", tc.name)
			} else {
				assert.Check(t, string(a.reply) == string(lhstd.Reply(req, want, nil)), "%s: not built from the request just received", tc.name)
			}
		}
	}
}
