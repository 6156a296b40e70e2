#!/usr/bin/env bash
# Two measurements on a ledger you already have (docs/benchmarks.md, tables 7 and 8):
# the real binaries in bin/ (scripts/bench.sh builds them),
# a fixture core, 16 channel connections, 10 % retransmissions.
#
#   scripts/ledger-bench.sh restart RELAY_BIN DB [ROUNDS] [warm|cold]
#       ROUNDS (default 1) restarts of the relay (metrics on) while the
#       fixture core stays up, as a bank's core does when a relay restarts
#       (the core is warmed first through a relay run of 3 s on DB); in
#       each, the relay's first second after its start, the 9 s after it,
#       the next 10 s (its steady state), then a 1 s run on the warmed
#       relay (a load run's own start in it too): tx/s, latency and
#       applied_twice of each, the first second against both, and over
#       the rounds the median and the spread of both ratios. cold (root)
#       drops the page cache before each start (sync; echo 3 >
#       /proc/sys/vm/drop_caches) and reads bin/ back, so that only the
#       ledger is cold.
#   scripts/ledger-bench.sh purge DB PURGE_BIN [SECONDS]
#       PURGE_BIN --days 3 for SECONDS (default 30) while the load runs
#       through bin/relay: the purge's rows/s, the rows/s the load added
#       meanwhile, and their ratio (a SQLite ledger; the counts are read
#       with sqlite3).
#   scripts/ledger-bench.sh versus-redis [SECONDS] [ROUNDS] [CONNS...]
#       table 8 taken apart: dedup's relay (SQLite FULL) and the Redis
#       relay (bin/redisrelay, redis-server with appendfsync always),
#       alternating which goes first, SECONDS (default 10) each, ROUNDS
#       (default 3), at each of CONNS connections (default 16); per
#       transfer, counted by perf's tracepoints on each process: CPU,
#       system calls, fsyncs, pwrite64 calls, writes, futex calls, context
#       switches, and the KiB written to files (/proc/PID/io write_bytes),
#       for the relay and for redis-server apart, the KiB that reached the
#       disk from the whole machine (disk_kib), and for dedup
#       the writes per fsync (its group commit's batch: two writes a
#       transfer); and the whole machine's: its busy CPU per transfer
#       (host_us), the share of it left idle (host_idle), and where the
#       busy time went (host_relay_us, host_srv_us, host_load_us for the
#       load generator, host_core_us for the fixture core, host_kernel_us
#       for the kernel's threads, host_rest_us for the remainder); then
#       each measure's median and spread over the rounds.
#       Needs perf and Debian's redis-server.
#   scripts/ledger-bench.sh versus RELAY_A RELAY_B sqlite|postgres [SECONDS] [ROUNDS] [CONNS...]
#       a change before and after, in one run: two relay binaries (say,
#       main's and a branch's) on the same kind of ledger, emptied before
#       each point, alternating which goes first, SECONDS (default 10)
#       each, ROUNDS (default 3), at each of CONNS connections (default
#       16); the same per-transfer counts, the machine's included, and
#       for postgres (a throwaway
#       cluster, scripts/pg.sh) the server's own as srv_*; then the medians
#       and spreads.
#   scripts/ledger-bench.sh profile [SECONDS] [CONNS]
#       where the relay's CPU goes: perf record of bin/relay on an empty
#       SQLite ledger under CONNS connections (default 64) for SECONDS
#       (default 10), each sample put in one area (SQLite with its system
#       calls, the ledger's Go code, the log line, the core's HTTP client,
#       garbage collection, the relay's own request path, the scheduler).
#   scripts/ledger-bench.sh day [MINUTES]
#       a day in the life, measured open-loop (docs/benchmarks.md, "A day in
#       the life"): a ledger of DAY_ROWS rows (default 10 million; random
#       GUIDs, spread over the last 7 days; made once and kept in
#       .bench.day/, each run on a copy), the relay on a socket held as
#       systemd holds it (bin/holdsocket), the load at half its measured peak
#       (channel load --rate, 10 % retransmissions), and in turn, MINUTES
#       (default 2) each: steady; resolve and reprocess every minute; purge
#       --days 3; reconcile (Nice 10, as its unit) of yesterday's journal,
#       DAY_JOURNAL lines (default 10 million: yesterday's rows and lines of
#       GUIDs the ledger does not have), the load lasting until it ends;
#       the console's pages every 5 s and inspect's queries; a relay
#       restart in the middle. Then the same on PostgreSQL (DAY_LEDGERS,
#       default "sqlite postgres"). One line per phase:
#       ledger=L phase=P rate=R p50_ms= p99_ms= p999_ms= max_ms= over_1s= refused=
#       and the machine's worst stall meanwhile (bin/stallmeter).
set -euo pipefail
cd "$(dirname "$0")/.."
B=$PWD/bin
w=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$w"' EXIT

