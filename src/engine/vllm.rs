//! vLLM workers exactly as srtctl starts them (srt-slurm v1 `backends/vllm.py`:
//! `VLLMProtocol.build_worker_command`, `get_process_environment`,
//! `_connector_to_kv_transfer_config`; main @ c88ef731): `dynamo.vllm`, or `vllm serve` behind
//! srtctl's vLLM frontend, with its data-parallel launch modes. Pure.

use std::collections::BTreeMap;

use super::flags::{config_to_cli_args, kv_events_args, python_json_dumps, python_str};
use super::layout::{ports, TopoProcess, TopologyInputs};
use super::{worker_env, EnvPairs, LaunchContext, WorkerLaunch};
use crate::domain::Role;
use crate::recipe::FlagMap;
use crate::recipe::Recipe;

/// How srtctl runs vLLM for a mode (`backend.connector`, `dp_launch_mode`, ...).
#[derive(Debug, Clone, Default)]
pub struct VllmMode {
    /// `backend.connector` (default `nixl`), overridden by the mode's `connector` flag.
    pub connector: Option<String>,
    /// `dp_launch_mode: per_node` (the default) or `per_gpu`.
    pub per_node: bool,
    /// `backend.set_cuda_visible_devices` (default false: `--device-ids` instead).
    pub set_cvd: bool,
    /// `frontend.type: vllm`: `vllm serve` on an aggregated worker.
    pub direct: bool,
    /// TP x PP, and whether the mode sets data-parallel-size.
    pub replica: u32,
    pub dp: bool,
}

fn has(flags: Option<&FlagMap>, names: &[&str]) -> bool {
    flags.is_some_and(|f| f.0.iter().any(|(k, _)| names.contains(&k.as_str())))
}

fn flag_value(flags: Option<&FlagMap>, names: &[&str]) -> Option<String> {
    flags?
        .0
        .iter()
        .find(|(k, _)| names.contains(&k.as_str()))
        .map(|(_, v)| python_str(v))
}

/// srtctl's `_connector_to_kv_transfer_config`.
fn kv_transfer_config(connector: &str) -> String {
    let preset: Option<&[(&str, &str)]> = match connector.to_ascii_lowercase().as_str() {
        "nixl" => Some(&[("kv_connector", "NixlConnector"), ("kv_role", "kv_both")]),
        "lmcache" => Some(&[
            ("kv_connector", "LMCacheConnectorV1"),
            ("kv_role", "kv_both"),
        ]),
        "kvbm" => Some(&[
            ("kv_connector", "DynamoConnector"),
            (
                "kv_connector_module_path",
                "kvbm.vllm_integration.connector",
            ),
            ("kv_role", "kv_both"),
        ]),
        _ => None,
    };
    match preset {
        Some(p) => python_json_dumps(
            &p.iter()
                .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
                .collect::<Vec<_>>(),
        ),
        None => connector.to_string(),
    }
}

/// A worker over several nodes: the leader's address, the node count and this node's rank.
fn rendezvous(leader_ip: String, p: &TopoProcess, rank: usize) -> [String; 6] {
    [
        "--master-addr".into(),
        leader_ip,
        "--nnodes".into(),
        p.endpoint_nodes.len().to_string(),
        "--node-rank".into(),
        rank.to_string(),
    ]
}

/// The vLLM worker argv for `p` (srtctl's `VLLMProtocol.build_worker_command`).
pub fn vllm_argv(
    c: &LaunchContext,
    v: &VllmMode,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
    kv_events: Option<Vec<(String, serde_json::Value)>>,
) -> Vec<String> {
    if v.direct {
        return vllm_serve_argv(c, v, p, flags);
    }
    let mut skip: Vec<&str> = vec!["connector"];
    let mut argv: Vec<String> = [
        "python3",
        "-m",
        "dynamo.vllm",
        "--model",
        &c.model_arg,
        "--served-model-name",
        &c.served_model_name,
    ]
    .map(String::from)
    .to_vec();
    if p.mode != Role::Aggregated {
        argv.extend(["--disaggregation-mode".into(), p.mode.as_str().into()]);
    }
    let connector = flag_value(flags, &["connector"]).or_else(|| v.connector.clone());
    if let Some(conn) = connector.filter(|c| !matches!(c.as_str(), "null" | "none" | "")) {
        argv.extend(["--kv-transfer-config".into(), kv_transfer_config(&conn)]);
    }
    if !v.set_cvd {
        argv.extend(device_ids(p));
    }
    argv.extend(parallel_args(c, v, p, flags, &mut skip));
    argv.extend(["--request-plane".into(), c.request_plane.clone()]);
    argv.extend([
        "--dump-config-to".into(),
        format!("{}/{}_config.json", c.log_dir, c.node_names[p.node]),
    ]);
    if let Some(kv) = kv_events {
        argv.extend(kv_events_args(kv, p.kv_events_port));
    }
    if let Some(f) = flags {
        argv.extend(config_to_cli_args(f, &skip));
    }
    argv
}

