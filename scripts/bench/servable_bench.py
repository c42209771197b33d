#!/usr/bin/env python3
"""Time to servable: how soon after the endpoint really serves does mcsup say `servable`?

Run through scripts/bench-servable.sh (it runs the set-up and builds the release binary first).
Each repetition runs, on this machine, the stack of scripts/run-mocker.sh under `mcsup run`:
etcd, NATS, Dynamo's frontend and one aggregated Dynamo mocker worker whose engine simulates
BENCH_STARTUP seconds of model loading (`backend.startup_time`). Measured, each on the clock of
mcsup's first spawn (the `t_ms` of its events file, converted to wall time):
  engine ready   the mocker's own log line "Engine startup simulation completed" (its engine is
                 up: what a real worker's readiness means)
  floor          the first 1-token completion through the frontend that succeeds, sent by this
                 harness in a loop from the moment mcsup starts (one request at a time; a request
                 sent before the engine is up waits for it, so this is when the endpoint serves)
  mcsup          the `servable` event
and reported as the lag mcsup adds after each (ms) and as ratios of the times since first spawn
(mcsup / floor, mcsup / engine ready; 1.00 = no lag). Medians over BENCH_REPS repetitions.
After each repetition mcsup is stopped with SIGINT (as Ctrl-C) and must exit 0 leaving no process
of the stack behind. Uses the run-mocker ports (2379/2380, 4222, 7500, 8000): they must be free.
JSON in $BENCH_JSON (default target/bench-servable.json).
"""
import datetime
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from procs import tagged_pids

MCSUP = os.environ["MCSUP_BIN"]
DYNAMO_VENV = os.environ["DYNAMO_VENV"]
REPS = int(os.environ.get("BENCH_REPS", "5"))
STARTUP = float(os.environ.get("BENCH_STARTUP", "4"))
PORTS = (2379, 2380, 4222, 7500, 8000)
ENDPOINT = "http://127.0.0.1:8000"
MODEL = os.path.join(DYNAMO_VENV, "tiny-model")
JSON_OUT = os.environ.get("BENCH_JSON", os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "target", "bench-servable.json"))
TAG = "MCSUP_BENCH_TAG"
ENGINE_UP = "Engine startup simulation completed"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def port_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def recipe(work):
    configs = os.path.join(work, "configs")
    os.makedirs(configs)
    for tool in ("etcd", "nats-server"):
        path = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True,
                              text=True, check=True).stdout.strip()
        os.symlink(path, os.path.join(configs, tool))
    text = f"""name: bench-servable
model: {{path: "hf:{MODEL}"}}
resources: {{gpus_per_node: 1, agg_nodes: 1, agg_workers: 1}}
frontend: {{type: dynamo, enable_multiple_frontends: false}}
backend: {{type: mocker, speedup_ratio: 100, startup_time: {STARTUP}}}
dynamo: {{request_plane: nats}}
environment: {{ETCD_ENDPOINTS: "http://127.0.0.1:2379", NATS_SERVER: "nats://127.0.0.1:4222"}}
mcsup:
  configs_dir: {configs}
  log_dir: {work}/logs
  node_addresses: {{localhost: 127.0.0.1}}
"""
    path = os.path.join(work, "r.yaml")
    with open(path, "w") as f:
        f.write(text)
    return path


