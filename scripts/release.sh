#!/usr/bin/env bash
# The release binaries of mcsup for the containers users run their engines in: glibc >= 2.28
# (RHEL/Rocky 8, Ubuntu 20.04 and everything newer) on x86_64 and on aarch64 (GB200/GB300 Grace
# nodes), each with the ibverbs RDMA query (the default features), plus their sha256 sums:
#
#   dist/mcsup-<version>-x86_64-linux-gnu
#   dist/mcsup-<version>-aarch64-linux-gnu
#   dist/SHA256SUMS                           (sha256sum -c SHA256SUMS)
#
#   scripts/release.sh                  both binaries
#   scripts/release.sh --tools-only     only install the tools below (scripts/setup.sh calls this)
#
# How: `cargo zigbuild` (cargo-zigbuild and ziglang from PyPI, pinned below, in their own venv)
# links against zig's glibc 2.28 symbol stubs (targets `<arch>-unknown-linux-gnu.2.28`), so the
# binaries ask for no glibc symbol version newer than 2.28, whatever the build host has (Debian 12:
# 2.36; a plain `cargo build --release` here needs GLIBC_2.34). tests/portable_release.rs checks
# the versions the binaries need and runs both (the aarch64 one under qemu-user).
#
# Why aarch64 needs Debian's arm64 rdma-core (multiarch): the ibverbs feature uses rdma-sys for
# the libibverbs types (mcsup loads the library itself with dlopen at the first scan, it never
# links it), and rdma-sys's build script asks pkg-config for the *target's* libibverbs and
# librdmacm and fails without them. The struct layouts differ between the two architectures
# (`struct ibv_context` is 336 bytes on aarch64, 328 on x86_64: glibc's pthread_mutex_t is 48
# against 40), so reusing the host's bindings would be wrong; rdma-sys has no way to skip its
# pkg-config step. With `libibverbs-dev:arm64` and `librdmacm-dev:arm64` (dpkg
# --add-architecture arm64) pkg-config answers for the target, bindgen generates the bindings for
# aarch64 (with zig's aarch64 glibc headers, which cargo-zigbuild hands to bindgen), and the link
# drops the two libraries again (--as-needed: no symbol of theirs is used), so the binary needs
# only glibc, as on x86_64. Shipping aarch64 with sysfs-only discovery was the fallback; it is
# not needed.
#
# This adds the arm64 architecture to dpkg on the build machine (not on the cluster): apt then
# also reads arm64 package lists. Its CARGO_TARGET_DIR is target/portable by default, apart from
# target/debug and target/release, so it never waits on (nor invalidates) a `cargo build` in the
# same checkout (cargo locks each profile directory, not target/ as a whole).
#
# Environment knobs:
#   MCSUP_DIST_DIR=DIR              where the binaries go (default <repo>/dist)
#   MCSUP_RELEASE_TARGET_DIR=DIR    cargo's target dir for these builds (default <repo>/target/portable)
#   MCSUP_ZIG_VENV=DIR              the venv of ziglang and cargo-zigbuild (default <repo>/.venv-zig)
#   MCSUP_SKIP_APT=1                do not touch apt or dpkg (missing packages are an error)
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
. "$REPO_ROOT/scripts/lib/common.sh"

ZIGLANG_VERSION="0.17.1"
CARGO_ZIGBUILD_VERSION="0.24.1"
GLIBC_FLOOR="2.28"
DIST_DIR="${MCSUP_DIST_DIR:-$REPO_ROOT/dist}"
TARGET_DIR="${MCSUP_RELEASE_TARGET_DIR:-$REPO_ROOT/target/portable}"
ZIG_VENV="${MCSUP_ZIG_VENV:-$REPO_ROOT/.venv-zig}"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

tools_only=0
for a in "$@"; do
  case "$a" in
    --tools-only) tools_only=1 ;;
    -h | --help) usage; exit 0 ;;
    *) die "release.sh: unknown argument '$a' (--tools-only, --help)" ;;
  esac
done

# --------------------------------------------------------------------------------------------
# Tools: the Debian packages both builds need (bindgen's libclang, the host's rdma-core for the
# x86_64 build, the arm64 rdma-core for the aarch64 one), the zig venv, the Rust targets.
# --------------------------------------------------------------------------------------------
install_packages() {
  local foreign
  foreign="$(dpkg --print-foreign-architectures)"
  if ! grep -qx arm64 <<<"$foreign"; then
    [ "${MCSUP_SKIP_APT:-0}" != 1 ] \
      || die "release.sh: the aarch64 build needs dpkg's arm64 architecture (MCSUP_SKIP_APT=1: not adding it): dpkg --add-architecture arm64"
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    log "release: dpkg --add-architecture arm64 (for libibverbs-dev:arm64, see the header)"
    "${sudo[@]}" dpkg --add-architecture arm64
  fi
  # apt_install runs `apt-get update` when the lists do not know a package yet (the arm64 ones,
  # right after the architecture was added).
  apt_install pkg-config libclang-dev python3-venv libibverbs-dev librdmacm-dev \
    libibverbs-dev:arm64 librdmacm-dev:arm64 \
    || die "release.sh: the packages above are needed for the builds"
}

