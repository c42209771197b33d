"""The `/health` endpoint the Slurm tests' stand-ins serve (mpi_endpoint.py for TRT-LLM's
ranks, trtllm_serve_disagg.py for its orchestrator, tests/fixtures/synthetic-dynamo's
`dynamo.sglang` for a worker's leader rank), as a Dynamo worker's system port: GET /health,
and GET /metrics with the counts mcsup reads (`dynamo_component_requests_total` and
`dynamo_component_inflight_requests` of its `generate` endpoint); POST /generate is a request the
frontend stand-in hands it (counted). Test support only."""

import http.server
import threading

_served = [0]
_lock = threading.Lock()


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/metrics":
            with _lock:
                n = _served[0]
            data = (
                'dynamo_component_requests_total{dynamo_endpoint="generate"} %d\n'
                'dynamo_component_inflight_requests{dynamo_endpoint="generate"} 0\n' % n
            ).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path != "/generate":
            self.send_response(404)
            self.end_headers()
            return
        with _lock:
            _served[0] += 1
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def health_server(port):
    """An HTTP server on 127.0.0.1:`port` whose GET /health answers 200, GET /metrics its counts
    and POST /generate counts a request (anything else 404); the caller runs `serve_forever`."""
    return http.server.HTTPServer(("127.0.0.1", port), _Health)
