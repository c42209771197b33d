#!/usr/bin/env bash
# A task that logs every signal it receives, with timestamps, for measuring what Slurm does.
#
#   siglog.sh LOGFILE LABEL [--exit-on-term] [--children] [--lifetime SECONDS]
#
# Appends lines "<epoch seconds.micro> <LABEL> pid=<pid> pgid=<pgid> sid=<sid> ppid=<ppid> <event>"
# to LOGFILE, where event is `start`, `SIG<NAME>` (one line per delivery; bash runs a trap as soon
# as the signal arrives, also while it waits) or `exit <status>`. SIGKILL cannot be logged: the
# test harness watches the pids from the `start` lines and logs when they disappear.
#
#   --exit-on-term   exit 143 after logging SIGTERM (like a supervisor that has finished its
#                    teardown); default: log it and keep running (to see when SIGKILL comes)
#   --children       also start, all logging to LOGFILE with the same options:
#                      LABEL.child   an ordinary child (same process group)
#                      LABEL.setsid  a child in its own session (still a descendant)
#                      LABEL.daemon  a double-forked daemon in its own session (orphaned, not
#                                    a descendant any more)
#   --lifetime S     exit 0 after S seconds (default: run until killed)
#
# Plain bash (5.x) so it runs anywhere Slurm does; no fork in the idle loop.
set -u

[ $# -ge 2 ] || { echo "usage: $0 LOGFILE LABEL [--exit-on-term] [--children] [--lifetime S]" >&2; exit 2; }
LOG="$1" LABEL="$2"; shift 2
EXIT_ON_TERM=0 CHILDREN=0 LIFETIME=0
while [ $# -gt 0 ]; do
  case "$1" in
    --exit-on-term) EXIT_ON_TERM=1 ;;
    --children) CHILDREN=1 ;;
    --lifetime) LIFETIME="$2"; shift ;;
    *) echo "$0: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

IDS=""
ids() {  # IDS="pgid=.. sid=.. ppid=.." from /proc/$$/stat (no fork: the ppid changes on orphaning)
  local stat
  read -r stat < "/proc/$$/stat"
  stat="${stat##*) }"
  # shellcheck disable=SC2086
  set -- $stat
  IDS="pgid=$3 sid=$4 ppid=$2"
}
emit() {
  local now=$EPOCHREALTIME
  ids
  printf '%s %s pid=%s %s %s\n' "$now" "$LABEL" "$$" "$IDS" "$*" >> "$LOG"
}

on_signal() {
  emit "SIG$1"
  if [ "$1" = TERM ] && [ "$EXIT_ON_TERM" = 1 ]; then
    emit "exit 143"
    trap - EXIT
    exit 143
  fi
}
for s in HUP INT QUIT USR1 USR2 PIPE ALRM TERM CONT TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS; do
  # shellcheck disable=SC2064
  trap "on_signal $s" "$s"
done
trap 'emit "exit $?"' EXIT

emit "start"

if [ "$CHILDREN" = 1 ]; then
  opts=()
  [ "$EXIT_ON_TERM" = 1 ] && opts+=(--exit-on-term)
  [ "$LIFETIME" != 0 ] && opts+=(--lifetime "$LIFETIME")
  self="${BASH_SOURCE[0]}"
  "$self" "$LOG" "$LABEL.child" "${opts[@]}" </dev/null >/dev/null 2>&1 &
  setsid "$self" "$LOG" "$LABEL.setsid" "${opts[@]}" </dev/null >/dev/null 2>&1 &
  ( setsid "$self" "$LOG" "$LABEL.daemon" "${opts[@]}" </dev/null >/dev/null 2>&1 & )
fi

# Idle without forking: read with a timeout from a pipe nobody writes to. A trapped signal runs
# its trap at once (read is restarted afterwards).
exec {idle}<> <(:)
start=$SECONDS
while :; do
  read -r -t 1 -u "$idle" _ || true
  if [ "$LIFETIME" != 0 ] && [ $((SECONDS - start)) -ge "$LIFETIME" ]; then exit 0; fi
done
