// Package inspect turns ledger rows into what a person reads in a
// runbook (the inspect binary, docs/operations.md): a GUID's story with its
// request and reply decoded, accounts masked to their last 4 digits and the
// memo never shown.
package inspect

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"dedup"
	"dedup/ledger"
	"dedup/lhstd"
)

// Request is a stored request, decoded for a person.
type Request struct {
	TxCode  string `json:"tx_code"`
	Channel string `json:"channel"`
	SentAt  string `json:"sent_at"`
	From    string `json:"from,omitempty"` // masked
	To      string `json:"to,omitempty"`   // masked
	Amount  int64  `json:"amount,omitempty"`
	Problem string `json:"problem,omitempty"` // why it could not be decoded
}

// Reply is a stored 0000 reply, decoded.
type Reply struct {
	Code        string `json:"code"`
	Ref         string `json:"ref,omitempty"`
	Balance     *int64 `json:"balance,omitempty"`
	ProcessedAt string `json:"processed_at,omitempty"`
}

// Row is one ledger row as inspect shows it.
type Row struct {
	GUID       string   `json:"guid"`
	State      string   `json:"state"`
	RspCode    string   `json:"rsp_code"`
	Meaning    string   `json:"meaning"`
	Attempts   int      `json:"attempts"`
	UpdatedAt  string   `json:"updated_at"`
	AgeSeconds int64    `json:"age_seconds"`
	Request    *Request `json:"request"`
	Reply      *Reply   `json:"reply,omitempty"`
	// Events are the row's events, oldest first (inspect GUID).
	Events []Event `json:"events,omitempty"`
}

// Decode makes r readable. The memo is never decoded into the result.
func Decode(r ledger.Row) Row {
	out := Row{GUID: r.GUID, State: string(r.State), RspCode: r.RspCode, Attempts: r.Attempts,
		UpdatedAt: r.UpdatedAt, AgeSeconds: int64(r.Age / time.Second), Meaning: meaning(r)}
	if r.Request != nil {
		req := &Request{}
		if h, err := lhstd.ParseHeader(r.Request); err == nil {
			req.TxCode, req.Channel, req.SentAt = h.TxCode, h.Channel, h.SentAt
		}
		if p, err := lhstd.ParseRequest(r.Request); err == nil {
			req.From, req.To, req.Amount = lhstd.MaskAccount(p.Transfer.From), lhstd.MaskAccount(p.Transfer.To), p.Transfer.Amount
		} else {
			req.Problem = "not a valid request telegram"
		}
		out.Request = req
	}
	if r.State == dedup.StateDone && r.Response != nil {
		rep := &Reply{Code: lhstd.ReplyCode(r.Response)}
		if len(r.Response) > lhstd.HeaderLen {
			if b, err := lhstd.ParseTransferResponseBody(r.Response[lhstd.HeaderLen:]); err == nil {
				rep.Ref, rep.Balance, rep.ProcessedAt = b.Ref, &b.Balance, b.ProcessedAt
			}
		}
		out.Reply = rep
	}
	return out
}

func meaning(r ledger.Row) string {
	switch r.State {
	case dedup.StateDone:
		return "final: " + dedup.CodeMeaning(r.RspCode)
	case dedup.StateUnknown:
		return "in doubt: sent, no definite answer; resolve asks the core and resolves it"
	case dedup.StateFailed:
		if r.RspCode == dedup.CodeNotSent {
			return "surely not delivered; a retransmission or reprocess may send it"
		}
		return "failed with " + r.RspCode + " (written by another tool); not reprocessed"
	case dedup.StateSent, dedup.StateReceived:
		return "claimed, the core call under way (or orphaned: the sweep moves it to UNKNOWN)"
	}
	return "unknown state"
}

