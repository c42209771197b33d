#!/usr/bin/env python3
"""Benchmark a whole job: N nodes' mcsups on this machine, joined by the job's control connection.

Run through scripts/bench-job.sh (it builds the release binaries first). For each N in
BENCH_NODES (default "8 32 128"), BENCH_REPS runs (default 3; medians are reported) of:
  - N `mcsup run --plan-file` processes, one per node n1..nN, each with its own plan, log
    directory and TMPDIR, all with the plan's `control` section (coordinator n1 on 127.0.0.1, a
    free port, the secret in n1's log directory). They are released together (each waits in a
    shell on one pipe the harness closes), as srun starts a job's steps on every node at once.
  - n1 runs one process of each teardown tier from the infrastructure up: infra (a service of
    the infra phase), master, store, worker, frontend; every other node a gate on n1's master
    (the file the master touches), a store and a worker. Every process is mcsup-testchild, ready
    by a log line, listening on nothing (no ports to collide). Probes use the schedule
    `mcsup plan` gives by default.
  - start: first spawn on any node -> every process of every node ready, against the slowest
    node's own first spawn -> last ready
  - once every node is up and joined the control connection: a quiet window (BENCH_IDLE
    seconds, default 10) over which each mcsup's CPU is read; the coordinator's CPU and peak RSS
    (VmHWM) just before the drain
  - the drain: SIGTERM to every mcsup at once (what Slurm does) -> every mcsup exited, against
    the slowest node's own stop request -> `finished`, and its own stopping work (each of its
    tiers' first `stopping` to last `stopped`, summed: without its waits for the job's word)
  - the teardown order across nodes, from every node's events: each tier's last `stopped` on any
    node no later than any later tier's first `stopping` on any node (as tests/slurm_e2e.rs
    judges it)
  - nothing left: no process with the run's tag in its environment or its directory in its
    command line
Then BENCH_COORD_REPS runs per N (default 1; 0 skips them) drained by a SIGTERM to the
coordinator's mcsup alone: the coordinator tells every node to stop (`job-stop`), and their order
is judged like the others'.

CPU is the time on a CPU of mcsup's live threads (/proc/PID/task/*/schedstat); utime+stime (in
whole clock ticks, each rounded down, far too coarse here) is in the JSON too. mcsup counts no
control messages; the loopback device's packets and bytes (system-wide) stand for the control
connection's traffic, with the whole machine's CPU use over the quiet window to show what else
ran meanwhile.

Cross-node instants are on the wall clock (one machine, one clock), with the precision of the
events' `t_ms` (microseconds): each node's start on the wall clock is taken from its stderr, which
stamps the same events in microseconds (the events' own `ts_ms` is whole milliseconds, too coarse
for a message's round trip between two nodes; see Node.timed_events). A node's own durations are
its events' `t_ms` (its monotonic clock).

The figures and ratios are printed and written as JSON to $BENCH_JSON (default:
target/bench-job.json). The exit status is 1 when the order broke, a node did not exit 0, a
process was left, or a run did not come up. BENCH_KEEP=1 keeps each run's directory (plans,
logs, events, stderr) next to it as `<dir>.kept`.
"""
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
from collections import Counter
from datetime import datetime, timezone

from plan_json import default_schedule

MCSUP = os.environ["MCSUP_BIN"]
CHILD = os.environ["TESTCHILD_BIN"]
NODES = [int(n) for n in os.environ.get("BENCH_NODES", "8 32 128").split()]
REPS = int(os.environ.get("BENCH_REPS", "3"))
COORD_REPS = int(os.environ.get("BENCH_COORD_REPS", "1"))
IDLE = float(os.environ.get("BENCH_IDLE", "10"))
UP_TIMEOUT = float(os.environ.get("BENCH_UP_TIMEOUT", "180"))
EXIT_TIMEOUT = float(os.environ.get("BENCH_EXIT_TIMEOUT", "90"))
REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
JSON_OUT = os.environ.get("BENCH_JSON", os.path.join(REPO, "target", "bench-job.json"))
TAG = "MCSUP_BENCH_TAG"
TICK = os.sysconf("SC_CLK_TCK")

# The names of the teardown tiers, by `ProcessSpec::teardown_tier` (src/plan/spec.rs,
# TEARDOWN_TIERS).
TIER_NAMES = ["after-frontend", "frontends", "workers", "stores", "masters", "infra"]


def teardown_tier(kind, phase):
    """`ProcessSpec::teardown_tier` of a process this bench plans (src/plan/spec.rs)."""
    if phase == "after_frontend":
        return 0
    if phase == "frontend":
        return 1
    if phase in ("workers", "with_workers"):
        return 2
    if phase == "infra":
        return 5
    return 4 if kind == "master" else 3


# ---------------------------------------------------------------------------------------------
# Plans


def readiness(probe, schedule):
    return {"probes": [probe], **schedule, "timeout_ms": 60000}


def proc_spec(run, name, kind, phase, deps, schedule, extra=()):
    """mcsup-testchild, ready once it prints `up`, in the plan format of `mcsup plan --json`
    (docs/plan.md)."""
    return {
        "name": name, "kind": kind, "phase": phase, "roles": [],
        "argv": [CHILD, "--ready-line", "up", *extra], "preamble": None,
        "env": [{"name": TAG, "value": run, "source": "bench"}], "cwd": None,
        "depends_on": [{"target": d, "condition": "healthy"} for d in deps],
        "readiness": readiness({"type": "log_line", "pattern": "^up$"}, schedule),
        "liveness": None,
        "restart": {"policy": "never", "success_codes": [0], "backoff_initial_ms": 100,
                    "backoff_factor": 2.0, "backoff_max_ms": 1000, "reset_after_ms": 60000,
                    "max_restarts": 3, "window_ms": 60000},
        "stop": {"signal": "SIGTERM", "grace_ms": 5000},
        "critical": True,
    }


