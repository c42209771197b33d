"""A stand-in for `python -m sglang.launch_server` that stops the way SGLang does.

The test installs it as `sglang/launch_server.py` next to SGLang's real `sglang/srt/environ.py`
(from the release setup.sh downloads), so the crash-dump switches are read by SGLang's own code.

SGLang's SIGTERM contract (python/sglang/srt/managers/tokenizer_manager.py, environ.py):
- `sigterm_watchdog` waits until no request remains, checking every 5 s, with no timeout;
- then `dump_requests_before_crash`: when SGLANG_PYSPY_DUMP_BEFORE_CRASH or
  SGLANG_CUDA_COREDUMP_BEFORE_CRASH is on (both are by default), it sleeps 5 s "to let GPU
  activity settle", dumps, and for the CUDA coredump waits
  SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS (60 s by default) before exiting.

Flags: `--port P` (GET /health answers 200 there), `--busy-seconds N` (requests stay in flight
for N s after start); any other flag is accepted and ignored, as the recipe's flags come through.
"""

import argparse
import http.server
import signal
import sys
import threading
import time

from sglang.srt.environ import envs

DRAIN_POLL_SECONDS = 5.0
DUMP_SETTLE_SECONDS = 5.0


def say(line):
    print(line, flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--busy-seconds", type=float, default=0.0)
    args, _ = parser.parse_known_args()
    started = time.monotonic()

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    # The handler first: /health answers as soon as the server thread runs, and a SIGTERM that
    # came between that and the handler killed the stand-in before it said anything (seen once
    # in CI: the readiness probe, polled every millisecond, won that race on a loaded machine).
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    say(f"ready on {args.port}")
    stop.wait()
    asked = time.monotonic()
    say("SIGTERM received: draining")
    while True:
        time.sleep(DRAIN_POLL_SECONDS)
        if time.monotonic() - started >= args.busy_seconds:
            break
        say("requests still in flight")
    pyspy = envs.SGLANG_PYSPY_DUMP_BEFORE_CRASH.get()
    coredump = envs.SGLANG_CUDA_COREDUMP_BEFORE_CRASH.get()
    say(f"drained; crash dumps: pyspy={pyspy} coredump={coredump}")
    if pyspy or coredump:
        say("Sleeping 5 seconds before crash diagnostics to let GPU activity settle.")
        time.sleep(DUMP_SETTLE_SECONDS)
        if coredump:
            wait = envs.SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS.get()
            if wait > 0:
                say(f"Waiting {wait:.1f} seconds for CUDA coredumps before exiting.")
                time.sleep(wait)
    say(f"exiting {time.monotonic() - asked:.1f} s after SIGTERM")
    server.shutdown()
    sys.exit(0)


if __name__ == "__main__":
    main()
