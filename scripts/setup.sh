#!/usr/bin/env bash
# mcsup development/CI setup. Idempotent: safe to run again; a second run is a fast no-op.
#
# Installs what is missing on a Debian/Ubuntu machine:
#   1. Debian packages (RDMA/verbs headers+runtime, libclang for bindgen, pkg-config, python3-venv,
#      etcd-server + nats-server for the real-binary tests, chromium for the timeline test); a
#      system etcd/nats service that the packages start or enable on a fresh install is stopped
#      and disabled again
#   2. <repo>/.venv (Python 3.11) with a pinned mooncake-transfer-engine-non-cuda wheel, plus the
#      Mooncake client parsers of vLLM and SGLang (pinned, sha256-checked) for the loader tests
#   3. <repo>/.venv-dynamo: Dynamo's frontend and mocker (ai-dynamo 1.6.1), the SGLang router,
#      and a tiny tokenizer-only model directory for the mocker (scripts/dynamo-requirements.txt)
#   3d. <repo>/.venv-aiperf: AIPerf 0.13.0, the load generator of the benchmark tests
#      (scripts/aiperf-requirements.txt)
#   4. cargo-nextest (only if `cargo nextest --version` fails)
#   5. the tools of the portable release binaries (scripts/release.sh --tools-only: dpkg's arm64
#      architecture with libibverbs-dev:arm64, the zig venv <repo>/.venv-zig, the Rust targets),
#      and for their tests qemu-user-static with Debian's arm64 cross glibc
# and finally verifies that the real Mooncake binaries run.
#
# Environment knobs:
#   MCSUP_SKIP_APT=1        do not touch apt (non-root developer machines); missing packages are
#                           reported as warnings instead of being installed
#   MCSUP_SKIP_NEXTEST=1    do not install cargo-nextest even if it is missing
#   MCSUP_PYTHON=/path      Python 3.11 interpreter to build the venv from (default: auto-detect)
#   MCSUP_VENV=/path        venv location (default: <repo>/.venv)
#   MCSUP_DYNAMO_VENV=/path Dynamo venv location (default: <repo>/.venv-dynamo)
#   MCSUP_AIPERF_VENV=/path AIPerf venv location (default: <repo>/.venv-aiperf)
#   MOONCAKE_WHEEL_VERSION  override the pinned wheel version (default below)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/lib/common.sh
. "$REPO_ROOT/scripts/lib/common.sh"

MOONCAKE_PKG="mooncake-transfer-engine-non-cuda"
MOONCAKE_WHEEL_VERSION="${MOONCAKE_WHEEL_VERSION:-0.3.13.post1}"
VENV="${MCSUP_VENV:-$REPO_ROOT/.venv}"
REGEX_VERSION="2026.11.19"   # vLLM's mooncake_store.py imports `regex`
PROMETHEUS_CLIENT_VERSION="0.26.0"   # its text parser reads mcsup's <node>.prom in the tests
PYYAML_VERSION="6.0.3"   # srtctl loads recipes with PyYAML (YAML 1.1): tests/migrate.rs reads migrate's output with it
FUSEPY_VERSION="3.0.1"   # tests/py/freezefs.py: a log directory frozen on demand
REQUIRED_PY="3.11"   # the wheel is cp311 only

# Build-time: libibverbs-dev/librdmacm-dev/libclang-dev/pkg-config (rdma crate, bindgen).
# ibverbs-providers (verbs provider plugins), python3-venv (venv + ensurepip for Debian's python).
# etcd-server (/usr/bin/etcd), nats-server (/usr/sbin/nats-server): real servers that tests start
# privately in their own network namespace; etcd-client (etcdctl) and iproute2 (ip) for that test.
# nginx-light: srtctl's nginx in front of several frontends (the frontend tests run it).
# qemu-user-static, libc6-arm64-cross, libgcc-s1-arm64-cross: the aarch64 release binary runs
# under qemu-user on Debian's arm64 glibc, and binutils' objdump cross-checks the glibc versions
# the release binaries need (tests/portable_release.rs).
# fuse3 (fusermount3) with libfuse2 (fusepy loads libfuse.so.2): a log directory that can be
# frozen on demand, the stand-in for a hung NFS mount (tests/py/freezefs.py).
# shellcheck source=scripts/lib/packages.sh
. "$REPO_ROOT/scripts/lib/packages.sh"

