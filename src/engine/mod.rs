//! The engines: how each inference engine's worker is launched, exactly as srtctl launches it.
//! One module per engine behind one seam: an [`EngineKind`] (what mcsup knows of the engine
//! before its settings are read: its name, where its flags live, how its workers reach
//! Mooncake) in the registry [`ENGINES`], whose [`EngineKind::settings`] reads the recipe into an
//! [`Engine`] (the layout of its processes, each process's launch, its files and its notes). The
//! planner knows no engine's flags and compares no engine name. Pure.
//!
//! | engine (`backend.type` / `engine.type`) | module | worker | ready when |
//! |---|---|---|---|
//! | `sglang` | [`sglang`] | `dynamo.sglang` (or `sglang.launch_server` behind an SGLang router) | the leader answers `GET /health` (system port, or `--port`) |
//! | `vllm` | [`vllm`] | `dynamo.vllm` (or `vllm serve` behind srtctl's vLLM frontend), DP launch modes | each process that runs a front answers `GET /health` |
//! | `mocker` | [`mocker`] | `dynamo.mocker`, Dynamo's simulated engine (no weights) | it answers `GET /health` on its `DYN_SYSTEM_PORT` |
//! | `trtllm` | [`trtllm`] | one Slurm step per endpoint over its nodes, one rank per GPU: `trtllm-llmapi-launch python3 -m dynamo.trtllm` (or `trtllm-serve`), started by the leader node's mcsup | the leader answers `GET /health` (system port, or `trtllm-serve`'s port) |
//! | `atom`, `tilert` (2.0) | [`unmanaged`] | none: srtctl 2.0 registers them, mcsup derives no worker (list them under `mcsup.workers`) | – |
//!
//! Adding an engine: a module with its kind (a unit struct implementing [`EngineKind`]), its
//! settings read from the recipe (errors naming `backend.<key>` / `engine.<key>`) implementing
//! [`Engine`], and one line in [`ENGINES`]; then its fixtures in `tests/fixtures/srt-slurm-v1`
//! with srtctl's own output.
//!
//! What every engine shares is srtctl's `start_worker` environment ([`worker_env`]) and the
//! flag rendering of [`flags`].

pub mod benchmark;
pub mod flags;
pub mod frontend;
pub mod job;
pub mod layout;
pub mod liveness;
pub mod mocker;
pub mod observability;
pub mod profiling;
pub mod reader;
pub mod sglang;
pub mod signatures;
pub mod stop;
pub mod trtllm;
pub mod unmanaged;
pub mod vllm;

use std::sync::Arc;

use crate::domain::{PlanError, Role};
use crate::recipe::{FlagMap, Recipe};
use layout::{ports, Endpoint, TopoProcess, TopologyInputs};

pub use flags::{config_to_cli_args, python_float, python_str, render_flags};

/// The engines mcsup knows, in srtctl's order: one line each.
pub static ENGINES: &[&dyn EngineKind] = &[
    &sglang::Sglang,
    &vllm::Vllm,
    &trtllm::Trtllm,
    &mocker::Mocker,
    &unmanaged::Atom,
    &unmanaged::Tilert,
];

/// The engine named `name`, as the registry spells it.
pub fn kind(name: &str) -> Option<&'static dyn EngineKind> {
    ENGINES.iter().copied().find(|k| k.name() == name)
}

