#!/usr/bin/env python3
"""Capture how srtctl turns one recipe file into several jobs: `sweep:` and base/override files.

srtctl expands two kinds of file into several Slurm jobs. A file with a top-level `sweep:` is
expanded by `srtctl.core.sweep.generate_sweep_configs` (cartesian product, `{param}` replaced in
every string) and submitted by `cli/submit.py` `submit_sweep`. A file with a top-level `base:` is
expanded by `srtctl.core.config.generate_override_configs` / `resolve_override_yaml` (`override_*`
deep-merged into `base`, `zip_override_*` zipped) and submitted by `submit_override`; `FILE:SELECTOR`
picks some of its variants. mcsup must expand these files as srtctl does: this script runs
srtctl's own code over them and writes tests/fixtures/sweeps/, which a Rust test compares with.

What it does, for NVIDIA/srt-slurm at the commit given on the command line:

- scans the whole tree for YAML files whose top level has `sweep`, `base`, `override_*` or
  `zip_override_*` (PyYAML, as srtctl reads them) and copies each one, byte for byte and with no
  header, to tests/fixtures/sweeps/<path with / replaced by __>;
- writes the synthetic inputs in SYNTHETIC below (error cases and edge cases no upstream file
  has) as tests/fixtures/sweeps/synthetic__<name>.yaml;
- for every input runs srtctl's real CLI entry point, `srtctl.cli.submit.main()`, as
  `srtctl apply -f FILE --no-preflight --json -o <tmp>` (the submit path, not dry-run, so the
  sbatch script, the job directory and the runtime config file are srtctl's own), once without
  a cluster config and once with tests/fixtures/srtslurm/srtslurm.yaml, and records each job in
  submission order: srtctl's job name, the sweep parameters or the override suffix, the dict
  srtctl hands `SrtConfig.Schema().load` for that job (`expanded`), the `#SBATCH` lines of the
  script handed to sbatch and the node count they ask for, and the config file the job runs;
- for every override file, runs `apply -f FILE:<selector>` for each variant's own selector and
  checks that it submits exactly that one variant (fails otherwise); for
  examples/example-override.yaml records these runs and the other selector forms and errors;
- runs `srtctl resolve-override -f FILE --stdout` on every override file and writes its stdout
  as <name>.resolve-override.txt (it is byte for byte the concatenation of the
  config_<suffix>.yaml files `apply` writes to the job directories: checked);
- writes <name>.srtctl.json per input and README.md.

Patched, because they touch the cluster or the network: `subprocess.run(["sbatch", ...])`
(records the script, answers `Submitted batch job <1001 + n>`; every other command runs for
real), `srtctl.cli.submit.validate_setup` (checks `make setup` binaries),
`srtctl.cli.submit.create_job_record` (status API POST) and
`srtctl.core.validation.validate_hf_model` (HuggingFace HEAD request; the glm5 recipes have an
`identity:` block). Observed without changing behaviour (pass-through wrappers):
`SrtConfig.Schema.load` (the dict it is given, and the srtctl function that called it) and
`srtctl.core.sweep.generate_sweep_configs` (the parameter dict of each job).

Assumptions: `--no-preflight` (model and container paths do not exist here; dry-run skips the
same checks), RUNNER_NAME, SLURM_ACCOUNT, SLURM_PARTITION and SRTSLURM_CONFIG cleared, the working
directory a fresh empty one (srtctl also looks for srtslurm.yaml in it and two above), the
output directory written as /OUT in the captured `#SBATCH` lines, exactly as in
srtctl_sbatch.py.

Not run by the test suite: srt-slurm is not on PyPI. To refresh the captures:

    git -C <srt-slurm clone> archive <commit> | tar -x -C /tmp/srt-slurm
    python3 -m venv /tmp/srtctl-sweeps-venv
    /tmp/srtctl-sweeps-venv/bin/pip install pyyaml jinja2 marshmallow marshmallow-dataclass \\
        pydantic requests rich ruamel.yaml questionary prometheus-client
    /tmp/srtctl-sweeps-venv/bin/python scripts/capture/srtctl_sweeps.py /tmp/srt-slurm <commit>

The output is deterministic: running it twice gives byte-identical files.
"""

import contextlib
import copy
import inspect
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest.mock import patch

import yaml

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests/fixtures/sweeps"
CLUSTER = REPO / "tests/fixtures/srtslurm/srtslurm.yaml"
SCRIPT = "scripts/capture/srtctl_sweeps.py"
RERUN = f"/tmp/srtctl-sweeps-venv/bin/python {SCRIPT} /tmp/srt-slurm {{commit}}"

# The one override file whose selector runs are written out in full (every override file's
# selectors are checked).
SELECTOR_FILE = "examples/example-override.yaml"

