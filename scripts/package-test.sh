#!/usr/bin/env bash
# Tests the Debian packages by installing them into this machine (as root;
# CI is): build two versions, lintian, dpkg -i, check the user, the
# directories and their modes, the units (systemd-analyze verify), run the
# installed relay --version and an installed resolve --metrics-textfile as
# the dedup user against the installed fixture core, upgrade to the higher
# version (the edited configuration kept), remove, purge, and check that no
# file of the packages is left. Where systemd is not PID 1 (as on CI), it
# says which steps it cannot run and runs the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "package-test: must run as root (it installs the packages)" >&2; exit 1; }
export PATH="/usr/local/go/bin:$PATH"

fail() { echo "package-test: FAILED: $*" >&2; exit 1; }
ok() { echo "  ok: $*"; }
work=$(mktemp -d)
core_pid=""
cleanup() {
  [ -n "$core_pid" ] && kill "$core_pid" 2>/dev/null || true
  dpkg -P dedup dedup-tools >/dev/null 2>&1 || true
  if [ -n "${accounts_made:-}" ]; then userdel -r pkgkim 2>/dev/null || true; userdel -r pkglee 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

base="0.1.0+pkgtest$(date +%s)"
echo "== build version 1 and version 2"
v1=$(VERSION="$base-1" DIST="$work/v1" scripts/package.sh)
v2=$(VERSION="$base-2" DIST="$work/v2" scripts/package.sh)
echo "$v1" | sed 's/^/  /'

echo "== lintian"
lint=$(lintian $v1 2>&1 | grep -v 'running with root privileges' || true)
echo "${lint:-  (nothing)}" | sed 's/^/  /'
if grep -q '^E:' <<<"$lint"; then fail "lintian reports errors"; fi
ok "no lintian errors"

echo "== install version 1"
sudoers_dir_mode=$(stat -c '%a' /etc/sudoers.d 2>/dev/null || echo none)
dpkg -i $v1 >/dev/null
getent passwd dedup >/dev/null || fail "no dedup user"
uid=$(id -u dedup)
[ "$uid" -lt 1000 ] || fail "dedup is not a system user (uid $uid)"
[ "$(getent passwd dedup | cut -d: -f7)" = /usr/sbin/nologin ] || fail "dedup has a login shell"
ok "system user dedup (uid $uid, no login shell)"
check_dir() { # PATH MODE OWNER:GROUP
  [ -d "$1" ] || fail "$1 missing"
  got=$(stat -c '%a %U:%G' "$1")
  [ "$got" = "$2 $3" ] || fail "$1 is $got, want $2 $3"
  ok "$1 $got"
}
check_dir /var/lib/dedup 700 dedup:dedup
check_dir /var/log/dedup 750 dedup:dedup
check_dir /var/lib/node_exporter/textfile 775 root:dedup
for u in dedup-relay.service dedup-relay.socket dedup-console.service dedup-resolve.service dedup-resolve.timer dedup-reprocess.service dedup-reprocess.timer dedup-purge.service dedup-purge.timer dedup-check.service dedup-check.timer dedup-reconcile.service dedup-reconcile.timer; do
  [ -f "/lib/systemd/system/$u" ] || fail "unit $u not installed"
done
ok "units installed in /lib/systemd/system"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify /lib/systemd/system/dedup-*.service /lib/systemd/system/dedup-*.socket /lib/systemd/system/dedup-*.timer || fail "systemd-analyze verify"
  ok "systemd-analyze verify passes on the installed units"
  echo "  systemd-analyze security (offline) of dedup-relay.service:"
  systemd-analyze security --offline=true /lib/systemd/system/dedup-relay.service 2>/dev/null | tail -n 1 | sed 's/^/    /'
fi
for t in resolve reprocess purge check reconcile; do
  [ -L "/etc/systemd/system/timers.target.wants/dedup-$t.timer" ] || fail "dedup-$t.timer not enabled"
done
ok "the five timers enabled"
[ ! -e /etc/systemd/system/multi-user.target.wants/dedup-relay.service ] || fail "the relay was enabled before it was configured"
[ ! -e /etc/systemd/system/sockets.target.wants/dedup-relay.socket ] || fail "the relay's socket was enabled before the relay was configured"
ok "the relay and its socket not enabled (not configured yet)"
[ ! -e /etc/systemd/system/multi-user.target.wants/dedup-console.service ] || fail "the console was enabled before it was configured"
/usr/bin/console --version >/dev/null || fail "console is not installed"
[ -f /etc/dedup/console.env ] && ! grep -qi 'password=' /etc/dedup/console.env || fail "console.env missing or holds a password"
ok "the console installed, not enabled (it needs its certificates), console.env without a password"
[ -f /etc/dedup/relay.env ] && ! grep -qi 'password=' /etc/dedup/relay.env || fail "relay.env missing or holds a password"
ok "/etc/dedup/relay.env and jobs.env installed, no password in them"
for b in fixturecore channel; do [ -x /usr/bin/$b ] || fail "$b not in dedup-tools"; done
if dpkg -c $(grep '/dedup_' <<<"$v1") | grep -Eq 'usr/bin/(fixturecore|channel)'; then fail "the test tools are in the production package"; fi
ok "fixturecore and channel only in dedup-tools"

echo "== the installed binaries"
ver=$(/usr/bin/relay --version)
echo "  $ver"
grep -qF "relay $base-1 revision " <<<"$ver" && grep -Eq ' revision [0-9a-f]{40}' <<<"$ver" ||
  fail "relay --version does not show the version and the revision"
ok "relay --version shows the package version and the git revision"
man -w relay >/dev/null 2>&1 || [ -f /usr/share/man/man1/relay.1.gz ] || fail "no man page for relay"
[ -f /usr/share/man/man1/settle.1.gz ] || fail "no man page for settle"
/usr/bin/settle --version >/dev/null || fail "settle is not installed"
grep -q DedupSettleProposalWaiting /usr/share/dedup/prometheus/alerts.yml || fail "the settle alert is not shipped"
cmp -s deploy/grafana/dedup.json /usr/share/dedup/grafana/dedup.json || fail "the Grafana dashboard is not shipped as deploy/grafana/dedup.json"
ok "man pages installed (settle's too), settle and its alert shipped"
/usr/bin/reconcile --version >/dev/null || fail "reconcile is not installed"
[ -f /usr/share/man/man1/reconcile.1.gz ] || fail "no man page for reconcile"
[ -f /etc/dedup/reconcile.env ] && ! grep -qi 'password=' /etc/dedup/reconcile.env || fail "reconcile.env missing or holds a password"
grep -q DedupReconcileCritical /usr/share/dedup/prometheus/alerts.yml || fail "the reconcile alerts are not shipped"
ok "reconcile installed with its man page, reconcile.env and its alerts"

/usr/bin/fixturecore --listen 127.0.0.1:0 --quiet 2>"$work/core.log" &
core_pid=$!
for _ in $(seq 1 100); do grep -q '^listening addr=' "$work/core.log" && break; sleep 0.05; done
core="http://$(sed -n 's/^listening addr=//p' "$work/core.log")"
set +e
out=$(runuser -u dedup -- /usr/bin/resolve --db /var/lib/dedup/relay.db --core "$core" --min-age 300 \
  --metrics-textfile /var/lib/node_exporter/textfile/dedup_resolve.prom 2>&1)
rc=$?
set -e
echo "$out" | tail -n 1 | sed 's/^/  /'
[ $rc -eq 0 ] || fail "resolve as dedup exited $rc: $out"
grep -q '^dedup_job_last_success_timestamp_seconds{job="resolve"}' /var/lib/node_exporter/textfile/dedup_resolve.prom ||
  fail "resolve wrote no success into its textfile"
ok "resolve as dedup: exit 0, textfile written"
[ "$(stat -c %a /var/lib/dedup/relay.db)" = 600 ] || fail "the ledger is not 0600"
ok "the ledger the job created is 0600"

echo "== four eyes through sudo: the shipped sudoers file, two real accounts"
[ "$(stat -c '%a %U:%G' /etc/sudoers.d/dedup)" = "440 root:root" ] || fail "/etc/sudoers.d/dedup is not 0440 root:root"
visudo -cf /etc/sudoers.d/dedup >/dev/null || fail "visudo -cf /etc/sudoers.d/dedup"
getent group dedup-operators >/dev/null || fail "no group dedup-operators"
[ "$(stat -c '%a' /etc/sudoers.d)" = "$sudoers_dir_mode" ] || fail "the package changed /etc/sudoers.d's mode (sudo's, $sudoers_dir_mode)"
ok "/etc/sudoers.d/dedup 0440 root:root, visudo -cf passes, /etc/sudoers.d's mode untouched, group dedup-operators"
for who in pkgkim pkglee; do
  id "$who" >/dev/null 2>&1 || useradd -m -G dedup-operators "$who"
  echo "$who:pw-$who" | chpasswd
done
accounts_made=1
g=20261202MOB0000000000000000PKG01
sqlite3 /var/lib/dedup/relay.db "INSERT INTO tx(guid,tx_code,state,rsp_code,request,response,attempts,updated_at) VALUES('$g','TRF00001','UNKNOWN','E901',NULL,NULL,1,datetime('now','-600 seconds'))"
# as WHO ARGS...: settle through sudo as dedup, WHO's password on stdin.
as() { local who=$1; shift; echo "pw-$who" | runuser -u "$who" -- sudo -S -p '' -u dedup /usr/bin/settle --db /var/lib/dedup/relay.db "$@" 2>&1; }
set +e
out=$(as pkgkim propose "$g" --as not-applied --reason "package test: never received"); rc=$?
set -e
[ $rc -eq 0 ] || fail "pkgkim's proposal through sudo exited $rc: $out"
id=$(sed -n 's/^settle: proposed id=\([0-9]*\) .*/\1/p' <<<"$out")
[ -n "$id" ] || fail "no proposal id in: $out"
ok "pkgkim proposed through sudo -u dedup (id $id)"
refused() { # DESCRIPTION COMMAND...: must exit 1 with one settle: line, the row unchanged
  local what=$1; shift
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  [ $rc -eq 1 ] || fail "$what: exit $rc, want 1: $out"
  [ "$(grep -c '^settle: ' <<<"$out")" = 1 ] || fail "$what: not one line: $out"
  [ "$(sqlite3 /var/lib/dedup/relay.db "SELECT state FROM tx WHERE guid='$g'")" = UNKNOWN ] || fail "$what changed the row"
  ok "refused: $what"
}
refused "pkgkim approving her own proposal" as pkgkim approve "$id"
refused "pkgkim approving with SUDO_USER=pkglee" bash -c "echo pw-pkgkim | runuser -u pkgkim -- env SUDO_USER=pkglee SUDO_UID=$(id -u pkglee) sudo -S -p '' -u dedup /usr/bin/settle --db /var/lib/dedup/relay.db approve $id"
refused "the owner approving directly" runuser -u dedup -- /usr/bin/settle --db /var/lib/dedup/relay.db approve "$id"
refused "the owner approving directly with SUDO_UID of pkglee" runuser -u dedup -- env SUDO_USER=pkglee SUDO_UID="$(id -u pkglee)" /usr/bin/settle --db /var/lib/dedup/relay.db approve "$id"
refused "root approving directly" /usr/bin/settle --db /var/lib/dedup/relay.db approve "$id"
refused "root approving with SUDO_UID of pkglee" env SUDO_USER=pkglee SUDO_UID="$(id -u pkglee)" /usr/bin/settle --db /var/lib/dedup/relay.db approve "$id"
set +e; out=$(echo pw-pkgkim | runuser -u pkgkim -- sudo -S -p '' -u dedup /usr/bin/sqlite3 /var/lib/dedup/relay.db "UPDATE tx SET state='FAILED'" 2>&1); rc=$?; set -e
[ $rc -ne 0 ] || fail "sudo let an operator run sqlite3 as dedup"
ok "sudo lets an operator run nothing else as dedup (sqlite3 refused)"
set +e; out=$(as pkglee approve "$id" --reason "package test"); rc=$?; set -e
[ $rc -eq 0 ] || fail "pkglee's approval exited $rc: $out"
[ "$(sqlite3 /var/lib/dedup/relay.db "SELECT state||'/'||rsp_code FROM tx WHERE guid='$g'")" = FAILED/E902 ] || fail "the approval did not make the row FAILED/E902"
actors=$(sqlite3 /var/lib/dedup/relay.db "SELECT action||' '||actor FROM tx_event WHERE guid='$g' ORDER BY id")
grep -q "^propose settle:pkgkim(sudo uid $(id -u pkgkim))@" <<<"$actors" || fail "the proposal's actor: $actors"
grep -q "^approve settle:pkglee(sudo uid $(id -u pkglee))@" <<<"$actors" || fail "the approval's actor: $actors"
ok "pkglee approved: FAILED/E902; the events name both accounts by uid"
out=$(echo pw-pkglee | runuser -u pkglee -- sudo -S -p '' -u dedup /usr/bin/inspect --db /var/lib/dedup/relay.db "$g" 2>&1) || fail "inspect through sudo: $out"
grep -q "approve by settle:pkglee(sudo uid" <<<"$out" || fail "inspect does not show the approver: $out"
runuser -u dedup -- /usr/bin/settle --db /var/lib/dedup/relay.db list >/dev/null || fail "settle list as the owner"
ok "inspect through sudo shows the story; settle list works as the owner directly"
fid=$(sqlite3 /var/lib/dedup/relay.db "INSERT INTO critical_finding(guid,class,business_date,first_run,last_run) VALUES('$g','applied_twice','20261202',1,1) RETURNING id")
set +e; out=$(echo pw-pkgkim | runuser -u pkgkim -- sudo -S -p '' -u dedup /usr/bin/reconcile close --db /var/lib/dedup/relay.db --finding "$fid" --note "package test: REV-1" 2>&1); rc=$?; set -e
[ $rc -eq 0 ] || fail "pkgkim's reconcile close through sudo exited $rc: $out"
[ "$(sqlite3 /var/lib/dedup/relay.db "SELECT closed_by FROM critical_finding WHERE id=$fid")" = "settle:pkgkim(sudo uid $(id -u pkgkim))@$(hostname)" ] || fail "the close's person: $(sqlite3 /var/lib/dedup/relay.db "SELECT closed_by FROM critical_finding WHERE id=$fid")"
[ "$(sqlite3 /var/lib/dedup/relay.db "SELECT count(*) FROM tx_event WHERE guid='$g' AND action='close_finding'")" = 1 ] || fail "no close_finding event"
set +e; out=$(echo pw-pkglee | runuser -u pkglee -- sudo -S -p '' -u dedup /usr/bin/reconcile close --db /var/lib/dedup/relay.db --finding "$fid" --note again 2>&1); rc=$?; set -e
[ $rc -eq 1 ] || fail "closing a closed finding exited $rc: $out"
printf 'guid,ref,from,to,amount,balance,processed_at\n' >"$work/journal.csv"
chmod 0644 "$work/journal.csv"
set +e; out=$(echo pw-pkgkim | runuser -u pkgkim -- sudo -S -p '' -u dedup /usr/bin/reconcile --db /var/lib/dedup/relay.db --journal "$work/journal.csv" --date 20261201 2>&1); rc=$?; set -e
[ $rc -ne 0 ] || fail "sudo let an operator run a reconciliation as dedup: $out"
[ "$(sqlite3 /var/lib/dedup/relay.db "SELECT count(*) FROM reconcile_run")" = 0 ] || fail "a reconciliation run was kept"
ok "pkgkim closed a finding through sudo (one person, an event); a closed one is refused; a reconcile run through sudo is refused"
sqlite3 /var/lib/dedup/relay.db "DELETE FROM tx WHERE guid='$g'; DELETE FROM tx_event WHERE guid='$g'; DELETE FROM critical_finding WHERE id=$fid"

if [ -d /run/systemd/system ]; then
  systemctl start dedup-resolve.service || fail "systemctl start dedup-resolve"
  ok "dedup-resolve.service ran under systemd"
else
  echo "  not run here (systemd is not PID 1): systemctl start of the relay and the timers, the graceful restart on upgrade, the stop on remove"
fi

echo "== upgrade to version 2 (the edited configuration kept; the relay's socket enabled with the relay)"
echo "# edited by the operator" >>/etc/dedup/relay.env
# A host whose relay an operator enabled before the socket existed: the
# relay enabled, its socket not.
systemctl enable dedup-relay.service >/dev/null 2>&1
systemctl disable dedup-relay.socket >/dev/null 2>&1
[ -e /etc/systemd/system/multi-user.target.wants/dedup-relay.service ] || fail "systemctl did not enable the relay"
[ ! -e /etc/systemd/system/sockets.target.wants/dedup-relay.socket ] || fail "the socket is still enabled"
dpkg -i $v2 >/dev/null
[ -L /etc/systemd/system/sockets.target.wants/dedup-relay.socket ] || fail "the upgrade did not enable dedup-relay.socket for an enabled relay"
ok "the upgrade enabled dedup-relay.socket beside the enabled relay"
grep -q '^# edited by the operator' /etc/dedup/relay.env || fail "the upgrade replaced the edited relay.env"
grep -qF "relay $base-2 " <<<"$(/usr/bin/relay --version)" || fail "the upgrade did not install the new relay"
[ -f /var/lib/dedup/relay.db ] || fail "the upgrade lost the ledger"
ok "version 2 installed; relay.env kept; the ledger kept"

echo "== remove, then purge"
dpkg -L dedup dedup-tools | sort -u >"$work/files"
dpkg -r dedup dedup-tools >/dev/null
[ ! -e /usr/bin/relay ] && [ ! -e /usr/bin/fixturecore ] || fail "binaries left after remove"
[ -d /var/lib/dedup ] || fail "remove deleted the ledger (only purge may)"
ok "removed: binaries gone, the ledger kept"
dpkg -P dedup dedup-tools >/dev/null 2>&1
left=""
while read -r f; do
  [ -e "$f" ] || continue
  [ -d "$f" ] && [ -n "$(dpkg -S "$f" 2>/dev/null)" ] && continue   # a directory another package owns
  [ -d "$f" ] && [ "$(ls -A "$f")" != "" ] && continue           # a system directory with other files
  left="$left $f"
done <"$work/files"
[ -z "$left" ] || fail "files of the packages left after purge:$left"
for p in /var/lib/dedup /var/log/dedup /etc/dedup /var/lib/node_exporter/textfile/dedup_resolve.prom; do
  [ ! -e "$p" ] || fail "$p left after purge"
done
! getent passwd dedup >/dev/null || fail "the dedup user left after purge"
! getent group dedup-operators >/dev/null || fail "the group dedup-operators left after purge"
[ ! -e /etc/sudoers.d/dedup ] || fail "/etc/sudoers.d/dedup left after purge"
ls /etc/systemd/system/timers.target.wants/dedup-* >/dev/null 2>&1 && fail "timer links left after purge"
ls /etc/systemd/system/sockets.target.wants/dedup-* >/dev/null 2>&1 && fail "socket links left after purge"
ok "purged: no file of the packages, no data, no user, no unit links left"
echo "package-test: all checks passed"