/// The engine a recipe names: 2.0's `engine.type` (any case), else v1's `backend.type` (as
/// srtctl's schema spells it), else srtctl's default, `sglang`. An unknown name is an error at
/// the value, with the closest known one.
pub fn of_recipe(recipe: &Recipe) -> Result<&'static dyn EngineKind, PlanError> {
    use crate::domain::{plan_err, suggest};
    if let Some(e) = &recipe.engine {
        let Some(written) = &e.r#type else {
            return Ok(&sglang::Sglang);
        };
        let name = written.trim().to_ascii_lowercase();
        if let Some(k) = kind(&name) {
            return Ok(k);
        }
        let names: Vec<&str> = ENGINES.iter().map(|k| k.name()).collect();
        let key = match recipe.raw_get(&["engine"]) {
            Some(serde_yaml::Value::String(_)) => "engine",
            _ => "engine.type",
        };
        let fix = match suggest(&name, names.iter().copied()) {
            Some(k) => format!("did you mean `{k}`? (engines: {})", names.join(", ")),
            None => format!("use one of: {}", names.join(", ")),
        };
        return Err(plan_err(key, format!("unknown engine type `{written}`"), fix).at_value());
    }
    let Some(written) = recipe.backend.as_ref().and_then(|b| b.r#type.as_ref()) else {
        return Ok(&sglang::Sglang);
    };
    let v1 = || ENGINES.iter().filter(|k| k.in_v1());
    if let Some(k) = v1().find(|k| k.name() == written) {
        return Ok(*k);
    }
    let list = v1()
        .map(|k| format!("`{}`", k.name()))
        .collect::<Vec<_>>()
        .join(", ");
    let fix = match suggest(written, v1().map(|k| k.name())) {
        Some(k) => format!("did you mean `{k}`? (valid: {list})"),
        None => format!("valid values here: {list}"),
    };
    Err(plan_err("backend.type", format!("unknown value `{written}`"), fix).at_value())
}

/// What a worker derived without srtctl's layout runs (a role's flags with no worker counts):
/// the engine's server module and its default port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Server {
    /// The process name's prefix (`sglang` → `sglang-<role>`).
    pub prefix: &'static str,
    /// `python3 -m <module>`.
    pub module: &'static str,
    /// Where it listens when its flags set no `port`.
    pub default_port: u16,
}

/// How an engine's workers reach Mooncake Store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MooncakeClient {
    /// Through the environment (`MOONCAKE_MASTER`, `MOONCAKE_GLOBAL_SEGMENT_SIZE`, ...);
    /// `sglang_sizes`: SGLang's own reading of the size variables applies (its lints).
    Env { sglang_sizes: bool },
    /// vLLM: a JSON file (`MOONCAKE_CONFIG_PATH`) the plan writes, and the requester's address.
    ConfigFile,
}

/// Why mcsup derives no workers of an engine for a recipe that srtctl would run, and what to do:
/// the plan's warning on a node that still runs services, or its error on a worker node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Underivable {
    /// The key the error points at.
    pub key: &'static str,
    /// What srtctl does with the engine's workers.
    pub srtctl: &'static str,
    /// What mcsup lacks to do it for this recipe.
    pub gap: &'static str,
    pub fix: &'static str,
}

/// What mcsup makes of `roles.<role>.args` (2.0) for an engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleArgs {
    /// The engine's command-line flags (scalars and lists), read as such.
    Flags,
    /// The engine's own settings, which its settings read from the recipe (nested mappings).
    Settings,
    /// Not read: listed as ignored.
    Unread,
}

/// What the engine's settings are read from.
pub struct EngineInputs<'r, 'f> {
    pub recipe: &'r Recipe,
    /// Each mode's engine flags (`backend.<engine>_config.<mode>`, `roles.<role>.args`).
    pub flags: &'f dyn Fn(Role) -> Option<&'r FlagMap>,
    /// `frontend.type`.
    pub frontend: frontend::FrontendType,
}

