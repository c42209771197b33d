//! Workers on this node: the recipe's `mcsup.workers`, or one per role derived from the engine's
//! flags (`backend.sglang_config.<role>` in v1, `roles.<role>.args` in 2.0).
//!
//! Worker env, later wins: discovery (`ETCD_ENDPOINTS`, `NATS_SERVER`, when such services are
//! effective) < `MOONCAKE_LOCAL_HOSTNAME=<node ip>` (a default the user may override) < the
//! role's env < top-level `environment` < the worker's own `env` < `mooncake_kv_store.env` <
//! forced `MOONCAKE_MASTER` / `MOONCAKE_TE_META_DATA_SERVER` (vLLM also `MOONCAKE_CONFIG_PATH`,
//! and `MOONCAKE_REQUESTER_LOCAL_HOSTNAME` = the effective `MOONCAKE_LOCAL_HOSTNAME` unless set).
//! A derived SGLang/vLLM worker is ready when its server answers `GET /health`. Pure.

use std::collections::BTreeSet;
use std::time::Duration;

use super::env::EnvBuilder;
use super::error::{err, PlanError};
use super::lints;
use super::model::*;
use super::placeholders::Placeholders;
use super::policy::*;
use super::services::{set_local_defaults, NodeScope};
use super::spec::*;
use crate::domain::Role;
use crate::engine::layout::TopoProcess;
use crate::engine::{Engine, LaunchContext, MooncakeClient};
use crate::mooncake;
use crate::recipe::*;

/// How long a derived server may take to answer `/health`: loading a large model's weights
/// takes many minutes; a recipe sets its own with `mcsup.workers`.
pub const DERIVED_READY_TIMEOUT: Duration = Duration::from_secs(1800);

/// Most worker processes one node runs (a worker entry's `count`, and all entries together).
/// A GPU node runs one worker per GPU or GPU group (8 to 16); the bound leaves room for CPU-only
/// and synthetic workers while keeping the plan small and fast: unbounded, `count: 1000000` took
/// 7 s and 1.6 GB to plan and `count: 4294967295` aborted.
pub const MAX_WORKERS_PER_NODE: u32 = 1024;

/// srtctl's worker processes on this node (see [`crate::engine::layout`] and [`crate::engine`]).
#[derive(Debug, Clone)]
pub struct TopoPlan {
    pub launch: LaunchContext,
    /// The engine that runs them, with its settings.
    pub engine: std::sync::Arc<dyn Engine>,
    /// The processes the topology puts on this node.
    pub here: Vec<TopoProcess>,
    /// Every worker process of the job, on every node (the frontends front them all).
    pub all: Vec<TopoProcess>,
    /// The head node: the frontend's (or nginx's) node.
    pub head: String,
    /// `frontend:`, when mcsup runs the job's frontend (not for `trtllm_serve`).
    pub frontend: Option<crate::engine::frontend::FrontendSettings>,
    /// vLLM data parallelism per mode: `data-parallel-size` (0 when the mode sets none).
    pub dp_sizes: Vec<(Role, u32)>,
    /// Per mode (`prefill`/`decode`/`aggregated`, or `true`): srtctl's kv-events config.
    pub kv_events: Option<serde_yaml::Value>,
    /// `health_check.max_attempts` x `interval_seconds` (srtctl's default 180 x 10 s).
    pub ready_timeout: Duration,
    /// The job-wide settings the layout was read with.
    pub job: crate::engine::job::JobSettings,
    /// Where srtctl puts the workers, the frontend, etcd/NATS and the client in the job's node
    /// list ([`crate::engine::job::JobSettings::nodes`]).
    pub nodes: crate::engine::job::JobNodes,
    /// The sizes srtctl's allocation was given (resources or roles).
    pub sizes: crate::engine::layout::TopologyInputs,
}