# Selector runs recorded for SELECTOR_FILE besides each variant's own selector:
# (selector, what it shows).
SELECTOR_CASES = [
    ("base", "the base alone (never submitted without a selector)"),
    ("zip_override_tp_sweep", "every variant of one zip group"),
    ("override_*", "a glob over the section names: all override_* sections"),
    ("*tp*", "a glob matching an override_ and a zip_override_ section"),
    ("override_nope", "ERROR: no such override section"),
    ("zip_override_nope", "ERROR: no such zip group"),
    ("zip_override_nope[0]", "ERROR: no such zip group, indexed"),
    ("zip_override_tp_sweep[3]", "ERROR: index past the end of a zip group"),
    ("*nope*", "ERROR: a glob that matches nothing"),
    ("tp64", "ERROR: not a selector (parse_config_arg raises before main's error handling)"),
]

# Synthetic inputs: (name, derived from, what it shows, how to make it from the upstream file's
# text, extra runs as (label, argv after `apply -f FILE`)).
# Each is written to tests/fixtures/sweeps/synthetic__<name>.yaml with a comment header.


def _replace(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"synthetic input: {old!r} occurs {text.count(old)} times, want once")
    return text.replace(old, new)


def _sweep_undefined(text: str) -> str:
    text = _replace(text, '      chunked-prefill-size: "{chunked_prefill_size}"\n\nbenchmark:',
                    '      chunked-prefill-size: "{chunked_prefill_size}"\n'
                    '      max-running-requests: "{undefined_param}"\n'
                    '      context-length: "ctx-{undefined_param}-{max_total_tokens}"\n\nbenchmark:')
    return text


def _sweep_undefined_typed(text: str) -> str:
    return _replace(text, "  prefill_nodes: 1\n", '  prefill_nodes: "{undefined_param}"\n')


def _sweep_values(text: str) -> str:
    text = _replace(text, 'name: "example-sweep"', 'name: "syn-{conc}"')
    text = _replace(text, "sweep:\n  chunked_prefill_size: [4096, 8192]\n  max_total_tokens: [8192, 16384]\n",
                    "sweep:\n"
                    "  tag: ['{mem}']\n"
                    "  conc: [[16, 32], 64]\n"
                    "  mem: [0.85]\n"
                    "  flag: [true, null]\n"
                    "  extra: [{a: 1}]\n"
                    "  dn: [4]\n")
    text = _replace(text, "  decode_nodes: 4\n", '  decode_nodes: "{dn}"\n')
    text = _replace(text,
                    '      max-total-tokens: "{max_total_tokens}"\n'
                    '      chunked-prefill-size: "{chunked_prefill_size}"\n',
                    '      whole-list: "{conc}"\n'
                    '      embedded-list: "c={conc};m={mem}"\n'
                    '      whole-float: "{mem}"\n'
                    '      whole-bool: "{flag}"\n'
                    '      whole-dict: "{extra}"\n'
                    '      chained: "{tag}"\n'
                    '      in-list: ["{mem}", "{conc}", 5]\n'
                    '      "{mem}": "key is not expanded"\n'
                    '      flow-mapping: { mem }\n'
                    '      untouched-int: 7\n')
    text = _replace(text, '      chunked-prefill-size: "{chunked_prefill_size}"\n', "")
    text = _replace(text, "  concurrencies: [256, 512]\n", '  concurrencies: "{conc}"\n')
    return text


def _sweep_empty_section(text: str) -> str:
    return _replace(text, "sweep:\n  chunked_prefill_size: [4096, 8192]\n  max_total_tokens: [8192, 16384]\n",
                    "sweep: {}\n")


def _sweep_empty_list(text: str) -> str:
    return _replace(text, "  chunked_prefill_size: [4096, 8192]\n", "  chunked_prefill_size: []\n")


def _sweep_string_values(text: str) -> str:
    return _replace(text, "  chunked_prefill_size: [4096, 8192]\n  max_total_tokens: [8192, 16384]\n",
                    '  chunked_prefill_size: "48"\n  max_total_tokens: [8192]\n')


def _sweep_scalar_value(text: str) -> str:
    return _replace(text, "  chunked_prefill_size: [4096, 8192]\n", "  chunked_prefill_size: 4096\n")


def _sweep_no_name(text: str) -> str:
    return _replace(text, 'name: "example-sweep"\n', "")


def _no_sweep(text: str) -> str:
    return _replace(text, "sweep:\n  chunked_prefill_size: [4096, 8192]\n  max_total_tokens: [8192, 16384]\n", "")


def _override_sweep_in_base(text: str) -> str:
    return _replace(text, 'base:\n  name: "disagg-fp8-benchmark"\n',
                    'base:\n  name: "disagg-fp8-benchmark"\n  sweep:\n    conc: [1, 2]\n')


def _override_sweep_top_level(text: str) -> str:
    return _replace(text, "\nbase:\n", "\nsweep:\n  conc: [1, 2]\n\nbase:\n")


def _override_sweep_in_variant(text: str) -> str:
    return _replace(text, "override_tp64:\n", "override_tp64:\n  sweep:\n    conc: [1, 2]\n")


def _zip_unequal(text: str) -> str:
    return _replace(text, "    prefill_workers: [1, 2, 4]\n", "    prefill_workers: [1, 2]\n")


def _zip_no_lists(text: str) -> str:
    start = text.index("zip_override_tp_sweep:\n")
    return text[:start] + "zip_override_tp_sweep:\n  resources:\n    decode_nodes: 4\n"


