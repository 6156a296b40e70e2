package inspect

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"gotest.tools/v3/assert"

	"dedup"
	"dedup/ledger"
)

// A row written by another tool with control characters and bytes outside
// printable ASCII is shown with \xNN in text, and escaped JSON in JSON: it
// cannot move the terminal's cursor or fake a line.
func TestRowBytesAreEscaped(t *testing.T) {
	req := []byte(strings.Repeat("A", 32) + "TRF\x1b[2J1" + "Q" + "0000" + "M\nB" + "20261129093000" + "00")
	r := Decode(ledger.Row{GUID: "evil\x1b]0;pwned\x07\nguid        fake", State: dedup.StateDone, RspCode: "00\r0",
		Request: req, Response: []byte("x")})
	var text bytes.Buffer
	WriteText(&text, []Row{r})
	out := text.String()
	for _, c := range []string{"\x1b", "\x07", "\r"} {
		assert.Assert(t, !strings.Contains(out, c), "a raw control character reached the output: %q", out)
	}
	assert.Equal(t, strings.Count(out, "\nguid "), 0, "a row faked a line: %q", out)
	for _, want := range []string{`evil\x1b]0;pwned\x07\x0aguid`, `00\x0d0`, `tx_code=TRF\x1b[2J1`, `channel=M\x0aB`} {
		assert.Assert(t, strings.Contains(out, want), "%s not in %q", want, out)
	}
	var js bytes.Buffer
	assert.NilError(t, WriteJSON(&js, []Row{r}))
	assert.Assert(t, !strings.Contains(js.String(), "\x1b"), js.String())
	var back map[string]any
	assert.NilError(t, json.Unmarshal(js.Bytes(), &back))
	assert.Equal(t, back["guid"], r.GUID)
}