/// `--device-ids` with the process's GPUs.
fn device_ids(p: &TopoProcess) -> [String; 2] {
    ["--device-ids".to_string(), p.cuda_visible_devices()]
}

/// `vllm serve` as its own frontend (srtctl's `frontend.type: vllm`).
fn vllm_serve_argv(
    c: &LaunchContext,
    v: &VllmMode,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
) -> Vec<String> {
    let multi = p.endpoint_nodes.len() > 1;
    let leader_ip = c.node_ips[p.endpoint_nodes[0]].clone();
    let rank_in_endpoint = p.rank_in_endpoint();
    let mut skip: Vec<&str> = vec!["connector"];
    let mut argv = vec!["vllm".to_string(), "serve".into(), c.model_arg.clone()];
    skip.extend([
        "headless",
        "host",
        "port",
        "master-addr",
        "nnodes",
        "node-rank",
    ]);
    if rank_in_endpoint == 0 {
        argv.extend([
            "--host".into(),
            "0.0.0.0".into(),
            "--port".into(),
            "8000".into(),
        ]);
    }
    if multi {
        argv.extend(rendezvous(leader_ip, p, rank_in_endpoint));
        if rank_in_endpoint > 0 {
            argv.push("--headless".into());
            skip.push("api-server-count");
        }
    }
    if !v.set_cvd {
        argv.extend(device_ids(p));
    }
    let mut f = flags.cloned().unwrap_or_default();
    if !has(Some(&f), &["served-model-name"]) {
        f.0.push((
            "served-model-name".into(),
            serde_yaml::Value::from(c.served_model_name.clone()),
        ));
    }
    argv.extend(config_to_cli_args(&f, &skip));
    argv
}

/// Data parallelism (per node with hybrid load balancing, or one rank per process) or a
/// multi-node rendezvous; the flags mcsup sets itself join `skip`.
fn parallel_args(
    c: &LaunchContext,
    v: &VllmMode,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
    skip: &mut Vec<&str>,
) -> Vec<String> {
    let multi = p.endpoint_nodes.len() > 1;
    let leader_ip = c.node_ips[p.endpoint_nodes[0]].clone();
    let rank_in_endpoint = p.rank_in_endpoint();
    let rpc = || {
        p.dp_rpc_port
            .map(|r| r.to_string())
            .or_else(|| flag_value(flags, &["data-parallel-rpc-port", "data_parallel_rpc_port"]))
            .unwrap_or_else(|| ports::DP_RPC.to_string())
    };
    let mut argv = Vec::new();
    if v.dp && v.per_node {
        let rpc = rpc();
        skip.extend([
            "data-parallel-rpc-port",
            "data_parallel_rpc_port",
            "data-parallel-size-local",
            "data_parallel_size_local",
            "data-parallel-start-rank",
            "data_parallel_start_rank",
            "data-parallel-hybrid-lb",
            "data_parallel_hybrid_lb",
            "headless",
        ]);
        let local = p.gpus.len() as u32;
        if v.replica > local {
            argv.extend(rendezvous(leader_ip.clone(), p, rank_in_endpoint));
            argv.extend([
                "--data-parallel-address".into(),
                leader_ip,
                "--data-parallel-rpc-port".into(),
                rpc,
            ]);
            if rank_in_endpoint > 0 {
                argv.push("--headless".into());
            }
        } else {
            argv.extend([
                "--data-parallel-size-local".into(),
                (local / v.replica.max(1)).to_string(),
                "--data-parallel-start-rank".into(),
                p.node_rank.to_string(),
                "--data-parallel-address".into(),
                leader_ip,
                "--data-parallel-rpc-port".into(),
                rpc,
                "--data-parallel-hybrid-lb".into(),
            ]);
        }
    } else if v.dp {
        let rpc = rpc();
        skip.extend(["data-parallel-rpc-port", "data_parallel_rpc_port"]);
        argv.extend([
            "--data-parallel-rank".into(),
            p.node_rank.to_string(),
            "--data-parallel-address".into(),
            leader_ip,
            "--data-parallel-rpc-port".into(),
            rpc,
        ]);
    } else if multi {
        argv.extend(rendezvous(leader_ip, p, rank_in_endpoint));
        if rank_in_endpoint > 0 {
            argv.push("--headless".into());
        }
    }
    argv
}

