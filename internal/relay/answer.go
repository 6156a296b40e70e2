package relay

import (
	"fmt"
	"log/slog"

	"dedup"
	"dedup/ledger"
	"dedup/lhstd"
)

// answer is what a request whose GUID already has a row is told.
type answer struct {
	// reply is the telegram to send back; nil when reclaim is set.
	reply []byte
	// reclaim: the row is FAILED/E902 and the ledger can be written: try
	// to reclaim it and send it again.
	reclaim bool
	// fromLedger: answered from the row without a core call (counted in
	// dedup_ledger_answers_total).
	fromLedger bool
	// detail and level go into the transaction's log line.
	detail string
	level  slog.Level
}

// answerKnown decides what req is told about its GUID's row, as a pure
// function of the row, the request, and whether the ledger can be written
// now (docs/rules.md's state table, "Beyond the lab" and rule 14):
//
//   - another request under the GUID: E904, whatever the row's state;
//   - SENT/RECEIVED: E903; UNKNOWN: E901; DONE: the stored reply, byte
//     for byte; all of them whether or not the ledger can be written
//     (rule 14: a write outage does not change what a known GUID is told);
//   - FAILED/E902: reclaim it if the ledger can be written, else E902;
//     FAILED with another code (another tool's row): E902.
func answerKnown(row *ledger.Row, req *lhstd.Request, writable bool) answer {
	fresh := func(code string) []byte { return lhstd.Reply(req.Raw, code, nil) }
	if !lhstd.SameRequest(row.Request, req.Raw) {
		return answer{reply: fresh(dedup.CodeGUIDReused), level: slog.LevelWarn,
			detail: "GUID reused for a different request (channel bug); nothing changed"}
	}
	switch row.State {
	case dedup.StateSent, dedup.StateReceived:
		return answer{reply: fresh(dedup.CodeInProgress), fromLedger: true}
	case dedup.StateUnknown:
		return answer{reply: fresh(dedup.CodeUnknown), fromLedger: true}
	case dedup.StateDone:
		return answerDone(row, req, fresh)
	case dedup.StateFailed:
		if row.RspCode != dedup.CodeNotSent {
			return answer{reply: fresh(dedup.CodeNotSent), fromLedger: true}
		}
		if !writable {
			return answer{reply: fresh(dedup.CodeNotSent), fromLedger: true, level: slog.LevelWarn,
				detail: "the ledger cannot be written: not reclaimed, no attempt used"}
		}
		return answer{reclaim: true}
	}
	return answer{reply: fresh(dedup.CodeUnknown), level: slog.LevelError, detail: "row in unknown state " + string(row.State)}
}

// answerDone answers a retransmission of a DONE row: its stored reply, or,
// for a row written by another tool, what can honestly be said.
func answerDone(row *ledger.Row, req *lhstd.Request, fresh func(string) []byte) answer {
	if row.Response != nil {
		if why := unusableReply(row.Response, req.GUID); why != "" {
			// Answering it would send the channel a telegram that is
			// not a reply to it.
			return answer{reply: fresh(dedup.CodeUnknown), fromLedger: true, level: slog.LevelError,
				detail: "DONE row's stored reply is unusable (" + why + "); answering E901"}
		}
		return answer{reply: row.Response, fromLedger: true} // byte for byte, the first request's sent_at included
	}
	if row.RspCode != dedup.CodeOK && len(row.RspCode) == 4 {
		return answer{reply: fresh(row.RspCode), fromLedger: true}
	}
	return answer{reply: fresh(dedup.CodeUnknown), fromLedger: true, level: slog.LevelError,
		detail: "DONE row without a stored reply; answering E901"}
}

// unusableReply says why a DONE row's stored reply cannot be sent back
// as the reply to guid ("" if it can): shorter than a header, another
// GUID's, no code, or too long for a frame.
func unusableReply(reply []byte, guid string) string {
	switch {
	case len(reply) < lhstd.HeaderLen:
		return fmt.Sprintf("%d bytes, shorter than a header", len(reply))
	case len(reply) > lhstd.MaxTelegram:
		return fmt.Sprintf("%d bytes, longer than a frame may carry", len(reply))
	case string(reply[:len(guid)]) != guid:
		return "it names another GUID"
	case !lhstd.IsResponseCode(lhstd.ReplyCode(reply)):
		return "no response code in it"
	}
	return ""
}