def completion_floor(stop, out):
    """Send 1-token completions one at a time until one succeeds; record its wall time."""
    body = json.dumps({"model": MODEL, "prompt": "hello", "max_tokens": 1}).encode()
    while not stop.is_set():
        req = urllib.request.Request(ENDPOINT + "/v1/completions", data=body,
                                     headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                if r.status == 200 and json.load(r).get("choices"):
                    out["floor"] = time.time()
                    return
        except (urllib.error.URLError, ConnectionError, OSError, ValueError):
            pass
        time.sleep(0.05)


def events(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def engine_ready_wall(log_path):
    """Wall time of the mocker's own 'engine up' line (its tracing timestamp, UTC)."""
    with open(log_path, errors="replace") as f:
        for line in f:
            line = ANSI.sub("", line)
            if ENGINE_UP in line:
                stamp = line.split()[0].rstrip("Z")
                return datetime.datetime.fromisoformat(stamp).replace(
                    tzinfo=datetime.timezone.utc).timestamp()
    return None


def one_run(i):
    busy = [p for p in PORTS if not port_free(p)]
    if busy:
        sys.exit(f"ports in use: {busy} (another run-mocker or mcsup?); free them and rerun")
    work = tempfile.mkdtemp(prefix="mcsup-bench-servable.")
    path = recipe(work)
    tag = f"servable-{os.getpid()}-{i}"
    env = dict(os.environ, PATH=f"{DYNAMO_VENV}/bin:{os.environ['PATH']}", **{TAG: tag})
    stop = threading.Event()
    floor = {}
    poller = threading.Thread(target=completion_floor, args=(stop, floor), daemon=True)
    mcsup = subprocess.Popen([MCSUP, "run", "--role", "agg", "--recipe", path, "--node",
                              "localhost", "--nodelist", "localhost"], env=env,
                             stdout=subprocess.DEVNULL, stderr=open(f"{work}/mcsup.err", "w"))
    poller.start()
    ev_path = f"{work}/logs/localhost.events.jsonl"
    servable = None
    deadline = time.time() + 120
    while servable is None and time.time() < deadline and mcsup.poll() is None:
        time.sleep(0.1)
        if os.path.exists(ev_path):
            servable = next((e for e in events(ev_path) if e["event"] == "servable"), None)
    poller.join(timeout=30)
    stop.set()
    mcsup.send_signal(signal.SIGINT)
    code = mcsup.wait(timeout=60)
    left = tagged_pids(TAG, tag)
    if servable is None or "floor" not in floor or code != 0 or left:
        sys.exit(f"run {i}: servable={servable is not None} floor={'floor' in floor} "
                 f"exit={code} left={left}; see {work}")
    evs = events(ev_path)
    first = min((e for e in evs if e["event"] == "spawned"), key=lambda e: e["t_ms"])
    t0 = first["ts_ms"] / 1000  # wall time of the first spawn
    origin = (first["ts_ms"] - first["t_ms"]) / 1000  # wall time of mcsup's t_ms = 0
    engine = engine_ready_wall(f"{work}/logs/localhost.mocker-agg-0.log")
    if engine is None:
        sys.exit(f"run {i}: no '{ENGINE_UP}' line in the mocker's log; see {work}")
    worker_ready = next(e for e in evs if e["event"] == "ready" and e["process"] == "mocker-agg-0")
    row = {
        "engine_ready_s": engine - t0,
        "worker_probe_ready_s": origin + worker_ready["t_ms"] / 1000 - t0,
        "floor_s": floor["floor"] - t0,
        "servable_s": origin + servable["t_ms"] / 1000 - t0,
    }
    subprocess.run(["rm", "-rf", work], check=False)
    return row


def main():
    print(f"time to servable: {os.cpu_count()} cores, reps={REPS}, mocker startup_time={STARTUP} s")
    rows = [one_run(i) for i in range(REPS)]
    for i, r in enumerate(rows):
        print(f"   run {i}: " + ", ".join(f"{k[:-2]} {v:.3f} s" for k, v in r.items()))
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    lag_floor = statistics.median(r["servable_s"] - r["floor_s"] for r in rows)
    lag_engine = statistics.median(r["servable_s"] - r["engine_ready_s"] for r in rows)
    print("\nseconds since mcsup's first spawn (median)")
    print(f"   engine ready (mocker's own log)       {med['engine_ready_s']:.3f}")
    print(f"   worker's health probe ready (mcsup)   {med['worker_probe_ready_s']:.3f}")
    print(f"   floor (first completion that served)  {med['floor_s']:.3f}")
    print(f"   mcsup `servable`                      {med['servable_s']:.3f}")
    print(f"   lag after the floor {lag_floor * 1000:.0f} ms, after the engine "
          f"{lag_engine * 1000:.0f} ms (target <= 1000 ms)")
    print(f"   mcsup / floor = {med['servable_s'] / med['floor_s']:.3f}, mcsup / engine ready = "
          f"{med['servable_s'] / med['engine_ready_s']:.3f}")
    os.makedirs(os.path.dirname(JSON_OUT), exist_ok=True)
    with open(JSON_OUT, "w") as f:
        json.dump({"reps": REPS, "startup_time_s": STARTUP, "runs": rows, "median": med,
                   "lag_after_floor_s": lag_floor, "lag_after_engine_s": lag_engine}, f, indent=1)


if __name__ == "__main__":
    main()