SECONDS=0

# --------------------------------------------------------------------------------------------
# 0. cargo (assumed present; we only check)
# --------------------------------------------------------------------------------------------
if ! command -v cargo >/dev/null 2>&1 && [ -x "${CARGO_HOME:-$HOME/.cargo}/bin/cargo" ]; then
  export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  die "cargo not found on PATH (nor in ~/.cargo/bin). Install a Rust toolchain with rustup first."
fi
log "cargo: $(cargo --version)"
# The lint steps of scripts/test.sh need rustfmt and clippy (rustup's default profile has them;
# the minimal one does not).
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  if command -v rustup >/dev/null 2>&1; then
    log "rust: adding the rustfmt and clippy components"
    rustup component add rustfmt clippy
  else
    warn "rust: cargo fmt or cargo clippy is missing and there is no rustup to add them: the lint steps will fail"
  fi
fi

# --------------------------------------------------------------------------------------------
# 1. Debian packages
# --------------------------------------------------------------------------------------------
missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg_installed "$p"; then missing+=("$p"); fi
done
for entry in "${RUNTIME_LIBS[@]}"; do
  if ! have_shared_lib "${entry%%:*}"; then missing+=("${entry#*:}"); fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  log "apt: all ${#APT_PACKAGES[@]} packages and ${#RUNTIME_LIBS[@]} runtime libraries present, skipping apt"
elif [ "${MCSUP_SKIP_APT:-0}" = "1" ]; then
  warn "apt: MCSUP_SKIP_APT=1 and these packages are missing: ${missing[*]}"
  warn "apt: the Rust build or the Mooncake wheel may fail without them"
else
  apt_rc=0
  apt_install "${missing[@]}" || apt_rc=$?
  SUDO=()
  [ "$(id -u)" -eq 0 ] || SUDO=(sudo)

  # ------------------------------------------------------------------------------------------
  # 1b. Stop + disable the system services of service packages installed just now (see
  #     SERVICE_PACKAGES). Done even if apt-get failed: a postinst may have started the daemon
  #     before a later package failed.
  # ------------------------------------------------------------------------------------------
  systemd_running=0
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then systemd_running=1; fi
  for entry in "${SERVICE_PACKAGES[@]}"; do
    pkg="${entry%%:*}" svc="${entry#*:}"
    [[ " ${missing[*]} " == *" $pkg "* ]] || continue
    if [ "$systemd_running" -eq 1 ]; then
      # --now stops it too; for etcd, systemd-sysv-install also disables the SysV rc links.
      "${SUDO[@]}" systemctl disable --now --quiet "$svc.service" 2>/dev/null || true
      if systemctl is-active --quiet "$svc.service"; then
        die "apt: $pkg started the system service $svc.service and 'systemctl disable --now' did not stop it"
      fi
    else
      # systemd installed but not running (containers): the postinst still enabled the unit for
      # boot; offline 'systemctl disable' removes those links.
      if command -v systemctl >/dev/null 2>&1; then
        "${SUDO[@]}" systemctl disable --quiet "$svc.service" >/dev/null 2>&1 || true
      fi
      # Without systemd only a SysV script can have started it: invoke-rc.d runs it when the host
      # has a runlevel (sysvinit) or a policy-rc.d allows it. Stop it with the script itself
      # (invoke-rc.d would ask policy-rc.d again); 'stop' when not running is a no-op.
      if [ -x "/etc/init.d/$svc" ]; then
        "${SUDO[@]}" update-rc.d "$svc" disable >/dev/null 2>&1 || true
        "${SUDO[@]}" "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
        if "/etc/init.d/$svc" status >/dev/null 2>&1; then
          die "apt: $pkg started the system service $svc and '/etc/init.d/$svc stop' did not stop it"
        fi
      fi
    fi
    log "apt: $pkg: system service $svc is stopped and disabled (tests start their own)"
  done
  [ "$apt_rc" -eq 0 ] || die "apt: could not install ${missing[*]} (see above)"
