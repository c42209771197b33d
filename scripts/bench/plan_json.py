"""What the benchmarks hand mcsup in their plan files (imported from scripts/bench/)."""
import json
import os
import subprocess

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def default_schedule(mcsup):
    """The readiness schedule `mcsup plan` gives a probe by default (interval, back-off), from
    the `mcsup` binary measured."""
    recipe = os.path.join(REPO, "recipes", "local.yaml")
    out = subprocess.run([mcsup, "plan", "--role", "agg", "--recipe", recipe, "--json"],
                         capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)["processes"][0]["readiness"]
    return {k: r[k] for k in ("initial_delay_ms", "interval_ms", "max_interval_ms",
                              "attempt_timeout_ms")}
