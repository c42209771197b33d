"""A stand-in for `trtllm-llmapi-launch` in the Slurm tests: one MPI world over the step's
ranks (mpi4py, through Slurm's PMIx). Every rank writes its pid to DIR/rank-<r>.pid (atomically)
once the world has formed (an allreduce); rank 0 then answers GET /health on PORT with 200. On SIGTERM a
rank writes DIR/rank-<r>.term and exits 0. Test support only."""

import os
import signal
import sys
import threading
import time

from mpi4py import MPI

from health import health_server


def main():
    port, out = int(sys.argv[1]), sys.argv[2]
    world = MPI.COMM_WORLD
    rank = world.Get_rank()

    def on_term(signum, frame):
        with open(os.path.join(out, f"rank-{rank}.term"), "w") as f:
            f.write(os.environ.get("SLURMD_NODENAME", "?"))
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    if world.allreduce(1) != world.Get_size():
        sys.exit("the world did not form")
    # Written whole, then renamed into place: a reader never sees the file empty.
    pid_file = os.path.join(out, f"rank-{rank}.pid")
    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(pid_file + ".tmp", pid_file)
    print(f"rank {rank} of {world.Get_size()} up on {os.environ.get('SLURMD_NODENAME')}", flush=True)
    if rank == 0:
        server = health_server(port)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    while True:
        time.sleep(0.1)


main()
