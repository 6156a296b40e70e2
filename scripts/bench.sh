#!/usr/bin/env bash
# Throughput and latency of the relay, printed as tables (speed lives here and
# in go test -bench, never in the tests).
#
# Table 1 (in-process, one Go benchmark run): the relay server end to end
#   (channel connections -> relay -> fixture core, 10 % retransmissions) with
#   the in-memory store used only by the benchmark (the ceiling no durable
#   ledger can beat), the same store whose writes share in-place fsyncs
#   (memory+fsync: the floor of any durable ledger on this disk, a perfect
#   group commit with no SQL), the SQLite ledger at synchronous FULL and
#   NORMAL, and FULL with the Prometheus metrics on; CPU microseconds per
#   transaction of the whole process (getrusage: relay, load and core
#   together); vs_memory = TPS / ceiling TPS, vs_floor = TPS / floor TPS.
#   Then the three targets of the ledger's cost, computed from this run.
# Table 2 (real binaries): fixturecore + relay processes driven by
#   `channel load --dup-ratio 0.1`, with a SQLite ledger (synchronous FULL) on
#   the disk and on tmpfs (/dev/shm), and a PostgreSQL ledger (a throwaway
#   local cluster, fsync and synchronous_commit on, data on the disk), and a
#   high-availability PostgreSQL ledger (postgres-ha: etcd and three
#   Patroni nodes on this machine, synchronous mode strict, every commit
#   confirmed by the synchronous standby); CPU
#   microseconds per transaction of the relay process (the PostgreSQL
#   server's own CPU is not in it), and the number of GUIDs the core applied
#   twice (must be 0). The PostgreSQL ledgers run twice at 16 and 64
#   connections: once as released, once with a relay built without rule
#   13's confirmation of each claim before its first byte (postgres-nc,
#   postgres-ha-nc: e2e/testdata/noconfirmrelay, never released), so that
#   what the confirmation costs is measured in the same run.
#
# Table 3 (real binaries): the cost of TLS. The same load with a SQLite
#   ledger on the disk, once plain (channels over TCP, the core over http)
#   and once with TLS on both links (channels over mutual TLS with their
#   client certificates, the core over https with the relay's client
#   certificate; keep-alive connections and session resumption, as
#   deployed); relay CPU per transaction; tls_vs_plain = TLS tx/s / plain.
#
# Table 4 (real binaries): the hot path before and after a change: the same
#   load (SQLite FULL on the disk) against this checkout's relay and against
#   the relay built from BENCH_BASE (default: the last commit before the
#   events table, so that what the events cost the claim -> outcome path is
#   measured in the same run), points alternating.
#
# Table 5 (real binaries): flat with the ledger's size. The same load at 16
#   and 64 connections on ledgers preloaded with 0, 1 million and 10 million
#   DONE rows (BENCH_SCALE to change the sizes) spread evenly over the last 7
#   days, with GUIDs of the channels' form (date, channel, 21 random digits)
#   and the request and reply telegrams of the real sizes (135 and 117
#   bytes), on SQLite (FULL, on the disk) and PostgreSQL. Each preload is one
#   INSERT ... SELECT (a recursive CTE on SQLite, generate_series on
#   PostgreSQL), timed. vs_empty = tx/s / the empty ledger's tx/s. On the
#   largest ledger, `purge --days 3` (the older 4/7 of the rows) runs for at
#   most BENCH_PURGE_SECS (default 30) while 16 connections send: its rows
#   per second, and the load's tx/s, p99 and slowest reply during it
#   (vs_empty there is against the same ledger's 16-connection point just
#   before). stall_ms: the machine's worst stall during each point, from
#   bin/stallmeter (internal/bench/stallmeter: a process that only sleeps 1 ms at
#   a time, woken that late), so that a slowest reply can be told apart from
#   a moment when the whole machine stood still.
#
# Table 6 (real binaries): the cost of tracing. The same load (SQLite FULL on
#   the disk) at 16 and 64 connections with tracing off (no OTEL_ variable),
#   on to a live OTLP/HTTP endpoint (internal/testbed/otlptest/otlpsink --discard:
#   it reads and answers every export, decoding nothing, as a collector on
#   another host costs this one nothing), the same with 10 % of the
#   transfers sampled (OTEL_TRACES_SAMPLER=traceidratio, 0.1), on to an
#   endpoint that is down (a closed port) and on to one that accepts and
#   never answers; BENCH_ROUNDS rounds (default 3), the
#   modes alternating within each, the median printed with the spread.
#   vs_off = the mode's median tx/s / off's. Target: on (live) >= 0.95x.
#   BENCH_T6_CONNS (default "16 64") and BENCH_T6_MODES (default "off live
#   live-10% down hanging") pick the points, for more rounds of fewer.
#
# Table 7 (real binaries): costs that grow with the ledger, before and after.
#   On SQLite ledgers of BENCH_SCALE7 rows (default "0 10000000"; DONE rows
#   with random GUIDs over 7 days, as table 5 preloads them), this checkout
#   against the binaries built from BENCH_SCALE_BASE (default 576787c, the
#   last commit whose binaries read the whole file when they opened it):
#   the wall time of a job with nothing to do (resolve --min-age 300,
#   reprocess, purge --days 30, settle list, inspect GUID), and the relay's
#   first 10 s after a start at 16 connections (metrics on) against the same
#   relay's steady state: once its whole-file check ended (before), 20 s after
#   the start with its throttled scrub running (after) (first_10s = tx/s in the
#   first 10 s / steady tx/s), with the page cache warm and dropped
#   (echo 3 > /proc/sys/vm/drop_caches: root only).
#
# Table 8 (real binaries): the alternative a team would build. The relay
#   with its ledger replaced by Redis (internal/bench/redisrelay: SET key NX for
#   the claim, the reply telegram stored for retransmissions; Debian's
#   redis-server with appendonly yes, appendfsync always, no snapshots, on
#   the same disk; a benchmark tool, never packaged) beside dedup on SQLite
#   FULL, at 1, 16 and 64 connections, BENCH_ROUNDS rounds (default 5), the
#   two alternating which goes first; the median with the spread of single
#   rounds, and every round's figure. vs_redis = median tx/s / Redis's.
#   Target: dedup >= 1.05x at each.
#
# Table 9 (real binaries): the soak. A SQLite ledger (FULL, on the disk) of
#   BENCH_SOAK_ROWS rows (default 1000000) spread over the last 7 days, as
#   table 5 preloads them; the load at half the relay's peak (its 16-
#   connection tx/s over 5 s, then channel load --rate) for BENCH_SOAK_SECS
#   (default 600); purge --days 3 every minute (as dedup-purge.timer), each
#   run at most 55 s. Each minute: the rows older than 3 days, all rows, the
#   file's and the WAL's size, what purge deleted. Target: the old rows fall
#   to 0 and the file stops growing.
#
# Table 10: reconcile, a journal of 10 million lines (BENCH_RECONCILE_ROWS)
#   against a SQLite ledger of as many rows (random GUIDs, all of
#   yesterday), then the same on PostgreSQL: the journal's lines per second,
#   reconcile's peak RSS, and a relay serving 16 connections beside it
#   against the same relay alone (tx/s, slowest reply, the machine's worst
#   stall). Targets (SQLite): 50,000 lines/s, under 512 MB, 0.8x, 100 ms.
#
# Also: the idle fsync p50 of this disk for an in-place overwrite of 16 KiB.
#
#   scripts/bench.sh [SECONDS_PER_POINT]     (default 5)
#   BENCH_TABLES="3" scripts/bench.sh        only some tables (default "1 2 3 4 5 6 7 8 9 10")
#   BENCH_RECONCILE_ROWS=1000000 scripts/bench.sh  table 10's journal lines and ledger rows (default 10 million)
#   BENCH_RECONCILE_NICE=0 scripts/bench.sh  table 10's reconcile at another priority (default 10, as its unit)
#   BENCH_SCALE="0 1000000" scripts/bench.sh table 5's ledger sizes (default "0 1000000 10000000")
#   BENCH_PURGE_BASE=REV scripts/bench.sh    table 5 also purges with purge built from REV, first (same run)
#   BENCH_LEDGERS=postgres scripts/bench.sh  table 5 on one ledger only (default "sqlite postgres")
#   BENCH_BASE=REV scripts/bench.sh          table 4 against the relay built from REV
#   BENCH_WARMUP=0 scripts/bench.sh          no unmeasured warm-up before each load point (default 1 s)
#   BENCH_T2="postgres postgres-nc" scripts/bench.sh  table 2's ledgers (default: all six;
#                                            postgres-cd: a second cluster with commit_delay, BENCH_COMMIT_DELAY)
#   BENCH_T4_LEDGER=postgres scripts/bench.sh  table 4 on a PostgreSQL ledger (default sqlite)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1
secs=${1:-5}
tables=${BENCH_TABLES:-1 2 3 4 5 6 7 8 9 10}
# The last commit before the events table (tx_event): table 4's "before".
base=${BENCH_BASE:-7748061}
want() { [[ " $tables " == *" $1 "* ]]; }

