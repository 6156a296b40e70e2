package reconcile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gotest.tools/v3/assert"
	is "gotest.tools/v3/assert/cmp"
)

const (
	header = "guid,ref,from,to,amount,balance,processed_at\n"
	good   = "20261129MOB000000000000000000001,C000000000000042,11020030004001,11020030004002,150000,99850000,20261129093001\n"
)

func TestJournalLinesAreReadInOrderWithTheirNumbers(t *testing.T) {
	var got []Line
	in := header + good + strings.Replace(good, "001,C000000000000042", "002,C000000000000043", 1)
	err := readJournal(strings.NewReader(strings.ReplaceAll(in, "\n", "\r\n")), "20261129", func(l Line) error {
		got = append(got, l)
		return nil
	})
	assert.NilError(t, err)
	assert.Assert(t, is.Len(got, 2))
	assert.Check(t, is.DeepEqual(got[0], Line{No: 2, GUID: "20261129MOB000000000000000000001", Ref: "C000000000000042",
		From: "11020030004001", To: "11020030004002", Amount: 150000, Balance: 99850000, ProcessedAt: "20261129093001"}))
	assert.Check(t, is.Equal(got[1].No, 3))
	assert.Check(t, is.Equal(got[1].Ref, "C000000000000043"))
}

// Every bad input of docs/reconcile.md is refused naming its line and its
// field, and no line after the bad one is handed on.
func TestBadJournalsAreRefusedNamingTheLineAndField(t *testing.T) {
	line := func(f ...string) string { return strings.Join(f, ",") + "\n" }
	g, ref, from, to, amt, bal, at := "20261129MOB000000000000000000002", "C1", "11020030004001", "11020030004002", "100", "5", "20261129120000"
	for _, tc := range []struct {
		name, journal string
		line          int
		field         string
	}{
		{"empty", "", 1, ""},
		{"missing header", good, 1, "header"},
		{"other header", "guid,ref,from,to,amount,balance,time\n" + good, 1, "header"},
		{"too few fields", header + good + line(g, ref, from, to, amt, bal), 3, "fields"},
		{"too many fields", header + good + line(g, ref, from, to, amt, bal, at, "x"), 3, "fields"},
		{"short guid", header + line("20261129MOB1", ref, from, to, amt, bal, at), 2, "guid"},
		{"guid with a dash", header + line("20261129MOB00000000000000000-002", ref, from, to, amt, bal, at), 2, "guid"},
		{"empty ref", header + line(g, "", from, to, amt, bal, at), 2, "ref"},
		{"ref too long", header + line(g, "C00000000000000000", from, to, amt, bal, at), 2, "ref"},
		{"account of 13 digits", header + line(g, ref, "1102003000400", to, amt, bal, at), 2, "from"},
		{"account with a letter", header + line(g, ref, from, "1102003000400X", amt, bal, at), 2, "to"},
		{"amount with decimals", header + line(g, ref, from, to, "100.5", bal, at), 2, "amount"},
		{"negative amount", header + line(g, ref, from, to, "-100", bal, at), 2, "amount"},
		{"balance not a number", header + line(g, ref, from, to, amt, "x", at), 2, "balance"},
		{"processed_at not a time", header + line(g, ref, from, to, amt, bal, "20261129126000"), 2, "processed_at"},
		{"processed_at on another day", header + line(g, ref, from, to, amt, bal, "20261130000001"), 2, "processed_at"},
		{"processed_at too short", header + line(g, ref, from, to, amt, bal, "202611291200"), 2, "processed_at"},
		{"ends inside a quoted field", header + good + `20261129MOB000000000000000000003,"C1`, 3, "a quoted field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handed := 0
			err := readJournal(strings.NewReader(tc.journal), "20261129", func(Line) error { handed++; return nil })
			var le *LineError
			assert.Assert(t, errors.As(err, &le), "want a *LineError, got %v", err)
			assert.Check(t, is.Equal(le.Line, tc.line), err.Error())
			assert.Check(t, is.Equal(le.Field, tc.field), err.Error())
			assert.Check(t, strings.Contains(err.Error(), "journal line "), err.Error())
			assert.Check(t, handed < tc.line, "line %d was handed on after the bad one", handed)
		})
	}
}

// A journal file is evidence: one that others can write, or that belongs
// to someone else, is refused before it is read.
func TestJournalFileWritableByOthersIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.csv")
	assert.NilError(t, os.WriteFile(path, []byte(header+good), 0o600))
	for _, mode := range []os.FileMode{0o620, 0o602, 0o666} {
		assert.NilError(t, os.Chmod(path, mode))
		_, err := FileSource{Path: path}.Open(t.Context())
		assert.Check(t, is.ErrorContains(err, "writable by others than its owner"), "mode %o", mode)
	}
	assert.NilError(t, os.Chmod(path, 0o644))
	f, err := FileSource{Path: path}.Open(t.Context())
	assert.NilError(t, err)
	f.Close()
	if os.Getuid() == 0 { // CI runs as root: a file of another user's
		assert.NilError(t, os.Chown(path, 65534, 65534))
		_, err := FileSource{Path: path}.Open(t.Context())
		assert.Check(t, is.ErrorContains(err, "neither root nor this user"))
	}
	_, err = FileSource{Path: dir}.Open(t.Context())
	assert.Check(t, is.ErrorContains(err, "not a regular file"))
	_, err = FileSource{Path: filepath.Join(dir, "none.csv")}.Open(t.Context())
	assert.Check(t, is.ErrorContains(err, "--journal"))
}
