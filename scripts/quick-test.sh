#!/usr/bin/env bash
# The inner loop: every pure test and every real-process test of the supervisor, in well under a
# minute once built, with no root, apt, Slurm or venv. The slow end-to-end binaries (real
# Mooncake, local Slurm) are left to scripts/test.sh; a test here whose prerequisite is missing
# (e.g. the Mooncake venv for the config-loader tests) says so and skips
# (tests/common/mod.rs `require`). Needs cargo-nextest (`cargo install cargo-nextest --locked`).
#
#   scripts/quick-test.sh                 the inner loop
#   scripts/quick-test.sh -E 'test(plan)' extra arguments go to `cargo nextest run`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

features=()
# The ibverbs path needs libibverbs-dev and libclang (bindgen); without them, sysfs only.
if ! pkg-config --exists libibverbs 2>/dev/null; then
  echo "quick-test: libibverbs-dev not found: building without the ibverbs feature (sysfs only)" >&2
  features=(--no-default-features)
fi
if [ -x .venv/bin/mooncake_master ] && [ -z "${MCSUP_VENV:-}" ]; then
  export MCSUP_VENV="$PWD/.venv"
fi
exec cargo nextest run --workspace "${features[@]}" --profile quick "$@"