def node_plan(run, i, n, root, port, schedule):
    """Node n<i>'s plan (1-based; n1 coordinates and runs the job's infrastructure)."""
    name = f"n{i}"
    master_file = os.path.join(root, "n1", "master.up")
    gates = []
    if i == 1:
        procs = [proc_spec(run, "infra", "service", "infra", [], schedule),
                 proc_spec(run, "master", "master", "before_workers", ["infra"], schedule,
                           ["--touch", master_file]),
                 proc_spec(run, "store", "store", "before_workers", ["master"], schedule),
                 proc_spec(run, "worker", "worker", "workers", ["store"], schedule),
                 proc_spec(run, "frontend", "frontend", "frontend", ["worker"], schedule)]
    else:
        # As a planned node waits for the master on the infra node (`master@<infra>`).
        gates = [{"name": "master@n1",
                  "readiness": readiness({"type": "file", "path": master_file}, schedule)}]
        procs = [proc_spec(run, "store", "store", "before_workers", ["master@n1"], schedule),
                 proc_spec(run, "worker", "worker", "workers", ["store"], schedule)]
    return {
        "node": {"name": name, "ip": "127.0.0.1", "node_id": i - 1, "infra_node": "n1",
                 "infra_ip": "127.0.0.1", "runs_master": i == 1, "job_id": None,
                 "mode": "local"},
        "roles": [], "gates": gates, "processes": procs, "files": [],
        "shutdown": {"deadline_ms": 25000, "drain_signal": "SIGUSR1", "drain_ms": 0,
                     "exit_when_workers_done": True},
        "log_dir": os.path.join(root, name, "logs"), "ignored_sections": [], "warnings": [],
        "control": {"coordinator": "n1", "address": "127.0.0.1", "port": port,
                    "secret": os.path.join(root, "n1", "logs", "control.secret"),
                    "nodes": [f"n{k}" for k in range(1, n + 1)]},
    }


_NEXT_PORT = [20000 + os.getpid() % 6000]


def free_port():
    """A port free now, below the kernel's ephemeral range (32768-60999 by default), so that no
    outgoing connection takes it as its source port before the coordinator binds it."""
    while True:
        port = _NEXT_PORT[0]
        _NEXT_PORT[0] = 20000 + (port - 20000 + 1) % 12000
        with socket.socket() as sk:
            try:
                sk.bind(("0.0.0.0", port))
                return port
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------
# /proc


def cpu_ms(pid):
    """utime + stime of `pid` (all its threads), in ms (clock ticks: 10 ms steps at 100 Hz)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICK


def run_ns(pid):
    """Time on a CPU of `pid`'s live threads (schedstat), in ns. utime+stime are whole clock
    ticks, each rounded down: a node's mcsup that ran 12.3 ms by this count read 0 ticks. mcsup's
    threads live as long as it does (the loop, the stderr and the file writers), so the live
    threads are all of it but for a short-lived helper thread."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def status_kb(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def loopback():
    """(bytes, packets) the loopback device carried since boot: the control connection's traffic
    here, with whatever else on this machine talks over 127.0.0.1 meanwhile."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                v = rest.split()
                return int(v[0]), int(v[1])
    return 0, 0


def machine_busy():
    """(busy, total) jiffies of every CPU since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def cpu_sample(pids):
    """Per node: (utime+stime in ms, on-CPU time of the live threads in ms)."""
    out = {}
    for name, pid in pids.items():
        try:
            out[name] = (cpu_ms(pid), run_ns(pid) / 1e6)
        except OSError:
            out[name] = None
    return out


def run_processes(run, root):
    """Live processes of the run: its tag in their environment, or its directory in their
    command line (mcsup's plan path; anything started with a path below it)."""
    found = {}
    needle = f"{TAG}={run}".encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except OSError:
                env = []
        except OSError:
            continue
        if needle in env or root.encode() in cmd:
            found[int(pid)] = cmd.replace(b"\0", b" ").decode(errors="replace").strip()
    return found


# ---------------------------------------------------------------------------------------------
# Events


class Events:
    """A node's events file, read incrementally (complete lines only)."""

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.rest = b""
        self.lines = []

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return self.lines
        self.offset += len(data)
        data = self.rest + data
        *complete, self.rest = data.split(b"\n")
        for line in complete:
            if line.strip():
                self.lines.append(json.loads(line))
        return self.lines


# A line of mcsup's stderr (the human format) that reports an event: stamp, level, event, process.
STDERR_EVENT = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z\s+[A-Z]+\s+([a-z-]+) "
                          r"process=(\S+)")


def first(evs, pred):
    return next((e for e in evs if pred(e)), None)


# ---------------------------------------------------------------------------------------------
# One job


