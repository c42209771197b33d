//! SGLang workers exactly as srtctl starts them (srt-slurm v1 `backends/sglang.py::build_worker_command`,
//! main @ c88ef731), minus the srun/container wrapping and the container-side preamble.
//!
//! The argv is srtctl's injected flags (module, model, served name, host, ports, disaggregation
//! mode and bootstrap port, multi-node rendezvous, config dump, kv-events, request plane), then
//! every recipe flag sorted by its raw key and rendered as Python's `str()` would (`0.90` →
//! `0.9`, a mapping → its Python repr), without de-duplication: a recipe flag that repeats an
//! injected one comes later and wins, as it does under srtctl. Pure.

use super::flags::{config_to_cli_args, kv_events_args};
use super::layout::{ports, TopoProcess};
use super::{worker_env, LaunchContext, WorkerLaunch};
use crate::domain::Role;
use crate::recipe::FlagMap;

/// The recipe keys srtctl's SGLang launch reads besides the role flags: the kv-events config
/// (`backend.kv_events_config`; 2.0 spells it `roles.<role>.kv_events`).
pub const RECIPE_KEYS: &[&str] = &["kv_events_config"];

/// The SGLang worker argv for `p` (srtctl's `build_worker_command`).
pub fn sglang_argv(
    c: &LaunchContext,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
    kv_events: Option<Vec<(String, serde_json::Value)>>,
) -> Vec<String> {
    let module = if c.dynamo {
        "dynamo.sglang"
    } else {
        "sglang.launch_server"
    };
    let mut argv: Vec<String> = [
        "python3",
        "-m",
        module,
        "--model-path",
        &c.model_arg,
        "--served-model-name",
        &c.served_model_name,
        "--host",
        "0.0.0.0",
    ]
    .map(String::from)
    .to_vec();
    argv.extend(["--port".into(), p.http_port.to_string()]);
    let nccl = ports::NCCL + (p.sys_port - ports::DYN_SYSTEM);
    argv.extend(["--nccl-port".into(), nccl.to_string()]);
    if p.mode != Role::Aggregated {
        argv.extend(["--disaggregation-mode".into(), p.mode.as_str().into()]);
        if let (Role::Prefill, Some(b)) = (p.mode, p.bootstrap_port) {
            argv.extend(["--disaggregation-bootstrap-port".into(), b.to_string()]);
        }
    }
    if p.endpoint_nodes.len() > 1 {
        let leader_ip = &c.node_ips[p.endpoint_nodes[0]];
        argv.extend([
            "--dist-init-addr".into(),
            format!("{leader_ip}:{}", ports::DIST_INIT),
            "--nnodes".into(),
            p.endpoint_nodes.len().to_string(),
            "--node-rank".into(),
            p.node_rank.to_string(),
        ]);
    }
    if c.dynamo {
        argv.extend([
            "--dump-config-to".into(),
            format!("{}/{}_config.json", c.log_dir, c.node_names[p.node]),
        ]);
    }
    if let Some(kv) = kv_events {
        argv.extend(kv_events_args(kv, p.kv_events_port));
    }
    if c.dynamo {
        argv.extend(["--request-plane".into(), c.request_plane.clone()]);
    }
    if let Some(f) = flags {
        argv.extend(config_to_cli_args(
            f,
            &[
                "model-path",
                "model_path",
                "served-model-name",
                "served_model_name",
                "nccl-port",
                "nccl_port",
            ],
        ));
    }
    argv
}

/// The SGLang worker process `p`: its argv, srtctl's environment, and the leader's health port
/// (`dynamo.sglang` answers on its system port, `sglang.launch_server` on `--port`; followers
/// run no server).
pub fn launch(
    c: &LaunchContext,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
    kv_events: Option<Vec<(String, serde_json::Value)>>,
) -> WorkerLaunch {
    let (env_before, env_after) = worker_env(c, p);
    let port = if c.dynamo { p.sys_port } else { p.http_port };
    let mut named = vec![("dyn_system".to_string(), p.sys_port)];
    if p.http_port != 0 {
        named.push(("http".into(), p.http_port));
    }
    named.push((
        "nccl".into(),
        ports::NCCL + (p.sys_port - ports::DYN_SYSTEM),
    ));
    if let Some(b) = p.bootstrap_port {
        named.push(("bootstrap".into(), b));
    }
    named.push(("kv_events".into(), p.kv_events_port));
    if let Some(r) = p.dp_rpc_port {
        named.push(("dp_rpc".into(), r));
    }
    WorkerLaunch {
        name: format!("sglang-{}-{}", p.mode.short(), p.index),
        argv: sglang_argv(c, p, flags, kv_events),
        env_before,
        env_after,
        env_defaults: Vec::new(),
        health_port: p.is_leader().then_some(port),
        ports: named,
        slurm_step: None,
    }
}

/// `sglang`: the kind and its settings (none of its own beyond the role flags).
#[derive(Debug)]
pub struct Sglang;

impl super::EngineKind for Sglang {
    fn name(&self) -> &'static str {
        "sglang"
    }

    fn flags_section(&self) -> &'static str {
        "sglang_config"
    }

    fn recipe_keys(&self) -> &'static [&'static str] {
        RECIPE_KEYS
    }

    fn dynamo_module(&self) -> &'static str {
        "dynamo.sglang"
    }

    fn stops_as(&self, module: &str) -> Option<super::stop::StopEngine> {
        use super::stop::StopEngine;
        match module {
            "sglang.launch_server" | "sglang.serve" => Some(StopEngine::SglangServer),
            "dynamo.sglang" => Some(StopEngine::Dynamo { sglang: true }),
            _ => None,
        }
    }

    fn server(&self) -> Option<super::Server> {
        Some(super::Server {
            prefix: "sglang",
            module: "sglang.launch_server",
            default_port: 30000,
        })
    }

    fn mooncake_client(&self) -> super::MooncakeClient {
        super::MooncakeClient::Env { sglang_sizes: true }
    }

    fn checks_transfer_backend(&self) -> bool {
        true
    }

    fn host_cache_flags(&self) -> bool {
        true
    }

    fn settings(
        &self,
        _inputs: &super::EngineInputs<'_, '_>,
    ) -> Result<Option<std::sync::Arc<dyn super::Engine>>, crate::domain::PlanError> {
        Ok(Some(std::sync::Arc::new(Sglang)))
    }
}

impl super::Engine for Sglang {
    fn kind(&self) -> &'static dyn super::EngineKind {
        &Sglang
    }

    fn launch(
        &self,
        c: &LaunchContext,
        p: &TopoProcess,
        flags: Option<&FlagMap>,
        kv_events: Option<&serde_yaml::Value>,
    ) -> WorkerLaunch {
        launch(c, p, flags, super::kv_events_for(kv_events, p.mode, false))
    }
}
