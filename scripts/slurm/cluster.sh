#!/usr/bin/env bash
# A private, throw-away Slurm 22.05 on this machine, for testing mcsup under real Slurm.
#
# One munged, one slurmctld and N fake compute nodes (one `slurmd -N nX` each, own port), all
# running as root, all talking over 127.0.0.1, with every file (config, munge key and socket,
# state, spool, pid and log files) under one base directory. Nothing in /etc is used or changed:
# clients find the cluster through SLURM_CONF (`eval "$(scripts/slurm/cluster.sh env)"`).
# Measured on Debian 12 with its Slurm 22.05.8 packages (tests/slurm/FINDINGS.md).
#
#   scripts/slurm/cluster.sh start [--nodes N] [--proctrack cgroup|linuxproc|pgid]
#                                  [--base DIR] [--port-base P]
#   scripts/slurm/cluster.sh stop    [--base DIR]
#   scripts/slurm/cluster.sh status  [--base DIR]
#   scripts/slurm/cluster.sh env     [--base DIR]
#
# Run `scripts/slurm/cluster.sh --help` for the details and the environment knobs.
set -euo pipefail

PROG="cluster.sh"
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SCRIPT_PATH="$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")"
# Shared helpers (dpkg_installed, apt_install); this script's own log/warn/die below win.
# shellcheck source=scripts/lib/common.sh
. "$SCRIPT_DIR/../lib/common.sh"

log()  { printf '[%s] %s\n' "$PROG" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "$PROG" "$*" >&2; }
die()  { printf '[%s] ERROR: %s\n' "$PROG" "$*" >&2; exit 1; }

usage() {
  cat <<EOF
Usage: $PROG COMMAND [OPTIONS]

A private local Slurm (slurmctld + N fake nodes n1..nN + munged) on 127.0.0.1 for mcsup tests.
Everything lives under one base directory; nothing in /etc is touched.

Commands:
  start    install the Debian packages if missing, write the config, start munged, slurmctld
           and one slurmd per node, and wait until every node is idle. Idempotent: if the
           cluster of this base directory already runs with the same settings, says so.
  stop     cancel every job, then stop the slurmd(s), slurmctld and munged by their recorded
           pids (SIGTERM, SIGKILL after a bounded wait). Idempotent.
  status   show the daemons, sinfo and squeue. Exit 0 running, 1 partly running, 3 stopped.
  env      print the 'export SLURM_CONF=...' lines for clients: eval "\$($PROG env)"

Options:
  --nodes N                     fake nodes n1..nN (start only)             [\$MCSUP_SLURM_NODES, 2]
  --proctrack cgroup|linuxproc|pgid   ProctrackType (start only)   [\$MCSUP_SLURM_PROCTRACK, cgroup]
  --base DIR                    base directory        [\$MCSUP_SLURM_BASE, \${TMPDIR:-/tmp}/mcsup-slurm]
  --port-base P                 SlurmctldPort=P, node nX listens on P+X   [\$MCSUP_SLURM_PORT_BASE, 17817]
  -h, --help                    this help

Environment knobs (start):
  MCSUP_SLURM_KILLWAIT=S        KillWait (seconds between SIGTERM and SIGKILL on cancel)   [5]
  MCSUP_SLURM_CPUS=N            CPUs each fake node advertises (config_overrides)         [8]
  MCSUP_SLURM_REALMEM=MiB       RealMemory of each fake node            [this machine's MemTotal]
  MCSUP_SLURM_START_TIMEOUT=S   bound on the wait for daemons and idle nodes               [30]
  MCSUP_SLURM_STOP_TIMEOUT=S    bound on each daemon's SIGTERM -> SIGKILL wait             [10]
  MCSUP_SKIP_APT=1              never run apt-get; fail if the packages are missing

Ports: keep P..P+N out of 12300-14300 and 15000-17000, which Mooncake picks from at random.
Parallel clusters need different --base and --port-base values.

Examples:
  $PROG start --nodes 2 --proctrack cgroup
  eval "\$($PROG env)"; srun -N2 hostname; sbatch -N2 --wrap 'srun hostname'
  $PROG stop
EOF
}

# ---------------------------------------------------------------------------------------------
# Arguments
# ---------------------------------------------------------------------------------------------
CMD=""
NODES="${MCSUP_SLURM_NODES:-2}"
PROCTRACK="${MCSUP_SLURM_PROCTRACK:-cgroup}"
BASE="${MCSUP_SLURM_BASE:-${TMPDIR:-/tmp}/mcsup-slurm}"
PORT_BASE="${MCSUP_SLURM_PORT_BASE:-17817}"
KILLWAIT="${MCSUP_SLURM_KILLWAIT:-5}"
CPUS="${MCSUP_SLURM_CPUS:-8}"
REALMEM="${MCSUP_SLURM_REALMEM:-}"
START_TIMEOUT="${MCSUP_SLURM_START_TIMEOUT:-30}"
STOP_TIMEOUT="${MCSUP_SLURM_STOP_TIMEOUT:-10}"

need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "option $1 needs a value (see --help)"; }