class Node:
    def __init__(self, root, i, n, run, port, schedule):
        self.name = f"n{i}"
        self.dir = os.path.join(root, self.name)
        self.tmp = os.path.join(self.dir, "tmp")
        os.makedirs(self.tmp)
        self.plan = node_plan(run, i, n, root, port, schedule)
        self.plan_path = os.path.join(self.dir, "plan.json")
        with open(self.plan_path, "w") as f:
            json.dump(self.plan, f)
        self.tiers = {p["name"]: teardown_tier(p["kind"], p["phase"])
                      for p in self.plan["processes"]}
        self.events = Events(os.path.join(self.dir, "logs", f"{self.name}.events.jsonl"))
        self.stderr = os.path.join(self.dir, "mcsup.stderr")
        self.pid = None
        self.exit_status = None
        self.exit_wall = None
        self.is_ready = False
        self.is_joined = False

    def up(self):
        """Every process ready, and joined the job's control connection."""
        if not self.is_ready:
            done = {e["process"] for e in self.events.poll() if e["event"] == "ready"}
            self.is_ready = all(name in done for name in self.tiers)
        if not self.is_joined:
            try:
                with open(self.stderr, errors="replace") as f:
                    self.is_joined = "joined the job's control connection" in f.read()
            except OSError:
                pass
        return self.is_ready and self.is_joined

    def timed_events(self):
        """The events, each with `wall_ms`: its instant on the wall clock with the precision of
        `t_ms`. An event's `ts_ms` is whole milliseconds (mcsup's start, truncated, plus the
        whole milliseconds since), too coarse for the order of a message's round trip between
        two nodes; mcsup's stderr stamps the same events in microseconds. The node's start on the
        wall clock is the least `stderr stamp - t_ms` over the events both record (a line is
        stamped after its event's instant, never before)."""
        evs = self.events.poll()
        stamps, seen = {}, Counter()
        try:
            with open(self.stderr, errors="replace") as f:
                for line in f:
                    m = STDERR_EVENT.match(line)
                    if m:
                        key = (m[3].strip('"'), m[2])
                        stamps[key, seen[key]] = datetime.fromisoformat(m[1] + "+00:00").timestamp()
                        seen[key] += 1
        except OSError:
            pass
        offsets, seen = [], Counter()
        for e in evs:
            key = (e["process"], e["event"])
            at = stamps.get((key, seen[key]))
            seen[key] += 1
            if at is not None:
                offsets.append(at * 1000 - e["t_ms"])
        # Without stderr stamps: the whole-millisecond start, plus half a millisecond.
        start = min(offsets) if offsets else min(e["ts_ms"] - e["t_ms"] for e in evs) + 0.5
        for e in evs:
            e["wall_ms"] = start + e["t_ms"]
        # Against the events' own ts_ms: wall_ms - ts_ms must lie in [0, 2) (two truncations).
        d = [e["wall_ms"] - e["ts_ms"] for e in evs] or [0]
        self.clock_vs_ts_ms = (min(d), max(d))
        self.stamped = len(offsets)
        return evs


def spawn_gated(nodes, run):
    """Start every node's mcsup, each in its own session, held in `sh` until the harness closes
    one pipe: then all exec mcsup at once (srun starts every node's step together). Each shell
    says it is waiting (a byte on a second pipe) before the release. Returns the release's wall
    time."""
    go_r, go_w = os.pipe()  # close-on-exec, as every descriptor Python opens; the dups below
    up_r, up_w = os.pipe()  # (to 3 and 4) are inherited
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "MCSUP_BENCH", "MCSUP_LOG"))}
    env[TAG] = run
    for node in nodes:
        actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                   (os.POSIX_SPAWN_OPEN, 2, node.stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                    0o600),
                   (os.POSIX_SPAWN_DUP2, go_r, 3), (os.POSIX_SPAWN_DUP2, up_w, 4)]
        argv = ["sh", "-c", 'printf . >&4; exec 4>&-; read -r _ <&3; exec 3<&-; exec "$@"', "sh",
                MCSUP, "run", "--plan-file", node.plan_path, "--no-console"]
        node.pid = os.posix_spawn("/bin/sh", argv, {**env, "TMPDIR": node.tmp},
                                  file_actions=actions, setsid=True)
    os.close(go_r)
    os.close(up_w)
    waiting = 0
    while waiting < len(nodes):
        got = os.read(up_r, 4096)
        if not got:
            raise RuntimeError(f"only {waiting} of {len(nodes)} shells started")
        waiting += len(got)
    os.close(up_r)
    released = time.time()
    os.close(go_w)
    return released