go build -buildvcs=auto -o bin/ ./...
work=$(mktemp -d "$PWD/.bench.XXXXXX")   # on the repository's disk, not /tmp
chmod 755 "$work"                         # the PostgreSQL cluster in it runs as postgres
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work" /dev/shm/dedup-bench.*
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# stop_relay PID: SIGTERM, then at most 30 s for it to exit; a relay that
# does not is named, its goroutines dumped to its log (SIGQUIT), and the
# run goes on.
stop_relay() {
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 1 300); do kill -0 "$1" 2>/dev/null || { wait "$1" 2>/dev/null || true; return 0; }; sleep 0.1; done
  echo "bench: relay $1 did not exit within 30 s of SIGTERM; SIGQUIT (goroutines in its log)" >&2
  kill -QUIT "$1" 2>/dev/null || true; sleep 1; kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
wait_listening() {
  for _ in $(seq 1 2400); do   # 2 minutes: a relay checks a large ledger (quick_check) before it listens
    a=$(sed -n 's/^listening addr=//p' "$1" | head -n1)
    [ -n "$a" ] && { echo "$a"; return 0; }
    sleep 0.05
  done
  cat "$1" >&2; return 1
}
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
# host_ticks: the whole machine's busy and total CPU ticks (every process:
# load generator, relay, core, database server).
host_ticks() { awk '/^cpu / { print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9 }' /proc/stat; }

echo "== the disk: fsync after overwriting 16 KiB in place (the floor of one durable commit)"
fsync_p50=$(DEDUP_FSYNC_DIR="$work" go test -run '^$' -bench FsyncInPlace -benchtime 300x ./ledger/sqlite/ |
  sed -n 's/.* \([0-9.]*\) fsync-p50-ms.*/\1/p')
echo "idle fsync p50: $fsync_p50 ms"
echo