/// What a topology worker adds to the common worker path.
struct TopoExtra {
    /// Set before the role env (srtctl's base env and DYN_LOG).
    base: Vec<(String, String)>,
    /// mcsup's own defaults, set after `base` and before the role env (which may override).
    defaults: Vec<(String, String, &'static str)>,
    /// Set after `environment:` (the partial-node CUDA_VISIBLE_DEVICES).
    after: Vec<(String, String)>,
    readiness: Option<ReadinessSpec>,
    placement: WorkerPlacement,
    /// The Slurm step the process's `srun` starts (a TRT-LLM endpoint).
    slurm_step: Option<SlurmStep>,
}

fn topo_entry(
    t: &TopoPlan,
    p: &TopoProcess,
    rm: &RoleModel,
) -> (String, WorkerConfig, bool, Option<TopoExtra>) {
    let w = crate::engine::launch(
        &*t.engine,
        &t.launch,
        p,
        rm.flags.as_ref(),
        t.kv_events.as_ref(),
    );
    let readiness = w
        .health_port
        .map(|port| readiness(vec![ProbeSpec::health("127.0.0.1", port)], t.ready_timeout));
    let mode = p.mode.short();
    (
        format!(
            "{} ({mode}[{}], node rank {})",
            rm.flags_key, p.index, p.node_rank
        ),
        one_process_worker(w.name, w.argv, rm.critical.unwrap_or(true)),
        true,
        Some(TopoExtra {
            base: w.env_before,
            defaults: w.env_defaults,
            after: w.env_after,
            readiness,
            placement: WorkerPlacement {
                endpoint: format!("{mode}[{}]", p.index),
                nodes: p
                    .endpoint_nodes
                    .iter()
                    .map(|n| t.launch.node_names[*n].clone())
                    .collect(),
                rank: p.node_rank,
                gpus: p.gpus.clone(),
                ports: w.ports,
            },
            slurm_step: w.slurm_step.map(|name| SlurmStep { name }),
        }),
    )
}

/// The workers of this node's roles. `vllm_config_path` is where the vLLM client JSON goes.
pub fn plan_workers(
    s: &NodeScope<'_>,
    topo: Option<&TopoPlan>,
    taken: &mut BTreeSet<String>,
    vllm_config_path: &std::path::Path,
    warnings: &mut Vec<String>,
) -> Result<Vec<ProcessSpec>, PlanError> {
    let model = s.model;
    let mc = s.mc;
    let store_here = model.enabled().any(|svc| {
        svc.kind == ServiceType::MooncakeStore
            && svc.runnable.is_ok()
            && svc.external.is_none()
            && store_placed_here(s, svc)
    });
    let mut out = Vec::new();
    for &role in s.roles {
        let rm = model.roles.get(&role).cloned().unwrap_or_default();
        for entry in role_entries(s, topo, role, &rm, warnings) {
            check_entry(&entry, out.len())?;
            let Entry {
                key,
                worker: w,
                derived,
                extra,
            } = &entry;
            for index in 0..w.count {
                let name = if w.count > 1 {
                    format!("{}-{index}", w.name)
                } else {
                    w.name.clone()
                };
                if !taken.insert(name.clone()) {
                    return Err(err(
                        format!("{key}.name"),
                        format!("duplicate process name `{name}` on this node"),
                        "give each worker (and role) a distinct name",
                    ));
                }
                let wp = s.ph.instance(role.as_str(), index);
                let mut argv = w.command.0.clone();
                argv.extend(w.args.0.iter().cloned());
                let argv = wp.apply_all(&argv);
                let mut env = WorkerEnv {
                    s,
                    entry: &entry,
                    rm: &rm,
                    wp: &wp,
                    name: &name,
                }
                .build(store_here, vllm_config_path, warnings);
                let (stop, restart) = policy_defaults(ProcessKind::Worker);
                let mut stop = apply_stop(
                    apply_stop(stop, mc.worker_defaults.stop.as_ref()),
                    w.stop.as_ref(),
                );
                stop.budget = crate::engine::stop::StopBudget::of(&argv, &|k| {
                    env.get(k).map(|v| v.value.clone())
                });
                let restart = apply_restart(
                    restart,
                    mc.worker_defaults.restart.as_ref(),
                    "mcsup.worker_defaults.restart",
                )?;
                let restart = if *derived {
                    let at = format!("roles.{}.restart", role.short());
                    apply_restart(restart, rm.restart.as_ref(), &at)?
                } else {
                    restart
                };
                let restart =
                    apply_restart(restart, w.restart.as_ref(), &format!("{key}.restart"))?;
                let restart = one_rank_restart(restart, extra.as_ref());
                let liveness = match &w.liveness {
                    Some(l) => Some(liveness_spec(
                        &wp,
                        l,
                        &format!("{key}.liveness"),
                        &s.ctx.cwd,
                    )?),
                    None => None,
                };
                let readiness = worker_readiness(s, &entry, &rm, &wp)?;
                // A Slurm step of an endpoint (TRT-LLM) is srtctl's step.
                let step = extra.as_ref().is_some_and(|x| x.slurm_step.is_some());
                let liveness = match liveness {
                    None if *derived => {
                        let l = engine_liveness(&argv, readiness.as_ref(), &s.mc.engine_liveness)?;
                        // What makes that answer follow the engine, unless the recipe says (a
                        // step's environment is srtctl's exports, exactly).
                        if l.is_some() && !step {
                            for (k, v, why) in crate::engine::liveness::env_defaults(&argv) {
                                if env.get(k).is_none() {
                                    env.set(k, v.to_string(), why);
                                }
                            }
                        }
                        l
                    }
                    given => given,
                };
                stop.inflight = inflight_gauge(&argv, readiness.as_ref());
                out.push(ProcessSpec {
                    name,
                    kind: ProcessKind::Worker,
                    phase: Phase::Workers,
                    service: None,
                    placement: extra.as_ref().map(|x| x.placement.clone()),
                    listens: Vec::new(),
                    roles: vec![role],
                    argv,
                    preamble: w.preamble.as_ref().map(|p| wp.apply(p)),
                    env: env.build(),
                    cwd: w.cwd.as_ref().map(|c| s.ctx.cwd.join(wp.apply(c))),
                    depends_on: Vec::new(),
                    readiness,
                    liveness,
                    restart,
                    stop,
                    critical: if *derived {
                        rm.critical.unwrap_or(w.critical)
                    } else {
                        w.critical
                    },
                    fatal_log_patterns: match topo {
                        Some(t) if *derived => t.job.fatal_log_patterns.clone(),
                        _ => Vec::new(),
                    },
                    slurm_step: extra.as_ref().and_then(|x| x.slurm_step.clone()),
                    terminal: None,
                });
            }
        }
    }
    if let Some(t) = topo {
        sequential_start(t, &mut out);
    }
    Ok(out)
}

/// TRT-LLM's `sequential_node_start: N`: the endpoints whose leader is this node start N at a
/// time, each batch once the one before it is ready (srtctl's `start_all_workers`), in
/// srtctl's endpoint order.
fn sequential_start(t: &TopoPlan, out: &mut [ProcessSpec]) {
    let n = t.engine.sequential_start() as usize;
    if n == 0 {
        return;
    }
    // The endpoints this node leads and starts, in srtctl's order (`t.here` is the layout's).
    let names: Vec<String> = t
        .here
        .iter()
        .filter(|p| p.is_leader())
        .map(|p| crate::engine::trtllm::endpoint_name(p.mode, p.index))
        .filter(|name| out.iter().any(|x| x.name == *name))
        .collect();
    for (k, name) in names.iter().enumerate().skip(n) {
        let batch = k / n;
        let Some(p) = out.iter_mut().find(|x| x.name == *name) else {
            continue;
        };
        p.depends_on = names[(batch - 1) * n..batch * n]
            .iter()
            .map(|target| DependencySpec {
                target: target.clone(),
                condition: DependencyCondition::Healthy,
            })
            .collect();
    }
}

/// A worker of several nodes run as one process per node (an SGLang worker over two nodes)
/// cannot restart one rank alone: it would not rejoin its group while its peers wait in a
/// collective. Its ranks restart as one unit: the job's coordinator decides for the worker and
/// every node stops and starts its rank in one generation (docs/supervision.md, "Across
/// nodes"). A TRT-LLM endpoint is one Slurm step of every rank: it restarts whole already.
fn one_rank_restart(mut restart: RestartSpec, extra: Option<&TopoExtra>) -> RestartSpec {
    if let Some(x) = extra.filter(|x| x.placement.nodes.len() > 1 && x.slurm_step.is_none()) {
        restart.unit = Some(crate::plan::RestartUnit {
            worker: x.placement.endpoint.clone(),
            nodes: x.placement.nodes.clone(),
        });
    }
    restart
}

/// Where a worker's engine counts its requests: the `/metrics` beside the `/health` its
/// readiness asks on this node, for an engine whose gauges mcsup knows.
fn inflight_gauge(
    argv: &[String],
    readiness: Option<&ReadinessSpec>,
) -> Option<crate::engine::stop::MetricSum> {
    readiness?.probes.iter().find_map(|p| match p {
        ProbeSpec::Http {
            host, port, path, ..
        } if path == "/health" && host == "127.0.0.1" => {
            crate::engine::stop::MetricSum::of_worker(argv, *port)
        }
        _ => None,
    })
}

/// One worker entry of a role: its key path, its config, whether mcsup derived it, and what
/// srtctl's layout adds.
struct Entry {
    key: String,
    worker: WorkerConfig,
    derived: bool,
    extra: Option<TopoExtra>,
}

/// A role's worker entries: `mcsup.workers.<role>`, else srtctl's layout, else one derived
/// worker (or a note that the role has none here).
fn role_entries(
    s: &NodeScope<'_>,
    topo: Option<&TopoPlan>,
    role: Role,
    rm: &RoleModel,
    warnings: &mut Vec<String>,
) -> Vec<Entry> {
    let model = s.model;
    let entry = |key: String, worker: WorkerConfig, derived, extra| Entry {
        key,
        worker,
        derived,
        extra,
    };
    if let Some(list) = s.mc.workers.for_role(role) {
        return list
            .iter()
            .enumerate()
            .map(|(i, w)| entry(format!("mcsup.workers.{role}[{i}]"), w.clone(), false, None))
            .collect();
    }
    if let Some(t) = topo {
        let trtllm = t.engine.step_per_endpoint();
        if trtllm {
            // The leader's mcsup starts the whole endpoint as one step.
            for p in t.here.iter().filter(|p| p.mode == role && !p.is_leader()) {
                let leader = &t.launch.node_names[p.endpoint_nodes[0]];
                warnings.push(format!(
                    "{}[{}]: its ranks on this node (GPUs {}) are tasks of the endpoint's Slurm step, which the mcsup of its leader node {leader} starts and stops; nothing runs for it here",
                    role.short(),
                    p.index,
                    crate::domain::gpu_list(&p.gpus)
                ));
            }
        }
        return t
            .here
            .iter()
            .filter(|p| p.mode == role && (!trtllm || p.is_leader()))
            .map(|p| {
                let (key, w, derived, extra) = topo_entry(t, p, rm);
                entry(key, w, derived, extra)
            })
            .collect();
    }
    match derived_worker(model, rm, role) {
        Some(w) => vec![entry(rm.flags_key.clone(), w, true, None)],
        None => {
            let hint = if model.spelling == Spelling::V2 {
                format!("roles.{}.args", role.short())
            } else {
                format!("backend.sglang_config.{role}")
            };
            warnings.push(format!(
                "role {role} has no worker on this node: add mcsup.workers.{role} (or {hint})"
            ));
            Vec::new()
        }
    }
}

/// An entry's count (with the node's total so far) and name.
fn check_entry(e: &Entry, planned: usize) -> Result<(), PlanError> {
    let (key, w) = (&e.key, &e.worker);
    if w.count == 0 {
        return Err(err(
            format!("{key}.count"),
            "count is 0",
            "use count: 1 or more, or remove the worker",
        ));
    }
    let total = u64::from(w.count) + planned as u64;
    if total > u64::from(MAX_WORKERS_PER_NODE) {
        let message = if w.count > MAX_WORKERS_PER_NODE {
            format!(
                        "count {} is more than the {MAX_WORKERS_PER_NODE} worker processes mcsup runs on one node",
                        w.count
                    )
        } else {
            format!(
                        "this entry brings the node to {total} worker processes, more than the {MAX_WORKERS_PER_NODE} mcsup runs on one node"
                    )
        };
        return Err(err(
                    format!("{key}.count"),
                    message,
                    format!("use a count of at most {MAX_WORKERS_PER_NODE} across this node's workers (one per GPU or GPU group is usual)"),
                ));
    }
    if !crate::domain::plain_process_name(&w.name) {
        return Err(err(
            format!("{key}.name"),
            format!("`{}` is not a usable process name", w.name),
            crate::domain::PROCESS_NAME_FIX,
        ));
    }
    Ok(())
}

/// One worker process's environment, built in srtctl's layer order.
struct WorkerEnv<'a> {
    s: &'a NodeScope<'a>,
    entry: &'a Entry,
    rm: &'a RoleModel,
    wp: &'a Placeholders,
    name: &'a str,
}