def _zip_empty_list(text: str) -> str:
    return _replace(text, "    prefill_workers: [1, 2, 4]\n", "    prefill_workers: []\n")


def _override_merge_rules(text: str) -> str:
    # None deletes (override_ and zip_override_), scalar name in a zip group, a name list of
    # length 1, a new key, a list replaced, a placeholder (not expanded in override files).
    text = _replace(text, "override_small:\n",
                    "override_nulls:\n"
                    "  benchmark:\n"
                    "    req_rate: null\n"
                    "  backend:\n"
                    "    decode_environment: null\n"
                    "    sglang_config:\n"
                    "      prefill:\n"
                    "        trust-remote-code: null\n"
                    '        new-flag: "{conc}"\n'
                    "  environment:\n"
                    '    NEW_VAR: "1"\n'
                    "\n"
                    "zip_override_nulls:\n"
                    "  benchmark:\n"
                    "    req_rate: null\n"
                    "  backend:\n"
                    "    decode_environment: null\n"
                    "    sglang_config:\n"
                    "      prefill:\n"
                    "        trust-remote-code: null\n"
                    "        tp-size: [2, 4]\n"
                    "\n"
                    "zip_override_scalar_name:\n"
                    '  name: "same-for-all"\n'
                    "  resources:\n"
                    "    decode_nodes: [4, 6]\n"
                    "\n"
                    "zip_override_one_name:\n"
                    '  name: ["only-one"]\n'
                    "  resources:\n"
                    "    decode_nodes: [4, 6]\n"
                    "\n"
                    "override_small:\n")
    return text


def _override_no_base_name(text: str) -> str:
    text = _replace(text, 'base:\n  name: "disagg-fp8-benchmark"\n', "base:\n")
    start = text.index("\n# " + "=" * 77 + "\n# zip_override_*")
    return text[:start] + "\n"


SWEEP = "examples/example-sweep.yaml"
OVERRIDE = "examples/example-override.yaml"

SYNTHETIC = [
    ("sweep-undefined-param", SWEEP, _sweep_undefined,
     "a {param} no sweep key defines, in free-form strings (sglang_config): left as it is", []),
    ("sweep-undefined-param-typed", SWEEP, _sweep_undefined_typed,
     "a {param} no sweep key defines, in a typed field (resources.prefill_nodes): schema error", []),
    ("sweep-values", SWEEP, _sweep_values,
     "value types and placements: a list value whole and embedded, float, bool, null, a dict value, "
     "a value holding another placeholder, a placeholder in a list, in a key, in `name`, an "
     "unquoted `{ mem }` (a YAML flow mapping, not a string), and a number substituted as a string "
     "into a typed field (resources.decode_nodes: the schema turns it back into an integer)", []),
    ("sweep-empty-section", SWEEP, _sweep_empty_section, "`sweep: {}`: one job", []),
    ("sweep-empty-list", SWEEP, _sweep_empty_list, "a sweep key with an empty list: no job", []),
    ("sweep-string-values", SWEEP, _sweep_string_values,
     "a sweep value that is a string, not a list: iterated character by character", []),
    ("sweep-scalar-value", SWEEP, _sweep_scalar_value, "a sweep value that is a number: error", []),
    ("sweep-no-name", SWEEP, _sweep_no_name, "a sweep file without `name`: error", []),
    ("no-sweep", SWEEP, _no_sweep,
     "the sweep example without its `sweep:` section: one job, placeholders left as they are; "
     "`--sweep` forces sweep mode: error; a selector on a file that is not an override file: ignored",
     [("apply --sweep", ["--sweep"]), ("apply FILE:override_x", ":override_x")]),
    ("override-sweep-in-base", OVERRIDE, _override_sweep_in_base,
     "`sweep:` inside `base:` of an override file: every variant fails schema validation", []),
    ("override-sweep-top-level", OVERRIDE, _override_sweep_top_level,
     "`sweep:` at the top level of an override file, beside `base:`: ignored", []),
    ("override-sweep-in-variant", OVERRIDE, _override_sweep_in_variant,
     "`sweep:` inside one override_ section: that variant fails, the ones before it were submitted",
     []),
    ("zip-unequal", OVERRIDE, _zip_unequal, "zip lists of lengths 3 and 2: error", []),
    ("zip-no-lists", OVERRIDE, _zip_no_lists, "a zip_override_ section without a list: error", []),
    ("zip-empty-list", OVERRIDE, _zip_empty_list, "a zip_override_ section with an empty list: error", []),
    ("override-merge-rules", OVERRIDE, _override_merge_rules,
     "null deletes a key (override_ and zip_override_: they differ), new keys, a scalar `name` and "
     "a one-element `name` list in zip groups, a {placeholder} in an override file (not expanded)", []),
    ("override-no-base-name", OVERRIDE, _override_no_base_name,
     "a base without `name`: variants are named unnamed_<suffix>", []),
]

OVERRIDE_KEY = re.compile(r"(override_|zip_override_)")


# ---------------------------------------------------------------------------------------------
# Running srtctl