if want 1; then
echo "== table 1: relay server in-process, ledger vs in-memory ceiling (10 % retransmissions)"
n64=$((secs * 6000)); n16=$((secs * 4000)); n1=$((secs * 800))
raw="$work/gobench.txt"
for pair in "1:$n1" "16:$n16" "64:$n64"; do
  c=${pair%%:*} n=${pair##*:}
  go test -run '^$' -bench "Relay/conns=$c/" -benchtime "${n}x" ./internal/relay/ | grep '^BenchmarkRelay' >>"$raw"
done
awk -v fsync="$fsync_p50" '
  { split($1, p, "/"); c=p[2]; sub("conns=","",c); st=p[3]; sub("store=","",st); sub(/-[0-9]+$/,"",st)
    for (i=2;i<=NF;i++) { if ($(i+1)=="tx/s") t[c,st]=$i; if ($(i+1)=="p50-ms") p50[c,st]=$i; if ($(i+1)=="p99-ms") p99[c,st]=$i; if ($(i+1)=="cpu-us/tx") cpu[c,st]=$i; if ($(i+1)=="applied-twice") twice[c,st]=$i }
    cs[c]=1 }
  END {
    printf "%-6s %-14s %9s %8s %8s %10s %10s %9s %14s\n", "conns", "store", "tx/s", "p50ms", "p99ms", "cpu_us/tx", "vs_memory", "vs_floor", "applied_twice"
    n=split("1 16 64", order, " "); m=split("memory memory+fsync full normal full+metrics", stores, " ")
    for (k=1;k<=n;k++) { c=order[k]; if (!(c in cs)) continue
      for (j=1;j<=m;j++) { st=stores[j]; if (!((c,st) in t)) continue
        printf "%-6s %-14s %9.0f %8.3f %8.3f %10.1f %9.0f%% %8.0f%% %14s\n", c, st, t[c,st], p50[c,st], p99[c,st], cpu[c,st], 100*t[c,st]/t[c,"memory"], 100*t[c,st]/t[c,"memory+fsync"], ((c,st) in twice) ? twice[c,st] : "?" }
      if ((c,"full+metrics") in t) printf "%-6s %-14s metrics cost: %+.1f%% tx/s, %+.1f cpu_us/tx against full in this run\n", c, "", 100*(t[c,"full+metrics"]/t[c,"full"]-1), cpu[c,"full+metrics"]-cpu[c,"full"]
    }
    print ""
    print "memory+fsync is the floor of any durable ledger: the in-memory store whose writes share in-place fsyncs (no SQL)."
    if ((64,"full") in t) {
      printf "target 64 conns, FULL >= 75%% of memory:  %.0f%% (the floor reaches %.0f%%)\n", 100*t[64,"full"]/t[64,"memory"], 100*t[64,"memory+fsync"]/t[64,"memory"]
      printf "target ledger CPU <= 50 us/tx over memory: %+.1f us/tx at 64 conns (the floor adds %+.1f)\n", cpu[64,"full"]-cpu[64,"memory"], cpu[64,"memory+fsync"]-cpu[64,"memory"]
    }
    if ((1,"full") in t && fsync != "")
      printf "target 1 conn, FULL p50 <= memory p50 + 2 x fsync p50 + 0.15 = %.3f ms: %.3f ms (the floor: %.3f ms)\n", p50[1,"memory"]+2*fsync+0.15, p50[1,"full"], p50[1,"memory+fsync"]
  }' "$raw"

fi

# load_point DB CORE RELAY_ARGS... -- CHANNEL_ARGS...: runs one point of
# channel load against a fresh relay ($relay_bin, default bin/relay) and
# prints its row's numbers.
# pg_empty URL: the database without the ledger's schema (its tables and
# the settle functions that depend on tx's row type), for the next binary
# to create afresh.
pg_empty() {
  PGOPTIONS="-c client_min_messages=warning" psql "$1" -qc "DROP SCHEMA public CASCADE; CREATE SCHEMA public" >/dev/null
}
# stall_start, stall_stop: bin/stallmeter beside a measurement; stall_stop
# sets stall to the machine's worst stall meanwhile, in ms (a process that
# only sleeps 1 ms at a time woke up that late: a reply that slow was the
# machine's, not the relay's).
stall_start() {
  bin/stallmeter >"$work/stall.txt" &
  stallpid=$!
}
stall_stop() {
  kill -INT "$stallpid"; wait "$stallpid" || true
  stall=$(sed -n 's/^stalls: .*max_ms=\([0-9.]*\).*/\1/p' "$work/stall.txt")
}
load_point() {
  local db=$1 core=$2; shift 2
  local rargs=() cargs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do rargs+=("$1"); shift; done
  shift
  cargs=("$@")
  "${relay_bin:-bin/relay}" --db "$db" --listen 127.0.0.1:0 --core "$core" "${rargs[@]}" 2>"$work/relay.log" &
  rpid=$!
  relay=$(wait_listening "$work/relay.log")
  # Unmeasured warm-up, so that every point is the steady state: the
  # relay's pools connected, the core's connections open.
  if [ "${BENCH_WARMUP:-1}" -gt 0 ]; then
    bin/channel load --relay "$relay" --conns "$c" --duration "${BENCH_WARMUP:-1}" --dup-ratio 0.1 --amount 1 "${cargs[@]}" >/dev/null
  fi
  before=$(cpu_ticks "$rpid")
  read -r hb0 ht0 < <(host_ticks)
  stall_start
  out=$(bin/channel load --relay "$relay" --conns "$c" --duration "$secs" --dup-ratio 0.1 --amount 1 "${cargs[@]}")
  stall_stop
  after=$(cpu_ticks "$rpid")
  read -r hb1 ht1 < <(host_ticks)
  stop_relay "$rpid"
  tps=$(sed -n 's/.* tps=\([0-9]*\).*/\1/p' <<<"$out")
  sent=$(sed -n 's/.* sent=\([0-9]*\) .*/\1/p' <<<"$out")
  p50=$(sed -n 's/.*p50=\([0-9.]*\).*/\1/p' <<<"$out")
  p99=$(sed -n 's/.*p99=\([0-9.]*\).*/\1/p' <<<"$out")
  twice=$(sed -n 's/.*applied_twice=\([0-9]*\).*/\1/p' <<<"$out")
  cpu=$(( (after - before) * 10000 * 1000 / (sent > 0 ? sent : 1) / 1000 ))
  host_cpu=$(( (hb1 - hb0) * 10000 / (sent > 0 ? sent : 1) ))
  host_busy=$(( 100 * (hb1 - hb0) / (ht1 - ht0 > 0 ? ht1 - ht0 : 1) ))
}

if want 2; then
echo
echo "== table 2: real binaries, channel load --dup-ratio 0.1, ${secs}s per point"
bin/fixturecore --listen 127.0.0.1:0 --quiet 2>"$work/core.log" &
pids+=($!)
core="http://$(wait_listening "$work/core.log")"
printf "%-11s %-6s %9s %8s %8s %10s %14s %12s %9s\n" "ledger" "conns" "tx/s" "p50ms" "p99ms" "cpu_us/tx" "applied_twice" "host_us/tx" "host_busy"
pgurl=$(scripts/pg.sh start "$work/pg")   # a throwaway cluster, data on the repository's disk
pgstop() { scripts/pg.sh stop "$work/pg"; }
trap 'pgstop; cleanup' EXIT
t2=${BENCH_T2:-disk tmpfs postgres postgres-nc postgres-ha postgres-ha-nc}
if [[ " $t2 " == *" postgres-ha"* ]]; then
  # The HA cluster (its data in /tmp, on the same disk as /tmp here).
  go build -o "$work/hacluster" ./internal/testbed/hatest/hacluster
  "$work/hacluster" >"$work/ha.out" 2>"$work/ha.log" &
  hapid=$!
  pids+=($hapid)
  for _ in $(seq 1 1200); do grep -q '^node name=node3' "$work/ha.out" && break; sleep 0.1; done
  haurl=$(sed -n 's/^url=//p' "$work/ha.out")
  [ -n "$haurl" ] || { echo "bench: the HA cluster did not start" >&2; cat "$work/ha.log" >&2; exit 1; }
fi
if [[ " $t2 " == *" postgres-cd "* ]]; then
  # The same cluster with the server grouping commits (docs/deploy.md).
  cdurl=$(PG_EXTRA="${BENCH_COMMIT_DELAY:--c commit_delay=100 -c commit_siblings=4}" scripts/pg.sh start "$work/pgcd")
  trap 'scripts/pg.sh stop "$work/pgcd"; pgstop; cleanup' EXIT
fi
go build -o "$work/" ./e2e/testdata/noconfirmrelay
for where in $t2; do
  case "$where" in
    disk) dir="$work" ;;
    tmpfs) dir=$(mktemp -d /dev/shm/dedup-bench.XXXXXX) ;;
  esac
  relay_bin=bin/relay
  counts="1 16 64"
  case "$where" in *-nc) relay_bin="$work/noconfirmrelay" counts="16 64" ;; esac
  for c in $counts; do
    if [[ "$where" == postgres* ]]; then
      db="$pgurl"
      [[ "$where" == postgres-ha* ]] && db="$haurl"
      [ "$where" = postgres-cd ] && db="$cdurl"
      pg_empty "$db"
    else
      rm -f "$dir"/relay.db*
      db="$dir/relay.db"
    fi
    sampler=""
    if { [ "$where" = postgres ] || [ "$where" = postgres-ha ]; } && [ "$c" = 64 ]; then
      # What the primary's dedup sessions wait for, sampled every 0.1 s.
      ( end=$((SECONDS + secs + 1))
        while [ $SECONDS -lt $end ]; do
          psql "$db" -tAF' ' -c "SELECT coalesce(wait_event_type,'CPU'), coalesce(wait_event,'running') FROM pg_stat_activity WHERE application_name='dedup' AND state='active'" 2>/dev/null
          sleep 0.1
        done >"$work/waits.txt" ) &
      sampler=$!
    fi
    load_point "$db" "$core" -- --core "$core"
    if [ -n "$sampler" ]; then
      wait "$sampler" 2>/dev/null || true
      waits_report+="$where at 64 conns: what the primary's active dedup sessions waited for (share of samples):"$'\n'
      waits_report+=$(sort "$work/waits.txt" | uniq -c | sort -rn | head -n 8 |
        awk -v n="$(wc -l <"$work/waits.txt")" '{ printf "    %5.1f%%  %s %s\n", 100*$1/(n>0?n:1), $2, $3 }')$'\n' 
    fi
    printf "%-11s %-6s %9s %8s %8s %10s %14s %12s %8s%%\n" "$where" "$c" "$tps" "$p50" "$p99" "$cpu" "$twice" "$host_cpu" "$host_busy" | tee -a "$work/table2.txt"
  done
done
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
pids=()
relay_bin=bin/relay
awk '$1 == "postgres-ha" && $2 == 64 { ha = $3 } $1 == "postgres" && $2 == 64 { pg = $3 } $1 == "disk" && $2 == 64 { full = $3 }
  { tps[$1, $2] = $3 }
  END { if (full > 0 && pg != "") printf "target: postgres at 64 conns >= 80%% of SQLite FULL: %.0f%% (%d against %d tx/s)\n", 100*pg/full, pg, full
    if (full > 0 && ha != "") printf "target: postgres-ha at 64 conns >= 50%% of SQLite FULL: %.0f%% (%d against %d tx/s)\n", 100*ha/full, ha, full
    n = split("postgres postgres-ha", ls, " ")
    for (i = 1; i <= n; i++) for (c = 16; c <= 64; c *= 4) if ((ls[i] "-nc", c) in tps && tps[ls[i] "-nc", c] > 0)
      printf "rule 13 confirmation on %s at %d conns: %d tx/s with it, %d without: %+.1f%%\n", ls[i], c, tps[ls[i], c], tps[ls[i] "-nc", c], 100*(tps[ls[i], c]/tps[ls[i] "-nc", c]-1) }' "$work/table2.txt"
if [ -n "${waits_report:-}" ]; then
  echo -n "$waits_report"
fi
fi

