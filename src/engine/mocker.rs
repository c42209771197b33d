//! Dynamo's mocker: a simulated engine that registers, schedules and streams random tokens
//! without weights, so a whole job (discovery, frontend, benchmark) runs on any node. Launched
//! exactly as srtctl's `MockerProtocol.build_worker_command` (srt-slurm v1
//! `backends/mocker.py`, main @ c88ef731): `python3 -m dynamo.mocker --model-path …`, the
//! disaggregation mode and the prefill's bootstrap port, the simulation settings (always the
//! core six, the rest only when not at srtctl's default), then `backend.mocker_config.<mode>`.
//!
//! Settings are read from `backend.*` (v1) or `engine.*` (2.0) with srtctl's defaults and
//! types (marshmallow: a float is printed as Python prints it, `100` → `100.0`). The mocker
//! serves Dynamo's system status server on its `DYN_SYSTEM_PORT`: it is ready when `GET
//! /health` there answers 200, which needs [`HEALTH_FROM_ENDPOINTS`] (mcsup's default, not
//! srtctl's: srtctl judges workers through the frontend). Pure.

use super::flags::{config_to_cli_args, python_float};
use super::layout::TopoProcess;
use super::reader::Reader;
use super::{worker_env, LaunchContext, WorkerLaunch};
use crate::domain::{PlanError, Role};
use crate::recipe::{FlagMap, Recipe};

/// `MockerProtocol`'s settings, with srtctl's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct MockerSettings {
    pub engine_type: String,
    pub speedup_ratio: f64,
    pub decode_speedup_ratio: f64,
    pub num_gpu_blocks_override: i64,
    pub max_num_seqs: i64,
    pub max_num_batched_tokens: i64,
    pub block_size: Option<i64>,
    pub data_parallel_size: i64,
    pub num_workers: i64,
    pub startup_time: Option<f64>,
    pub kv_transfer_bandwidth: Option<f64>,
    pub kv_cache_dtype: Option<String>,
    pub enable_prefix_caching: bool,
    pub enable_chunked_prefill: bool,
    pub preemption_mode: Option<String>,
}

impl Default for MockerSettings {
    fn default() -> Self {
        Self {
            engine_type: "vllm".into(),
            speedup_ratio: 100.0,
            decode_speedup_ratio: 1.0,
            num_gpu_blocks_override: 16384,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            block_size: None,
            data_parallel_size: 1,
            num_workers: 1,
            startup_time: None,
            kv_transfer_bandwidth: None,
            kv_cache_dtype: None,
            enable_prefix_caching: true,
            enable_chunked_prefill: true,
            preemption_mode: None,
        }
    }
}

/// The recipe keys the mocker reads besides the role environments (v1 `backend.*`, 2.0
/// `engine.*`); `mocker_config` holds the per-mode flags.
pub const RECIPE_KEYS: &[&str] = &[
    "engine_type",
    "speedup_ratio",
    "decode_speedup_ratio",
    "num_gpu_blocks_override",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "data_parallel_size",
    "num_workers",
    "startup_time",
    "kv_transfer_bandwidth",
    "kv_cache_dtype",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "preemption_mode",
    "mocker_config",
];

