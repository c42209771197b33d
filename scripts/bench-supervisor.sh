#!/usr/bin/env bash
# Benchmark mcsup's supervisor against supervisord and the floors (processes started, stopped
# and piped by the harness itself). Not a test: prints figures and ratios measured in one run.
#
#   scripts/bench-supervisor.sh            # full run (~4 min: includes 30 s of idle)
#   BENCH_REPS=3 BENCH_LOG_REPS=1 IDLE_SECONDS=5 BENCH_LINES=200000 scripts/bench-supervisor.sh  # quick
#
# Needs python3; supervisord (Debian package `supervisor`) is installed when missing and we are
# root, otherwise its columns are skipped. Builds release binaries into $CARGO_TARGET_DIR
# (default <repo>/target).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"

# shellcheck source=scripts/lib/common.sh
. "$REPO_ROOT/scripts/lib/common.sh"
if ! command -v supervisord >/dev/null 2>&1; then
  echo "installing supervisord (Debian package supervisor) for the comparison..." >&2
  apt_install supervisor >&2 || echo "could not install supervisord: its columns are skipped" >&2
fi

# mcsup as users get it; the two helpers need the test-support feature (they are not product
# binaries), built after it so that mcsup itself is measured without that feature.
(cd "$REPO_ROOT" && CARGO_TARGET_DIR="$TARGET" cargo build --release --quiet --bin mcsup \
  && CARGO_TARGET_DIR="$TARGET" cargo build --release --quiet --features test-support \
       --bin mcsup-testchild --bin mcsup-floor)

# Working directories on a tmpfs: the figures measure the supervisor, not the state of the disk's
# file system (see the bench's docstring). BENCH_TMPDIR=/some/dir measures there instead.
if [[ -z "${BENCH_TMPDIR:-}" && -d /dev/shm && -w /dev/shm ]]; then
  BENCH_TMPDIR=/dev/shm
fi
if [[ -n "${BENCH_TMPDIR:-}" ]]; then export TMPDIR="$BENCH_TMPDIR"; fi

# The last run's figures, kept to compare with (the README's table comes from the JSON:
# scripts/bench/supervisor_table.py --readme README.md).
JSON="${BENCH_JSON:-$TARGET/bench-supervisor.json}"
export BENCH_JSON="$JSON"
PREV="$JSON.prev"
if [[ -f "$JSON" ]]; then cp "$JSON" "$PREV"; fi
MCSUP_BIN="$TARGET/release/mcsup" TESTCHILD_BIN="$TARGET/release/mcsup-testchild" FLOOR_BIN="$TARGET/release/mcsup-floor" \
  python3 "$REPO_ROOT/scripts/bench/supervisor_bench.py"
echo
echo "The README's table from this run (scripts/bench/supervisor_table.py $JSON --readme README.md writes it there):"
if [[ -f "$PREV" ]]; then
  python3 "$REPO_ROOT/scripts/bench/supervisor_table.py" "$JSON" --against "$PREV"
else
  python3 "$REPO_ROOT/scripts/bench/supervisor_table.py" "$JSON"
fi