if want 3; then
echo
echo "== table 3: TLS on both links against plain, SQLite FULL on the disk, ${secs}s per point"
pki=$(scripts/certs.sh "$work/pki")
bin/fixturecore --listen 127.0.0.1:0 --quiet 2>"$work/core.log" &
pids+=($!)
plain_core="http://$(wait_listening "$work/core.log")"
bin/fixturecore --listen 127.0.0.1:0 --quiet --tls-cert "$pki/server.pem" --tls-key "$pki/server-key.pem" \
  --client-ca "$pki/ca.pem" 2>"$work/tcore.log" &
pids+=($!)
tls_core="https://$(wait_listening "$work/tcore.log")"
core_cli=(--core-ca "$pki/ca.pem" --core-cert "$pki/relay.pem" --core-key "$pki/relay-key.pem")
printf "%-6s %-6s %9s %8s %8s %10s %14s %13s\n" "links" "conns" "tx/s" "p50ms" "p99ms" "cpu_us/tx" "applied_twice" "tls_vs_plain"
for c in 1 16 64; do
  for links in plain tls; do
    rm -f "$work"/relay.db*
    if [ "$links" = plain ]; then
      load_point "$work/relay.db" "$plain_core" -- --core "$plain_core"
      plain_tps=$tps
      ratio="-"
    else
      load_point "$work/relay.db" "$tls_core" --tls-cert "$pki/server.pem" --tls-key "$pki/server-key.pem" \
        --client-ca "$pki/ca.pem" "${core_cli[@]}" -- --tls --tls-ca "$pki/ca.pem" --tls-cert "$pki/mob.pem" \
        --tls-key "$pki/mob-key.pem" --core "$tls_core"
      ratio=$(awk -v a="$tps" -v b="$plain_tps" 'BEGIN { printf "%.0f%%", 100*a/(b>0?b:1) }')
    fi
    printf "%-6s %-6s %9s %8s %8s %10s %14s %13s\n" "$links" "$c" "$tps" "$p50" "$p99" "$cpu" "$twice" "$ratio"
  done
done
echo "target: TLS costs at most 25 % of the plain relay's tx/s at 64 connections (tls_vs_plain >= 75 %)"
fi

if want 4; then
echo
t4_ledger=${BENCH_T4_LEDGER:-sqlite}
rounds=${BENCH_ROUNDS:-1}
echo "== table 4: the hot path before ($base) and after (this checkout), $t4_ledger ledger, ${secs}s per point, $rounds round(s)"
git worktree add -q --detach "$work/base" "$base"
(cd "$work/base" && go build -o "$work/base-bin/" ./relay)
git worktree remove --force "$work/base"
bin/fixturecore --listen 127.0.0.1:0 --quiet 2>"$work/core.log" &
pids+=($!)
core="http://$(wait_listening "$work/core.log")"
if [ "$t4_ledger" = postgres ]; then
  pgurl4=$(scripts/pg.sh start "$work/pg4")
  trap 'scripts/pg.sh stop "$work/pg4"; cleanup' EXIT
fi
printf "%-8s %-6s %9s %8s %8s %10s %14s\n" "relay" "conns" "tx/s" "p50ms" "p99ms" "cpu_us/tx" "applied_twice"
for c in 1 16 64; do
  for _ in $(seq 1 "$rounds"); do
    for which in before after; do
      if [ "$t4_ledger" = postgres ]; then
        pg_empty "$pgurl4"
        db4=$pgurl4
      else
        rm -f "$work"/relay.db*
        db4="$work/relay.db"
      fi
      relay_bin=bin/relay
      [ "$which" = before ] && relay_bin="$work/base-bin/relay"
      load_point "$db4" "$core" -- --core "$core"
      printf "%-8s %-6s %9s %8s %8s %10s %14s\n" "$which" "$c" "$tps" "$p50" "$p99" "$cpu" "$twice" | tee -a "$work/table4.txt"
    done
  done
done
relay_bin=bin/relay
awk '{ t[$1, $2] += $3; n[$1, $2]++ } END { for (c = 1; c <= 64; c *= 4) if ((("before", c) in t) && t["before", c] > 0)
  printf "after / before at %d conns: %.0f%% (mean %d against %d tx/s)\n", c, 100*t["after", c]/t["before", c], t["after", c]/n["after", c], t["before", c]/n["before", c] }' "$work/table4.txt"
fi

# preload_sqlite FILE ROWS: one INSERT ... SELECT of ROWS DONE rows, oldest
# first, updated_at spread over the last 7 days, GUIDs of the channels' form
# with 21 random digits (tables 5 and 7).
preload_sqlite() {
  sqlite3 "$1" <schema.sql
  [ "$2" -gt 0 ] || return 0
  sqlite3 -cmd ".parameter set :rows $2" "$1" >/dev/null <<'SQL'
PRAGMA journal_mode=OFF;
PRAGMA synchronous=OFF;
PRAGMA cache_size=-1000000;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < :rows - 1),
r AS (SELECT datetime('now', printf('-%d seconds', 604800 - i * 604800 / :rows)) AS ts,
             CASE i % 3 WHEN 0 THEN 'MOB' WHEN 1 THEN 'IBK' ELSE 'ATM' END AS ch,
             printf('%021d', abs(random() % 1000000000000000000)) AS rnd FROM n),
g AS (SELECT ts, ch, strftime('%Y%m%d', ts) || ch || rnd AS guid, strftime('%Y%m%d%H%M%S', ts) AS sent FROM r)
INSERT OR IGNORE INTO tx SELECT guid, 'TRF00001', 'DONE', '0000',
  CAST(printf('00000127%sTRF00001S    %s%s  1102003000400111020030004002%015drent november       ', guid, ch, sent, 150000) AS BLOB),
  CAST(printf('00000109%sTRF00001R0000%s%s  C%015d%015d%s', guid, ch, sent, 42, 99850000, sent) AS BLOB),
  1, ts FROM g;
