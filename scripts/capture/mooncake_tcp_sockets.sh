#!/usr/bin/env bash
# How many TCP connections a Mooncake store client opens per transfer: the measurement behind
# the preflight's `mooncake tcp connections` check (docs/preflight.md).
#
# Starts a master and a store service (TCP, loopback) from VENV, then a zero-segment client that
# puts and gets N values of 64 KiB through the store, and prints how many sockets entered
# TIME-WAIT meanwhile (a socket per transfer leaves one each). Not run by the test suite.
#
#   scripts/capture/mooncake_tcp_sockets.sh VENV POOL [N]
#
# VENV  a virtualenv with mooncake-transfer-engine-non-cuda (the project's .venv: 0.3.13.post1)
# POOL  the value of MC_TCP_ENABLE_CONNECTION_POOL, or "unset"
# N     values (default 2000)
#
# An older wheel for comparison (0.3.12.post1's store module loads libcudart.so.12 even in the
# non-CUDA wheel; the runtime library alone is enough, no GPU is used):
#   python3.11 -m venv /tmp/mc312
#   /tmp/mc312/bin/pip install mooncake-transfer-engine-non-cuda==0.3.12.post1 nvidia-cuda-runtime-cu12
#   LD_LIBRARY_PATH=/tmp/mc312/lib/python3.11/site-packages/nvidia/cuda_runtime/lib \
#     scripts/capture/mooncake_tcp_sockets.sh /tmp/mc312 unset
# Ports 28700-28702 and 28800 must be free.
set -euo pipefail
venv=${1:?VENV}
pool=${2:?POOL}
n=${3:-2000}
work=$(mktemp -d)
pids=()
cleanup() {
  # Each service leads its own session (an older wheel's console script forks the binary).
  for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
setsid "$venv/bin/mooncake_master" --rpc_port 28700 --enable_http_metadata_server=true \
  --http_metadata_server_port 28701 --metrics_port 28702 >"$work/master.log" 2>&1 &
pids+=($!)
export MOONCAKE_MASTER=127.0.0.1:28700 MOONCAKE_TE_META_DATA_SERVER=http://127.0.0.1:28701/metadata
export MOONCAKE_PROTOCOL=tcp MOONCAKE_LOCAL_HOSTNAME=127.0.0.1 MC_TCP_BIND_ADDRESS=127.0.0.1
if [ "$pool" != unset ]; then export MC_TCP_ENABLE_CONNECTION_POOL=$pool; fi
sleep 1.5
MOONCAKE_GLOBAL_SEGMENT_SIZE=256mb MOONCAKE_LOCAL_BUFFER_SIZE=64mb \
  setsid "$venv/bin/python" -m mooncake.mooncake_store_service --port 28800 >"$work/store.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  if (exec 3<>/dev/tcp/127.0.0.1/28800) 2>/dev/null; then break; fi
  sleep 0.2
done
"$venv/bin/python" - "$n" "$pool" <<'PY'
import subprocess, sys, time
from importlib.metadata import version
from mooncake.store import MooncakeDistributedStore

def time_wait():
    out = subprocess.run(["ss", "-tan", "state", "time-wait"], capture_output=True, text=True).stdout
    return len(out.splitlines()) - 1

s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", "http://127.0.0.1:28701/metadata", 0, 64 << 20, "tcp", "",
               "127.0.0.1:28700") == 0
n, value = int(sys.argv[1]), b"x" * (64 << 10)
before, t = time_wait(), time.time()
for i in range(n):
    assert s.put(f"k{i}", value) == 0, i
    assert len(s.get(f"k{i}")) == len(value), i
print(f"mooncake {version('mooncake-transfer-engine-non-cuda')}, MC_TCP_ENABLE_CONNECTION_POOL "
      f"{sys.argv[2]}: {n} puts and gets of 64 KiB in {time.time() - t:.1f} s, "
      f"{time_wait() - before} sockets entered TIME-WAIT")
PY
