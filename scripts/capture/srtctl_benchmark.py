#!/usr/bin/env python3
"""Capture srtctl's benchmark stage (what `run_benchmark` waits for and starts) for upstream recipes.

For each recipe in RECIPES this runs srtctl's own code, NVIDIA/srt-slurm
`src/srtctl/cli/mixins/benchmark_stage.py`: a `SweepOrchestrator` is built as `cli/do_sweep.py`
builds it (`RuntimeContext.from_config(config, job_id)`) and its `run_benchmark(registry,
stop_event, reporter)` is called, once per scenario. Only the calls that would touch the
cluster are replaced:

* `srtctl.core.runtime.get_slurm_nodelist` / `get_slurm_het_nodelists` (the allocation),
  `get_hostname_ip` in `srtctl.core.runtime` and in the benchmark stage (node i -> 10.0.0.(i+1);
  each lookup of the stage is recorded), `srtctl.core.slurm.get_slurm_job_id` (4242),
  `srtctl.core.slurm._get_cluster_bash_preamble` (None), `srtctl.core.slurm.get_node_ip`
  (must not be reached);
* `wait_for_model` in the benchmark stage: answered at once (True, or False for the
  `health_check_fails` scenario), its arguments recorded;
* `start_srun_process` in the benchmark stage (and in `cli/do_sweep.py` for `post_eval`):
  recorded with its keyword arguments, then srtctl's real `start_srun_process` runs, with
  `srtctl.core.slurm.subprocess.Popen` replaced by a recorder whose process has already exited
  with the scenario's code (0, or 3), or never exits (`stop_requested_while_running`);
* `time` in the benchmark stage: `sleep` is recorded and sets the stop event (so `manual` and the
  polling loop end at once);
* `try_start_raw_scraper` / `try_start_host_sampler` (`srtctl.analysis`): recorded, return None
  (they would poll the workers' /metrics). `try_start_snapshotter` runs unpatched (a no-op
  without a cluster config).

Writes tests/fixtures/srt-slurm-v1/benchmark/<slug>.yaml (the recipe: upstream bytes under a
`# source:` and `# what:` header; derived ones say what was changed) and <slug>.srtctl.json
(keys sorted, 2-space indent): `source`, `benchmark_type`, `nodes`, `backend_processes`,
`health_wait`, `steps` (every srun: node, srun argv, command argv, env, mounts, kwargs),
`returns` per scenario, `files` the stage wrote, `log` (srtctl's INFO+ log lines), `notes`.

Assumptions, as for the worker captures: nodes node0..nodeN-1 (N = srtctl's own node count,
cli/submit.py), node i at 10.0.0.(i+1), log directory /LOGS (SRTCTL_OUTPUT_DIR=<dir>, so the
log dir is <dir>/logs, written /LOGS), model /MODEL for a local model (hf: ids as given), container
image IMAGE (`model.container`; `benchmark.container_image` of a custom benchmark is kept), job id
4242, no srtslurm.yaml (network_interface is srtctl's default `eth0`, model and container aliases
stay unresolved, so served_model_name falls back to the basename of model.path as written),
srtctl's source directory (SRTCTL_SOURCE_DIR, where `configs/` and `src/srtctl/...` live) is
written /SRTCTL, INFMAX_WORKSPACE, RUN_EVAL, EVAL_ONLY and EVAL_CONC unset unless an entry sets
them. The stop event is never set and no worker has failed, except in the scenarios named so.

Not run by the test suite: srt-slurm is not on PyPI. To refresh the captures:

    git -C <srt-slurm clone> archive <commit> | tar -x -C /tmp/srt-slurm
    python3 -m venv /tmp/srtctl-venv
    /tmp/srtctl-venv/bin/pip install pyyaml jinja2 marshmallow marshmallow-dataclass pydantic \\
        requests rich ruamel.yaml questionary prometheus-client
    /tmp/srtctl-venv/bin/python scripts/capture/srtctl_benchmark.py /tmp/srt-slurm <commit>
"""

import dataclasses
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from unittest.mock import patch

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/fixtures/srt-slurm-v1"
OUT = FIXTURES / "benchmark"

TRT = "recipes/trtllm/gb200-fp4/1k1k/mtp/ctx1_gen1_dep32_batch4_eplb0_mtp3.yaml"
B200 = "recipes/b200-fp8/8k1k_stp_lowlat_0.yaml"
SLOWDOWN = "recipes/qwen3.5/fp8/disagg/mooncake/profile/1p1d-dep4-nsys-profile-slowdown.yaml"

