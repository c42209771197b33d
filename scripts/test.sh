#!/usr/bin/env bash
# The README's test command: installs what the tests need on a fresh Debian/Ubuntu machine
# (scripts/setup.sh: apt packages, the Mooncake venv, cargo-nextest), then runs the whole suite.
#
#   scripts/test.sh            everything
#   scripts/test.sh -E 'test(plan)'   extra arguments go to `cargo nextest run`
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

# Each step says when it starts (seconds since the script began): the CI time, step by step.
step() { printf '\n==> [%s s] %s\n' "$SECONDS" "$*"; }

step "setup"
"$REPO_ROOT/scripts/setup.sh"

# The Slurm tests start private clusters in parallel: install the packages once, up front,
# rather than letting concurrent tests race for the dpkg lock.
# shellcheck source=scripts/lib/common.sh
. "$REPO_ROOT/scripts/lib/common.sh"
# shellcheck source=scripts/lib/packages.sh
. "$REPO_ROOT/scripts/lib/packages.sh"
apt_install "${TEST_PACKAGES[@]}" || true

# Everything the suite needs, checked at once: a missing package fails here, named, instead of
# as a test that times out (a fresh machine once failed 6 Slurm tests on a missing libpmix-dev).
step "prerequisites"
missing=()
for p in "${APT_PACKAGES[@]}" "${TEST_PACKAGES[@]}"; do
  dpkg_installed "$p" || missing+=("package $p")
done
for entry in "${RUNTIME_LIBS[@]}" libpmix.so:libpmix-dev; do
  have_shared_lib "${entry%%:*}" || missing+=("library ${entry%%:*} (${entry#*:})")
done
venv_python="${MCSUP_VENV:-$REPO_ROOT/.venv}/bin/python"
if ! "$venv_python" -c 'import mooncake.store, fuse, prometheus_client, yaml, regex' 2>/dev/null; then
  missing+=("Python modules in $venv_python (mooncake, fusepy, prometheus_client, PyYAML, regex)")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  printf '  missing: %s\n' "${missing[@]}" >&2
  die "test.sh: the suite needs what is listed above; scripts/setup.sh installs it (apt and the venv), and this script installs the Slurm and MPI packages"
fi
log "prerequisites: ${#APT_PACKAGES[@]} + ${#TEST_PACKAGES[@]} packages, $(( ${#RUNTIME_LIBS[@]} + 1 )) libraries and the venv's modules present"

# The full suite: a test whose outside prerequisite (venv, Slurm, etcd) is missing fails here
# instead of skipping (tests/common/mod.rs `require`).
export MCSUP_TESTS_REQUIRE_ALL=1
# The real mooncake_master and store service come from the project venv.
export PATH="$REPO_ROOT/.venv/bin:$PATH"
export MCSUP_VENV="$REPO_ROOT/.venv"
# Two cores: keep builds and test processes within them.
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
# A CI run builds a clean clone once: incremental state (about 0.9 GB) would never be reused.
if [[ -n "${CI:-}" ]]; then export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"; fi

# A clean debug build of every target takes about 5 GB: say so up front rather than failing
# at a link with "No space left on device".
target_dir="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
mkdir -p "$target_dir"
free_kb="$(df -Pk "$target_dir" | awk 'NR == 2 { print $4 }')"
if [[ "$free_kb" =~ ^[0-9]+$ ]] && (( free_kb < 6 * 1024 * 1024 )); then
  warn "test.sh: only $(( free_kb / 1024 )) MiB free under $target_dir; a clean build needs about 5 GiB (free space, or set CARGO_TARGET_DIR)"
fi


step "format, lints and docs (warnings are errors)"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
shellcheck -x scripts/release.sh

step "build (default features: sysfs + ibverbs)"
cargo build --workspace --all-targets --locked

step "build without ibverbs (login nodes: no libibverbs/libclang; sysfs only)"
cargo build -p mcsup-rdma --no-default-features --locked
cargo build -p mcsup --no-default-features --locked --bin mcsup

step "portable release binaries: glibc >= 2.28, x86_64 and aarch64 (checked and run by tests/portable_release.rs)"
scripts/release.sh
export MCSUP_DIST_DIR="$REPO_ROOT/dist"

step "the example batch script's logic under a local Slurm (stand-in mcsup; the real job runs in tests/slurm_e2e.rs)"
tests/slurm/job-1p1d.sh --mcsup "$REPO_ROOT/target/debug/mcsup"

step "tests"
cargo nextest run --workspace --locked --profile ci --no-fail-fast "$@"

step "doc tests"
cargo test --workspace --doc --locked
step "done"
