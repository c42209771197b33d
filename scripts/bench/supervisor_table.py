"""The README's supervisor table, from scripts/bench-supervisor.sh's JSON: every row with mcsup's
ratio against its floors and supervisord, so a row that slips shows in the README's diff of the
next run, and, given an earlier JSON, the rows that moved.

    python3 scripts/bench/supervisor_table.py [RESULT.json] [--against EARLIER.json] [--readme README.md]

Prints the table (markdown). `--readme` rewrites the table between the README's markers
(`<!-- supervisor-table -->` and `<!-- /supervisor-table -->`). `--against` lists each figure of
mcsup that is more than 10 % worse than in the earlier run (ratios against the floors of the same
run, so a slower machine moves nothing). Python 3 standard library only.
"""

import argparse
import json
import os
import sys

BEGIN = "<!-- supervisor-table -->"
END = "<!-- /supervisor-table -->"
# How much worse a ratio may get before --against names it.
SLIP = 1.10


def ms(seconds):
    return f"{seconds * 1000:,.1f} ms"


def x(a, b):
    return f"{a / b:.2f}×"


def mbs(seconds, lines):
    return f"{lines * 100 / seconds / 1e6:,.0f} MB/s"


def rows(r):
    """(metric, harness floor, process floor, mcsup, supervisord) per row, as text."""
    out = []
    st = r["start_chain_ungated"]
    out.append(("start a 3-service chain of instantly-ready services, ungated", ms(st["floor"]), "",
                f"{ms(st['mcsup'])} ({x(st['mcsup'], st['floor'])})",
                ms(st["supervisord"]) if "supervisord" in st else ""))
    for key, what in [("gated_chain_python", "a 3-service chain of Python services listening at "
                       "once, gated on TCP readiness (b when a accepts, c when b does)"),
                      ("gated_chain", "the same chain of a native service that listens about 1 ms "
                       "after its start")]:
        g = r[key]
        out.append((what, ms(g["floor"]), ms(g["floor_process"]),
                    f"{ms(g['mcsup'])} ({x(g['mcsup'], g['floor'])} / {x(g['mcsup'], g['floor_process'])}); "
                    f"{ms(g['mcsup_inside'])} of it from mcsup's own start", "(no gating)"))
    big = max(r["scale"], key=int)
    s16, s256 = r["scale"]["16"], r["scale"][big]
    out.append((f"spawn 16 / {big} children",
                f"{ms(s16['spawn']['floor'])} / {ms(s256['spawn']['floor'])}",
                f"{ms(s16['spawn']['floor_process'])} / {ms(s256['spawn']['floor_process'])}",
                f"{ms(s16['spawn']['mcsup'])} / {ms(s256['spawn']['mcsup'])} "
                f"({x(s16['spawn']['mcsup'], s16['spawn']['floor'])} / "
                f"{x(s16['spawn']['mcsup'], s16['spawn']['floor_process'])} and "
                f"{x(s256['spawn']['mcsup'], s256['spawn']['floor'])} / "
                f"{x(s256['spawn']['mcsup'], s256['spawn']['floor_process'])}; per-child cost at {big} "
                f"÷ at 16: {r['scale_per_child_growth']['spawn']:.2f})", ""))
    out.append((f"{big} children each ready by a file probe", "", "", ms(s256["ready"]["mcsup"]), ""))
    sup16 = s16["teardown"].get("supervisord")
    out.append((f"teardown of 16 / {big} children (SIGTERM to all gone)",
                f"{ms(s16['teardown']['floor'])} / {ms(s256['teardown']['floor'])}", "",
                f"{ms(s16['teardown']['mcsup'])} / {ms(s256['teardown']['mcsup'])}",
                f"{ms(sup16)} (16)" if sup16 else ""))
    lg = r["logs"]
    lines = lg.get("lines", 2_000_000)
    out.append((f"log capture, {lines / 1e6:g} M lines of 100 B to the per-process file, console off / on",
                mbs(lg["floor"], lines), "",
                f"{mbs(lg['mcsup'], lines)} / {mbs(lg['mcsup_console'], lines)} "
                f"({lg['floor'] / lg['mcsup']:.0%} / {lg['floor'] / lg['mcsup_console']:.0%} of the floor)",
                mbs(lg["supervisord"], lines) if "supervisord" in lg else ""))
    ri = r["rss_idle"]
    out.append(("RSS with 16 children", "", "", f"{ri['mcsup_rss_kb'] / 1024:.1f} MiB",
                f"{ri['supervisord_rss_kb'] / 1024:.1f} MiB" if "supervisord_rss_kb" in ri else ""))
    idle = r.get("meta", {}).get("idle_seconds", 30)
    out.append((f"idle {idle:g} s with 16 children: CPU / wakeups", "", "",
                f"{ri['mcsup_idle_cpu_ms']:.0f} ms / {ri['mcsup_idle_wakeups']}",
                f"{ri['supervisord_idle_cpu_ms']:.0f} ms / {ri['supervisord_idle_wakeups']}"
                if "supervisord_idle_cpu_ms" in ri else ""))
    return out


