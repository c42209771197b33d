# Shared shell helpers for mcsup scripts. Source it; do not execute it.
# shellcheck shell=bash

log()  { printf '[mcsup-setup] %s\n' "$*"; }
warn() { printf '[mcsup-setup] WARNING: %s\n' "$*" >&2; }
die()  { printf '[mcsup-setup] ERROR: %s\n' "$*" >&2; exit 1; }

# dpkg_installed PKG[:ARCH]: true if dpkg reports PKG as fully installed for ARCH (default: the
# native architecture, or `all`). With a foreign architecture (scripts/release.sh adds arm64), a
# Multi-Arch package such as libibverbs-dev can be installed once per architecture, and
# dpkg-query then answers for each.
dpkg_installed() {
  local arch="${1#*:}" line
  [ "$arch" != "$1" ] || arch="$(dpkg --print-architecture)"
  while read -r line; do
    case "$line" in "installed $arch" | "installed all") return 0 ;; esac
  done < <(dpkg-query -W -f='${db:Status-Status} ${Architecture}\n' "$1" 2>/dev/null || true)
  return 1
}

# have_shared_lib SONAME: true if the dynamic linker cache knows SONAME (e.g. libcurl.so.4).
have_shared_lib() {
  local ldconfig=ldconfig
  command -v ldconfig >/dev/null 2>&1 || ldconfig=/sbin/ldconfig
  # Capture first: `ldconfig -p | grep -q` trips pipefail (SIGPIPE) in callers using set -o pipefail.
  local cache
  cache="$("$ldconfig" -p 2>/dev/null || true)"
  grep -q -E "^[[:space:]]+${1//./\\.} \(" <<<"$cache"
}

# apt_install PKG...: install the Debian packages of the list that are missing, the one way every
# script does it: as root (or with sudo), `apt-get update` only when the package lists do not know
# a package yet, no recommends, and no daemon started by a package's postinst (a temporary
# policy-rc.d, when none is in place; scripts start their own daemons). apt's output goes to
# ${TMPDIR:-/tmp}/mcsup-apt.log; its tail is shown on failure. Returns 0 when everything is
# installed, 1 with a message when something is missing and cannot be installed (MCSUP_SKIP_APT=1,
# not root and no sudo, no apt-get, or apt failed). Sets APT_INSTALLED to what it installed.
apt_install() {
  local missing=() p
  APT_INSTALLED=()
  for p in "$@"; do dpkg_installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  if [ "${MCSUP_SKIP_APT:-0}" = 1 ]; then
    warn "apt: missing ${missing[*]} (MCSUP_SKIP_APT=1: not installing)"; return 1
  fi
  command -v apt-get >/dev/null 2>&1 || { warn "apt: missing ${missing[*]} and no apt-get here"; return 1; }
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { warn "apt: missing ${missing[*]}; not root and no sudo"; return 1; }
    sudo=(sudo)
  fi
  local aptlog="${TMPDIR:-/tmp}/mcsup-apt.log" t0=$SECONDS rc=0
  log "apt: installing ${missing[*]}"
  if ! apt-cache show --no-all-versions "${missing[@]}" >/dev/null 2>&1; then
    log "apt: the package lists do not know all of them: apt-get update"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$aptlog" 2>&1 || rc=$?
  fi
  local policy=/usr/sbin/policy-rc.d own_policy=0
  if [ "$rc" -eq 0 ] && [ ! -e "$policy" ]; then
    "${sudo[@]}" sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 0755 $policy" && own_policy=1
  fi
  if [ "$rc" -eq 0 ]; then
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$aptlog" 2>&1 || rc=$?
    if [ "$rc" -ne 0 ]; then
      # Stale package lists (a version no longer on the mirror): update once and retry.
      log "apt: install failed (exit $rc): apt-get update and one retry"
      rc=0
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$aptlog" 2>&1 || rc=$?
      [ "$rc" -ne 0 ] || "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$aptlog" 2>&1 || rc=$?
    fi
  fi
  [ "$own_policy" = 0 ] || "${sudo[@]}" rm -f "$policy"
  if [ "$rc" -ne 0 ]; then
    tail -n 20 "$aptlog" >&2
    warn "apt: installing ${missing[*]} failed (exit $rc); full log: $aptlog"
    return 1
  fi
  APT_INSTALLED=("${missing[@]}")
  log "apt: installed ${missing[*]} in $((SECONDS - t0))s"
}