# (slug, path in srt-slurm, what, how the recipe is made, orchestrator environment, post_eval).
# How: None = upstream bytes; "fixture:<file>" = a copy of that file of tests/fixtures/srt-slurm-v1
# (made by an earlier capture; checked to hold the upstream bytes unless its `what` says derived);
# a dict = derived: each top-level block named is replaced by the YAML given (or appended).
RECIPES = [
    # --- sa-bench
    ("mocker-agg", "recipes/mocker/agg.yaml",
     "sa-bench, aggregated, hf: model, Dynamo frontend (the mocker smoke test)",
     "fixture:mocker-agg.yaml", {}, False),
    ("dsr1-b200-1p3d", B200,
     "sa-bench, disaggregated 1P3D, local model, Dynamo frontend, health_check budget 360 x 10 s",
     "fixture:dsr1-b200-1p3d.yaml", {}, False),
    ("dsv4-agg-2n-sglang-frontend", "recipes/gb200-fp4/1k1k-dsv4/agg-2n-nomtp.yaml",
     "sa-bench, aggregated worker over 2 nodes, SGLang router frontend (health on /workers)",
     "fixture:dsv4-agg-2n-sglang-frontend.yaml", {}, False),
    ("dsv4-mooncake-1p1d", "recipes/dsv4-pro/sglang/gb300-fp4/8k1k/disagg/disagg-1p1d-tp4-tp4.yaml",
     "sa-bench with custom_tokenizer and use_chat_template: false",
     "fixture:dsv4-mooncake-1p1d.yaml", {}, False),
    ("qwen35-1p1d-nsys-profile", "recipes/qwen3.5/fp8/disagg/mooncake/profile/1p1d-dep4-nsys-profile.yaml",
     "sa-bench with nsys profiling (PROFILE_* env, leaders' system ports), Dynamo frontend",
     "fixture:qwen35-1p1d-nsys-profile.yaml", {}, False),
    ("qwen35-agg-torch-profile", "recipes/qwen3.5/nvfp4/agg/profile/tp4-profile.yaml",
     "sa-bench with torch profiling (SGLANG_TORCH_PROFILER_DIR), SGLang frontend (worker HTTP ports), req_rate 10",
     "fixture:qwen35-agg-torch-profile.yaml", {}, False),
    ("qwen35-1p1d-nsys-slowdown", SLOWDOWN,
     "sa-bench with slow_down_sleep_time/wait_time on an SGLang frontend (SA_BENCH_SLOW_DOWN_*), nsys profiling, "
     "num_warmup_mult 0, num_prompts_mult 1, random_range_ratio 1.0",
     None, {}, False),
    ("vllm-dsv4-wheel-1p1d",
     "recipes/vllm/deepseek-v4-pro/GB200/8k1k/disagg-gb200-1p1d-dep8-dep8-16-c256-c512-c1024-offload.yaml",
     "sa-bench on vLLM DEP8 workers over 2 nodes each (per_node DP launch: health counts one per node), "
     "dynamo.wheel env (DYNAMO_WHEEL_NAME, DYNAMO_VERSION) reaches the step",
     "fixture:vllm-dsv4-wheel-1p1d.yaml", {}, False),
    ("examples-trtllm-rc23-qwen3-5-moe-aggregate", "examples/trtllm-rc23-qwen3.5-moe-aggregate.yaml",
     "sa-bench on a trtllm_serve frontend; dataset_name, reuse_http_connections, use_chat_template: false; "
     "the recipe's srun_options reach the benchmark srun",
     "fixture:trtllm/examples-trtllm-rc23-qwen3-5-moe-aggregate.yaml", {}, False),
    ("gb200-fp4-1k1k-mtp-ctx1-gen1-dep32-batch4-eplb0-mtp3", TRT,
     "sa-bench, TRT-LLM, infra.etcd_nats_dedicated_node: node0 is infra only, the client runs on the head node1",
     "fixture:trtllm/gb200-fp4-1k1k-mtp-ctx1-gen1-dep32-batch4-eplb0-mtp3.yaml", {}, False),
    ("trtllm-dep32-client-on-infra-node", TRT,
     "derived (not upstream): benchmark.client_dedicated_node: true with the dedicated etcd/nats node "
     "(colocate_with_frontend default true): the client shares the reserved infra node, the last node",
     {"benchmark": 'benchmark:\n  type: "sa-bench"\n  isl: 1024\n  osl: 1024\n  concurrencies: "180"\n'
                   '  req_rate: "inf"\n  client_dedicated_node: true\n'}, {}, False),
    ("trtllm-dep32-client-own-node", TRT,
     "derived (not upstream): benchmark.client_dedicated_node: true, colocate_with_frontend: false: infra on "
     "node0, the client alone on the last node",
     {"benchmark": 'benchmark:\n  type: "sa-bench"\n  isl: 1024\n  osl: 1024\n  concurrencies: "180"\n'
                   '  req_rate: "inf"\n  client_dedicated_node: true\n  colocate_with_frontend: false\n'}, {}, False),
    ("dsr1-b200-1p3d-last-decode", B200,
     "derived (not upstream): benchmark.client_placement: last_decode (client on the last decode leader, "
     "SRT_FRONTEND_HOST still the head)",
     {"benchmark": "benchmark:\n  type: sa-bench\n  isl: 8192\n  osl: 1024\n  req_rate: inf\n"
                   "  concurrencies: '128'\n  client_placement: last_decode\n"}, {}, False),
    ("dsr1-b200-1p3d-first-decode-orchestrator", B200,
     "derived (not upstream): frontend.orchestrator_placement: first_decode with benchmark.client_placement: "
     "last_decode (health host and SRT_FRONTEND_HOST follow the orchestrator)",
     {"frontend": "frontend:\n  orchestrator_placement: first_decode\n",
      "benchmark": "benchmark:\n  type: sa-bench\n  isl: 8192\n  osl: 1024\n  req_rate: inf\n"
                   "  concurrencies: '128'\n  client_placement: last_decode\n"}, {}, False),
    ("mocker-agg-sa-bench-dataset", "recipes/mocker/agg.yaml",
     "derived (not upstream): sa-bench with every optional key set (dataset_name custom, dataset_path, list "
     "concurrencies, integer req_rate, multipliers, custom_tokenizer, use_chat_template false, reuse_http_connections)",
     {"benchmark": 'benchmark:\n  type: "sa-bench"\n  isl: 256\n  osl: 64\n  concurrencies: [2, 8]\n'
                   '  req_rate: 5\n  random_range_ratio: 0.5\n  num_prompts_mult: 3\n  num_warmup_mult: 1\n'
                   '  custom_tokenizer: "my_tok.Tokenizer"\n  use_chat_template: false\n'
                   '  dataset_name: "custom"\n  dataset_path: "/data/prompts.jsonl"\n'
                   '  reuse_http_connections: true\n'}, {}, False),
    ("mocker-agg-telemetry", "recipes/mocker/agg.yaml",
     "derived (not upstream): telemetry.enabled (DCGM power) appended: SRT_MEASUREMENT_WINDOW_DIR",
     {"telemetry": "telemetry:\n  enabled: true\n  storage_subdir: power-data\n  dcgm_exporter:\n"
                   "    container_image: DCGM_IMAGE\n    port: 9400\n"}, {}, False),
    # --- mooncake-router
    ("qwen3-32b-disagg-tp2", "recipes/qwen3-32b/disagg-kv-dynamo.yaml",
     "mooncake-router (AIPerf), disaggregated 6P2D, Dynamo frontend: AIPERF_SERVER_METRICS_URLS",
     "fixture:qwen3-32b-disagg-tp2.yaml", {}, False),
    ("qwen3-32b-agg-tp2", "recipes/qwen3-32b/agg-kv-dynamo.yaml",
     "mooncake-router, 8 aggregated workers on 2 nodes",
     "fixture:qwen3-32b-agg-tp2.yaml", {}, False),
    ("vllm-dsr1-dp16", "recipes/vllm/deepseek-r1/disagg-h100-16gpu.yaml",
     "mooncake-router on vLLM DP16 endpoints over 2 nodes (per_node DP launch: health counts one per node)",
     "fixture:vllm-dsr1-dp16.yaml", {}, False),
    ("qwen3-32b-disagg-observability", "recipes/qwen3-32b/disagg-kv-dynamo.yaml",
     "mooncake-router with observability.enabled: the RAW /metrics scraper and host sampler are started",
     "fixture:qwen3-32b-disagg-observability.yaml", {}, False),
    ("qwen3-32b-disagg-sglang-router", "recipes/qwen3-32b/disagg-kv-dynamo.yaml",
     "mooncake-router behind the SGLang router with nginx (health on /workers)",
     "fixture:qwen3-32b-disagg-sglang-router.yaml", {}, False),
    ("qwen3-32b-disagg-tp2-mooncake-args", "recipes/qwen3-32b/disagg-kv-dynamo.yaml",
     "derived (not upstream): mooncake-router with workload toolagent, other thresholds, aiperf_package and "
     "aiperf_args (int, string, true and false flags)",
     {"benchmark": 'benchmark:\n  type: "mooncake-router"\n  mooncake_workload: "toolagent"\n'
                   '  ttft_threshold_ms: 1500\n  itl_threshold_ms: 30\n  aiperf_package: "aiperf==0.7.0"\n'
                   '  aiperf_args:\n    benchmark-duration: 600\n    workers-max: 200\n'
                   '    request-timeout-seconds: "900"\n    streaming: true\n    verbose: false\n'}, {}, False),
    # --- trace-replay
    ("mocker-kimi-trace-agg", "recipes/mocker/kimi-trace-agg.yaml",
     "trace-replay (AIPerf) with aiperf_package, thresholds, list concurrencies, health_check 60 x 5 s",
     "fixture:mocker-kimi-trace-agg.yaml", {}, False),
    ("vllm-direct-trace-replay", "recipes/vllm/test/qwen3-0.6b-single-gpu.yaml",
     "derived (not upstream): frontend.type: vllm (vllm serve is the public API on the agg leader) with "
     "trace-replay, aiperf_args and string concurrencies; hf: model",
     {"frontend": "frontend:\n  type: vllm\n  enable_multiple_frontends: false\n",
      "benchmark": 'benchmark:\n  type: "trace-replay"\n  trace_file: "/traces/t.jsonl"\n'
                   '  concurrencies: "1x4"\n  aiperf_args:\n    benchmark-duration: 120\n    streaming: true\n'}, {},
     False),
    # --- accuracy and other runners
    ("qwen35-nvfp4-agg-tp4-gsm8k", "recipes/qwen3.5/nvfp4/agg/stp_prefix_off/tp4-acc.yaml",
     "gsm8k on SGLang (sglang.test.run_eval wrapper) with num_examples, max_tokens, num_threads, num_shots",
     None, {}, False),
    ("vllm-dsr1-dp16-gsm8k", "recipes/vllm/deepseek-r1/disagg-h100-16gpu.yaml",
     "derived (not upstream): gsm8k on a vLLM backend (vendored vllm-bench.sh: other argv), num_shots 0, "
     "temperature, repeat; num_threads/top_p ignored on this path",
     {"benchmark": 'benchmark:\n  type: "gsm8k"\n  num_examples: 200\n  max_tokens: 512\n  num_shots: 0\n'
                   '  temperature: 0.6\n  top_p: 0.9\n  num_threads: 64\n  repeat: 2\n'}, {}, False),
    ("dsv4-mooncake-1p1d-gsm8k-sampling", "recipes/dsv4-pro/sglang/gb300-fp4/8k1k/disagg/disagg-1p1d-tp4-tp4.yaml",
     "derived (not upstream): gsm8k on SGLang with temperature, top_p, top_k (other keys default)",
     {"benchmark": 'benchmark:\n  type: "gsm8k"\n  temperature: 0.0\n  top_p: 0.95\n  top_k: 20\n'}, {}, False),
    ("qwen35-1p1d-nixl-gpqa", "recipes/qwen3.5/fp8/disagg/nixl/stp_prefix_off/1p1d-dep4-nixl-gpqa.yaml",
     "gpqa, disaggregated, non-default max_tokens", None, {}, False),
    ("dsr1-b200-1p3d-mmlu", B200,
     "derived (not upstream): mmlu with num_examples, max_tokens, num_threads set (repeat default)",
     {"benchmark": 'benchmark:\n  type: "mmlu"\n  num_examples: 100\n  max_tokens: 4096\n  num_threads: 64\n'},
     {}, False),
    ("dsr1-h100-tp16-lm-eval", "recipes/h100/1k1k/stp/h100-fp8-1p2d-max-tp.yaml",
     "derived (not upstream): lm-eval with INFMAX_WORKSPACE=/INFMAX in the orchestrator's environment "
     "(the /infmax-workspace mount); also do_sweep's post-benchmark eval (RUN_EVAL=true), whose EVAL_CONC "
     "is the largest of benchmark.concurrencies (lm-eval itself ignores them)",
     {"benchmark": 'benchmark:\n  type: "lm-eval"\n  concurrencies: "4x16"\n'},
     {"INFMAX_WORKSPACE": "/INFMAX"}, True),
    ("qwen3-32b-agg-tp2-longbenchv2", "recipes/qwen3-32b/agg-kv-dynamo.yaml",
     "derived (not upstream): longbenchv2 with categories, max_context_length, num_threads, num_examples "
     "(max_tokens default)",
     {"benchmark": 'benchmark:\n  type: "longbenchv2"\n  max_context_length: 64000\n  num_threads: 8\n'
                   '  num_examples: 50\n  categories: ["single_document_qa", "code_repo_qa"]\n'}, {}, False),
    ("dsv4-agg-2n-sglang-frontend-router", "recipes/gb200-fp4/1k1k-dsv4/agg-2n-nomtp.yaml",
     "derived (not upstream): router benchmark (requires the SGLang frontend) with isl, osl, num_requests, "
     "concurrency, list prefix_ratios",
     {"benchmark": 'benchmark:\n  type: "router"\n  isl: 4096\n  osl: 256\n  num_requests: 100\n'
                   '  concurrency: 8\n  prefix_ratios: [0.2, 0.4, 0.8]\n'}, {}, False),
    ("qwen35-agg-torch-profile-sglang-bench", "recipes/qwen3.5/nvfp4/agg/profile/tp4-profile.yaml",
     "derived (not upstream): sglang-bench (list concurrencies, integer req_rate) with torch profiling on "
     "the SGLang frontend",
     {"benchmark": 'benchmark:\n  type: "sglang-bench"\n  isl: 1000\n  osl: 128\n  concurrencies: [16, 32]\n'
                   '  req_rate: 10\n'}, {}, False),
    # --- custom
    ("qwen3-32b-ruter-3p2d-custom", "recipes/qwen3-32b/ruter-3p2d-dynamo.yaml",
     "custom (AIPerf command) on a Dynamo frontend: SRT_*_IPS/ENDPOINTS, logical AIPERF_SERVER_METRICS_URLS, "
     "top-level environment, observability.enabled with scrape_metrics: false",
     None, {}, False),
    ("dsv4-gb300-max-tpt-custom", "recipes/dsv4-pro/sglang/gb300-fp4/1k1k/disagg/stp/max-tpt.yaml",
     "custom on 7 prefill + 1 two-node decode (leaders only), nginx frontends, extra_mount", None, {}, False),
    ("qwen35-1p1d-nsys-slowdown-custom", SLOWDOWN,
     "derived (not upstream): custom with container_image and env on the SGLang frontend (worker HTTP ports) "
     "with nsys profiling; slow_down keys are SA-Bench only",
     {"benchmark": 'benchmark:\n  type: "custom"\n  command: |\n    set -e\n'
                   '    curl -s "http://$SRT_FRONTEND_HOST:$SRT_FRONTEND_PORT/v1/models"\n'
                   '    echo "$SRT_DECODE_ENDPOINTS" > /logs/decode.txt\n'
                   '  container_image: "bench-client:1.0"\n  env:\n    BENCH_MODE: "smoke"\n'
                   '    SRTCTL_FRONTEND_TYPE: "overridden"\n'
                   '  slow_down_sleep_time: 30.0\n  slow_down_wait_time: 120.0\n'}, {}, False),
    # --- manual
    # (examples/enable-profiling.yaml, the one upstream manual recipe, no longer loads at this commit:
    # its profiling block has isl/osl/concurrency, which the schema rejects.)
    ("qwen35-1p1d-nsys-profile-manual", "recipes/qwen3.5/fp8/disagg/mooncake/profile/1p1d-dep4-nsys-profile.yaml",
     "derived (not upstream): manual (no step; the stage waits for health, then for the stop event) with "
     "nsys profiling on", {"benchmark": 'benchmark:\n  type: "manual"\n'}, {}, False),
    ("mocker-1p2d", "recipes/mocker/agg.yaml", "manual, disaggregated mocker 1P2D",
     "fixture:mocker-1p2d.yaml", {}, False),
]