while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help|help) usage; exit 0 ;;
    --nodes)      need_value "$@"; NODES="$2"; shift 2 ;;
    --nodes=*)    NODES="${1#*=}"; shift ;;
    --proctrack)  need_value "$@"; PROCTRACK="$2"; shift 2 ;;
    --proctrack=*) PROCTRACK="${1#*=}"; shift ;;
    --base)       need_value "$@"; BASE="$2"; shift 2 ;;
    --base=*)     BASE="${1#*=}"; shift ;;
    --port-base)  need_value "$@"; PORT_BASE="$2"; shift 2 ;;
    --port-base=*) PORT_BASE="${1#*=}"; shift ;;
    start|stop|status|env)
      [ -z "$CMD" ] || die "two commands given: '$CMD' and '$1' (see --help)"
      CMD="$1"; shift ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$CMD" ] || { usage >&2; exit 2; }

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_uint "$NODES" && [ "$NODES" -ge 1 ] && [ "$NODES" -le 64 ] || die "--nodes must be 1..64, got '$NODES'"
case "$PROCTRACK" in cgroup|linuxproc|pgid) ;; *) die "--proctrack must be cgroup, linuxproc or pgid, got '$PROCTRACK'" ;; esac
is_uint "$PORT_BASE" && [ "$PORT_BASE" -ge 1024 ] && [ $((PORT_BASE + NODES)) -le 65535 ] \
  || die "--port-base must leave P..P+N within 1024..65535, got '$PORT_BASE'"
is_uint "$KILLWAIT" || die "MCSUP_SLURM_KILLWAIT must be whole seconds, got '$KILLWAIT'"
is_uint "$CPUS" && [ "$CPUS" -ge 1 ] || die "MCSUP_SLURM_CPUS must be >= 1, got '$CPUS'"
is_uint "$START_TIMEOUT" && is_uint "$STOP_TIMEOUT" || die "timeouts must be whole seconds"
[ -z "$REALMEM" ] || is_uint "$REALMEM" || die "MCSUP_SLURM_REALMEM must be MiB, got '$REALMEM'"