def wait_exits(nodes, timeout):
    """Reap every node's mcsup; returns False (after SIGKILLing the rest) on timeout."""
    by_pid = {n.pid: n for n in nodes if n.pid is not None and n.exit_status is None}
    timed_out = threading.Event()

    def watchdog():
        timed_out.set()
        for pid in list(by_pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    timer = threading.Timer(timeout, watchdog)
    timer.start()
    try:
        while by_pid:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            node = by_pid.pop(pid, None)
            if node is not None:
                node.exit_wall = time.time()
                node.exit_status = os.waitstatus_to_exitcode(status)
    finally:
        timer.cancel()
    return not timed_out.is_set()


def kill_all(nodes):
    for node in nodes:
        if node.pid and node.exit_status is None:
            try:
                os.kill(node.pid, signal.SIGKILL)
            except OSError:
                pass
    wait_exits(nodes, 10)


def run_job(n, schedule, coordinator_only=False):
    """One job of `n` nodes from release to every mcsup gone. Returns its measurements."""
    run = f"job{os.getpid()}-{n}-{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory(prefix="mcsup-bench-job-") as root:
        if os.environ.get("BENCH_KEEP"):
            keep = root + ".kept"
            print(f"   (keeping the run's files in {keep})")
        port = free_port()
        nodes = [Node(root, i, n, run, port, schedule) for i in range(1, n + 1)]
        res = {"nodes": n, "drain": "coordinator" if coordinator_only else "all",
               "run": run, "problems": []}
        try:
            measure_job(nodes, res, coordinator_only)
        finally:
            kill_all(nodes)
            left = wait_gone(run, root)
            if os.environ.get("BENCH_KEEP"):
                subprocess.run(["cp", "-a", root, root + ".kept"], check=False)
            res["left_behind"] = left
            if left:
                res["problems"].append(f"{len(left)} process(es) left behind: "
                                       + "; ".join(f"{p}: {c}" for p, c in left.items()))
        return res


def wait_gone(run, root, grace=2.0):
    """The run's processes still alive `grace` seconds after the last mcsup exited (SIGKILLed
    then, so that they cannot disturb the next run)."""
    end = time.monotonic() + grace
    while True:
        left = run_processes(run, root)
        if not left or time.monotonic() > end:
            break
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def measure_job(nodes, res, coordinator_only):
    """Release the job, wait until it is up, the quiet window, the drain; fills `res` (raises
    JobFailed when the job does not come up)."""
    coord = nodes[0]
    res["loopback_at_release"] = loopback()
    released = spawn_gated(nodes, res["run"])
    # Up: every process of every node ready, every node joined.
    end = time.monotonic() + UP_TIMEOUT
    pending = list(nodes)
    while pending:
        pending = [x for x in pending if not x.up()]
        if not pending:
            break
        dead = [x.name for x in nodes if x.exit_status is None and not alive(x.pid)]
        if dead or time.monotonic() > end:
            res["problems"].append(
                f"not up after {time.monotonic() - end + UP_TIMEOUT:.0f} s: "
                f"{len(pending)} node(s) not ready or not joined "
                f"({', '.join(p.name for p in pending[:8])})"
                + (f"; exited: {', '.join(dead[:8])}" if dead else ""))
            raise JobFailed(res)
        time.sleep(0.05)
    pids = {x.name: x.pid for x in nodes}
    at_ready = cpu_sample(pids)
    lo_up = loopback()
    time.sleep(1.0)  # the start-up's last writes and the first heartbeats settle
    before = cpu_sample(pids)
    lo_before, busy_before = loopback(), machine_busy()
    time.sleep(IDLE)
    after = cpu_sample(pids)
    lo_after, busy_after = loopback(), machine_busy()
    # The whole machine's CPU over the quiet window, where the job itself uses a few ms: what
    # else ran meanwhile (a build, a test suite) and may have moved every figure.
    res["machine_busy_quiet_pct"] = 100 * (busy_after[0] - busy_before[0]) / max(
        1, busy_after[1] - busy_before[1])
    res["loopback_startup"] = diff(lo_up, res["loopback_at_release"])
    res["loopback_quiet_per_s"] = [v / IDLE for v in diff(lo_after, lo_before)]
    res["coordinator_vmhwm_kb"] = status_kb(coord.pid, "VmHWM")
    res["idle_seconds"] = IDLE
    # Two readings of each: on-CPU time of the live threads (ns), and utime+stime (whole ticks).
    for j, unit in ((1, "ms"), (0, "ticks_ms")):
        res[f"coordinator_cpu_{unit}"] = after[coord.name][j]
        res[f"cpu_startup_{unit}_total"] = sum(v[j] for v in at_ready.values() if v)
        res[f"cpu_at_drain_{unit}_total"] = sum(v[j] for v in after.values() if v)
        idle = {k: after[k][j] - before[k][j] for k in pids if before[k] and after[k]}
        res[f"coordinator_idle_{unit}"] = idle[coord.name]
        others = [v for k, v in idle.items() if k != coord.name]
        if others:
            res[f"others_idle_{unit}_median"] = statistics.median(others)
            res[f"others_idle_{unit}_max"] = max(others)
    # The drain.
    targets = [coord] if coordinator_only else nodes
    drained = time.time()
    for x in targets:
        os.kill(x.pid, signal.SIGTERM)
    if not wait_exits(nodes, EXIT_TIMEOUT):
        hung = [x.name for x in nodes if x.exit_status is None or x.exit_status == -9]
        res["problems"].append(f"not exited {EXIT_TIMEOUT:.0f} s after the drain: "
                               f"{', '.join(hung[:16])} (SIGKILLed)")
    res["stop_wall_ms"] = (max(x.exit_wall for x in nodes) - drained) * 1000
    res["loopback_teardown"] = diff(loopback(), lo_after)
    del res["loopback_at_release"]
    bad = {x.name: x.exit_status for x in nodes if x.exit_status != 0}
    if bad:
        res["problems"].append(f"exit status not 0: {bad}")
    evs = {x.name: x.timed_events() for x in nodes}
    res["wall_minus_ts_ms"] = [min(x.clock_vs_ts_ms[0] for x in nodes),
                               max(x.clock_vs_ts_ms[1] for x in nodes)]
    res["stderr_stamped_events"] = sum(x.stamped for x in nodes)
    startup(res, nodes, evs, released)
    stopping(res, nodes, evs)
    res["teardown_timeline_ms"] = timeline(nodes, evs, drained)
    res["order"] = order_check(nodes, evs)
    res["events_of_note"] = events_of_note(evs)
    res["control_messages"] = control_counters(nodes)


def diff(a, b):
    return [x - y for x, y in zip(a, b)]


class JobFailed(Exception):
    pass


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def startup(res, nodes, evs, released):
    """First spawn on any node -> every process ready (wall, ts_ms), against each node's own
    first spawn -> last ready (t_ms)."""
    spawns, readies, own = [], [], {}
    for x in nodes:
        e = evs[x.name]
        sp = [ev for ev in e if ev["event"] == "spawned"]
        rd = [ev for ev in e if ev["event"] == "ready" and ev["process"] in x.tiers]
        spawns.append(min(ev["wall_ms"] for ev in sp))
        readies.append(max(ev["wall_ms"] for ev in rd))
        own[x.name] = max(ev["t_ms"] for ev in rd) - min(ev["t_ms"] for ev in sp)
    slowest = max(own, key=own.get)
    t0 = min(spawns)
    master = first(evs[nodes[0].name], lambda ev: ev["process"] == "master"
                   and ev["event"] == "ready")
    gates = [ev["wall_ms"] - t0 for x in nodes[1:] for ev in evs[x.name]
             if ev["event"] == "ready" and ev["process"] == "master@n1"]
    res["start_timeline_ms"] = {
        "first_spawn_after_release": t0 - released * 1000,
        "last_first_spawn": max(spawns) - t0,
        "n1_master_ready": master["wall_ms"] - t0 if master else None,
        "gates_ready": [min(gates), max(gates)] if gates else None,
        "all_ready": max(readies) - t0}
    res["start_wall_ms"] = max(readies) - t0
    res["release_to_ready_ms"] = max(readies) - released * 1000
    res["release_to_first_spawn_ms"] = min(spawns) - released * 1000
    res["start_slowest_own_ms"] = own[slowest]
    res["start_slowest_node"] = slowest
    res["start_own_median_ms"] = statistics.median(own.values())


def stopping(res, nodes, evs):
    """Each node's own stop: its first teardown event (the stop request, or a peer's failure)
    to `finished` (t_ms)."""
    own, work = {}, {}
    for x in nodes:
        e = evs[x.name]
        begin = first(e, lambda ev: ev["process"] == "mcsup"
                      and ev["event"] in ("shutdown-requested", "peer-failed"))
        fin = first(e, lambda ev: ev["process"] == "mcsup" and ev["event"] == "finished")
        work[x.name] = stopping_work(x, e)
        if begin and fin:
            own[x.name] = fin["t_ms"] - begin["t_ms"]
        else:
            res["problems"].append(f"{x.name}: no "
                                   + ("stop request" if not begin else "`finished`")
                                   + " in its events")
    if own:
        slowest = max(own, key=own.get)
        res["stop_slowest_own_ms"] = own[slowest]
        res["stop_slowest_node"] = slowest
        res["stop_own_median_ms"] = statistics.median(own.values())
    slowest = max(work, key=work.get)
    res["stop_slowest_work_ms"] = work[slowest]
    res["stop_slowest_work_node"] = slowest


def stopping_work(node, evs):
    """The time a node spent stopping its own processes, without its waits for the job's word:
    per tier, its first `stopping` to its last `stopped` there, summed over its tiers."""
    spans = {}
    for e in evs:
        t = node.tiers.get(e["process"])
        if t is None or e["event"] not in ("stopping", "stopped"):
            continue
        lo, hi = spans.get(t, (None, None))
        if e["event"] == "stopping":
            lo = e["t_ms"] if lo is None else min(lo, e["t_ms"])
        else:
            hi = e["t_ms"] if hi is None else max(hi, e["t_ms"])
        spans[t] = (lo, hi)
    return sum(hi - lo for lo, hi in spans.values() if lo is not None and hi is not None)


def timeline(nodes, evs, drained):
    """The teardown across nodes, in ms after the drain signal: every stop request heard, each
    tier's first `stopping` and last `stopped` on any node, the last `finished`, the last exit."""
    t0 = drained * 1000
    out = {}
    heard = [e["wall_ms"] for x in nodes for e in evs[x.name]
             if e["process"] == "mcsup" and e["event"] in ("shutdown-requested", "peer-failed")]
    if heard:
        out["first_request_heard"] = min(heard) - t0
        out["last_request_heard"] = max(heard) - t0
    for t, name in enumerate(TIER_NAMES):
        stopping_at = [e["wall_ms"] for x in nodes for e in evs[x.name]
                       if x.tiers.get(e["process"]) == t and e["event"] == "stopping"]
        stopped_at = [e["wall_ms"] for x in nodes for e in evs[x.name]
                      if x.tiers.get(e["process"]) == t and e["event"] == "stopped"]
        if stopping_at and stopped_at:
            out[name] = [min(stopping_at) - t0, max(stopped_at) - t0]
    fin = [e["wall_ms"] for x in nodes for e in evs[x.name]
           if e["process"] == "mcsup" and e["event"] == "finished"]
    if fin:
        out["last_finished"] = max(fin) - t0
    out["last_exit"] = max(x.exit_wall for x in nodes) * 1000 - t0
    return {k: ([round(a, 1) for a in v] if isinstance(v, list) else round(v, 1))
            for k, v in out.items()}


def order_check(nodes, evs):
    """The teardown order across nodes (tests/slurm_e2e.rs, assert_tiers_across_nodes): for each
    tier, its last `stopped` on any node no later than the first `stopping` of any later tier on
    any node. Also every process must have stopped."""
    last_stopped, first_stopping, missing = {}, {}, []
    for x in nodes:
        stopped = set()
        for e in evs[x.name]:
            t = x.tiers.get(e["process"])
            if t is None:
                continue
            at = (round(e["wall_ms"], 3), f"{x.name} {e['process']}")
            if e["event"] == "stopped":
                stopped.add(e["process"])
                if t not in last_stopped or at[0] > last_stopped[t][0]:
                    last_stopped[t] = at
            elif e["event"] == "stopping":
                if t not in first_stopping or at[0] < first_stopping[t][0]:
                    first_stopping[t] = at
        missing += [f"{x.name} {p}" for p in x.tiers if p not in stopped]
    violations, margins = [], {}
    for t, (stopped, who) in sorted(last_stopped.items()):
        later = [(u, first_stopping[u]) for u in first_stopping if u > t]
        if not later:
            continue
        nxt = min(later, key=lambda v: v[1][0])
        margins[TIER_NAMES[t]] = round(nxt[1][0] - stopped, 3)
        for u, (stopping_at, whom) in later:
            if stopping_at < stopped:
                violations.append(
                    f"{TIER_NAMES[u]} began stopping ({whom} at {stamp(stopping_at)}) before "
                    f"{TIER_NAMES[t]} had stopped everywhere ({who} at {stamp(stopped)}, "
                    f"{stopped - stopping_at:.3f} ms later)")
    return {"held": not violations and not missing, "violations": violations,
            "not_stopped": missing,
            "margin_ms": margins,
            "last_stopped": {TIER_NAMES[t]: v for t, v in sorted(last_stopped.items())},
            "first_stopping": {TIER_NAMES[t]: v for t, v in sorted(first_stopping.items())}}


def stamp(wall_ms):
    """A wall-clock instant as mcsup's stderr writes it (UTC, microseconds)."""
    return datetime.fromtimestamp(wall_ms / 1000, timezone.utc).strftime("%H:%M:%S.%f")


def events_of_note(evs):
    """Counts of the events that say the job's order or a node was in trouble."""
    kinds = ("tier-alone", "peer-failed", "tier-done", "killing", "escalated", "deadline",
             "control-refused", "failed", "orphan-killed")
    counts = {}
    for e in (e for lines in evs.values() for e in lines):
        if e["event"] in kinds:
            counts[e["event"]] = counts.get(e["event"], 0) + 1
    return counts


def control_counters(nodes):
    """Counts of control messages, if mcsup reports any: in the status file's `control` section,
    or as a `key=value` about control or messages in its stderr (the last line, `mcsup
    finished`, carries its counters)."""
    found = []
    for x in nodes:
        try:
            with open(os.path.join(x.dir, "logs", f"{x.name}.status.json")) as f:
                control = json.load(f).get("control") or {}
        except (OSError, ValueError):
            control = {}
        found += [f"{x.name} status control.{k}" for k in set(control) - {"joined", "why"}]
        try:
            with open(x.stderr, errors="replace") as f:
                found += [f"{x.name} stderr {m}" for m in
                          set(re.findall(r"\b\w*(?:control|message|msg)\w*=\S+", f.read()))]
        except OSError:
            pass
    if found:
        return {"reported": True, "where": sorted(found)[:20]}
    return {"reported": False,
            "note": "mcsup reports no count of control messages (its status file's `control` "
                    "holds `joined` and `why`; its stderr, whose last line has its counters, "
                    "names none)"}


# ---------------------------------------------------------------------------------------------
# Report


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


SUMMARY_KEYS = [
    "start_wall_ms", "start_slowest_own_ms", "start_own_median_ms", "release_to_first_spawn_ms",
    "release_to_ready_ms", "stop_wall_ms", "stop_slowest_own_ms", "stop_own_median_ms",
    "stop_slowest_work_ms", "coordinator_vmhwm_kb",
    "coordinator_cpu_ms", "coordinator_idle_ms", "others_idle_ms_median", "others_idle_ms_max",
    "cpu_startup_ms_total", "cpu_at_drain_ms_total",
    "coordinator_cpu_ticks_ms", "coordinator_idle_ticks_ms", "others_idle_ticks_ms_median",
    "others_idle_ticks_ms_max", "cpu_startup_ticks_ms_total", "cpu_at_drain_ticks_ms_total",
    "machine_busy_quiet_pct"]

# Per-node costs, whose growth from the smallest N to the largest is reported.
PER_NODE = [("cpu_startup_ms_total", "every mcsup's CPU to ready", "ms"),
            ("cpu_at_drain_ms_total", "every mcsup's CPU to the drain", "ms"),
            ("coordinator_cpu_ms", "n1's CPU to the drain", "ms"),
            ("coordinator_idle_ms", "n1's CPU over the quiet window", "ms"),
            ("start_wall_ms", "first spawn -> all ready (wall)", "ms"),
            ("stop_wall_ms", "SIGTERM -> all exited (wall)", "ms"),
            ("loopback_quiet_bytes_per_s", "loopback bytes per s, quiet window", "B"),
            ("loopback_teardown_bytes", "loopback bytes in the teardown", "B")]


def summarize(runs):
    """Medians over the runs that came up, the ratios of the medians, the per-node costs."""
    up = [r for r in runs if "start_wall_ms" in r]
    s = {k: med(up, k) for k in SUMMARY_KEYS}
    s["runs"] = len(runs)
    s["runs_measured"] = len(up)
    s["start_ratio"] = ratio(s["start_wall_ms"], s["start_slowest_own_ms"])
    s["stop_ratio"] = ratio(s["stop_wall_ms"], s["stop_slowest_own_ms"])
    s["stop_work_ratio"] = ratio(s["stop_wall_ms"], s["stop_slowest_work_ms"])
    for k in ("loopback_startup", "loopback_quiet_per_s", "loopback_teardown"):
        vals = [r[k] for r in up if k in r]
        s[k] = [statistics.median(v[i] for v in vals) for i in (0, 1)] if vals else None
    s["loopback_quiet_bytes_per_s"] = (s["loopback_quiet_per_s"] or [None])[0]
    s["loopback_teardown_bytes"] = (s["loopback_teardown"] or [None])[0]
    n = runs[0]["nodes"]
    s["per_node"] = {k: (s[k] / n if s[k] is not None else None) for k, _, _ in PER_NODE}
    s["order_held"] = bool(up) and len(up) == len(runs) and all(
        r.get("order", {}).get("held") for r in runs)
    s["problems"] = [p for r in runs for p in r["problems"]]
    return s


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(v, unit="ms", digits=0):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}{(' ' + unit) if unit else ''}"


