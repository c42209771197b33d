#!/usr/bin/env bash
# A stand-in for the mcsup binary, to test scripts/slurm/job-1p1d.sbatch without Mooncake.
#
#   fake-mcsup.sh [run|plan] --role ROLE --recipe FILE [other mcsup options...]
#
# Appends one line per event to $FAKE_MCSUP_LOG (default: stderr):
#   "<epoch seconds> <role> <event> node=<SLURMD_NODENAME> step=<job>.<step> ..."
# `start` (with the argv and SLURM_JOB_NODELIST), `SIGUSR1` (drain: "tear down" for
# FAKE_TEARDOWN_MS, then exit 0), `SIGTERM` (exit 143), `exit <status>`.
# FAKE_EXIT_AFTER_<role>=S makes that role exit by itself after S seconds with
# FAKE_EXIT_CODE_<role> (default 0); FAKE_IGNORE_USR1_<role>=1 makes it log USR1 and go on (a
# drain that hangs). FAKE_EXIT_AFTER_NODE_<node> / FAKE_EXIT_CODE_NODE_<node> do the same for
# the instance on one node (with `--role auto` every node has the same role). `plan` prints a
# line and exits 0.
set -u

LOG="${FAKE_MCSUP_LOG:-/dev/stderr}"
ARGV="$*"
ROLE="?"
CMD=run
case "${1:-}" in run|plan) CMD="$1"; shift ;; esac
while [ $# -gt 0 ]; do
  case "$1" in
    --role) ROLE="$2"; shift 2 ;;
    *) shift ;;
  esac
done

emit() {
  printf '%s %s %s node=%s step=%s.%s\n' "$EPOCHREALTIME" "$ROLE" "$*" \
    "${SLURMD_NODENAME:-?}" "${SLURM_JOB_ID:-?}" "${SLURM_STEP_ID:-?}" >> "$LOG"
}

if [ "$CMD" = plan ]; then
  echo "fake plan for $ROLE on ${SLURMD_NODENAME:-?}"
  emit "plan argv=[$ARGV]"
  exit 0
fi

teardown_ms="${FAKE_TEARDOWN_MS:-300}"
ignore_var="FAKE_IGNORE_USR1_$ROLE"
on_drain() {  # "tear down" for FAKE_TEARDOWN_MS, then exit 0 like mcsup after a clean drain
  emit SIGUSR1
  if [ "${!ignore_var:-0}" = 1 ]; then emit "ignoring the drain"; return; fi
  read -r -t "$((teardown_ms / 1000)).$(printf '%03d' $((teardown_ms % 1000)))" -u "$idle" _
  emit "exit 0"
  exit 0
}
trap on_drain USR1
trap 'emit SIGTERM; emit "exit 143"; exit 143' TERM

emit "start argv=[$ARGV] nodelist=${SLURM_JOB_NODELIST:-?} cpus_on_node=${SLURM_CPUS_ON_NODE:-?}"

exit_after_var="FAKE_EXIT_AFTER_$ROLE"
exit_code_var="FAKE_EXIT_CODE_$ROLE"
node_after_var="FAKE_EXIT_AFTER_NODE_${SLURMD_NODENAME:-none}"
node_code_var="FAKE_EXIT_CODE_NODE_${SLURMD_NODENAME:-none}"
exit_after="${!exit_after_var:-${!node_after_var:-0}}"
exit_code="${!exit_code_var:-${!node_code_var:-0}}"

exec {idle}<> <(:)
start=$SECONDS
while :; do
  read -r -t 0.2 -u "$idle" _ || true
  if [ "$exit_after" != 0 ] && [ $((SECONDS - start)) -ge "$exit_after" ]; then
    emit "exit $exit_code (by itself)"
    exit "$exit_code"
  fi
done