/// vLLM's per-process variables (`get_process_environment`), set after `CUDA_VISIBLE_DEVICES`;
/// `VLLM_PORT` is unset for a worker over several nodes.
pub fn vllm_process_env(c: &LaunchContext, p: &TopoProcess) -> EnvPairs {
    let mut env = vec![
        (
            "DYN_VLLM_KV_EVENT_PORT".to_string(),
            p.kv_events_port.to_string(),
        ),
        (
            "VLLM_NIXL_SIDE_CHANNEL_PORT".into(),
            p.nixl_port.to_string(),
        ),
        (
            "VLLM_NIXL_SIDE_CHANNEL_HOST".into(),
            c.node_ips[p.node].clone(),
        ),
    ];
    if p.endpoint_nodes.len() == 1 {
        let index = u32::from(p.sys_port.saturating_sub(ports::DYN_SYSTEM));
        env.push(("VLLM_PORT".into(), (20000 + index * 50).to_string()));
    }
    env
}

/// The recipe keys srtctl's `VLLMProtocol` reads besides the role flags (v1 `backend.*`, 2.0
/// `engine.*`).
pub const RECIPE_KEYS: &[&str] = &[
    "kv_events_config",
    "connector",
    "dp_launch_mode",
    "set_cuda_visible_devices",
    "allow_prefill_decode_colocation",
    "allow_prefill_decode_colocation_across_nodes",
];

