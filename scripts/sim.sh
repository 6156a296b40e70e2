#!/usr/bin/env bash
# The simulation (docs/testing.md, "The simulation"): the relay's real code
# under virtual time, seed by seed, every invariant checked after each
# schedule (internal/testbed/sim).
#
#   scripts/sim.sh [--minutes M] [--seed S] [--first S]
#       runs seeds from --first (default 1) for M minutes of real time
#       (default 3), or replays one seed; exit 0 when every invariant held,
#       1 on a violation (its seed and the GUID's story printed), 2 on a
#       usage error. The last line:
#       sim: seeds=N transfers=N faults=N violations=N seconds=S
#   scripts/sim.sh --mutants [--minutes M] [--replays N]
#       applies each known-wrong change to the money path to a copy of the
#       tree and runs the simulation on it for M minutes (default 3): each
#       must be found (exit 1 when one is not); then replays the seed that
#       found it N times (default 5) and says how often it finds it again.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1
minutes=3 seed=0 first=1 mutants=0 replays=5
usage() { echo "usage: scripts/sim.sh [--minutes M] [--seed S] [--first S] | --mutants [--minutes M] [--replays N]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) [ $# -ge 2 ] || usage; minutes=$2; shift 2 ;;
    --seed) [ $# -ge 2 ] || usage; seed=$2; shift 2 ;;
    --first) [ $# -ge 2 ] || usage; first=$2; shift 2 ;;
    --mutants) mutants=1; shift ;;
    --replays) [ $# -ge 2 ] || usage; replays=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ "$minutes" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "scripts/sim.sh: --minutes: want a number of minutes, got '$minutes'" >&2; exit 2; }
[[ "$seed" =~ ^[0-9]+$ && "$first" =~ ^[0-9]+$ && "$replays" =~ ^[0-9]+$ ]] || { echo "scripts/sim.sh: --seed, --first and --replays take a whole number" >&2; exit 2; }

# run DIR: the simulation in the tree DIR; prints its output, returns go test's status.
run() {
  local timeout_s
  timeout_s=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 + 600 }')
  (cd "$1" && go test -v -count=1 -timeout "${timeout_s}s" -run '^TestSimulation$' ./internal/testbed/sim/ \
    -args -sim.minutes="$minutes" -sim.seed="$seed" -sim.first="$first")
}

if [ "$mutants" = 0 ]; then
  out=$(mktemp)
  rc=0
  run . >"$out" 2>&1 || rc=$?
  grep -v '^sim: \|^=== \|^ *--- PASS\|^ok \|^FAIL$\|^FAIL\s\|^--- FAIL\|^PASS$' "$out" || true
  line=$(grep '^sim: ' "$out" | tail -n 1)
  rm -f "$out"
  if [ -z "$line" ]; then echo "scripts/sim.sh: the simulation did not finish (exit $rc)" >&2; exit 1; fi
  echo "$line"
  case "$line" in *" violations=0 "*) [ "$rc" -eq 0 ] && exit 0 ;; esac
  exit 1
fi

# The mutants: each a known-wrong change to the money path, as a file and a
# sed expression that must change it (and, for some, a second pair).
mutants_list=(
  "resend-unknown|ledger/statements.go|s/WHERE guid=? AND state='FAILED' AND rsp_code='E902' AND (?=0 OR attempts < ?) RETURNING attempts, request/WHERE guid=? AND state IN ('FAILED','UNKNOWN') AND (?=0 OR attempts < ?) RETURNING attempts, request/; s/FROM tx WHERE state='FAILED' AND rsp_code='E902' AND attempts < ? ORDER BY/FROM tx WHERE state IN ('FAILED','UNKNOWN') AND attempts < ? ORDER BY/"
  "sweep-to-failed|ledger/statements.go|s/UPDATE tx SET state='UNKNOWN', rsp_code='E901', response=NULL, updated_at=datetime('now')/UPDATE tx SET state='FAILED', rsp_code='E902', response=NULL, updated_at=datetime('now')/"
  "no-outcome-fence|ledger/statements.go|s/^WHERE guid=? AND state='SENT' AND attempts=?\`,/WHERE guid=? AND ?>=0\`,/"
  "e901-as-e902|internal/coreapi/client.go|s/return unknown(status, \"after connecting: \"+err.Error())/return Result{State: dedup.StateFailed, Code: dedup.CodeNotSent, NoConnection: true}/"
  "resolve-without-proof|internal/resolve/resolve.go|s/	case coreapi.NotFound:/	case coreapi.NotFound, lk.Verdict:/"
  "claim-overwrites|ledger/statements.go|s/VALUES(?,?,'SENT',NULL,?,NULL,1,datetime('now')) ON CONFLICT(guid) DO NOTHING/VALUES(?,?,'SENT',NULL,?,NULL,1,datetime('now')) ON CONFLICT(guid) DO UPDATE SET state='SENT', attempts=1/"
  "settle-no-fence|ledger/statements.go|/Decide: Statement{/,/^\t},/s/^WHERE guid=? AND state=? AND attempts=? AND updated_at=?\`,/WHERE guid=? AND state=? AND ?>=0 AND ?!=''\`,/|internal/settle/settle.go|s/if row == nil || row.State != from.State || row.Attempts != from.Attempts || row.UpdatedAt != from.UpdatedAt {/if row == nil || row.State != from.State {/"
  "no-lease|ledger/bounds.go|s/return BusyTimeout + b.ConnectTimeout + time.Second/return 0/"
)
missed=0
for m in "${mutants_list[@]}"; do
  IFS='|' read -r name file expr file2 expr2 <<<"$m"
  tree=$(mktemp -d)
  git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tree"
  for fe in "$file|$expr" "$file2|$expr2"; do
    f=${fe%%|*} e=${fe#*|}
    [ -n "$f" ] || continue
    cp "$tree/$f" "$tree/$f.orig"
    sed -i "$e" "$tree/$f"
    if cmp -s "$tree/$f" "$tree/$f.orig"; then
      echo "mutant $name: the change did not apply to $f" >&2
      rm -rf "$tree"; exit 1
    fi
    rm "$tree/$f.orig"
  done
  out=$(mktemp)
  start=$(date +%s)
  if run "$tree" >"$out" 2>&1; then
    echo "mutant $name: NOT found in $(( $(date +%s) - start )) s: $(grep '^sim: ' "$out" | tail -n 1)"
    missed=$((missed + 1))
  else
    first_seed=$(grep -o 'replay: scripts/sim.sh --seed [0-9]*' "$out" | head -n 1 | grep -o '[0-9]*$' || true)
    if [ -n "$first_seed" ]; then
      took=$(( $(date +%s) - start ))
      # How often the seed finds it again (Go's scheduler is not
      # deterministic; each actor's choices are).
      again=0
      for _ in $(seq 1 "$replays"); do
        (cd "$tree" && go test -count=1 -run '^TestSimulation$' ./internal/testbed/sim/ -args -sim.seed="$first_seed" >/dev/null 2>&1) || again=$((again + 1))
      done
      echo "mutant $name: found in $took s (seed $first_seed, which finds it again $again times of $replays): $(grep '^sim: ' "$out" | tail -n 1)"
    else
      # A failure that is no violation (the mutant did not build) finds nothing.
      echo "mutant $name: the simulation failed without a violation:"; sed -n 1,30p "$out"
      missed=$((missed + 1))
    fi
  fi
  rm -rf "$tree" "$out"
done
echo "sim: mutants=${#mutants_list[@]} missed=$missed"
[ "$missed" -eq 0 ]
