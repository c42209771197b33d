//! The engines: how each inference engine's worker is launched, exactly as srtctl launches it.
//! One module per engine behind one seam ([`EngineSettings`]); the planner knows no engine's
//! flags. Pure: settings come from the recipe, the layout from [`layout`].
//!
//! | engine (`backend.type` / `engine.type`) | module | worker | ready when |
//! |---|---|---|---|
//! | `sglang` | [`sglang`] | `dynamo.sglang` (or `sglang.launch_server` behind an SGLang router) | the leader answers `GET /health` (system port, or `--port`) |
//! | `vllm` | [`vllm`] | `dynamo.vllm` (or `vllm serve` behind srtctl's vLLM frontend), DP launch modes | each process that runs a front answers `GET /health` |
//! | `mocker` | [`mocker`] | `dynamo.mocker`, Dynamo's simulated engine (no weights) | it answers `GET /health` on its `DYN_SYSTEM_PORT` |
//! | `trtllm` | [`trtllm`] | one Slurm step per endpoint over its nodes, one rank per GPU: `trtllm-llmapi-launch python3 -m dynamo.trtllm` (or `trtllm-serve`), started by the leader node's mcsup | the leader answers `GET /health` (system port, or `trtllm-serve`'s port) |
//!
//! Adding an engine: a module with its settings (read from the recipe, errors naming the key)
//! and its `launch`, a variant of [`EngineSettings`], and its fixtures in
//! `tests/fixtures/srt-slurm-v1` with srtctl's own output.
//!
//! What every engine shares is srtctl's `start_worker` environment ([`worker_env`]) and the
//! flag rendering of [`flags`].

pub mod flags;
pub mod frontend;
pub mod job;
pub mod layout;
pub mod mocker;
pub mod observability;
pub mod profiling;
pub mod reader;
pub mod sglang;
pub mod signatures;
pub mod stop;
pub mod trtllm;
pub mod vllm;

use std::collections::BTreeMap;

use crate::domain::{PlanError, Role};
use crate::recipe::{FlagMap, Recipe};
use layout::{ports, TopoProcess};

pub use flags::{config_to_cli_args, python_float, python_str, render_flags};

/// Which engine runs the derived workers, with its settings from the recipe.
#[derive(Debug, Clone)]
pub enum EngineSettings {
    Sglang,
    /// How each mode runs.
    Vllm(BTreeMap<Role, vllm::VllmMode>),
    Mocker(mocker::MockerSettings),
    /// One Slurm step per endpoint, started from its leader node.
    Trtllm(trtllm::TrtllmSettings),
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

impl EngineSettings {
    /// The engine's settings, read from the recipe (`backend.*` in v1, `engine.*` in 2.0).
    /// `engine` is the engine's name as written; `None` when mcsup derives no worker for it.
    pub fn from_recipe<'a>(
        engine: &str,
        recipe: &Recipe,
        flags: &dyn Fn(Role) -> Option<&'a FlagMap>,
        frontend: &str,
    ) -> Result<Option<Self>, PlanError> {
        Ok(match engine {
            "sglang" => Some(Self::Sglang),
            "vllm" => Some(Self::Vllm(vllm::modes(recipe, flags, frontend))),
            "mocker" => Some(Self::Mocker(mocker::MockerSettings::from_recipe(recipe)?)),
            // srt-slurm v1's `backend:`; 2.0's `engine: trtllm` is not read yet.
            "trtllm" if recipe.engine.is_none() => Some(Self::Trtllm(
                trtllm::TrtllmSettings::from_recipe(recipe, frontend)?,
            )),
            _ => None,
        })
    }

    /// The Dynamo module the workers run when Dynamo's frontend fronts them.
    pub fn dynamo_module(&self) -> &'static str {
        match self {
            Self::Sglang => "dynamo.sglang",
            Self::Vllm(_) => "dynamo.vllm",
            Self::Mocker(_) => "dynamo.mocker",
            Self::Trtllm(_) => "dynamo.trtllm",
        }
    }

    /// The worker process `p` as srtctl launches it. `flags` are the mode's engine flags
    /// (`backend.<engine>_config.<mode>`, `roles.<role>.args`); `kv_events` srtctl's
    /// kv-events setting (`backend.kv_events_config`).
    pub fn launch(
        &self,
        c: &LaunchContext,
        p: &TopoProcess,
        flags: Option<&FlagMap>,
        kv_events: Option<&serde_yaml::Value>,
    ) -> WorkerLaunch {
        let mut w = match self {
            Self::Sglang => sglang::launch(c, p, flags, kv_events_for(kv_events, p.mode, false)),
            Self::Vllm(modes) => {
                // Every mode is in the map (`vllm::modes` covers Role::ALL).
                let fallback = vllm::VllmMode::default();
                let v = modes.get(&p.mode).unwrap_or(&fallback);
                // srtctl adds the profiler window to the mode's flags, after the recipe's.
                let window = c
                    .profiling
                    .as_ref()
                    .and_then(|x| x.vllm_profiler_config(p.mode));
                let with_window = window.map(|cfg| {
                    let mut f = flags.cloned().unwrap_or_default();
                    f.0.push(("profiler-config".into(), serde_yaml::Value::from(cfg)));
                    f
                });
                let flags = with_window.as_ref().or(flags);
                vllm::launch(c, v, p, flags, kv_events_for(kv_events, p.mode, true))
            }
            Self::Mocker(m) => mocker::launch(m, c, p, flags),
            // `p` is the endpoint's leader: the whole endpoint is one step.
            Self::Trtllm(t) => t.launch(c, p),
        };
        // A TRT-LLM endpoint's ranks carry their own prefix (inside the step's srun).
        if let (Some(prof), false) = (&c.profiling, matches!(self, Self::Trtllm(_))) {
            let mut argv = prof.nsys_prefix(&c.log_dir, &c.node_names[p.node], p);
            argv.append(&mut w.argv);
            w.argv = argv;
        }
        w
    }
}

/// Where an engine's settings live: `engine.*` in a 2.0 recipe, `backend.*` in v1.
pub(crate) fn section(recipe: &Recipe) -> &'static str {
    if recipe.engine.is_some() {
        "engine"
    } else {
        "backend"
    }
}

/// The engine section's keys (`backend.*`, `engine.*`) that `engine`'s launch reads, beyond
/// those the recipe parser knows; the plan does not list them as ignored.
pub fn recipe_keys(engine: &str) -> &'static [&'static str] {
    match engine {
        "sglang" => sglang::RECIPE_KEYS,
        "vllm" => vllm::RECIPE_KEYS,
        "mocker" => mocker::RECIPE_KEYS,
        "trtllm" => trtllm::RECIPE_KEYS,
        _ => &[],
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
