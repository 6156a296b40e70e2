#!/usr/bin/env bash
# Installs what dedup needs on a fresh Debian machine, and no more than is
# asked for. Go itself must be on the machine (1.26 or later). Idempotent
# and quiet when everything is there already.
#
#   scripts/setup.sh            everything the tests need (scripts/test.sh
#                               runs this): gcc (cgo, for the SQLite
#                               driver), sqlite3 and curl, the PostgreSQL
#                               server and client (throwaway clusters),
#                               promtool (the alert rules' tests), iproute2
#                               (network namespaces), openssl, etcd and
#                               Patroni (the high-availability ledger),
#                               spin (the model check), faketime and
#                               nftables (time and link faults), lintian and
#                               systemd-analyze (the Debian packages'
#                               checks), sudo, Chromium and NSS's tools (the
#                               console's browser test), and the Go modules
#   scripts/setup.sh demo       what the SQLite demo runs: gcc, sqlite3,
#                               curl and the Go modules (scripts/demo.sh)
#   scripts/setup.sh demo-tls | demo-postgres | demo-ha
#                               the demo's variants: openssl; PostgreSQL;
#                               PostgreSQL, etcd and Patroni
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
case "$what" in
  all | demo | demo-tls | demo-postgres | demo-ha | demo-console) ;;
  *) echo "usage: scripts/setup.sh [demo | demo-tls | demo-postgres | demo-ha | demo-console]" >&2; exit 2 ;;
esac

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { echo "setup: Go is not installed (need 1.26+)" >&2; exit 1; }

missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v sqlite3 >/dev/null 2>&1 || missing+=(sqlite3)
command -v curl >/dev/null 2>&1 || missing+=(curl)
case "$what" in
  demo-tls | demo-console) command -v openssl >/dev/null 2>&1 || missing+=(openssl) ;;
  demo-postgres)
    ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing+=(postgresql)
    command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
    ;;
  demo-ha)
    ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing+=(postgresql)
    command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
    command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
    [ -x /usr/bin/patroni ] || missing+=(patroni)
    ;;
esac
if [ "$what" = all ]; then
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing+=(postgresql)
  command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  # The high-availability ledger's tests: etcd and Patroni (Debian's).
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  [ -x /usr/bin/patroni ] || missing+=(patroni)
  # Time and link faults: libfaketime for a database server whose clock is
  # off, nftables for a broken link between network namespaces.
  [ -n "$(ls /usr/lib/*/faketime/libfaketime.so.1 2>/dev/null)" ] || missing+=(faketime)
  command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing+=(nftables)
  # The protocol's model checker.
  command -v spin >/dev/null 2>&1 || missing+=(spin)
  # The Debian packages: built with dpkg-deb, checked with lintian.
  command -v lintian >/dev/null 2>&1 || missing+=(lintian)
  # Four eyes on a host: settle runs through sudo for real accounts.
  command -v sudo >/dev/null 2>&1 || missing+=(sudo)
  # The console's browser test: Debian's Chromium, and NSS's tools for the
  # operators' certificates in each browser's database.
  [ -x /usr/bin/chromium ] || missing+=(chromium)
  command -v pk12util >/dev/null 2>&1 || missing+=(libnss3-tools)
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq >/dev/null
  # --no-install-recommends and policy-rc.d: the packages' own services
  # (a system PostgreSQL cluster, a Prometheus server) are not wanted here.
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
  $SUDO chmod +x /usr/sbin/policy-rc.d
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  $SUDO rm -f /usr/sbin/policy-rc.d
fi
export CGO_ENABLED=1
# The tests build every package, so they fetch every module first; a demo
# fetches only what its own build needs (go build does, as it builds).
if [ "$what" = all ]; then
  go mod download
fi