def print_start(r):
    st = r.get("start_timeline_ms")
    if not st:
        return
    g = st["gates_ready"]
    print(f"   start (last run), ms after the first spawn on any node "
          f"({st['first_spawn_after_release']:.1f} ms after the release): each node's first "
          f"spawn by +{st['last_first_spawn']:.1f}; n1's master ready +{st['n1_master_ready']:.1f}"
          + (f"; the other nodes' gates on it ready +{g[0]:.1f}..+{g[1]:.1f}" if g else "")
          + f"; everything ready +{st['all_ready']:.1f}")


def print_timeline(n, drain, r):
    tl = r.get("teardown_timeline_ms")
    if not tl:
        return
    parts = [f"stop requests heard +{tl.get('first_request_heard', 0):.1f}..+"
             f"{tl.get('last_request_heard', 0):.1f}"]
    parts += [f"{name} +{tl[name][0]:.1f}..+{tl[name][1]:.1f}" for name in TIER_NAMES if name in tl]
    if "last_finished" in tl:
        parts.append(f"last `finished` +{tl['last_finished']:.1f}")
    parts.append(f"last mcsup exited +{tl['last_exit']:.1f}")
    print(f"   {drain}, ms after the signal (a tier: its first `stopping`..last `stopped` on any "
          f"node): " + "; ".join(parts))