/// How each mode runs (srtctl's `VLLMProtocol` settings; v1 `backend.*`, 2.0 `engine.*`).
pub fn modes<'a>(
    recipe: &Recipe,
    flags: &dyn Fn(Role) -> Option<&'a FlagMap>,
    frontend: super::frontend::FrontendType,
) -> BTreeMap<Role, VllmMode> {
    let engine_key = super::section(recipe);
    let eng = |k: &str| recipe.raw_get(&[engine_key, k]);
    let flag_num = |f: Option<&FlagMap>, names: [&str; 2]| -> Option<u32> {
        f?.0.iter()
            .find(|(k, _)| names.contains(&k.as_str()))
            .and_then(|(_, v)| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
            .and_then(|n| u32::try_from(n).ok())
    };
    Role::ALL
        .into_iter()
        .map(|r| {
            let f = flags(r);
            let tp = flag_num(f, ["tensor-parallel-size", "tensor_parallel_size"])
                .unwrap_or(1)
                .max(1);
            let pp = flag_num(f, ["pipeline-parallel-size", "pipeline_parallel_size"])
                .unwrap_or(1)
                .max(1);
            let dp = f.is_some_and(|f| {
                f.0.iter()
                    .any(|(k, v)| k.replace('_', "-") == "data-parallel-size" && !v.is_null())
            });
            let connector = match eng("connector") {
                None if recipe
                    .raw_get(&[engine_key])
                    .and_then(|b| b.get("connector"))
                    .is_some() =>
                {
                    None
                }
                None => Some("nixl".to_string()),
                Some(v) => Some(python_str(v)),
            };
            (
                r,
                VllmMode {
                    connector,
                    per_node: eng("dp_launch_mode").and_then(|v| v.as_str()) != Some("per_gpu"),
                    set_cvd: eng("set_cuda_visible_devices")
                        .and_then(|v| v.as_bool())
                        .unwrap_or(false),
                    direct: frontend.kind().worker_serves(),
                    replica: tp * pp,
                    dp,
                },
            )
        })
        .collect()
}

/// `VLLMProtocol.should_colocate_prefill_decode`: vLLM packs prefill and decode workers onto
/// shared nodes when the recipe allows it, both run, and they fit one node (or may span nodes).
fn packs_prefill_decode(colocation: (bool, bool), t: &TopologyInputs) -> bool {
    let (allowed, across_nodes) = colocation;
    allowed
        && t.prefill.workers > 0
        && t.decode.workers > 0
        && (t.worker_gpus() <= t.gpus_per_node || across_nodes)
}

/// `allow_prefill_decode_colocation` and `..._across_nodes`.
fn colocation(recipe: &Recipe) -> (bool, bool) {
    let engine_key = super::section(recipe);
    let on = |k: &str| {
        recipe
            .raw_get(&[engine_key, k])
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    };
    (
        on("allow_prefill_decode_colocation"),
        on("allow_prefill_decode_colocation_across_nodes"),
    )
}

/// `vllm`: the kind.
#[derive(Debug)]
pub struct Vllm;

/// A vLLM recipe's settings: how each mode runs, and whether prefill and decode may share nodes
/// (`allow_prefill_decode_colocation`, `..._across_nodes`).
#[derive(Debug, Clone)]
pub struct VllmSettings {
    modes: BTreeMap<Role, VllmMode>,
    /// [`colocation`].
    colocation: (bool, bool),
}

impl VllmSettings {
    fn mode(&self, r: Role) -> VllmMode {
        // Every mode is in the map (`modes` covers Role::ALL).
        self.modes.get(&r).cloned().unwrap_or_default()
    }
}

impl super::EngineKind for Vllm {
    fn name(&self) -> &'static str {
        "vllm"
    }

    fn flags_section(&self) -> &'static str {
        "vllm_config"
    }

    fn recipe_keys(&self) -> &'static [&'static str] {
        RECIPE_KEYS
    }

    fn dynamo_module(&self) -> &'static str {
        "dynamo.vllm"
    }

    fn stops_as(&self, module: &str) -> Option<super::stop::StopEngine> {
        use super::stop::StopEngine;
        match module {
            "vllm.entrypoints.openai.api_server" | "vllm.serve" => Some(StopEngine::VllmServer),
            "dynamo.vllm" => Some(StopEngine::Dynamo { sglang: false }),
            _ => None,
        }
    }

    fn server(&self) -> Option<super::Server> {
        Some(super::Server {
            prefix: "vllm",
            module: "vllm.entrypoints.openai.api_server",
            default_port: 8000,
        })
    }

    fn mooncake_client(&self) -> super::MooncakeClient {
        super::MooncakeClient::ConfigFile
    }

    fn packed_nodes(&self, recipe: &Recipe) -> Result<Option<usize>, crate::domain::PlanError> {
        let Some(t) = super::layout::inputs(recipe)? else {
            return Ok(None);
        };
        Ok(packs_prefill_decode(colocation(recipe), &t)
            .then(|| t.worker_gpus().div_ceil(t.gpus_per_node) as usize))
    }

    fn settings(
        &self,
        inputs: &super::EngineInputs<'_, '_>,
    ) -> Result<Option<std::sync::Arc<dyn super::Engine>>, crate::domain::PlanError> {
        Ok(Some(std::sync::Arc::new(VllmSettings {
            modes: modes(inputs.recipe, inputs.flags, inputs.frontend),
            colocation: colocation(inputs.recipe),
        })))
    }
}

