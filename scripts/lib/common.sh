# Shared shell helpers for mcsup scripts. Source it; do not execute it.
# shellcheck shell=bash

log()  { printf '[mcsup-setup] %s\n' "$*"; }
warn() { printf '[mcsup-setup] WARNING: %s\n' "$*" >&2; }
die()  { printf '[mcsup-setup] ERROR: %s\n' "$*" >&2; exit 1; }

# dpkg_installed PKG: true if dpkg reports PKG as fully installed.
dpkg_installed() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = "installed" ]
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
