#!/usr/bin/env bash
# Measure what a real Slurm does to a task (and the task's children) on cancel, on a signal
# request and on an sbatch early-warning signal. Starts a private cluster (scripts/slurm/cluster.sh)
# with the given proctrack plugin, runs the experiments with tests/slurm/siglog.sh as the task,
# prints a timeline per experiment (milliseconds from the harness's action), and stops the
# cluster again. The facts are written up in tests/slurm/FINDINGS.md.
#
#   tests/slurm/signals.sh [--proctrack cgroup|linuxproc|pgid] [--out DIR] [--only E1,E2,...]
#
# Experiments:
#   E1  scancel <job> of an srun step; the task logs SIGTERM and keeps running
#   E2  scancel <job> of an srun step; the task exits 143 on SIGTERM
#   E3  scancel --signal=USR1 <job>, then scancel <job>
#   E4  sbatch --time=3 --signal=B:USR1@120 with `trap 'scancel --signal=USR1 $SLURM_JOB_ID' USR1`:
#       when the batch shell gets USR1 and how fast the step's task gets the forwarded USR1;
#       then scancel <job>: what the batch shell (and its `wait`) and the step see
#   E5  scancel <job>.<step>
#   E6  sbatch --time=1 (no --signal): what the batch shell and the step's task see at the limit
#       (timeline relative to StartTime + 60 s; StartTime has 1 s resolution). Not in the
#       default set (it takes ~1.5 min): --only E6
# Every task starts three children: .child (same process group), .setsid (own session, still a
# descendant), .daemon (double-forked: orphaned, own session).
#
# Environment: MCSUP_SLURM_BASE / MCSUP_SLURM_PORT_BASE / MCSUP_SLURM_KILLWAIT as for cluster.sh
# (defaults here: a private base under ${TMPDIR:-/tmp}, port base 17900, KillWait 5).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CLUSTER="$REPO/scripts/slurm/cluster.sh"
SIGLOG="$HERE/siglog.sh"

PROCTRACK=cgroup
OUT=""
ONLY="E1,E2,E3,E4,E5"
while [ $# -gt 0 ]; do
  case "$1" in
    --proctrack) PROCTRACK="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-${TMPDIR:-/tmp}/mcsup-slurm-signals-$PROCTRACK}"
export MCSUP_SLURM_BASE="${MCSUP_SLURM_BASE:-${TMPDIR:-/tmp}/mcsup-slurm-signals}"
export MCSUP_SLURM_PORT_BASE="${MCSUP_SLURM_PORT_BASE:-17900}"
export MCSUP_SLURM_KILLWAIT="${MCSUP_SLURM_KILLWAIT:-5}"
KILLWAIT="$MCSUP_SLURM_KILLWAIT"

rm -rf "$OUT"
mkdir -p "$OUT"
say() { printf '%s\n' "$*" | tee -a "$OUT/report.txt"; }

