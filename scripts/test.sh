#!/usr/bin/env bash
# The project's test command (README "Tests", and what .ci/run calls):
# set-up, formatting, go vet, every test under the race detector (the
# end-to-end tests build the binaries with -race too), and a short fault
# campaign.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1

echo "== gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi
echo "== go vet"
go vet ./...
echo "== go test -race"
DEDUP_E2E_RACE=1 go test -race -count=1 -timeout 30m ./...
echo "== short fault campaign"
scripts/faults.sh --short
