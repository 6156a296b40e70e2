package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"dedup/ledger"
)

// The high-availability rules (docs/ledger.md, "PostgreSQL with a
// standby"): a primary with synchronous standbys under Patroni, reached by a
// multi-host URL with target_session_attrs=read-write. What a failover can
// do to a write, and what this file does about it:
//
//   - The primary acknowledged a COMMIT without its synchronous standby
//     (its wait was cancelled: a statement timeout, a cancel request, a
//     terminated session). PostgreSQL then commits locally and says so in a
//     WARNING; a failover loses that row, and the channel's retransmission
//     would claim the GUID afresh on the new primary. So any write during
//     which the session received a WARNING is not a commit (ErrNotCommitted).
//   - The session's server is no longer the primary (read-only: SQLSTATE
//     25006, or in recovery): the connection is closed, never reused, the
//     pool is emptied so that the next write finds the new primary, and the
//     write is not a commit.
//   - Durability is checked on every new connection, not only at open: a
//     session whose synchronous_commit is off, local or remote_write is refused (unless
//     --synchronous normal).
//   - A write with no answer by its client deadline (bound) is not a commit:
//     statement_timeout does not end a COMMIT's wait for the standby, so the
//     bound is the client's; pgx closes a connection whose context ended.

// Keys of a connection's CustomData.
const (
	warnedKey = "dedup.warned" // string: the last WARNING received
	doomedKey = "dedup.doomed" // bool: close it when released
)

// onNotice remembers a WARNING on the connection that received it, judged
// by the unlocalized severity (the message text is localized and may change).
func onNotice(c *pgconn.PgConn, n *pgconn.Notice) {
	if n.SeverityUnlocalized == "WARNING" {
		c.CustomData()[warnedKey] = n.Message
	}
}

// keepAfterRelease is the pool's AfterRelease: a doomed connection is closed.
func keepAfterRelease(c *pgx.Conn) bool {
	_, doomed := c.PgConn().CustomData()[doomedKey]
	return !doomed
}

// durableSession is the pool's AfterConnect: a new session whose commits
// are not durable (synchronous_commit off, local or remote_write) is refused, unless the
// operator accepted that (normal).
//
// The server's own fsync and full_page_writes are read too: with fsync
// off a commit is acknowledged from the page cache, and with
// full_page_writes off a page torn by a power cut cannot be repaired from
// the WAL; either way a power cut can lose or corrupt claims the relay
// acted on. They are refused like synchronous_commit, and accepted under
// --synchronous normal with a warning (once per handle) naming the setting.
func durableSession(normal bool, warn func(string, ...any)) func(context.Context, *pgx.Conn) error {
	var warned sync.Once
	return func(ctx context.Context, c *pgx.Conn) error {
		var sc, fsync, fpw string
		if err := c.QueryRow(ctx, "SELECT current_setting('synchronous_commit'), current_setting('fsync'), current_setting('full_page_writes')").Scan(&sc, &fsync, &fpw); err != nil {
			return fmt.Errorf("read synchronous_commit, fsync and full_page_writes: %w", err)
		}
		var unsafe []string
		// remote_write acknowledges a commit that a standby holds in
		// memory only: a crash of both loses it. Only on and remote_apply
		// are durable enough for a claim.
		if sc == "off" || sc == "local" || sc == "remote_write" {
			unsafe = append(unsafe, fmt.Sprintf("synchronous_commit is %q: a claim could be acknowledged and then lost", sc))
		}
		if fsync != "on" {
			unsafe = append(unsafe, fmt.Sprintf("the server's fsync is %q: a power cut can lose or corrupt acknowledged commits", fsync))
		}
		if fpw != "on" {
			unsafe = append(unsafe, fmt.Sprintf("the server's full_page_writes is %q: a page torn by a power cut cannot be repaired", fpw))
		}
		if len(unsafe) == 0 {
			return nil
		}
		if !normal {
			return fmt.Errorf("%s; set it to on (or pass --synchronous normal to accept that risk)", strings.Join(unsafe, "; "))
		}
		if warn != nil {
			warned.Do(func() {
				warn("--synchronous normal: the ledger's commits are not durable against a power cut", "settings", strings.Join(unsafe, "; "))
			})
		}
		return nil
	}
}

// configureHA installs the hooks above on a pool configuration.
func configureHA(cfg *pgxpool.Config, normal bool, warn func(string, ...any)) {
	cfg.ConnConfig.OnNotice = onNotice
	cfg.AfterConnect = durableSession(normal, warn)
	cfg.AfterRelease = keepAfterRelease
}

// notPrimary reports an error that says the session's server is no longer
// a writable primary.
func notPrimary(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "25006" || // read_only_sql_transaction (a standby, a demoted primary)
		pe.Code == "57P03") // cannot_connect_now (starting up, in recovery)
}

// onConn runs one write on one pooled connection and judges whether it
// committed as the ledger requires.
func (l *Ledger) onConn(ctx context.Context, write func(c *pgxpool.Conn) error) error {
	c, err := l.pool.Acquire(ctx)
	if err != nil {
		return translate(err)
	}
	defer c.Release()
	data := c.Conn().PgConn().CustomData()
	delete(data, warnedKey)
	err = write(c)
	switch {
	case notPrimary(err):
		data[doomedKey] = true
		l.pool.Reset() // every pooled session is to the old primary
		l.notCommitted(ledger.NotCommittedNotPrimary)
		return fmt.Errorf("%w: the server is no longer the primary: %v", ledger.ErrNotCommitted, err)
	case err != nil:
		return err
	}
	if w, warned := data[warnedKey].(string); warned {
		data[doomedKey] = true
		l.notCommitted(ledger.NotCommittedWarning)
		return fmt.Errorf("%w: the server warned %q (committed locally at most; a failover may lose it)", ledger.ErrNotCommitted, w)
	}
	return nil
}

// notCommitted tells Options.OnNotCommitted why a write was not a commit.
func (l *Ledger) notCommitted(reason string) {
	if l.onNotCommitted != nil {
		l.onNotCommitted(reason)
	}
}