def print_order(drain, runs):
    for k, r in enumerate(runs):
        o = r.get("order")
        if o is None:
            print(f"   {drain} run {k + 1}: no order check (the run did not finish)")
            continue
        if o["held"]:
            m = ", ".join(f"{t} {v:.3f}" for t, v in o["margin_ms"].items())
            print(f"   {drain} run {k + 1}: order held (ms from a tier's last `stopped` to the "
                  f"next tier's first `stopping`, any nodes: {m})")
        else:
            print(f"   {drain} run {k + 1}: ORDER BROKEN")
            for v in o["violations"]:
                print(f"      {v}")
            if o["not_stopped"]:
                print(f"      no `stopped` event: {', '.join(o['not_stopped'][:16])}")


def print_n(n, s, runs, coord_runs, c):
    print(f"\nN={n}: first spawn -> all ready {fmt(s['start_wall_ms'], digits=1)} (slowest node's "
          f"own {fmt(s['start_slowest_own_ms'], digits=1)}); SIGTERM to all -> all exited "
          f"{fmt(s['stop_wall_ms'], digits=1)} (slowest node's own "
          f"{fmt(s['stop_slowest_own_ms'], digits=1)})"
          + (f"; SIGTERM to n1 only -> all exited {fmt(c['stop_wall_ms'])}" if c else ""))
    for r in runs[-1:]:
        print_start(r)
        print_timeline(n, "SIGTERM to all (last run)", r)
    for r in coord_runs[-1:]:
        print_timeline(n, "SIGTERM to n1 only", r)
    print_order("SIGTERM to all", runs)
    print_order("SIGTERM to n1 only", coord_runs)
    for p in s["problems"]:
        print(f"   PROBLEM: {p}")
    for r in coord_runs:
        for p in r["problems"]:
            print(f"   PROBLEM (SIGTERM to n1 only): {p}")
        notes = r.get("events_of_note", {})
        if notes:
            print("   SIGTERM to n1 only: events "
                  + ", ".join(f"{k} {v}" for k, v in notes.items()))


