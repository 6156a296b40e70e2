package batch

import "fmt"

// Summary is a batch job's result: its String is the job's last stdout line
// (docs/cli.md fixes it); Fields are the same counts, in the same order, for
// --summary-format json and the metrics textfile.
type Summary interface {
	String() string
	Fields() []Field
}

// Field is one count of a summary.
type Field struct {
	Name  string
	Value int64
}

// CheckSummary is inspect --check's summary: the file was sound (ok=1) or
// damaged (damaged=1).
type CheckSummary struct{ OK, Damaged int }

func (s CheckSummary) String() string { return fmt.Sprintf("check: ok=%d damaged=%d", s.OK, s.Damaged) }

// Fields lists the counts.
func (s CheckSummary) Fields() []Field {
	return []Field{{"ok", int64(s.OK)}, {"damaged", int64(s.Damaged)}}
}