PRAGMA journal_mode=WAL;
SQL
}
if want 5; then
echo
echo "== table 5: the ledger's size, SQLite FULL on the disk and PostgreSQL, channel load --dup-ratio 0.1, ${secs}s per point"
scale=${BENCH_SCALE:-0 1000000 10000000}
largest=$(tr ' ' '\n' <<<"$scale" | sort -n | tail -n1)
bin/fixturecore --listen 127.0.0.1:0 --quiet 2>"$work/core.log" &
pids+=($!)
core="http://$(wait_listening "$work/core.log")"
pgurl=$(scripts/pg.sh start "$work/pg5")
trap 'scripts/pg.sh stop "$work/pg5"; cleanup' EXIT
# preload_postgres URL ROWS: as preload_sqlite (above), on PostgreSQL.
preload_postgres() {
  pg_empty "$1"
  bin/purge --db "$1" --dry-run >/dev/null   # creates the schema (inspect creates no ledger)
  [ "$2" -gt 0 ] || return 0
  psql "$1" -v rows="$2" -q <<'SQL'
INSERT INTO tx
SELECT guid, 'TRF00001', 'DONE', '0000',
  convert_to('00000127' || guid || 'TRF00001S    ' || ch || sent || '  1102003000400111020030004002' || lpad('150000', 15, '0') || 'rent november       ', 'UTF8'),
  convert_to('00000109' || guid || 'TRF00001R0000' || ch || sent || '  C' || lpad('42', 15, '0') || lpad('99850000', 15, '0') || sent, 'UTF8'),
  1, ts
FROM (SELECT ts, ch, to_char(ts AT TIME ZONE 'UTC', 'YYYYMMDD') || ch || lpad((random() * 1e18)::bigint::text, 21, '0') AS guid,
             to_char(ts AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS') AS sent
      FROM (SELECT now() - make_interval(secs => 604800 - i * 604800.0 / :rows) AS ts,
                   (ARRAY['MOB','IBK','ATM'])[i % 3 + 1] AS ch
            FROM generate_series(0, :rows - 1) AS i) AS r) AS g
ON CONFLICT (guid) DO NOTHING;
VACUUM ANALYZE tx;
SQL
}
# purge_under_load DB PURGE_BIN: purge --days 3, for at most purge_secs
# (then interrupted), while 16 connections send through a fresh relay;
# sets deleted (rows before less rows after), p0, p1 (the purge's start
# and end)
# and the load's tps, p50, p99, max, twice.
purge_under_load() {
  bin/relay --db "$1" --listen 127.0.0.1:0 --core "$core" 2>"$work/relay.log" &
  rpid=$!
  relay=$(wait_listening "$work/relay.log")
  bin/channel load --relay "$relay" --conns 16 --duration 3600 --dup-ratio 0.1 --amount 1 --core "$core" >"$work/purgeload.txt" &
  lpid=$!
  sleep 1
  before_rows=$(count_rows "$1")
  stall_start
  p0=$(date +%s.%N)
  # At most purge_secs: on the largest ledgers a whole purge takes minutes.
  timeout -s INT "$purge_secs" "$2" --db "$1" --days 3 >"$work/purge.out" 2>"$work/purge.log" || true
  p1=$(date +%s.%N)
  kill -INT "$lpid"; wait "$lpid" || true
  stall_stop
  stop_relay "$rpid"
  out=$(cat "$work/purgeload.txt")
  deleted=$((before_rows - $(count_rows "$1")))
  tps=$(sed -n 's/.* tps=\([0-9]*\).*/\1/p' <<<"$out")
  p50=$(sed -n 's/.*p50=\([0-9.]*\).*/\1/p' <<<"$out")
  p99=$(sed -n 's/.*p99=\([0-9.]*\).*/\1/p' <<<"$out")
  max=$(sed -n 's/.*max=\([0-9.]*\).*/\1/p' <<<"$out")
  twice=$(sed -n 's/.*applied_twice=\([0-9]*\).*/\1/p' <<<"$out")
}
count_rows() {
  if [[ "$1" == postgres* ]]; then psql "$1" -tAc "SELECT count(*) FROM tx"
  else sqlite3 "$1" "SELECT count(*) FROM tx INDEXED BY tx_state_updated"; fi
}
purge_secs=${BENCH_PURGE_SECS:-30}
purge_base=${BENCH_PURGE_BASE:-}
if [ -n "$purge_base" ]; then
  git worktree add -q --detach "$work/pbase" "$purge_base"
  (cd "$work/pbase" && go build -o "$work/purge-base/" ./purge)
  git worktree remove --force "$work/pbase"
fi
# settle_disk DB: a preload leaves gigabytes of dirty pages (SQLite wrote
# with synchronous=OFF; PostgreSQL's checkpoint is still to come); write
# them out before measuring, or the first points pay for the preload's
# writeback in every fsync.
settle_disk() {
  if [[ "$1" == postgres* ]]; then psql "$1" -qc CHECKPOINT; fi
  sync
}
printf "%-9s %-9s %-6s %9s %8s %8s %8s %9s %10s %14s\n" "ledger" "rows" "conns" "tx/s" "p50ms" "p99ms" "maxms" "stall_ms" "vs_empty" "applied_twice"
for backend in ${BENCH_LEDGERS:-sqlite postgres}; do
  for rows in $scale; do
    if [ "$backend" = sqlite ]; then
      rm -f "$work"/scale.db*
      db="$work/scale.db"
    else
      db="$pgurl"
    fi
    t0=$(date +%s.%N)
    "preload_$backend" "$db" "$rows"
    t1=$(date +%s.%N)
    settle_disk "$db"
    size=$( [ "$backend" = sqlite ] && du -h "$work/scale.db" | cut -f1 ||
      psql "$db" -tAc "SELECT pg_size_pretty(pg_total_relation_size('tx'))")
    echo "$backend: preloaded $rows rows in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b-a }') s ($size)" >>"$work/preload.txt"
    for c in 16 64; do
      load_point "$db" "$core" -- --core "$core"
      max=$(sed -n 's/.*max=\([0-9.]*\).*/\1/p' <<<"$out")
      [ "$rows" = "${scale%% *}" ] && empty[$c]=$tps
      ratio=$(awk -v a="$tps" -v b="${empty[$c]}" 'BEGIN { printf "%.2fx", a/(b>0?b:1) }')
      printf "%-9s %-9s %-6s %9s %8s %8s %8s %9s %10s %14s\n" "$backend" "$rows" "$c" "$tps" "$p50" "$p99" "$max" "$stall" "$ratio" "$twice"
      [ "$c" = 16 ] && here16=$tps
    done
    [ "$rows" = "$largest" ] && [ "$rows" -gt 0 ] || continue
    for purge_bin in ${purge_base:+"$work/purge-base/purge"} bin/purge; do
      if [ "$purge_bin" = bin/purge ] && [ -n "$purge_base" ]; then
        [ "$backend" = sqlite ] && rm -f "$work"/scale.db*
        "preload_$backend" "$db" "$rows"   # the base purge emptied half of it
        settle_disk "$db"
      fi
      purge_under_load "$db" "$purge_bin"
      which=after
      [ "$purge_bin" = bin/purge ] || which="before ($purge_base)"
      ratio=$(awk -v a="$tps" -v b="$here16" 'BEGIN { printf "%.2fx", a/(b>0?b:1) }')
      printf "%-9s %-9s %-6s %9s %8s %8s %8s %9s %10s %14s   <- during purge --days 3, %s\n" "$backend" "$rows" 16 "$tps" "$p50" "$p99" "$max" "$stall" "$ratio" "$twice" "$which"
      awk -v n="${deleted:-0}" -v a="$p0" -v b="$p1" -v be="$backend" -v w="$which" 'BEGIN { printf "%s: purge (%s) deleted %d rows in %.1f s: %.0f rows/s\n", be, w, n, b-a, n/(b-a) }' >>"$work/purge.txt"
    done
  done
done
cat "$work/preload.txt" "$work/purge.txt"
echo "targets: >= 0.95x of the empty ledger at the largest size; purge >= 100000 rows/s with the load >= 0.9x and no reply over 50 ms"
fi

if want 6; then
echo
echo "== table 6: the cost of tracing (SQLite FULL on the disk), ${secs}s per point, ${BENCH_ROUNDS:-3} rounds alternating"
bin/fixturecore --listen 127.0.0.1:0 --quiet 2>"$work/core6.log" &
pids+=($!)
core6="http://$(wait_listening "$work/core6.log")"
bin/otlpsink --discard >"$work/sink.out" 2>"$work/sink.log" &
sinkpid=$!; pids+=($sinkpid)
live="http://$(wait_listening "$work/sink.log")"
bin/otlpsink --hang >/dev/null 2>"$work/hang.log" &
pids+=($!)
hung="http://$(wait_listening "$work/hang.log")"
down="http://$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print("127.0.0.1:%d" % s.getsockname()[1])')"
: >"$work/table6.txt"
for round in $(seq 1 "${BENCH_ROUNDS:-3}"); do
  for c in ${BENCH_T6_CONNS:-16 64}; do
    for mode in ${BENCH_T6_MODES:-off live live-10% down hanging}; do
      rm -f "$work"/trace.db*
      unset OTEL_TRACES_SAMPLER OTEL_TRACES_SAMPLER_ARG
      case $mode in
        off) unset OTEL_EXPORTER_OTLP_ENDPOINT ;;
        live) export OTEL_EXPORTER_OTLP_ENDPOINT=$live ;;
        live-10%) export OTEL_EXPORTER_OTLP_ENDPOINT=$live OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=0.1 ;;
        down) export OTEL_EXPORTER_OTLP_ENDPOINT=$down ;;
        hanging) export OTEL_EXPORTER_OTLP_ENDPOINT=$hung ;;
      esac
      load_point "$work/trace.db" "$core6" -- --core "$core6"
      unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_TRACES_SAMPLER OTEL_TRACES_SAMPLER_ARG
      echo "$mode $c $tps $p50 $p99 $cpu $twice" >>"$work/table6.txt"
    done
  done