impl WorkerEnv<'_> {
    /// discovery < srtctl's base env < mcsup's defaults < the role's env < `environment:` < the
    /// worker's env < srtctl's after-env < the Mooncake block's env < the forced addresses.
    fn build(
        &self,
        store_here: bool,
        vllm_config_path: &std::path::Path,
        warnings: &mut Vec<String>,
    ) -> EnvBuilder {
        let (s, rm, wp) = (self.s, self.rm, self.wp);
        let (key, w, extra) = (&self.entry.key, &self.entry.worker, &self.entry.extra);
        let model = s.model;
        let mut env = EnvBuilder::new();
        for (k, v) in &s.discovery {
            env.set(k, v.clone(), "discovery");
        }
        if let Some(x) = &extra {
            // In 2.0 the discovery plane is the effective etcd/NATS services (an
            // external one included), set above; v1 srtctl always points at the infra
            // node's.
            let v2 = model.spelling == Spelling::V2;
            for (k, v) in &x.base {
                if v2 && matches!(k.as_str(), "ETCD_ENDPOINTS" | "NATS_SERVER") {
                    continue;
                }
                env.set(k, v.clone(), "srtctl");
            }
            for (k, v, why) in &x.defaults {
                env.set(k, v.clone(), why);
            }
        }
        if self.entry.derived {
            for (k, v, why) in crate::engine::stop::env_defaults(&w.command.0) {
                env.set(k, v, why);
            }
        }
        if model.mooncake.is_some() {
            set_local_defaults(&mut env, s.ctx);
        }
        env.layer(rm.env.iter().map(|(k, v)| (k, wp.apply(v))), &rm.env_key);
        env.layer(
            model.environment.iter().map(|(k, v)| (k, wp.apply(v))),
            "environment",
        );
        env.layer(
            w.env.iter().map(|(k, v)| (k, wp.apply(v))),
            &format!("{key}.env"),
        );
        if let Some(x) = &extra {
            for (k, v) in &x.after {
                env.set(k, v.clone(), "srtctl");
            }
        }
        if let Some(mm) = &model.mooncake {
            self.mooncake(mm, &mut env, store_here, vllm_config_path, warnings);
        }
        env
    }

    /// The Mooncake block's worker env, the forced master and metadata addresses, vLLM's
    /// config file, and the segment lints.
    fn mooncake(
        &self,
        mm: &MooncakeModel,
        env: &mut EnvBuilder,
        store_here: bool,
        vllm_config_path: &std::path::Path,
        warnings: &mut Vec<String>,
    ) {
        let (s, rm, wp, name) = (self.s, self.rm, self.wp, self.name);
        let model = s.model;
        let source = format!("{}.env", mm.key);
        for (k, v) in mm.worker_env.iter() {
            let v = wp.apply(v);
            if let Some(prev) = rm.env.get(k) {
                if wp.apply(prev) != v {
                    warnings.push(lints::shared_env_override(
                        name,
                        &source,
                        k,
                        &v,
                        &rm.env_key,
                        prev,
                    ));
                }
            }
            env.set(k, v, &source);
        }
        super::stores::set_master(env, &s.master_addr);
        env.set(
            mooncake::env::METADATA_SERVER,
            s.metadata_url.clone(),
            "forced",
        );
        let client = model.engine.mooncake_client();
        if client == MooncakeClient::ConfigFile {
            env.set(
                mooncake::env::CONFIG_PATH,
                vllm_config_path.display().to_string(),
                "forced",
            );
            // vLLM registers as this, not as the file's local_hostname: the same
            // address (the node's, or the recipe's MOONCAKE_LOCAL_HOSTNAME), unless
            // the recipe sets it.
            if env.get(mooncake::env::REQUESTER_LOCAL_HOSTNAME).is_none() {
                let host = env
                    .get(mooncake::env::LOCAL_HOSTNAME)
                    .map_or_else(|| s.ctx.ip.clone(), |v| v.value.clone());
                env.set(mooncake::env::REQUESTER_LOCAL_HOSTNAME, host, "default");
            }
        }
        if store_here && client != MooncakeClient::ConfigFile {
            lints::worker_segment(
                name,
                env.get(mooncake::env::GLOBAL_SEGMENT_SIZE)
                    .map(|v| v.value.as_str()),
                &rm.env_key,
                warnings,
            );
        }
        if client == (MooncakeClient::Env { sglang_sizes: true }) {
            if let Some(v) = env.get(mooncake::env::GLOBAL_SEGMENT_SIZE) {
                lints::sglang_size(name, &v.value, warnings);
            }
        }
    }
}

