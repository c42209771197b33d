#!/usr/bin/env python3
"""Benchmark mcsup's supervisor against supervisord and the floors, on one process graph.

Run through scripts/bench-supervisor.sh (it builds the release binaries first). Measures, in
one run on this machine:
  1. start of a 3-service chain of instantly-ready services (launch -> all 3 running), ungated
  2. a 3-service chain a -> b -> c of services listening at once, each started when the
     previous one accepts TCP connections (mcsup: tcp readiness probes with the planner's
     default schedule, read from `mcsup plan --json`), vs the harness doing the same gating;
     twice: with Python services (the issue's workload, about 35 ms to start each) and with
     mcsup-testchild (about 1 ms), where mcsup's own start-up weighs the most
  3. spawn of 16 and of 256 children; 256 children with a file readiness probe each until all
     are ready; teardown of 16 and 256 children (SIGTERM -> supervisor exited, children gone)
  4. log capture throughput: 2M lines of 100 B, vs a raw pipe into `cat`, console off and on
  5. RSS of the supervisor with 16 children
  6. CPU time and wakeups (context switches) while idle for IDLE_SECONDS
  7. the job view (status --job, timeline, why) of a 128-node x 16-process job, vs `cat` of
     its files
"Floor" = the same children started/stopped/piped/gated directly by this harness, without a
supervisor. The harness is already running, so that floor never pays for starting a process; the
"process floor" (gated chain and spawn) is a small Rust program (src/bin/mcsup-floor.rs) doing
only the measured work, started by the harness as mcsup is: the floor with a process start.
Every contender's input is prepared before its clock starts: the floors' argument lists,
supervisord's configuration file, mcsup's plan file. Everything talks only to the local
filesystem and 127.0.0.1. The figures and ratios
are printed and written as JSON to $BENCH_JSON (default: target/bench-supervisor.json).
Working directories (plans, log directories, the files children touch) are made under $TMPDIR;
scripts/bench-supervisor.sh points it at a tmpfs (/dev/shm) unless BENCH_TMPDIR says otherwise:
on this machine's ext4, creating files got twice as slow between two runs of the same session
(inode allocation), which moved mcsup (one log file per child) far more than the floors.
"""
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from plan_json import default_schedule
from procs import tagged_pids

MCSUP = os.environ["MCSUP_BIN"]
CHILD = os.environ["TESTCHILD_BIN"]
FLOOR = os.environ.get("FLOOR_BIN")
SUPERVISORD = shutil.which("supervisord")
REPS = int(os.environ.get("BENCH_REPS", "10"))
# Repetitions of the log capture runs (each writes BENCH_LINES lines three ways).
LOG_REPS = int(os.environ.get("BENCH_LOG_REPS", "3"))
IDLE_SECONDS = float(os.environ.get("IDLE_SECONDS", "30"))
LINES = int(os.environ.get("BENCH_LINES", "2000000"))
TAG = "MCSUP_BENCH_TAG"
SCALE = int(os.environ.get("BENCH_SCALE", "256"))
JSON_OUT = os.environ.get("BENCH_JSON", os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "target", "bench-supervisor.json"))


def now():
    return time.perf_counter()


def wait_files(paths, timeout=30.0):
    end = now() + timeout
    while True:
        if all(os.path.exists(p) for p in paths):
            return now()
        if now() > end:
            raise RuntimeError(f"timeout waiting for {paths}")
        time.sleep(0.0002)


def readiness(probe, schedule):
    return {"probes": [probe], **schedule, "timeout_ms": 30000}


def proc_spec(name, kind, argv, deps=(), stop_signal="SIGTERM"):
    # The plan format of `mcsup plan --json` (docs/plan.md); the start phase decides the
    # teardown tier, as for a planned master, store and worker.
    phase = "workers" if kind == "worker" else "before_workers"
    return {
        "name": name, "kind": kind, "phase": phase, "roles": [], "argv": argv, "preamble": None,
        "env": [{"name": TAG, "value": "1", "source": "bench"}], "cwd": None,
        "depends_on": [{"target": d, "condition": "healthy"} for d in deps],
        "readiness": None, "liveness": None,
        "restart": {"policy": "never", "success_codes": [0], "backoff_initial_ms": 100,
                    "backoff_factor": 2.0, "backoff_max_ms": 1000, "reset_after_ms": 60000,
                    "max_restarts": 3, "window_ms": 60000},
        "stop": {"signal": stop_signal, "grace_ms": 5000},
        "critical": kind != "worker",
    }


