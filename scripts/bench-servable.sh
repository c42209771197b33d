#!/usr/bin/env bash
# Time to servable: the moment mcsup says `servable` against the moment the endpoint really serves
# (a harness sending completions in a loop) and the mocker engine's own readiness, on the
# scripts/run-mocker.sh stack. Not a test: prints figures and ratios measured in one run.
#
#   scripts/bench-servable.sh                  # 5 repetitions, 4 s of simulated model loading
#   BENCH_REPS=3 BENCH_STARTUP=2 scripts/bench-servable.sh
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

"$REPO_ROOT/scripts/setup.sh"
cargo build --release --locked --quiet --bin mcsup
MCSUP_BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/release/mcsup" \
  DYNAMO_VENV="${MCSUP_DYNAMO_VENV:-$REPO_ROOT/.venv-dynamo}" \
  exec python3 "$REPO_ROOT/scripts/bench/servable_bench.py"