impl MockerSettings {
    /// Read from `backend.*` (v1) or `engine.*` (2.0); absent keys keep srtctl's defaults.
    pub fn from_recipe(recipe: &Recipe) -> Result<Self, PlanError> {
        let r = Reader {
            recipe,
            section: super::section(recipe),
        };
        let d = Self::default();
        Ok(Self {
            engine_type: r.string("engine_type")?.unwrap_or(d.engine_type),
            speedup_ratio: r.float("speedup_ratio")?.unwrap_or(d.speedup_ratio),
            decode_speedup_ratio: r
                .float("decode_speedup_ratio")?
                .unwrap_or(d.decode_speedup_ratio),
            num_gpu_blocks_override: r
                .int("num_gpu_blocks_override")?
                .unwrap_or(d.num_gpu_blocks_override),
            max_num_seqs: r.int("max_num_seqs")?.unwrap_or(d.max_num_seqs),
            max_num_batched_tokens: r
                .int("max_num_batched_tokens")?
                .unwrap_or(d.max_num_batched_tokens),
            block_size: r.int("block_size")?,
            data_parallel_size: r.int("data_parallel_size")?.unwrap_or(d.data_parallel_size),
            num_workers: r.int("num_workers")?.unwrap_or(d.num_workers),
            startup_time: r.float("startup_time")?,
            kv_transfer_bandwidth: r.float("kv_transfer_bandwidth")?,
            kv_cache_dtype: r.string("kv_cache_dtype")?,
            enable_prefix_caching: r
                .boolean("enable_prefix_caching")?
                .unwrap_or(d.enable_prefix_caching),
            enable_chunked_prefill: r
                .boolean("enable_chunked_prefill")?
                .unwrap_or(d.enable_chunked_prefill),
            preemption_mode: r.string("preemption_mode")?,
        })
    }
}

/// Dynamo's system status server answers `/health` 503 `notready` for as long as the process
/// lives unless told which endpoints make it ready. Measured with ai-dynamo 1.6.1's mocker and
/// srtctl's argv: `{"status":"notready",…,"endpoints":{"generate":"ready"}}` still after 40 s
/// and 60 s without it, 200 `ready` within 2 s with it (twice each). That release logs "is
/// deprecated and no longer used" for it all the same; the measurement is what counts here,
/// and a newer release that drops it shows as a worker that never gets ready.
pub const HEALTH_FROM_ENDPOINTS: &str = "DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS";

/// The mocker argv for `p` (srtctl's `build_worker_command`).
pub fn mocker_argv(
    m: &MockerSettings,
    c: &LaunchContext,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
) -> Vec<String> {
    let mut argv: Vec<String> = ["python3", "-m", "dynamo.mocker", "--model-path"]
        .map(String::from)
        .to_vec();
    argv.push(c.model_arg.clone());
    if p.mode != Role::Aggregated {
        argv.extend(["--disaggregation-mode".into(), p.mode.as_str().into()]);
    }
    if let (Role::Prefill, Some(b)) = (p.mode, p.bootstrap_port) {
        argv.extend(["--bootstrap-ports".into(), b.to_string()]);
    }
    let mut flag = |name: &str, value: String| {
        argv.push(format!("--{name}"));
        argv.push(value);
    };
    flag("engine-type", m.engine_type.clone());
    flag("speedup-ratio", python_float(m.speedup_ratio));
    flag("data-parallel-size", m.data_parallel_size.to_string());
    flag(
        "num-gpu-blocks-override",
        m.num_gpu_blocks_override.to_string(),
    );
    flag("max-num-seqs", m.max_num_seqs.to_string());
    flag(
        "max-num-batched-tokens",
        m.max_num_batched_tokens.to_string(),
    );
    if m.decode_speedup_ratio != 1.0 {
        flag("decode-speedup-ratio", python_float(m.decode_speedup_ratio));
    }
    if let Some(b) = m.block_size {
        flag("block-size", b.to_string());
    }
    if m.num_workers > 1 {
        flag("num-workers", m.num_workers.to_string());
    }
    if let Some(t) = m.startup_time {
        flag("startup-time", python_float(t));
    }
    if let Some(b) = m.kv_transfer_bandwidth {
        flag("kv-transfer-bandwidth", python_float(b));
    }
    if let Some(d) = &m.kv_cache_dtype {
        flag("kv-cache-dtype", d.clone());
    }
    if !m.enable_prefix_caching {
        argv.push("--no-enable-prefix-caching".into());
    }
    if !m.enable_chunked_prefill {
        argv.push("--no-enable-chunked-prefill".into());
    }
    if let Some(mode) = &m.preemption_mode {
        argv.extend(["--preemption-mode".into(), mode.clone()]);
    }
    if let Some(f) = flags {
        argv.extend(config_to_cli_args(f, &[]));
    }
    argv
}

