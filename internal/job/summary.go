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

// NeedsPerson is implemented by a summary whose completed run can still
// need a person: then the job exits 3, its report complete, and its
// metrics textfile counts the run a success (reconcile's critical
// findings).
type NeedsPerson interface {
	NeedsPerson() bool
}

// Label is a text field of a summary.
type Label struct {
	Name, Value string
}

// Labeled is implemented by a summary with text fields that lead its JSON
// form (reconcile's date).
type Labeled interface {
	Labels() []Label
}

// Rehearsal is implemented by a summary of a run that may have been a
// dry run (reconcile --dry-run): a dry run proves nothing, so its metrics
// textfile keeps the last real run's success time and series, and says
// only that the job ran.
type Rehearsal interface {
	IsDryRun() bool
}

// Metered is implemented by a summary that adds series of its own to the
// job's metrics textfile (reconcile's findings by class).
type Metered interface {
	Textfile() string
}

// InputError is a job's input that cannot be used (reconcile's journal),
// found before anything was changed: the job prints it as it is, with no
// summary line, and exits 1.
type InputError struct{ Err error }

func (e InputError) Error() string { return e.Err.Error() }

// Unwrap returns the input's own error.
func (e InputError) Unwrap() error { return e.Err }

// UsageError is a job's flag that proved unusable only once the ledger was
// open (reconcile's --date after the ledger's today), found by a Check
// before anything was changed: the job prints it as one line and exits 2,
// as for any usage error.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the flag's own error.
func (e UsageError) Unwrap() error { return e.Err }
