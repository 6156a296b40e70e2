package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"dedup/ledger"
)

// Confirmers is how many batched confirmations (rule 13) may be in flight
// at once. Every send on a PostgreSQL ledger confirms its claim before its
// first byte, one round trip each; under load the confirmations that wait
// while another is in flight share one query instead (docs/benchmarks.md,
// table 4 on PostgreSQL).
const Confirmers = 2

// confirmation is one ConfirmClaim call waiting for a confirmer.
type confirmation struct {
	guid    string
	attempt int
	chk     ledger.ClaimCheck
	err     error
	done    chan struct{} // closed when chk and err are set
}

// ConfirmClaim reads whether guid's row is still SENT with attempt, and its
// age on the server's clock (docs/rules.md rule 13). With group commit the
// read may share one query with other holders' confirmations: that query
// starts after this call was taken, so it never answers from a snapshot
// older than the question.
func (l *Ledger) ConfirmClaim(ctx context.Context, guid string, attempt int) (ledger.ClaimCheck, error) {
	if l.closed.Load() {
		return ledger.ClaimCheck{}, fmt.Errorf("confirm claim %s: %w", guid, ledger.ErrClosed)
	}
	if l.confirms == nil {
		return l.confirmOne(ctx, guid, attempt)
	}
	c := &confirmation{guid: guid, attempt: attempt, done: make(chan struct{})}
	select {
	case l.confirms <- c:
	case <-l.quit:
		return ledger.ClaimCheck{}, fmt.Errorf("confirm claim %s: %w", guid, ledger.ErrClosed)
	case <-ctx.Done():
		return ledger.ClaimCheck{}, fmt.Errorf("confirm claim %s: %w", guid, ctx.Err())
	}
	select {
	case <-c.done:
		return c.chk, c.err
	case <-ctx.Done():
		// The holder gives up (and sends nothing); the confirmer's answer,
		// when it comes, is dropped.
		return ledger.ClaimCheck{}, fmt.Errorf("confirm claim %s: %w", guid, ctx.Err())
	}
}

// confirmer answers the confirmations that wait, all of them in one query.
func (l *Ledger) confirmer() {
	defer func() { l.stopped <- struct{}{} }()
	batch := make([]*confirmation, 0, l.maxBatch)
	for {
		var open bool
		if batch, open = gather(l.confirms, l.quit, batch, l.maxBatch); !open {
			return
		}
		if len(batch) == 1 {
			c := batch[0]
			c.chk, c.err = l.confirmOne(context.Background(), c.guid, c.attempt)
			close(c.done)
			continue
		}
		l.confirmMany(batch)
	}
}

// confirmOne is one confirmation on its own: one row, one query.
func (l *Ledger) confirmOne(ctx context.Context, guid string, attempt int) (ledger.ClaimCheck, error) {
	ctx, cancel := bound(ctx)
	defer cancel()
	var held bool
	var age, now float64
	err := l.pool.QueryRow(ctx, ledger.SQL.Confirm.Postgres, guid, attempt).Scan(&held, &age, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.ClaimCheck{}, nil
	}
	if err != nil {
		return ledger.ClaimCheck{}, fmt.Errorf("confirm claim %s: %w", guid, translate(err))
	}
	return claimCheck(held, age, now), nil
}

// confirmMany answers batch with one query (ledger.SQL.ConfirmMany): each
// confirmation is held if its GUID's row is SENT with its attempt. A GUID
// the query returns no row for has no row: it is not held. A failed query
// fails every confirmation of the batch, and each holder refuses.
func (l *Ledger) confirmMany(batch []*confirmation) {
	defer func() {
		for _, c := range batch {
			close(c.done)
		}
	}()
	byGUID := make(map[string][]*confirmation, len(batch))
	guids := make([]string, 0, len(batch))
	for _, c := range batch {
		if _, seen := byGUID[c.guid]; !seen {
			guids = append(guids, c.guid)
		}
		byGUID[c.guid] = append(byGUID[c.guid], c)
	}
	ctx, cancel := bound(context.Background())
	defer cancel()
	fail := func(err error) {
		for _, c := range batch {
			c.chk, c.err = ledger.ClaimCheck{}, fmt.Errorf("confirm claim %s: %w", c.guid, translate(err))
		}
	}
	// Planned anew for each batch (an unnamed statement): a prepared
	// statement's plan is fixed after five runs, and `= ANY($1)` planned
	// on the small table of a relay's first seconds is a sequential scan
	// that then reads the whole table for every batch as it grows, until
	// the next ANALYZE. Planning each batch costs less than one such scan.
	rows, err := l.pool.Query(ctx, ledger.SQL.ConfirmMany.Postgres, pgx.QueryExecModeExec, guids)
	if err != nil {
		fail(err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var guid string
		var sent bool
		var attempts int
		var age, now float64
		if err := rows.Scan(&guid, &sent, &attempts, &age, &now); err != nil {
			fail(err)
			return
		}
		for _, c := range byGUID[guid] {
			c.chk = claimCheck(sent && attempts == c.attempt, age, now)
		}
	}
	if err := rows.Err(); err != nil {
		fail(err)
	}
}

func claimCheck(held bool, age, now float64) ledger.ClaimCheck {
	return ledger.ClaimCheck{Held: held, Age: time.Duration(age * float64(time.Second)), Now: fromEpoch(now)}
}