class Run:
    """What one `srtctl ...` invocation did."""

    def __init__(self) -> None:
        self.scripts: list[str] = []  # every script handed to sbatch, in order
        self.loads: list[tuple[str, dict]] = []  # (calling function, dict) for SrtConfig.Schema.load
        self.sweep_params: list[dict] = []  # generate_sweep_configs' parameter dicts
        self.stdout = ""
        self.submissions: list[dict] = []  # srtctl's own records of submitted jobs
        self.warnings: list[str] = []
        self.exit_code: int | None = None
        self.uncaught: str | None = None


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("srtctl"):
            self.records.append(f"{record.levelname} {record.name}: {record.getMessage()}")


def run_srtctl(argv: list[str], cwd: Path, cluster: Path | None) -> Run:
    import srtctl.cli.submit as submit
    import srtctl.core.sweep as sweep_mod
    from srtctl.core.schema import SrtConfig
    from srtctl.core.validation import ValidationResult

    run = Run()
    if cluster is None:
        os.environ.pop("SRTSLURM_CONFIG", None)
    else:
        os.environ["SRTSLURM_CONFIG"] = str(cluster)

    real_run = subprocess.run

    def fake_run(cmd, *args, **kwargs):
        if isinstance(cmd, list | tuple) and cmd and cmd[0] == "sbatch":
            run.scripts.append(Path(cmd[-1]).read_text())
            job_id = 1000 + len(run.scripts)
            return subprocess.CompletedProcess(cmd, 0, stdout=f"Submitted batch job {job_id}\n", stderr="")
        return real_run(cmd, *args, **kwargs)

    schema_cls = SrtConfig.Schema
    real_load = schema_cls.load

    def spy_load(self, data, *args, **kwargs):
        caller = inspect.stack()[1].function
        run.loads.append((caller, copy.deepcopy(data)))
        return real_load(self, data, *args, **kwargs)

    real_generate = sweep_mod.generate_sweep_configs

    def spy_generate(sweep_config):
        configs = real_generate(sweep_config)
        run.sweep_params.extend(copy.deepcopy(params) for _config, params in configs)
        return configs

    submit._submissions.clear()  # srtctl clears it itself in --json mode, after parsing arguments
    handler = _Warnings()
    root = logging.getLogger()
    root.addHandler(handler)
    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_argv = os.getcwd(), sys.argv
    os.chdir(cwd)
    sys.argv = ["srtctl", *argv]
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(patch("subprocess.run", fake_run))
            stack.enter_context(patch("srtctl.cli.submit.validate_setup"))
            stack.enter_context(patch("srtctl.cli.submit.create_job_record"))
            stack.enter_context(patch("srtctl.core.validation.validate_hf_model",
                                      return_value=ValidationResult("hf_model", True, "not checked")))
            stack.enter_context(patch.object(schema_cls, "load", spy_load))
            stack.enter_context(patch.object(sweep_mod, "generate_sweep_configs", spy_generate))
            stack.enter_context(contextlib.redirect_stdout(out))
            stack.enter_context(contextlib.redirect_stderr(err))
            try:
                submit.main()
                run.exit_code = 0
            except SystemExit as e:
                run.exit_code = e.code if isinstance(e.code, int) else 1
            except Exception as e:  # noqa: BLE001 - recorded: srtctl lets it escape main()
                run.uncaught = f"{type(e).__name__}: {e}"
                run.exit_code = 1
    finally:
        os.chdir(old_cwd)
        sys.argv = old_argv
        root.removeHandler(handler)
    run.stdout = out.getvalue()
    # --json prints these on success only; srtctl keeps them in submit._submissions either way.
    run.submissions = copy.deepcopy(submit._submissions)
    run.warnings = handler.records
    return run


# ---------------------------------------------------------------------------------------------
# Turning a run into records


def sbatch_lines(script: str, outdir: Path) -> list[str]:
    return [line.replace(str(outdir), "/OUT") for line in script.splitlines() if line.startswith("#SBATCH")]


def sbatch_nodes(lines: list[str]) -> int | list[int]:
    nodes = [int(line.split("=", 1)[1]) for line in lines if line.startswith("#SBATCH --nodes=")]
    if not nodes:
        raise SystemExit("no #SBATCH --nodes line")
    return nodes[0] if len(nodes) == 1 else nodes


def check_json(value, where: str):
    """The value must survive JSON unchanged (YAML can give dates, sets, non-string keys)."""
    if json.loads(json.dumps(value)) != value:
        raise SystemExit(f"{where}: not representable as JSON: {value!r}")
    return value


def apply(path: Path, extra: list[str] | str, cluster: Path | None, raw: dict) -> dict:
    """`srtctl apply -f FILE[:SEL] --no-preflight --json -o TMP [extra]`: jobs and error."""
    with tempfile.TemporaryDirectory(prefix="srtctl-sweeps-cwd-") as work, \
            tempfile.TemporaryDirectory(prefix="srtctl-sweeps-out-") as outdir:
        return _apply(path, extra, cluster, raw, Path(work), Path(outdir).resolve())