cleanup() {
  local rc=$?
  kill_leftovers "$OUT"/*.log 2>/dev/null || true
  "$CLUSTER" stop >/dev/null 2>&1 || "$CLUSTER" stop || true
  exit "$rc"
}
trap cleanup EXIT

t0=$SECONDS
"$CLUSTER" start --nodes 2 --proctrack "$PROCTRACK"
say "# proctrack/$PROCTRACK, KillWait=$KILLWAIT; cluster started in $((SECONDS - t0))s"
eval "$("$CLUSTER" env)"

exec {IDLE}<> <(:)
nap() { read -r -t "$1" -u "$IDLE" _ || true; }   # sleep without forking

is_alive() {  # PID: exists and is not a zombie
  local s
  { read -r s < "/proc/$1/stat"; } 2>/dev/null || return 1
  s="${s##*) }"
  [ "${s:0:1}" != Z ]
}

# watch LOG STOPFILE: append "<t> <label> pid=<pid> GONE" when a process of a `start` line dies.
watch() {
  local log="$1" stop="$2" t label p rest pid
  declare -A alive=() lab=()
  while [ ! -e "$stop" ]; do
    while read -r t label p rest; do
      [ "$rest" = start ] || [[ "$rest" == *" start" ]] || continue
      pid="${p#pid=}"
      [ -n "${lab[$pid]:-}" ] || { lab[$pid]="$label"; alive[$pid]=1; }
    done < "$log"
    for pid in "${!alive[@]}"; do
      if ! is_alive "$pid"; then
        printf '%s %s pid=%s GONE\n' "$EPOCHREALTIME" "${lab[$pid]}" "$pid" >> "$log"
        unset "alive[$pid]"
      fi
    done
    nap 0.005
  done
}

started_pids() { awk '$NF == "start" {sub("pid=", "", $3); print $3}' "$@"; }

kill_leftovers() {  # the escaped siglog processes (linuxproc/pgid): ours, by pid
  local pid
  for pid in $(started_pids "$@"); do
    if is_alive "$pid" && grep -q siglog "/proc/$pid/cmdline" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}

all_gone() { local pid; for pid in $(started_pids "$1"); do is_alive "$pid" && return 1; done; return 0; }

wait_lines() {  # LOG PATTERN COUNT TIMEOUT: until COUNT lines match
  local deadline=$((SECONDS + $4))
  until [ "$(grep -c -- "$2" "$1" 2>/dev/null || true)" -ge "$3" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "timeout waiting for $3 x '$2' in $1" >&2; return 1; }
    nap 0.02
  done
}

job_field() { scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
job_end() { echo "JobState=$(job_field "$1" JobState) ExitCode=$(job_field "$1" ExitCode)"; }

mark() { printf '%s harness - %s\n' "$EPOCHREALTIME" "$2" >> "$1"; }

timeline() {  # LOG MARKER: events relative to the first harness line containing MARKER
  awk -v m="$2" '
    { t[NR] = $1; line[NR] = $0 }
    !t0 && $2 == "harness" && index($0, m) { t0 = $1 }
    END {
      for (i = 1; i <= NR; i++) {
        n = split(line[i], f, " "); ev = ""
        for (j = 3; j <= n; j++) if (f[j] !~ /^(pgid|sid|ppid)=/) ev = ev " " f[j]
        printf "%.3f\t%s\t%s\n", (t[i] - t0) * 1000, f[2], ev
      }
    }' "$1" | sort -s -g -k1,1 | awk -F'\t' '{printf "  %+10.1f ms  %-15s%s\n", $1, $2, $3}'
}

# run_step NAME SIGLOG-OPTS...: srun a siglog task with children on n1; sets LOG, JOB, SRUN_PID
run_step() {
  local name="$1"; shift
  LOG="$OUT/$name.log"; : > "$LOG"
  srun -N1 -w n1 --job-name="$name" "$SIGLOG" "$LOG" task --children "$@" \
    >"$OUT/$name.srun.out" 2>&1 &
  SRUN_PID=$!
  wait_lines "$LOG" ' start$' 4 20
  JOB="$(squeue -h -n "$name" -o %A | head -n1)"
  rm -f "$OUT/$name.stop"
  watch "$LOG" "$OUT/$name.stop" &
  WATCH_PID=$!
}

finish() {  # wait up to S seconds for every process to go, then stop the watcher
  local s="$1" deadline
  deadline=$((SECONDS + s))
  while ! all_gone "$LOG" && [ "$SECONDS" -lt "$deadline" ]; do nap 0.05; done
  nap 0.05
  touch "${LOG%.log}.stop"
  wait "$WATCH_PID" 2>/dev/null || true
  local left
  left="$(for p in $(started_pids "$LOG"); do is_alive "$p" && awk -v p="$p" '$3 == "pid=" p && $NF == "start" {print $2}' "$LOG"; done | tr '\n' ' ' || true)"
  [ -z "$left" ] || say "  still alive after ${s}s: $left(killed by the harness)"
  kill_leftovers "$LOG"
}

srun_rc() {  # wait for srun; log its exit
  local rc=0
  wait "$SRUN_PID" || rc=$?
  printf '%s harness - srun exited %s\n' "$EPOCHREALTIME" "$rc" >> "$LOG"
}

has() { [[ ",$ONLY," == *",$1,"* ]]; }

# ---------------------------------------------------------------------------------------------
say ""
say "## basics"
t=$EPOCHREALTIME; out="$(srun -N2 hostname | sort | tr '\n' ' ')"
say "srun -N2 hostname -> $out($(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.0f", (b - a) * 1000}') ms)"
t=$EPOCHREALTIME; out="$(srun true; echo rc=$?)"
say "srun true -> $out ($(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.0f", (b - a) * 1000}') ms)"
cat > "$OUT/basic.sbatch" <<'EOF'
#!/bin/bash
#SBATCH -N2
#SBATCH --time=1
srun bash -c 'echo "$SLURMD_NODENAME nodeid=$SLURM_NODEID procid=$SLURM_PROCID nodelist=$SLURM_JOB_NODELIST mem_per_node=${SLURM_MEM_PER_NODE:-unset} mem_per_cpu=${SLURM_MEM_PER_CPU:-unset}"' | sort
EOF
t=$EPOCHREALTIME
job="$(sbatch --parsable -o "$OUT/basic.out" "$OUT/basic.sbatch")"
while [ -n "$(squeue -h -j "$job" 2>/dev/null)" ]; do nap 0.05; done
say "sbatch -N2 (job $job): $(job_end "$job") after $(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.0f", (b - a) * 1000}') ms"
sed 's/^/  /' "$OUT/basic.out" | tee -a "$OUT/report.txt"

if has E1; then
  say ""
  say "## E1 scancel <job> (srun step); task logs SIGTERM and keeps running"
  run_step E1
  mark "$LOG" "scancel $JOB"; scancel "$JOB"
  srun_rc
  finish $((KILLWAIT + 5))
  timeline "$LOG" "scancel" | tee -a "$OUT/report.txt"
fi

if has E2; then
  say ""
  say "## E2 scancel <job> (srun step); task (and children) exit 143 on SIGTERM"
  run_step E2 --exit-on-term
  mark "$LOG" "scancel $JOB"; scancel "$JOB"
  srun_rc
  finish $((KILLWAIT + 5))
  timeline "$LOG" "scancel" | tee -a "$OUT/report.txt"
fi

if has E3; then
  say ""
  say "## E3 scancel --signal=USR1 <job>, 1 s later scancel <job>"
  run_step E3
  mark "$LOG" "scancel --signal=USR1 $JOB"; scancel --signal=USR1 "$JOB"
  nap 1
  mark "$LOG" "scancel $JOB"; scancel "$JOB"
  srun_rc
  finish $((KILLWAIT + 5))
  timeline "$LOG" "scancel --signal" | tee -a "$OUT/report.txt"
fi

if has E4; then
  say ""
  say "## E4 sbatch --time=3 --signal=B:USR1@120 + trap 'scancel --signal=USR1 \$SLURM_JOB_ID' USR1; then scancel <job>"
  LOG="$OUT/E4.log"; : > "$LOG"
  submit=$EPOCHREALTIME
  JOB="$(SIGLOG_LOG="$LOG" SIGLOG="$SIGLOG" sbatch --parsable -N1 -w n1 --time=3 --signal=B:USR1@120 \
    -o "$OUT/E4.out" "$HERE/siglog-batch.sh")"
  printf '%s harness - sbatch submitted job %s\n' "$submit" "$JOB" >> "$LOG"
  wait_lines "$LOG" ' start$' 6 30
  printf '%s harness - job StartTime %s TimeLimit %s\n' "$EPOCHREALTIME" \
    "$(job_field "$JOB" StartTime)" "$(job_field "$JOB" TimeLimit)" >> "$LOG"
  rm -f "$OUT/E4.stop"; watch "$LOG" "$OUT/E4.stop" & WATCH_PID=$!
  if ! wait_lines "$LOG" 'task pid=[0-9]* .*SIGUSR1' 1 200; then say "  the task never got USR1"; fi
  nap 1
  mark "$LOG" "scancel $JOB"; scancel "$JOB"
  deadline=$((SECONDS + KILLWAIT + 10))
  while [ -n "$(squeue -h -j "$JOB" 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do nap 0.05; done
  printf '%s harness - job gone from squeue: %s\n' "$EPOCHREALTIME" \
    "$(job_end "$JOB")" >> "$LOG"
  finish 5
  timeline "$LOG" "sbatch submitted" | tee -a "$OUT/report.txt"
fi

if has E6; then
  say ""
  say "## E6 sbatch --time=1, no --signal: the time limit (0 ms = StartTime + 60 s, +-1 s)"
  LOG="$OUT/E6.log"; : > "$LOG"
  JOB="$(SIGLOG_LOG="$LOG" SIGLOG="$SIGLOG" sbatch --parsable -N1 -w n1 --time=1 \
    -o "$OUT/E6.out" "$HERE/siglog-batch.sh")"
  printf '%s harness - sbatch submitted job %s\n' "$EPOCHREALTIME" "$JOB" >> "$LOG"
  wait_lines "$LOG" ' start$' 6 30
  start_epoch="$(date -d "$(job_field "$JOB" StartTime)" +%s)"
  printf '%s harness - time limit (StartTime+60s)\n' "$((start_epoch + 60)).000000" >> "$LOG"
  rm -f "$OUT/E6.stop"; watch "$LOG" "$OUT/E6.stop" & WATCH_PID=$!
  deadline=$((SECONDS + 150))
  while [ -n "$(squeue -h -j "$JOB" 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do nap 0.1; done
  printf '%s harness - job gone from squeue: %s\n' "$EPOCHREALTIME" "$(job_end "$JOB")" >> "$LOG"
  finish 5
  timeline "$LOG" "time limit" | tee -a "$OUT/report.txt"
fi

if has E5; then
  say ""
  say "## E5 scancel <job>.0 (the step only)"
  run_step E5
  mark "$LOG" "scancel $JOB.0"; scancel "$JOB.0"
  srun_rc
  finish $((KILLWAIT + 5))
  timeline "$LOG" "scancel" | tee -a "$OUT/report.txt"
fi

say ""
say "raw logs: $OUT"
