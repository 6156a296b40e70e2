#!/usr/bin/env bash
# The fault campaign: seeded randomized runs of the real relay, fixture core
# and batch jobs under kill -9, SIGTERM, core outages and crashes, slow core
# answers, concurrent resolve/reprocess/purge, hang-ups and retransmission
# bursts; then four checks of the whole history (docs/testing.md "Fault campaign").
#
#   scripts/faults.sh                 20 runs (the default campaign)
#   scripts/faults.sh --short         3 short runs, then proof that the checks
#                                     catch a relay with a broken claim (CI)
#   scripts/faults.sh --seed N --runs 1   replay one run
#   scripts/faults.sh --broken        run with a select-then-insert claim:
#                                     must report double applications
#   scripts/faults.sh --ledger postgres   the same on PostgreSQL: each run has
#                                     a cluster of its own, and database
#                                     crashes (pg_ctl stop -m immediate) and
#                                     restarts join the faults
#   scripts/faults.sh --ledger patroni    each run has etcd and three
#                                     Patroni-managed PostgreSQL nodes
#                                     (synchronous mode strict): the primary's
#                                     postmaster killed, the primary host lost,
#                                     switchovers and the synchronous standby
#                                     lost join the faults; prints the
#                                     failover time (p50, max)
#   scripts/faults.sh --tls           every link over TLS: channels with client
#                                     certificates (channel binding), the core
#                                     over https with a client certificate
#   scripts/faults.sh --power-loss    the ledger (SQLite file or, with --ledger
#                                     postgres, the data directory) on a file
#                                     system that loses unsynced writes; power
#                                     cuts (everything killed, the database
#                                     crashed, unsynced writes dropped, the
#                                     files checked, everything restarted) join
#                                     the faults; then the same cuts with
#                                     --synchronous normal (PostgreSQL:
#                                     synchronous_commit=off), which must lose
#                                     transfers: the proof that the fault is
#                                     injected
#   scripts/faults.sh --power-loss --control   only that control
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1

runs=20 duration=12s seed=0 short=0 broken=0 parallel=2 ledger=sqlite tls=false powerloss=false control=0
while [ $# -gt 0 ]; do
  case "$1" in
    --short) short=1; runs=3; duration=6s ;;
    --runs) runs="$2"; shift ;;
    --seed) seed="$2"; shift ;;
    --duration) duration="$2"; shift ;;
    --broken) broken=1 ;;
    --parallel) parallel="$2"; shift ;;
    --ledger) ledger="$2"; shift
      # Three PostgreSQL nodes, etcd and Patroni per run: one run at a time.
      [ "$ledger" = patroni ] && parallel=1 ;;
    --tls) tls=true ;;
    --power-loss) powerloss=true ;;
    --control) control=1 ;;
    *) echo "faults.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

campaign() { # extra go test -args...
  go test -tags faults -count=1 -timeout 30m -parallel "$parallel" -run '^TestFaultCampaign$' -v ./e2e/ \
    -args -faults.runs="$runs" -faults.seed="$seed" -faults.duration="$duration" -faults.ledger="$ledger" -faults.tls="$tls" \
    -faults.powerloss="$powerloss" "$@"
}
summary() { grep -E '^(faults|check [0-9]|failover|settle:)' || true; }

# control: the power cuts with every commit's fsync given up must lose
# acknowledged transfers (checks 1 or 2), or the cuts are not injected.
control() {
  echo "== proof that the power cut is injected: the same cuts with --synchronous normal must lose transfers"
  local clog
  clog=$(mktemp /tmp/dedup-faults-control.XXXXXX)
  set +e
  runs=2 campaign -faults.synchronous=normal >"$clog" 2>&1
  local cstatus=$?
  set -e
  summary <"$clog"
  if [ $cstatus -eq 0 ] || ! grep -Eq '^check (1|2) .*caught the lost commits' "$clog"; then
    echo "faults.sh: the power cuts lost nothing with --synchronous normal: the fault is NOT being injected" >&2
    rm -f "$clog"
    exit 1
  fi
  rm -f "$clog"
  echo "faults.sh: --synchronous normal lost transfers at the cuts, as it must"
}
if [ "$powerloss" = true ] && [ "$control" = 1 ]; then
  control
  exit 0
fi

if [ "$broken" = 1 ]; then
  campaign -faults.broken=true | summary
  exit "${PIPESTATUS[0]}"
fi

log=$(mktemp /tmp/dedup-faults.XXXXXX)
trap 'rm -f "$log"' EXIT
set +e
campaign >"$log" 2>&1
status=$?
set -e
summary <"$log"
if [ $status -ne 0 ]; then
  echo "faults.sh: the campaign FAILED; details:" >&2
  grep -vE '^\s+time=' "$log" | tail -n 200 >&2
  exit $status
fi

if [ "$powerloss" = true ]; then
  control
  exit 0
fi

if [ "$short" = 1 ] && [ "$ledger" = sqlite ] && [ "$tls" = false ]; then
  echo "== proof that the checks can fail: one run with a select-then-insert claim"
  set +e
  runs=1 duration=6s
  campaign -faults.broken=true >"$log" 2>&1
  bstatus=$?
  set -e
  summary <"$log"
  if [ $bstatus -eq 0 ] || ! grep -q '^check 1 no double application: caught the broken relay' "$log"; then
    echo "faults.sh: the broken claim was NOT caught: the checks cannot fail" >&2
    exit 1
  fi
  echo "faults.sh: the broken claim was caught, as it must be"
fi
