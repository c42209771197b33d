#!/usr/bin/env bash
# Fuzz the recipe parser and the plan pipeline for a bounded time (cargo-fuzz / libFuzzer).
#
#   scripts/fuzz.sh              every target in fuzz/fuzz_targets for 60 s each, one after another
#   scripts/fuzz.sh 300          300 s each
#   scripts/fuzz.sh 120 plan     only the `plan` target
#
# Targets (fuzz/fuzz_targets/):
#   recipe  recipe::parse_str (+ error rendering) and size::parse_mooncake_size on the raw text
#   plan    parse_str, then node::resolve + plan::plan for every role and prefill+decode on fixed
#           Slurm/local contexts, then render::plan_human / plan_json
#
# Inputs: the committed seeds in fuzz/seeds/recipe/, recipes/ and the srt-slurm fixtures under
# tests/fixtures/ (all read-only) plus the growing, git-ignored
# corpus in fuzz/corpus/<target>/. Crashes land in fuzz/artifacts/<target>/; the script exits 1
# if any target crashed (or timed out / ran out of memory on one input). Reproduce one with
#   cargo fuzz run --sanitizer none -a <target> fuzz/artifacts/<target>/crash-...
# and, once understood, keep the minimized input under fuzz/regressions/.
#
# Toolchain: works on STABLE Rust. cargo-fuzz's default (-Zsanitizer=address) needs nightly, so we
# pass `--sanitizer none`: the libFuzzer coverage instrumentation cargo-fuzz adds
# (-Cpasses=sancov-module, -Cllvm-args=-sanitizer-coverage-*) is stable, and panics (the bugs we
# look for in mcsup's safe-Rust parse/plan code) are caught without a sanitizer. The YAML parser
# underneath (unsafe-libyaml) is unsafe Rust, so an occasional ASan run is still worthwhile:
#   FUZZ_SANITIZER=address scripts/fuzz.sh        (about 4x slower)
# On a stable rustc this sets RUSTC_BOOTSTRAP=1, which makes stable accept -Z flags (unsupported
# by the Rust project, fine for local fuzzing; cargo-fuzz itself honours it). Gotcha: cargo caches
# rustc's target probe in fuzz/target/.rustc_info.json without keying on RUSTC_BOOTSTRAP, so after
# one failed -Z attempt every later one fails with "the option `Z` is only accepted on the nightly
# compiler" until that file is deleted; the script deletes it before building.
# Switching sanitizers rebuilds everything in fuzz/target (2.5-5 min on 2 cores).
#
# Environment: FUZZ_SANITIZER (default none), FUZZ_MAX_LEN (default 8192 bytes),
# CARGO_BUILD_JOBS (default 2). Builds go to fuzz/target (git-ignored).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"

DURATION="${1:-60}"
shift || true
if ! [[ "$DURATION" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (SECONDS: a positive integer, default 60)" >&2
    exit 2
fi

SANITIZER="${FUZZ_SANITIZER:-none}"
MAX_LEN="${FUZZ_MAX_LEN:-8192}"
# Two cores shared with others: keep the build within them; libFuzzer runs one process.
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
# Keep fuzz builds in fuzz/target even if the caller points CARGO_TARGET_DIR elsewhere: the
# instrumented artifacts must not mix with normal builds.
unset CARGO_TARGET_DIR
# A panic's backtrace is the useful part of a crash report.
export RUST_BACKTRACE="${RUST_BACKTRACE:-1}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "==> installing cargo-fuzz (a few minutes on 2 cores)"
    cargo install cargo-fuzz --locked -j "$CARGO_BUILD_JOBS"
fi

if [[ $# -gt 0 ]]; then
    TARGETS=("$@")
else
    mapfile -t TARGETS < <(cargo fuzz list)
fi
if [[ ${#TARGETS[@]} -eq 0 ]]; then
    echo "no fuzz targets found in fuzz/fuzz_targets" >&2
    exit 2
fi

if [[ "$SANITIZER" != none ]]; then
    if ! rustc --version | grep -q -- '-nightly' && [[ -z "${RUSTC_BOOTSTRAP:-}" ]]; then
        echo "==> stable rustc: setting RUSTC_BOOTSTRAP=1 for -Zsanitizer=$SANITIZER"
        export RUSTC_BOOTSTRAP=1
    fi
    rm -f fuzz/target/.rustc_info.json
fi

# -a: debug assertions and overflow checks on (what `cargo test` builds), so an arithmetic
# overflow is a crash here rather than a silent wrap.
FUZZ_FLAGS=(--sanitizer "$SANITIZER" -a)

echo "==> building fuzz targets (sanitizer: $SANITIZER, $(rustc --version))"
cargo fuzz build "${FUZZ_FLAGS[@]}"

LOG_DIR="$REPO_ROOT/fuzz/artifacts/logs"
mkdir -p "$LOG_DIR"
failed=()
for t in "${TARGETS[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    log="$LOG_DIR/$t.log"
    echo
    echo "==> fuzzing $t for ${DURATION}s (log: ${log#"$REPO_ROOT"/})"
    set +e
    # Seeds, read-only: the hand-made edge cases in fuzz/seeds/recipe/, and the real recipes
    # themselves (the examples and the srt-slurm fixtures), never copies of them.
    cargo fuzz run "${FUZZ_FLAGS[@]}" "$t" "fuzz/corpus/$t" fuzz/seeds/recipe recipes \
        tests/fixtures/srt-slurm-v1 tests/fixtures/srt-slurm-2 -- \
        -max_total_time="$DURATION" \
        -max_len="$MAX_LEN" \
        -timeout=10 \
        -dict=fuzz/recipe.dict \
        -print_final_stats=1 \
        2>&1 | tee "$log" | grep -E --line-buffered '^#[0-9]+[[:space:]]+(INITED|DONE)|^Done [0-9]+ runs|==[0-9]+==|panicked|SUMMARY|Test unit written'
    rc=${PIPESTATUS[0]}
    set -e
    # libFuzzer's last status line carries the coverage; -print_final_stats the totals.
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    cov=$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([^ ]*\).*/cov \1, ft \2, corpus \3/p' <<<"$last")
    echo "--> $t: ${execs:-?} executions, ${rate:-?} exec/s, ${cov:-no coverage line}, exit $rc"
    if [[ $rc -ne 0 ]]; then
        failed+=("$t")
        # The panic message and backtrace (or libFuzzer's error), then cargo-fuzz's summary with
        # the failing input and the reproduce / minimize commands.
        echo "--- $t failed; from its log:"
        awk '/panicked at|==[0-9]+== ?ERROR|deadly signal|ALARM|out-of-memory/ {p=1} p' "$log" | head -n 150
    fi
done

echo
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "FUZZING FOUND A PROBLEM in: ${failed[*]} (inputs in fuzz/artifacts/<target>/, logs in fuzz/artifacts/logs/)" >&2
    exit 1
fi
echo "no crash in ${TARGETS[*]} (${DURATION}s each)"
