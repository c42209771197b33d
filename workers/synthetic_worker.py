#!/usr/bin/env python3
"""Synthetic inference worker for mcsup's local recipe.

It behaves like an SGLang/vLLM worker using the Mooncake store as its KV-cache tier, without a
GPU or a model: it joins the Mooncake cluster as a client that contributes NO memory of its own
(global segment 0), PUTs KV-cache-block-sized values into the segments of the standalone store
services, GETs them back and verifies their content, and reports throughput.

Configuration comes from the environment variables SGLang's Mooncake backend reads:
  MOONCAKE_MASTER               master RPC address host:port (required)
  MOONCAKE_TE_META_DATA_SERVER  metadata server, e.g. http://127.0.0.1:8080/metadata
                                (default P2PHANDSHAKE)
  MOONCAKE_LOCAL_HOSTNAME       this worker's address as seen by peers (default localhost)
  MOONCAKE_PROTOCOL             tcp | rdma ... (default tcp)
  MOONCAKE_DEVICE               RDMA device list (default "")
  MOONCAKE_GLOBAL_SEGMENT_SIZE  DRAM this process contributes; must be 0 for a worker
  MOONCAKE_LOCAL_BUFFER_SIZE    client staging buffer (default 16mb); a value larger than it
                                cannot be put, so --block-size must not exceed it
Sizes are Mooncake size strings: powers of 1024, suffixes kb mb gb tb k m g t b, fractions ok.

Each pass over the --blocks keys writes a new generation: the worker removes its previous value
(force, since Mooncake keys are write-once and gets hold a lease), puts the new one, gets it
back and checks it byte for byte. Values carry a 16-byte header (magic, generation, length) and
a body derived from key+generation, so any reader (--read-prefix) can verify a peer's blocks.

Output (stdout, line-buffered), one line each, all prefixed "synthetic-worker <name>: ":
  READY ...    once setup succeeded and the first put/get round-tripped (log-line probe)
  REPORT ...   every --report-every seconds
  SUMMARY ...  at exit
Exit codes: 0 = stopped by SIGTERM/SIGINT, or finished (--duration / --exit-after-ops) without
errors; 1 = finished with errors or too many consecutive errors, or Mooncake's setup() hung past
--connect-timeout + 5 s (stderr then shows "Timeout (h:mm:ss)!" and a traceback);
2 = bad configuration; 3 = could not connect / set up within --connect-timeout;
4 = first round trip failed.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import ipaddress
import math
import os
import signal
import socket
import struct
import sys
import threading
import time
from urllib.parse import urlparse

PROG = "synthetic-worker"

# Mooncake's own size parser (mooncake_config._parse_segment_size): suffixes tried in this order.
_SIZE_SUFFIXES = (
    ("kb", 1024),
    ("mb", 1024**2),
    ("gb", 1024**3),
    ("tb", 1024**4),
    ("k", 1024),
    ("m", 1024**2),
    ("g", 1024**3),
    ("t", 1024**4),
    ("b", 1),
)

# Value layout: 16-byte header (magic, generation, total length) + body derived from key+gen.
_MAGIC = b"MCSW"
_HEADER = struct.Struct("<4sQI")  # magic, generation, value length
_PATTERN_UNIT = 4096  # body = a 4 KiB pseudo-random unit (SHAKE-256 of key+gen), repeated

# One setup() attempt with an unreachable master takes ~4.4 s per internal retry (measured with
# mooncake-transfer-engine-non-cuda 0.3.13.post1); used to bound MC_STORE_CLIENT_SETUP_RETRIES.
_SETUP_RETRY_SECONDS = 4.5
# Past --connect-timeout + this, a setup() stuck inside Mooncake is ended by a hard watchdog.
_SETUP_GRACE_SECONDS = 5.0


def parse_size(value: str) -> int:
    """Parse a Mooncake size string (1024-based), exactly like mooncake_config does."""
    s = str(value).strip().lower()
    if not s:
        raise ValueError("empty size")
    for suffix, mult in _SIZE_SUFFIXES:
        if s.endswith(suffix):
            num = s[: -len(suffix)].strip()
            if not num:
                raise ValueError(f"missing number before {suffix!r} in {value!r}")
            n = int(float(num) * mult)
            break
    else:
        n = int(float(s))
    if n < 0:
        raise ValueError(f"negative size {value!r}")
    return n


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n}B"  # unreachable


class Config:
    """Worker configuration resolved from the environment (SGLang's variable names)."""

    def __init__(self, env: dict[str, str]):
        self.master = env.get("MOONCAKE_MASTER", "").strip()
        self.metadata_server = env.get("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE").strip()
        self.local_hostname = env.get("MOONCAKE_LOCAL_HOSTNAME", "localhost").strip()
        self.protocol = env.get("MOONCAKE_PROTOCOL", "tcp").strip().lower() or "tcp"
        self.device = env.get("MOONCAKE_DEVICE", "")
        self.global_segment_size_raw = env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE", "0")
        self.local_buffer_size_raw = env.get("MOONCAKE_LOCAL_BUFFER_SIZE", "16mb")
        if not self.master:
            raise ValueError("MOONCAKE_MASTER is not set (expected host:port of the master RPC)")
        self.master_host, self.master_port = split_host_port(self.master, "MOONCAKE_MASTER")
        try:
            self.global_segment_size = parse_size(self.global_segment_size_raw)
        except ValueError as e:
            raise ValueError(f"MOONCAKE_GLOBAL_SEGMENT_SIZE: {e}") from None
        try:
            self.local_buffer_size = parse_size(self.local_buffer_size_raw)
        except ValueError as e:
            raise ValueError(f"MOONCAKE_LOCAL_BUFFER_SIZE: {e}") from None
        if self.local_buffer_size <= 0:
            raise ValueError("MOONCAKE_LOCAL_BUFFER_SIZE must be > 0")

    def endpoints_to_probe(self) -> list[tuple[str, str, int]]:
        """(label, host, port) of TCP endpoints that must accept before setup() can succeed."""
        eps = [("master", self.master_host, self.master_port)]
        u = urlparse(self.metadata_server)
        if u.scheme in ("http", "https") and u.hostname:
            eps.append(("metadata", u.hostname, u.port or (443 if u.scheme == "https" else 80)))
        return eps


def split_host_port(addr: str, what: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{what}={addr!r} is not host:port")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tcp_accepts(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Stats:
    """Counters for one reporting interval plus totals."""

    FIELDS = ("put_ops", "put_bytes", "put_s", "get_ops", "get_bytes", "get_s",
              "peer_ops", "peer_bytes", "peer_miss", "errors")

    def __init__(self):
        self.total = dict.fromkeys(self.FIELDS, 0)
        self.interval = dict.fromkeys(self.FIELDS, 0)

    def add(self, field: str, value=1):
        self.total[field] += value
        self.interval[field] += value

    def ops(self) -> int:
        return self.total["put_ops"] + self.total["get_ops"] + self.total["peer_ops"]

    @staticmethod
    def rate(nbytes: float, seconds: float) -> float:
        """MiB/s over the time actually spent inside put/get calls."""
        return nbytes / 1048576 / seconds if seconds > 0 else 0.0


class Worker:
    def __init__(self, args: argparse.Namespace, cfg: Config):
        self.args = args
        self.cfg = cfg
        self.name = args.name
        self.prefix = args.key_prefix if args.key_prefix is not None else f"{args.name}/"
        self.stop_event = threading.Event()
        self.stop_signal: str | None = None
        self.stats = Stats()
        self.store = None
        self.generation = 0
        self.cursor = 0
        self.consecutive_errors = 0
        self.error_lines = 0

    # ---------------------------------------------------------------- output
    def say(self, msg: str) -> None:
        print(f"{PROG} {self.name}: {msg}", flush=True)

    def complain(self, msg: str) -> None:
        """Error detail, rate-limited so a dead store cannot flood the log."""
        self.error_lines += 1
        if self.error_lines <= 20 or self.error_lines % 1000 == 0:
            suffix = "" if self.error_lines < 20 else f" (error line {self.error_lines}, rate-limited)"
            print(f"{PROG} {self.name}: ERROR {msg}{suffix}", file=sys.stderr, flush=True)

    # ---------------------------------------------------------------- signals
    def install_signal_handlers(self) -> None:
        def handler(signum, _frame):
            if self.stop_signal is None:
                self.stop_signal = signal.Signals(signum).name
            self.stop_event.set()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    # ---------------------------------------------------------------- values
    def key(self, prefix: str, index: int) -> str:
        return f"{prefix}blk{index:06d}"

    @staticmethod
    def make_value(key: str, generation: int, size: int) -> bytes:
        header = _HEADER.pack(_MAGIC, generation, size)
        unit = hashlib.shake_256(f"{key}\0{generation}".encode()).digest(_PATTERN_UNIT)
        body_len = size - _HEADER.size
        reps = body_len // _PATTERN_UNIT + 1
        return header + (unit * reps)[:body_len]

    @classmethod
    def check_value(cls, key: str, value: bytes, expect_size: int,
                    expect_gen: int | None = None) -> str | None:
        """Return None if value is what a worker wrote under key, else what is wrong."""
        if len(value) != expect_size:
            return f"length {len(value)} != {expect_size}"
        magic, gen, size = _HEADER.unpack_from(value)
        if magic != _MAGIC or size != expect_size:
            return f"bad header magic={magic!r} size={size}"
        if expect_gen is not None and gen != expect_gen:
            return f"generation {gen} != {expect_gen}"
        if value != cls.make_value(key, gen, size):
            return f"content mismatch (generation {gen})"
        return None

    # ---------------------------------------------------------------- setup
    def connect(self) -> int:
        """Set up the Mooncake client within --connect-timeout. Returns 0 or an exit code."""
        cfg, args = self.cfg, self.args
        deadline = time.monotonic() + args.connect_timeout

        # 1. Wait for the master (and HTTP metadata server) to accept TCP connections. setup()
        #    itself holds the GIL and retries internally for ~90 s, so probe first.
        for label, host, port in cfg.endpoints_to_probe():
            while not tcp_accepts(host, port, timeout=1.0):
                if self.stop_event.is_set():
                    return 0
                if time.monotonic() >= deadline:
                    self.say(f"FATAL {label} {host}:{port} not reachable after "
                             f"{args.connect_timeout:g}s (--connect-timeout)")
                    return 3
                self.stop_event.wait(0.5)

        # 2. Bound Mooncake's internal retry loop (MC_STORE_CLIENT_SETUP_RETRIES, default 20 x
        #    ~4.4 s when the master does not answer) by the time we have left.
        if "MC_STORE_CLIENT_SETUP_RETRIES" not in os.environ:
            remaining = max(deadline - time.monotonic(), 1.0)
            retries = max(1, math.floor(remaining / _SETUP_RETRY_SECONDS))
            os.environ["MC_STORE_CLIENT_SETUP_RETRIES"] = str(retries)

        from mooncake.store import MooncakeDistributedStore  # imported late: env above first

        # 3. setup() holds the GIL, so no Python thread or signal handler can interrupt it, and
        #    against a port that accepts TCP but never answers RPC each retry waits 30 s. The
        #    faulthandler watchdog is a C thread: it dumps tracebacks and _exit(1)s the process.
        hard_limit = max(deadline - time.monotonic(), 0.0) + _SETUP_GRACE_SECONDS
        self.say(f"calling Mooncake setup() (MC_STORE_CLIENT_SETUP_RETRIES="
                 f"{os.environ['MC_STORE_CLIENT_SETUP_RETRIES']}, hard limit {hard_limit:.0f}s)")
        faulthandler.dump_traceback_later(hard_limit, exit=True)
        try:
            return self._setup_attempts(MooncakeDistributedStore, deadline)
        finally:
            faulthandler.cancel_dump_traceback_later()

    def _setup_attempts(self, store_cls, deadline: float) -> int:
        cfg, args = self.cfg, self.args
        attempt = 0
        while True:
            attempt += 1
            store = store_cls()
            t0 = time.monotonic()
            rc = store.setup(cfg.local_hostname, cfg.metadata_server, cfg.global_segment_size,
                             cfg.local_buffer_size, cfg.protocol, cfg.device, cfg.master)
            if rc == 0:
                self.store = store
                self.say(f"setup ok in {time.monotonic() - t0:.3f}s (attempt {attempt})")
                return 0
            self.say(f"setup attempt {attempt} failed rc={rc} after {time.monotonic() - t0:.1f}s")
            if self.stop_event.is_set():
                return 0
            if time.monotonic() + 1.0 >= deadline:
                self.say(f"FATAL Mooncake setup failed (rc={rc}) within "
                         f"{args.connect_timeout:g}s (--connect-timeout)")
                return 3
            self.stop_event.wait(1.0)

    # ---------------------------------------------------------------- work
    def put(self, key: str, value: bytes) -> bool:
        t0 = time.perf_counter()
        rc = self.store.put(key, value)
        dt = time.perf_counter() - t0
        if rc != 0:
            self.complain(f"put {key} ({len(value)} B) rc={rc}")
            return False
        self.stats.add("put_ops")
        self.stats.add("put_bytes", len(value))
        self.stats.add("put_s", dt)
        return True

    def get(self, key: str) -> tuple[bytes, float]:
        t0 = time.perf_counter()
        value = self.store.get(key)
        return value, time.perf_counter() - t0

    def remove_stale(self, key: str) -> bool:
        """Drop the previous value of key. Mooncake keys are write-once: a put on an existing
        key returns 0 but keeps the OLD value, and remove() without force fails (-706) while a
        read lease (--default_kv_lease_ttl, granted by every get) is active."""
        rc = self.store.remove(key, True)
        if rc != 0 and self.store.is_exist(key) == 1:
            self.complain(f"remove {key} rc={rc}")
            return False
        return True

    def round_trip(self, index: int) -> bool:
        """Replace one own block, get it back, verify. Returns success."""
        key = self.key(self.prefix, index)
        value = self.make_value(key, self.generation, self.args.block_size)
        if not self.remove_stale(key) or not self.put(key, value):
            return False
        got, dt = self.get(key)
        if not got:
            self.complain(f"get {key}: missing right after put")
            return False
        problem = self.check_value(key, got, self.args.block_size, self.generation)
        if problem:
            self.complain(f"get {key}: {problem}")
            return False
        self.stats.add("get_ops")
        self.stats.add("get_bytes", len(got))
        self.stats.add("get_s", dt)
        return True

    def read_peer(self, index: int) -> bool:
        """Get a block written by the peer worker; a missing key is a miss, not an error."""
        key = self.key(self.args.read_prefix, index)
        got, dt = self.get(key)
        if not got:
            self.stats.add("peer_miss")
            return True
        problem = self.check_value(key, got, self.args.block_size)
        if problem:
            self.complain(f"peer get {key}: {problem}")
            return False
        self.stats.add("peer_ops")
        self.stats.add("peer_bytes", len(got))
        self.stats.add("get_s", dt)
        return True

    def record(self, ok: bool) -> None:
        if ok:
            self.consecutive_errors = 0
        else:
            self.stats.add("errors")
            self.consecutive_errors += 1

    def batch(self) -> None:
        for _ in range(self.args.batch):
            if self.stop_event.is_set() or self.done():
                return
            index = self.cursor
            self.record(self.round_trip(index))
            if self.args.read_prefix:
                self.record(self.read_peer(index))
            self.advance()

    def advance(self) -> None:
        """Move to the next key; a new pass over the keys writes a new generation."""
        self.cursor = (self.cursor + 1) % self.args.blocks
        if self.cursor == 0:
            self.generation += 1

    def done(self) -> bool:
        n = self.args.exit_after_ops
        return bool(n) and self.stats.ops() >= n

    def report(self, label: str, elapsed: float, counters: dict) -> None:
        c = counters
        put_rate = Stats.rate(c["put_bytes"], c["put_s"])
        get_rate = Stats.rate(c["get_bytes"] + c["peer_bytes"], c["get_s"])
        line = (f"{label} t={elapsed:.1f}s put_ops={c['put_ops']} put_bytes={c['put_bytes']} "
                f"put_MiBps={put_rate:.1f} get_ops={c['get_ops']} get_bytes={c['get_bytes']} "
                f"get_MiBps={get_rate:.1f}")
        if self.args.read_prefix:
            line += f" peer_get_ops={c['peer_ops']} peer_miss={c['peer_miss']}"
        line += f" errors={c['errors']}"
        self.say(line)

    def run(self) -> int:
        args, cfg = self.args, self.cfg
        self.install_signal_handlers()

        rc = self.connect()
        if rc:
            return rc
        if self.store is None or self.stop_event.is_set():
            return self.shutdown(time.monotonic(), stopped_early=True)
        # First round trip proves the worker can use a store's segment (it owns none).
        start = time.monotonic()
        if not self.round_trip(0):
            self.say("FATAL first put/get round trip failed (is a store service with a "
                     "non-zero segment registered to this master?)")
            self.store.close()
            return 4
        self.advance()
        if args.ready_file:
            with open(args.ready_file, "a", encoding="utf-8"):
                pass
            os.utime(args.ready_file, None)
        self.say(f"READY master={cfg.master} metadata={cfg.metadata_server} "
                 f"hostname={cfg.local_hostname} protocol={cfg.protocol} "
                 f"segment={cfg.global_segment_size} local_buffer={cfg.local_buffer_size} "
                 f"block_size={args.block_size} blocks={args.blocks} key_prefix={self.prefix}"
                 + (f" read_prefix={args.read_prefix}" if args.read_prefix else ""))
        for line in args.print_line:
            print(line, flush=True)

        end_at = start + args.duration if args.duration > 0 else math.inf
        next_report = start + args.report_every
        next_batch = start
        while not self.stop_event.is_set():
            now = time.monotonic()
            if now >= next_batch:
                self.batch()
                next_batch = time.monotonic() + args.interval
                if args.fail_after_errors and self.consecutive_errors >= args.fail_after_errors:
                    self.say(f"FATAL {self.consecutive_errors} consecutive errors "
                             f"(--fail-after-errors)")
                    self.shutdown(start, reason="fail-after-errors")
                    return 1
                now = time.monotonic()
            if now >= next_report:
                self.report("REPORT", now - start, self.stats.interval)
                self.stats.interval = dict.fromkeys(Stats.FIELDS, 0)
                next_report = now + args.report_every
            if self.done() or now >= end_at:
                break
            pause = min(next_batch, next_report, end_at) - time.monotonic()
            if pause > 0:
                self.stop_event.wait(pause)
        return self.shutdown(start)

    def shutdown(self, start: float, stopped_early: bool = False, reason: str = "") -> int:
        if self.stop_signal:
            reason = f"signal {self.stop_signal}"
        elif not reason:
            reason = "exit-after-ops" if self.done() else "duration"
        t0 = time.monotonic()
        rc = self.store.close() if self.store is not None else 0
        close_s = time.monotonic() - t0
        self.store = None
        self.report("SUMMARY", time.monotonic() - start, self.stats.total)
        self.say(f"stopped ({reason}{', before READY' if stopped_early else ''}); "
                 f"store.close() rc={rc} in {close_s:.3f}s")
        if self.stop_signal:
            return 0
        return 1 if self.stats.total["errors"] else 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="synthetic_worker.py",
        description="Synthetic inference worker: a zero-segment Mooncake client that puts, "
                    "gets and verifies KV-cache-like blocks. Mooncake settings come from "
                    "MOONCAKE_* environment variables (see module docstring).")
    p.add_argument("--name", default=socket.gethostname(), help="worker name (default: hostname)")
    p.add_argument("--block-size", type=parse_size, default=256 * 1024,
                   help="bytes per block; Mooncake size strings ok (default 256kb)")
    p.add_argument("--blocks", type=int, default=64,
                   help="number of distinct keys cycled through (default 64)")
    p.add_argument("--batch", type=int, default=8,
                   help="blocks put+get per batch (default 8)")
    p.add_argument("--interval", type=float, default=0.1,
                   help="seconds to sleep between batches (default 0.1)")
    p.add_argument("--report-every", type=float, default=5.0,
                   help="seconds between REPORT lines (default 5)")
    p.add_argument("--duration", type=float, default=0.0,
                   help="seconds to run after READY, 0 = until signalled (default 0)")
    p.add_argument("--key-prefix", default=None,
                   help="prefix of this worker's keys (default '<name>/')")
    p.add_argument("--read-prefix", default=None,
                   help="also GET (and verify) blocks written by another worker with this "
                        "key prefix; keys not there yet count as peer_miss")
    p.add_argument("--ready-file", default=None,
                   help="touch this file once setup succeeded and the first put/get round-tripped")
    p.add_argument("--exit-after-ops", type=int, default=0,
                   help="exit after this many put+get operations, 0 = no limit")
    p.add_argument("--connect-timeout", type=float, default=30.0,
                   help="seconds to wait for the master/metadata server and setup (default 30)")
    p.add_argument("--print-line", action="append", default=[],
                   help="print this line as it is once READY (repeatable): stands for an engine's "
                        "own output, e.g. a Mooncake failure line the supervisor should recognise")
    p.add_argument("--fail-after-errors", type=int, default=0,
                   help="exit 1 after this many consecutive errors, 0 = never (default 0)")
    args = p.parse_args(argv)
    if args.block_size < 64:
        p.error("--block-size must be at least 64 bytes")
    if args.blocks < 1 or args.batch < 1:
        p.error("--blocks and --batch must be >= 1")
    if args.report_every <= 0 or args.interval < 0 or args.duration < 0 or args.connect_timeout <= 0:
        p.error("--report-every and --connect-timeout must be > 0; --interval, --duration >= 0")
    if args.exit_after_ops < 0 or args.fail_after_errors < 0:
        p.error("--exit-after-ops and --fail-after-errors must be >= 0")
    return args


def main(argv: list[str]) -> int:
    sys.stdout.reconfigure(line_buffering=True)
    args = parse_args(argv)
    try:
        cfg = Config(dict(os.environ))
    except ValueError as e:
        print(f"{PROG} {args.name}: FATAL configuration: {e}", flush=True)
        return 2

    if cfg.global_segment_size != 0:
        for _ in range(3):
            print(f"{PROG} {args.name}: WARNING !!! MOONCAKE_GLOBAL_SEGMENT_SIZE="
                  f"{cfg.global_segment_size_raw!r} = {cfg.global_segment_size} bytes: this worker "
                  f"will CONTRIBUTE {human_bytes(cfg.global_segment_size)} OF ITS OWN DRAM to the "
                  f"store (workers should use 0) !!!", flush=True)
    if args.block_size > cfg.local_buffer_size:
        print(f"{PROG} {args.name}: FATAL --block-size {args.block_size} exceeds "
              f"MOONCAKE_LOCAL_BUFFER_SIZE={cfg.local_buffer_size}: Mooncake cannot put a value "
              f"larger than the local buffer (put returns -600)", flush=True)
        return 2
    # Without MC_TCP_BIND_ADDRESS the transfer engine advertises the first non-loopback
    # interface's IP even when MOONCAKE_LOCAL_HOSTNAME is 127.0.0.1; keep loopback on loopback.
    if is_loopback(cfg.local_hostname) and "MC_TCP_BIND_ADDRESS" not in os.environ:
        bind = "127.0.0.1" if cfg.local_hostname == "localhost" else cfg.local_hostname
        os.environ["MC_TCP_BIND_ADDRESS"] = bind
        print(f"{PROG} {args.name}: note: MOONCAKE_LOCAL_HOSTNAME is loopback; setting "
              f"MC_TCP_BIND_ADDRESS={bind}", flush=True)

    print(f"{PROG} {args.name}: starting pid={os.getpid()} master={cfg.master} "
          f"metadata={cfg.metadata_server} hostname={cfg.local_hostname} "
          f"protocol={cfg.protocol} device={cfg.device!r} segment={cfg.global_segment_size} "
          f"local_buffer={cfg.local_buffer_size}", flush=True)
    return Worker(args, cfg).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
