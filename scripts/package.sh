#!/usr/bin/env bash
# Builds the Debian packages with Debian's own dpkg-deb (no packager of our
# own, no hand-written ar/tar): from a staging tree per package, whose
# maintainer scripts come from deploy/debian/.
#
#   dist/dedup_VERSION_ARCH.deb        relay, resolve, reprocess, purge, settle,
#                                      inspect (the git revision stamped),
#                                      the systemd units and timers,
#                                      /etc/dedup/*.env, logrotate, the
#                                      Prometheus rules, man pages, the docs
#   dist/dedup-tools_VERSION_ARCH.deb  fixturecore and channel (test tools:
#                                      never on a production host)
#
#   scripts/package.sh                 version from git: 0.1.0+gitDATE.REV-1
#   VERSION=0.1.0+local-1 scripts/package.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH" CGO_ENABLED=1
command -v dpkg-deb >/dev/null || { echo "package.sh: dpkg-deb not found (Debian's dpkg)" >&2; exit 1; }

rev=$(git rev-parse --short=12 HEAD)
version=${VERSION:-0.1.0+git$(git log -1 --format=%cd --date=format:%Y%m%d%H%M%S).$rev-1}
arch=$(dpkg --print-architecture)
out=${DIST:-dist}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
maintainer="dedup maintainers <dedup@bank.example>"
date=$(date -R -d "@$(git log -1 --format=%ct)")

# build DIR PACKAGES...: the binaries, PIE, stripped, revision and version stamped.
build() {
  local dir=$1; shift
  go build -buildvcs=true -trimpath -buildmode=pie -ldflags "-s -w -X dedup/internal/cli.Version=$version" -o "$dir/" "$@"
}

# manpage BIN SECTION DIR: a man page made of the binary's --help text.
manpage() {
  local bin=$1 dir=$3 name
  name=$(basename "$bin")
  mkdir -p "$dir"
  {
    printf '.TH %s 1 "%s" "dedup %s" "dedup"\n' "$(tr a-z A-Z <<<"$name")" "$(date -d "$date" +%Y-%m-%d)" "$version"
    printf '.SH NAME\n%s \\- %s\n' "$name" "$("$bin" --help | sed -n '3p' | sed 's/\\/\\e/g')"
    printf '.SH SYNOPSIS\n.nf\n'
    "$bin" --help | sed -e 's/\\/\\e/g' -e 's/^\([.'"'"']\)/\\\&\1/'
    printf '.fi\n.SH SEE ALSO\n/usr/share/doc/dedup/README.md.gz, /usr/share/doc/dedup/docs/\n'
  } | gzip -9n >"$dir/$name.1.gz"
}

# docfiles PKG DIR: copyright and changelog.Debian.gz of a package.
docfiles() {
  local pkg=$1 dir=$2
  mkdir -p "$dir"
  cat >"$dir/copyright" <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: dedup
Source: the dedup repository

Files: *
Copyright: 2026 the dedup authors
License: proprietary
 All rights reserved. Distributed to the bank's hosts for its own use only.
COPYRIGHT
  printf '%s (%s) unstable; urgency=medium\n\n  * Built from revision %s.\n\n -- %s  %s\n' \
    "$pkg" "$version" "$rev" "$maintainer" "$date" | gzip -9n >"$dir/changelog.Debian.gz"
}

# control PKG DEPENDS DESCRIPTION LONG STAGE: DEBIAN/control.
control() {
  local pkg=$1 depends=$2 short=$3 long=$4 stage=$5
  mkdir -p "$stage/DEBIAN"
  cat >"$stage/DEBIAN/control" <<CONTROL
Package: $pkg
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $depends
Section: net
Priority: optional
Homepage: https://bank.example/dedup
Description: $short
$(sed 's/^/ /' <<<"$long")
CONTROL
}