def print_tables(results):
    by_n = results["by_nodes"]
    print(f"\nTiming (medians of {REPS}; x = the job's wall time / the slowest node's own)")
    rows = [("N", "first spawn->all ready", "slowest own", "x", "release->all ready",
             "SIGTERM all->all exited", "slowest own", "x", "slowest own stopping", "x",
             "order", "SIGTERM n1->all exited")]
    for n, e in by_n.items():
        s, c = e["summary"], e.get("coordinator_only_summary") or {}
        rows.append((n, fmt(s["start_wall_ms"], digits=1), fmt(s["start_slowest_own_ms"], digits=1),
                     fmt(s["start_ratio"], "", 2), fmt(s["release_to_ready_ms"]),
                     fmt(s["stop_wall_ms"], digits=1), fmt(s["stop_slowest_own_ms"], digits=1),
                     fmt(s["stop_ratio"], "", 2), fmt(s["stop_slowest_work_ms"], digits=1),
                     fmt(s["stop_work_ratio"], "", 1),
                     "held" if s["order_held"] else "BROKEN", fmt(c.get("stop_wall_ms"))))
    table(rows)
    print(f"\nResources (medians; CPU: time on a CPU of mcsup's threads, schedstat; quiet window "
          f"{IDLE:.0f} s)")
    rows = [("N", "n1 CPU to drain", "n1 VmHWM", "n1 quiet", "others quiet: median",
             "max", "all mcsups' CPU to ready", "to drain")]
    for n, e in by_n.items():
        s = e["summary"]
        rows.append((n, fmt(s["coordinator_cpu_ms"], digits=1),
                     fmt(s["coordinator_vmhwm_kb"], "kB"), fmt(s["coordinator_idle_ms"], digits=1),
                     fmt(s["others_idle_ms_median"], digits=2),
                     fmt(s["others_idle_ms_max"], digits=2), fmt(s["cpu_startup_ms_total"]),
                     fmt(s["cpu_at_drain_ms_total"])))
    table(rows)
    cm = next((r["control_messages"] for e in by_n.values() for r in e["runs"]
               if "control_messages" in r), None)
    if cm and not cm["reported"]:
        print(f"   control messages per node: not measured: {cm['note']}")
    elif cm:
        print(f"   control message counters found: {cm['where']}")
    print("\nLoopback traffic per node (medians; packets / bytes on `lo`, the control connection's "
          "and anything else on 127.0.0.1 meanwhile)")
    rows = [("N", "start-up: packets", "bytes", "quiet, per s: packets", "bytes",
             "teardown: packets", "bytes", "machine busy in quiet window")]
    for n, e in by_n.items():
        s = e["summary"]
        per = [[v / int(n) for v in s[k]] if s.get(k) else [None, None]
               for k in ("loopback_startup", "loopback_quiet_per_s", "loopback_teardown")]
        rows.append((n, fmt(per[0][1], "", 1), fmt(per[0][0], "B"), fmt(per[1][1], "", 2),
                     fmt(per[1][0], "B"), fmt(per[2][1], "", 1), fmt(per[2][0], "B"),
                     fmt(s.get("machine_busy_quiet_pct"), "%", 1)))
    table(rows)


