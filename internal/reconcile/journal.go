package reconcile

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"dedup/internal/coreapi"
	"dedup/lhstd"
)

// Header is the journal's first line, field by field.
var Header = []string{"guid", "ref", "from", "to", "amount", "balance", "processed_at"}

// Line is one application in the core's journal, checked.
type Line struct {
	No          int // the line number in the journal (the header is line 1)
	GUID        string
	Ref         string
	From, To    string
	Amount      int64
	Balance     int64
	ProcessedAt string // YYYYMMDDhhmmss, on the business date
}

// Source is where a day's journal comes from: a file, or the core.
type Source interface {
	// Open returns the journal to be read once, to its end.
	Open(ctx context.Context) (io.ReadCloser, error)
	// String names the source for the log and the kept run.
	String() string
}

// FileSource is a journal the core delivered as a file.
type FileSource struct{ Path string }

func (f FileSource) String() string { return f.Path }

// Open opens the file, refusing one that anyone but its owner can write,
// or whose owner is neither root nor the user running reconcile: the
// journal is evidence that turns rows DONE, as an inquiry's answer is.
// The checks are made on the opened file, not on its name.
func (f FileSource) Open(context.Context) (io.ReadCloser, error) {
	fh, err := os.Open(f.Path)
	if err != nil {
		return nil, fmt.Errorf("--journal: %w", err)
	}
	fi, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, fmt.Errorf("--journal: %w", err)
	}
	if !fi.Mode().IsRegular() {
		fh.Close()
		return nil, fmt.Errorf("--journal %s: not a regular file", f.Path)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		fh.Close()
		return nil, fmt.Errorf("--journal %s: writable by others than its owner (mode %04o): refused, the journal is evidence that turns rows DONE", f.Path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Getuid() {
		fh.Close()
		return nil, fmt.Errorf("--journal %s: owned by uid %d, neither root nor this user (uid %d): refused, the journal is evidence that turns rows DONE", f.Path, st.Uid, os.Getuid())
	}
	return fh, nil
}

// CoreSource is the journal fetched from the core.
type CoreSource struct {
	Client *coreapi.Client
	URL    string
	Date   string
}

func (c CoreSource) String() string { return c.URL }

// Open starts the download (coreapi.Client.Journal).
func (c CoreSource) Open(ctx context.Context) (io.ReadCloser, error) {
	return c.Client.Journal(ctx, c.Date)
}

// LineError is a journal that cannot be used: the line and the field that
// are wrong.
type LineError struct {
	Line  int
	Field string
	Err   error
}

func (e *LineError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("journal line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("journal line %d: %s: %v", e.Line, e.Field, e.Err)
}

// readJournal reads a whole journal of business date date (YYYYMMDD) from
// r, checking every line, and calls each with every line in order. It
// stops at the first line that is not right (a *LineError), or at a read
// error (the source ended early).
func readJournal(r io.Reader, date string, each func(Line) error) error {
	cr := csv.NewReader(bufio.NewReaderSize(r, 1<<16))
	cr.FieldsPerRecord = len(Header)
	cr.ReuseRecord = true
	first := true
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			if first {
				return &LineError{Line: 1, Err: errors.New("the journal is empty: no header line")}
			}
			return nil
		}
		if err != nil {
			var pe *csv.ParseError
			if !errors.As(err, &pe) {
				return fmt.Errorf("reading the journal: %w", err) // the source ended early
			}
			switch {
			case errors.Is(pe.Err, csv.ErrFieldCount):
				return &LineError{Line: pe.StartLine, Field: "fields", Err: fmt.Errorf("%d fields, want %d (%s)", len(rec), len(Header), strings.Join(Header, ","))}
			case errors.Is(pe.Err, csv.ErrQuote), errors.Is(pe.Err, csv.ErrBareQuote):
				return &LineError{Line: pe.StartLine, Field: "a quoted field", Err: fmt.Errorf("%v: the journal ends inside it, or a quote is stray", pe.Err)}
			}
			return &LineError{Line: pe.StartLine, Err: pe.Err}
		}
		no, _ := cr.FieldPos(0)
		if first {
			first = false
			if strings.Join(rec, ",") != strings.Join(Header, ",") {
				return &LineError{Line: no, Field: "header", Err: fmt.Errorf("%q, want %q", strings.Join(rec, ","), strings.Join(Header, ","))}
			}
			continue
		}
		l, err := checkLine(no, rec, date)
		if err != nil {
			return err
		}
		if err := each(l); err != nil {
			return err
		}
	}
}

// checkLine checks one journal line of business date date.
func checkLine(no int, rec []string, date string) (Line, error) {
	bad := func(field string, format string, args ...any) (Line, error) {
		return Line{}, &LineError{Line: no, Field: field, Err: fmt.Errorf(format, args...)}
	}
	l := Line{No: no, GUID: rec[0], Ref: rec[1], From: rec[2], To: rec[3], ProcessedAt: rec[6]}
	if !lhstd.IsGUID(l.GUID) {
		return bad("guid", "%q is not 32 characters of [0-9A-Za-z]", l.GUID)
	}
	if len(l.Ref) == 0 || len(l.Ref) > 16 || !printable(l.Ref) {
		return bad("ref", "%q is not 1 to 16 printable ASCII characters (the reply's place for it)", l.Ref)
	}
	for _, a := range []struct{ name, v string }{{"from", l.From}, {"to", l.To}} {
		if len(a.v) != 14 || !digits(a.v) {
			return bad(a.name, "%q is not an account of 14 digits", a.v)
		}
	}
	var err error
	if l.Amount, err = whole(rec[4], 18); err != nil {
		return bad("amount", "%q is not a whole number", rec[4])
	}
	if l.Balance, err = whole(rec[5], 15); err != nil {
		return bad("balance", "%q is not a whole number of at most 15 digits (the reply's place for it)", rec[5])
	}
	if len(l.ProcessedAt) != 14 || !digits(l.ProcessedAt) {
		return bad("processed_at", "%q is not a timestamp YYYYMMDDhhmmss", l.ProcessedAt)
	}
	if _, err := time.Parse("20060102150405", l.ProcessedAt); err != nil {
		return bad("processed_at", "%q is not a valid timestamp", l.ProcessedAt)
	}
	if l.ProcessedAt[:8] != date {
		return bad("processed_at", "%q is not on the business date %s", l.ProcessedAt, date)
	}
	return l, nil
}

// whole parses a whole number of at most maxDigits digits, no sign.
func whole(s string, maxDigits int) (int64, error) {
	if len(s) == 0 || len(s) > maxDigits || !digits(s) {
		return 0, errors.New("not a whole number")
	}
	return strconv.ParseInt(s, 10, 64)
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