# --- dedup ---
s="$work/dedup"
build "$s/usr/bin" ./relay ./resolve ./reprocess ./purge ./reconcile ./inspect ./settle ./console
install -d -m 0755 "$s/lib/systemd/system" "$s/etc/dedup" "$s/etc/logrotate.d" "$s/etc/cron.d" \
  "$s/usr/share/dedup" "$s/usr/share/dedup/prometheus" "$s/usr/share/dedup/grafana" "$s/usr/share/doc/dedup/docs" "$s/usr/share/doc/dedup/examples"
install -m 0644 deploy/systemd/*.service deploy/systemd/*.socket deploy/systemd/*.timer "$s/lib/systemd/system/"
install -m 0644 deploy/etc/relay.env deploy/etc/jobs.env deploy/etc/reconcile.env deploy/etc/console.env "$s/etc/dedup/"
install -m 0644 deploy/logrotate/dedup "$s/etc/logrotate.d/dedup"
install -m 0644 deploy/prometheus/alerts.yml deploy/prometheus/alerts_test.yml "$s/usr/share/dedup/prometheus/"
install -m 0644 deploy/grafana/dedup.json "$s/usr/share/dedup/grafana/"
install -m 0644 deploy/cron.example "$s/usr/share/doc/dedup/examples/cron"
# The operators' sudo rule, installed by postinst as /etc/sudoers.d/dedup
# (root's, 0440, checked with visudo first): shipping the file itself would
# ship its directory too, and dpkg would give sudo's 0750 /etc/sudoers.d
# the shipped directory's mode.
install -m 0644 deploy/sudoers/dedup "$s/usr/share/dedup/sudoers"
gzip -9nc README.md >"$s/usr/share/doc/dedup/README.md.gz"
for d in docs/*.md; do gzip -9nc "$d" >"$s/usr/share/doc/dedup/docs/$(basename "$d").gz"; done
for b in relay resolve reprocess purge reconcile inspect settle console; do manpage "$s/usr/bin/$b" 1 "$s/usr/share/man/man1"; done
docfiles dedup "$s/usr/share/doc/dedup"
install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$s/DEBIAN/" 2>/dev/null || {
  mkdir -p "$s/DEBIAN"; install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$s/DEBIAN/"; }
printf '/etc/dedup/relay.env\n/etc/dedup/jobs.env\n/etc/dedup/reconcile.env\n/etc/dedup/console.env\n/etc/logrotate.d/dedup\n' >"$s/DEBIAN/conffiles"
control dedup "adduser, sudo, libc6 (>= 2.34)" "relay that never applies a bank transfer twice" \
"dedup stands between a bank's channels (mobile, internet banking, ATM) and
its core banking system, and makes sure that a transfer retransmitted with
the same GUID is never applied twice: a durable state ledger (SQLite, or a
shared PostgreSQL), retransmissions answered from it, in-doubt transfers
resolved by inquiry, and only what surely never arrived sent again.
.
This package holds the relay service and its batch jobs (resolve, reprocess,
purge, reconcile) with their systemd timers, inspect, the operators' console (HTTPS,
each person known by a client certificate), and settle (an operator's decision
with four eyes, on the record: operators, members of the group
dedup-operators, run it through sudo as the dedup account)." "$s"
# The cron example is documentation, not an active cron file.
rmdir "$s/etc/cron.d"

# --- dedup-tools ---
t="$work/tools"
build "$t/usr/bin" ./fixturecore ./channel
for b in fixturecore channel; do manpage "$t/usr/bin/$b" 1 "$t/usr/share/man/man1"; done
docfiles dedup-tools "$t/usr/share/doc/dedup-tools"
control dedup-tools "libc6 (>= 2.34)" "test tools of the dedup relay: fixture core and channel simulator" \
"fixturecore is a non-idempotent fixture core banking system and channel a
channel simulator, for tests, smoke runs, benchmarks and demos of the dedup
relay. Never install them on a production host." "$t"

for pkg in dedup:"$s" dedup-tools:"$t"; do
  name=${pkg%%:*} dir=${pkg#*:}
  find "$dir" -type d -exec chmod 0755 {} +
  dpkg-deb --root-owner-group --build "$dir" "$out/${name}_${version}_${arch}.deb" >/dev/null
  echo "$out/${name}_${version}_${arch}.deb"
done