def table(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  " + "  ".join(str(v).rjust(w) for v, w in zip(r, widths)))


def growth(results):
    """Per-node cost at the largest N / at the smallest."""
    ns = sorted(int(n) for n in results["by_nodes"])
    if len(ns) < 2:
        return
    lo, hi = ns[0], ns[-1]
    a = results["by_nodes"][str(lo)]["summary"]["per_node"]
    b = results["by_nodes"][str(hi)]["summary"]["per_node"]
    g = {k: ratio(b.get(k), a.get(k)) for k, _, _ in PER_NODE}
    results["per_node_growth"] = {"from": lo, "to": hi, **g}
    print(f"\nPer-node cost at N={hi} / at N={lo} (1.00: the cost per node does not grow with N; "
          f"every node shares this machine's {os.cpu_count()} cores)")
    for k, label, unit in PER_NODE:
        print(f"   {label + ', per node':46} {fmt(a.get(k), unit, 2)} -> {fmt(b.get(k), unit, 2)}: "
              f"x{fmt(g[k], '', 2)}")


def one(n, schedule, coordinator_only=False):
    try:
        return run_job(n, schedule, coordinator_only)
    except JobFailed as e:
        return e.args[0]


def main():
    schedule = default_schedule(MCSUP)
    tmp = tempfile.gettempdir()
    print(f"mcsup job benchmark: {os.cpu_count()} cores, N = {' '.join(map(str, NODES))}, "
          f"{REPS} runs each drained by SIGTERM to every mcsup (medians) and {COORD_REPS} by "
          f"SIGTERM to n1's alone, quiet window {IDLE:.0f} s, working directories in {tmp}")
    print("   n1 (coordinator): infra, master, store, worker, frontend; n2..nN: a gate on n1's "
          "master, store, worker (mcsup-testchild, ready by a log line)")
    results = {"cores": os.cpu_count(), "reps": REPS, "coordinator_only_reps": COORD_REPS,
               "idle_seconds": IDLE, "schedule": schedule, "by_nodes": {}}
    failed = False
    for n in NODES:
        runs = [one(n, schedule) for _ in range(REPS)]
        coord_runs = [one(n, schedule, coordinator_only=True) for _ in range(COORD_REPS)]
        s = summarize(runs)
        c = summarize(coord_runs) if coord_runs else None
        results["by_nodes"][str(n)] = {"summary": s, "runs": runs,
                                       "coordinator_only_summary": c,
                                       "coordinator_only_runs": coord_runs}
        print_n(n, s, runs, coord_runs, c)
        failed |= not s["order_held"] or bool(s["problems"]) or bool(c and c["problems"])
        failed |= bool(c) and not c["order_held"]
    print_tables(results)
    growth(results)
    os.makedirs(os.path.dirname(os.path.abspath(JSON_OUT)), exist_ok=True)
    with open(JSON_OUT, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nJSON written to {os.path.abspath(JSON_OUT)}")
    if failed:
        print("FAILED: the teardown order broke, or a run had a problem (above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