fi

# --------------------------------------------------------------------------------------------
# 2. Python 3.11 interpreter for the venv
# --------------------------------------------------------------------------------------------
# Prints the interpreter's X.Y, or nothing if it does not run.
py_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true; }
# True if the interpreter can create a venv with pip (Debian needs python3-venv for ensurepip).
py_can_venv() { "$1" -c 'import venv, ensurepip' >/dev/null 2>&1; }

pick_python() {
  local cands=() c path
  if [ -n "${MCSUP_PYTHON:-}" ]; then
    cands=("$MCSUP_PYTHON")
  else
    cands=(python3.11 python3 /usr/bin/python3.11 /usr/bin/python3)
  fi
  for c in "${cands[@]}"; do
    path="$(command -v "$c" 2>/dev/null || true)"
    [ -n "$path" ] || continue
    if [ "$(py_version "$path")" = "$REQUIRED_PY" ] && py_can_venv "$path"; then
      echo "$path"
      return 0
    fi
  done
  return 1
}

venv_ok=0
if [ -x "$VENV/bin/python" ] && [ "$(py_version "$VENV/bin/python")" = "$REQUIRED_PY" ]; then
  venv_ok=1
  log "venv: $VENV exists (python $(py_version "$VENV/bin/python"))"
fi

if [ "$venv_ok" -eq 0 ]; then
  PY="$(pick_python)" || die "no usable Python $REQUIRED_PY found (tried: ${MCSUP_PYTHON:-python3.11 python3 /usr/bin/python3.11 /usr/bin/python3}).
The Mooncake wheel ($MOONCAKE_PKG==$MOONCAKE_WHEEL_VERSION) is cp311-only. Install Python 3.11
with the venv module (Debian 12: apt-get install python3-venv) or point MCSUP_PYTHON at one."
  if [ -e "$VENV" ]; then
    warn "venv: $VENV exists but its python is not a working $REQUIRED_PY; recreating it"
    rm -rf -- "$VENV"
  fi
  log "venv: creating $VENV with $PY ($("$PY" --version 2>&1))"
  "$PY" -m venv "$VENV"
fi

# --------------------------------------------------------------------------------------------
# 3. Pinned Mooncake wheel
# --------------------------------------------------------------------------------------------
installed_ver="$("$VENV/bin/python" -c "
import importlib.metadata as m
try:
    print(m.version('$MOONCAKE_PKG'))
except m.PackageNotFoundError:
    pass
" 2>/dev/null || true)"

if [ "$installed_ver" = "$MOONCAKE_WHEEL_VERSION" ]; then
  log "pip: $MOONCAKE_PKG==$installed_ver already installed, skipping pip"
else
  if [ -n "$installed_ver" ]; then
    log "pip: $MOONCAKE_PKG $installed_ver installed, want $MOONCAKE_WHEEL_VERSION"
  fi
  log "pip: installing $MOONCAKE_PKG==$MOONCAKE_WHEEL_VERSION into $VENV"
  "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q \
    "$MOONCAKE_PKG==$MOONCAKE_WHEEL_VERSION"
fi

# --------------------------------------------------------------------------------------------
# 3b. The Mooncake client loaders of vLLM and SGLang (tests/client_loaders.rs): vLLM's parser
#     needs the `regex` package; the two engines' parser modules are fetched pinned (sha256) from
#     their PyPI release artifacts into <venv>/client-sources. See scripts/lib/client_sources.py.
# --------------------------------------------------------------------------------------------
# pip_pin PKG VERSION: install PKG==VERSION into the venv unless exactly that is there.
pip_pin() {
  if "$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('$1') == '$2'" 2>/dev/null; then
    log "pip: $1==$2 already installed"
  else
    log "pip: installing $1==$2 into $VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q "$1==$2"
  fi
}
pip_pin regex "$REGEX_VERSION"
"$VENV/bin/python" "$REPO_ROOT/scripts/lib/client_sources.py" "$VENV/client-sources"
pip_pin prometheus-client "$PROMETHEUS_CLIENT_VERSION"
pip_pin fusepy "$FUSEPY_VERSION"
pip_pin PyYAML "$PYYAML_VERSION"