case "$BASE" in /*) ;; *) BASE="$PWD/$BASE" ;; esac
BASE="${BASE%/}"
[ "$BASE" != "" ] && [ "$BASE" != "/" ] || die "refusing base directory '/'"

CONF="$BASE/etc/slurm.conf"
CGCONF="$BASE/etc/cgroup.conf"
MUNGE_DIR="$BASE/munge"           # 0700: key, seed
MUNGE_RUN="$BASE/munge-run"        # 0755: munged demands o+x on its socket's directory
MUNGE_SOCKET="$MUNGE_RUN/munge.socket"
PIDS="$BASE/pids"        # pids recorded by this script: "<pid> <starttime> <comm>"
LOGS="$BASE/log"
MARKER="$BASE/.mcsup-slurm"   # this base directory was made by this script
SETTINGS="$BASE/settings"     # the settings the running cluster was started with

export SLURM_CONF="$CONF"
# Inherited job variables (when run from inside another Slurm job) would confuse the clients.
unset SLURM_JOB_ID SLURM_JOBID SLURM_JOB_NODELIST SLURM_NODELIST 2>/dev/null || true

# ---------------------------------------------------------------------------------------------
# Process bookkeeping: a pid is ours only if its start time still matches the recorded one, so a
# recycled pid is never signalled.
# ---------------------------------------------------------------------------------------------
proc_starttime() {  # field 22 of /proc/PID/stat (after the "(comm)" that may contain spaces)
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  # shellcheck disable=SC2086
  set -- $stat
  printf '%s\n' "${20}"
}

record_pid() {  # NAME PID
  local st comm
  st="$(proc_starttime "$2")" || fail_start "$1 (pid $2) exited immediately; see $(log_of "$1")"
  comm="$(cat "/proc/$2/comm" 2>/dev/null || echo '?')"
  printf '%s %s %s\n' "$2" "$st" "$comm" > "$PIDS/$1"
}

# recorded_pid NAME: print the pid if the recorded process is still the one we started.
recorded_pid() {
  local f="$PIDS/$1" pid st comm now
  [ -f "$f" ] || return 1
  read -r pid st comm < "$f" || return 1
  is_uint "${pid:-}" || return 1
  now="$(proc_starttime "$pid")" || return 1
  [ "$now" = "$st" ] || return 1
  # Zombies (reaped by nobody until we exit) are not running.
  [ "$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null)" != "Z" ] || return 1
  printf '%s\n' "$pid"
}

log_of() {
  case "$1" in
    munged)    echo "$LOGS/munged.log" ;;
    slurmctld) echo "$LOGS/slurmctld.log (and $LOGS/slurmctld.out)" ;;
    slurmd-*)  echo "$LOGS/${1}.log (and $LOGS/${1}.out)" ;;
  esac
}

tail_logs() {  # print the last lines of every daemon log, for error reports
  local f
  for f in "$LOGS"/*.out "$LOGS"/*.log; do
    [ -s "$f" ] || continue
    printf -- '----- last lines of %s -----\n' "$f" >&2
    tail -n 15 "$f" >&2
  done
}

# stop_pid NAME: SIGTERM the recorded process, SIGKILL after STOP_TIMEOUT; no-op if not running.
stop_pid() {
  local name="$1" pid deadline
  pid="$(recorded_pid "$name")" || { rm -f "$PIDS/$name"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + STOP_TIMEOUT))
  while recorded_pid "$name" >/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  if recorded_pid "$name" >/dev/null; then
    warn "$name (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 5))
    while recorded_pid "$name" >/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  fi
  recorded_pid "$name" >/dev/null && die "$name (pid $pid) survived SIGKILL"
  log "stopped $name (pid $pid)"
  rm -f "$PIDS/$name"
}

# start_daemon NAME LOGFILE CMD...: setsid'd, in the background, stdin closed, pid recorded.
# Scripts run without job control, so the background child is not a process-group leader and
# setsid(1) calls setsid() and execs in place: $! is the daemon's own pid.
start_daemon() {
  local name="$1" out="$2"; shift 2
  setsid "$@" </dev/null >>"$out" 2>&1 &
  record_pid "$name" "$!"
}

# ---------------------------------------------------------------------------------------------
# Packages
# ---------------------------------------------------------------------------------------------
# libpmix2 and libpmix-dev: Slurm's mpi/pmix plugin dlopens `libpmix.so` (srun --mpi=pmix), a
# name only the -dev package provides; with libpmix2 alone the plugin says "can not load PMIx library".
PACKAGES=(slurmctld slurmd slurm-client munge libpmix2 libpmix-dev)

ensure_packages() {
  apt_install "${PACKAGES[@]}" || die "the Slurm packages (${PACKAGES[*]}) are missing and could not be installed"
  local p
  for p in slurmctld slurmd munged munge unmunge sinfo squeue scancel srun sbatch scontrol; do
    command -v "$p" >/dev/null 2>&1 || die "'$p' not on PATH although the packages are installed"
  done
}

short_hostname() {
  local h
  h="$(hostname -s 2>/dev/null || true)"
  [ -n "$h" ] || h="$(uname -n)"
  printf '%s\n' "${h%%.*}"
}

mem_total_mib() { awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo; }

node_list() { if [ "$NODES" -eq 1 ]; then echo n1; else echo "n[1-$NODES]"; fi; }

settings_line() {
  echo "nodes=$NODES proctrack=$PROCTRACK port_base=$PORT_BASE killwait=$KILLWAIT cpus=$CPUS realmem=$REALMEM"
}

check_cgroup_v1() {
  # proctrack/cgroup needs the freezer controller (v1) or a cgroup2 mount at /sys/fs/cgroup.
  if grep -qE ' /sys/fs/cgroup/freezer .* - cgroup cgroup .*freezer' /proc/self/mountinfo; then
    return 0
  fi
  if grep -qE ' /sys/fs/cgroup .* - cgroup2 ' /proc/self/mountinfo; then
    return 0
  fi
  die "proctrack/cgroup needs a cgroup v1 freezer hierarchy at /sys/fs/cgroup/freezer or cgroup v2 at /sys/fs/cgroup; neither is mounted here (use --proctrack linuxproc)"
}

write_config() {
  local host i
  host="$(short_hostname)"
  [ -n "$REALMEM" ] || REALMEM="$(mem_total_mib)"
  mkdir -p "$BASE/etc"
  local conf node_lines=""
  for ((i = 1; i <= NODES; i++)); do
    node_lines+="NodeName=n$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((PORT_BASE + i)) CPUs=$CPUS RealMemory=$REALMEM State=UNKNOWN"$'\n'
  done
  conf="$(<"$SCRIPT_DIR/slurm.conf.in")"
  conf="${conf//@DATE@/$(date -u +%FT%TZ)}"
  conf="${conf//@SETTINGS@/$(settings_line)}"
  conf="${conf//@HOST@/$host}"
  conf="${conf//@PORT_BASE@/$PORT_BASE}"
  conf="${conf//@FIRST_JOB_ID@/$((PORT_BASE * 1000 + 1))}"
  conf="${conf//@MUNGE_SOCKET@/$MUNGE_SOCKET}"
  conf="${conf//@BASE@/$BASE}"
  conf="${conf//@LOGS@/$LOGS}"
  conf="${conf//@PROCTRACK@/$PROCTRACK}"
  conf="${conf//@KILLWAIT@/$KILLWAIT}"
  conf="${conf//@NODE_LINES@$'\n'/$node_lines}"
  conf="${conf//@NODE_LIST@/$(node_list)}"
  [[ "$conf" != *@[A-Z_]*@* ]] || die "slurm.conf.in: a placeholder was left unfilled"
  printf '%s\n' "$conf" > "$CONF"
  rm -f "$CGCONF"
  if [ "$PROCTRACK" = cgroup ]; then
    # Only keys Slurm 22.05 knows: an unknown key (e.g. SignalChildrenProcesses) makes the
    # daemons exit at start.
    cat > "$CGCONF" <<EOF
# Generated by scripts/slurm/cluster.sh (Slurm 22.05 keys only)
CgroupPlugin=autodetect
CgroupAutomount=yes
ConstrainCores=no
ConstrainRAMSpace=no
EOF
  fi
}

port_in_use() {  # something accepts TCP connections on 127.0.0.1:PORT
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# ---------------------------------------------------------------------------------------------
# Daemons
# ---------------------------------------------------------------------------------------------
daemon_names() {  # every daemon this base directory may have, in start order
  echo munged slurmctld
  local f
  for f in "$PIDS"/slurmd-*; do [ -e "$f" ] && basename "$f"; done
  if [ -f "$SETTINGS" ]; then
    local n i
    n="$(sed -n 's/.*nodes=\([0-9]*\).*/\1/p' "$SETTINGS")"
    for ((i = 1; i <= ${n:-0}; i++)); do echo "slurmd-n$i"; done
  fi
}

