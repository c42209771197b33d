#!/usr/bin/env python3
"""Regenerate tests/fixtures/mooncake_sizes.jsonl from the REAL Mooncake parser.

Each line is {"input": str, "bytes": int | null}: what mooncake.mooncake_config parses the
string to (after its non-negative check), or null when Mooncake rejects it. The Rust size parser
is tested against this table (tests/size_table.rs). Run with the project venv:

    .venv/bin/python scripts/gen-size-table.py
"""
import json
import pathlib
import random

from mooncake import mooncake_config as mc


def mooncake_bytes(s):
    try:
        v = mc._parse_segment_size(s)
    except (ValueError, OverflowError):
        return None
    return v if v >= 0 else None


CURATED = [
    "100gb", "400GB", "400gb", " 4 gb ", "1.5gb", "512mb", "512m", "16M", "1k", "2kb", "1t", "1tb",
    "0", "0gb", "1024", "1024b", "3355443200", "1e3", "1e3mb", "1_000", "0.5", "1.9", ".5gb",
    "5.gb", "+1gb", "-0", "", "  ", "gb", "b", "100gib", "100GiB", "100mib", "-1gb", "-1", "abc",
    "1.2.3gb", "1__0", "_1", "1_", "nan", "inf", "-inf", "1e", "e5", "0x10", "1 000", "1e400",
    "4g", "4G", "1.5GB", "4096mb", "16mb", "0.000001gb", "-0.0000000001", "1e-3gb", "1E3", "12 MB",
    "12\tmb", "\t3g", "1,5gb", "1.5 g b", "1gbb", "tb", "kb", "1kB", "1Kb", "7B", "9.99999999t",
    "１２gb", "٣gb", "1_0.0_1mb", "1._5", "1e+3k", "1e-1k", "infinity", "nangb", "infgb", "+inf",
]


def generated(n, seed=20261130):
    rnd = random.Random(seed)
    nums = ["0", "1", "7", "16", "100", "512", "1024", "3.5", "0.25", ".75", "1e2", "2E1", "1_024",
            "-3", "+8", "00012", "1.", "4096"]
    suffixes = ["", "b", "k", "kb", "m", "mb", "g", "gb", "t", "tb", "K", "KB", "Mb", "mB", "GB",
                "Tb", "gib", "ib", "x", "bytes"]
    spaces = ["", " ", "  ", "\t"]
    out = []
    for _ in range(n):
        s = rnd.choice(spaces) + rnd.choice(nums) + rnd.choice(spaces[:2]) + rnd.choice(suffixes) + rnd.choice(spaces)
        out.append(s)
    return out


def main():
    path = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "mooncake_sizes.jsonl"
    seen = set()
    rows = []
    for s in CURATED + generated(600):
        if s in seen:
            continue
        seen.add(s)
        rows.append({"input": s, "bytes": mooncake_bytes(s)})
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main()
