#!/usr/bin/env bash
# The project's test command (README "The two commands", and what .ci/run calls):
# set-up, formatting, go vet, every test under the race detector (the
# end-to-end tests build the binaries with -race too; the HA tests start
# etcd and three Patroni nodes), the end-to-end tests again on a PostgreSQL
# ledger, the protocol's model check (SPIN), the Debian packages installed,
# upgraded and purged (root), the alert rules' unit tests, the simulation
# (2 minutes of seeds, and its mutants), and short fault
# campaigns on both ledgers, with power cuts (and their controls, which
# must lose transfers), over TLS and on the HA ledger. Clusters are
# started by the tests themselves (throwaway, on free loopback ports or in
# network namespaces) and removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1
# stage names a stage and how long the command has run so far, so that a
# slow stage shows in the log (the whole command should stay under 30
# minutes; docs/testing.md).
stage() { echo "== $* (test.sh: ${SECONDS} s so far)"; }

stage "gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi
stage "go vet"
go vet ./...
go vet -tags faults ./e2e/
# The end-to-end tests mostly wait on the processes they start (timeouts,
# leases, failovers), so four run at once (-parallel 4), not GOMAXPROCS (2).
stage "go test -race (ledger conformance on SQLite and PostgreSQL; end-to-end on SQLite)"
DEDUP_E2E_RACE=1 go test -race -count=1 -parallel 4 -timeout 30m ./...
stage "the simulation: the real code under virtual time, 2 minutes of seeds, then its mutants, each found seed replayed twice (docs/testing.md)"
scripts/sim.sh --minutes 2
scripts/sim.sh --mutants --minutes 3 --replays 2
stage "end-to-end tests on a PostgreSQL ledger, beside the model check (SPIN, one core)"
# The model check is one CPU-bound process and the tests mostly wait, so
# they share the machine; the model's output follows the tests'.
model_log=$(mktemp)
scripts/model.sh >"$model_log" 2>&1 &
model_pid=$!
e2e_rc=0
# The tests that start PostgreSQL clusters of their own already ran above;
# the full-disk test is about the SQLite file.
DEDUP_E2E_LEDGER=postgres DEDUP_E2E_RACE=1 go test -race -count=1 -parallel 4 -timeout 30m \
  -skip 'TestTwoHostsShareOnePostgresLedger|TestPurgeBesideAReaderStallsNoClaim|TestFastLedgerClockDecidesNothingByAge|TestBrokenLinkToTheCore|TestPostgresDown|TestReadyzFollowsTheLedger|TestFullDiskLosesNothing|TestLedgerFilesArePrivateAndPurgeLeavesNoMemo|TestHA|TestNoPasswordLeavesTheProcess|TestCommitWithoutTheStandbyIsCountedAndNotSent' ./e2e/ || e2e_rc=$?
model_rc=0
wait "$model_pid" || model_rc=$?
stage "the protocol, model-checked (SPIN: the model and its mutants)"
cat "$model_log"
rm -f "$model_log"
if [ "$e2e_rc" -ne 0 ]; then echo "test.sh: the end-to-end tests on PostgreSQL failed" >&2; exit 1; fi
if [ "$model_rc" -ne 0 ]; then echo "test.sh: the model check failed" >&2; exit 1; fi
stage "the Debian packages, installed into this machine (root)"
if [ "$(id -u)" -eq 0 ]; then
  scripts/package-test.sh
else
  echo "test.sh: the package test installs packages and must run as root (CI does)" >&2
  exit 1
fi
if [ -d deploy/prometheus ]; then
  stage "promtool test rules"
  promtool check rules deploy/prometheus/alerts.yml
  promtool test rules deploy/prometheus/alerts_test.yml
fi
stage "short fault campaign (SQLite)"
scripts/faults.sh --short
stage "short fault campaign (PostgreSQL, with database crashes)"
scripts/faults.sh --short --ledger postgres
stage "short power-loss campaign (SQLite on a file system that loses unsynced writes), and its control"
scripts/faults.sh --power-loss --short
stage "short power-loss campaign (PostgreSQL's data directory on it), and its control"
scripts/faults.sh --power-loss --short --ledger postgres
stage "short fault campaign over TLS (channels over mutual TLS, the core over https)"
scripts/faults.sh --short --tls
stage "short fault campaign on the HA ledger (etcd and three Patroni nodes; failovers)"
scripts/faults.sh --short --ledger patroni --runs 2
stage "done"