/// An engine as mcsup knows it before reading its settings: a registry entry ([`ENGINES`]).
pub trait EngineKind: std::fmt::Debug + Sync {
    /// The name recipes give it (`backend.type`, `engine.type`).
    fn name(&self) -> &'static str;
    /// srt-slurm v1 knows it as a `backend.type` (2.0 registers more).
    fn in_v1(&self) -> bool {
        true
    }
    /// The v1 section of its per-mode flags (`backend.<section>.<mode>`).
    fn flags_section(&self) -> &'static str;
    /// What `roles.<role>.args` are for it (2.0).
    fn role_args(&self) -> RoleArgs {
        RoleArgs::Flags
    }
    /// The engine section's keys (`backend.*`, `engine.*`) its settings read, beyond those the
    /// recipe parser knows; the plan does not list them as ignored.
    fn recipe_keys(&self) -> &'static [&'static str] {
        &[]
    }
    /// The Dynamo module its workers run when Dynamo's frontend fronts them.
    fn dynamo_module(&self) -> &'static str;
    /// How a process running `module` of this engine stops (`python -m <module>`; `<name>
    /// serve` is `<name>.serve`): its Dynamo module stops as a Dynamo worker.
    fn stops_as(&self, module: &str) -> Option<stop::StopEngine> {
        (module == self.dynamo_module()).then_some(stop::StopEngine::Dynamo { sglang: false })
    }
    /// What a worker derived without srtctl's layout runs; `None`: only the layout starts its
    /// workers.
    fn server(&self) -> Option<Server> {
        None
    }
    /// How its workers reach Mooncake Store.
    fn mooncake_client(&self) -> MooncakeClient {
        MooncakeClient::Env {
            sglang_sizes: false,
        }
    }
    /// Whether srtctl requires its disaggregated workers to name Mooncake as their transfer
    /// backend when a Mooncake master runs (SGLang's `disaggregation-transfer-backend`).
    fn checks_transfer_backend(&self) -> bool {
        false
    }
    /// Whether its flags size a host-memory cache the DRAM budget counts (SGLang's HiCache L2).
    fn host_cache_flags(&self) -> bool {
        false
    }
    /// The worker nodes srtctl's allocation needs when it packs prefill and decode workers onto
    /// shared nodes for this recipe (the job's node count); `None` when it does not.
    fn packed_nodes(&self, _recipe: &Recipe) -> Result<Option<usize>, PlanError> {
        Ok(None)
    }
    /// Whether its endpoints are Slurm steps that mcsup starts from the host, outside the
    /// engine's container (`mcsup render` runs mcsup there), each an MPI job of one rank per
    /// GPU (the batch script's `--ntasks`).
    fn steps_from_host(&self) -> bool {
        false
    }
    /// Why mcsup derives none of its workers for `recipe` (which lists none under
    /// `mcsup.workers`), when it cannot; `has_layout`: the recipe gives srtctl's worker counts.
    fn underivable(&self, _recipe: &Recipe, _has_layout: bool) -> Option<Underivable> {
        None
    }
    /// Its settings from the recipe; `None` when mcsup derives no worker for it.
    fn settings(&self, inputs: &EngineInputs<'_, '_>)
        -> Result<Option<Arc<dyn Engine>>, PlanError>;
}

/// What a frontend must list for one role, as the engine's processes register there.
pub struct HealthCount<'a> {
    pub role: Role,
    /// Logical workers of the role (endpoints).
    pub logical: u32,
    /// Every worker process of the job.
    pub all: &'a [TopoProcess],
    /// The frontend that counts them.
    pub frontend: frontend::FrontendType,
}

/// An engine with its settings: how srtctl lays out, launches and accompanies its workers.
pub trait Engine: std::fmt::Debug + Send + Sync {
    /// Its registry entry.
    fn kind(&self) -> &'static dyn EngineKind;

    /// Its part in srtctl's allocation (vLLM packs prefill and decode together when allowed).
    fn adjust_layout(&self, _inputs: &mut TopologyInputs) {}

    /// The job's worker processes over the allocated endpoints. `dp_size` is a mode's
    /// `data-parallel-size` (0 when its flags set none).
    fn processes(
        &self,
        endpoints: &[Endpoint],
        _dp_size: &dyn Fn(Role) -> u32,
    ) -> Result<Vec<TopoProcess>, PlanError> {
        Ok(layout::processes(endpoints))
    }

    /// How many entries of `c.role` the frontend lists (srtctl's `_get_health_expectations`):
    /// the logical workers, unless the engine registers otherwise.
    fn health_count(&self, c: &HealthCount<'_>, _dp_size: &dyn Fn(Role) -> u32) -> u32 {
        c.logical
    }

