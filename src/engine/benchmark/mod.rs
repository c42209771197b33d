//! srtctl's benchmark stage (`cli/mixins/benchmark_stage.py`, `benchmarks/*.py` @ c88ef731):
//! after the job is servable, one client runs the recipe's `benchmark:` on one node, and the
//! job's result is its exit status. One module per family of benchmark types behind one seam:
//! a [`BenchmarkKind`] in the registry [`BENCHMARKS`] builds its command (srtctl's
//! `build_command`), checks its settings (`validate_config`) and adds its environment; the stage
//! around it ([`stage`]) is srtctl's for every type: the node (`_benchmark_node`, with
//! `client_placement`), the health wait before it (`wait_for_model` and its counts), the
//! environment (`_get_benchmark_env`: profiling windows, worker endpoints, the frontend's
//! address, the recipe's environment, the measurement window, SA-Bench's slow-down, AIPerf's
//! server metrics), the container and its mounts (`/logs`, `/model`, `/configs`,
//! `/srtctl-runtime`, `/srtctl-benchmarks` from the srt-slurm checkout), and the srun step
//! (srtctl writes its output to `<log_dir>/benchmark.out`; mcsup's client writes the process log
//! `<log_dir>/<node>.benchmark.log` like every process it runs).
//!
//! | `benchmark.type` | module | command |
//! |---|---|---|
//! | `sa-bench` | [`sa_bench`] | `bash /srtctl-benchmarks/sa-bench/bench.sh` with 19 positional settings |
//! | `mooncake-router`, `trace-replay` | [`aiperf`] | AIPerf over a Mooncake trace, `aiperf_args` appended |
//! | `router`, `sglang-bench` | [`sglang`] | SGLang's router benchmark, `sglang.bench_serving` |
//! | `gsm8k`, `mmlu`, `gpqa`, `lm-eval`, `longbenchv2` | [`evals`] | the accuracy evaluations |
//! | `custom` | [`custom`] | `bash -lc <benchmark.command>`, verbatim |
//! | `manual` (the default) | none | no client: the job serves until it is stopped |
//!
//! The scripts are srtctl's own and stay in its checkout: never copied into this repository.
//! Adding a type: a runner implementing [`BenchmarkKind`] and one line in [`BENCHMARKS`]. Pure.

pub mod aiperf;
pub mod custom;
pub mod evals;
pub mod sa_bench;
pub mod settings;
pub mod sglang;

use std::path::{Path, PathBuf};

use super::flags::python_float;
use super::frontend::FrontendType;
use super::layout::{TopoProcess, TopologyInputs};
use super::EngineKind;
use crate::domain::{plan_err, PlanError, Role};
pub use settings::BenchmarkSettings;

/// srtctl's benchmark types, in its registry's order: one line each.
pub static BENCHMARKS: &[&dyn BenchmarkKind] = &[
    &sa_bench::SaBench,
    &aiperf::MooncakeRouter,
    &sglang::Router,
    &sglang::SglangBench,
    &evals::Gsm8k,
    &evals::Mmlu,
    &evals::Gpqa,
    &evals::LmEval,
    &evals::LongBenchV2,
    &aiperf::TraceReplay,
    &custom::Custom,
];

/// The type that runs no client (srtctl's default): the job serves until it is stopped.
pub const MANUAL: &str = "manual";

/// Where srtctl mounts its benchmark scripts, its runtime scripts and the log directory.
pub const SCRIPTS_MOUNT: &str = "/srtctl-benchmarks";
pub const RUNTIME_MOUNT: &str = "/srtctl-runtime";
pub const LOGS_MOUNT: &str = "/logs";
/// Where, in an srt-slurm checkout, the two script directories are.
pub const SCRIPTS_IN_CHECKOUT: &str = "src/srtctl/benchmarks/scripts";
pub const RUNTIME_IN_CHECKOUT: &str = "src/srtctl/runtime_scripts";