def _apply(path: Path, extra: list[str] | str, cluster: Path | None, raw: dict, work: Path, outdir: Path) -> dict:
    shutil.copyfile(path, work / path.name)
    target = path.name + (extra if isinstance(extra, str) else "")
    flags = extra if isinstance(extra, list) else []
    argv = ["apply", "-f", target, "--no-preflight", "--json", "-o", str(outdir), *flags]
    run = run_srtctl(argv, work, cluster)

    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    errors = [line["error"] for line in lines if line.get("status") == "error"]
    submitted = run.submissions
    if not errors and [line for line in lines if line.get("status") == "submitted"] != submitted:
        raise SystemExit(f"{path.name}: --json output differs from srtctl's submission records")
    if len(submitted) != len(run.scripts):
        raise SystemExit(f"{path.name}: {len(submitted)} submissions but {len(run.scripts)} sbatch calls")

    # The dict each job was validated from: generate_sweep_configs loads each expanded sweep
    # variant, submit_override each resolved override variant, load_config a single job.
    callers = [caller for caller, _data in run.loads]
    first = next((c for c in ("generate_sweep_configs", "submit_override", "load_config") if c in callers), None)
    expanded = [data for caller, data in run.loads if caller == first]
    is_sweep = bool(run.sweep_params) or (isinstance(raw, dict) and "sweep" in raw and "base" not in raw)

    jobs = []
    for i, sub in enumerate(submitted):
        job_dir = Path(sub["output_dir"])
        lines_ = sbatch_lines(run.scripts[i], outdir)
        if sbatch_lines((job_dir / "sbatch_script.sh").read_text(), outdir) != lines_:
            raise SystemExit(f"{path.name}: job dir script differs from the one handed to sbatch")
        job = {"job_name": sub["job_name"], "sbatch_nodes": sbatch_nodes(lines_), "sbatch_header": lines_}
        runtime_files = sorted(p.name for p in job_dir.glob("config_*.yaml"))
        runtime_file = runtime_files[0] if runtime_files else "config.yaml"
        if len(runtime_files) > 1:
            raise SystemExit(f"{job_dir}: several runtime configs {runtime_files}")
        job["runtime_config_file"] = runtime_file
        job["_runtime_text"] = (job_dir / runtime_file).read_text()
        runtime = check_json(yaml.safe_load(job["_runtime_text"]), f"{path.name} job {i} runtime config")
        job["_runtime"] = runtime
        if is_sweep:
            # [name, value] pairs in the sweep's key order (the JSON's keys are sorted).
            job["params"] = check_json([list(kv) for kv in run.sweep_params[i].items()], f"{path.name} params")
        elif runtime_files:
            job["suffix"] = runtime_file[len("config_"):-len(".yaml")]
        if i < len(expanded):
            job["expanded"] = check_json(expanded[i], f"{path.name} job {i} expanded")
        if runtime != job.get("expanded"):
            job["runtime_config"] = runtime
        jobs.append(job)

    result: dict = {"argv": ["srtctl", *[a.replace(str(outdir), "/OUT") for a in argv]], "jobs": jobs}
    if is_sweep and len(run.sweep_params) != len(jobs) and not errors:
        raise SystemExit(f"{path.name}: {len(run.sweep_params)} sweep configs but {len(jobs)} jobs")
    if errors:
        result["error"] = errors[0] if len(errors) == 1 else errors
    if run.uncaught:
        result["uncaught_exception"] = run.uncaught
    result["exit_code"] = run.exit_code
    if run.warnings:
        result["warnings"] = run.warnings
    return result


def resolve_override_stdout(path: Path) -> str:
    with tempfile.TemporaryDirectory(prefix="srtctl-sweeps-cwd-") as work:
        return _resolve_override_stdout(path, Path(work))


def _resolve_override_stdout(path: Path, work: Path) -> str:
    shutil.copyfile(path, work / path.name)
    run = run_srtctl(["resolve-override", "-f", path.name, "--stdout"], work, None)
    if run.exit_code != 0 or run.uncaught:
        raise SystemExit(f"resolve-override {path.name} failed: {run.uncaught or run.stdout}")
    if sorted(p.name for p in work.iterdir()) != [path.name]:
        raise SystemExit("resolve-override --stdout wrote files")
    return run.stdout


def plain_variants(raw: dict, selector: str | None = None) -> list[tuple[str, dict]]:
    from srtctl.core.config import generate_override_configs

    return generate_override_configs(raw, selector=selector)


def selector_of(suffix: str, raw: dict) -> str:
    """The selector that names this one variant (an override_ section wins, as in srtctl)."""
    if f"override_{suffix}" in raw:
        return f"override_{suffix}"
    group, _, index = suffix.rpartition("_")
    if f"zip_override_{group}" in raw and index.isdigit():
        return f"zip_override_{group}[{index}]"
    raise SystemExit(f"no selector for variant {suffix}")


def public(job: dict) -> dict:
    return {k: v for k, v in job.items() if not k.startswith("_")}