ORCHESTRATOR_ENV = ("SRTSLURM_CONFIG", "SLURM_JOB_ID", "SLURM_JOBID", "SLURM_NODELIST", "SLURM_HET_SIZE",
                    "INFMAX_WORKSPACE", "RUN_EVAL", "EVAL_ONLY", "EVAL_CONC", "SRTCTL_OUTPUT_DIR",
                    "SRTCTL_SOURCE_DIR", "SRTCTL_SETUP_SCRIPT")


def replace_block(text: str, key: str, block: str) -> str:
    """Replace the top-level `key:` block of a YAML text (or append it); comments after it stay."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(f"{key}:")), None)
    if start is None:
        return text.rstrip("\n") + f"\n\n# appended to the upstream recipe (not upstream):\n{block}"
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t#"):
        end += 1
    while end - 1 > start and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1
    return "".join(lines[:start]) + "# replaced in the upstream recipe (not upstream):\n" + block + "".join(lines[end:])


def make_recipe(src: Path, commit: str, path: str, what: str, how) -> str:
    upstream = (src / path).read_text()
    header = f"# source: NVIDIA/srt-slurm {path} @ {commit}\n# what: {what}\n"
    if how is None:
        return header + upstream
    if isinstance(how, str):
        text = (FIXTURES / how.removeprefix("fixture:")).read_text()
        head = text.splitlines(keepends=True)
        if head[0] != f"# source: NVIDIA/srt-slurm {path} @ {commit}\n":
            raise SystemExit(f"{how}: not a copy of {path} @ {commit}")
        if "derived" not in head[1] and "".join(head[2:]) != upstream:
            raise SystemExit(f"{how}: differs from upstream {path}")
        return text
    text = upstream
    for key, block in how.items():
        text = replace_block(text, key, block)
    return header + text


def node_count(config) -> int:
    """srtctl's own count (cli/submit.py: config.total_nodes plus dedicated-role nodes)."""
    n = config.total_nodes
    dedicated = sum((config.infra.etcd_nats_dedicated_node, config.frontend.dedicated_node,
                     config.benchmark.client_dedicated_node))
    if dedicated:
        n += 1 if config.benchmark.colocate_with_frontend else dedicated
    return n