running_count() {  # prints "<running> <expected>"
  local run=0 exp=0 name
  for name in $(daemon_names | awk '!seen[$0]++'); do
    exp=$((exp + 1))
    if recorded_pid "$name" >/dev/null; then run=$((run + 1)); fi
  done
  echo "$run $exp"
}

start_munged() {
  mkdir -p "$MUNGE_DIR" "$MUNGE_RUN"
  chmod 0700 "$MUNGE_DIR"
  chmod 0755 "$MUNGE_RUN"
  if [ ! -s "$MUNGE_DIR/munge.key" ]; then
    ( umask 0277 && dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1024 count=1 status=none )
  fi
  chmod 0400 "$MUNGE_DIR/munge.key"
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
  start_daemon munged "$LOGS/munged.out" \
    munged --foreground --socket="$MUNGE_SOCKET" --key-file="$MUNGE_DIR/munge.key" \
    --pid-file="$MUNGE_RUN/munged.pid" --seed-file="$MUNGE_DIR/munged.seed" \
    --log-file="$LOGS/munged.log" --num-threads=2
  wait_for "munged to answer on $MUNGE_SOCKET" munged \
    sh -c 'munge -n -S "$1" | unmunge -S "$1" >/dev/null 2>&1' sh "$MUNGE_SOCKET"
}