def plan(log_dir, processes, workers_done=True):
    return {
        "node": {"name": "bench", "ip": "127.0.0.1", "node_id": 0, "infra_node": "bench",
                 "infra_ip": "127.0.0.1", "runs_master": True, "job_id": None, "mode": "local"},
        "roles": [], "gates": [], "processes": processes, "files": [],
        "shutdown": {"deadline_ms": 25000, "drain_signal": "SIGUSR1",
                     "exit_when_workers_done": workers_done},
        "log_dir": log_dir, "ignored_sections": [], "warnings": [],
    }


def write_plan(d, p):
    """mcsup's input, written before its clock starts, as supervisord's configuration is and
    as the floors' argument lists are built (it took about 0.6 ms of the harness's time for 16
    processes, which used to be charged to mcsup)."""
    path = os.path.join(d, "plan.json")
    with open(path, "w") as f:
        json.dump(p, f)
    return path


def start_mcsup(d, p, console=False, diagnose=True):
    return launch_mcsup(write_plan(d, p), console, diagnose)


def launch_mcsup(path, console=False, diagnose=True):
    args = [MCSUP, "run", "--plan-file", path]
    if not console:
        args.append("--no-console")
    env = {**os.environ, "MCSUP_LOG": "warn"}
    if not diagnose:
        env["MCSUP_DIAGNOSE"] = "0"
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)


def supervisord_conf(d, programs, log_capture=False):
    conf = os.path.join(d, "supervisord.conf")
    lines = ["[supervisord]", f"logfile={d}/supervisord.log", f"pidfile={d}/supervisord.pid",
             f"childlogdir={d}", "loglevel=warn", "nodaemon=true",
             f"[unix_http_server]", f"file={d}/supervisor.sock",
             "[rpcinterface:supervisor]",
             "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface", ""]
    for i, (name, argv) in enumerate(programs):
        lines += [f"[program:{name}]", "command=" + " ".join(argv), f"priority={i + 1}",
                  "startsecs=0", "autorestart=false", "stopsignal=TERM", "stopwaitsecs=5",
                  f"environment={TAG}=1"]
        if log_capture:
            lines += [f"stdout_logfile={d}/{name}.out", "stdout_logfile_maxbytes=0",
                      "redirect_stderr=true"]
        else:
            lines += ["stdout_logfile=NONE", "stderr_logfile=NONE"]
    with open(conf, "w") as f:
        f.write("\n".join(lines) + "\n")
    return conf


