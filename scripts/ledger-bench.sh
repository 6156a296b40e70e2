#!/usr/bin/env bash
# Two measurements on a ledger you already have (table 7's hand-run rows in
# the README): the real binaries in bin/ (scripts/bench.sh builds them),
# a fixture core, 16 channel connections, 10 % retransmissions.
#
#   scripts/ledger-bench.sh restart RELAY_BIN DB
#       the relay's first 10 s after a start (metrics on), then the next
#       10 s: tx/s, latency, applied_twice of each. For a cold page cache,
#       run `sync; echo 3 > /proc/sys/vm/drop_caches` (root) first.
#   scripts/ledger-bench.sh purge DB PURGE_BIN [SECONDS]
#       PURGE_BIN --days 3 for SECONDS (default 30) while the load runs
#       through bin/relay: the purge's rows/s, the rows/s the load added
#       meanwhile, and their ratio (a SQLite ledger; the counts are read
#       with sqlite3).
set -euo pipefail
cd "$(dirname "$0")/.."
B=$PWD/bin
w=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$w"' EXIT

# listening LOG: the address a server printed on its "listening addr=" line.
listening() {
  for _ in $(seq 1 200); do
    grep -q "listening addr=" "$1" 2>/dev/null && break
    sleep 0.1
  done
  sed -n 's/.*listening addr=\([0-9.:]*\).*/\1/p' "$1" | head -n1
}
start_core() {
  "$B/fixturecore" --listen 127.0.0.1:0 --quiet 2>"$w/core.log" &
  pids+=($!)
  core="http://$(listening "$w/core.log")"
}
load() { "$B/channel" load --relay "$relay" --conns 16 --duration "$1" --dup-ratio 0.1 --amount 1 --core "$core"; }

case "${1:-}" in
restart)
  [ $# -eq 3 ] || { echo "usage: $0 restart RELAY_BIN DB" >&2; exit 2; }
  start_core
  "$2" --db "$3" --listen 127.0.0.1:0 --core "$core" --metrics-listen 127.0.0.1:0 2>"$w/relay.log" &
  pids+=($!)
  relay=$(listening "$w/relay.log")
  echo "first 10 s: $(load 10 | tr '\n' ' ')"
  echo "next 10 s:  $(load 10 | tr '\n' ' ')"
  grep -o 'ledger check.*took_s=[0-9.]*' "$w/relay.log" || echo "(the relay's background check had not ended)"
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
*)
  echo "usage: $0 restart RELAY_BIN DB | purge DB PURGE_BIN [SECONDS]" >&2
  exit 2
  ;;
esac