impl super::Engine for VllmSettings {
    fn kind(&self) -> &'static dyn super::EngineKind {
        &Vllm
    }

    fn adjust_layout(&self, inputs: &mut TopologyInputs) {
        inputs.pd_colocation = packs_prefill_decode(self.colocation, inputs);
    }

    fn processes(
        &self,
        endpoints: &[super::layout::Endpoint],
        dp_size: &dyn Fn(Role) -> u32,
    ) -> Result<Vec<TopoProcess>, crate::domain::PlanError> {
        let per_node = self.modes.values().all(|m| m.per_node);
        let direct = self.modes.values().any(|m| m.direct);
        let dp_of = |r: Role| super::layout::VllmDp {
            dp_size: self.modes.get(&r).filter(|m| m.dp).map(|_| dp_size(r)),
            replica: self.modes.get(&r).map_or(1, |m| m.replica),
        };
        super::layout::vllm_processes(endpoints, &dp_of, per_node, direct)
    }

    /// A Dynamo frontend in front of vLLM data parallelism lists one `generate` instance per DP
    /// rank (`per_gpu`, or `data-parallel-size` per logical worker), or per node-local process
    /// (`per_node`) unless a rank spans nodes; any other frontend counts logical workers.
    fn health_count(&self, c: &super::HealthCount<'_>, dp_size: &dyn Fn(Role) -> u32) -> u32 {
        if !c.frontend.kind().discovers_workers() {
            return c.logical;
        }
        let dp = dp_size(c.role).max(1);
        let Some(mode) = self.modes.get(&c.role) else {
            return c.logical;
        };
        if dp > 1 && mode.per_node {
            let procs: Vec<&TopoProcess> = c.all.iter().filter(|p| p.mode == c.role).collect();
            let local = procs.first().map_or(0, |p| p.gpus.len() as u32);
            if mode.replica > local {
                return c.logical;
            }
            return procs.len() as u32;
        }
        c.logical * dp
    }

    fn check_profiling(
        &self,
        profiling: &super::profiling::Profiling,
        modes: &[(&str, &FlagMap)],
    ) -> Result<(), crate::domain::PlanError> {
        profiling.check_vllm_flags(modes.iter().copied())
    }

    fn launch(
        &self,
        c: &LaunchContext,
        p: &TopoProcess,
        flags: Option<&FlagMap>,
        kv_events: Option<&serde_yaml::Value>,
    ) -> WorkerLaunch {
        let v = self.mode(p.mode);
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
        launch(
            c,
            &v,
            p,
            flags,
            super::kv_events_for(kv_events, p.mode, true),
        )
    }
}

/// The vLLM worker process `p`. Every process that runs a front (not `--headless`) registers
/// and answers `/health`: a per-node DP process on its own node, otherwise the endpoint's first
/// node. srtctl sets `CUDA_VISIBLE_DEVICES` only when asked (else `--device-ids`), then the
/// per-process ports.
pub fn launch(
    c: &LaunchContext,
    v: &VllmMode,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
    kv_events: Option<Vec<(String, serde_json::Value)>>,
) -> WorkerLaunch {
    let (env_before, mut env_after) = worker_env(c, p);
    env_after.retain(|(k, _)| k != "CUDA_VISIBLE_DEVICES" || v.set_cvd);
    env_after.extend(vllm_process_env(c, p));
    let rank_in_endpoint = p.rank_in_endpoint();
    let fronted = if v.dp && v.per_node && v.replica <= p.gpus.len() as u32 {
        true
    } else if v.dp && !v.per_node {
        p.node_rank == 0
    } else {
        rank_in_endpoint == 0
    };
    let port = if v.direct { 8000 } else { p.sys_port };
    let mode = p.mode.short();
    let name = if v.dp && !v.per_node {
        format!("vllm-{mode}-{}-dp{}", p.index, p.node_rank)
    } else {
        format!("vllm-{mode}-{}", p.index)
    };
    let mut named = vec![("dyn_system".to_string(), p.sys_port)];
    if p.http_port != 0 {
        named.push(("http".into(), p.http_port));
    }
    if let Some(b) = p.bootstrap_port {
        named.push(("bootstrap".into(), b));
    }
    named.push(("kv_events".into(), p.kv_events_port));
    named.push(("nixl".into(), p.nixl_port));
    if let Some(r) = p.dp_rpc_port {
        named.push(("dp_rpc".into(), r));
    }
    WorkerLaunch {
        name,
        argv: vllm_argv(c, v, p, flags, kv_events),
        env_before,
        env_after,
        env_defaults: Vec::new(),
        health_port: fronted.then_some(port),
        ports: named,
        slurm_step: None,
    }
}