/// One benchmark type (srtctl's `@register_benchmark` runner).
pub trait BenchmarkKind: std::fmt::Debug + Sync {
    /// Its `benchmark.type`.
    fn name(&self) -> &'static str;
    /// srtctl's `runner.name` (`SA-Bench`), for messages.
    fn title(&self) -> &'static str;
    /// Its script below the scripts mount (`sa-bench/bench.sh`); `None` for a command of the
    /// recipe's own.
    fn script(&self) -> Option<&'static str>;
    /// What srtctl's `validate_config` refuses, each a message naming the key.
    fn validate(&self, b: &BenchmarkSettings, c: &BenchContext<'_>) -> Vec<String>;
    /// srtctl's `build_command`.
    fn command(&self, b: &BenchmarkSettings, c: &BenchContext<'_>) -> Vec<String>;
    /// srtctl's `get_environment`: its own variables, set last.
    fn environment(&self, _b: &BenchmarkSettings) -> Vec<(String, String)> {
        Vec::new()
    }
    /// srtctl's `get_container_image`: the job's, unless the type names its own.
    fn image(&self, _b: &BenchmarkSettings) -> Option<String> {
        None
    }
    /// It is one of srtctl's `AIPerfBenchmarkRunner`s: AIPerf's server metrics and package.
    fn aiperf(&self) -> bool {
        false
    }
    /// It runs the worker profiling windows itself (SA-Bench, SGLang-Bench, Trace-Replay):
    /// the profile output directory and the head node go into its environment.
    fn drives_profiling(&self) -> bool {
        false
    }
}

/// The type a recipe names, or an error naming the registry's.
pub fn kind(name: &str) -> Result<&'static dyn BenchmarkKind, PlanError> {
    if let Some(k) = BENCHMARKS.iter().copied().find(|k| k.name() == name) {
        return Ok(k);
    }
    let names: Vec<&str> = BENCHMARKS
        .iter()
        .map(|k| k.name())
        .chain(std::iter::once(MANUAL))
        .collect();
    let fix = match crate::domain::suggest(name, names.iter().copied()) {
        Some(k) => format!("did you mean `{k}`? (types: {})", names.join(", ")),
        None => format!("use one of: {}", names.join(", ")),
    };
    Err(plan_err(
        "benchmark.type",
        format!("unknown benchmark type `{name}` (srtctl's registry has no such runner)"),
        fix,
    )
    .at_value())
}

/// What the stage reads of the job besides `benchmark:` (srtctl's config and `RuntimeContext`).
#[derive(Debug, Clone)]
pub struct BenchContext<'a> {
    pub engine: &'static dyn EngineKind,
    /// `frontend.type` as the recipe writes it (`SRTCTL_FRONTEND_TYPE`; v1's router is `sglang`).
    pub frontend_written: String,
    pub frontend: FrontendType,
    /// `model.path` (an `hf:` id without its prefix) and whether it is an `hf:` model.
    pub model_path: String,
    pub hf_model: bool,
    pub served_model_name: String,
    /// srtctl's layout sizes and whether the job is disaggregated (`prefill_nodes` or
    /// `decode_nodes` set), with `agg_nodes` (default 1).
    pub sizes: &'a TopologyInputs,
    pub disaggregated: bool,
    pub agg_nodes: u32,
    /// Every worker process of the job, in srtctl's order.
    pub processes: &'a [TopoProcess],
    /// The worker nodes' names and addresses, by worker-node index.
    pub node_names: &'a [String],
    pub node_ips: &'a [String],
    /// The head node's name, and the node the client runs on.
    pub head: String,
    pub bench: String,
    /// The node whose public port clients probe, and its address.
    pub public_node: String,
    pub public_ip: String,
    /// srtctl's runtime environment (the wheel's variables, then `environment:` as written).
    pub environment: Vec<(String, String)>,
    /// `profiling:`, when on: its type and each mode's steps.
    pub profiling: Option<ProfilingWindows>,
    /// `telemetry.storage_subdir`, when telemetry is on.
    pub telemetry: Option<String>,
    /// `DYN_KVBM_METRICS_PORT` of the prefill or aggregated workers' environment.
    pub kvbm_port: Option<String>,
}