def start_supervisord(conf):
    return subprocess.Popen([SUPERVISORD, "-n", "-c", conf], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def stop(p, timeout=30):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def state_and_parent(pid):
    """(state letter, parent pid) of `pid` from /proc/PID/stat, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def gone(pid):
    """pid has exited: no such process, or a zombie of another parent (its sockets and files are
    closed; a zombie of ours is reaped first, by reap_orphans)."""
    sp = state_and_parent(pid)
    return sp is None or (sp[0] in ("Z", "X") and sp[1] != os.getpid())


def kill_tagged():
    """Leftovers of the bench (by env tag), so runs cannot disturb each other: killed, and waited
    for until gone (a dying service still accepts on its port for a moment)."""
    killed = []
    for pid in tagged_pids(TAG, 1):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(str(pid))
        except OSError:
            pass
    end = now() + 5
    while killed and now() < end:
        reap_orphans(killed)
        killed = [pid for pid in killed if not gone(pid)]
        time.sleep(0.0005)


def become_subreaper():
    """The process floor's children outlive it: make them ours, not PID 1's, so that kill_tagged
    reaps them before the next measurement instead of leaving PID 1 to do it, at a moment nobody
    chose, while mcsup's run is being timed."""
    import ctypes
    PR_SET_CHILD_SUBREAPER = 36
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("warning: cannot become a child subreaper: orphans go to PID 1", file=sys.stderr)


def reap_orphans(pids):
    """Reap those of `pids` that are zombies adopted by the harness (see become_subreaper)."""
    for pid in pids:
        if state_and_parent(pid) == ("Z", os.getpid()):
            try:
                os.waitpid(int(pid), os.WNOHANG)
            except ChildProcessError:
                pass


def ms(x):
    return f"{x * 1000:.1f} ms"


_NEXT_PORT = [20000 + os.getpid() % 6000]


def free_ports(n):
    """n ports free now, below the kernel's ephemeral range (32768-60999 by default): a port taken
    from that range can be grabbed as the source port of an outgoing connection before the
    service binds it (mcsup's preflight warns about such ports)."""
    ports = []
    while len(ports) < n:
        port = _NEXT_PORT[0]
        _NEXT_PORT[0] = 20000 + (port - 20000 + 1) % 12000
        sk = socket.socket()
        try:
            sk.bind(("0.0.0.0", port))
            ports.append(port)
        except OSError:
            pass
        finally:
            sk.close()
    return ports


def start_floor(args):
    """The process floor (mcsup-floor), its children tagged so that kill_tagged stops them."""
    return subprocess.Popen([FLOOR, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, TAG: "1"})


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.05):
            return True
    except OSError:
        return False


def wait_accepts(port, timeout=30.0):
    end = now() + timeout
    while not accepts(port):
        if now() > end:
            raise RuntimeError(f"timeout waiting for 127.0.0.1:{port}")
        time.sleep(0.0002)
    return now()


def wait_event_t_ms(events_path, process, event, timeout=2.0):
    """`t_ms` (since mcsup's start) of the first `event` of `process` in an events file."""
    end = now() + timeout
    while now() < end:
        try:
            with open(events_path) as f:
                for line in f:
                    e = json.loads(line)
                    if e.get("process") == process and e.get("event") == event:
                        return e["t_ms"]
        except (OSError, ValueError):
            pass
        time.sleep(0.001)
    return None


def count_ready(events_path):
    try:
        with open(events_path) as f:
            return sum(1 for line in f if '"event":"ready"' in line)
    except OSError:
        return 0


# ---------------------------------------------------------------------------------------------
# A Python service that listens at once (the chain): `PY_SERVICE --listen PORT`.
PY_SERVICE_SRC = f"""#!{sys.executable}
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[sys.argv.index("--listen") + 1])))
s.listen(64)
time.sleep(3600)
"""


def write_py_service(d):
    path = os.path.join(d, "py_service.py")
    with open(path, "w") as f:
        f.write(PY_SERVICE_SRC)
    os.chmod(path, 0o755)
    return path


def bench_gated_chain(service=CHILD, reps=REPS):
    """a -> b -> c, each `service --listen PORT` listening at once; b starts when a accepts, c
    when b accepts."""
    schedule = default_schedule(MCSUP)
    res = {"floor": [], "floor_process": [], "mcsup": [], "mcsup_inside": [], "mcsup_exec": []}
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as d:
            ports = free_ports(3)
            argv = [[service, "--listen", str(p)] for p in ports]
            t0 = now()
            kids = []
            for a, p in zip(argv, ports):
                kids.append(subprocess.Popen(a, stdout=subprocess.DEVNULL))
                wait_accepts(p)
            res["floor"].append(now() - t0)
            for k in kids:
                k.kill()
                k.wait()
            if FLOOR:
                t0 = now()
                f = start_floor(["chain", service, *map(str, ports)])
                res["floor_process"].append(wait_accepts(ports[2]) - t0)
                f.wait()
                kill_tagged()
            procs = []
            for i, (a, p) in enumerate(zip(argv, ports)):
                spec = proc_spec(f"s{i}", "store", a, [f"s{i - 1}"] if i else [])
                spec["readiness"] = readiness({"type": "tcp", "host": "127.0.0.1", "port": p},
                                              schedule)
                procs.append(spec)
            path = write_plan(d, plan(f"{d}/logs", procs))
            t0 = now()
            m = launch_mcsup(path)
            res["mcsup"].append(wait_accepts(ports[2]) - t0)
            # The same run from mcsup's own clock (its start to c's ready event): the gating
            # alone, without the cost of starting the mcsup process itself.
            inside = wait_event_t_ms(f"{d}/logs/bench.events.jsonl", "s2", "ready")
            if inside is not None:
                res["mcsup_inside"].append(inside / 1000)
            stop(m)
            # What starting mcsup costs before it does anything: the whole `mcsup --version`.
            t0 = now()
            subprocess.run([MCSUP, "--version"], stdout=subprocess.DEVNULL, check=True)
            res["mcsup_exec"].append(now() - t0)
        kill_tagged()
    out = {k: statistics.median(v) for k, v in res.items() if v}
    out["schedule"] = schedule
    return out


