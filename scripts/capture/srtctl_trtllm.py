#!/usr/bin/env python3
"""Capture how srtctl launches the TRT-LLM endpoints of upstream recipes (issue 31, item 2).

srtctl starts each TRT-LLM endpoint as one srun over all of its nodes (docs/trtllm.md). This
script runs srtctl's own code for each recipe in RECIPES: `SweepOrchestrator.start_all_workers()`
and `start_frontend()`, with `subprocess.Popen` in `srtctl.core.slurm` replaced by a recorder. It
writes tests/fixtures/srt-slurm-v1/trtllm/<slug>.yaml (the recipe, with a `# source:` line) and
<slug>.srtctl.txt: every srun argv, its `bash -c` body one `&&` part per line, and the files
srtctl wrote (each mode's engine YAML, `ser.yaml`). mcsup's derivation is to be compared with
these.

Assumptions, as for the SGLang and vLLM captures: nodes node0..nodeN-1 (N = srtctl's own node
count for the recipe), node i at 10.0.0.(i+1), log directory /LOGS, model /MODEL, container
image IMAGE, job id 4242, no srtslurm.yaml, the cluster preamble and the fingerprint step
replaced by `FINGERPRINT`. `TRTLLM_EPLB_SHM_NAME` is random in srtctl: written as
`moe_shared_<random>`.

Not run by the test suite: srt-slurm is not on PyPI. To refresh the captures:

    git -C <srt-slurm clone> archive <commit> | tar -x -C /tmp/srt-slurm
    python3 -m venv /tmp/srtctl-venv
    /tmp/srtctl-venv/bin/pip install pyyaml jinja2 marshmallow marshmallow-dataclass pydantic \\
        requests rich ruamel.yaml questionary prometheus-client
    /tmp/srtctl-venv/bin/python scripts/capture/srtctl_trtllm.py /tmp/srt-slurm <commit>
"""

import os
import re
import shlex
import sys
import tempfile
from pathlib import Path
from unittest.mock import MagicMock, patch

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests/fixtures/srt-slurm-v1/trtllm"

# (path in srt-slurm, what it brings): docs/trtllm.md explains the choice.
RECIPES = [
    ("recipes/trtllm/b200-fp8/1k1k/stp/ctx1_gen3_tp8_batch1024_eplb0_mtp0_4_trtllm_serve.yaml",
     "the only trtllm_serve disaggregated recipe: ser.yaml with 1 context and 3 generation URLs"),
    ("recipes/trtllm/b200-fp8/1k1k/stp/ctx1_gen3_tp8_batch1024_eplb0_mtp0_4.yaml",
     "the Dynamo twin of the trtllm_serve recipe"),
    ("examples/trtllm-rc23-qwen3.5-moe-aggregate.yaml",
     "trtllm_serve aggregated: one 8-GPU endpoint over 2 GB300 nodes, srun_options ignored"),
    ("recipes/trtllm/gpt-oss-120b/b200-fp4/1k1k/agg-tp1.yaml", "Dynamo aggregated, one GPU, hf: model"),
    ("recipes/trtllm/nemotron-super-120b/b200-fp4/8k1k/agg-tp1.yaml", "Dynamo aggregated, one GPU"),
    ("recipes/trtllm/gb200-fp4/1k1k/mtp/ctx1_gen1_dep32_batch4_eplb0_mtp3.yaml",
     "decode over 8 nodes, MTP3, numactl, infra node, nginx"),
    ("recipes/trtllm/gb200-fp4/1k1k/mtp/ctx2_gen1_dep16_batch256_eplb256_mtp1.yaml", "EPLB 256"),
    ("recipes/trtllm/gb200-fp4/1k8k/mtp/ctx1_gen1_dep32_batch256_eplb288_mtp1.yaml", "EPLB 288, DEP32"),
    ("recipes/trtllm/gb200-fp4/8k1k/mtp/ctx11_gen1_dep16_batch256_eplb256_mtp1.yaml", "11 prefill endpoints"),
    ("recipes/trtllm/gb200-fp4/1k8k/stp/ctx1_gen15_tep4_batch4_eplb0_mtp0.yaml", "15 decode endpoints"),
    ("recipes/trtllm/gb200-fp4/1k1k/mtp/ctx3_gen5_dep4_batch768_eplb0_mtp1.yaml", "one node per endpoint"),
    ("recipes/trtllm/gb200-fp8/1k1k/stp/ctx1_gen1_dep8_batch512_eplb0_mtp0_4301.yaml", "a 2-node prefill"),
    ("recipes/trtllm/gb200-fp8/8k1k/mtp/ctx5_gen1_dep16_batch32_eplb0_mtp3_666.yaml", "five 2-node prefills"),
    ("recipes/trtllm/gb300-fp4/1k1k/mtp/ctx1_gen1_dep4_batch768_eplb0_mtp1.yaml",
     "a 2-GPU prefill on a 4-GPU node: CUDA_VISIBLE_DEVICES"),
    ("recipes/trtllm/gb300-fp4/8k1k/mtp/ctx13_gen1_dep16_batch64_eplb256_mtp3.yaml",
     "prefills packed 2 per node, decode skips to a fresh node"),
    ("recipes/trtllm/gb300-fp4/1k1k/mtp/ctx3_gen1_dep32_batch32_eplb288_mtp3.yaml", "EPLB 288, MTP3"),
    ("recipes/trtllm/gb300-fp8/1k1k/mtp/ctx1_gen4_tep8_batch4_eplb0_mtp3_24.yaml", "four 2-node decodes"),
    ("recipes/trtllm/b200-fp4/1k1k/mtp/ctx3_gen5_dep4_batch512_eplb0_mtp1.yaml",
     "4-GPU endpoints packed 2 per node"),
    ("recipes/trtllm/b300-fp4/8k1k/mtp/ctx10_gen1_dep8_batch256_eplb0_mtp1.yaml", "ten 2-GPU prefills"),
    ("recipes/trtllm/b300-fp4/1k1k/stp/ctx1_gen5_tep4_batch4_eplb0_mtp0.yaml", "2-GPU prefill, 4-GPU decodes"),
    ("recipes/trtllm/b300-fp8/8k1k/stp/ctx7_gen1_dep8_batch384_eplb0_mtp0_3072.yaml", "seven 4-GPU prefills"),
    ("recipes/trtllm/h100-fp8/1k1k/mtp/ctx1_gen3_tep16_batch1_eplb0_mtp3.yaml", "every endpoint TP16 over 2 nodes"),
    ("recipes/trtllm/h100-fp8/1k1k/stp/ctx2_gen1_dep16_batch256_eplb0_mtp0.yaml", "two 2-node prefills"),
    ("recipes/trtllm/h200/1k1k/mtp/c1_ctx1_gen11_tep8_batch1_eplb0_mtp3.yaml", "12 endpoints, sbatch_directives"),
    ("recipes/trtllm/b200-fp8/8k1k/mtp/ctx4_gen1_dep8_batch128_eplb0_mtp2_1088.yaml", "MTP2"),
]