class Proc:
    """The srun client: already exited with `code`, or (code None) running until terminated."""

    def __init__(self, code, calls):
        self.code, self.calls, self.pid = code, calls, 4343
        self.returncode = code

    def poll(self):
        return self.returncode

    def wait(self, timeout=None):
        self.calls.append(f"wait(timeout={timeout})")
        if self.returncode is None:
            self.returncode = -15
        return self.returncode

    def terminate(self):
        self.calls.append("terminate()")
        self.returncode = -15

    def kill(self):
        self.calls.append("kill()")
        self.returncode = -9


class Reporter:
    def __init__(self):
        self.calls = []

    def report(self, status, stage=None, message=None, *a, **k):
        self.calls.append([getattr(status, "value", str(status)), getattr(stage, "value", stage), message])


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")


def run_scenario(config, runtime, ip, code, health_ok=True, manual_failure=False, post_eval=False):
    """One run_benchmark (or do_sweep._run_post_eval) with everything recorded."""
    import srtctl.cli.mixins.benchmark_stage as stage
    import srtctl.core.slurm as slurm
    from srtctl.cli.do_sweep import SweepOrchestrator
    from srtctl.core.processes import ProcessRegistry

    orchestrator = SweepOrchestrator(config=config, runtime=runtime)
    rec = {"health_wait": [], "steps": [], "ip_lookups": [], "sleeps": [], "proc_calls": [], "scraper": [],
           "host_sampler": [], "port_waits": []}
    stop_event = threading.Event()
    registry = ProcessRegistry(job_id="4242")
    if manual_failure:
        registry.check_failures = lambda: True
    reporter = Reporter()
    real_start = slurm.start_srun_process

    def wait_for_model(**kw):
        kw = dict(kw)
        kw["stop_event"] = "<the orchestrator's stop event>" if kw.get("stop_event") is stop_event else kw.get(
            "stop_event")
        rec["health_wait"].append(kw)
        return health_ok

    def host_ip(node, network_interface=None):
        rec["ip_lookups"].append([node, network_interface])
        return ip[node]

    def start(command, **kw):
        step = {"command": [str(c) for c in command], "kwargs": {}}
        for k, v in kw.items():
            if k == "env_to_set":
                step["env"] = dict(v or {})
                step["env_order"] = list((v or {}).keys())
            elif k == "container_mounts":
                step["container_mounts"] = [f"{h}:{c}" for h, c in (v or {}).items()]
            else:
                step["kwargs"][k] = list(v) if isinstance(v, (list, tuple)) else v
        step["node"] = ",".join(kw.get("nodelist") or [])
        rec["steps"].append(step)
        return real_start(command, **kw)

    def popen(argv, **kw):
        rec["steps"][-1]["srun_argv"] = [str(a) for a in argv]
        rec["steps"][-1]["popen_kwargs"] = {k: v for k, v in sorted(kw.items())}
        return Proc(code, rec["proc_calls"])

    class Time:
        @staticmethod
        def sleep(seconds):
            rec["sleeps"].append(seconds)
            stop_event.set()

    def scraper(log_dir, targets, observability, stop):
        rec["scraper"].append({"log_dir": str(log_dir), "targets": [
            {"url": t.url, "role": t.role, "worker_id": t.worker_id} for t in targets],
            "interval_seconds": observability.scrape_interval_seconds, "output": observability.scrape_output})

    def sampler(log_dir, observability, stop):
        rec["host_sampler"].append({"log_dir": str(log_dir)})

    def no_node_ip(*a, **k):
        raise AssertionError(f"srun-based IP lookup reached: {a}")

    def wait_for_port(host, port, timeout=None, **k):
        rec["port_waits"].append({"host": host, "port": port, "timeout": timeout, **k})
        return True

    handler = Records()
    logging.getLogger("srtctl").addHandler(handler)
    logging.getLogger("srtctl").setLevel(logging.INFO)
    before = {p for p in runtime.log_dir.rglob("*")}
    try:
        with patch.object(stage, "wait_for_model", side_effect=wait_for_model), \
             patch.object(stage, "get_hostname_ip", side_effect=host_ip), \
             patch.object(stage, "start_srun_process", side_effect=start), \
             patch.object(stage, "time", Time), \
             patch("srtctl.cli.do_sweep.start_srun_process", side_effect=start), \
             patch("srtctl.cli.do_sweep.wait_for_port", side_effect=wait_for_port), \
             patch("srtctl.core.health.wait_for_model", side_effect=wait_for_model), \
             patch.object(slurm.subprocess, "Popen", side_effect=popen), \
             patch.object(slurm, "get_slurm_job_id", return_value="4242"), \
             patch.object(slurm, "_get_cluster_bash_preamble", return_value=None), \
             patch.object(slurm, "get_node_ip", side_effect=no_node_ip), \
             patch("srtctl.analysis.metrics_scraper.try_start_raw_scraper", side_effect=scraper), \
             patch("srtctl.analysis.host_sampler.try_start_host_sampler", side_effect=sampler):
            if post_eval:
                result = orchestrator._run_post_eval(stop_event)
            else:
                result = orchestrator.run_benchmark(registry, stop_event, reporter)
    finally:
        logging.getLogger("srtctl").removeHandler(handler)
    files = {}
    for p in sorted(set(runtime.log_dir.rglob("*")) - before):
        files[str(p)] = p.read_text() if p.is_file() else "<directory>"
    rec.update(result=result, reports=reporter.calls, log=handler.lines, files=files,
               child_flags={"benchmark_child_reaped": orchestrator.benchmark_child_reaped,
                            "benchmark_child_allows_window_mutation":
                                orchestrator.benchmark_child_allows_window_mutation})
    return rec, orchestrator