def bench_spawn(n, reps):
    """n children with no readiness: launch -> every child has touched its file."""
    res = {"floor": [], "floor_process": [], "mcsup": []}
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as d:
            files = [f"{d}/w{i}" for i in range(n)]
            argv = [[CHILD, "--touch", f] for f in files]
            t0 = now()
            kids = [subprocess.Popen(a, stdout=subprocess.DEVNULL) for a in argv]
            res["floor"].append(wait_files(files) - t0)
            for k in kids:
                k.kill()
                k.wait()
            for f in files:
                os.unlink(f)
            if FLOOR:
                t0 = now()
                fl = start_floor(["spawn", CHILD, d, str(n)])
                res["floor_process"].append(wait_files(files) - t0)
                fl.wait()
                kill_tagged()
                for f in files:
                    os.unlink(f)
            procs = [proc_spec(f"w{i}", "worker", a) for i, a in enumerate(argv)]
            path = write_plan(d, plan(f"{d}/logs", procs))
            t0 = now()
            m = launch_mcsup(path)
            res["mcsup"].append(wait_files(files) - t0)
            stop(m)
        kill_tagged()
    return {k: statistics.median(v) for k, v in res.items() if v}


def bench_ready(n, reps):
    """n children, each ready by a file probe on the file it touches: launch -> n ready events."""
    schedule = default_schedule(MCSUP)
    res = []
    for _ in range(reps):
        with tempfile.TemporaryDirectory() as d:
            files = [f"{d}/w{i}" for i in range(n)]
            procs = []
            for i, f in enumerate(files):
                spec = proc_spec(f"w{i}", "worker", [CHILD, "--touch", f])
                spec["readiness"] = readiness({"type": "file", "path": f}, schedule)
                procs.append(spec)
            events = f"{d}/logs/bench.events.jsonl"
            path = write_plan(d, plan(f"{d}/logs", procs))
            t0 = now()
            m = launch_mcsup(path)
            end = t0 + 60
            while count_ready(events) < n:
                if now() > end:
                    raise RuntimeError(f"only {count_ready(events)} of {n} ready after 60 s")
                time.sleep(0.001)
            res.append(now() - t0)
            stop(m)
        kill_tagged()
    return {"mcsup": statistics.median(res)}


# ---------------------------------------------------------------------------------------------
def bench_start():
    res = {"floor": [], "mcsup": [], "supervisord": []}
    for _ in range(REPS):
        with tempfile.TemporaryDirectory() as d:
            files = [f"{d}/s{i}" for i in range(3)]
            argv = [[CHILD, "--touch", f] for f in files]
            # floor: the harness starts the chain itself
            t0 = now()
            kids = [subprocess.Popen(a, stdout=subprocess.DEVNULL) for a in argv]
            res["floor"].append(wait_files(files) - t0)
            for k in kids:
                k.kill()
                k.wait()
            for f in files:
                os.unlink(f)
            # mcsup: master <- store <- worker, ready at spawn
            procs = [proc_spec("master", "master", argv[0]),
                     proc_spec("store", "store", argv[1], ["master"], "SIGINT"),
                     proc_spec("worker", "worker", argv[2], ["store"])]
            path = write_plan(d, plan(f"{d}/logs", procs))
            t0 = now()
            m = launch_mcsup(path)
            res["mcsup"].append(wait_files(files) - t0)
            stop(m)
            for f in files:
                os.unlink(f)
            if SUPERVISORD:
                conf = supervisord_conf(d, [(f"s{i}", a) for i, a in enumerate(argv)])
                t0 = now()
                s = start_supervisord(conf)
                res["supervisord"].append(wait_files(files) - t0)
                stop(s)
        kill_tagged()
    return {k: statistics.median(v) for k, v in res.items() if v}