done
kill -TERM "$sinkpid"; wait "$sinkpid" 2>/dev/null || true
printf "%-8s %-6s %9s %15s %8s %8s %10s %8s %14s\n" "tracing" "conns" "tx/s" "spread" "p50ms" "p99ms" "cpu_us/tx" "vs_off" "applied_twice"
sort -k2,2n -k1,1 -k3,3n "$work/table6.txt" | awk '
  { k=$1" "$2; n[k]++; tps[k,n[k]]=$3; p50[k,n[k]]=$4; p99[k,n[k]]=$5; cpu[k,n[k]]=$6; tw[k]+=$7; modes[$1]=1; cs[$2]=1 }
  function med(a, k, m,   i, v, tmp, j, x) { for (i=1;i<=m;i++) v[i]=a[k,i]
    for (i=1;i<=m;i++) for (j=i+1;j<=m;j++) if (v[j]+0<v[i]+0) { x=v[i]; v[i]=v[j]; v[j]=x }
    return v[int((m+1)/2)] }
  END { split("16 64", order, " "); split("off live live-10% down hanging", ms, " ")
    for (i=1;i<=2;i++) { c=order[i]; off=med(tps, "off " c, n["off " c])
      for (j=1;j<=5;j++) { k=ms[j]" "c; if (!(k in n)) continue; m=n[k]
        lo=tps[k,1]; hi=tps[k,m]
        printf "%-8s %-6s %9d %15s %8s %8s %10s %7.2fx %14d\n", ms[j], c, med(tps,k,m), lo"-"hi, med(p50,k,m), med(p99,k,m), med(cpu,k,m), med(tps,k,m)/(off>0?off:1), tw[k] } } }'
echo "the live endpoint received: $(cat "$work/sink.out")"
echo "target: tracing on (live) >= 0.95x of off at 64 connections; off is the release default (no OTEL_ variable: no exporter)"
fi

if want 7; then
echo
echo "== table 7: costs that grow with the ledger (SQLite FULL on the disk), this checkout against ${BENCH_SCALE_BASE:-576787c}"
sbase=${BENCH_SCALE_BASE:-576787c}
git worktree add -q --detach "$work/sbase" "$sbase"
(cd "$work/sbase" && go build -o "$work/base-bin/" ./relay ./resolve ./reprocess ./purge ./settle ./inspect)
git worktree remove --force "$work/sbase"
bin/fixturecore --listen 127.0.0.1:0 --quiet 2>"$work/core7.log" &
pids+=($!)
core7="http://$(wait_listening "$work/core7.log")"
drop_cache() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || echo "(page cache not dropped: not root)" >&2; }
walltime() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>&1 || true; t1=$(date +%s.%N); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b-a }'; }
printf "%-9s %-7s %-10s %9s %9s %9s %9s %9s\n" "rows" "build" "cache" "resolve_s" "reproc_s" "purge_s" "settle_s" "inspect_s"
: >"$work/table7relay.txt"
for rows in ${BENCH_SCALE7:-0 10000000}; do
  db="$work/scale7.db"
  rm -f "$db"*
  t0=$(date +%s)
  preload_sqlite "$db" "$rows"
  sync
  echo "preloaded $rows rows in $(( $(date +%s) - t0 )) s ($(du -h "$db" | cut -f1))" >>"$work/preload7.txt"
  g=$(sqlite3 "$db" "SELECT guid FROM tx LIMIT 1" 2>/dev/null || true)
  for build in before after; do
    dir=bin; [ "$build" = before ] && dir="$work/base-bin"
    for cache in warm cold; do
      [ "$cache" = cold ] && drop_cache
      r=$(walltime "$dir/resolve" --db "$db" --core "$core7" --min-age 300)
      [ "$cache" = cold ] && drop_cache
      p=$(walltime "$dir/reprocess" --db "$db" --core "$core7")
      [ "$cache" = cold ] && drop_cache
      u=$(walltime "$dir/purge" --db "$db" --days 30)
      [ "$cache" = cold ] && drop_cache
      s7=$(walltime "$dir/settle" --db "$db" list)
      [ "$cache" = cold ] && drop_cache
      i=$(walltime "$dir/inspect" --db "$db" "${g:-20261202MOB000000000000000000000}")
      printf "%-9s %-7s %-10s %9s %9s %9s %9s %9s\n" "$rows" "$build" "$cache" "$r" "$p" "$u" "$s7" "$i"
      # The relay: its first 10 s after a start, then its steady state
      # once its background check has ended.
      [ "$cache" = cold ] && drop_cache
      # With its metrics on, as deployed: the gauges' refresh is part of
      # what a large ledger costs.
      "$dir/relay" --db "$db" --listen 127.0.0.1:0 --core "$core7" --metrics-listen 127.0.0.1:0 2>"$work/relay7.log" &
      rpid=$!
      relay=$(wait_listening "$work/relay7.log")
      first=$(bin/channel load --relay "$relay" --conns 16 --duration 10 --dup-ratio 0.1 --amount 1 --core "$core7")
      # The old relay's whole-file check ends in seconds to minutes: its
      # steady state is after it. This checkout's scrub runs for as long as
      # the ledger is large, throttled, so its steady state includes it:
      # measured 20 s after the start.
      if [ "$build" = before ]; then
        for _ in $(seq 1 1200); do grep -q "ledger check" "$work/relay7.log" && break; sleep 0.5; done
      else
        sleep 10
      fi
      checked=$(grep -o 'ledger check [a-z]*.*took_s=[0-9.]*' "$work/relay7.log" | sed 's/.*took_s=/took_s=/' | head -n1)
      steady=$(bin/channel load --relay "$relay" --conns 16 --duration "$secs" --dup-ratio 0.1 --amount 1 --core "$core7")
      stop_relay "$rpid"
      f=$(sed -n 's/.* tps=\([0-9]*\).*/\1/p' <<<"$first"); st=$(sed -n 's/.* tps=\([0-9]*\).*/\1/p' <<<"$steady")
      fmax=$(sed -n 's/.*max=\([0-9.]*\).*/\1/p' <<<"$first")
      tw=$(( $(sed -n 's/.*applied_twice=\([0-9]*\).*/\1/p' <<<"$first") + $(sed -n 's/.*applied_twice=\([0-9]*\).*/\1/p' <<<"$steady") ))
      echo "$rows $build $cache $f $st $fmax ${checked:-none} $tw" >>"$work/table7relay.txt"
    done
  done
done
echo
printf "%-9s %-7s %-6s %12s %11s %10s %11s %16s %14s\n" "rows" "build" "cache" "first10s_tps" "steady_tps" "first_10s" "first_maxms" "background_check" "applied_twice"
awk '{ printf "%-9s %-7s %-6s %12s %11s %9.2fx %11s %16s %14s\n", $1, $2, $3, $4, $5, $4/($5>0?$5:1), $6, $7, $8 }' "$work/table7relay.txt"
cat "$work/preload7.txt"
echo "targets: a job with nothing to do under 1 s at every size; the relay's first 10 s within 0.9x of its steady state"
fi

if want 8; then
echo
echo "== table 8: the alternative a team would build: the relay on Redis (SET NX, appendonly yes, appendfsync always) beside dedup on SQLite FULL, ${secs}s per point, ${BENCH_ROUNDS:-5} rounds alternating"
command -v redis-server >/dev/null || { echo "table 8 needs Debian's redis-server (apt-get install redis-server)" >&2; exit 1; }
bin/fixturecore --listen 127.0.0.1:0 --quiet 2>"$work/core8.log" &
pids+=($!)
core8="http://$(wait_listening "$work/core8.log")"
rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$work/redis"
# As durable as dedup's ledger on one host: every write appended to the
# AOF and fsynced before the reply; no RDB snapshots; data on the same disk.
redis-server --port "$rport" --bind 127.0.0.1 --dir "$work/redis" --appendonly yes --appendfsync always \
  --save "" --daemonize no --logfile "$work/redis.log" &