def capture(src: Path, commit: str, path: str, recipe: Path, env: dict, post_eval: bool) -> dict:
    from srtctl.core.config import load_config
    from srtctl.core.runtime import RuntimeContext

    config = load_config(recipe)
    names = [f"node{i}" for i in range(node_count(config))]
    ip = {n: f"10.0.0.{i + 1}" for i, n in enumerate(names)}
    tmp = Path(tempfile.mkdtemp(prefix="srtctl-bench-")).resolve()
    out_dir, model_dir = tmp / "out", tmp / "MODEL"
    model_dir.mkdir()
    for var in ORCHESTRATOR_ENV:
        os.environ.pop(var, None)
    os.environ.update(SRTCTL_OUTPUT_DIR=str(out_dir), SRTCTL_SOURCE_DIR=str(src), **env)
    hf = os.path.expandvars(config.model.path).startswith("hf:")
    # from_config resolves and checks a local model directory: it is given an existing stand-in
    # (written /MODEL), and the container IMAGE; the orchestrator keeps the recipe's config.
    rt_config = dataclasses.replace(config, model=dataclasses.replace(
        config.model, path=config.model.path if hf else str(model_dir), container="IMAGE"))
    with patch("srtctl.core.runtime.get_slurm_nodelist", return_value=names), \
         patch("srtctl.core.runtime.get_slurm_het_nodelists", return_value=None), \
         patch("srtctl.core.runtime.get_hostname_ip", side_effect=lambda n, *a, **k: ip[n]):
        runtime = RuntimeContext.from_config(rt_config, "4242")

    def clean(value):
        if isinstance(value, str):
            return (value.replace(str(runtime.log_dir), "/LOGS").replace(str(model_dir), "/MODEL")
                    .replace(str(src), "/SRTCTL"))
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        if isinstance(value, Path):
            return clean(str(value))
        return value

    ok, orch = run_scenario(config, runtime, ip, 0)
    sick, _ = run_scenario(config, runtime, ip, 0, health_ok=False)
    if sick["steps"]:
        raise SystemExit(f"{path}: steps started without health")
    notes = []
    extra = {}
    if config.benchmark.type == "manual":
        failed, _ = run_scenario(config, runtime, ip, 0, manual_failure=True)
        returns = {"stop_event_set": ok["result"], "worker_failure": failed["result"],
                   "health_check_fails": sick["result"]}
        extra["manual_polling"] = {"sleeps_until_stop_event": ok["sleeps"],
                                   "sleeps_when_a_worker_failed": failed["sleeps"]}
        notes.append("manual: no step is started. After the health wait, run_benchmark loops: "
                     "registry.check_failures() true -> return 1; otherwise time.sleep(5), until the stop event is "
                     "set, then return 0 (here the recorded sleep sets the stop event). returns.stop_event_set: "
                     "no worker failed; worker_failure: check_failures() was true at once.")
    else:
        three, _ = run_scenario(config, runtime, ip, 3)
        if three["steps"] != ok["steps"] or three["health_wait"] != ok["health_wait"]:
            raise SystemExit(f"{path}: the exit-3 run started other steps")
        returns = {"step_exits_0": ok["result"], "step_exits_3": three["result"],
                   "health_check_fails": sick["result"]}
        stopped, _ = run_scenario(config, runtime, ip, None)
        returns["stop_requested_while_running"] = stopped["result"]
        extra["stop_while_running"] = {"sleeps": stopped["sleeps"], "proc_calls": stopped["proc_calls"],
                                       "child_flags": stopped["child_flags"]}
        extra["child_flags_after_exit"] = ok["child_flags"]
    if post_eval:
        os.environ["RUN_EVAL"] = "true"
        ev, _ = run_scenario(config, runtime, ip, 0, post_eval=True)
        extra["post_eval"] = {"port_waits": ev["port_waits"], "steps": ev["steps"], "returns": ev["result"],
                              "log": ev["log"], "health_wait": ev["health_wait"] or None}
        os.environ.pop("RUN_EVAL")
    nodes = runtime.nodes
    result = {
        "source": {"repo": "NVIDIA/srt-slurm", "path": path, "commit": commit},
        "benchmark_type": config.benchmark.type,
        "nodes": {"all": names, "head": nodes.head, "bench": nodes.bench, "infra": nodes.infra,
                  "worker": list(nodes.worker), "ip": ip},
        "orchestrator_env": dict(sorted(env.items())),
        "runtime": {"log_dir": runtime.log_dir, "model_path": runtime.model_path, "is_hf_model": runtime.is_hf_model,
                    "container_image": runtime.container_image, "network_interface": runtime.network_interface,
                    "frontend_port": runtime.frontend_port, "srun_options": runtime.srun_options,
                    "environment": runtime.environment,
                    "container_mounts": [f"{h}:{c}" for h, c in runtime.container_mounts.items()]},
        "backend_processes": [
            {"mode": p.endpoint_mode, "index": p.endpoint_index, "node": p.node, "node_rank": p.node_rank,
             "is_leader": p.is_leader, "sys_port": p.sys_port, "http_port": p.http_port}
            for p in orch.backend_processes],
        "health_wait": (ok["health_wait"][0] if len(ok["health_wait"]) == 1 else ok["health_wait"]) or None,
        "steps": ok["steps"],
        "ip_lookups": ok["ip_lookups"],
        "status_reports": {"ok": ok["reports"], "health_check_fails": sick["reports"]},
        "observability": {"raw_scraper": ok["scraper"] or None, "host_sampler": ok["host_sampler"] or None},
        "returns": returns,
        "files": ok["files"],
        "log": ok["log"],
        "notes": notes,
        **extra,
    }
    if not ok["steps"] and config.benchmark.type != "manual":
        notes.append("no step was started (see log)")
    shutil.rmtree(tmp)
    return clean(result)