def diff(a, b, path=()) -> list[dict]:
    """Leaves that differ between two YAML values: [{path, without, with}] ("<absent>" if missing)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in list(a) + [k for k in b if k not in a]:
            out += diff(a.get(key, "<absent>"), b.get(key, "<absent>"), (*path, key))
        return out
    return [] if a == b else [{"path": list(path), "with": b, "without": a}]


# ---------------------------------------------------------------------------------------------
# One input file


def capture(path: Path, source: str, commit: str, note: str | None, srtctl_src: Path) -> dict:
    text = path.read_text()
    raw = yaml.safe_load(text)
    if isinstance(raw, dict) and "base" in raw:
        form = "override"
    elif isinstance(raw, dict) and "sweep" in raw:
        form = "sweep"
    else:
        form = "single"

    main = apply(path, [], None, raw)
    with_cluster = apply(path, [], CLUSTER, raw)
    if len(with_cluster["jobs"]) != len(main["jobs"]):
        raise SystemExit(f"{path.name}: the cluster config changes the number of jobs")

    variants = []
    for job, cjob in zip(main["jobs"], with_cluster["jobs"], strict=True):
        variant = public(job)
        variant["with_cluster_config"] = {
            "expanded_changes": diff(job.get("expanded"), cjob.get("expanded")),
            "job_name": cjob["job_name"],
            "runtime_config_changes": diff(job["_runtime"], cjob["_runtime"]),
            "sbatch_header": cjob["sbatch_header"],
            "sbatch_nodes": cjob["sbatch_nodes"],
        }
        variants.append(variant)

    record: dict = {
        "source": source,
        "commit": commit,
        "form": form,
        "command": main["argv"],
        "variants": variants,
        "errors": {},
    }
    if note:
        record["note"] = note
    if "error" in main or main["exit_code"] != 0:
        record["errors"]["apply"] = {k: v for k, v in main.items() if k != "jobs"}
    elif main.get("warnings"):
        record["warnings"] = main["warnings"]
    if "error" in with_cluster and with_cluster.get("error") != main.get("error"):
        record["errors"]["apply (with cluster config)"] = with_cluster["error"]

    if form == "override":
        plain = None
        with contextlib.suppress(Exception):
            plain = plain_variants(raw)
        if plain is not None:
            # generate_override_configs on the plain PyYAML dict: what the merge gives before
            # srtctl's ruamel round trip; recorded where the submitted config differs.
            for variant, (suffix, merged) in zip(variants, plain, strict=False):
                if variant.get("suffix") != suffix:
                    raise SystemExit(f"{path.name}: variant order differs: {variant.get('suffix')} vs {suffix}")
                if merged != variant.get("expanded"):
                    variant["generate_override_configs"] = check_json(merged, "plain merge")
        for variant, job in zip(variants, main["jobs"], strict=True):
            variant["selector"] = selector_of(variant["suffix"], raw)
            one = apply(path, ":" + variant["selector"], None, raw)
            same = (len(one["jobs"]) == 1 and "error" not in one
                    and public(one["jobs"][0]) == public(job))
            if not same:
                raise SystemExit(f"{path.name}:{variant['selector']} does not give variant {variant['suffix']}")
        if not record["errors"]:
            text_out = resolve_override_stdout(path)
            joined = ("\n".join(
                (f"# --- {job['suffix']} ---\n" if len(main["jobs"]) > 1 else "") + job["_runtime_text"]
                for job in main["jobs"]))
            if joined != text_out:
                raise SystemExit(f"{path.name}: resolve-override --stdout differs from the runtime configs")
            record["resolve_override_file"] = path.name.removesuffix(".yaml") + ".resolve-override.txt"
            (OUT / record["resolve_override_file"]).write_text(text_out)
            # Upstream checks in some resolved variants beside the recipe, under the name
            # resolve-override (without --stdout) writes: <stem>_<suffix>.yaml. Compare them.
            if not source.startswith("synthetic"):
                src = srtctl_src / source
                copies = {}
                for job in main["jobs"]:
                    sibling = src.with_name(f"{src.stem}_{job['suffix']}.yaml")
                    if sibling.exists():
                        same = sibling.read_text() == job["_runtime_text"]
                        copies[str(sibling.relative_to(srtctl_src))] = "identical" if same else "differs"
                if copies:
                    record["upstream_resolved_copies"] = copies

    if source == SELECTOR_FILE:
        record["selectors"] = {}
        cases = [(v["selector"], "this variant alone") for v in variants] + SELECTOR_CASES
        for selector, what in cases:
            one = apply(path, ":" + selector, None, raw)
            entry: dict = {"what": what, "argv": one["argv"], "exit_code": one["exit_code"]}
            entry["jobs"] = []
            for job in one["jobs"]:
                match = [i for i, v in enumerate(variants)
                         if v["suffix"] == job.get("suffix") and all(v.get(k) == x for k, x in public(job).items())]
                summary = {"job_name": job["job_name"], "suffix": job.get("suffix"),
                           "sbatch_nodes": job["sbatch_nodes"]}
                if match:
                    summary["same_as_variant"] = match[0]
                else:
                    summary["expanded"] = job.get("expanded")
                entry["jobs"].append(summary)
            for key in ("error", "uncaught_exception", "warnings"):
                if key in one:
                    entry[key] = one[key]
            if "error" in one or "uncaught_exception" in one:
                record["errors"][f"apply -f FILE:{selector}"] = {
                    k: v for k, v in entry.items() if k in ("argv", "error", "uncaught_exception", "exit_code")}
            record["selectors"][selector] = entry

    return record


def write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def find_inputs(srtctl_src: Path) -> list[str]:
    found = []
    for p in sorted(srtctl_src.rglob("*")):
        if not p.is_file() or p.suffix not in (".yaml", ".yml"):
            continue
        try:
            data = yaml.safe_load(p.read_text())
        except yaml.YAMLError:
            continue
        if isinstance(data, dict) and any(
            isinstance(k, str) and (k in ("sweep", "base") or OVERRIDE_KEY.match(k)) for k in data
        ):
            found.append(str(p.relative_to(srtctl_src)))
    return found


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    srtctl_src, commit = Path(sys.argv[1]).resolve(), sys.argv[2]
    sys.path.insert(0, str(srtctl_src / "src"))
    for var in ("SLURM_ACCOUNT", "SLURM_PARTITION", "RUNNER_NAME", "SRTSLURM_CONFIG"):
        os.environ.pop(var, None)
    logging.getLogger().setLevel(logging.WARNING)
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.iterdir():
        old.unlink()

    inputs: list[tuple[Path, str, str | None]] = []
    for rel in find_inputs(srtctl_src):
        target = OUT / rel.replace("/", "__")
        shutil.copyfile(srtctl_src / rel, target)
        inputs.append((target, rel, None))
    for name, base, make, what, _extra in SYNTHETIC:
        target = OUT / f"synthetic__{name}.yaml"
        header = (f"# Synthetic input for {SCRIPT}: {base} (NVIDIA/srt-slurm @ {commit}) changed to show\n"
                  f"# {what}.\n")
        target.write_text(header + make((srtctl_src / base).read_text()))
        inputs.append((target, f"synthetic, from {base}", what))

    summary = []
    for target, source, note in inputs:
        record = capture(target, source, commit, note, srtctl_src)
        name = next(s for s in SYNTHETIC if target.name == f"synthetic__{s[0]}.yaml") if note else None
        for label, extra in (name[4] if name else []):
            raw = yaml.safe_load(target.read_text())
            res = apply(target, extra, None, raw)
            entry = {k: v for k, v in res.items() if k != "jobs"}
            entry["jobs"] = [{"job_name": j["job_name"], "sbatch_nodes": j["sbatch_nodes"]} for j in res["jobs"]]
            key = "errors" if ("error" in res or "uncaught_exception" in res) else "other_runs"
            record.setdefault(key, {})[label] = entry
        write_json(target.with_name(target.name.removesuffix(".yaml") + ".srtctl.json"), record)
        summary.append((target.name, source, record))
        print(f"{target.name}: {record['form']}, {len(record['variants'])} jobs"
              + (f", errors: {sorted(record['errors'])}" if record["errors"] else ""))

    write_readme(summary, commit)
    return 0


RULES = """## What srtctl does (read from its code, shown by these captures)