    /// Checks of `profiling:` against the modes' flags (`(key, flags)`).
    fn check_profiling(
        &self,
        _profiling: &profiling::Profiling,
        _modes: &[(&str, &FlagMap)],
    ) -> Result<(), PlanError> {
        Ok(())
    }

    /// The worker process `p` as srtctl launches it (before any profiler prefix). `flags` are
    /// the mode's engine flags; `kv_events` srtctl's kv-events setting.
    fn launch(
        &self,
        c: &LaunchContext,
        p: &TopoProcess,
        flags: Option<&FlagMap>,
        kv_events: Option<&serde_yaml::Value>,
    ) -> WorkerLaunch;

    /// Each endpoint is one Slurm step of all its ranks, started, stopped and restarted whole
    /// from its leader node (TRT-LLM): only leaders are processes, and the step carries its
    /// ranks' own profiler prefix.
    fn step_per_endpoint(&self) -> bool {
        false
    }

    /// Endpoints sharing a leader node start this many at a time (0: all at once).
    fn sequential_start(&self) -> u32 {
        0
    }

    /// A file the mode's ranks read, written before its endpoints start: (path, contents,
    /// purpose).
    fn mode_file(&self, _log_dir: &str, _mode: Role) -> Option<(String, String, String)> {
        None
    }

    /// The engine's own frontend over the job's processes `all` (a `trtllm_serve` job's
    /// orchestrator), when it has one.
    fn orchestrator(
        &self,
        _c: &LaunchContext,
        _all: &[TopoProcess],
        _head: &str,
    ) -> Result<Option<trtllm::Orchestrator>, PlanError> {
        Ok(None)
    }

    /// What srtctl does around the processes `here` that the plan's reader must know (their
    /// steps' images, where their launchers come from).
    fn notes(&self, _c: &LaunchContext, _here: &[TopoProcess], _out: &mut Vec<String>) {}
}

/// The worker process `p` of `engine`, with the nsys prefix of `profiling:` (a step per endpoint
/// carries its ranks' own).
pub fn launch(
    engine: &dyn Engine,
    c: &LaunchContext,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
    kv_events: Option<&serde_yaml::Value>,
) -> WorkerLaunch {
    let mut w = engine.launch(c, p, flags, kv_events);
    if let (Some(prof), false) = (&c.profiling, engine.step_per_endpoint()) {
        let mut argv = prof.nsys_prefix(&c.log_dir, &c.node_names[p.node], p);
        argv.append(&mut w.argv);
        w.argv = argv;
    }
    w
}

/// One worker process as its engine launches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLaunch {
    /// The process name (`sglang-prefill-0`, `vllm-agg-1-dp2`, `mocker-decode-0`).
    pub name: String,
    pub argv: Vec<String>,
    /// Set before the role env (srtctl's base env and `DYN_LOG`).
    pub env_before: EnvPairs,
    /// Set after `environment:` (the partial-node `CUDA_VISIBLE_DEVICES`, per-process ports).
    pub env_after: EnvPairs,
    /// mcsup's own defaults, not srtctl's, with the reason shown as their source in the plan;
    /// set after `env_before` and before the role env, which may override them.
    pub env_defaults: Vec<(String, String, &'static str)>,
    /// The local port whose `GET /health` answering 200 makes the worker ready; `None` for a
    /// process that serves nothing (a follower rank): it is ready once started.
    pub health_port: Option<u16>,
    /// The ports the process listens on, named, for the plan and the preflight.
    pub ports: Vec<(String, u16)>,
    /// The name of the Slurm step the process's `srun` starts (a TRT-LLM endpoint).
    pub slurm_step: Option<String>,
}

/// Where an engine's settings live: `engine.*` in a 2.0 recipe, `backend.*` in v1.
pub(crate) fn section(recipe: &Recipe) -> &'static str {
    if recipe.engine.is_some() {
        "engine"
    } else {
        "backend"
    }
}

