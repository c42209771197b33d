#!/usr/bin/env python3
"""Capture the `worker_restarts.json` srtctl 2.0 writes for the restarts of one worker over two
nodes (issue 32): mcsup's file is checked against its shape.

It runs srtctl's own `WorkerSupervisor` (`src/srtctl/core/supervisor.py` of NVIDIA/srt-slurm
@16b71fff48b80d499350f3e9a4fd40dfe10b0eb3) through the scenario of
`tests/slurm_e2e.rs::a_worker_over_two_nodes_restarts_as_one_unit`: `decode[0]` over n2 and n3,
`restart: {policy: on-failure, max_restarts: 1, backoff_seconds: 1}`; its rank on n3 is killed
(exit 137), every rank is relaunched and ready again; killed again, the worker is given up.
What the supervisor calls around it is stood in for here, as srtctl's docstrings describe it:
the process registry and its processes, `list_step_ids`, `probe_http` (ready at once),
`worker_step_name` (`<mode>_<index>_<node>`), and the role's `RestartPolicy` (`enabled` unless
`never`; `on-failure` restarts a non-zero exit; backoff `backoff_seconds` doubling up to
`max_backoff_seconds`). The clock is the supervisor's own injectable one.

Writes tests/fixtures/srt-slurm-2/worker_restarts.srtctl.json with the times replaced by
`<time>` and the log directory by `/LOGS`.

Not run by the test suite: srt-slurm 2.0 is neither on PyPI nor in this machine's mirror. Its
supervisor.py, read through the stored index, goes at <dir>/srtctl/core/supervisor.py; then

    python3 scripts/capture/srtctl_worker_restarts.py <dir>
"""

import json
import re
import sys
import tempfile
import threading
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests/fixtures/srt-slurm-2/worker_restarts.srtctl.json"


class Proc:
    """A registry entry: one Slurm step of a worker (srtctl's `ManagedProcess`)."""

    def __init__(self, name, node, log_file):
        self.name = name
        self.node = node
        self.log_file = log_file
        self.exit_code = None
        self.supervised = False
        self.step_name = name
        log_file.write_text(f"{name}: a life\n")

    @property
    def is_running(self):
        return self.exit_code is None

    def request_stop(self, step_ids):
        pass

    def await_stop(self):
        # A sibling whose peer died leaves its collective with an error.
        self.exit_code = 1


class Registry:
    def __init__(self):
        self.procs = {}

    def get_process(self, name):
        return self.procs.get(name)

    def pop_process(self, name):
        return self.procs.pop(name, None)

    def add_process(self, proc):
        self.procs[proc.name] = proc


class Policy:
    def __init__(self, policy, max_restarts, backoff_seconds, max_backoff_seconds=300.0):
        self.policy = policy
        self.max_restarts = max_restarts
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds

    @property
    def enabled(self):
        return self.policy != "never"

    def restarts_on(self, exit_code):
        return self.policy == "always" or (self.policy == "on-failure" and exit_code != 0)

    def backoff(self, n):
        return min(self.backoff_seconds * 2 ** (n - 1), self.max_backoff_seconds)


def install_stand_ins():
    processes = types.ModuleType("srtctl.core.processes")
    processes.ManagedProcess = Proc
    processes.ProcessRegistry = Registry
    processes.list_step_ids = lambda: {}
    readiness = types.ModuleType("srtctl.core.readiness")
    readiness.probe_http = lambda host, port, path, status, request_timeout=None: True
    stage = types.ModuleType("srtctl.cli.mixins.worker_stage")
    stage.worker_step_name = lambda mode, index, node, engine_id=0: f"{mode}_{index}_{node}" + (
        f"_e{engine_id}" if engine_id else ""
    )
    for name, mod in [
        ("srtctl.core.processes", processes),
        ("srtctl.core.readiness", readiness),
        ("srtctl.cli.mixins.worker_stage", stage),
    ]:
        sys.modules[name] = mod


def main(src):
    sys.path.insert(0, str(Path(src).resolve()))
    install_stand_ins()
    from srtctl.core.supervisor import WorkerSupervisor

    logs = Path(tempfile.mkdtemp())
    registry = Registry()
    lives = {"n": 0}

    def launch(nodes):
        lives["n"] += 1
        out = []
        for node in nodes:
            name = f"decode_0_{node}"
            out.append(Proc(name, node, logs / f"{name}.out"))
        return out

    class Launcher:
        def relaunch_endpoint(self, endpoint_processes, *, attempt):
            return launch([p.node for p in endpoint_processes])

        def worker_ready_probe(self, endpoint_processes):
            return ("n2", 30000)

    now = {"t": 0.0}
    sup = WorkerSupervisor(
        registry=registry,
        stop_event=threading.Event(),
        launcher=Launcher(),
        log_dir=logs,
        probe_interval=0.5,
        clock=lambda: now["t"],
    )
    first = launch(["n2", "n3"])
    for p in first:
        registry.add_process(p)
    groups = {("decode", 0): [types.SimpleNamespace(node="n2"), types.SimpleNamespace(node="n3")]}
    sup.track(groups, [p.name for p in first], lambda mode: Policy("on-failure", 1, 1.0))

    registry.get_process("decode_0_n3").exit_code = 137
    sup.reconcile()  # scheduled
    now["t"] = 1.0
    sup.reconcile()  # relaunched
    now["t"] = 1.6
    sup.reconcile()  # ready
    registry.get_process("decode_0_n3").exit_code = 137
    sup.reconcile()  # exhausted

    text = (logs / "worker_restarts.json").read_text()
    text = text.replace(str(logs), "/LOGS")
    text = re.sub(r'"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"', '"<time>"', text)
    json.loads(text)
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(REPO)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