def table(r):
    meta = r.get("meta", {})
    head = f"metric ({meta.get('cores', '?')} cores, {meta.get('date', 'undated')}; timings are medians)"
    text = [f"| {head} | harness floor | process floor | mcsup | supervisord |",
            "|---|---|---|---|---|"]
    text += ["| " + " | ".join(row) + " |" for row in rows(r)]
    return "\n".join(text) + "\n"


def figures(r):
    """mcsup's figures as ratios (bigger is worse), by name."""
    f = {}
    f["ungated chain / floor"] = r["start_chain_ungated"]["mcsup"] / r["start_chain_ungated"]["floor"]
    for key in ["gated_chain_python", "gated_chain"]:
        f[f"{key} / process floor"] = r[key]["mcsup"] / r[key]["floor_process"]
    for n in r["scale"]:
        s = r["scale"][n]
        f[f"spawn {n} / process floor"] = s["spawn"]["mcsup"] / s["spawn"]["floor_process"]
        f[f"teardown {n} / floor"] = s["teardown"]["mcsup"] / s["teardown"]["floor"]
    f["log capture, floor's throughput / mcsup's"] = r["logs"]["mcsup"] / r["logs"]["floor"]
    f["log capture with the console, floor's / mcsup's"] = r["logs"]["mcsup_console"] / r["logs"]["floor"]
    f["RSS, MiB"] = r["rss_idle"]["mcsup_rss_kb"] / 1024
    idle = r.get("meta", {}).get("idle_seconds", 30)
    f["idle CPU, ms per 30 s (+10: one clock tick)"] = r["rss_idle"]["mcsup_idle_cpu_ms"] * 30 / idle + 10
    return f


def slipped(now, before):
    """The figures more than SLIP worse than before: (name, before, now)."""
    a, b = figures(now), figures(before)
    return [(k, b[k], a[k]) for k in a if k in b and a[k] > b[k] * SLIP]


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("result", nargs="?",
                    default=os.path.join(here, "..", "..", "target", "bench-supervisor.json"))
    ap.add_argument("--against")
    ap.add_argument("--readme")
    args = ap.parse_args()
    with open(args.result) as f:
        r = json.load(f)
    text = table(r)
    print(text, end="")
    if args.readme:
        with open(args.readme) as f:
            readme = f.read()
        if BEGIN not in readme or END not in readme:
            sys.exit(f"{args.readme}: no {BEGIN} ... {END} markers around the table")
        start = readme.index(BEGIN) + len(BEGIN)
        end = readme.index(END)
        with open(args.readme, "w") as f:
            f.write(readme[:start] + "\n" + text + readme[end:])
        print(f"{args.readme}: table rewritten", file=sys.stderr)
    if args.against:
        with open(args.against) as f:
            before = json.load(f)
        moved = slipped(r, before)
        for name, b, a in moved:
            print(f"SLIPPED: {name}: {b:.2f} -> {a:.2f}")
        if not moved:
            print(f"no figure more than {SLIP - 1:.0%} worse than in {args.against}")


if __name__ == "__main__":
    main()