/// The container the Slurm steps mcsup starts run in (pyxis), when mcsup itself runs on the host
/// (`mcsup render` of a TRT-LLM job: `--step-container-image`, `--step-container-mounts`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepContainer {
    pub image: String,
    /// `--container-mounts`: `host:container[,...]`, as written.
    pub mounts: String,
}

impl StepContainer {
    /// srtctl's container options of a step (`start_srun_process`).
    pub fn srun_args(&self) -> Vec<String> {
        let mut a = vec![
            "--container-image".to_string(),
            self.image.clone(),
            "--no-container-entrypoint".into(),
            "--no-container-mount-home".into(),
        ];
        if !self.mounts.is_empty() {
            a.extend(["--container-mounts".into(), self.mounts.clone()]);
        }
        a
    }
}

/// What srtctl reads besides the role's flags.
#[derive(Debug, Clone)]
pub struct LaunchContext {
    /// The Slurm job (`SLURM_JOB_ID`), when known: the job a TRT-LLM endpoint's step joins.
    pub job_id: Option<String>,
    /// The container of the steps mcsup starts, when it runs on the host.
    pub step_container: Option<StepContainer>,
    /// `sglang.launch_server` (an SGLang router frontend) or `dynamo.sglang` (the default).
    pub dynamo: bool,
    /// `--model-path`: the HF id of an `hf:` model, else `/model` (srtctl's mount point).
    pub model_arg: String,
    pub served_model_name: String,
    /// `dynamo.request_plane` (default `tcp`).
    pub request_plane: String,
    pub event_plane: Option<String>,
    /// Where `--dump-config-to` writes (srtctl's host log directory).
    pub log_dir: String,
    /// Every worker node's name and address, by worker-node index.
    pub node_names: Vec<String>,
    pub node_ips: Vec<String>,
    /// The head node's address (`HEAD_NODE_IP`) and the infra node's name (etcd/NATS host).
    pub head_ip: String,
    pub infra_node: String,
    pub gpus_per_node: u32,
    /// `observability:` (OTEL env on every worker).
    pub observability: observability::Observability,
    /// `profiling:`, when on (nsys prefix, profiling env, vLLM's profiler window).
    pub profiling: Option<profiling::Profiling>,
}

