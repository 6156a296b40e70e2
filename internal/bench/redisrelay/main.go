// Command redisrelay is the alternative a team would build instead of
// dedup's ledger: the same relay, its ledger replaced by Redis. A claim is
// SET key value NX (the one caller that sets it sends), the row is a JSON
// value holding the stored request and, once finished, the reply telegram
// that retransmissions are answered from; the server runs with appendonly
// yes and appendfsync always, so that an acknowledged SET is on the disk.
// scripts/bench.sh (table 8) runs it beside dedup on SQLite, rounds
// alternating. REDIS_ADDR names the server (default 127.0.0.1:6379).
//
// It is a benchmark tool: the package never ships it (nothing under internal/
// is packaged) and it must never serve money: it has no fencing (a finish overwrites whatever is there),
// no inquiry state the jobs could resolve, no reclaim of an undelivered
// transfer, no events, and Redis's fsync covers the server's process, not
// a replica: none of dedup's rules beyond "one claim per GUID" are kept.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"dedup"
	"dedup/internal/relay"
	"dedup/ledger"
)

// record is a GUID's value in Redis.
type record struct {
	TxCode   string      `json:"tx_code"`
	State    dedup.State `json:"state"`
	RspCode  string      `json:"rsp_code,omitempty"`
	Request  []byte      `json:"request,omitempty"`
	Response []byte      `json:"response,omitempty"`
	Attempts int         `json:"attempts"`
}

// store is relay.Store over Redis.
type store struct{ rdb *redis.Client }

func key(guid string) string { return "dedup:" + guid }

func (s store) Get(ctx context.Context, guid string) (*ledger.Row, error) {
	b, err := s.rdb.Get(ctx, key(guid)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", guid, err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("get %s: %w", guid, err)
	}
	return &ledger.Row{GUID: guid, TxCode: r.TxCode, State: r.State, RspCode: r.RspCode,
		Request: r.Request, Response: r.Response, Attempts: r.Attempts}, nil
}

func (s store) Claim(ctx context.Context, guid, txCode string, request []byte) (bool, error) {
	b, err := json.Marshal(record{TxCode: txCode, State: dedup.StateSent, Request: request, Attempts: 1})
	if err != nil {
		return false, err
	}
	ok, err := s.rdb.SetNX(ctx, key(guid), b, 0).Result()
	if err != nil {
		return false, fmt.Errorf("claim %s: %w", guid, err)
	}
	return ok, nil
}

func (s store) Reclaim(context.Context, string, []byte, int) (int, []byte, bool, error) {
	return 0, nil, false, nil
}

// Finish overwrites the GUID's value with the outcome in one SET: the
// request is not kept (this relay never resends it), so no read first.
func (s store) Finish(ctx context.Context, guid string, attempt int, o ledger.Outcome) (bool, error) {
	b, err := json.Marshal(record{State: o.State, RspCode: o.RspCode, Response: o.Response, Attempts: attempt})
	if err != nil {
		return false, err
	}
	if err := s.rdb.Set(ctx, key(guid), b, 0).Err(); err != nil {
		return false, fmt.Errorf("finish %s: %w", guid, err)
	}
	return true, nil
}

func (s store) ConfirmClaim(context.Context, string, int) (ledger.ClaimCheck, error) {
	return ledger.ClaimCheck{Held: true, Now: time.Now()}, nil
}

func (s store) SweepOrphans(context.Context, time.Duration) (int64, error) { return 0, nil }

func (s store) Now(context.Context) (time.Time, error) { return time.Now(), nil }

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 128, MaxRetries: -1})
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		fmt.Fprintf(os.Stderr, "redisrelay: redis %s: %v\n", addr, err)
		os.Exit(1)
	}
	os.Exit(relay.Main(os.Args[1:], relay.Hooks{WrapStore: func(relay.Store) relay.Store { return store{rdb} }}))
}
