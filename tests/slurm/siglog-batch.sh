#!/bin/bash
# Batch script for tests/slurm/signals.sh (E4, E6): sbatch options come from the command line,
# SIGLOG_LOG (the log file) and SIGLOG (tests/slurm/siglog.sh) from the environment.
# Logs its own USR1/TERM traps and every return of `wait` as "batch" lines, forwards USR1 to the
# step's tasks with `scancel --signal=USR1 $SLURM_JOB_ID` (what an mcsup job script does), and
# runs a siglog task with children as a step plus a siglog child of its own (batch.child).
LOG="${SIGLOG_LOG:?}"
blog() { printf '%s batch pid=%s %s\n' "$EPOCHREALTIME" "$$" "$*" >> "$LOG"; }
trap 'blog SIGUSR1; scancel --signal=USR1 "$SLURM_JOB_ID"; blog "forwarded USR1 (scancel rc=$?)"' USR1
trap 'blog SIGTERM' TERM
blog start
"${SIGLOG:?}" "$LOG" batch.child </dev/null >/dev/null 2>&1 &
srun -N1 -n1 "$SIGLOG" "$LOG" task --children &
step=$!
while :; do
  wait "$step"; rc=$?
  blog "wait returned $rc"
  kill -0 "$step" 2>/dev/null || break
done
blog "exit"