def bench_teardown(n=16, with_supervisord=True):
    res = {"floor": [], "mcsup": [], "supervisord": []}
    for _ in range(max(3, REPS // 2)):
        with tempfile.TemporaryDirectory() as d:
            files = [f"{d}/w{i}" for i in range(n)]
            argv = [[CHILD, "--touch", f] for f in files]
            kids = [subprocess.Popen(a, stdout=subprocess.DEVNULL) for a in argv]
            wait_files(files)
            t0 = now()
            for k in kids:
                k.send_signal(signal.SIGTERM)
            for k in kids:
                k.wait()
            res["floor"].append(now() - t0)
            for f in files:
                os.unlink(f)
            procs = [proc_spec(f"w{i}", "worker", a) for i, a in enumerate(argv)]
            m = start_mcsup(d, plan(f"{d}/logs", procs))
            wait_files(files)
            time.sleep(0.05)
            t0 = now()
            m.send_signal(signal.SIGTERM)
            m.wait()  # blocking waitpid: Popen.wait(timeout) polls with up to 50 ms sleeps
            res["mcsup"].append(now() - t0)
            for f in files:
                os.unlink(f)
            if SUPERVISORD and with_supervisord:
                conf = supervisord_conf(d, [(f"w{i}", a) for i, a in enumerate(argv)])
                s = start_supervisord(conf)
                wait_files(files)
                time.sleep(0.05)
                t0 = now()
                s.send_signal(signal.SIGTERM)
                s.wait()
                res["supervisord"].append(now() - t0)
        kill_tagged()
    return {k: statistics.median(v) for k, v in res.items() if v}


def bench_logs():
    res = {}
    expect = LINES * 100
    argv = [CHILD, "--lines", str(LINES), "--line-len", "100", "--exit-after", "0"]
    # mcsup_no_catalogue: the failure catalogue off (MCSUP_DIAGNOSE=0), to show what watching
    # every line for it costs (`mcsup` has it on, as users run it).
    runs = {"floor": [], "mcsup": [], "mcsup_console": [], "mcsup_no_catalogue": []}
    with tempfile.TemporaryDirectory() as d:
        p = plan(f"{d}/logs", [proc_spec("w", "worker", argv)])
        # Interleaved repetitions, medians: the machine's speed drifts over seconds.
        for _ in range(LOG_REPS):
            out = f"{d}/raw.out"
            t0 = now()
            subprocess.run(["sh", "-c", " ".join(argv) + f" | cat > {out}"], check=True)
            runs["floor"].append(now() - t0)
            assert os.path.getsize(out) == expect, os.path.getsize(out)
            os.unlink(out)
            for key, console, diagnose in [("mcsup", False, True), ("mcsup_console", True, True),
                                           ("mcsup_no_catalogue", False, False)]:
                shutil.rmtree(f"{d}/logs", ignore_errors=True)
                t0 = now()
                m = start_mcsup(d, p, console=console, diagnose=diagnose)
                m.wait()
                runs[key].append(now() - t0)
                size = os.path.getsize(f"{d}/logs/bench.w.log")
                assert size == expect, f"mcsup log has {size} bytes, expected {expect}"
        res.update({k: statistics.median(v) for k, v in runs.items()})
        if SUPERVISORD:
            conf = supervisord_conf(d, [("w", argv)], log_capture=True)
            t0 = now()
            s = start_supervisord(conf)
            end = t0 + 120
            path = f"{d}/w.out"
            while now() < end and (not os.path.exists(path) or os.path.getsize(path) < expect):
                time.sleep(0.005)
            res["supervisord"] = now() - t0 if os.path.exists(path) and os.path.getsize(path) >= expect else None
            stop(s)
    kill_tagged()
    return res


def cpu_and_switches(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime (all threads)
    switches = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/status") as f:
            for line in f:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
    return ticks, switches


def rss_kb(pid):
    total = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                total = int(line.split()[1])
    return total


def bench_rss_idle():
    res = {}
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(f"{d}/m")
        os.makedirs(f"{d}/s")
        files_m = [f"{d}/m/w{i}" for i in range(16)]
        files_s = [f"{d}/s/w{i}" for i in range(16)]
        procs = [proc_spec(f"w{i}", "worker", [CHILD, "--touch", f]) for i, f in enumerate(files_m)]
        m = start_mcsup(f"{d}/m", plan(f"{d}/m/logs", procs), console=True)
        s = None
        if SUPERVISORD:
            conf = supervisord_conf(f"{d}/s", [(f"w{i}", [CHILD, "--touch", f]) for i, f in enumerate(files_s)])
            s = start_supervisord(conf)
            wait_files(files_s)
        wait_files(files_m)
        time.sleep(0.5)
        res["mcsup_rss_kb"] = rss_kb(m.pid)
        if s:
            res["supervisord_rss_kb"] = rss_kb(s.pid)
        tick = os.sysconf("SC_CLK_TCK")
        before = {"mcsup": cpu_and_switches(m.pid)}
        if s:
            before["supervisord"] = cpu_and_switches(s.pid)
        time.sleep(IDLE_SECONDS)
        for name, p in [("mcsup", m), ("supervisord", s)]:
            if p is None:
                continue
            t, w = cpu_and_switches(p.pid)
            res[f"{name}_idle_cpu_ms"] = (t - before[name][0]) * 1000 / tick
            res[f"{name}_idle_wakeups"] = w - before[name][1]
        stop(m)
        if s:
            stop(s)
    kill_tagged()
    return res


def print_gated_chain(gc):
    print(f"   floor (harness gating)  {ms(gc['floor'])}")
    print(f"   mcsup                   {ms(gc['mcsup'])}")
    print(f"   mcsup / floor = {ratio(gc['mcsup'], gc['floor']):.2f} (target <= 1.1)")
    if gc.get("floor_process"):
        print(f"   process floor (a Rust program gating the chain, started like mcsup) "
              f"{ms(gc['floor_process'])}: mcsup / process floor = "
              f"{ratio(gc['mcsup'], gc['floor_process']):.2f}; the process floor itself is "
              f"x{ratio(gc['floor_process'], gc['floor']):.2f} the harness floor")
    if gc.get("mcsup_inside"):
        print(f"   mcsup from its own start to c ready (events t_ms) {ms(gc['mcsup_inside'])}: "
              f"x{ratio(gc['mcsup_inside'], gc['floor']):.2f} of the floor; starting the mcsup "
              f"process alone (`mcsup --version`) takes {ms(gc['mcsup_exec'])}")


def fs_type(path):
    """The file system type of the mount holding `path` (from /proc/self/mounts)."""
    best, kind = "", "unknown"
    path = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        for line in f:
            _, mnt, fstype, *_ = line.split()
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best, kind = mnt, fstype
    return kind


def ratio(a, b):
    return a / b if b else float("nan")


def median_runs(commands, reps):
    """The median wall time of `reps` runs of each command (name -> argv), stdout discarded."""
    out = {}
    for name, argv in commands.items():
        times = []
        for _ in range(reps):
            t0 = now()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            times.append(now() - t0)
        out[name] = statistics.median(times)
    return out


def bench_job_view(reps=REPS):
    """`status --job`, `timeline` and `why` on a 128-node x 16-process job's directory (built by
    tests/py/scaled_job.py from a real job's files), against reading those files with `cat`: the
    floor of a process that reads the whole directory. Median wall time of `reps` runs each."""
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with tempfile.TemporaryDirectory() as d:
        job = os.path.join(d, "job")
        subprocess.run([sys.executable, os.path.join(repo, "tests", "py", "scaled_job.py"),
                        os.path.join(repo, "tests", "fixtures", "real-job-1p2d-oom"), job],
                       check=True)
        files = sorted(os.path.join(job, f) for f in os.listdir(job))
        page = os.path.join(d, "timeline.html")
        commands = {
            "cat": ["cat", *files],
            "status_job": [MCSUP, "status", "--job", job],
            "timeline": [MCSUP, "timeline", job, "-o", page],
            "why": [MCSUP, "why", job],
        }
        out = median_runs(commands, reps)
        out["files"] = len(files)
        out["bytes"] = sum(os.path.getsize(f) for f in files)
        out["page_bytes"] = os.path.getsize(page)
        return out


def bench_many_failures(reps=REPS, processes=20_000):
    """`why` and `timeline` on one node whose `processes` processes each were spawned and failed
    (crafted events: the shape that made the story's per-failure scan quadratic), against `cat`
    of the file. Median wall time of `reps` runs each."""
    with tempfile.TemporaryDirectory() as d:
        job = os.path.join(d, "job")
        os.makedirs(job)
        events = os.path.join(job, "n1.events.jsonl")
        with open(events, "w") as f:
            for i in range(processes):
                f.write(json.dumps({"ts_ms": 1000 + i, "t_ms": i, "node": "n1", "process": f"p{i}",
                                    "event": "spawned", "pid": 10 + i}) + "\n")
                f.write(json.dumps({"ts_ms": 60_000 + i, "t_ms": 59_000 + i, "node": "n1",
                                    "process": f"p{i}", "event": "failed", "exit_code": 1}) + "\n")
        page = os.path.join(d, "timeline.html")
        commands = {
            "cat": ["cat", events],
            "why": [MCSUP, "why", job],
            "timeline": [MCSUP, "timeline", job, "-o", page],
        }
        out = median_runs(commands, reps)
        out["processes"] = processes
        return out


def main():
    become_subreaper()
    tmp = tempfile.gettempdir()
    print(f"mcsup supervisor benchmark: {os.cpu_count()} cores, reps={REPS}, "
          f"supervisord={'yes' if SUPERVISORD else 'not installed'}, working directories in "
          f"{tmp} ({fs_type(tmp)})")
    results = {}
    st = bench_start()
    results["start_chain_ungated"] = st
    print("\n1. start of a 3-service chain of instantly-ready services, ungated (median)")
    for k, v in st.items():
        print(f"   {k:12} {ms(v)}")
    if "supervisord" in st:
        print(f"   supervisord / mcsup = {st['supervisord'] / st['mcsup']:.1f}x")

    with tempfile.TemporaryDirectory() as d:
        chains = [("gated_chain_python", "Python services (the issue's workload)",
                   bench_gated_chain(write_py_service(d))),
                  ("gated_chain", "mcsup-testchild, a native service that starts in about 1 ms",
                   bench_gated_chain())]
    for n, (key, what, gc) in enumerate(chains):
        results[key] = gc
        print(f"\n2{'ab'[n]}. 3-service chain a -> b -> c gated on TCP readiness, {what} (median; "
              f"probes every {gc['schedule']['interval_ms']} ms at most, backing off to "
              f"{gc['schedule']['max_interval_ms']} ms)")
        print_gated_chain(gc)

    print("\n3. scale (median)")
    scale = {}
    for n, reps in [(16, REPS), (SCALE, max(3, REPS // 3))]:
        sp = bench_spawn(n, reps)
        rd = bench_ready(n, reps)
        td = bench_teardown(n, with_supervisord=(n == 16))
        scale[n] = {"spawn": sp, "ready": rd, "teardown": td}
        print(f"   {n:3} children: spawn floor {ms(sp['floor'])}, mcsup {ms(sp['mcsup'])} "
              f"(x{ratio(sp['mcsup'], sp['floor']):.2f}, target <= 1.2"
              + (f"; process floor {ms(sp['floor_process'])}, x{ratio(sp['mcsup'], sp['floor_process']):.2f}"
                 f", itself x{ratio(sp['floor_process'], sp['floor']):.2f} the harness floor"
                 if sp.get("floor_process") else "")
              + "); all ready by file probes "
              f"{ms(rd['mcsup'])}; teardown floor {ms(td['floor'])}, mcsup {ms(td['mcsup'])}"
              + (f", supervisord {ms(td['supervisord'])}" if td.get("supervisord") else ""))
    small, big = scale[16], scale[SCALE]
    k = SCALE / 16
    growth = {m: ratio(big[m]["mcsup"], small[m]["mcsup"]) / k for m in ("spawn", "ready", "teardown")}
    print(f"   cost per child at {SCALE} / at 16: " + ", ".join(f"{m} {g:.2f}" for m, g in growth.items())
          + " (1.0 = linear)")
    results["scale"] = {str(n): v for n, v in scale.items()}
    results["scale_per_child_growth"] = growth

    lg = bench_logs()
    results["logs"] = lg
    mb = LINES * 100 / 1e6
    print(f"\n4. log capture: {LINES} lines of 100 B ({mb:.0f} MB; median of {LOG_REPS})")
    for key, v in lg.items():
        print(f"   {key:14} " + (f"{ms(v)}  ({mb / v:.0f} MB/s)" if v else "did not finish within 120 s"))
    print(f"   mcsup throughput = {lg['floor'] / lg['mcsup'] * 100:.0f}% of the raw pipe, "
          f"{lg['floor'] / lg['mcsup_console'] * 100:.0f}% with the console on (target >= 70%)")
    print(f"   the failure catalogue on / off: {lg['mcsup_no_catalogue'] / lg['mcsup'] * 100:.0f}% "
          f"of the throughput without it")

    ri = bench_rss_idle()
    results["rss_idle"] = ri
    print("\n5. RSS with 16 children")
    print(f"   mcsup        {ri['mcsup_rss_kb'] / 1024:.1f} MiB (target <= 6 MiB)")
    if "supervisord_rss_kb" in ri:
        print(f"   supervisord  {ri['supervisord_rss_kb'] / 1024:.1f} MiB")
    print(f"\n6. idle for {IDLE_SECONDS:.0f} s with 16 children (no probes configured)")
    for name in ["mcsup", "supervisord"]:
        if f"{name}_idle_cpu_ms" in ri:
            print(f"   {name:12} cpu {ri[name + '_idle_cpu_ms']:.0f} ms, wakeups (context switches) "
                  f"{ri[name + '_idle_wakeups']}")
    jv = bench_job_view()
    results["job_view_128_nodes"] = jv
    print(f"\n7. the job view of 128 nodes x 16 processes ({jv['files']} files, "
          f"{jv['bytes'] / 1e6:.1f} MB; median of {REPS})")
    for key in ["cat", "status_job", "timeline", "why"]:
        print(f"   {key:12} {ms(jv[key])}" + ("" if key == "cat" else
                                              f"  (x{ratio(jv[key], jv['cat']):.1f} reading the files with cat)"))
    print(f"   the timeline page: {jv['page_bytes'] / 1e6:.1f} MB")
    mf = bench_many_failures()
    results["job_view_many_failures"] = mf
    print(f"\n8. one node of {mf['processes']} processes that each failed (why and timeline; "
          f"median of {REPS})")
    for key in ["cat", "why", "timeline"]:
        print(f"   {key:12} {ms(mf[key])}" + ("" if key == "cat" else
                                              f"  (x{ratio(mf[key], mf['cat']):.1f} reading the file with cat)"))
    results["meta"] = {"date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(),
                       "idle_seconds": IDLE_SECONDS}
    results["logs"]["lines"] = LINES
    os.makedirs(os.path.dirname(os.path.abspath(JSON_OUT)), exist_ok=True)
    with open(JSON_OUT, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nJSON written to {os.path.abspath(JSON_OUT)}")


if __name__ == "__main__":
    try:
        main()
    finally:
        kill_tagged()
