#!/usr/bin/env bash
# Test scripts/slurm/job-1p1d.sbatch on a private 2-node Slurm (scripts/slurm/cluster.sh).
#
#   tests/slurm/job-1p1d.sh [--proctrack cgroup|linuxproc] [--mcsup PATH] [--real] [--keep]
#
# With the stand-in tests/slurm/fake-mcsup.sh as MCSUP:
#   A  placement: prefill on the first node (n1), decode on the second (n2), the right argv;
#      an early warning (`scancel --batch --signal=USR1`, what `--signal=B:USR1@N` sends) is
#      forwarded to both tasks, which exit 0: job COMPLETED 0:0
#   B  prefill ends by itself with status 3: the script drains decode; job FAILED 3:0
#   C  scancel <job>: both tasks get SIGTERM, the batch shell waits for them; job CANCELLED
#   F  prefill ends, decode ignores the drain: after DRAIN_TIMEOUT the script cancels the job
# With a real mcsup binary (--mcsup PATH, or $MCSUP_BIN):
#   D  MCSUP_COMMAND=plan: each node prints its plan; n1 runs the master, n2 waits for it
# With --real (needs the real binary, a `run` that works and scripts/setup.sh's .venv):
#   E  the whole 1P1D job with tests/slurm/1p1d-local.yaml; early warning; every process gone
#
# Exit 0 when every scenario passed. The cluster is stopped at the end (unless --keep).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CLUSTER="$REPO/scripts/slurm/cluster.sh"
SBATCH_SCRIPT="$REPO/scripts/slurm/job-1p1d.sbatch"
FAKE="$HERE/fake-mcsup.sh"

PROCTRACK=cgroup
MCSUP_REAL="${MCSUP_BIN:-}"
REAL=0
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --proctrack) PROCTRACK="$2"; shift 2 ;;
    --mcsup) MCSUP_REAL="$2"; shift 2 ;;
    --real) REAL=1; shift ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

export MCSUP_SLURM_BASE="${MCSUP_SLURM_BASE:-${TMPDIR:-/tmp}/mcsup-slurm-1p1d}"
export MCSUP_SLURM_PORT_BASE="${MCSUP_SLURM_PORT_BASE:-17950}"
export MCSUP_SLURM_KILLWAIT="${MCSUP_SLURM_KILLWAIT:-15}"
OUT="${TMPDIR:-/tmp}/mcsup-slurm-1p1d-test"
rm -rf "$OUT"; mkdir -p "$OUT"