# wait_for WHAT DAEMON CMD...: poll CMD until it succeeds; fail early if DAEMON died.
wait_for() {
  local what="$1" daemon="$2"; shift 2
  local deadline=$((SECONDS + START_TIMEOUT))
  while ! "$@" >/dev/null 2>&1; do
    if [ -n "$daemon" ] && ! recorded_pid "$daemon" >/dev/null; then
      fail_start "$daemon exited while waiting for $what; see $(log_of "$daemon")"
    fi
    [ "$SECONDS" -lt "$deadline" ] || fail_start "timed out after ${START_TIMEOUT}s waiting for $what"
    sleep 0.1
  done
}

fail_start() {
  printf '[%s] ERROR: %s\n' "$PROG" "$1" >&2
  tail_logs
  log "stopping what was started"
  stop_daemons_quietly || true
  exit 1
}

all_nodes_idle() {
  local out
  out="$(sinfo -h -N -p debug -o '%N %T' 2>/dev/null)" || return 1
  [ "$(awk '$2 == "idle" {n++} END {print n + 0}' <<<"$out")" -eq "$NODES" ]
}

check_all_alive() {  # for the idle wait: every daemon must still run
  local name
  for name in munged slurmctld $(for ((i = 1; i <= NODES; i++)); do echo "slurmd-n$i"; done); do
    recorded_pid "$name" >/dev/null || return 1
  done
}

cmd_start() {
  local t0=$SECONDS
  if [ -f "$MARKER" ]; then
    read -r run exp <<<"$(running_count)"
    if [ "$run" -gt 0 ] && [ "$run" -eq "$exp" ]; then
      if [ "$(cat "$SETTINGS" 2>/dev/null)" = "$(settings_line_resolved)" ]; then
        log "already running in $BASE ($(cat "$SETTINGS")); nothing to do"
        print_env
        return 0
      fi
      die "a cluster already runs in $BASE with different settings ($(cat "$SETTINGS")); run '$PROG stop --base $BASE' first"
    fi
    if [ "$run" -gt 0 ]; then
      warn "only $run of $exp daemons of $BASE are running: stopping them and starting afresh"
      stop_daemons_quietly
    fi
  elif [ -e "$BASE" ] && [ -n "$(ls -A "$BASE" 2>/dev/null)" ]; then
    die "$BASE exists, is not empty and was not made by $PROG; choose another --base"
  fi

  [ "$PROCTRACK" != cgroup ] || check_cgroup_v1
  ensure_packages
  # From here on daemons may exist: an interrupted start stops them again.
  trap 'fail_start "interrupted"' INT TERM

  local p i
  for p in $(seq "$PORT_BASE" $((PORT_BASE + NODES))); do
    if port_in_use "$p"; then
      die "port $p (of --port-base $PORT_BASE .. +$NODES) is already in use; choose another --port-base"
    fi
  done
  local last=$((PORT_BASE + NODES))
  if { [ "$PORT_BASE" -le 14300 ] && [ "$last" -ge 12300 ]; } \
     || { [ "$PORT_BASE" -le 17000 ] && [ "$last" -ge 15000 ]; }; then
    warn "ports $PORT_BASE..$((PORT_BASE + NODES)) overlap Mooncake's random port ranges (12300-14300, 15000-17000)"
  fi

  # A fresh cluster every start: old state (jobs, node states) would only get in the way.
  mkdir -p "$BASE"
  chmod 0755 "$BASE"   # munged needs o+x down to its socket
  touch "$MARKER"
  rm -rf "$BASE/state" "$BASE/spool" "$BASE/run" "$BASE"/tmp-n* "$LOGS" "$PIDS"
  mkdir -p "$BASE/state" "$BASE/run" "$LOGS" "$PIDS"
  for ((i = 1; i <= NODES; i++)); do mkdir -p "$BASE/spool/slurmd-n$i" "$BASE/tmp-n$i"; done
  write_config
  settings_line > "$SETTINGS"

  start_munged
  start_daemon slurmctld "$LOGS/slurmctld.out" slurmctld -D -f "$CONF"
  wait_for "slurmctld to answer (scontrol ping)" slurmctld \
    sh -c 'scontrol ping | grep -q "is UP"'
  for ((i = 1; i <= NODES; i++)); do
    start_daemon "slurmd-n$i" "$LOGS/slurmd-n$i.out" slurmd -D -f "$CONF" -N "n$i"
  done
  local deadline=$((SECONDS + START_TIMEOUT))
  until all_nodes_idle; do
    check_all_alive || fail_start "a daemon exited while waiting for the nodes to become idle"
    [ "$SECONDS" -lt "$deadline" ] || {
      sinfo -N -p debug -o '%N %T %E' >&2 || true
      fail_start "timed out after ${START_TIMEOUT}s waiting for $NODES idle nodes"
    }
    sleep 0.1
  done
  log "up in $((SECONDS - t0))s: $NODES nodes $(node_list), proctrack/$PROCTRACK, slurmctld on 127.0.0.1:$PORT_BASE, base $BASE"
  print_env
}

