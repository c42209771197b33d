"""A large job's log directory, built from a real run's files: mcsup's job view (status --job,
timeline, why) at 128 nodes x 16 processes without 128 nodes.

The source is tests/fixtures/real-job-1p2d-oom: the events and status files of the local Slurm
job `a_worker_dying_of_cuda_oom_is_named_first_and_the_other_nodes_drained` wrote (a 1P2D Dynamo
mocker job: n1 runs etcd, NATS and the frontend; n2 a prefill worker; n3 a decode worker that
prints a CUDA out-of-memory error and exits; n4 a decode worker drained because of it).

The copy: node 1 is n1 as it ran; a quarter of the other nodes are n2 (prefill), the rest n4
(decode, drained), and one of them (`--failing`) is n3. Each worker node holds `--per-node`
processes: its two gates and its worker repeated, each copy a worker of its own (named with a
job-wide index, started a few ms after the one before, stopped with the others); on the failing
node the first copy is n3's failing worker and the others n4's drained ones. Each node is shifted a few ms later than
the one before (never before the failure, so the story stays the real one). Every line is a
line mcsup wrote; only names, pids and times change.

    python3 scaled_job.py SOURCE_DIR OUT_DIR [--nodes 128] [--per-node 16] [--failing 77]
"""
import argparse
import json
import os
import re

NODE_SHIFT_MS = 3
COPY_SHIFT_MS = 7


def load_events(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_status(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def shifted(value, by):
    return None if value is None else value + by


def worker_name(name, index):
    """`mocker-decode-1` -> `mocker-decode-<index>`."""
    return re.sub(r"\d+$", str(index), name)


def copy_events(events, node, rename, shift, pid_offset, stagger=0, teardown_by=0):
    """The events of the processes in `rename` (old name -> new name), in their order, moved to
    `node` and `shift` ms later; the start-up (what comes before the node's teardown) `stagger`
    ms later still, the teardown `teardown_by` ms. Names in details follow the renaming."""
    teardown = next(
        (e["ts_ms"] for e in events if e["event"] == "shutdown-requested"), float("inf")
    )
    out = []
    for e in events:
        if e["process"] not in rename:
            continue
        e = dict(e)
        by = shift + (stagger if e["ts_ms"] < teardown else teardown_by)
        e["node"] = node
        e["process"] = rename[e["process"]]
        e["ts_ms"] += by
        e["t_ms"] += by
        if e.get("pid") is not None:
            e["pid"] += pid_offset
        if e.get("detail"):
            for old, new in rename.items():
                e["detail"] = e["detail"].replace(f"`{old}`", f"`{new}`")
        out.append(e)
    return out


def teardown_at(events):
    return next(e["ts_ms"] for e in events if e["event"] == "shutdown-requested")


def copy_unit(u, name, shift, pid_offset):
    u = dict(u)
    u["name"] = name
    for k in ("spawned_ts_ms", "state_since_ts_ms", "first_ready_ts_ms"):
        if k in u:
            u[k] = shifted(u[k], shift)
    if u.get("pid") is not None:
        u["pid"] += pid_offset
    return u


def build(source, out, nodes, per_node, failing):
    src = {
        n: (
            load_events(os.path.join(source, f"{n}.events.jsonl")),
            load_status(os.path.join(source, f"{n}.status.json")),
        )
        for n in ("n1", "n2", "n3", "n4")
    }
    os.makedirs(out, mode=0o700, exist_ok=True)
    prefill_nodes = max(1, (nodes - 1) // 4)
    worker_index = {"prefill": 0, "decode": 0}

    def write(node, events, status):
        # Stable: events of one time keep the order they were written in.
        events.sort(key=lambda e: e["ts_ms"])
        with open(os.path.join(out, f"{node}.events.jsonl"), "w", encoding="utf-8") as f:
            for e in events:
                f.write(json.dumps(e, separators=(",", ":")) + "\n")
        with open(os.path.join(out, f"{node}.status.json"), "w", encoding="utf-8") as f:
            json.dump(status, f, indent=2)

    # Node 1: the infra and frontend node as it ran.
    events, status = src["n1"]
    write("n1", [dict(e) for e in events], status)
    for k in range(2, nodes + 1):
        node = f"n{k}"
        role = "prefill" if k <= prefill_nodes + 1 else "decode"
        base = "n2" if role == "prefill" else "n4"
        shift = 0 if k == failing else k * NODE_SHIFT_MS
        base_events, base_status = src[base]
        gates = [u for u in base_status["units"] if u["kind"] == "gate"]
        worker = next(u for u in base_status["units"] if u["kind"] == "worker")
        # The node's own lines (mcsup's, the gates'): from n3 on the failing node.
        own_events, own_status = src["n3"] if k == failing else (base_events, base_status)
        keep = {"mcsup": "mcsup", **{g["name"]: g["name"] for g in gates}}
        units = [copy_unit(g, g["name"], shift, 0) for g in gates]
        reason = own_status.get("reason")
        if k == failing:
            # The failing worker in the same pass as mcsup's lines: their order is the file's.
            failed = next(u for u in own_status["units"] if u["kind"] == "worker")
            name = worker_name(worker["name"], worker_index[role])
            worker_index[role] += 1
            keep[failed["name"]] = name
            units.append(copy_unit(failed, name, shift, 0))
            reason = reason.replace(f"`{failed['name']}`", f"`{name}`")
        events = copy_events(own_events, node, keep, shift, 0)
        # The copies stop when this node's mcsup tears down (on the failing node, when n3's did).
        teardown_by = teardown_at(own_events) - teardown_at(base_events)
        for j in range(len(units) - len(gates), per_node - len(gates)):
            name = worker_name(worker["name"], worker_index[role])
            worker_index[role] += 1
            stagger = j * COPY_SHIFT_MS
            events += copy_events(
                base_events, node, {worker["name"]: name}, shift, 1000 * k + j, stagger, teardown_by
            )
            units.append(copy_unit(worker, name, shift + stagger, 1000 * k + j))
        # mcsup finishes after the last of its processes is gone.
        last = max(e["ts_ms"] for e in events)
        for e in events:
            if e["process"] == "mcsup" and e["event"] == "finished" and e["ts_ms"] <= last:
                e["t_ms"] += last + 1 - e["ts_ms"]
                e["ts_ms"] = last + 1
        status = dict(own_status)
        status["node"] = node
        status["units"] = units
        status["reason"] = reason
        for key in ("started_ts_ms", "updated_ts_ms"):
            status[key] = shifted(status[key], shift)
        write(node, events, status)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source")
    ap.add_argument("out")
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--per-node", type=int, default=16)
    ap.add_argument("--failing", type=int, default=77)
    a = ap.parse_args()
    if not 3 <= a.per_node <= 1024 or not 3 <= a.nodes <= 4096 or not 2 <= a.failing <= a.nodes:
        ap.error("--nodes 3..4096, --per-node 3..1024, --failing 2..NODES")
    build(a.source, a.out, a.nodes, a.per_node, a.failing)


if __name__ == "__main__":
    main()
