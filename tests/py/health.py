"""The `/health` endpoint the Slurm tests' stand-ins serve (mpi_endpoint.py for TRT-LLM's
ranks, trtllm_serve_disagg.py for its orchestrator, tests/fixtures/synthetic-dynamo's
`dynamo.sglang` for a worker's leader rank). Test support only."""

import http.server


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def health_server(port):
    """An HTTP server on 127.0.0.1:`port` whose GET /health answers 200 (anything else 404);
    the caller runs `serve_forever`."""
    return http.server.HTTPServer(("127.0.0.1", port), _Health)
