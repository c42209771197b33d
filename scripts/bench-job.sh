#!/usr/bin/env bash
# Benchmark a whole job: N nodes' mcsups on this machine, joined by the job's control connection,
# started together and drained by SIGTERM. Not a test: prints figures and ratios (the job against
# its slowest node), checks the teardown order across nodes and that nothing is left; exits 1
# when the order broke or a run had a problem.
#
#   scripts/bench-job.sh                                  # N = 8, 32, 128; 3 runs each (~4 min)
#   BENCH_NODES="8 32" BENCH_REPS=1 BENCH_IDLE=2 BENCH_COORD_REPS=0 scripts/bench-job.sh  # quick
#
# BENCH_NODES (default "8 32 128"), BENCH_REPS (3; medians), BENCH_IDLE (10: the quiet window, s),
# BENCH_COORD_REPS (1: runs drained by SIGTERM to the coordinator alone; ~21 s each),
# BENCH_TMPDIR (default /dev/shm), BENCH_JSON (default target/bench-job.json). Needs python3.
# Builds release binaries into $CARGO_TARGET_DIR (default <repo>/target).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"

# mcsup as users get it; the test child needs the test-support feature (not a product binary),
# built after it so that mcsup itself is measured without that feature.
(cd "$REPO_ROOT" && CARGO_TARGET_DIR="$TARGET" cargo build --release --quiet --bin mcsup \
  && CARGO_TARGET_DIR="$TARGET" cargo build --release --quiet --features test-support \
       --bin mcsup-testchild)

# Working directories on a tmpfs, as for scripts/bench-supervisor.sh: the figures measure the
# supervisors, not the disk's file system.
if [[ -z "${BENCH_TMPDIR:-}" && -d /dev/shm && -w /dev/shm ]]; then
  BENCH_TMPDIR=/dev/shm
fi
if [[ -n "${BENCH_TMPDIR:-}" ]]; then export TMPDIR="$BENCH_TMPDIR"; fi

# The harness holds a few descriptors per node, and each mcsup raises its own limit to the hard
# one at start; the soft limit goes to the hard one here, for the harness and as the start value.
ulimit -n "$(ulimit -Hn)"

MCSUP_BIN="$TARGET/release/mcsup" TESTCHILD_BIN="$TARGET/release/mcsup-testchild" \
  exec python3 "$REPO_ROOT/scripts/bench/job_bench.py"