# Upstream recipes with a block appended, for what no upstream TRT-LLM recipe sets:
# (path, slug suffix, what, YAML appended at the top level).
VARIANTS = [
    ("recipes/trtllm/gb200-fp8/1k1k/stp/ctx1_gen1_dep8_batch512_eplb0_mtp0_4301.yaml", "nsys",
     "nsys profiling (iteration-based) of a 2-node prefill: srtctl's TRT-LLM nsys flags, one report per rank",
     "profiling:\n  type: nsys\n  prefill: {start_step: 10, stop_step: 20}\n  decode: {start_step: 30, stop_step: 40}\n"),
    ("recipes/trtllm/b300-fp4/1k1k/stp/ctx1_gen5_tep4_batch4_eplb0_mtp0.yaml", "nsys-time",
     "nsys profiling (time-based): --delay and --duration",
     "profiling:\n  type: nsys-time\n  delay_secs: 120\n  duration_secs: 60\n"),
]


def slug(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", path.removeprefix("recipes/trtllm/").removesuffix(".yaml"))


def node_count(config) -> int:
    """srtctl's own count (cli/submit.py: config.total_nodes plus dedicated-role nodes)."""
    n = config.total_nodes
    dedicated = sum((config.infra.etcd_nats_dedicated_node, config.frontend.dedicated_node,
                     config.benchmark.client_dedicated_node))
    if dedicated:
        n += 1 if config.benchmark.colocate_with_frontend else dedicated
    return n


def capture(recipe: Path) -> list[str]:
    from srtctl.cli.do_sweep import SweepOrchestrator
    from srtctl.core.config import load_config
    from srtctl.core.runtime import Nodes, RuntimeContext

    config = load_config(recipe)
    names = [f"node{i}" for i in range(node_count(config))]
    ip = {n: f"10.0.0.{i + 1}" for i, n in enumerate(names)}
    logs = Path(tempfile.mkdtemp())
    with patch("srtctl.core.runtime.get_slurm_nodelist", return_value=names), \
         patch("srtctl.core.runtime.get_slurm_het_nodelists", return_value=None):
        nodes = Nodes.from_slurm(
            frontend_dedicated_node=config.frontend.dedicated_node,
            client_dedicated_node=config.benchmark.client_dedicated_node,
            etcd_nats_dedicated_node=config.infra.etcd_nats_dedicated_node,
            colocate_dedicated_nodes=config.benchmark.colocate_with_frontend,
        )
    model = config.model.path
    hf = model.startswith("hf:")
    runtime = RuntimeContext(
        job_id="4242", run_name=f"{config.name}_4242", nodes=nodes,
        head_node_ip=ip[nodes.head], infra_node_ip=ip[nodes.infra], log_dir=logs,
        model_path=Path(model[3:]) if hf else Path("/MODEL"), is_hf_model=hf, container_image=Path("IMAGE"),
        gpus_per_node=config.resources.gpus_per_node, network_interface=None,
        gpu_type=config.resources.gpu_type,
        container_mounts={logs: Path("/logs")} if hf else {logs: Path("/logs"), Path("/MODEL"): Path("/model")},
        srun_options=dict(config.srun_options), environment=dict(config.environment),
        request_plane=config.dynamo.request_plane,
    )
    orchestrator = SweepOrchestrator(config=config, runtime=runtime)
    calls: list[list[str]] = []

    def popen(argv, **_kw):
        calls.append([str(a) for a in argv])
        child = MagicMock()
        child.pid = 1
        child.poll.return_value = None
        return child

    def host_ip(node, *_a, **_k):
        return ip[node]

    with patch("srtctl.core.slurm.subprocess.Popen", side_effect=popen), \
         patch("srtctl.core.slurm.get_slurm_job_id", return_value="4242"), \
         patch("srtctl.core.slurm._get_cluster_bash_preamble", return_value=None), \
         patch("srtctl.cli.mixins.worker_stage.generate_capture_script", return_value="FINGERPRINT"), \
         patch("srtctl.frontends.trtllm_serve.get_hostname_ip", side_effect=host_ip), \
         patch("srtctl.frontends.trtllm_serve.wait_for_health", return_value=True), \
         patch("srtctl.cli.mixins.frontend_stage.get_hostname_ip", side_effect=host_ip):
        orchestrator.start_all_workers()
        orchestrator.start_frontend(MagicMock())

    def clean(text: str) -> str:
        text = text.replace(str(logs), "/LOGS")
        return re.sub(r"moe_shared_[0-9a-f]{32}", "moe_shared_<random>", text)

    out = [f"# nodes {' '.join(names)} head={nodes.head} infra={nodes.infra}"]
    for p in orchestrator.backend_processes:
        out.append(
            f"# process {p.endpoint_mode}[{p.endpoint_index}] node={p.node} rank={p.node_rank} "
            f"gpus={','.join(map(str, p.gpu_indices))} sys={p.sys_port} http={p.http_port}"
        )
    for argv in calls:
        body = argv.index("bash") if "bash" in argv else len(argv)
        out.append("")
        out.append("SRUN: " + clean(shlex.join(argv[:body])))
        if body < len(argv):
            for part in argv[-1].split(" && "):
                out.append("BASH: " + clean(part))
    for f in sorted(logs.iterdir()):
        if f.is_file() and f.suffix == ".yaml":
            out.append("")
            out.append(f"FILE: /LOGS/{f.name}")
            out += ["| " + line for line in clean(f.read_text()).splitlines()]
    return out


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, commit = Path(sys.argv[1]).resolve(), sys.argv[2]
    sys.path.insert(0, str(src / "src"))
    os.chdir(tempfile.mkdtemp())  # srtctl also looks for srtslurm.yaml here and above
    OUT.mkdir(parents=True, exist_ok=True)
    for path, what, suffix, extra in [(p, w, "", "") for p, w in RECIPES] + [
        (p, w, f"-{x}", e) for p, x, w, e in VARIANTS
    ]:
        name = slug(path) + suffix
        recipe = OUT / f"{name}.yaml"
        text = (src / path).read_text()
        if extra:
            text = text.rstrip("\n") + f"\n# appended to the upstream recipe (not upstream):\n{extra}"
        recipe.write_text(f"# source: NVIDIA/srt-slurm {path} @ {commit}\n# what: {what}\n" + text)
        lines = [
            f"# srtctl's TRT-LLM launch for {path}{' with the block appended' if extra else ''}, produced by running srtctl's own code (NVIDIA/srt-slurm @ {commit}:",
            "# SweepOrchestrator.start_all_workers + start_frontend, srtctl.core.slurm.subprocess.Popen recorded)",
            "# with scripts/capture/srtctl_trtllm.py; its docstring states the assumptions.",
        ] + capture(recipe)
        (OUT / f"{name}.srtctl.txt").write_text("\n".join(lines) + "\n")
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
