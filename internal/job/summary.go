package job

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