/// What the benchmark learns of `profiling:`.
#[derive(Debug, Clone, Default)]
pub struct ProfilingWindows {
    /// `nsys`, `nsys-time`, `torch`.
    pub kind: String,
    /// (mode, start, stop) for prefill, decode, aggregated, where set.
    pub steps: Vec<(&'static str, Option<i64>, Option<i64>)>,
}

/// srtctl's health wait before the client (`wait_for_model`).
#[derive(Debug, Clone, PartialEq)]
pub struct HealthWait {
    /// The public API node's name, and its port (`FRONTEND_PUBLIC_PORT`).
    pub host: String,
    pub port: u16,
    pub prefill: u32,
    pub decode: u32,
    /// `health_check.interval_seconds` and `max_attempts x interval_seconds`.
    pub interval_s: f64,
    pub timeout_s: f64,
}

/// The benchmark stage as srtctl runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchmarkStage {
    /// `benchmark.type` and srtctl's runner title.
    pub kind: &'static str,
    pub title: &'static str,
    /// The node the client runs on.
    pub node: String,
    /// srtctl's command (the `bash -c` body's last part).
    pub command: Vec<String>,
    /// The variables srtctl exports before it, in its order.
    pub env: Vec<(String, String)>,
    /// `benchmark.container_image` (custom), else the job's image.
    pub image: Option<String>,
    pub health: HealthWait,
}

/// The stage for the recipe's `benchmark:`; `Ok(None)` for `manual` (no client).
pub fn stage(
    b: &BenchmarkSettings,
    c: &BenchContext<'_>,
    health: HealthWait,
) -> Result<Option<BenchmarkStage>, PlanError> {
    if b.kind == MANUAL {
        return Ok(None);
    }
    let k = kind(&b.kind)?;
    let errors = k.validate(b, c);
    if let Some(first) = errors.first() {
        let key = first
            .split_whitespace()
            .find(|w| w.starts_with("benchmark."))
            .unwrap_or("benchmark")
            .trim_end_matches([',', ':'])
            .to_string();
        return Err(plan_err(
            key,
            format!(
                "{}: srtctl refuses this {} benchmark ({})",
                errors.join("; "),
                k.title(),
                k.name()
            ),
            "set the benchmark keys its runner needs (docs/recipe.md, benchmark)",
        ));
    }
    let mut env = Env::default();
    env.extend(environment(k, b, c));
    env.extend(k.environment(b));
    Ok(Some(BenchmarkStage {
        kind: k.name(),
        title: k.title(),
        node: c.bench.clone(),
        command: k.command(b, c),
        env: env.0,
        image: k.image(b),
        health,
    }))
}

/// A Python dict of strings: a later write keeps the key's first position.
#[derive(Debug, Default)]
struct Env(Vec<(String, String)>);

impl Env {
    fn set(&mut self, k: impl Into<String>, v: impl Into<String>) {
        let (k, v) = (k.into(), v.into());
        match self.0.iter_mut().find(|(x, _)| *x == k) {
            Some(slot) => slot.1 = v,
            None => self.0.push((k, v)),
        }
    }

    fn extend(&mut self, pairs: impl IntoIterator<Item = (String, String)>) {
        for (k, v) in pairs {
            self.set(k, v);
        }
    }
}

/// srtctl's `_get_benchmark_env`, in its order.
fn environment(
    k: &dyn BenchmarkKind,
    b: &BenchmarkSettings,
    c: &BenchContext<'_>,
) -> Vec<(String, String)> {
    let custom = k.name() == custom::Custom.name();
    let mut env = Env::default();
    env.extend(profiling_env(k, c));
    if custom {
        env.extend(worker_endpoint_env(c));
    }
    env.set("SRTCTL_FRONTEND_TYPE", c.frontend_written.clone());
    env.set("SRT_FRONTEND_HOST", c.public_ip.clone());
    env.set("SRT_FRONTEND_PORT", PUBLIC_PORT.to_string());
    env.extend(c.environment.iter().cloned());
    if let Some(subdir) = &c.telemetry {
        env.set(
            "SRT_MEASUREMENT_WINDOW_DIR",
            format!("{LOGS_MOUNT}/{subdir}/windows"),
        );
    }
    if k.name() == sa_bench::SaBench.name() {
        env.extend(slow_down_env(b, c));
    }
    if k.aiperf() {
        env.extend(aiperf_metrics_env(c, false));
        if let Some(p) = &b.aiperf_package {
            env.set("AIPERF_PACKAGE", p.clone());
        }
    } else if custom {
        env.extend(aiperf_metrics_env(c, true));
    }
    env.0
}

