#!/usr/bin/env bash
# The dedup demo: builds the binaries, starts the fixture core and the relay
# on free loopback ports with a fresh ledger, and shows
#   1. a transfer (0000),
#   2. its retransmission answered from the ledger, byte for byte, with the
#      core called once (by_guid = 1),
#   3. concurrent retransmissions of a slow transfer getting E903,
#   4. a core timeout becoming UNKNOWN (E901), and resolve resolving it to DONE
#      by inquiry, after which the channel gets the 0000 from the ledger,
#   5. reconcile finding the double debit a POST straight to the core made,
#   6. the ledger rows, the core's /_stats, the relay's dedup_* metrics and
#      inspect's story of a GUID.
# It stops everything it started, also on Ctrl-C.
#
#   scripts/demo.sh              the ledger is a SQLite file (the default)
#   scripts/demo.sh --postgres   the ledger is a throwaway PostgreSQL database
#   scripts/demo.sh --ha         the ledger is a throwaway high-availability
#                                PostgreSQL (etcd and three Patroni nodes,
#                                synchronous mode strict): a transfer, the
#                                primary's postmaster killed, channels getting
#                                E902 until the new primary serves, and the
#                                retransmission answered from the new primary
#   scripts/demo.sh --tls        every link over TLS with certificates made for
#                                the demo (scripts/certs.sh): channels with
#                                client certificates (a mobile gateway's
#                                transfer goes through; the same gateway
#                                sending as internet banking, and a channel
#                                without a certificate, are refused), the core
#                                over https with the relay's client certificate
#   scripts/demo.sh --console    the SQLite demo, then the operators' console
#                                (https, demo certificates): a transfer left in
#                                doubt to decide about with four eyes; prints
#                                the URL and the operator certificates to import
#                                into two browsers; runs until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --postgres) scripts/setup.sh demo-postgres ;;
  --ha) scripts/setup.sh demo-ha ;;
  --tls) scripts/setup.sh demo-tls ;;
  --console) scripts/setup.sh demo-console ;;
  *) scripts/setup.sh demo ;;
esac
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1
kind=sqlite tls=0 console=0
case "${1:-}" in
  "") ;;
  --console) console=1 ;;
  --postgres) kind=postgres ;;
  --tls) tls=1 ;;
  --ha) kind=ha ;;
  *) echo "usage: scripts/demo.sh [--postgres | --ha | --tls | --console]" >&2; exit 2 ;;
esac

