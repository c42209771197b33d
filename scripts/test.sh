#!/usr/bin/env bash
# The README's test command: installs what the tests need on a fresh Debian/Ubuntu machine
# (scripts/setup.sh: apt packages, the Mooncake venv, cargo-nextest), then runs the whole suite.
#
#   scripts/test.sh            everything
#   scripts/test.sh -E 'test(plan)'   extra arguments go to `cargo nextest run`
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

"$REPO_ROOT/scripts/setup.sh"

# The real mooncake_master and store service come from the project venv.
export PATH="$REPO_ROOT/.venv/bin:$PATH"
export MCSUP_VENV="$REPO_ROOT/.venv"
# Two cores: keep builds and test processes within them.
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

step() { printf '\n==> %s\n' "$*"; }

step "build (default features: sysfs + ibverbs)"
cargo build --workspace --all-targets --locked

step "build the rdma crate without ibverbs (login nodes: no libibverbs/libclang)"
cargo build -p mcsup-rdma --no-default-features --locked

step "tests"
cargo nextest run --workspace --locked --profile ci --no-fail-fast "$@"

step "doc tests"
cargo test --workspace --doc --locked
