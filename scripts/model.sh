#!/usr/bin/env bash
# Model-checks the money-safety protocol (model/dedup.pml, docs/model.md)
# with SPIN: the correct model must verify with "errors: 0" over its whole
# state space (no depth limit hit, nothing left unsearched), and every
# mutant must fail with a counterexample, printed as a story (which process
# did what, step by step). Prints states explored and time.
#
#   scripts/model.sh            the model and every mutant
#   scripts/model.sh MUT_NO_LEASE   one mutant, with its whole trail
set -euo pipefail
cd "$(dirname "$0")/.."
command -v spin >/dev/null || { echo "model.sh: spin not found (scripts/setup.sh installs Debian's spin)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp model/dedup.pml "$work/"
cd "$work"

mutants=(MUT_SELECT_INSERT MUT_NO_FENCE MUT_NO_LEASE MUT_NO_MINAGE MUT_REPROCESS_UNKNOWN MUT_PURGE_UNKNOWN MUT_RESET_FAILED MUT_GRACEFUL_CLOSE MUT_NO_CONFIRM MUT_SETTLE_NO_FENCE)
declare -A what=(
  [MUT_SELECT_INSERT]="select-then-insert claim"
  [MUT_NO_FENCE]="finish without the attempts fence"
  [MUT_NO_LEASE]="no lease: a frozen holder sends after resuming"
  [MUT_NO_MINAGE]="resolve without --min-age"
  [MUT_REPROCESS_UNKNOWN]="reprocess selecting UNKNOWN"
  [MUT_PURGE_UNKNOWN]="purge deleting UNKNOWN"
  [MUT_RESET_FAILED]="a reset after the send taken for FAILED"
  [MUT_GRACEFUL_CLOSE]="a connection given up on closed gracefully: the request arrives when the link heals"
  [MUT_NO_CONFIRM]="a paused holder sends without confirming its claim on the ledger's clock"
  [MUT_SETTLE_NO_FENCE]="an operator's approval without the fence on the row as proposed"
)

# verify [MACRO]: builds and runs the verifier; its output in pan.out.
verify() {
  local def=()
  for m in ${1:-}; do def+=("-D$m"); done
  spin -a "${def[@]}" dedup.pml >/dev/null
  gcc -O2 -DSAFETY -w -o pan pan.c
  rm -f dedup.pml.trail
  ./pan -m1000000 -n >pan.out 2>&1 || true
}

# story MACRO: the counterexample as the processes' own words.
story() {
  local def=()
  for m in $1; do def+=("-D$m"); done
  spin -t "${def[@]}" dedup.pml 2>&1 | sed -n 's/^ \{2,\}\([a-z].*\)/    \1/p; s/^spin: text of failed assertion: /    VIOLATED: /p'
}

status=0
start=$(date +%s.%N)
# check CONFIG TITLE: the correct model (with the macros CONFIG) must
# verify over its whole state space.
check() {
  echo "== $2"
  verify "$1"
  grep -E 'errors:|states, stored|transitions|elapsed time' pan.out | sed 's/^/  /'
  if ! grep -q 'errors: 0' pan.out; then
    echo "model.sh: the correct model has a counterexample:" >&2
    spin -t ${1:+-D$1} dedup.pml | tail -n 60 >&2
    exit 1
  fi
  if grep -qE 'max search depth too small|Search not completed|out of memory|truncated' pan.out; then
    echo "model.sh: the search did not cover the whole state space:" >&2
    cat pan.out >&2
    exit 1
  fi
  echo "  verified: errors 0 over the whole state space"
}
if [ $# -eq 0 ]; then
  check "" "the model (2 relay holders, channel, sweep, resolve, reprocess, purge, core)"
  check SETTLE "the model with an operator's decision (settle: propose, then a fenced approval), smaller fault budgets"
else
  mutants=("$1")
fi
for m in "${mutants[@]}"; do
  echo "== mutant $m (${what[$m]}): must fail"
  config=$m
  [ "$m" = MUT_SETTLE_NO_FENCE ] && config="SETTLE $m"   # the operator exists only there
  verify "$config"
  if grep -q 'errors: 0' pan.out || [ ! -f dedup.pml.trail ]; then
    echo "  NOT CAUGHT: the model does not notice this mutant" >&2
    status=1
    continue
  fi
  grep -E 'assertion violated|states, stored' pan.out | head -n 2 | sed 's/^/  /'
  echo "  counterexample:"
  if [ $# -eq 0 ]; then story "$config" | tail -n 14; else story "$config"; fi
done
echo "model.sh: $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f", e-s }') s in all"
[ $status -eq 0 ] && echo "model.sh: the model verified and every mutant was caught"
exit $status