pids+=($!)
for _ in $(seq 1 100); do redis-cli -p "$rport" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
[ "$(redis-cli -p "$rport" config get appendfsync | tail -n1)" = always ] || { echo "redis-server: appendfsync is not always" >&2; exit 1; }
: >"$work/table8.txt"
for round in $(seq 1 "${BENCH_ROUNDS:-5}"); do
  for c in 1 16 64; do
    for mode in dedup redis; do
      # Alternate which goes first, round by round.
      if [ $((round % 2)) -eq 0 ]; then
        if [ "$mode" = dedup ]; then mode=redis; else mode=dedup; fi
      fi
      rm -f "$work"/alt.db*
      relay_bin=bin/relay
      if [ "$mode" = redis ]; then
        redis-cli -p "$rport" flushall >/dev/null
        export REDIS_ADDR=127.0.0.1:$rport
        relay_bin=bin/redisrelay
      fi
      load_point "$work/alt.db" "$core8" -- --core "$core8"
      unset REDIS_ADDR
      relay_bin=bin/relay
      echo "$mode $c $tps $p50 $p99 $cpu $twice" >>"$work/table8.txt"
    done
  done
done
printf "%-7s %-6s %9s %15s %8s %8s %10s %9s %14s\n" "relay" "conns" "tx/s" "spread" "p50ms" "p99ms" "cpu_us/tx" "vs_redis" "applied_twice"
sort -k2,2n -k1,1 -k3,3n "$work/table8.txt" | awk '
  { k=$1" "$2; n[k]++; tps[k,n[k]]=$3; p50[k,n[k]]=$4; p99[k,n[k]]=$5; cpu[k,n[k]]=$6; tw[k]+=$7 }
  function med(a, k, m,   i, v, j, x) { for (i=1;i<=m;i++) v[i]=a[k,i]
    for (i=1;i<=m;i++) for (j=i+1;j<=m;j++) if (v[j]+0<v[i]+0) { x=v[i]; v[i]=v[j]; v[j]=x }
    return v[int((m+1)/2)] }
  END { split("1 16 64", order, " "); split("dedup redis", ms, " ")
    for (i=1;i<=3;i++) { c=order[i]; r=med(tps, "redis " c, n["redis " c])
      for (j=1;j<=2;j++) { k=ms[j]" "c; if (!(k in n)) continue; m=n[k]
        printf "%-7s %-6s %9d %15s %8s %8s %10s %8.2fx %14d\n", ms[j], c, med(tps,k,m), tps[k,1]"-"tps[k,m], med(p50,k,m), med(p99,k,m), med(cpu,k,m), med(tps,k,m)/(r>0?r:1), tw[k] } } }'
echo "each round, tx/s:"
awk '{ v[$1" "$2]=v[$1" "$2]" "$3 } END { for (k in v) print "  " k ":" v[k] }' "$work/table8.txt" | sort -k2,2n -k1,1
echo "target: dedup's median >= 1.05x of the Redis relay's at 1, 16 and 64 connections (cpu_us/tx is the relay process's; redis-server's own is not in it)"
fi

if want 9; then
echo
soak_rows=${BENCH_SOAK_ROWS:-1000000} soak_secs=${BENCH_SOAK_SECS:-600}
echo "== table 9: the soak: a SQLite ledger (FULL, on the disk) of $soak_rows rows over the last 7 days, the load at half the relay's peak for ${soak_secs}s, purge --days 3 every minute (as dedup-purge.timer)"
bin/fixturecore --listen 127.0.0.1:0 --quiet 2>"$work/core9.log" &
pids+=($!)
core9="http://$(wait_listening "$work/core9.log")"
db9="$work/soak.db"
rm -f "$db9"*
preload_sqlite "$db9" "$soak_rows"
sync
bin/relay --db "$db9" --listen 127.0.0.1:0 --core "$core9" 2>"$work/relay9.log" &
rpid=$!
relay=$(wait_listening "$work/relay9.log")
peak=$(bin/channel load --relay "$relay" --conns 16 --duration 5 --dup-ratio 0.1 --amount 1 | sed -n 's/.* tps=\([0-9]*\).*/\1/p')
rate=$(( peak / 2 ))
echo "peak at 16 connections: $peak tx/s; the soak sends $rate tx/s"
bin/channel load --relay "$relay" --conns 16 --rate "$rate" --duration "$soak_secs" --dup-ratio 0.1 --amount 1 --core "$core9" >"$work/soakload.txt" &
lpid=$!
size() { du -k --apparent-size "$1" 2>/dev/null | cut -f1 || echo 0; }
printf "%-7s %12s %12s %10s %10s %14s\n" "minute" "older_3_days" "rows" "file_MB" "wal_MB" "purge_deleted"
t0=$(date +%s)
for m in $(seq 1 $(( soak_secs / 60 ))); do
  deleted=$(timeout -s INT 55 bin/purge --db "$db9" --days 3 2>/dev/null | sed -n 's/^purge: deleted=\([0-9]*\).*/\1/p' || true)
  old=$(sqlite3 "$db9" "SELECT count(*) FROM tx WHERE state='DONE' AND updated_at <= datetime('now','-3 days')")
  rows=$(sqlite3 "$db9" "SELECT count(*) FROM tx")
  printf "%-7s %12s %12s %10d %10d %14s\n" "$m" "$old" "$rows" $(( $(size "$db9") / 1024 )) $(( $(size "$db9-wal") / 1024 )) "${deleted:-interrupted}"
  # The next minute starts where the timer's would.
  while [ $(( $(date +%s) - t0 )) -lt $(( m * 60 )) ]; do sleep 1; done
done
wait "$lpid" || true
stop_relay "$rpid"
cat "$work/soakload.txt"
echo "target: older_3_days falls to 0 and file_MB stops growing (freed pages reused); applied_twice 0"
fi

if want 10; then
echo
rrows=${BENCH_RECONCILE_ROWS:-10000000}
echo "== table 10: reconcile, a journal of $rrows lines against a ledger of $rrows rows (random GUIDs, all of yesterday), beside a relay serving 16 connections"
bin/fixturecore --listen 127.0.0.1:0 --quiet 2>"$work/core10.log" &
pids+=($!)
core10="http://$(wait_listening "$work/core10.log")"
day=$(date -u -d yesterday +%Y%m%d)
# journal_of DB: the journal the core would have written for the ledger's
# rows of yesterday (ref, balance and processed_at from each stored reply).
journal_sqlite() {
  echo "guid,ref,from,to,amount,balance,processed_at"
  sqlite3 -csv "$1" "SELECT guid, rtrim(substr(response, 65, 16)), substr(request, 65, 14), substr(request, 79, 14),
    CAST(substr(request, 93, 15) AS INTEGER), CAST(substr(response, 81, 15) AS INTEGER), substr(response, 96, 14) FROM tx"
}
journal_postgres() {
  echo "guid,ref,from,to,amount,balance,processed_at"
  psql "$1" -qAt -F, -c "SELECT guid, rtrim(convert_from(substring(response from 65 for 16), 'UTF8')), convert_from(substring(request from 65 for 14), 'UTF8'),
    convert_from(substring(request from 79 for 14), 'UTF8'), convert_from(substring(request from 93 for 15), 'UTF8')::bigint,
    convert_from(substring(response from 81 for 15), 'UTF8')::bigint, convert_from(substring(response from 96 for 14), 'UTF8') FROM tx"
}
# preload10_sqlite FILE ROWS: ROWS DONE/0000 rows of yesterday (UTC), random GUIDs.
preload10_sqlite() {
  sqlite3 "$1" <schema.sql
  sqlite3 -cmd ".parameter set :rows $2" "$1" >/dev/null <<'SQL'
PRAGMA journal_mode=OFF;
PRAGMA synchronous=OFF;
PRAGMA cache_size=-1000000;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < :rows - 1),
r AS (SELECT datetime(date('now', '-1 day'), printf('+%d seconds', i * 86399 / :rows)) AS ts,
             CASE i % 3 WHEN 0 THEN 'MOB' WHEN 1 THEN 'IBK' ELSE 'ATM' END AS ch,
             printf('%021d', abs(random() % 1000000000000000000)) AS rnd, i FROM n),