/// A worker's readiness: the entry's probes, else the layout's, else a derived worker's
/// `/health`.
fn worker_readiness(
    s: &NodeScope<'_>,
    e: &Entry,
    rm: &RoleModel,
    wp: &Placeholders,
) -> Result<Option<ReadinessSpec>, PlanError> {
    let (key, w, extra, derived) = (&e.key, &e.worker, &e.extra, e.derived);
    let model = s.model;
    Ok(match &w.readiness {
        Some(r) => {
            let mut probes = probe_list(
                wp,
                r.tcp.as_ref(),
                r.http.as_ref(),
                r.exec.as_ref(),
                r.file.as_ref(),
                &s.ctx.cwd,
            );
            if let Some(pat) = &r.log_line {
                probes.push(ProbeSpec::LogLine {
                    pattern: pat.0.clone(),
                });
            }
            if probes.is_empty() {
                return Err(err(
                    format!("{key}.readiness"),
                    "readiness names no probe",
                    "add one of tcp, http, exec, log_line, file (or remove readiness)",
                ));
            }
            let mut spec = readiness(
                probes,
                r.timeout_seconds
                    .map_or(Duration::from_secs(600), |s| s.duration()),
            );
            if let Some(d) = r.initial_delay_seconds {
                spec.initial_delay = d.duration();
            }
            if let Some(i) = r.interval_seconds {
                spec.interval = i.duration();
                spec.max_interval = spec.max_interval.max(i.duration());
            }
            Some(spec)
        }
        None if extra.is_some() => extra.as_ref().and_then(|x| x.readiness.clone()),
        None if derived => model.engine.server().map(|server| {
            readiness(
                vec![ProbeSpec::health(
                    "127.0.0.1",
                    server_port(server.default_port, rm.flags.as_ref()),
                )],
                DERIVED_READY_TIMEOUT,
            )
        }),
        None => None,
    })
}