How `srtctl apply -f X` routes: a directory: every *.yaml/*.yml under it, sorted, each on its own;
a mapping with a top-level `base` key: override file (a top-level `sweep` and `--sweep` are
ignored); else a top-level `sweep` key (or `--sweep`): sweep file; else one job.

Sweep file (`core/sweep.py` generate_sweep_configs):

- cluster defaults (srtslurm.yaml) are applied to the whole file first;
- jobs: itertools.product over the `sweep` values in the mapping's key order (the last key varies
  fastest); each value is iterated as Python iterates it: a string gives its characters, a
  number is an error, `[]` gives no job, `sweep: {}` one job;
- each job: the file without `sweep`, every string value (in mappings and lists, never keys,
  never non-string scalars) rewritten: for each sweep key in order, a list value when the string
  is exactly `{key}` replaces the whole string (and stops), a list value inside a longer string
  is written as its items' str() joined by `,`, any other value replaces every `{key}` with
  Python str(value) (`True`, `None`, `0.85`, `{'a': 1}`); later keys see earlier replacements;
  `{other}` with no such sweep key stays as written; an unquoted `{ x }` is a YAML mapping;
- job name: `<name as written, unexpanded>_` + `_`.join(key + str(value)), e.g.
  `x_conc[16, 32]_mem0.85`; it replaces `name`;
- the dict is loaded by SrtConfig.Schema (typed fields coerce "4" to 4) and its dump is what the
  job runs (config.yaml); a missing `name` fails with `'name'`.

Override file (`core/config.py` generate_override_configs, resolve_override_yaml):

- jobs: every `override_*` key sorted, then every `zip_override_*` key sorted; `base` alone is
  never submitted without the `base` selector; `{x}` placeholders are not expanded;
- `override_<s>`: base deep-merged with the section (mappings merge recursively, anything else,
  lists included, replaces, `null` deletes the key, base key order then new keys); suffix `<s>`;
  name: the section's `name` if it has one, else `<base name or unnamed>_<s>`;
- `zip_override_<g>`: N = the length shared by every list found in the section's mappings
  (length-1 lists broadcast; other lengths must agree, else `Incompatible zip lengths [..]`;
  no list or an empty list: error); variant i takes item i of each list (a list item stays a
  list) and scalars as they are, deep-merged into base; suffix `<g>_<i>`; name: item i of a
  `name` list, else `<base name>_<g>_<i>` (a scalar `name` is ignored);
- what is submitted is re-merged with ruamel.yaml, dumped and read back with PyYAML: the same
  as above except that `null` in a zip_override section deletes nothing (the base value stays);
  the job runs that text (config_<suffix>.yaml, without cluster defaults), validated with
  cluster defaults applied; a `sweep` key inside `base` or a section fails validation
  (`{'sweep': ['Unknown field.']}`) at that variant, after the earlier ones were submitted.

Selectors: `-f FILE:SEL` (split at the last `:`): `base`, `override_<s>`, `zip_override_<g>`
(the group), `zip_override_<g>[i]`, or a glob with `*`/`?` (fnmatch on the section names, base
excluded). The error texts are in examples__example-override.srtctl.json `errors`; a selector
of another shape raises before srtctl's error handling (a traceback, no --json line); a
selector on a file without `base` is ignored with a warning.
"""


def write_readme(summary: list, commit: str) -> None:
    rerun = RERUN.format(commit=commit)
    upstream = [s for s in summary if not s[1].startswith("synthetic")]
    synthetic = [s for s in summary if s[1].startswith("synthetic")]
    lines = [
        "# srtctl's expansion of one file into several jobs",
        "",
        f"Captured from srtctl's own code (NVIDIA/srt-slurm @ {commit}) by `{SCRIPT}`; its docstring",
        "says what is run, what is patched and what is assumed. Do not edit by hand: rerun",
        "",
        "```",
        f"git -C <srt-slurm clone> archive {commit} | tar -x -C /tmp/srt-slurm",
        rerun,
        "```",
        "",
        "(the venv: see the script's docstring). The output is deterministic.",
        "",
        "Per input `X.yaml`: `X.srtctl.json` (sorted keys): `source`, `commit`, `form` (`sweep`,",
        "`override` or `single`), `command`, `variants` (the jobs `srtctl apply -f X.yaml` submits, in",
        "order: `job_name`, `params` (sweep) or `suffix` and `selector` (override), `expanded` (the dict",
        "srtctl gives `SrtConfig.Schema().load` for the job: for a sweep the expanded recipe inside",
        "`generate_sweep_configs`, for an override variant the resolved runtime YAML re-read with",
        "PyYAML, both before schema loading), `sbatch_nodes` and `sbatch_header` (the `#SBATCH` lines),",
        "`runtime_config_file` (the config the job runs, in its output directory) and `runtime_config`",
        "when its content differs from `expanded` (sweeps: srtctl writes the schema's dump),",
        "`generate_override_configs` when the plain-dict merge differs from what is submitted,",
        "`with_cluster_config` (the same run with ../srtslurm/srtslurm.yaml: changes only)), `errors`,",
        "and for override files `X.resolve-override.txt` (stdout of `srtctl resolve-override -f X.yaml",
        "--stdout`, which is also the text of each job's `config_<suffix>.yaml`) and",
        "`upstream_resolved_copies` (resolved variants checked in upstream beside the recipe, compared",
        "with what srtctl generates). `params` is a list of `[name, value]` pairs in the sweep's order.",
        "",
    ] + RULES.splitlines() + [
        "",
        "## Upstream files",
        "",
        "Every file in the tree whose top level has `sweep`, `base`, `override_*` or `zip_override_*`",
        "(copied byte for byte, `/` in the path replaced by `__`):",
        "",
        "| file | source | form | jobs | sections |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, source, record in upstream:
        raw = yaml.safe_load((OUT / name).read_text())
        sections = ", ".join(f"`{k}`" for k in raw if k == "sweep" or OVERRIDE_KEY.match(k))
        lines.append(f"| {name} | {source} | {record['form']} | {len(record['variants'])} | {sections} |")
    total = sum(len(r["variants"]) for _n, _s, r in upstream)
    lines += [
        "",
        f"{len(upstream)} files, {total} jobs. The selector form (`FILE:SELECTOR`) is recorded in",
        "examples__example-override.srtctl.json (`selectors`); for every override file the script",
        "checks that each variant's `selector` submits that variant alone, identically.",
        "",
        "## Synthetic inputs",
        "",
        "Upstream examples with a small change (said in each file's first lines), for errors and",
        "edge cases no upstream file has:",
        "",
        "| file | jobs | shows | errors |",
        "| --- | --- | --- | --- |",
    ]
    for name, _source, record in synthetic:
        errs = ", ".join(f"`{e}`" for e in sorted(record["errors"])) or "none"
        lines.append(f"| {name} | {len(record['variants'])} | {record['note']} | {errs} |")
    (OUT / "README.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
