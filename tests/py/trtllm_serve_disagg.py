"""A stand-in for `trtllm-serve disaggregated --config ser.yaml` in the Slurm tests: reads the
context and generation server URLs and the port from ser.yaml (the layout srtctl's `_build_ser`
writes), refuses to start unless every URL answers GET /health with 200 (the real orchestrator
does not retry unreachable workers), writes what it read to $MCSUP_TEST_RANKS/orchestrator.urls,
then answers GET /health on the port. On SIGTERM it writes orchestrator.term and exits 0. Test
support only."""

import os
import signal
import sys
import urllib.request

from health import health_server


def read_ser(path):
    urls, section, port = [], None, None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("context_servers:"):
                section = "context"
            elif line.startswith("generation_servers:"):
                section = "generation"
            elif line.startswith("  - ") and section:
                urls.append((section, line[4:]))
            elif line.startswith("port: "):
                port = int(line[6:])
    return urls, port


def main():
    if sys.argv[1:3] != ["disaggregated", "--config"]:
        sys.exit(f"unexpected arguments {sys.argv[1:]}")
    urls, port = read_ser(sys.argv[3])
    for _, url in urls:
        with urllib.request.urlopen(f"http://{url}/health", timeout=5) as r:
            if r.status != 200:
                sys.exit(f"worker {url} is not healthy")
    out = os.environ["MCSUP_TEST_RANKS"]
    with open(os.path.join(out, "orchestrator.urls"), "w") as f:
        for section, url in urls:
            f.write(f"{section} {url}\n")
        f.write(f"port {port}\n")

    def on_term(signum, frame):
        open(os.path.join(out, "orchestrator.term"), "w").close()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    health_server(port).serve_forever()


main()
