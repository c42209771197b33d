#!/usr/bin/env bash
# End-to-end smoke test of the real Mooncake stack on loopback, with no mcsup involved:
# master -> one store service (256 MiB segment) -> worker A -> worker B (reads A's keys).
# Checks that workers contribute no DRAM (master_total_capacity_bytes == store segment exactly),
# that puts/gets verify, and that every process exits 0 on its stop signal.
# This is the manual reference for what mcsup's local recipe automates.
#
# Usage: workers/loopback_smoke.sh   (after scripts/setup.sh)
# Env:   MCSUP_VENV (default <repo>/.venv), SMOKE_PORT_BASE (default 18700; uses base..base+2
#        and base+100), SMOKE_LOG_DIR (default: a new mktemp -d directory)
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${MCSUP_VENV:-$REPO_ROOT/.venv}"
PY="$VENV/bin/python"
BASE="${SMOKE_PORT_BASE:-18700}"
RPC=$BASE META=$((BASE + 1)) METRICS=$((BASE + 2)) REST=$((BASE + 100))
LOG_DIR="${SMOKE_LOG_DIR:-$(mktemp -d /tmp/mcsup-smoke.XXXXXX)}"
mkdir -p "$LOG_DIR"
SEGMENT=268435456 # 256mb

PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -KILL "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT

say() { printf '[smoke] %s\n' "$*"; }
fail() { printf '[smoke] FAIL: %s (logs in %s)\n' "$*" "$LOG_DIR" >&2; exit 1; }

# wait_port PORT PID SECONDS: until 127.0.0.1:PORT accepts; fail early if PID died.
wait_port() {
  local port=$1 pid=$2 deadline=$((SECONDS + $3))
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || fail "pid $pid exited before port $port opened"
    [ "$SECONDS" -lt "$deadline" ] || fail "port $port not open after $3s"
    sleep 0.05
  done
}

# wait_line FILE PATTERN PID SECONDS
wait_line() {
  local deadline=$((SECONDS + $4))
  until grep -q -- "$2" "$1" 2>/dev/null; do
    kill -0 "$3" 2>/dev/null || fail "pid $3 exited before printing '$2'"
    [ "$SECONDS" -lt "$deadline" ] || fail "'$2' not seen in $1 after $4s"
    sleep 0.05
  done
}

# stop PID SIGNAL NAME: signal, wait, require exit status 0.
stop() {
  local rc=0
  kill "-$2" "$1"
  wait "$1" || rc=$?
  [ "$rc" -eq 0 ] || fail "$3 exited $rc after SIG$2"
  say "$3 stopped by SIG$2, exit 0"
}

metric() {
  "$PY" - "$METRICS" "$1" <<'EOF'
import sys, urllib.request
port, name = sys.argv[1], sys.argv[2]
for line in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode().splitlines():
    parts = line.split()
    if len(parts) == 2 and parts[0] == name:
        print(parts[1]); break
EOF
}

export MOONCAKE_MASTER="127.0.0.1:$RPC"
export MOONCAKE_TE_META_DATA_SERVER="http://127.0.0.1:$META/metadata"
export MOONCAKE_LOCAL_HOSTNAME=127.0.0.1 MOONCAKE_PROTOCOL=tcp
# Without this the transfer engine advertises the first non-loopback interface address.
export MC_TCP_BIND_ADDRESS=127.0.0.1

say "logs: $LOG_DIR"
"$VENV/bin/mooncake_master" --rpc_port="$RPC" --rpc_address=127.0.0.1 \
  --enable_http_metadata_server=true --http_metadata_server_port="$META" \
  --http_metadata_server_host=127.0.0.1 --metrics_port="$METRICS" --metrics_host=127.0.0.1 \
  >"$LOG_DIR/master.log" 2>&1 &
MASTER=$!; PIDS+=("$MASTER")
for p in "$META" "$RPC" "$METRICS"; do wait_port "$p" "$MASTER" 30; done
say "master pid $MASTER ready (rpc $RPC, metadata $META, metrics $METRICS)"

MOONCAKE_GLOBAL_SEGMENT_SIZE=256mb MOONCAKE_LOCAL_BUFFER_SIZE=64mb MC_STORE_CLIENT_SETUP_RETRIES=3 \
  "$PY" -m mooncake.mooncake_store_service --port "$REST" --max-wait-time 20 \
  >"$LOG_DIR/store.log" 2>&1 &
STORE=$!; PIDS+=("$STORE")
wait_port "$REST" "$STORE" 60
cap="$(metric master_total_capacity_bytes)"
[ "$cap" = "$SEGMENT" ] || fail "capacity $cap != $SEGMENT after store start"
say "store pid $STORE ready (REST $REST), master_total_capacity_bytes=$cap"

export MOONCAKE_GLOBAL_SEGMENT_SIZE=0 MOONCAKE_LOCAL_BUFFER_SIZE=16mb
"$PY" "$REPO_ROOT/workers/synthetic_worker.py" --name A --interval 0.05 --report-every 2 \
  --ready-file "$LOG_DIR/A.ready" >"$LOG_DIR/A.log" 2>"$LOG_DIR/A.err" &
WA=$!; PIDS+=("$WA")
wait_line "$LOG_DIR/A.log" "synthetic-worker A: READY" "$WA" 60
[ -e "$LOG_DIR/A.ready" ] || fail "ready file not created"
say "worker A pid $WA READY"

rc=0
"$PY" "$REPO_ROOT/workers/synthetic_worker.py" --name B --read-prefix A/ --interval 0.05 \
  --exit-after-ops 600 >"$LOG_DIR/B.log" 2>"$LOG_DIR/B.err" || rc=$?
[ "$rc" -eq 0 ] || fail "worker B exited $rc"
grep -q 'SUMMARY.* errors=0$' "$LOG_DIR/B.log" || fail "worker B summary shows errors"
grep -q 'peer_get_ops=[1-9]' "$LOG_DIR/B.log" || fail "worker B read none of A's blocks"
say "worker B: $(grep SUMMARY "$LOG_DIR/B.log" | sed 's/^synthetic-worker B: //')"

cap="$(metric master_total_capacity_bytes)"
[ "$cap" = "$SEGMENT" ] || fail "capacity $cap != $SEGMENT with workers running (a worker contributed DRAM)"
say "master_total_capacity_bytes=$cap with workers running: workers contributed no DRAM"

stop "$WA" TERM "worker A"
grep -q 'SUMMARY.* errors=0$' "$LOG_DIR/A.log" || fail "worker A summary shows errors"
stop "$STORE" INT "store"
stop "$MASTER" TERM "master"
PIDS=()
say "PASS"