/// srtctl's `FRONTEND_PUBLIC_PORT`.
pub const PUBLIC_PORT: u16 = super::frontend::PUBLIC_PORT;
/// srtctl's `SGLANG_HTTP_PORT_BASE` (the workers' profiling port).
const SGLANG_HTTP_PORT_BASE: u16 = super::layout::ports::HTTP;

/// Each logical worker's (mode, leader address, port): the Dynamo system port behind Dynamo's
/// frontend, the public port behind vLLM's own, the worker's HTTP port otherwise.
fn logical_endpoints(c: &BenchContext<'_>) -> Vec<(&'static str, String, u16)> {
    c.processes
        .iter()
        .filter(|p| p.is_leader())
        .filter_map(|p| {
            let port = if c.frontend.kind().discovers_workers() {
                p.sys_port
            } else if c.frontend.kind().worker_serves() {
                PUBLIC_PORT
            } else {
                p.http_port
            };
            (port > 0).then(|| (p.mode.short(), c.node_ips[p.node].clone(), port))
        })
        .collect()
}

/// `_get_benchmark_profiling_env`.
fn profiling_env(k: &dyn BenchmarkKind, c: &BenchContext<'_>) -> Vec<(String, String)> {
    let Some(p) = &c.profiling else {
        return Vec::new();
    };
    let dir = format!("{LOGS_MOUNT}/profiles");
    let mut env = Env::default();
    env.set("PROFILE_TYPE", p.kind.clone());
    for (mode, start, stop) in &p.steps {
        let up = mode.to_ascii_uppercase();
        if let Some(s) = start {
            env.set(format!("PROFILE_{up}_START_STEP"), s.to_string());
        }
        if let Some(s) = stop {
            env.set(format!("PROFILE_{up}_STOP_STEP"), s.to_string());
        }
    }
    if p.kind == "torch" {
        env.set("SGLANG_TORCH_PROFILER_DIR", dir.clone());
    }
    let eps = logical_endpoints(c);
    let of = |mode: &str, with_port: bool| -> Vec<String> {
        eps.iter()
            .filter(|(m, _, _)| *m == mode)
            .map(|(_, ip, port)| {
                if with_port {
                    format!("{ip}:{port}")
                } else {
                    ip.clone()
                }
            })
            .collect()
    };
    for with_port in [false, true] {
        for (mode, up) in [("prefill", "PREFILL"), ("decode", "DECODE"), ("agg", "AGG")] {
            let list = of(mode, with_port);
            if !list.is_empty() {
                let what = if with_port { "ENDPOINTS" } else { "IPS" };
                env.set(format!("PROFILE_{up}_{what}"), list.join(","));
            }
        }
    }
    if k.drives_profiling() {
        env.set("PROFILE_OUTPUT_DIR", dir);
        env.set("BENCH_MODEL_NAME", c.served_model_name.clone());
        env.set("HEAD_NODE", c.head.clone());
        env.set("HEAD_PORT", PUBLIC_PORT.to_string());
        env.set("PROFILE_WORKER_PORT", SGLANG_HTTP_PORT_BASE.to_string());
    }
    if c.engine.steps_from_host() {
        env.set("PROFILING_BACKEND", c.engine.name());
    }
    env.0
}

