#!/usr/bin/env bash
# Installs what building and testing dedup needs on a fresh Debian machine:
# gcc (cgo, for the SQLite driver), the sqlite3 shell and curl (used by the
# demo to show the ledger and the core's stats), the PostgreSQL server (the
# tests start throwaway clusters of it), psql, promtool (the alert rules'
# unit tests), iproute2 (the two-hosts test's network namespaces), openssl
# (the TLS demo's and benchmark's certificates), etcd and Patroni (the
# high-availability ledger's tests start throwaway clusters of them), spin
# (the protocol's model check), faketime and nftables (time and link
# faults), lintian and systemd-analyze (the Debian
# packages' checks), and the Go modules. Go itself must be on the machine (1.26 or later). Idempotent
# and quiet when everything is there already.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || { echo "setup: Go is not installed (need 1.26+)" >&2; exit 1; }

missing=()
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
command -v sqlite3 >/dev/null 2>&1 || missing+=(sqlite3)
command -v curl >/dev/null 2>&1 || missing+=(curl)
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
go mod download