# The settings line with REALMEM resolved the way write_config resolves it.
settings_line_resolved() {
  [ -n "$REALMEM" ] || REALMEM="$(mem_total_mib)"
  settings_line
}

print_env() {
  log "for clients: eval \"\$($SCRIPT_PATH env --base $BASE)\""
}

# Slurmstepd processes of this cluster that outlived their slurmd (they are double-forked, so
# stopping slurmd does not stop them): found by their open files under this base directory.
stray_stepds() {
  local d pid fd
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    [ "$(cat "$d/comm" 2>/dev/null)" = slurmstepd ] || continue
    for fd in "$d"/fd/*; do
      case "$(readlink "$fd" 2>/dev/null)" in "$BASE"/*) echo "$pid"; break ;; esac
    done
  done
}

cancel_all_jobs() {
  recorded_pid slurmctld >/dev/null || return 0
  local ids
  ids="$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')" || return 0
  [ -n "${ids// /}" ] || return 0
  log "cancelling jobs: $ids"
  # shellcheck disable=SC2086
  scancel $ids 2>/dev/null || true
  # The tasks get SIGTERM now and SIGKILL after KillWait; give them that, plus some slack.
  local kw deadline
  kw="$(sed -n 's/.*killwait=\([0-9]*\).*/\1/p' "$SETTINGS" 2>/dev/null)"
  deadline=$((SECONDS + ${kw:-30} + 15))
  while [ -n "$(squeue -h -o %A 2>/dev/null)" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
  if [ -n "$(squeue -h -o %A 2>/dev/null)" ]; then
    warn "jobs still listed after cancel: $(squeue -h -o '%A:%T' | tr '\n' ' ')"
  fi
}

stop_daemons_quietly() {
  local f name pid
  for f in "$PIDS"/slurmd-*; do [ -e "$f" ] && stop_pid "$(basename "$f")"; done
  for pid in $(stray_stepds); do
    warn "killing leftover slurmstepd (pid $pid) of this cluster"
    kill -KILL "$pid" 2>/dev/null || true
  done
  for name in slurmctld munged; do stop_pid "$name"; done
  rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
}

cmd_stop() {
  if [ ! -d "$PIDS" ]; then
    log "nothing to stop in $BASE (no cluster was started there)"
    return 0
  fi
  read -r run _ <<<"$(running_count)"
  if [ "$run" -eq 0 ] && [ -z "$(stray_stepds)" ]; then
    log "not running ($BASE)"
    rm -f "$PIDS"/* 2>/dev/null || true
    return 0
  fi
  cancel_all_jobs
  stop_daemons_quietly
  log "stopped ($BASE); logs kept in $LOGS"
}

cmd_status() {
  if [ ! -d "$PIDS" ]; then
    echo "not running: no cluster was started in $BASE"
    return 3
  fi
  local name pid run=0 exp=0
  echo "base: $BASE  settings: $(cat "$SETTINGS" 2>/dev/null || echo '?')"
  for name in $(daemon_names | awk '!seen[$0]++'); do
    exp=$((exp + 1))
    if pid="$(recorded_pid "$name")"; then
      run=$((run + 1)); printf '  %-12s running (pid %s)\n' "$name" "$pid"
    else
      printf '  %-12s stopped\n' "$name"
    fi
  done
  if recorded_pid slurmctld >/dev/null; then
    echo "--- sinfo"; sinfo -N -o '%N %T %c %m %E' 2>&1 || true
    echo "--- squeue"; squeue 2>&1 || true
  fi
  if [ "$run" -eq 0 ]; then return 3; fi
  if [ "$run" -lt "$exp" ]; then return 1; fi
  return 0
}

print_exports() {
  printf "export SLURM_CONF='%s'\n" "$CONF"
  printf "export MCSUP_SLURM_BASE='%s'\n" "$BASE"
  if ! recorded_pid slurmctld >/dev/null 2>&1; then
    warn "the cluster in $BASE is not running ('$PROG start')"
  fi
}

case "$CMD" in
  start)  cmd_start ;;
  stop)   cmd_stop ;;
  status) cmd_status ;;
  env)    print_exports ;;
esac
