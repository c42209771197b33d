#!/usr/bin/env python3
"""Capture srtctl's own batch-script header for every v1 fixture recipe.

`mcsup render` writes the `#SBATCH` set srtctl's `generate_minimal_sbatch_script`
(`src/srtctl/cli/submit.py`, template `templates/job_script_minimal.j2`) derives from a recipe
and the cluster config `srtslurm.yaml`. tests/render_sbatch.rs compares mcsup's output with what
this script captured from srtctl's code, checked in as tests/fixtures/srt-slurm-v1/<name>.sbatch.txt.

Not run by the test suite: srt-slurm is not on PyPI. To refresh the captures:

    git -C <srt-slurm clone> archive <commit> | tar -x -C /tmp/srt-slurm
    python3 -m venv /tmp/srtctl-venv
    /tmp/srtctl-venv/bin/pip install pyyaml jinja2 marshmallow marshmallow-dataclass pydantic \
        requests rich ruamel.yaml questionary prometheus-client
    /tmp/srtctl-venv/bin/python scripts/capture/srtctl_sbatch.py /tmp/srt-slurm <commit>

Each recipe is rendered twice: with no cluster config (srtctl's defaults) and with
tests/fixtures/srtslurm/srtslurm.yaml. The output directory is `/OUT` (srtctl's `-o`); account,
partition, RUNNER_NAME come from nowhere else (the variables are cleared).
"""

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/fixtures/srt-slurm-v1"
CLUSTER = REPO / "tests/fixtures/srtslurm/srtslurm.yaml"


def capture(srtctl_src: Path, recipe: Path, cluster: Path | None) -> list[str]:
    from srtctl.cli.submit import generate_minimal_sbatch_script
    from srtctl.core.config import load_config

    if cluster is None:
        os.environ.pop("SRTSLURM_CONFIG", None)
    else:
        os.environ["SRTSLURM_CONFIG"] = str(cluster)
    config = load_config(recipe)
    script = generate_minimal_sbatch_script(config, recipe, output_dir=Path("/OUT"))
    lines = [f"MODEL {config.model.path}", f"CONTAINER {os.path.expandvars(config.model.container)}"]
    lines += [line for line in script.splitlines() if line.startswith("#SBATCH")]
    return lines


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    srtctl_src, commit = Path(sys.argv[1]).resolve(), sys.argv[2]
    sys.path.insert(0, str(srtctl_src / "src"))
    for var in ("SLURM_ACCOUNT", "SLURM_PARTITION", "RUNNER_NAME"):
        os.environ.pop(var, None)
    # srtctl also looks for srtslurm.yaml in the working directory and two above it.
    os.chdir(tempfile.mkdtemp())
    for recipe in sorted(FIXTURES.glob("*.yaml")):
        out = [
            f"# srtctl's #SBATCH set for {recipe.name}, produced by running srtctl's own code "
            f"(NVIDIA/srt-slurm @ {commit}:",
            "# load_config + cli/submit.py generate_minimal_sbatch_script(output_dir=/OUT)) with "
            "scripts/capture/srtctl_sbatch.py.",
            "# MODEL and CONTAINER: model.path and model.container after srtctl's alias resolution.",
        ]
        for name, cluster in (("none", None), ("srtslurm.yaml", CLUSTER)):
            out.append("")
            out.append(f"## cluster config: {name}")
            out += capture(srtctl_src, recipe, cluster)
        target = recipe.with_suffix(".sbatch.txt")
        target.write_text("\n".join(out) + "\n")
        print(f"wrote {target.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