/// The mocker worker process `p`: one process per endpoint and node, with srtctl's common
/// worker environment and no per-process variables of its own.
pub fn launch(
    m: &MockerSettings,
    c: &LaunchContext,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
) -> WorkerLaunch {
    let (env_before, env_after) = worker_env(c, p);
    let mut ports = vec![("dyn_system".to_string(), p.sys_port)];
    if let (Role::Prefill, Some(b)) = (p.mode, p.bootstrap_port) {
        ports.push(("bootstrap".into(), b));
    }
    WorkerLaunch {
        name: format!("mocker-{}-{}", p.mode.short(), p.index),
        argv: mocker_argv(m, c, p, flags),
        env_before,
        env_after,
        env_defaults: vec![(
            HEALTH_FROM_ENDPOINTS.to_string(),
            "[\"generate\"]".to_string(),
            "mcsup: /health follows the generate endpoint",
        )],
        health_port: p.is_leader().then_some(p.sys_port),
        ports,
        slurm_step: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> Result<MockerSettings, PlanError> {
        let r = crate::recipe::parse_str(std::path::Path::new("r.yaml"), yaml).unwrap();
        MockerSettings::from_recipe(&r)
    }

    #[test]
    fn defaults_are_srtctls() {
        let m = settings("backend:\n  type: mocker\n").unwrap();
        assert_eq!(m, MockerSettings::default());
    }

    #[test]
    fn marshmallow_spellings_are_accepted() {
        let m = settings(
            "backend:\n  type: mocker\n  speedup_ratio: \"2.5\"\n  max_num_seqs: 64.0\n  enable_prefix_caching: \"no\"\n  block_size: null\n",
        )
        .unwrap();
        assert_eq!(m.speedup_ratio, 2.5);
        assert_eq!(m.max_num_seqs, 64);
        assert!(!m.enable_prefix_caching);
        assert_eq!(m.block_size, None);
    }

    #[test]
    fn a_bad_setting_names_its_key_and_the_fix() {
        let e = settings("backend:\n  type: mocker\n  speedup_ratio: fast\n").unwrap_err();
        assert_eq!(e.key_path, "backend.speedup_ratio");
        assert!(e.message.contains("`fast` is not a number"), "{e}");
        assert_eq!(e.fix, "write speedup_ratio: 100");
        let e = settings("backend:\n  type: mocker\n  max_num_seqs: 1.5\n").unwrap_err();
        assert_eq!(e.key_path, "backend.max_num_seqs");
        let e =
            settings("backend:\n  type: mocker\n  enable_chunked_prefill: maybe\n").unwrap_err();
        assert_eq!(e.key_path, "backend.enable_chunked_prefill");
        let e = settings("backend:\n  type: mocker\n  engine_type: [a]\n").unwrap_err();
        assert_eq!(e.key_path, "backend.engine_type");
    }
}

/// `mocker`: Dynamo's simulated engine.
#[derive(Debug)]
pub struct Mocker;

impl super::EngineKind for Mocker {
    fn name(&self) -> &'static str {
        "mocker"
    }

    fn flags_section(&self) -> &'static str {
        "mocker_config"
    }

    fn recipe_keys(&self) -> &'static [&'static str] {
        RECIPE_KEYS
    }

    fn dynamo_module(&self) -> &'static str {
        "dynamo.mocker"
    }

    fn settings(
        &self,
        inputs: &super::EngineInputs<'_, '_>,
    ) -> Result<Option<std::sync::Arc<dyn super::Engine>>, PlanError> {
        Ok(Some(std::sync::Arc::new(MockerSettings::from_recipe(
            inputs.recipe,
        )?)))
    }
}

impl super::Engine for MockerSettings {
    fn kind(&self) -> &'static dyn super::EngineKind {
        &Mocker
    }

    fn launch(
        &self,
        c: &LaunchContext,
        p: &TopoProcess,
        flags: Option<&FlagMap>,
        _kv_events: Option<&serde_yaml::Value>,
    ) -> WorkerLaunch {
        launch(self, c, p, flags)
    }
}