FAILS=0
pass() { printf 'PASS  %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; FAILS=$((FAILS + 1)); }
check() { local what="$1"; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }

cleanup() {
  local rc=$?
  if [ "$KEEP" = 1 ]; then echo "cluster kept: $("$CLUSTER" env | head -n1)"; else "$CLUSTER" stop || true; fi
  exit "$rc"
}
trap cleanup EXIT

"$CLUSTER" start --nodes 2 --proctrack "$PROCTRACK"
eval "$("$CLUSTER" env)"

# The recipes: log_dir under $OUT (not in the checkout), and the decode node's store on 17761.
sed "s|log_dir: mcsup-logs/{job_id}|log_dir: $OUT/mcsup-logs/{job_id}|" "$HERE/1p1d-local.yaml" > "$OUT/prefill.yaml"
sed 's/17760/17761/g' "$OUT/prefill.yaml" > "$OUT/decode.yaml"

job_field() { scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
wait_gone() {  # JOB TIMEOUT
  local deadline=$((SECONDS + $2))
  while [ -n "$(squeue -h -j "$1" 2>/dev/null)" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "job $1 still listed after $2 s" >&2; return 1; }
    sleep 0.2
  done
}
wait_lines() {  # FILE REGEX COUNT TIMEOUT
  local deadline=$((SECONDS + $4))
  until [ "$(grep -cE -- "$2" "$1" 2>/dev/null || true)" -ge "$3" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "timeout: $3 x /$2/ in $1" >&2; return 1; }
    sleep 0.1
  done
}
state_is() { [ "$(job_field "$1" JobState) $(job_field "$1" ExitCode)" = "$2" ]; }
has_line() { grep -qE -- "$2" "$1"; }

submit() {  # NAME [VAR=VALUE...]: sbatch the example from the checkout with these settings
  local name="$1"; shift
  env "$@" sbatch --parsable --chdir="$REPO" -o "$OUT/$name.out" --job-name="1p1d-$name" "$SBATCH_SCRIPT"
}

fake_env=(MCSUP="$FAKE" PREFILL_RECIPE="$OUT/prefill.yaml" DECODE_RECIPE="$OUT/decode.yaml")

# ---------------------------------------------------------------------------------------------
echo "== A: placement, early warning forwarded, clean exit"
LOG="$OUT/A.events"; : > "$LOG"
job="$(submit A "${fake_env[@]}" FAKE_MCSUP_LOG="$LOG")"
wait_lines "$LOG" ' start ' 2 30
check "A prefill runs on n1 (the infra node)" has_line "$LOG" '^[0-9.]+ prefill start .*node=n1 '
check "A decode runs on n2" has_line "$LOG" '^[0-9.]+ decode start .*node=n2 '
check "A argv: run --role prefill --recipe <prefill recipe>" has_line "$LOG" "prefill start argv=\[run --role prefill --recipe $OUT/prefill.yaml\]"
check "A the step has every CPU of the node (8)" has_line "$LOG" 'decode start .*cpus_on_node=8'
scancel --batch --signal=USR1 "$job" || true
wait_gone "$job" 30 || true
check "A prefill got the forwarded USR1 and exited 0" has_line "$LOG" 'prefill exit 0 '
check "A decode got the forwarded USR1 and exited 0" has_line "$LOG" 'decode exit 0 '
check "A job COMPLETED 0:0" state_is "$job" "COMPLETED 0:0"
sed 's/^/    /' "$OUT/A.out"

echo "== B: prefill ends by itself (status 3): decode is drained"
LOG="$OUT/B.events"; : > "$LOG"
job="$(submit B "${fake_env[@]}" FAKE_MCSUP_LOG="$LOG" FAKE_EXIT_AFTER_prefill=2 FAKE_EXIT_CODE_prefill=3)"
wait_gone "$job" 40 || true
check "B prefill exited 3" has_line "$LOG" 'prefill exit 3 \(by itself\)'
check "B decode was drained (USR1) and exited 0" has_line "$LOG" 'decode SIGUSR1'
check "B job FAILED 3:0" state_is "$job" "FAILED 3:0"
sed 's/^/    /' "$OUT/B.out"

echo "== C: scancel <job>: both tasks get SIGTERM, the batch shell waits for them"
LOG="$OUT/C.events"; : > "$LOG"
job="$(submit C "${fake_env[@]}" FAKE_MCSUP_LOG="$LOG")"
wait_lines "$LOG" ' start ' 2 30
scancel "$job" || true
wait_gone "$job" $((MCSUP_SLURM_KILLWAIT + 20)) || true
check "C prefill got SIGTERM" has_line "$LOG" 'prefill SIGTERM'
check "C decode got SIGTERM" has_line "$LOG" 'decode SIGTERM'
check "C the batch shell saw SIGTERM and kept waiting" has_line "$OUT/C.out" 'SIGTERM: the mcsup tasks'
check "C job CANCELLED" test "$(job_field "$job" JobState)" = CANCELLED
sed 's/^/    /' "$OUT/C.out"

echo "== F: decode ignores the drain: scancel after DRAIN_TIMEOUT"
LOG="$OUT/F.events"; : > "$LOG"
job="$(submit F "${fake_env[@]}" FAKE_MCSUP_LOG="$LOG" FAKE_EXIT_AFTER_prefill=1 \
  FAKE_IGNORE_USR1_decode=1 DRAIN_TIMEOUT=2)"
wait_gone "$job" $((MCSUP_SLURM_KILLWAIT + 30)) || true
check "F decode ignored the drain" has_line "$LOG" 'decode ignoring the drain'
check "F the script cancelled the job after DRAIN_TIMEOUT" has_line "$OUT/F.out" 'still running 2s after the drain: scancel'
check "F decode got SIGTERM" has_line "$LOG" 'decode SIGTERM'
check "F job CANCELLED" test "$(job_field "$job" JobState)" = CANCELLED
sed 's/^/    /' "$OUT/F.out"

if [ -n "$MCSUP_REAL" ]; then
  echo "== D: MCSUP_COMMAND=plan with $MCSUP_REAL"
  job="$(submit D MCSUP="$MCSUP_REAL" MCSUP_COMMAND=plan PREFILL_RECIPE="$OUT/prefill.yaml" DECODE_RECIPE="$OUT/decode.yaml")"
  wait_gone "$job" 60 || true
  check "D job COMPLETED 0:0" state_is "$job" "COMPLETED 0:0"
  check "D n1 plans prefill with the master" has_line "$OUT/D.out" 'mcsup plan for node n1 .*roles: prefill'
  check "D n1 runs the master" grep -qE 'argv: .*mooncake_master' "$OUT/D.out"
  check "D n2 plans decode and waits for the master on n1" has_line "$OUT/D.out" 'master@n1: tcp 127.0.0.1:17750'
  grep -E 'mcsup plan for node|infra node|master@|argv:' "$OUT/D.out" | sed 's/^/    /'
fi

if [ "$REAL" = 1 ]; then
  echo "== E: the real 1P1D job (mcsup run) with an early warning"
  [ -n "$MCSUP_REAL" ] || { fail "E needs --mcsup PATH"; exit 1; }
  [ -x "$REPO/.venv/bin/python" ] || { fail "E needs $REPO/.venv (scripts/setup.sh)"; exit 1; }
  job="$(PATH="$REPO/.venv/bin:$PATH" submit E MCSUP="$MCSUP_REAL" PREFILL_RECIPE="$OUT/prefill.yaml" DECODE_RECIPE="$OUT/decode.yaml")"
  logs="$OUT/mcsup-logs/$job"
  deadline=$((SECONDS + 120))
  until [ "$(cat "$logs"/n[12].*worker*.log 2>/dev/null | grep -c READY || true)" -ge 2 ]; do
    if [ -z "$(squeue -h -j "$job")" ] || [ "$SECONDS" -ge "$deadline" ]; then break; fi
    sleep 0.5
  done
  check "E both workers READY" test "$(cat "$logs"/n[12].*worker*.log 2>/dev/null | grep -c READY || true)" -ge 2
  t0=$SECONDS
  scancel --batch --signal=USR1 "$job" || true
  wait_gone "$job" 90 || true
  echo "    job ended $((SECONDS - t0)) s after the early warning"
  check "E job COMPLETED 0:0" state_is "$job" "COMPLETED 0:0"
  sed 's/^/    /' "$OUT/E.out" | tail -n 40
  echo "    logs: $logs"
fi

echo
if [ "$FAILS" -eq 0 ]; then echo "all passed"; else echo "$FAILS check(s) failed"; exit 1; fi
