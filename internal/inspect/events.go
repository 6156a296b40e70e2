package inspect

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"dedup/ledger"
)

// Event is one tx_event row as inspect shows it.
type Event struct {
	ID        int64  `json:"id"`
	GUID      string `json:"guid"`
	At        string `json:"at"`
	Actor     string `json:"actor"`
	Action    string `json:"action"`
	FromState string `json:"from_state,omitempty"`
	ToState   string `json:"to_state,omitempty"`
	RspCode   string `json:"rsp_code,omitempty"`
	Attempts  *int   `json:"attempts,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

// Events converts the ledger's events.
func Events(evs []ledger.Event) []Event {
	out := make([]Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, Event{ID: e.ID, GUID: e.GUID, At: e.At, Actor: e.Actor, Action: e.Action,
			FromState: e.FromState, ToState: e.ToState, RspCode: e.RspCode, Attempts: e.Attempts, Detail: e.Detail})
	}
	return out
}

// WriteEventsText writes events under a row's block, oldest first, every
// byte a person's terminal could misread escaped.
func WriteEventsText(w io.Writer, evs []Event) error {
	bw := bufio.NewWriter(w)
	if len(evs) == 0 {
		fmt.Fprintln(bw, "events      (none: the row's own story is its first send, in the relay's log)")
	}
	for i, e := range evs {
		label := "events"
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(bw, "%-11s ", label)
		writeEventLine(bw, e)
	}
	return bw.Flush()
}

// WriteEventsPeriodText writes the events of a period (inspect --events),
// one line each with its GUID first: the auditor's report, as text.
func WriteEventsPeriodText(w io.Writer, evs []Event) error {
	bw := bufio.NewWriter(w)
	for _, e := range evs {
		fmt.Fprintf(bw, "%s ", esc(e.GUID))
		writeEventLine(bw, e)
	}
	return bw.Flush()
}

// writeEventLine writes one event's line after its label.
func writeEventLine(bw *bufio.Writer, e Event) {
	change := e.FromState + "->" + e.ToState
	if e.ToState == "" {
		change = e.FromState + " (unchanged)"
	}
	att := "-"
	if e.Attempts != nil {
		att = strconv.Itoa(*e.Attempts)
	}
	fmt.Fprintf(bw, "%d %s UTC %s by %s: %s %s attempts=%s", e.ID, esc(e.At), esc(e.Action), esc(e.Actor), esc(change), esc(e.RspCode), att)
	if e.Detail != "" {
		fmt.Fprintf(bw, " %s", esc(e.Detail))
	}
	fmt.Fprintln(bw)
}

// WriteEventsJSON writes one JSON object per event, one per line.
func WriteEventsJSON(w io.Writer, evs []Event) error {
	enc := json.NewEncoder(w)
	for _, e := range evs {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// WriteEventsCSV writes the events as CSV with a header line: the
// auditor's report.
func WriteEventsCSV(w io.Writer, evs []Event) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"id", "guid", "at", "actor", "action", "from_state", "to_state", "rsp_code", "attempts", "detail"})
	for _, e := range evs {
		att := ""
		if e.Attempts != nil {
			att = strconv.Itoa(*e.Attempts)
		}
		cw.Write([]string{strconv.FormatInt(e.ID, 10), e.GUID, e.At, e.Actor, e.Action, e.FromState, e.ToState, e.RspCode, att, e.Detail})
	}
	cw.Flush()
	return cw.Error()
}