# listening LOG: the address a server printed on its "listening addr=" line.
listening() {
  for _ in $(seq 1 1000); do
    grep -q "listening addr=" "$1" 2>/dev/null && break
    sleep 0.02
  done
  sed -n 's/.*listening addr=\([0-9.:]*\).*/\1/p' "$1" | head -n1
}
start_core() {
  "$B/fixturecore" --listen 127.0.0.1:0 --quiet 2>"$w/core.log" &
  pids+=($!)
  core="http://$(listening "$w/core.log")"
}
load() { "$B/channel" load --relay "$relay" --conns "${conns:-16}" --duration "$1" --dup-ratio 0.1 --amount 1 --core "$core"; }

# The per-transfer counts (versus-redis, versus): perf's tracepoints on a
# process, divided by the transfers sent.
events=task-clock,context-switches,raw_syscalls:sys_enter,syscalls:sys_enter_fdatasync,syscalls:sys_enter_fsync,syscalls:sys_enter_pwrite64,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_pread64,syscalls:sys_enter_read,syscalls:sys_enter_futex
# per_tx FILE SENT: perf's counts in FILE, per transfer.
per_tx() {
  awk -v n="$2" '/^#/ || NF < 2 { next }
    { ev = ($2 ~ /^[a-z_]+:|-/) ? $2 : $3 }
    ev == "task-clock" { printf " cpu_us=%.0f", $1 * 1000 / n }
    ev ~ /context-switches|sys_enter/ { name = ev; sub(/.*sys_enter_?/, "", name); if (name == "") name = "syscalls"
      if (ev ~ /context/) name = "ctxsw"; printf " %s=%.2f", name, $1 / n }' "$1"
}
# srv_tx FILE SENT: per_tx of a server's processes, each count named srv_*.
srv_tx() { per_tx "$1" "$2" | sed -e 's/^ //' -e 's/\([a-z_0-9]*\)=/srv_\1=/g'; }
# writes_per_fsync LINE: the group commit's batch, from per_tx's fsyncs (two
# durable writes a transfer: the claim and the finish).
writes_per_fsync() {
  awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^(fsync|fdatasync)=/) { split($i, kv, "="); f += kv[2] } }
    END { if (f > 0) printf "writes_per_fsync=%.1f", 2 / f }' <<<"$1"
}
# medians ROUNDS FILE: each measure's median and spread per relay and
# connections, from FILE's lines "RELAY CONNS ROUND TX/S name=value...".
medians() {
  echo "medians over $1 rounds (spread in brackets):"
  # The measures in the order of the lines' fields, tx/s first.
  awk '{ k = $1 " " $2; n[k]++; v[k, "tx/s", n[k]] = $4
         for (i = 5; i <= NF; i++) if ($i ~ /=/) { split($i, kv, "="); v[k, kv[1], n[k]] = kv[2]
           if (!(kv[1] in seen)) { seen[kv[1]] = 1; order[++m] = kv[1] } } }
    function med(k, name, c,   i, j, x, a) { for (i = 1; i <= c; i++) a[i] = v[k, name, i] + 0
      for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x }
      return sprintf("%s [%s-%s]", a[int((c + 1) / 2)], a[1], a[c]) }
    END { for (k in n) { line = k ": tx/s=" med(k, "tx/s", n[k])
      for (i = 1; i <= m; i++) if ((k, order[i], 1) in v) line = line " " order[i] "=" med(k, order[i], n[k])
      print "  " line } }' "$2" | sort -k2,2n -k1,1
}
# file_bytes PIDS: what the processes (comma-separated) have written to files
# so far: /proc/PID/io's write_bytes, the page-cache pages their writes
# dirtied (a page written again before it reached the disk counts once).
file_bytes() {
  local t=0 p b
  for p in ${1//,/ }; do
    b=$(awk '/^write_bytes/ { print $2 }' "/proc/$p/io" 2>/dev/null)
    t=$((t + ${b:-0}))
  done
  echo "$t"
}
# disk_sectors: the sectors written so far to the block device that holds
# the work directory (/proc/diskstats; empty when it is not a block device,
# tmpfs say). This is what reached the disk from the whole machine, the
# file system's journal included. write_bytes above can count far more
# than that: on kernels whose page cache uses large folios (Linux 6.16 and
# later on ext4), a write into a folio that an fsync had cleaned counts the
# whole folio again; PostgreSQL's WAL, rewritten at each flush, shows this
# (its backends' write_bytes twenty times what reached the disk), SQLite's
# whole-page writes do not.
disk_dev=$(basename "$(readlink -f "$(findmnt -no SOURCE --target "$w" 2>/dev/null || true)")")
disk_sectors() { awk -v d="$disk_dev" '$3 == d { print $10 }' /proc/diskstats; }
# host_clock: the seconds since boot (/proc/uptime) and the ticks all CPUs
# spent idle or waiting on the disk (/proc/stat; both measured when a CPU
# goes idle and wakes, where the busy fields are sampled at the tick and
# miss about a twentieth here). Busy time is the elapsed seconds times the
# CPUs, less those: every process and kernel thread, the disk's writeback
# and the load generator included.
host_clock() { echo "$(cut -d' ' -f1 /proc/uptime) $(awk '$1 == "cpu" { print $5 + $6 }' /proc/stat)"; }
# cpu_ticks: every live process's PID, name and CPU ticks so far (user and
# system), and this script's reaped children's (the load generator's runs)
# as "load".
cpu_ticks() {
  local f l
  for f in /proc/[0-9]*/stat; do { read -r l <"$f" && echo "$l"; } 2>/dev/null; done | awk -v self=$$ 'NF {
    n = split($0, a, ") "); c = substr(a[1], index(a[1], "(") + 1); split(a[n], f, " ")
    print $1, c, f[12] + f[13]; if ($1 == self) print "load", "load", f[14] + f[15] }'
}
# host_split BEFORE AFTER SENT RELAY_PID SERVER_PIDS CLOCK_BEFORE CLOCK_AFTER:
# the machine's busy CPU per transfer in µs (host_us), the share of its CPU
# time left idle (host_idle), and where the busy time went: the relay, its
# database server, the load generator, the fixture core, the kernel's own
# threads (writeback, the file system's journal, block I/O, deferred
# interrupts), and the rest (other processes, interrupts charged to no
# thread; small, and within the counts' noise).
host_split() {
  awk -v n="$3" -v relay="$4" -v srv=",$5," -v hz="$(getconf CLK_TCK)" -v ncpu="$(nproc)" -v c0="$6" -v c1="$7" '
    FNR == NR { t0[$1 " " $2] = $3; next }
    { d = $3 - t0[$1 " " $2]; if (d <= 0) next
      g = ""
      if ($1 == relay) g = "relay"; else if (index(srv, "," $1 ",")) g = "srv"
      else if ($1 == "load") g = "load"; else if ($2 ~ /^fixturecore/) g = "core"
      else if ($2 ~ /^(kworker|jbd2|flush|ksoftirqd|kblockd|irq\/|rcu)/) g = "kernel"
      if (g != "") s[g] += d / hz }
    END { n = n > 0 ? n : 1; split(c0, a, " "); split(c1, b, " ")
      wall = (b[1] - a[1]) * ncpu; idle = (b[2] - a[2]) / hz; busy = wall - idle
      printf "host_us=%.0f host_idle=%.2f", busy * 1e6 / n, idle / (wall > 0 ? wall : 1)
      split("relay srv load core kernel", o, " ")
      for (i = 1; i <= 5; i++) { printf " host_%s_us=%.0f", o[i], s[o[i]] * 1e6 / n; busy -= s[o[i]] }
      printf " host_rest_us=%.0f", busy * 1e6 / n }' "$1" "$2"
}
# measure MODE CONNS ROUND SERVER: a warm-up second, then SECONDS of load
# with perf stat on the relay ($rpid) and, if given, the server's processes
# (a PID, or pgdata:DIR for a PostgreSQL cluster's postmaster and every
# process it started, read after the warm-up, once the relay's sessions
# are open); prints and keeps one line of per-transfer counts, then stops
# the relay.
measure() {
  local mode=$1 round=$3 spids=$4 ppid spid="" out sent tps twice line pm
  conns=$2
  relay=$(listening "$w/relay.log")
  load 1 >/dev/null
  if [[ "$spids" == pgdata:* ]]; then
    pm=$(head -n1 "${spids#pgdata:}/postmaster.pid")
    spids="$pm,$(pgrep -d, -P "$pm")"
  fi
  local rb0 sb0 rb1 sb1 h0 h1 d0 d1
  rb0=$(file_bytes "$rpid") sb0=$(file_bytes "$spids") h0=$(host_clock) d0=$(disk_sectors)
  cpu_ticks >"$w/ticks0"
  perf stat -x' ' -e "$events" -p "$rpid" -o "$w/perf.relay" -- sleep $((secs + 1)) &
  ppid=$!
  if [ -n "$spids" ]; then
    perf stat -x' ' -e "$events" -p "$spids" -o "$w/perf.srv" -- sleep $((secs + 1)) &
    spid=$!
  fi
  out=$(load "$secs")
  h1=$(host_clock) d1=$(disk_sectors)
  cpu_ticks >"$w/ticks1"
  wait "$ppid" $spid || true
  rb1=$(file_bytes "$rpid") sb1=$(file_bytes "$spids")
  kill "$rpid"; wait "$rpid" 2>/dev/null || true
  sent=$(sed -n 's/.* sent=\([0-9]*\) .*/\1/p' <<<"$out")
  tps=$(sed -n 's/.* tps=\([0-9]*\).*/\1/p' <<<"$out")
  twice=$(sed -n 's/.*applied_twice=\([0-9]*\).*/\1/p' <<<"$out")
  line="$(per_tx "$w/perf.relay" "$sent")$(awk -v b=$((rb1 - rb0)) -v n="$sent" 'BEGIN { printf " file_kib=%.2f", b / 1024 / (n > 0 ? n : 1) }')"
  if [ -n "$d0" ] && [ -n "$d1" ]; then
    line="$line $(awk -v b=$(((d1 - d0) * 512)) -v n="$sent" 'BEGIN { printf "disk_kib=%.2f", b / 1024 / (n > 0 ? n : 1) }')"
  fi
  line="$line $(host_split "$w/ticks0" "$w/ticks1" "$sent" "$rpid" "$spids" "$h0" "$h1")"
  if [ -n "$spids" ]; then
    line="$line $(srv_tx "$w/perf.srv" "$sent")$(awk -v b=$((sb1 - sb0)) -v n="$sent" 'BEGIN { printf " srv_file_kib=%.2f", b / 1024 / (n > 0 ? n : 1) }')"
  fi
  if [ "${count_batches:-}" = 1 ]; then line="$line $(writes_per_fsync "$line")"; fi
  printf "%-6s %-6s %-6s %8s %s applied_twice=%s\n" "$mode" "$conns" "$round" "$tps" "$line" "$twice" | tee -a "$w/rounds"
}