fn store_placed_here(s: &NodeScope<'_>, svc: &ServiceModel) -> bool {
    match &svc.place {
        Place::Roles(o) => o.iter().any(|r| s.roles.contains(&r.role)),
        Place::Node { node, .. } => super::services::placed_here(*node, s.ctx, s.roles),
    }
}

/// The port a derived server listens on: its `port` flag, else the engine's default.
fn server_port(default: u16, flags: Option<&FlagMap>) -> u16 {
    flags
        .and_then(|f| f.get("port"))
        .and_then(|v| match v {
            serde_yaml::Value::Number(n) => n.as_u64(),
            serde_yaml::Value::String(s) => s.trim().parse().ok(),
            _ => None,
        })
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(default)
}

/// Flags → argv the way srt-slurm maps them: keys become `--kebab-case`, `true` a bare flag,
/// `false`/null are dropped, lists repeat their items after one flag.
pub fn flags_to_args(flags: &FlagMap) -> Vec<String> {
    crate::engine::render_flags(flags.0.iter().map(|(k, v)| (k, v)), scalar_to_string)
}

fn scalar_to_string(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        serde_yaml::Value::Null => String::new(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// A worker derived from the role's engine flags when `mcsup.workers` names none.
fn derived_worker(model: &JobModel, rm: &RoleModel, role: Role) -> Option<WorkerConfig> {
    let flags = rm.flags.as_ref()?;
    // An engine without a server is launched only from srtctl's layout (`resources:` or
    // `roles.<role>.nodes`).
    let server = model.engine.server()?;
    let name = format!("{}-{role}", server.prefix);
    let mut argv = vec!["python3".to_string(), "-m".into(), server.module.into()];
    argv.extend(flags_to_args(flags));
    Some(one_process_worker(name, argv, true))
}

/// A worker mcsup derived from the recipe (not written under `mcsup.workers`): one process, the
/// argv as given, the plan's defaults for everything else.
fn one_process_worker(name: String, argv: Vec<String>, critical: bool) -> WorkerConfig {
    WorkerConfig {
        name,
        command: Command(argv),
        args: Words::default(),
        env: EnvMap::default(),
        count: 1,
        preamble: None,
        cwd: None,
        readiness: None,
        liveness: None,
        stop: None,
        restart: None,
        critical,
    }
}

/// The liveness mcsup gives a worker it derives and the recipe gives none: its engine's own
/// signal ([`crate::engine::liveness`]) at the address its readiness probes, unless
/// `mcsup.engine_liveness.enabled` is false.
fn engine_liveness(
    argv: &[String],
    readiness: Option<&ReadinessSpec>,
    c: &crate::recipe::EngineLivenessConfig,
) -> Result<Option<LivenessSpec>, PlanError> {
    use crate::engine::liveness;
    if c.enabled == Some(false) {
        return Ok(None);
    }
    if c.failure_threshold == Some(0) {
        return Err(err(
            "mcsup.engine_liveness.failure_threshold",
            "is 0: every worker would be stopped at its first probe",
            "set 1 or more (failures in a row before the worker is stopped), or enabled: false",
        ));
    }
    let Some((host, port, path)) = readiness.and_then(|r| {
        r.probes.iter().find_map(|p| match p {
            ProbeSpec::Http {
                host, port, path, ..
            } => Some((host.clone(), *port, path.clone())),
            _ => None,
        })
    }) else {
        return Ok(None);
    };
    let Some((path, timeout)) = liveness::probe_path(argv, &path) else {
        return Ok(None);
    };
    let stall = c.stall_seconds.map_or(liveness::STALL, |s| s.duration());
    let probe = match liveness::progress(argv, port) {
        Some((inflight, progress)) if stall > Duration::ZERO => {
            ProbeSpec::EngineAlive(EngineAliveProbe {
                host,
                port,
                path,
                inflight,
                progress,
                stall,
            })
        }
        _ => ProbeSpec::Http {
            host,
            port,
            path,
            status: 200,
            body_contains: None,
        },
    };
    Ok(Some(LivenessSpec {
        probe,
        period: c.period_seconds.map_or(liveness::PERIOD, |s| s.duration()),
        attempt_timeout: c.timeout_seconds.map_or(timeout, |s| s.duration()),
        failure_threshold: c.failure_threshold.unwrap_or(liveness::THRESHOLD),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(yaml: &str) -> FlagMap {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn flags_map_to_argv_like_srt_slurm() {
        let f = flags("tp-size: 8\nenable_hierarchical_cache: true\ntrust-remote-code: false\nhicache-size: 60\nserved-model-name: [a, b]\nmem-fraction-static: 0.82\nskip: null\n");
        assert_eq!(
            flags_to_args(&f),
            vec![
                "--tp-size",
                "8",
                "--enable-hierarchical-cache",
                "--hicache-size",
                "60",
                "--served-model-name",
                "a",
                "b",
                "--mem-fraction-static",
                "0.82"
            ]
        );
    }

    #[test]
    fn derived_server_port_follows_the_port_flag() {
        use crate::engine::EngineKind;
        let port = |k: &dyn EngineKind| k.server().unwrap().default_port;
        let (sglang, vllm) = (
            port(&crate::engine::sglang::Sglang),
            port(&crate::engine::vllm::Vllm),
        );
        assert_eq!(server_port(sglang, None), 30000);
        assert_eq!(server_port(vllm, None), 8000);
        assert_eq!(server_port(sglang, Some(&flags("port: 31000"))), 31000);
        assert_eq!(server_port(sglang, Some(&flags("port: \"31001\""))), 31001);
        assert_eq!(server_port(sglang, Some(&flags("port: 70000"))), 30000);
    }
}