# --------------------------------------------------------------------------------------------
# 3c. Dynamo's frontend and mocker, and the SGLang router, in <repo>/.venv-dynamo (their own
#     venv: transformers and pydantic stay out of Mooncake's), plus a tiny tokenizer-only model
#     directory for the mocker (.venv-dynamo/tiny-model). Pins: scripts/dynamo-requirements.txt.
# --------------------------------------------------------------------------------------------
DYNAMO_VERSION="1.6.1"
DYNAMO_VENV="${MCSUP_DYNAMO_VENV:-$REPO_ROOT/.venv-dynamo}"
DYNAMO_REQS="$REPO_ROOT/scripts/dynamo-requirements.txt"
DYNAMO_STAMP="$DYNAMO_VENV/.mcsup-installed"
dynamo_want="$DYNAMO_VERSION $(sha256sum "$DYNAMO_REQS" "$REPO_ROOT/scripts/lib/tiny_model.py" | cut -d' ' -f1 | tr '\n' ' ')"
if [ -f "$DYNAMO_STAMP" ] && [ "$(cat "$DYNAMO_STAMP")" = "$dynamo_want" ] \
   && "$DYNAMO_VENV/bin/python" -c "import dynamo.frontend, dynamo.mocker" 2>/dev/null; then
  log "dynamo: ai-dynamo==$DYNAMO_VERSION and the tiny model already in $DYNAMO_VENV"
else
  if [ ! -x "$DYNAMO_VENV/bin/python" ]; then
    log "dynamo: creating $DYNAMO_VENV"
    "$VENV/bin/python" -c "import sys; print(sys.base_prefix)" >/dev/null
    "$(readlink -f "$VENV/bin/python")" -m venv "$DYNAMO_VENV"
  fi
  log "dynamo: installing ai-dynamo==$DYNAMO_VERSION (no deps) and scripts/dynamo-requirements.txt"
  "$DYNAMO_VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q \
    -r "$DYNAMO_REQS"
  "$DYNAMO_VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q --no-deps \
    "ai-dynamo==$DYNAMO_VERSION" "ai-dynamo-runtime==$DYNAMO_VERSION"
  "$DYNAMO_VENV/bin/python" -c "import dynamo.frontend, dynamo.mocker, sglang_router" \
    || die "dynamo: the frontend, the mocker or the SGLang router does not import from $DYNAMO_VENV"
  rm -rf -- "$DYNAMO_VENV/tiny-model"
  "$DYNAMO_VENV/bin/python" "$REPO_ROOT/scripts/lib/tiny_model.py" "$DYNAMO_VENV/tiny-model" >/dev/null
  echo "$dynamo_want" > "$DYNAMO_STAMP"
  log "dynamo: ready in $DYNAMO_VENV"
fi

# --------------------------------------------------------------------------------------------
# 3d. AIPerf, the load generator a `custom` benchmark runs in the benchmark tests, in
#     <repo>/.venv-aiperf (its own venv: 138 packages, about 1.2 GB). Pins:
#     scripts/aiperf-requirements.txt.
# --------------------------------------------------------------------------------------------
AIPERF_VENV="${MCSUP_AIPERF_VENV:-$REPO_ROOT/.venv-aiperf}"
AIPERF_REQS="$REPO_ROOT/scripts/aiperf-requirements.txt"
AIPERF_STAMP="$AIPERF_VENV/.mcsup-installed"
aiperf_want="$(sha256sum "$AIPERF_REQS" | cut -d' ' -f1)"
if [ -f "$AIPERF_STAMP" ] && [ "$(cat "$AIPERF_STAMP")" = "$aiperf_want" ] \
   && [ -x "$AIPERF_VENV/bin/aiperf" ]; then
  log "aiperf: already in $AIPERF_VENV"