# day_preload_sqlite FILE ROWS: ROWS DONE/0000 rows spread over the last 7
# days (UTC), random GUIDs, each reply with its own ref and its time.
day_preload_sqlite() {
  sqlite3 "$1" <schema.sql
  sqlite3 -cmd ".parameter set :rows $2" "$1" >/dev/null <<'SQL'
PRAGMA journal_mode=OFF;
PRAGMA synchronous=OFF;
PRAGMA cache_size=-1000000;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n WHERE i < :rows - 1),
r AS (SELECT datetime('now', printf('-%d seconds', 604800 - i * 604800 / :rows)) AS ts,
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
day_preload_postgres() {
  PGOPTIONS="-c client_min_messages=warning" psql "$1" -qc "DROP SCHEMA public CASCADE; CREATE SCHEMA public" >/dev/null
  "$B/purge" --db "$1" --dry-run >/dev/null   # creates the schema (inspect creates no ledger)
  psql "$1" -v rows="$2" -q <<'SQL'
INSERT INTO tx
SELECT guid, 'TRF00001', 'DONE', '0000',
  convert_to(guid || 'TRF00001S    ' || ch || sent || '  1102003000400111020030004002' || lpad('150000', 15, '0') || 'rent november       ', 'UTF8'),
  convert_to(guid || 'TRF00001R0000' || ch || sent || '  C' || lpad((i + 1)::text, 15, '0') || lpad('99850000', 15, '0') || sent, 'UTF8'),
  1, ts
FROM (SELECT ts, ch, i, to_char(ts AT TIME ZONE 'UTC', 'YYYYMMDD') || ch || lpad((random() * 1e18)::bigint::text, 21, '0') AS guid,
             to_char(ts AT TIME ZONE 'UTC', 'YYYYMMDDHH24MISS') AS sent
      FROM (SELECT now() - make_interval(secs => 604800 - i * 604800.0 / :rows) AS ts,
                   (ARRAY['MOB','IBK','ATM'])[i % 3 + 1] AS ch, i
            FROM generate_series(0, :rows - 1) AS i) AS r) AS g
ON CONFLICT (guid) DO NOTHING;
VACUUM ANALYZE tx;
CHECKPOINT;
SQL
}
# day_journal_sqlite FILE DAY LINES: the core's journal of DAY for the
# ledger's rows of DAY, then lines of GUIDs the ledger does not have (a
# core that serves other paths too) up to LINES.
day_journal_sqlite() {
  echo "guid,ref,from,to,amount,balance,processed_at"
  sqlite3 -csv "$1" "SELECT guid, rtrim(substr(response, 65, 16)), substr(request, 65, 14), substr(request, 79, 14),
    CAST(substr(request, 93, 15) AS INTEGER), CAST(substr(response, 81, 15) AS INTEGER), substr(response, 96, 14)
    FROM tx WHERE substr(response, 96, 8) = '$2'"
}
day_journal_postgres() {
  echo "guid,ref,from,to,amount,balance,processed_at"
  psql "$1" -qAt -F, -c "SELECT guid, rtrim(convert_from(substring(response from 65 for 16), 'UTF8')), convert_from(substring(request from 65 for 14), 'UTF8'),
    convert_from(substring(request from 79 for 14), 'UTF8'), convert_from(substring(request from 93 for 15), 'UTF8')::bigint,
    convert_from(substring(response from 81 for 15), 'UTF8')::bigint, convert_from(substring(response from 96 for 14), 'UTF8')
    FROM tx WHERE convert_from(substring(response from 96 for 8), 'UTF8') = '$2'"
}
# day_fill DAY LINES: journal lines of fresh GUIDs on DAY, to LINES lines in
# all (stdin: the journal so far).
day_fill() {
  awk -v d="$1" -v want="$2" -F, 'NR > 1 { n++ } { print } END {
    for (i = n; i < want; i++) printf "%sOTH%021d,X%015d,11020030004001,11020030004002,150000,99850000,%s120000\n", d, i, i, d }'
}
# day_phase LEDGER PHASE: one phase of the day under open-loop load; prints
# its line.
day_phase() {
  local ledger=$1 phase=$2 lpid jpid="" out ol from
  from=$(wc -l <"$w/relay.log")
  "$B/stallmeter" >"$w/stall.txt" &
  local spid=$!
  local dur=$secs
  [ "$phase" = reconcile ] && dur=36000   # until reconcile ends
  "$B/channel" load --relay "$relay" --conns 16 --rate "$rate" --duration "$dur" --dup-ratio 0.1 --amount 1 --timeout 30 --core "$core" >"$w/load.txt" &
  lpid=$!
  case "$phase" in
  jobs)
    ( for _ in $(seq 1 "$minutes"); do
        "$B/resolve" --db "$db" --core "$core" --min-age 60 >>"$w/jobs.log" 2>&1 || true
        "$B/reprocess" --db "$db" --core "$core" >>"$w/jobs.log" 2>&1 || true
        sleep 60
      done ) &
    jpid=$! ;;
  purge)
    timeout "$secs" "$B/purge" --db "$db" --days 3 >"$w/purge.log" 2>&1 &
    jpid=$! ;;
  reconcile)
    local r0 r1
    r0=$(date +%s.%N)
    nice -n 10 "$B/reconcile" --db "$db" --journal "$journal" --date "$yesterday" >"$w/reconcile.out" 2>"$w/reconcile.log" || true
    r1=$(date +%s.%N)
    kill -INT "$lpid"
    extra=$(awk -v a="$r0" -v z="$r1" -v l="$journal_lines" 'BEGIN { printf " reconcile_s=%.0f lines_per_s=%.0f", z - a, l / (z - a) }') ;;
  console)
    ( end=$((SECONDS + secs))
      while [ $SECONDS -lt $end ]; do
        for pg in / /doubt /proposals /reconcile /audit; do
          curl -s -o /dev/null --cacert "$pki/ca.pem" --cert "$pki/kim.pem" --key "$pki/kim-key.pem" "https://$console$pg" || true
        done
        "$B/inspect" --db "$db" --summary >/dev/null 2>&1 || true
        "$B/inspect" --db "$db" --state UNKNOWN --limit 100 >/dev/null 2>&1 || true
        "$B/inspect" --db "$db" --reconcile >/dev/null 2>&1 || true
        sleep 5
      done ) &
    jpid=$! ;;
  restart)
    ( sleep $((secs / 2)); kill -HUP "$hpid" ) &
    jpid=$! ;;
  esac
  wait "$lpid" || true
  [ -n "$jpid" ] && { kill "$jpid" 2>/dev/null || true; wait "$jpid" 2>/dev/null || true; }
  kill -INT "$spid"; wait "$spid" || true
  ol=$(grep '^open_loop:' "$w/load.txt" || echo "open_loop: (no report)")
  # Where the slowest transactions waited: the relay's own time (from the
  # telegram read to the reply written) and the core's part of it, from its
  # log lines of this phase; the rest of a load's latency waited before
  # the relay read the telegram (the accept queue, a new connection).
  extra="${extra:-}$(tail -n +"$((from + 1))" "$w/relay.log" | awk '/msg=tx / { ms = ""; core = 0
      for (i = 1; i <= NF; i++) { if ($i ~ /^ms=/) ms = substr($i, 4) + 0; if ($i ~ /^core_ms=/) core = substr($i, 9) + 0 }
      if (ms != "" && ms > max) { max = ms; mcore = core } }
    END { printf " relay_max_ms=%.1f its_core_ms=%.1f", max, mcore }')"
  twice=$(sed -n 's/.*applied_twice=\([0-9]*\).*/\1/p' "$w/load.txt")
  awk -v l="$ledger" -v p="$phase" -v st="$(sed -n 's/.*max_ms=\([0-9.]*\).*/\1/p' "$w/stall.txt" | tail -n1)" -v tw="$twice" -v x="${extra:-}" '{
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "ledger=%s phase=%s rate=%s p50_ms=%s p99_ms=%s p999_ms=%s max_ms=%s over_1s=%s refused=%s unanswered=%s conns=%s stall_ms=%s applied_twice=%s%s\n",
      l, p, v["rate"], v["p50_ms"], v["p99_ms"], v["p999_ms"], v["max_ms"], v["over_1s"], v["refused"], v["unanswered"], v["conns"], st, tw, x }' <<<"$ol"
  extra=""
}
case "${1:-}" in
restart)
  [ $# -ge 3 ] && [ $# -le 5 ] || { echo "usage: $0 restart RELAY_BIN DB [ROUNDS] [warm|cold]" >&2; exit 2; }
  rbin=$2 db=$3 rounds=${4:-1} cache=${5:-warm}
  case "$cache" in warm|cold) ;; *) echo "restart: the cache is warm or cold, not $cache" >&2; exit 2 ;; esac
  [[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "restart: ROUNDS is a whole number of restarts, not $rounds" >&2; exit 2; }
  [ "$cache" = warm ] || [ -w /proc/sys/vm/drop_caches ] || { echo "restart: cold drops the page cache, which needs root" >&2; exit 2; }
  start_core
  # start_relay: the relay under test on DB, its address in relay.
  start_relay() {
    local t0; t0=$(date +%s.%N)
    "$rbin" --db "$db" --listen 127.0.0.1:0 --core "$core" --metrics-listen 127.0.0.1:0 2>"$w/relay.log" &
    rpid=$!
    pids+=($rpid)
    relay=$(listening "$w/relay.log")
    listen_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  }
  stop_relay() { kill "$rpid"; wait "$rpid" 2>/dev/null || true; }
  start_relay
  load 3 >/dev/null
  stop_relay
  tps() { sed -n 's/.* tps=\([0-9]*\).*/\1/p' <<<"$1"; }
  : >"$w/ratios"
  for round in $(seq 1 "$rounds"); do
    if [ "$cache" = cold ]; then
      sync
      echo 3 >/proc/sys/vm/drop_caches
      cat "$B"/* >/dev/null 2>&1 || true
    fi
    start_relay
    first=$(load 1 | tr '\n' ' ')
    rest=$(load 9 | tr '\n' ' ')
    steady=$(load 10 | tr '\n' ' ')
    # A 1 s run on the warmed relay: a load run's own first second (its
    # connections opening) is then in both sides of the ratio.
    again=$(load 1 | tr '\n' ' ')
    echo "round $round ($cache): listening ${listen_s} s after its start (polled every 20 ms)"
    echo "  first 1 s:   $first"
    echo "  next 9 s:    $rest"
    echo "  steady 10 s: $steady"
    echo "  then 1 s:    $again"
    grep -o 'ledger check.*took_s=[0-9.]*' "$w/relay.log" | sed 's/^/  /' || echo "  (the relay's background check had not ended)"
    stop_relay
    awk -v a="$(tps "$first")" -v b="$(tps "$steady")" -v c="$(tps "$again")" 'BEGIN {
      if (b > 0 && c > 0) { printf "  first second / steady 10 s: %.2fx; first second / a warmed relay'"'"'s 1 s run: %.2fx\n", a / b, a / c
                           printf "%.2f %.2f\n", a / b, a / c >> "'"$w/ratios"'" } }'
  done
  # median COLUMN: the median, the lowest and the highest of that ratio over the rounds.
  median() { cut -d' ' -f"$1" "$w/ratios" | sort -n | awk '{ v[NR] = $1 } END {
    if (NR == 0) exit; m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "median %.2fx (%.2fx to %.2fx)", m, v[1], v[NR] }'; }
  echo "$rounds rounds ($cache): first second / steady 10 s $(median 1); first second / a warmed relay's 1 s run $(median 2)"
  ;;
purge)
  [ $# -ge 3 ] || { echo "usage: $0 purge DB PURGE_BIN [SECONDS]" >&2; exit 2; }
  db=$2 pbin=$3 secs=${4:-30}
  start_core
  "$B/relay" --db "$db" --listen 127.0.0.1:0 --core "$core" 2>"$w/relay.log" &
  pids+=($!)
  relay=$(listening "$w/relay.log")
  old() { sqlite3 "$db" "SELECT count(*) FROM tx WHERE state='DONE' AND updated_at <= datetime('now','-3 days')"; }
  new() { sqlite3 "$db" "SELECT count(*) FROM tx WHERE updated_at > datetime('now','-1 hour')"; }
  o0=$(old) n0=$(new)
  load $((secs + 2)) >"$w/load.txt" &
  lpid=$!
  sleep 1
  t0=$(date +%s.%N)
  timeout -s INT "$secs" "$pbin" --db "$db" --days 3 >/dev/null 2>"$w/purge.log" || true
  t1=$(date +%s.%N)
  wait "$lpid" || true
  o1=$(old) n1=$(new)
  awk -v o0="$o0" -v o1="$o1" -v n0="$n0" -v n1="$n1" -v t0="$t0" -v t1="$t1" 'BEGIN {
    d = t1 - t0; p = (o0 - o1) / d; i = (n1 - n0) / (d + 2)
    printf "purge %.0f rows/s, intake %.0f rows/s, ratio %.2fx\n", p, i, p / (i > 0 ? i : 1) }'
  cat "$w/load.txt"
  ;;
versus-redis)
  secs=${2:-10} rounds=${3:-3}
  shift $(( $# < 3 ? $# : 3 ))
  conns_list=${*:-16}
  command -v perf >/dev/null && command -v redis-server >/dev/null || { echo "versus-redis needs perf and redis-server" >&2; exit 1; }
  start_core
  rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$w/redis"
  redis-server --port "$rport" --bind 127.0.0.1 --dir "$w/redis" --appendonly yes --appendfsync always \
    --save "" --daemonize no --logfile "$w/redis.log" &
  rspid=$!
  pids+=($rspid)
  for _ in $(seq 1 100); do redis-cli -p "$rport" ping 2>/dev/null | grep -q PONG && break; sleep 0.1; done
  printf "%-6s %-6s %-6s %8s  %s\n" relay conns round tx/s "per transfer: the relay process (srv_*: redis-server's)"
  : >"$w/rounds"
  for c in $conns_list; do
  for round in $(seq 1 "$rounds"); do
    order="dedup redis"
    [ $((round % 2)) -eq 0 ] && order="redis dedup"
    for mode in $order; do
      rm -f "$w"/vr.db*
      if [ "$mode" = redis ]; then
        redis-cli -p "$rport" flushall >/dev/null
        REDIS_ADDR=127.0.0.1:$rport "$B/redisrelay" --db "$w/vr.db" --listen 127.0.0.1:0 --core "$core" 2>"$w/relay.log" &
        rpid=$!
        count_batches="" measure "$mode" "$c" "$round" "$rspid"
      else
        "$B/relay" --db "$w/vr.db" --listen 127.0.0.1:0 --core "$core" 2>"$w/relay.log" &
        rpid=$!
        count_batches=1 measure "$mode" "$c" "$round" ""
      fi
    done
  done
  done
  medians "$rounds" "$w/rounds"
  ;;
versus)
  [ $# -ge 4 ] || { echo "usage: $0 versus RELAY_A RELAY_B sqlite|postgres [SECONDS] [ROUNDS] [CONNS...]" >&2; exit 2; }
  bin_a=$2 bin_b=$3 kind=$4 secs=${5:-10} rounds=${6:-3}
  shift $(( $# < 6 ? $# : 6 ))
  conns_list=${*:-16}
  for b in "$bin_a" "$bin_b"; do [ -x "$b" ] || { echo "versus: $b is not an executable relay" >&2; exit 2; }; done
  case "$kind" in sqlite|postgres) ;; *) echo "versus: the ledger is sqlite or postgres, not $kind" >&2; exit 2 ;; esac
  command -v perf >/dev/null || { echo "versus needs perf" >&2; exit 1; }
  start_core
  srv="" db="$w/vr.db"
  if [ "$kind" = postgres ]; then
    mkdir -p "$w/pg"; chmod 755 "$w"
    db=$(scripts/pg.sh start "$w/pg")
    trap 'scripts/pg.sh stop "$w/pg"; kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$w"' EXIT
  fi
  printf "%-6s %-6s %-6s %8s  %s\n" relay conns round tx/s "per transfer: the relay process (srv_*: the database server's)"
  echo "A: $bin_a"
  echo "B: $bin_b"
  : >"$w/rounds"
  for c in $conns_list; do
  for round in $(seq 1 "$rounds"); do
    order="A B"
    [ $((round % 2)) -eq 0 ] && order="B A"
    for mode in $order; do
      bin=$bin_a
      [ "$mode" = B ] && bin=$bin_b
      if [ "$kind" = postgres ]; then
        PGOPTIONS="-c client_min_messages=warning" psql "$db" -qc "DROP SCHEMA public CASCADE; CREATE SCHEMA public" >/dev/null
      else
        rm -f "$w"/vr.db*
      fi
      "$bin" --db "$db" --listen 127.0.0.1:0 --core "$core" 2>"$w/relay.log" &
      rpid=$!
      [ "$kind" = postgres ] && srv="pgdata:$w/pg/data"
      count_batches=$([ "$kind" = sqlite ] && echo 1 || true) measure "$mode" "$c" "$round" "$srv"
    done
  done
  done
  medians "$rounds" "$w/rounds"
  ;;
profile)
  secs=${2:-10} conns=${3:-64}
  command -v perf >/dev/null || { echo "profile needs perf" >&2; exit 1; }
  start_core
  "$B/relay" --db "$w/vr.db" --listen 127.0.0.1:0 --core "$core" 2>"$w/relay.log" &
  rpid=$!
  pids+=($rpid)
  relay=$(listening "$w/relay.log")
  load 1 >/dev/null
  perf record -g -F 999 -p "$rpid" -o "$w/perf.data" -- sleep "$secs" 2>/dev/null &
  ppid=$!
  load "$secs"
  wait "$ppid" || true
  # Each sample goes to the first area its stack shows, in this order:
  # SQLite's C code and the system calls it makes (perf cannot follow a
  # stack from C back into Go, so these stand alone), the ledger's Go
  # code, the per-transfer log line, the core's HTTP client, the garbage
  # collector, the rest of the relay's request path, the Go scheduler.
  echo "where the relay's CPU went, $conns connections, $secs s (share of perf's samples):"
  perf script -i "$w/perf.data" 2>/dev/null | awk '
    function flush() {
      if (frames == "") return
      area = "other (runtime, kernel entry, idle loops)"
      if (frames ~ /sqlite3|[Ww]al[A-Z]|[Pp]ager|[Bb]tree|pcache|unix(Sync|Write|Read|Lock|ShmLock)|do_fsync|pwrite64|__libc_pwrite|__libc_pread|pread64|fdatasync|_cgo|cgocall|go-sqlite3|fcntl/) area = "SQLite: C code, cgo and its system calls"
      else if (frames ~ /dedup\/ledger/) area = "ledger: Go code"
      else if (frames ~ /logTx|log\/slog/) area = "the log line"
      else if (frames ~ /net\/http|coreapi/) area = "the core HTTP client"
      else if (frames ~ /gcBgMark|gcDrain|markroot|bgsweep|scavenge|mallocgc/) area = "garbage collection and allocation"
      else if (frames ~ /dedup\/internal\/relay/) area = "the relay: telegrams, connections"
      else if (frames ~ /runtime\.(schedule|findRunnable|mcall|park_m|sysmon|mstart)/) area = "Go scheduler"
      share[area]++; total++; frames = ""
    }
    /^[^ \t]/ { flush(); frames = " "; next }
    /^$/ { flush(); next }
    { frames = frames " " $2 }
    END { flush(); for (a in share) printf "  %5.1f%%  %s\n", 100 * share[a] / total, a }' | sort -rn
  ;;
day)
  minutes=${2:-2}
  secs=${DAY_SECS:-$((minutes * 60))}   # DAY_SECS: a quicker look, in seconds
  rows=${DAY_ROWS:-10000000}
  journal_lines=${DAY_JOURNAL:-10000000}
  keep=$PWD/.bench.day
  mkdir -p "$keep"
  yesterday=$(date -u -d yesterday +%Y%m%d)
  start_core
  pki="$w/pki"
  scripts/certs.sh "$pki" >/dev/null
  echo "a day in the life: $rows rows, $minutes min a phase, journal of $journal_lines lines for $yesterday"
  for ledger in ${DAY_LEDGERS:-sqlite postgres}; do
    t0=$(date +%s)
    if [ "$ledger" = sqlite ]; then
      if [ ! -f "$keep/day-$rows.db" ]; then
        day_preload_sqlite "$keep/day-$rows.db.new" "$rows"
        mv "$keep/day-$rows.db.new" "$keep/day-$rows.db"
      fi
      db="$w/day.db"
      cp "$keep/day-$rows.db" "$db"
      chmod 600 "$db"
      # The copy's gigabytes of dirty pages are written now, before the day
      # starts, not by the kernel's writeback under the load.
      sync
      [ -f "$keep/journal-$rows-$yesterday.csv" ] ||
        day_journal_sqlite "$db" "$yesterday" | day_fill "$yesterday" "$journal_lines" >"$keep/journal-$rows-$yesterday.csv"
    else
      pgurl=$(scripts/pg.sh start "$keep/pg")
      pids+=()
      trap 'scripts/pg.sh stop "$keep/pg"; kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$w"' EXIT
      base=${pgurl%/dedup*}
      if ! psql "$base/day_$rows?sslmode=disable" -qAtc "SELECT 1 FROM tx LIMIT 1" >/dev/null 2>&1; then
        psql "$pgurl" -qc "DROP DATABASE IF EXISTS day_$rows" -c "CREATE DATABASE day_$rows" >/dev/null
        day_preload_postgres "$base/day_$rows?sslmode=disable" "$rows"
      fi
      psql "$pgurl" -qc "DROP DATABASE IF EXISTS day_run" -c "CREATE DATABASE day_run TEMPLATE day_$rows" >/dev/null
      db="$base/day_run?sslmode=disable"
      # As the SQLite copy: the template's copy written to disk before the day.
      psql "$db" -qc CHECKPOINT >/dev/null
      sync
      [ -f "$keep/journal-$rows-$yesterday.csv" ] ||
        day_journal_postgres "$db" "$yesterday" | day_fill "$yesterday" "$journal_lines" >"$keep/journal-$rows-$yesterday.csv"
    fi
    journal="$w/journal.csv"
    cp "$keep/journal-$rows-$yesterday.csv" "$journal"
    chmod 600 "$journal"
    echo "$ledger: the ledger and the journal ready in $(( $(date +%s) - t0 )) s"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    relay="127.0.0.1:$port"
    "$B/holdsocket" --listen "$relay" -- "$B/relay" --db "$db" --listen "$relay" --core "$core" >"$w/hold.log" 2>"$w/relay.log" &
    hpid=$!
    pids+=("$hpid")
    listening "$w/relay.log" >/dev/null
    "$B/console" --db "$db" --listen 127.0.0.1:0 --tls-cert "$pki/server.pem" --tls-key "$pki/server-key.pem" \
      --operator-ca "$pki/ca.pem" --textfile-dir "$w" 2>"$w/console.log" &
    cpid=$!
    pids+=("$cpid")
    console=$(listening "$w/console.log")
    "$B/channel" load --relay "$relay" --conns 16 --duration 1 --dup-ratio 0.1 --amount 1 >/dev/null
    peak=$("$B/channel" load --relay "$relay" --conns 16 --duration 5 --dup-ratio 0.1 --amount 1 | sed -n 's/.* tps=\([0-9]*\).*/\1/p')
    rate=${DAY_RATE:-$(( peak / 2 ))}
    echo "$ledger: peak $peak tx/s at 16 connections; the day runs at $rate tx/s"
    for phase in steady jobs purge reconcile console restart; do
      day_phase "$ledger" "$phase"
    done
    kill "$cpid" 2>/dev/null || true
    kill -TERM "$hpid"; wait "$hpid" || true
    grep -h "restarted" "$w/hold.log" || true
    [ "$ledger" = postgres ] && scripts/pg.sh stop "$keep/pg"
  done
  echo "targets: SQLite p99 <= 20 ms and max <= 100 ms in every phase; PostgreSQL p99 <= 50 ms and max <= 250 ms; over_1s 0, refused 0; reconcile >= 50,000 lines/s"
  ;;
*)
  echo "usage: $0 restart RELAY_BIN DB [ROUNDS] [warm|cold] | purge DB PURGE_BIN [SECONDS] | versus-redis [SECONDS] [ROUNDS] [CONNS...] | versus RELAY_A RELAY_B sqlite|postgres [SECONDS] [ROUNDS] [CONNS...] | profile [SECONDS] [CONNS] | day [MINUTES]" >&2
  exit 2
  ;;
esac