COMMON_NOTES = [
    "steps[].srun_argv is the argv srtctl hands to subprocess.Popen; its last element is the `bash -c` body: "
    "`export K=<shlex.quote(V)>` for env in env_order, then shlex.join(command), joined by ' && '.",
    "returns.step_exits_N: run_benchmark's return when the srun client exits N (proc.returncode or 0); "
    "health_check_fails: wait_for_model returned False (no step); stop_requested_while_running: the stop event "
    "was set while the srun client ran (it is then terminated, see stop_while_running).",
    "ip_lookups: the get_hostname_ip(node, network_interface) calls of the benchmark stage, in order.",
    "files: what appeared under the log directory during run_benchmark (benchmark.out is only the srun "
    "--output, written by Slurm, so nothing here).",
    "health_wait.host is a node name (the public API node), not an IP; port is FRONTEND_PUBLIC_PORT.",
]


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, commit = Path(sys.argv[1]).resolve(), sys.argv[2]
    sys.path.insert(0, str(src / "src"))
    os.chdir(tempfile.mkdtemp())  # srtctl also looks for srtslurm.yaml here and above
    OUT.mkdir(parents=True, exist_ok=True)
    rows = []
    for slug, path, what, how, env, post_eval in RECIPES:
        recipe = OUT / f"{slug}.yaml"
        recipe.write_text(make_recipe(src, commit, path, what, how))
        result = capture(src, commit, path, recipe, env, post_eval)
        result["recipe"] = f"tests/fixtures/srt-slurm-v1/benchmark/{slug}.yaml"
        result["what"] = recipe.read_text().splitlines()[1].removeprefix("# what: ")
        result["covers"] = what
        result["notes"] = COMMON_NOTES + result["notes"]
        (OUT / f"{slug}.srtctl.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        node = result["steps"][0]["node"] if result["steps"] else "no step"
        derived = " (derived)" if "derived" in result["what"] else ""
        rows.append(f"| `{slug}` | {result['benchmark_type']} | `{path}`{derived} "
                    f"| {node} of {len(result['nodes']['all'])} | {what} |")
        print(f"wrote {slug} ({result['benchmark_type']}, {len(result['steps'])} step(s))")
    (OUT / "README.md").write_text(README.format(commit=commit, rows="\n".join(rows)))
    return 0


README = """# srtctl's benchmark stage, captured

Written by `scripts/capture/srtctl_benchmark.py` (its docstring states the assumptions and how to
refresh) from NVIDIA/srt-slurm @ {commit}: srtctl's own `run_benchmark` (cli/mixins/benchmark_stage.py)
with only the cluster-touching calls patched. Per recipe:

* `<slug>.yaml`: the recipe, upstream bytes under a `# source:` and `# what:` header; derived ones mark
  each changed top-level block with a `# replaced in / appended to the upstream recipe` comment;
* `<slug>.srtctl.json`: what the stage did (keys sorted): `health_wait` (the `wait_for_model`
  arguments), `steps` (each srun: `node`, `srun_argv`, `command`, `env` and `env_order`,
  `container_mounts`, `kwargs`), `returns` per scenario, `files`, `log`, `nodes`, `runtime`,
  `backend_processes`, `ip_lookups`, `status_reports`, `observability`, `notes`; `covers` says why the
  recipe is here, `what` repeats the recipe's header.

Every benchmark type of srtctl's registry at that commit is covered (sa-bench, mooncake-router,
router, sglang-bench, gsm8k, mmlu, gpqa, lm-eval, longbenchv2, trace-replay, custom) plus `manual`.
Assumptions: nodes node0..nodeN-1 at 10.0.0.(i+1), log directory /LOGS, local model /MODEL, image
IMAGE, job id 4242, srtctl's source directory /SRTCTL, no srtslurm.yaml.

| capture | type | recipe (srt-slurm) | client node | covers |
|---|---|---|---|---|
{rows}
"""


if __name__ == "__main__":
    sys.exit(main())