else
  if [ ! -x "$AIPERF_VENV/bin/python" ]; then
    log "aiperf: creating $AIPERF_VENV"
    "$(readlink -f "$VENV/bin/python")" -m venv "$AIPERF_VENV"
  fi
  log "aiperf: installing scripts/aiperf-requirements.txt (aiperf==0.13.0)"
  "$AIPERF_VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q \
    -r "$AIPERF_REQS"
  "$AIPERF_VENV/bin/aiperf" --version >/dev/null 2>&1 \
    || "$AIPERF_VENV/bin/python" -c "import aiperf" \
    || die "aiperf: it does not run from $AIPERF_VENV"
  echo "$aiperf_want" > "$AIPERF_STAMP"
  log "aiperf: ready in $AIPERF_VENV"
fi

# --------------------------------------------------------------------------------------------
# 4. cargo-nextest
# --------------------------------------------------------------------------------------------
if cargo nextest --version >/dev/null 2>&1; then
  log "nextest: $(cargo nextest --version 2>/dev/null | head -n1)"
elif [ "${MCSUP_SKIP_NEXTEST:-0}" = "1" ]; then
  warn "nextest: cargo-nextest missing and MCSUP_SKIP_NEXTEST=1; not installing"
else
  log "nextest: not found; running 'cargo install cargo-nextest --locked' (builds from source, slow)"
  cargo install cargo-nextest --locked
  log "nextest: $(cargo nextest --version 2>/dev/null | head -n1)"
fi

# --------------------------------------------------------------------------------------------
# 4b. The portable release binaries' tools (scripts/release.sh says what and why)
# --------------------------------------------------------------------------------------------
if ! "$REPO_ROOT/scripts/release.sh" --tools-only; then
  if [ "${MCSUP_SKIP_APT:-0}" = "1" ]; then
    warn "release: its tools are incomplete (MCSUP_SKIP_APT=1); scripts/release.sh and its tests will fail"
  else
    die "release: scripts/release.sh --tools-only failed (see above)"
  fi
fi

# --------------------------------------------------------------------------------------------
# 5. Verify
# --------------------------------------------------------------------------------------------
MC_PKG_DIR="$("$VENV/bin/python" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("mooncake").origin))')"
log "verify: native binary $MC_PKG_DIR/mooncake_master"
if command -v ldd >/dev/null 2>&1; then
  unresolved="$(ldd "$MC_PKG_DIR/mooncake_master" "$MC_PKG_DIR/store.so" 2>&1 | grep 'not found' | sort -u || true)"
  [ -z "$unresolved" ] || die "verify: unresolved shared libraries:
$unresolved"
fi
log "verify: $VENV/bin/mooncake_master --help"
# gflags' --help exits non-zero by design, so judge by the output, not the exit code.
help_out="$("$VENV/bin/mooncake_master" --help 2>&1 || true)"
if ! grep -q -- "rpc_port" <<<"$help_out"; then
  printf '%s\n' "$help_out" | tail -n 20 >&2
  die "verify: mooncake_master --help did not list --rpc_port (output above)"
fi
log "verify: mooncake_master OK ($(grep -cE '^    -[a-z_0-9]+ ' <<<"$help_out" || true) flags listed)"

log "verify: $VENV/bin/python -c 'import mooncake.store'"
if ! "$VENV/bin/python" -c 'import mooncake.store' ; then
  die "verify: 'import mooncake.store' failed (is libibverbs1 installed? see above)"
fi
log "verify: import mooncake.store OK"

# etcd-server/nats-server binaries (nats-server is in /usr/sbin, often not on a user's PATH).
for bin in /usr/bin/etcd /usr/sbin/nats-server; do
  # Capture, then cut: '| head -n1' could SIGPIPE the binary and trip pipefail.
  if ver="$("$bin" --version 2>/dev/null)" && [ -n "$ver" ]; then
    log "verify: $bin: ${ver%%$'\n'*}"
  elif [ "${MCSUP_SKIP_APT:-0}" = "1" ]; then
    warn "verify: $bin does not run (MCSUP_SKIP_APT=1); the etcd/NATS tests will fail"
  else
    die "verify: $bin --version failed (packages etcd-server / nats-server)"
  fi
done

log "done in ${SECONDS}s: venv=$VENV $MOONCAKE_PKG==$MOONCAKE_WHEEL_VERSION"