// WriteText writes rows as blocks for a person. Every byte of a row that
// is a control character or outside printable ASCII is shown as \xNN: a
// row written by another tool must not move the terminal's cursor or fake
// a line. It returns the first write error.
func WriteText(w io.Writer, rows []Row) error {
	bw := bufio.NewWriter(w)
	for i, r := range rows {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(bw, "guid        %s\n", esc(r.GUID))
		code := esc(r.RspCode)
		if code == "" {
			code = "-"
		}
		fmt.Fprintf(bw, "state       %s %s (%s)\n", esc(r.State), code, r.Meaning)
		// The ledger counts claims, not POSTs: a claim whose send obtained
		// no connection (E902) reached nothing. Say so, so that an
		// investigator does not read "6" as six calls to the core.
		fmt.Fprintf(bw, "attempts    %d (claims and reclaims for a send; not every one reached the core: see the relay's and reprocess's tx lines)\n", r.Attempts)
		fmt.Fprintf(bw, "updated_at  %s UTC (%s ago)\n", esc(r.UpdatedAt), time.Duration(r.AgeSeconds)*time.Second)
		switch {
		case r.Request == nil:
			fmt.Fprintln(bw, "request     (none stored)")
		case r.Request.Problem != "":
			fmt.Fprintf(bw, "request     tx_code=%s channel=%s sent_at=%s (%s)\n", esc(r.Request.TxCode), esc(r.Request.Channel), esc(r.Request.SentAt), r.Request.Problem)
		default:
			fmt.Fprintf(bw, "request     tx_code=%s channel=%s sent_at=%s from=%s to=%s amount=%d\n",
				esc(r.Request.TxCode), esc(r.Request.Channel), esc(r.Request.SentAt), r.Request.From, r.Request.To, r.Request.Amount)
		}
		if r.Reply != nil {
			if r.Reply.Ref != "" {
				fmt.Fprintf(bw, "reply       %s ref=%s balance=%d processed_at=%s\n", esc(r.Reply.Code), esc(r.Reply.Ref), *r.Reply.Balance, esc(r.Reply.ProcessedAt))
			} else {
				fmt.Fprintf(bw, "reply       %s\n", esc(r.Reply.Code))
			}
		}
		if r.Events != nil {
			bw.Flush()
			if err := WriteEventsText(w, r.Events); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

// esc shows s's control characters and bytes outside printable ASCII as
// \xNN (and a backslash as \x5c, so that the escape cannot be faked).
func esc(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '\\' {
			fmt.Fprintf(&b, "\\x%02x", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// WriteJSON writes one JSON object per row, one per line.
func WriteJSON(w io.Writer, rows []Row) error {
	enc := json.NewEncoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// Summary is one state's line of inspect --summary.
type Summary struct {
	State            string `json:"state"`
	Rows             int64  `json:"rows"`
	OldestAgeSeconds int64  `json:"oldest_age_seconds"`
}

// Summaries converts the ledger's per-state stats.
func Summaries(stats []ledger.StateStat) []Summary {
	out := make([]Summary, 0, len(stats))
	for _, s := range stats {
		out = append(out, Summary{State: string(s.State), Rows: s.Rows, OldestAgeSeconds: int64(s.Oldest / time.Second)})
	}
	return out
}

// WriteSummaryText writes the per-state summary as a table and returns the
// first write error.
func WriteSummaryText(w io.Writer, sums []Summary) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%-9s %10s  %s\n", "state", "rows", "oldest")
	for _, s := range sums {
		oldest := "-"
		if s.Rows > 0 {
			oldest = (time.Duration(s.OldestAgeSeconds) * time.Second).String()
		}
		fmt.Fprintf(bw, "%-9s %10d  %s\n", s.State, s.Rows, oldest)
	}
	return bw.Flush()
}

// WriteSummaryJSON writes one JSON object per state, one per line.
func WriteSummaryJSON(w io.Writer, sums []Summary) error {
	enc := json.NewEncoder(w)
	for _, s := range sums {
		if err := enc.Encode(s); err != nil {
			return err
		}
	}
	return nil
}

// ParseState reads a state name as an operator types it (any case).
func ParseState(s string) (dedup.State, error) {
	for _, st := range ledger.States {
		if strings.EqualFold(s, string(st)) {
			return st, nil
		}
	}
	return "", fmt.Errorf("%q is not a state (RECEIVED, SENT, DONE, UNKNOWN, FAILED)", s)
}