/// `_get_worker_endpoint_env` (custom benchmarks): the logical workers per mode.
fn worker_endpoint_env(c: &BenchContext<'_>) -> Vec<(String, String)> {
    let eps = logical_endpoints(c);
    let mut env = Vec::new();
    for (mode, up) in [("prefill", "PREFILL"), ("decode", "DECODE"), ("agg", "AGG")] {
        let here: Vec<&(&str, String, u16)> = eps.iter().filter(|(m, _, _)| *m == mode).collect();
        if here.is_empty() {
            continue;
        }
        env.push((
            format!("SRT_{up}_IPS"),
            here.iter()
                .map(|(_, ip, _)| ip.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ));
        env.push((
            format!("SRT_{up}_ENDPOINTS"),
            here.iter()
                .map(|(_, ip, port)| format!("{ip}:{port}"))
                .collect::<Vec<_>>()
                .join(","),
        ));
    }
    env
}

/// `_get_sa_bench_slow_down_env`: only with both times positive and SGLang's router, on the
/// decode leaders' HTTP ports.
fn slow_down_env(b: &BenchmarkSettings, c: &BenchContext<'_>) -> Vec<(String, String)> {
    let (Some(sleep), Some(wait)) = (b.slow_down_sleep_time, b.slow_down_wait_time) else {
        return Vec::new();
    };
    if sleep <= 0.0 || wait <= 0.0 || !c.frontend.kind().talks_to_engine_servers() {
        return Vec::new();
    }
    let urls: Vec<String> = c
        .processes
        .iter()
        .filter(|p| p.is_leader() && p.mode == Role::Decode)
        .map(|p| format!("http://{}:{}", c.node_ips[p.node], p.http_port))
        .collect();
    if urls.is_empty() {
        return Vec::new();
    }
    vec![
        ("SA_BENCH_SLOW_DOWN_URLS".into(), urls.join(",")),
        ("SA_BENCH_SLOW_DOWN_SLEEP_TIME".into(), python_float(sleep)),
        ("SA_BENCH_SLOW_DOWN_WAIT_TIME".into(), python_float(wait)),
    ]
}

/// `_get_aiperf_server_metrics_env`: every process's Dynamo system port (sorted, distinct),
/// or vLLM's public port; a custom command gets the logical workers in layout order. KVBM's
/// metrics port of the prefill and aggregated leaders on top.
fn aiperf_metrics_env(c: &BenchContext<'_>, logical_only: bool) -> Vec<(String, String)> {
    let mut urls: Vec<String> = Vec::new();
    if logical_only {
        urls = logical_endpoints(c)
            .into_iter()
            .map(|(_, host, port)| format!("http://{host}:{port}/metrics"))
            .collect();
    } else {
        if c.frontend.kind().worker_serves() {
            let mut own: Vec<String> = c
                .processes
                .iter()
                .filter(|p| p.mode == Role::Aggregated && p.is_leader())
                .map(|p| format!("http://{}:{PUBLIC_PORT}/metrics", c.node_ips[p.node]))
                .collect();
            if !own.is_empty() {
                own.sort();
                own.dedup();
                return vec![("AIPERF_SERVER_METRICS_URLS".into(), own.join(","))];
            }
        }
        for p in c.processes.iter().filter(|p| p.sys_port > 0) {
            urls.push(format!(
                "http://{}:{}/metrics",
                c.node_ips[p.node], p.sys_port
            ));
        }
    }
    if let Some(port) = &c.kvbm_port {
        for p in c
            .processes
            .iter()
            .filter(|p| matches!(p.mode, Role::Prefill | Role::Aggregated) && p.is_leader())
        {
            urls.push(format!("http://{}:{port}/metrics", c.node_ips[p.node]));
        }
    }
    if urls.is_empty() {
        return Vec::new();
    }
    if logical_only {
        let mut seen = std::collections::HashSet::new();
        urls.retain(|u| seen.insert(u.clone()));
    } else {
        urls.sort();
        urls.dedup();
    }
    vec![("AIPERF_SERVER_METRICS_URLS".into(), urls.join(","))]
}

/// Where srtctl's scripts are in an srt-slurm checkout, if they are there.
pub fn scripts_in(root: &Path) -> Option<(PathBuf, PathBuf)> {
    let scripts = root.join(SCRIPTS_IN_CHECKOUT);
    let runtime = root.join(RUNTIME_IN_CHECKOUT);
    (scripts.is_dir() && runtime.is_dir()).then_some((scripts, runtime))
}

/// The tokenizer srtctl's clients load: the `hf:` id, else the model's mount.
pub fn tokenizer(c: &BenchContext<'_>) -> String {
    if c.hf_model {
        c.model_path.clone()
    } else {
        "/model".into()
    }
}

/// The public endpoint as the client on the head node reaches it.
pub fn endpoint() -> String {
    format!("http://localhost:{PUBLIC_PORT}")
}

/// The script's path inside the container.
pub fn script_path(k: &dyn BenchmarkKind) -> String {
    format!("{SCRIPTS_MOUNT}/{}", k.script().unwrap_or_default())
}