g AS (SELECT ts, ch, i, strftime('%Y%m%d', ts) || ch || rnd AS guid, strftime('%Y%m%d%H%M%S', ts) AS sent FROM r)
INSERT OR IGNORE INTO tx SELECT guid, 'TRF00001', 'DONE', '0000',
  CAST(printf('%sTRF00001S    %s%s  1102003000400111020030004002%015drent november       ', guid, ch, sent, 150000) AS BLOB),
  CAST(printf('%sTRF00001R0000%s%s  C%015d%015d%s', guid, ch, sent, i + 1, 99850000, sent) AS BLOB),
  1, ts FROM g;
PRAGMA journal_mode=WAL;
SQL
}
preload10_postgres() {
  pg_empty "$1"
  bin/purge --db "$1" --dry-run >/dev/null   # creates the schema (inspect creates no ledger)
  psql "$1" -v rows="$2" -q <<'SQL'
INSERT INTO tx
SELECT guid, 'TRF00001', 'DONE', '0000',
  convert_to(guid || 'TRF00001S    ' || ch || sent || '  1102003000400111020030004002' || lpad('150000', 15, '0') || 'rent november       ', 'UTF8'),
  convert_to(guid || 'TRF00001R0000' || ch || sent || '  C' || lpad((i + 1)::text, 15, '0') || lpad('99850000', 15, '0') || sent, 'UTF8'),
  1, ts
FROM (SELECT ts, ch, i, to_char(ts AT TIME ZONE 'UTC', 'YYYYMMDD') || ch || lpad((random() * 1e18)::bigint::text, 21, '0') AS guid,
             to_char(ts AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS') AS sent
      FROM (SELECT (current_date - 1)::timestamp AT TIME ZONE 'UTC' + make_interval(secs => i * 86399.0 / :rows) AS ts,
                   (ARRAY['MOB','IBK','ATM'])[i % 3 + 1] AS ch, i
            FROM generate_series(0, :rows - 1) AS i) AS r) AS g
ON CONFLICT (guid) DO NOTHING;
VACUUM ANALYZE tx;
CHECKPOINT;
SQL
}
printf "%-9s %10s %10s %9s %8s %9s %12s %12s %9s %8s %8s %14s\n" "ledger" "lines" "seconds" "lines/s" "anon_MB" "resid_MB" "alone_tx/s" "beside_tx/s" "beside" "maxms" "stall_ms" "applied_twice"
for backend in ${BENCH_LEDGERS:-sqlite postgres}; do
  if [ "$backend" = postgres ]; then
    pgurl10=${pgurl10:-$(scripts/pg.sh start "$work/pg10")}
    db10=$pgurl10
  else
    db10="$work/reconcile.db"
    rm -f "$db10"*
  fi
  t0=$(date +%s)
  "preload10_$backend" "$db10" "$rrows"
  "journal_$backend" "$db10" >"$work/journal.csv"
  chmod 600 "$work/journal.csv"
  [ "$backend" = sqlite ] && sync
  lines=$(( $(wc -l <"$work/journal.csv") - 1 ))
  echo "$backend: preloaded $rrows rows and wrote their journal in $(( $(date +%s) - t0 )) s" >>"$work/preload10.txt"
  bin/relay --db "$db10" --listen 127.0.0.1:0 --core "$core10" 2>"$work/relay10.log" &
  rpid=$!
  relay=$(wait_listening "$work/relay10.log")
  bin/channel load --relay "$relay" --conns 16 --duration 1 --dup-ratio 0.1 --amount 1 >/dev/null   # warm-up
  alone=$(bin/channel load --relay "$relay" --conns 16 --duration "$secs" --dup-ratio 0.1 --amount 1 | sed -n 's/.* tps=\([0-9]*\).*/\1/p')
  bin/channel load --relay "$relay" --conns 16 --duration 36000 --dup-ratio 0.1 --amount 1 --core "$core10" >"$work/load10.txt" &
  lpid=$!
  stall_start
  r0=$(date +%s.%N)
  rc10=0
  # At the shipped unit's priority (dedup-reconcile.service: Nice=10). Its
  # memory, polled every 0.2 s: the peak of its own (anonymous) memory, and
  # the peak of all it had resident, the ledger's pages it maps included
  # (those are the kernel's page cache, shared and reclaimable).
  nice -n "${BENCH_RECONCILE_NICE:-10}" bin/reconcile --db "$db10" --journal "$work/journal.csv" --date "$day" >"$work/reconcile10.out" 2>"$work/reconcile10.log" &
  rcpid=$!
  anon=0 hwm=0
  while kill -0 "$rcpid" 2>/dev/null; do
    read -r a h < <(awk '/^RssAnon:/ { a = $2 } /^VmHWM:/ { h = $2 } END { print a + 0, h + 0 }' "/proc/$rcpid/status" 2>/dev/null || echo "0 0")
    [ "$a" -gt "$anon" ] && anon=$a
    [ "$h" -gt "$hwm" ] && hwm=$h
    sleep 0.2
  done
  wait "$rcpid" || rc10=$?
  echo "$(( anon / 1024 )) $(( hwm / 1024 ))" >"$work/rss10.txt"
  if [ "$rc10" -ne 0 ] && [ "$rc10" -ne 3 ]; then
    echo "bench: reconcile on $backend exited $rc10; its figures below mean nothing:" >&2
    tail -n 3 "$work/reconcile10.log" >&2
  fi
  r1=$(date +%s.%N)
  kill -INT "$lpid"; wait "$lpid" || true
  stall_stop
  stop_relay "$rpid"
  tail -n 1 "$work/reconcile10.out" >>"$work/summary10.txt"
  out=$(cat "$work/load10.txt")
  beside=$(sed -n 's/.* tps=\([0-9]*\).*/\1/p' <<<"$out")
  max=$(sed -n 's/.*max=\([0-9.]*\).*/\1/p' <<<"$out")
  twice=$(sed -n 's/.*applied_twice=\([0-9]*\).*/\1/p' <<<"$out")
  read -r rss rss_all <"$work/rss10.txt"
  awk -v b="$backend" -v l="$lines" -v a="$r0" -v z="$r1" -v rss="$rss" -v ra="$rss_all" -v al="$alone" -v bs="$beside" -v mx="$max" -v st="$stall" -v tw="$twice" \
    'BEGIN { s = z - a; printf "%-9s %10d %10.1f %9.0f %8d %9d %12d %12d %8.2fx %8s %8s %14s\n", b, l, s, l / s, rss, ra, al, bs, bs / (al > 0 ? al : 1), mx, st, tw }'
done
cat "$work/preload10.txt" "$work/summary10.txt"
[ -n "${pgurl10:-}" ] && scripts/pg.sh stop "$work/pg10"
echo "targets (SQLite): at least 50,000 lines/s, its own memory (anon_MB) under 512 MB, the relay beside it at 0.8x or better, no reply over 100 ms; applied_twice 0"
fi