/// srtctl's kv-events config for a mode, when enabled (`backend.kv_events_config` in v1,
/// `roles.<role>.kv_events` in 2.0): `true`, or a mapping merged over the defaults.
pub fn kv_events_for(
    cfg: Option<&serde_yaml::Value>,
    mode: Role,
    vllm: bool,
) -> Option<Vec<(String, serde_json::Value)>> {
    let defaults = || {
        let mut d = vec![
            ("publisher".to_string(), serde_json::Value::from("zmq")),
            ("topic".to_string(), serde_json::Value::from("kv-events")),
        ];
        if vllm {
            d.push((
                "enable_kv_cache_events".into(),
                serde_json::Value::Bool(true),
            ));
        }
        d
    };
    let cfg = cfg?;
    match cfg {
        serde_yaml::Value::Bool(true) => {
            matches!(mode, Role::Prefill | Role::Decode).then(defaults)
        }
        serde_yaml::Value::Mapping(m) => {
            let key = if mode == Role::Aggregated {
                "aggregated"
            } else {
                mode.as_str()
            };
            match m.get(key)? {
                serde_yaml::Value::Bool(true) => Some(defaults()),
                serde_yaml::Value::Mapping(inner) => {
                    let mut out = defaults();
                    for (k, v) in inner {
                        let k = k.as_str()?.to_string();
                        let v = serde_json::to_value(v).ok()?;
                        match out.iter_mut().find(|(x, _)| *x == k) {
                            Some(slot) => slot.1 = v,
                            None => out.push((k, v)),
                        }
                    }
                    Some(out)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// srtctl's `DynamoConfig.get_wheel_environment` (v1 `dynamo.wheel`): what its Dynamo
/// prefetch and set-up scripts read, set on every worker and Dynamo frontend just before the
/// recipe's `environment:` (which wins). With its checks of `dynamo.wheel`.
pub fn dynamo_wheel_env(recipe: &Recipe) -> Result<EnvPairs, PlanError> {
    let r = reader::Reader {
        recipe,
        section: "dynamo",
    };
    let Some(version) = r.string("wheel")? else {
        return Ok(Vec::new());
    };
    let fix = "write the ai-dynamo package version, e.g. wheel: \"1.2.0.dev20260426\"";
    if version.trim().is_empty() {
        return Err(crate::domain::plan_err("dynamo.wheel", "is empty", fix));
    }
    if version.ends_with(".whl") || version.contains('/') {
        return Err(crate::domain::plan_err(
            "dynamo.wheel",
            format!("`{version}` is a file name; srtctl takes a package version"),
            fix,
        ));
    }
    let other = ["hash", "top_of_tree"].into_iter().find(|k| {
        recipe
            .raw_get(&["dynamo", k])
            .is_some_and(|v| v.as_bool() != Some(false))
    });
    if let Some(k) = other {
        return Err(crate::domain::plan_err(
            "dynamo.wheel",
            format!("is set with dynamo.{k}: srtctl installs Dynamo from one source"),
            format!("keep dynamo.wheel or dynamo.{k}, not both"),
        ));
    }
    Ok(vec![
        (
            "DYNAMO_WHEEL_NAME".into(),
            format!("ai_dynamo-{version}-py3-none-any.whl"),
        ),
        ("DYNAMO_VERSION".into(), version),
    ])
}

/// Environment variables in the order a launcher sets them.
pub type EnvPairs = Vec<(String, String)>;

/// The environment srtctl's `start_worker` sets on every engine's worker, in its
/// order: base, OTEL (`observability:`), `DYN_LOG`, then (after the role env and
/// `environment:`) the profiling env and the partial-node `CUDA_VISIBLE_DEVICES`. Returned as (before role env, after `environment:`).
pub fn worker_env(c: &LaunchContext, p: &TopoProcess) -> (EnvPairs, EnvPairs) {
    let mut base = vec![
        ("HEAD_NODE_IP".to_string(), c.head_ip.clone()),
        (
            "ETCD_ENDPOINTS".into(),
            format!("http://{}:{}", c.infra_node, ports::ETCD),
        ),
        (
            "NATS_SERVER".into(),
            format!("nats://{}:{}", c.infra_node, ports::NATS),
        ),
        ("DYN_SYSTEM_PORT".into(), p.sys_port.to_string()),
        ("DYN_REQUEST_PLANE".into(), c.request_plane.clone()),
        ("DYN_SKIP_SGLANG_LOG_FORMATTING".into(), "1".into()),
    ];
    if let Some(e) = &c.event_plane {
        base.push(("DYN_EVENT_PLANE".into(), e.clone()));
    }
    base.extend(c.observability.otel_env(p.mode.short()));
    base.push((
        "DYN_LOG".into(),
        "info,dynamo_runtime::pipeline::network::ingress::push_handler=warn".into(),
    ));
    let mut after = Vec::new();
    if let Some(prof) = &c.profiling {
        after.extend(prof.env(p.mode, &c.log_dir));
    }
    if (p.gpus.len() as u32) < c.gpus_per_node {
        after.push(("CUDA_VISIBLE_DEVICES".into(), p.cuda_visible_devices()));
    }
    (base, after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flags::python_json_dumps;

    #[test]
    fn kv_events_configs() {
        let t: serde_yaml::Value = serde_yaml::from_str("true").unwrap();
        assert!(kv_events_for(Some(&t), Role::Prefill, false).is_some());
        assert!(kv_events_for(Some(&t), Role::Aggregated, false).is_none());
        let m: serde_yaml::Value = serde_yaml::from_str("{aggregated: {topic: x}}").unwrap();
        let kv = kv_events_for(Some(&m), Role::Aggregated, false).unwrap();
        assert_eq!(
            python_json_dumps(&kv),
            r#"{"publisher": "zmq", "topic": "x"}"#
        );
    }
}
