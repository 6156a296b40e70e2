#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the demo and the benchmarks (the tests
# start theirs from Go, internal/testbed/pgtest, the same way):
#
#   scripts/pg.sh start DIR    initdb in DIR, start on a free loopback port
#                              with fsync on; prints the ledger URL (a DIR
#                              that holds a cluster already is started as
#                              it is: a benchmark's preload kept)
#   scripts/pg.sh stop DIR     stop it (DIR is left for the caller to remove)
#
# PG_EXTRA adds server settings to start (e.g. PG_EXTRA="-c commit_delay=100").
#
# As root, initdb and pg_ctl run as the postgres user (initdb refuses root).
set -euo pipefail
cmd=${1:?usage: pg.sh start|stop DIR} dir=${2:?usage: pg.sh start|stop DIR}
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
[ -x "$bindir/pg_ctl" ] || { echo "pg.sh: PostgreSQL server not installed (scripts/setup.sh installs it)" >&2; exit 1; }
as=()
if [ "$(id -u)" -eq 0 ]; then as=(runuser -u postgres --); fi

case "$cmd" in
start)
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
  fresh=1
  if [ -f "$dir/data/PG_VERSION" ]; then
    fresh=0
  else
    "${as[@]}" "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
         echo $((20000 + RANDOM % 20000)))
  "${as[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c max_connections=300 -c shared_buffers=128MB ${PG_EXTRA:-}" \
    start >/dev/null
  [ "$fresh" = 0 ] || "${as[@]}" "$bindir/psql" -h "$dir" -p "$port" -U postgres -qc "CREATE DATABASE dedup" >/dev/null
  echo "postgres://postgres@127.0.0.1:$port/dedup?sslmode=disable"
  ;;
stop)
  "${as[@]}" "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  ;;
*) echo "usage: pg.sh start|stop DIR" >&2; exit 2 ;;
esac
