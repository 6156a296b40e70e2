package inspect

import (
	"fmt"

	"dedup/internal/job"
)

// CheckSummary is inspect --check's summary: the file was sound (ok=1) or
// damaged (damaged=1).
type CheckSummary struct{ OK, Damaged int }

func (s CheckSummary) String() string { return fmt.Sprintf("check: ok=%d damaged=%d", s.OK, s.Damaged) }

// Fields lists the counts.
func (s CheckSummary) Fields() []job.Field {
	return []job.Field{{Name: "ok", Value: int64(s.OK)}, {Name: "damaged", Value: int64(s.Damaged)}}
}
