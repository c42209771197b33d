//! The files and directories a node's plan makes before its first process starts: vLLM's
//! Mooncake store client config, the frontends' files (nginx.conf), the profiled modes' output
//! directories. Pure: the supervisor writes them.

use std::path::{Path, PathBuf};

use super::frontends::FrontendPlan;
use super::lints;
use super::services::NodeScope;
use super::spec::*;
use super::workers::TopoPlan;
use crate::domain::Role;
use crate::engine::profiling::Profiling;
use crate::engine::MooncakeClient;
use crate::mooncake;

/// The files this node writes.
pub fn node_files(
    scope: &NodeScope,
    services: &[ProcessSpec],
    worker_procs: &[ProcessSpec],
    fe: &FrontendPlan,
    topo: Option<&TopoPlan>,
    vllm_config_path: &Path,
    warnings: &mut Vec<String>,
) -> Vec<FileSpec> {
    let mut files = Vec::new();
    let config_file = scope.model.engine.mooncake_client() == MooncakeClient::ConfigFile;
    if let (Some(mm), true) = (&scope.model.mooncake, config_file) {
        let mut cfg = mm.store_config.clone().unwrap_or_default();
        let store_here = services.iter().any(|p| p.kind == ProcessKind::Store);
        if let (Some(v), true) = (cfg.get("global_segment_size"), store_here) {
            lints::vllm_segment(&format!("{}.store_config", mm.key), v, warnings);
        }
        cfg.insert(
            "master_server_address".into(),
            serde_json::Value::String(scope.master_addr.clone()),
        );
        cfg.insert(
            "metadata_server".into(),
            serde_json::Value::String(scope.metadata_url.clone()),
        );
        // Mooncake's loader requires local_hostname: the address this node's clients advertise
        // (the workers' MOONCAKE_LOCAL_HOSTNAME: the node's, or the recipe's pinned NIC).
        if !cfg.contains_key("local_hostname") {
            let host = worker_procs
                .iter()
                .find_map(|p| p.env_value(mooncake::env::LOCAL_HOSTNAME))
                .unwrap_or(&scope.ctx.ip)
                .to_string();
            cfg.insert("local_hostname".into(), serde_json::Value::String(host));
        }
        let contents = serde_json::to_string_pretty(&cfg).unwrap_or_else(|_| "{}".into());
        files.push(FileSpec {
            path: vllm_config_path.to_path_buf(),
            contents: contents + "\n",
            purpose: "vLLM Mooncake store client config (MOONCAKE_CONFIG_PATH) for this node: master and metadata addresses forced, local_hostname this node's".into(),
        });
    }
    files.extend(fe.files.iter().cloned());
    files.extend(engine_files(topo, worker_procs));
    files
}

/// Each mode's file its ranks read (TRT-LLM's engine file), for the endpoints this node starts
/// (srtctl writes it before each endpoint's step; the same text on every node that writes it).
fn engine_files(topo: Option<&TopoPlan>, worker_procs: &[ProcessSpec]) -> Vec<FileSpec> {
    let Some(t) = topo else {
        return Vec::new();
    };
    let mut out: Vec<FileSpec> = Vec::new();
    for role in Role::ALL {
        let starts = worker_procs
            .iter()
            .any(|p| p.slurm_step.is_some() && p.roles.contains(&role));
        if !starts {
            continue;
        }
        if let Some((path, contents, purpose)) = t.engine.mode_file(&t.launch.log_dir, role) {
            out.push(FileSpec {
                path: path.into(),
                contents,
                purpose,
            });
        }
    }
    out
}

/// srtctl makes each profiled mode's output directory before it starts the worker.
pub fn profile_dirs(topo: Option<&TopoPlan>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    let Some(t) = topo.filter(|t| t.launch.profiling.is_some()) else {
        return dirs;
    };
    for p in &t.here {
        let dir = PathBuf::from(Profiling::dir(&t.launch.log_dir, p.mode));
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}