install_zig() {
  local want="ziglang==$ZIGLANG_VERSION cargo-zigbuild==$CARGO_ZIGBUILD_VERSION" have=""
  if [ -x "$ZIG_VENV/bin/python" ]; then
    have="$("$ZIG_VENV/bin/python" -c '
import importlib.metadata as m
try:
    print("ziglang==%s cargo-zigbuild==%s" % (m.version("ziglang"), m.version("cargo-zigbuild")))
except m.PackageNotFoundError:
    pass' 2>/dev/null || true)"
  fi
  if [ "$have" = "$want" ]; then
    log "release: $want in $ZIG_VENV"
    return
  fi
  if [ ! -x "$ZIG_VENV/bin/python" ]; then
    log "release: creating $ZIG_VENV"
    python3 -m venv "$ZIG_VENV" || die "release.sh: python3 -m venv failed (Debian: apt-get install python3-venv)"
  fi
  log "release: installing $want into $ZIG_VENV"
  # shellcheck disable=SC2086 # $want is two requirement specifiers
  "$ZIG_VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q $want
}

install_rust_targets() {
  local installed t
  installed="$(rustup target list --installed)"
  for t in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
    if ! grep -qx "$t" <<<"$installed"; then
      log "release: rustup target add $t"
      rustup target add "$t"
    fi
  done
}

install_packages
install_zig
install_rust_targets
[ "$tools_only" = 0 ] || exit 0

# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------
pkgid="$(cd "$REPO_ROOT" && cargo pkgid -p mcsup)"
version="${pkgid##*[#@]}"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || die "release.sh: no version in '$pkgid'"

# The aarch64 build script of rdma-sys asks pkg-config for arm64's rdma-core (see the header).
export PKG_CONFIG_ALLOW_CROSS=1
export PKG_CONFIG_LIBDIR_aarch64_unknown_linux_gnu=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
export PKG_CONFIG_PATH_aarch64_unknown_linux_gnu=/usr/lib/aarch64-linux-gnu/pkgconfig
export PATH="$ZIG_VENV/bin:$PATH"
export CARGO_TARGET_DIR="$TARGET_DIR"
mkdir -p "$TARGET_DIR" "$DIST_DIR"

log "release: mcsup $version for x86_64 and aarch64, glibc >= $GLIBC_FLOOR, in $TARGET_DIR"
t0=$SECONDS
# Both targets in one cargo invocation: 3 min 10 s on 2 cores from a clean target dir, against
# 5 min 5 s for one invocation per target. Cargo then hashes every crate differently than for a
# single target (same features and flags: the aarch64 binary was 2,592 bytes smaller built
# alone), so the script always builds both: the same checkout gives the same two files
# (byte-identical, measured across two checkouts).
# cargo runs from the target dir, not from the checkout: zig 0.17 reports its lib directory
# relative to the working directory when it lies below it (the venv is <repo>/.venv-zig), and
# cargo-zigbuild hands that relative path to bindgen, whose build script runs elsewhere: it then
# finds no glibc header ("bits/libc-header-start.h file not found").
(cd "$TARGET_DIR" && cargo zigbuild --manifest-path "$REPO_ROOT/Cargo.toml" --release --locked \
  -p mcsup --bin mcsup --target "x86_64-unknown-linux-gnu.$GLIBC_FLOOR" \
  --target "aarch64-unknown-linux-gnu.$GLIBC_FLOOR")
log "release: built in $((SECONDS - t0)) s"

# --------------------------------------------------------------------------------------------
# dist/: the binaries and their sums; what an earlier run left there is replaced
# --------------------------------------------------------------------------------------------
rm -f "$DIST_DIR"/mcsup-*-linux-gnu "$DIST_DIR/SHA256SUMS"
names=()
for a in x86_64 aarch64; do
  name="mcsup-$version-$a-linux-gnu"
  install -m 0755 "$TARGET_DIR/$a-unknown-linux-gnu/release/mcsup" "$DIST_DIR/$name"
  names+=("$name")
done
(cd "$DIST_DIR" && sha256sum "${names[@]}" > SHA256SUMS && sha256sum -c --quiet SHA256SUMS)
for n in "${names[@]}"; do
  log "release: $DIST_DIR/$n ($(stat -c %s "$DIST_DIR/$n") bytes)"
done
log "release: $DIST_DIR/SHA256SUMS"
sed 's/^/  /' "$DIST_DIR/SHA256SUMS"
