#!/usr/bin/env python3
"""Benchmark mcsup's supervisor against supervisord and the floors, on one process graph.

Run through scripts/bench-supervisor.sh (it builds the release binaries first). Measures, in
one run on this machine:
  1. start of a 3-service chain of instantly-ready services (launch -> all 3 running)
  2. teardown of 16 children (SIGTERM -> supervisor exited, children gone)
  3. log capture throughput: 2M lines of 100 B, vs a raw pipe into `cat`
  4. RSS of the supervisor with 16 children
  5. CPU time and wakeups (context switches) while idle for IDLE_SECONDS
"Floor" = the same children started/stopped/piped directly by this harness, without a
supervisor. Everything talks only to the local filesystem; no network.
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

MCSUP = os.environ["MCSUP_BIN"]
CHILD = os.environ["TESTCHILD_BIN"]
SUPERVISORD = shutil.which("supervisord")
REPS = int(os.environ.get("BENCH_REPS", "10"))
IDLE_SECONDS = float(os.environ.get("IDLE_SECONDS", "30"))
LINES = int(os.environ.get("BENCH_LINES", "2000000"))
TAG = "MCSUP_BENCH_TAG"


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


def start_mcsup(d, p, console=False):
    path = os.path.join(d, "plan.json")
    with open(path, "w") as f:
        json.dump(p, f)
    args = [MCSUP, "run", "--plan-file", path]
    if not console:
        args.append("--no-console")
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "MCSUP_LOG": "warn"})


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


def kill_tagged():
    """Leftovers of the bench (by env tag), so runs cannot disturb each other."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"{TAG}=1".encode() in f.read().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


def ms(x):
    return f"{x * 1000:.1f} ms"


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
            t0 = now()
            m = start_mcsup(d, plan(f"{d}/logs", procs))
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


def bench_teardown():
    res = {"floor": [], "mcsup": [], "supervisord": []}
    for _ in range(max(3, REPS // 2)):
        with tempfile.TemporaryDirectory() as d:
            files = [f"{d}/w{i}" for i in range(16)]
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
            if SUPERVISORD:
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
    with tempfile.TemporaryDirectory() as d:
        out = f"{d}/raw.out"
        t0 = now()
        subprocess.run(["sh", "-c", " ".join(argv) + f" | cat > {out}"], check=True)
        res["floor"] = now() - t0
        assert os.path.getsize(out) == expect, os.path.getsize(out)
        os.unlink(out)
        p = plan(f"{d}/logs", [proc_spec("w", "worker", argv)])
        t0 = now()
        m = start_mcsup(d, p)
        m.wait()
        res["mcsup"] = now() - t0
        size = os.path.getsize(f"{d}/logs/bench.w.log")
        assert size == expect, f"mcsup log has {size} bytes, expected {expect}"
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


def main():
    print(f"mcsup supervisor benchmark: {os.cpu_count()} cores, reps={REPS}, "
          f"supervisord={'yes' if SUPERVISORD else 'not installed'}")
    st = bench_start()
    print("\n1. start of a 3-service chain of instantly-ready services (median)")
    for k, v in st.items():
        print(f"   {k:12} {ms(v)}")
    print(f"   mcsup - floor = {ms(st['mcsup'] - st['floor'])} (target <= 5 ms)")
    if "supervisord" in st:
        print(f"   supervisord / mcsup = {st['supervisord'] / st['mcsup']:.1f}x")
    td = bench_teardown()
    print("\n2. teardown of 16 children (SIGTERM -> all gone, median)")
    for k, v in td.items():
        print(f"   {k:12} {ms(v)}")
    print(f"   mcsup - floor = {ms(td['mcsup'] - td['floor'])} (target <= 10 ms)")
    if "supervisord" in td:
        print(f"   supervisord / mcsup = {td['supervisord'] / td['mcsup']:.1f}x")
    lg = bench_logs()
    mb = LINES * 100 / 1e6
    print(f"\n3. log capture: {LINES} lines of 100 B ({mb:.0f} MB)")
    for k, v in lg.items():
        print(f"   {k:12} " + (f"{ms(v)}  ({mb / v:.0f} MB/s)" if v else "did not finish within 120 s"))
    print(f"   mcsup throughput = {lg['floor'] / lg['mcsup'] * 100:.0f}% of the raw pipe (target >= 70%)")
    ri = bench_rss_idle()
    print("\n4. RSS with 16 children")
    print(f"   mcsup        {ri['mcsup_rss_kb'] / 1024:.1f} MiB (target <= 6 MiB)")
    if "supervisord_rss_kb" in ri:
        print(f"   supervisord  {ri['supervisord_rss_kb'] / 1024:.1f} MiB")
    print(f"\n5. idle for {IDLE_SECONDS:.0f} s with 16 children (no probes configured)")
    for name in ["mcsup", "supervisord"]:
        if f"{name}_idle_cpu_ms" in ri:
            print(f"   {name:12} cpu {ri[name + '_idle_cpu_ms']:.0f} ms, wakeups (context switches) "
                  f"{ri[name + '_idle_wakeups']}")
    print("\nJSON " + json.dumps({"start": st, "teardown": td, "logs": lg, "rss_idle": ri}))


if __name__ == "__main__":
    try:
        main()
    finally:
        kill_tagged()