work=$(mktemp -d /tmp/dedup-demo.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  [ "$kind" = postgres ] && scripts/pg.sh stop "$work/pg"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'echo; echo "demo: interrupted"; exit 130' INT TERM

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# wait_listening FILE: prints HOST:PORT once the process logged it.
wait_listening() {
  for _ in $(seq 1 200); do
    addr=$(sed -n 's/^listening addr=//p' "$1" | head -n1)
    if [ -n "$addr" ]; then echo "$addr"; return 0; fi
    sleep 0.05
  done
  echo "demo: no 'listening' line in $1:" >&2; cat "$1" >&2; return 1
}

# sql QUERY: runs QUERY on the ledger with the operator's own client.
sql() {
  if [ "$kind" != sqlite ]; then psql "$db" -P pager=off -c "$1"; else sqlite3 -header -column "$db" "$1"; fi
}

say "build"
# Only what this demo runs: a fresh machine downloads and compiles no
# module the demo does not need (the tests build everything).
targets=(./relay ./fixturecore ./channel ./resolve ./reconcile ./inspect)
[ "$console" = 1 ] && targets+=(./console)
build_start=$(date +%s)
go build -buildvcs=auto -o bin/ "${targets[@]}"
echo "built ${targets[*]#./} in $(( $(date +%s) - build_start )) s"

core_tls=() relay_tls=() core_cli=() chan=() curl_tls=() scheme=http
if [ "$tls" = 1 ]; then
  say "certificates for the demo (a throwaway CA, scripts/certs.sh)"
  pki=$(scripts/certs.sh "$work/pki")
  ls "$pki"
  core_tls=(--tls-cert "$pki/server.pem" --tls-key "$pki/server-key.pem" --client-ca "$pki/ca.pem")
  core_cli=(--core-ca "$pki/ca.pem" --core-cert "$pki/relay.pem" --core-key "$pki/relay-key.pem")
  relay_tls=(--tls-cert "$pki/server.pem" --tls-key "$pki/server-key.pem" --client-ca "$pki/ca.pem" "${core_cli[@]}")
  chan=(--tls --tls-ca "$pki/ca.pem" --tls-cert "$pki/mob.pem" --tls-key "$pki/mob-key.pem")
  curl_tls=(--cacert "$pki/ca.pem" --cert "$pki/relay.pem" --key "$pki/relay-key.pem")
  scheme=https
fi

say "start the fixture core (SLOW memos take 3 s) and the relay (core timeout 1 s)"
bin/fixturecore --listen 127.0.0.1:0 --slow 3 --quiet "${core_tls[@]}" 2>"$work/core.log" &
pids+=($!)
core="$scheme://$(wait_listening "$work/core.log")"
if [ "$kind" = postgres ]; then
  db=$(scripts/pg.sh start "$work/pg")
  echo "throwaway PostgreSQL cluster: $db"
elif [ "$kind" = ha ]; then
  say "start etcd and three Patroni-managed PostgreSQL nodes (synchronous mode strict; about 20 s)"
  go build -o "$work/hacluster" ./internal/testbed/hatest/hacluster
  "$work/hacluster" >"$work/ha.out" 2>"$work/ha.log" &
  pids+=($!)
  for _ in $(seq 1 1200); do grep -q '^node name=node3' "$work/ha.out" && break; sleep 0.1; done
  grep -q '^url=' "$work/ha.out" || { echo "demo: the HA cluster did not start:"; cat "$work/ha.log"; exit 1; }
  db=$(sed -n 's/^url=//p' "$work/ha.out")
  cat "$work/ha.out"
else
  db="$work/relay.db"
fi
bin/relay --db "$db" --listen 127.0.0.1:0 --core "$core" --timeout 1 "${relay_tls[@]}" \
  --metrics-listen 127.0.0.1:0 --metrics-refresh 1 2>"$work/relay.log" &
pids+=($!)
relay=$(wait_listening "$work/relay.log")
metrics=$(sed -n 's/^metrics addr=//p' "$work/relay.log" | head -n1)
echo "core=$core relay=$relay ledger=$db"

if [ "$kind" = ha ]; then
  # leader: the node whose Patroni answers 200 on /primary.
  leader() {
    while read -r _ name _ api dir; do
      if curl -sf -o /dev/null "${api#api=}/primary"; then echo "${name#name=} ${dir#dir=}"; return; fi
    done < <(grep '^node ' "$work/ha.out")
  }
  g1="$(date +%Y%m%d)MOB$(printf '%021d' $RANDOM$RANDOM)"
  say "1. a transfer: GUID $g1"
  bin/channel send --relay "$relay" --guid "$g1" --sent-at 20261129093000 --memo "rent november"
  read -r lname ldir < <(leader)
  say "2. the primary ($lname) loses its PostgreSQL: kill -9 of its postmaster"
  kill -9 "$(head -n1 "$ldir/data/postmaster.pid")"
  start=$(date +%s.%N)
  n=0
  while :; do
    n=$((n + 1))
    g="$(date +%Y%m%d)MOB$(printf '%013d%08d' $RANDOM $n)"
    out=$(bin/channel send --relay "$relay" --guid "$g" --memo "during failover" 2>&1 || true)
    code=$(sed -n 's/^reply 1\/1: \([0-9A-Z]*\).*/\1/p' <<<"$out")
    echo "  $(date +%T) new GUID $g: $code"
    [ "$code" = 0000 ] && break
    sleep 0.5
  done
  echo "service again after $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e-s }') s (Patroni ttl 10 s)"
  read -r nname _ < <(leader)
  echo "the new primary: $nname"
  say "3. the channel retransmits $g1: answered from the new primary's ledger, byte for byte"
  bin/channel send --relay "$relay" --guid "$g1" --sent-at 20261129093500 --memo "rent november"
  echo "the core saw the GUID:"
  curl -s "$core/_stats" | grep -o "\"$g1\":[0-9]*" | head -n1 | sed 's/^/  by_guid /'
  say "the ledger on the new primary"
  sql "SELECT guid, state, rsp_code, attempts, updated_at FROM tx ORDER BY updated_at"
  say "the relay's log"
  cat "$work/relay.log"
  exit 0
fi

g1="$(date +%Y%m%d)MOB$(printf '%021d' $RANDOM$RANDOM)"
say "1. a transfer: GUID $g1"
bin/channel send "${chan[@]}" --relay "$relay" --guid "$g1" --sent-at 20261129093000 --memo "rent november" --raw

say "2. the channel retransmits it (same GUID, later sent_at): answered from the ledger"
bin/channel send "${chan[@]}" --relay "$relay" --guid "$g1" --sent-at 20261129093500 --memo "rent november" --raw
echo "the reply is byte for byte the first one (first sent_at included); the core saw the GUID:"
curl -s "${curl_tls[@]}" "$core/_stats" | grep -o "\"$g1\":[0-9]*" | head -n1 | sed 's/^/  by_guid /'

g2="$(date +%Y%m%d)MOB$(printf '%021d' $RANDOM$RANDOM$RANDOM)"
say "3+4. a slow transfer ($g2) and two concurrent retransmissions"
bin/channel send "${chan[@]}" --relay "$relay" --guid "$g2" --memo "SLOW gift" --repeat 3 --concurrent || true
echo "one send waited for the core and timed out (E901, UNKNOWN); the retransmissions got E903 at once."
sql "SELECT guid, state, rsp_code, attempts, updated_at FROM tx WHERE guid='$g2'"

say "4. the core finishes applying it; resolve resolves the UNKNOWN row by inquiry (--min-age 4)"
sleep 5
bin/resolve --db "$db" --core "$core" --min-age 4 "${core_cli[@]}" 2>/dev/null
echo "the channel asks again with the same GUID and gets the 0000 from the ledger:"
bin/channel send "${chan[@]}" --relay "$relay" --guid "$g2" --memo "SLOW gift"

if [ "$tls" = 1 ]; then
  say "refused: the mobile gateway's certificate sending as internet banking (IBK)"
  bin/channel send "${chan[@]}" --relay "$relay" --channel IBK || true
  echo "E900: the certificate names only urn:dedup:channel:MOB; no row, no call to the core:"
  grep 'not allowed for client certificate' "$work/relay.log" | tail -n1
  say "refused: a channel without a client certificate"
  bin/channel send --tls --tls-ca "$pki/ca.pem" --relay "$relay" || true
  grep 'TLS handshake refused' "$work/relay.log" | tail -n1
fi

say "5. the day proven against the core's journal: reconcile (a second POST of $g1 made straight to the core first)"
curl -s "${curl_tls[@]}" -X POST "$core/v1/transfers" -d "{\"guid\":\"$g1\",\"from\":\"11020030004001\",\"to\":\"11020030004002\",\"amount\":1000,\"memo\":\"another path\"}" >/dev/null
bin/reconcile --db "$db" --core "$core" --date "$(date +%Y%m%d)" "${core_cli[@]}" 2>/dev/null || echo "(exit $?: a critical finding, for a person: docs/reconcile.md)"

say "6. the ledger"
sql "SELECT guid, tx_code, state, rsp_code, attempts, updated_at, length(request) AS req_bytes, length(response) AS rsp_bytes FROM tx ORDER BY updated_at"
echo
echo "stored reply of $g1:"
if [ "$kind" = postgres ]; then
  psql "$db" -tA -c "SELECT convert_from(response, 'UTF8') FROM tx WHERE guid='$g1'"
else
  sqlite3 "$db" "SELECT CAST(response AS TEXT) FROM tx WHERE guid='$g1'"
fi

say "the core's /_stats (the relay POSTed every GUID once; the second application of $g1 is the one made straight to the core)"
curl -s "${curl_tls[@]}" "$core/_stats"; echo

say "what operators see: the relay's own dedup_* metrics (http://$metrics/metrics)"
sleep 1.2   # one refresh of the ledger gauges
curl -s "http://$metrics/metrics" | grep '^dedup_' | grep -v -e '_bucket' -e '_sum' | grep -v ' 0$' || true
echo "(series at 0 left out; /readyz: $(curl -s "http://$metrics/readyz"))"
echo
echo "inspect, the runbook's lookup tool:"
bin/inspect --db "$db" "$g2"

say "the relay's log"
cat "$work/relay.log"

if [ "$console" = 1 ]; then
  say "the operators' console"
  cpki="$work/console-pki"
  scripts/certs.sh "$cpki" >/dev/null
  g3="$(date +%Y%m%d)MOB$(printf '%021d' $RANDOM$RANDOM$RANDOM$RANDOM)"
  bin/channel send --relay "$relay" --guid "$g3" --memo "DROP" || true
  echo "a transfer left in doubt (the core dropped the connection; resolve not run): $g3"
  bin/console --db "$db" --listen 127.0.0.1:0 --tls-cert "$cpki/server.pem" --tls-key "$cpki/server-key.pem" \
    --operator-ca "$cpki/ca.pem" --textfile-dir "$work" 2>"$work/console.log" &
  pids+=($!)
  caddr=$(wait_listening "$work/console.log")
  echo "console: https://$caddr/  (the demo CA: $cpki/ca.pem)"
  echo "import an operator certificate into each of two browsers (password: demo):"
  echo "  kim: $cpki/kim.p12   lee: $cpki/lee.p12   (a viewer: $cpki/vic.p12)"
  echo "kim opens In doubt, finds $g3, proposes not-applied; lee approves it."
  echo "from a shell:  curl --cacert $cpki/ca.pem --cert $cpki/kim.pem --key $cpki/kim-key.pem https://$caddr/doubt"
  echo "Ctrl-C stops everything."
  wait "${pids[-1]}"
fi

say "stop"
kill -TERM "${pids[1]}"; wait "${pids[1]}" && echo "relay exited 0"
tail -n 2 "$work/relay.log"
