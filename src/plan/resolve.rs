//! `plan()`: the pure function from (recipe, roles, node) to this node's [`Plan`].
//!
//! The recipe is first folded into one service model ([`super::model::normalize`]), whatever
//! its spelling. Then, for this node: the services placed here ([`super::services`]), the workers
//! ([`super::workers`]), gates on what runs on other nodes (the master, etcd, NATS), and the
//! start order by srtctl 2.0's phases: infra → before_workers (the master first, then the
//! stores and other services) → workers and with_workers → after_frontend. Teardown runs the
//! phases in reverse, each tier finished before the next ([`ProcessSpec::teardown_tier`]).
//!
//! No I/O happens here: the node's identity and paths arrive in [`NodeContext`].

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use super::error::{err, PlanError};
use super::frontends;
use super::kinds;
use super::lints;
use super::model::*;
use super::placeholders::Placeholders;
use super::policy::*;
use super::services::{self, NodeScope, WorkerSlot};
use super::spec::*;
use super::workers;
use crate::engine::EngineSettings;
use crate::mooncake;
use crate::node::NodeContext;
use crate::recipe::*;

pub use crate::mooncake::{
    DEFAULT_MASTER_TUNABLES, DEFAULT_METADATA_PORT, DEFAULT_METRICS_PORT, DEFAULT_RPC_PORT,
};
pub use workers::flags_to_args;

/// Parse `--role` text: `prefill`, `decode`, `agg`/`aggregated`, or a comma list.
pub fn parse_roles(text: &str) -> Result<Vec<Role>, PlanError> {
    let mut roles = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let role: Role = part.parse().map_err(|e: String| {
            err(
                "--role",
                e,
                "use e.g. --role decode or --role prefill,decode",
            )
        })?;
        if !roles.contains(&role) {
            roles.push(role);
        }
    }
    if roles.is_empty() {
        return Err(err(
            "--role",
            "no role given",
            "use e.g. --role decode (or set MCSUP_ROLE)",
        ));
    }
    Ok(roles)
}

/// Planning switches from the command line.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanOptions {
    /// A service mcsup does not run is an error instead of a listed note.
    pub strict: bool,
}

/// Resolve the plan for this node.
pub fn plan(recipe: &Recipe, roles: &[Role], ctx: &NodeContext) -> Result<Plan, PlanError> {
    plan_with(recipe, roles, ctx, PlanOptions::default())
}

/// [`plan`] with options.
pub fn plan_with(
    recipe: &Recipe,
    roles: &[Role],
    ctx: &NodeContext,
    opts: PlanOptions,
) -> Result<Plan, PlanError> {
    if roles.is_empty() {
        return Err(err("--role", "no role given", "use e.g. --role decode"));
    }
    let model = normalize(recipe)?;
    let mc = recipe.mcsup.clone().unwrap_or_default();
    for name in mc.services.keys() {
        if !model.services.iter().any(|s| s.name == *name) {
            let known: Vec<&str> = model.services.iter().map(|s| s.name.as_str()).collect();
            return Err(err(
                format!("mcsup.services.{name}"),
                format!("no service is named `{name}`"),
                if known.is_empty() {
                    "the recipe has no services; remove the entry".to_string()
                } else {
                    format!("use one of: {}", known.join(", "))
                },
            ));
        }
    }
    if let Some(declared) = &recipe.roles {
        for &role in roles {
            if declared.for_role(role).is_none() {
                let names: Vec<&str> = Role::ALL
                    .into_iter()
                    .filter(|r| declared.for_role(*r).is_some())
                    .map(Role::short)
                    .collect();
                return Err(err(
                    "roles",
                    format!(
                        "the recipe declares no `{}` role (roles: {})",
                        role.short(),
                        names.join(", ")
                    ),
                    format!("run this node with --role {}", names.join(" or --role ")),
                ));
            }
        }
    }
    let mut warnings: Vec<String> = ctx.warnings.clone();
    warnings.extend(model.warnings.iter().cloned());
    let mut ignored: Vec<String> = model.ignored.clone();
    let [rpc, meta, _] = model.master_ports;

    if model.engine == BackendType::Trtllm && mc.workers == WorkersConfig::default() {
        warnings.push(format!(
            "engine {}: mcsup derives no worker command for it; list workers under mcsup.workers",
            model.engine_name
        ));
    }

    let log_dir = {
        let base = Placeholders::new(ctx, rpc, meta, std::path::Path::new(""));
        let raw = mc
            .log_dir
            .clone()
            .unwrap_or_else(|| "mcsup-logs/{job_id}".into());
        let p = PathBuf::from(base.apply(&raw));
        if p.is_absolute() {
            p
        } else {
            ctx.cwd.join(p)
        }
    };
    let ph = Placeholders::new(ctx, rpc, meta, &log_dir);

    // Where clients find the master: the infra node, or the `external:` endpoint.
    let master = model.effective(ServiceType::MooncakeMaster);
    let external_master = master.and_then(|m| m.external.as_deref()).map(endpoint);
    let (master_host, master_rpc) = match &external_master {
        Some((h, p)) => (h.clone(), p.unwrap_or(rpc)),
        None => (ctx.infra_ip.clone(), rpc),
    };
    let discovery = discovery_env(&model, ctx);
    let scope = NodeScope {
        model: &model,
        mc: &mc,
        ctx,
        roles,
        ph: &ph,
        log_dir: &log_dir,
        master_addr: mooncake::master_address(&master_host, master_rpc),
        metadata_url: mooncake::metadata_url(&master_host, meta),
        discovery: discovery.iter().map(|(k, v, _)| (*k, v.clone())).collect(),
    };

    // ---- workers, then the services placed here ----
    // Per node: the file carries this node's local_hostname, and log_dir is often shared.
    let vllm_config_path = log_dir.join(format!("{}.mooncake_store_config.json", ctx.name));
    let mut taken = BTreeSet::new();
    // Services' errors come first (a store conflict explains more than a worker's name clash),
    // but `per: worker` services need the workers: plan both, report in that order.
    let (workers_planned, topo) =
        match topo_plan(recipe, &model, &mc, roles, ctx, &log_dir, &mut warnings) {
            Ok(topo) => (
                workers::plan_workers(
                    &scope,
                    topo.as_ref(),
                    &mut taken,
                    &vllm_config_path,
                    &mut warnings,
                ),
                topo,
            ),
            Err(e) => (Err(e), None),
        };
    let no_workers = Vec::new();
    let slots: Vec<WorkerSlot> = workers_planned
        .as_ref()
        .unwrap_or(&no_workers)
        .iter()
        .enumerate()
        .map(|(i, w)| WorkerSlot {
            name: w.name.clone(),
            role: w.roles[0],
            index: workers_planned.as_ref().map_or(0, |all| {
                all[..i].iter().filter(|x| x.roles == w.roles).count() as u32
            }),
        })
        .collect();
    let mut service_procs: Vec<ProcessSpec> = Vec::new();
    let mut rows = Vec::new();
    let mut owners: Vec<(u16, String, String)> = Vec::new();
    for svc in &model.services {
        ignored.extend(svc.recorded.iter().cloned());
        let here = if !svc.enabled {
            ServiceHere::Disabled
        } else if let Some(e) = &svc.external {
            ServiceHere::External {
                endpoint: e.clone(),
            }
        } else if let Err(why) = &svc.runnable {
            if opts.strict {
                return Err(err(svc.key.clone(), format!("{} (type {}) is not run by mcsup: {why}", svc.label(), svc.kind), "remove the service or run it outside mcsup, or drop --strict to list it and go on"));
            }
            ServiceHere::NotRun { why: why.clone() }
        } else {
            let insts = services::instances(&scope, svc, &slots)?;
            let names: Vec<String> = insts.iter().map(|i| i.spec.name.clone()).collect();
            for inst in insts {
                if !taken.insert(inst.spec.name.clone()) {
                    return Err(err(
                        format!("{}.name", svc.key),
                        format!(
                            "process name `{}` is used twice on this node",
                            inst.spec.name
                        ),
                        "give the service a name no worker or other service uses",
                    ));
                }
                for port in &inst.ports {
                    if let Some((_, other, other_key)) = owners.iter().find(|(p, _, _)| p == port) {
                        let _ = other_key;
                        return Err(err(
                            svc.key.clone(),
                            format!("services[{other}] and {} both listen on port {port} on node {}; give them disjoint placements or ports", svc.label(), ctx.name),
                            "for stores of co-located roles use one entry with `placement.node: workers`",
                        ));
                    }
                    owners.push((*port, svc.name.clone(), svc.key.clone()));
                }
                check_instance(svc, &inst.spec, ctx, &mut warnings)?;
                service_procs.push(inst.spec);
            }
            if names.is_empty() {
                ServiceHere::Elsewhere
            } else {
                ServiceHere::Runs { processes: names }
            }
        };
        rows.push(ServiceRow {
            name: svc.name.clone(),
            r#type: svc.kind.to_string(),
            placement: services::place_label(&svc.place),
            start: svc.start.to_string(),
            critical: svc.critical,
            command: svc.argv.clone(),
            readiness: services::describe_readiness(&svc.readiness, model.master_ports),
            implied_by: svc.implied_by.clone(),
            key: svc.key.clone(),
            here,
        });
    }

    let worker_procs = workers_planned?;
    let fe = match &topo {
        Some(t) => {
            let local: Vec<String> = worker_procs.iter().map(|p| p.name.clone()).collect();
            frontends::plan_frontends(t, ctx, &local, &model.environment.0, &|r| {
                model.roles.get(&r).and_then(|m| m.flags.clone())
            })?
        }
        None => frontends::FrontendPlan::default(),
    };
    for p in &fe.processes {
        if !taken.insert(p.name.clone()) {
            return Err(err(
                "frontend",
                format!("process name `{}` is used twice on this node", p.name),
                "rename the worker or service that uses it",
            ));
        }
    }

    // ---- files ----
    let mut files = Vec::new();
    if let (Some(mm), BackendType::Vllm) = (&model.mooncake, model.engine) {
        let mut cfg = mm.store_config.clone().unwrap_or_default();
        let store_here = service_procs.iter().any(|p| p.kind == ProcessKind::Store);
        if let (Some(v), true) = (cfg.get("global_segment_size"), store_here) {
            lints::vllm_segment(&format!("{}.store_config", mm.key), v, &mut warnings);
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
                .unwrap_or(&ctx.ip)
                .to_string();
            cfg.insert("local_hostname".into(), serde_json::Value::String(host));
        }
        let contents = serde_json::to_string_pretty(&cfg).unwrap_or_else(|_| "{}".into());
        files.push(FileSpec {
            path: vllm_config_path.clone(),
            contents: contents + "\n",
            purpose: "vLLM Mooncake store client config (MOONCAKE_CONFIG_PATH) for this node: master and metadata addresses forced, local_hostname this node's".into(),
        });
    }

    files.extend(fe.files.iter().cloned());
    // srtctl makes each profiled mode's output directory before it starts the worker.
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(t) = topo.as_ref().filter(|t| t.launch.profiling.is_some()) {
        for p in &t.here {
            let dir = PathBuf::from(crate::engine::profiling::Profiling::dir(
                &t.launch.log_dir,
                p.mode,
            ));
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }

    // ---- gates on what runs elsewhere, and the start order ----
    let mut gates: Vec<GateSpec> = fe.gates.clone();
    let local = |kind: ServiceType| {
        service_procs.iter().any(|p| {
            p.service
                .as_ref()
                .is_some_and(|o| o.r#type == kind.as_str())
        })
    };
    let needs_master = model.mooncake.is_some()
        && (service_procs.iter().any(|p| p.kind == ProcessKind::Store) || !worker_procs.is_empty());
    let mut master_dep: Option<String> = service_procs
        .iter()
        .find(|p| p.kind == ProcessKind::Master)
        .map(|p| p.name.clone());
    if master_dep.is_none() && needs_master {
        let where_ = if external_master.is_some() {
            "external".to_string()
        } else {
            ctx.infra_node.clone()
        };
        let name = format!(
            "{}@{where_}",
            if model.spelling == Spelling::V2 {
                master.map_or("mooncake-master", |m| m.name.as_str())
            } else {
                "master"
            }
        );
        let mut probes = vec![tcp(&master_host, master_rpc)];
        if external_master.is_none() {
            probes.push(tcp(&master_host, meta));
        }
        gates.push(remote_gate(
            &name,
            probes,
            Duration::from_secs_f64(master.map_or(120.0, |m| m.readiness.timeout_s)),
        ));
        master_dep = Some(name);
    } else if model.mooncake.is_none()
        && !worker_procs.is_empty()
        && mc.workers != WorkersConfig::default()
    {
        warnings.push("backend.mooncake_kv_store is not set: no Mooncake master or store is managed; only workers run".into());
    }
    let later_phases = !worker_procs.is_empty()
        || !fe.processes.is_empty()
        || service_procs.iter().any(|p| p.phase != Phase::Infra);
    let mut infra_deps: Vec<String> = service_procs
        .iter()
        .filter(|p| p.phase == Phase::Infra)
        .map(|p| p.name.clone())
        .collect();
    for (var, _, svc) in &discovery {
        let kind = if *var == "ETCD_ENDPOINTS" {
            ServiceType::Etcd
        } else {
            ServiceType::Nats
        };
        if local(kind) || !later_phases {
            continue;
        }
        let (host, port) = match &svc.external {
            Some(e) => {
                let (h, p) = endpoint(e);
                (
                    h,
                    p.unwrap_or(if kind == ServiceType::Etcd {
                        kinds::ETCD_PORT
                    } else {
                        kinds::NATS_PORT
                    }),
                )
            }
            None => (ctx.infra_ip.clone(), discovery_port(svc)),
        };
        let where_ = if svc.external.is_some() {
            "external".to_string()
        } else {
            ctx.infra_node.clone()
        };
        let name = format!("{}@{where_}", svc.name);
        gates.push(remote_gate(
            &name,
            vec![tcp(&host, port)],
            Duration::from_secs_f64(svc.readiness.timeout_s),
        ));
        infra_deps.push(name);
    }
    let before: Vec<String> = service_procs
        .iter()
        .filter(|p| p.phase == Phase::BeforeWorkers)
        .map(|p| p.name.clone())
        .collect();
    let worker_names: Vec<String> = worker_procs.iter().map(|p| p.name.clone()).collect();
    let frontend_names: Vec<String> = fe.processes.iter().map(|p| p.name.clone()).collect();
    let mut processes: Vec<ProcessSpec> = Vec::new();
    for phase in [
        Phase::Infra,
        Phase::BeforeWorkers,
        Phase::WithWorkers,
        Phase::Workers,
        Phase::Frontend,
        Phase::AfterFrontend,
    ] {
        let members: Vec<ProcessSpec> = if phase == Phase::Workers {
            worker_procs.clone()
        } else if phase == Phase::Frontend {
            fe.processes.clone()
        } else {
            let mut m: Vec<ProcessSpec> = service_procs
                .iter()
                .filter(|p| p.phase == phase)
                .cloned()
                .collect();
            // The master launches first in its phase (srtctl: implied services first).
            m.sort_by_key(|p| p.kind != ProcessKind::Master);
            m
        };
        for mut p in members {
            let mut deps: Vec<String> = Vec::new();
            match phase {
                Phase::Infra => {}
                Phase::BeforeWorkers => {
                    deps.extend(infra_deps.iter().cloned());
                    if p.kind != ProcessKind::Master {
                        deps.extend(master_dep.iter().cloned());
                    }
                }
                Phase::WithWorkers | Phase::Workers => {
                    deps.extend(infra_deps.iter().cloned());
                    deps.extend(
                        master_dep
                            .iter()
                            .filter(|_| model.mooncake.is_some())
                            .cloned(),
                    );
                    deps.extend(before.iter().cloned());
                }
                Phase::Frontend => {
                    // Infra first, then the frontend's own waits (plan::frontends: its workers
                    // here and elsewhere, or nginx's frontends).
                    let own: Vec<String> = p.depends_on.iter().map(|d| d.target.clone()).collect();
                    deps.extend(infra_deps.iter().cloned());
                    deps.extend(own);
                }
                Phase::AfterFrontend => {
                    deps.extend(infra_deps.iter().cloned());
                    if !frontend_names.is_empty() {
                        deps.extend(frontend_names.iter().cloned());
                    } else if worker_names.is_empty() {
                        deps.extend(before.iter().cloned());
                    } else {
                        deps.extend(worker_names.iter().cloned());
                    }
                }
            }
            let mut seen = BTreeSet::new();
            deps.retain(|d| *d != p.name && seen.insert(d.clone()));
            p.depends_on = deps.into_iter().flat_map(|d| healthy(Some(&d))).collect();
            processes.push(p);
        }
    }

    let shutdown = ShutdownSpec {
        deadline: mc
            .shutdown
            .deadline_seconds
            .map_or(Duration::from_secs(25), |s| s.duration()),
        drain_signal: mc
            .shutdown
            .drain_signal
            .map_or(SignalName::SIGUSR1, |s| s.0),
        exit_when_workers_done: mc.shutdown.exit_when_workers_done.unwrap_or(true),
    };
    {
        use crate::slurm::{DEFAULT_KILL_WAIT, KILL_MARGIN};
        if shutdown.deadline + KILL_MARGIN > DEFAULT_KILL_WAIT {
            warnings.push(format!(
                "mcsup.shutdown.deadline_seconds {} (+{} s to kill and reap) is past Slurm's default KillWait of {} s: unless this cluster's KillWait is longer (the preflight reads it), Slurm SIGKILLs the step in the middle of the teardown; keep the deadline at {} s or less",
                shutdown.deadline.as_secs(),
                KILL_MARGIN.as_secs(),
                DEFAULT_KILL_WAIT.as_secs(),
                (DEFAULT_KILL_WAIT - KILL_MARGIN).as_secs()
            ));
        }
    }
    if let Some(p) = processes
        .iter()
        .find(|p| p.stop.signal == shutdown.drain_signal)
    {
        return Err(err(
            "mcsup.shutdown.drain_signal",
            format!("{} is both the drain signal and {}'s stop signal; children ignore the drain signal, so it could never stop them", shutdown.drain_signal, p.name),
            "pick different signals (the drain signal defaults to SIGUSR1)",
        ));
    }
    if processes.is_empty() && !mc.allow_empty_node {
        let roles_txt = roles
            .iter()
            .map(|r| r.as_str())
            .collect::<Vec<_>>()
            .join(",");
        return Err(err(
            match (&recipe.services, &recipe.roles, roles.first()) {
                (Some(_), _, _) => "services".to_string(),
                (None, Some(_), Some(r)) => format!("roles.{}", r.short()),
                _ if recipe.backend.is_some() => "backend".to_string(),
                _ => String::new(),
            },
            format!(
                "nothing would run on node {} (roles {roles_txt}): no service is placed here and no worker is configured for these roles",
                ctx.name
            ),
            "place a service on this node's role, add workers (roles.<role>.args or mcsup.workers.<role>), or set mcsup.allow_empty_node: true if an idle node is intended",
        ));
    }

    let memory = {
        let mut m = super::memory::memory_spec(&model, &mc, roles);
        // With srtctl's layout known, a role's HiCache ranks on this node are its workers'
        // GPUs here (one rank per GPU), unless the recipe says otherwise.
        for l in &mut m.hicache {
            if let HiCacheL2::Sized {
                role,
                per_rank_gb,
                ranks,
                bytes,
                ranks_from,
                ..
            } = l
            {
                let gpus: usize = processes
                    .iter()
                    .filter(|p| p.roles == [*role])
                    .filter_map(|p| p.placement.as_ref())
                    .map(|w| w.gpus.len())
                    .sum();
                if gpus > 0 && !mc.preflight.hicache_ranks.contains_key(role.as_str()) {
                    *ranks = gpus as u64;
                    *bytes = per_rank_gb
                        .saturating_mul(1_000_000_000)
                        .saturating_mul(*ranks);
                    *ranks_from =
                        format!("srtctl's layout: {gpus} GPUs of {role} workers on this node");
                }
            }
        }
        m
    };
    Ok(Plan {
        node: NodeSummary {
            name: ctx.name.clone(),
            ip: ctx.ip.clone(),
            node_id: ctx.node_id,
            infra_node: ctx.infra_node.clone(),
            infra_ip: ctx.infra_ip.clone(),
            runs_master: processes.iter().any(|p| p.kind == ProcessKind::Master),
            job_id: ctx.job_id.clone(),
            mode: if ctx.slurm {
                "slurm".into()
            } else {
                "local".into()
            },
        },
        roles: roles.to_vec(),
        gates,
        processes,
        services: rows,
        endpoint: fe.summary.clone(),
        recipe_schema: model.spelling.as_str().into(),
        files,
        dirs,
        shutdown,
        memory,
        log_dir,
        ignored_sections: ignored,
        warnings,
        redacted: false,
    })
}

/// srtctl's worker layout for this node, when the recipe gives worker counts and mcsup derives
/// the workers (SGLang; roles without `mcsup.workers`). `--role` must name exactly the roles the
/// layout puts here.
fn topo_plan(
    recipe: &Recipe,
    model: &JobModel,
    mc: &McsupSection,
    roles: &[Role],
    ctx: &NodeContext,
    log_dir: &std::path::Path,
    warnings: &mut Vec<String>,
) -> Result<Option<workers::TopoPlan>, PlanError> {
    let Some(inputs) = super::topology::inputs(recipe)? else {
        return Ok(None);
    };
    let derived = |r: Role| mc.workers.for_role(r).is_none();
    if !Role::ALL
        .iter()
        .any(|r| derived(*r) && inputs.size(*r).workers > 0)
    {
        return Ok(None);
    }
    let frontend = recipe
        .raw_get(&["frontend", "type"])
        .and_then(|v| v.as_str())
        .unwrap_or("dynamo");
    let role_flags = |r: Role| model.roles.get(&r).and_then(|m| m.flags.as_ref());
    let Some(engine) =
        EngineSettings::from_recipe(&model.engine_name, recipe, &role_flags, frontend)?
    else {
        warnings.push(format!(
            "{}: mcsup derives no {} workers; list them under mcsup.workers",
            inputs.source, model.engine_name
        ));
        return Ok(None);
    };
    let mut inputs = inputs;
    let flag = |path: &[&str]| {
        recipe
            .raw_get(path)
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    };
    // srtctl's Nodes.from_slurm: a dedicated infra/frontend node is the first of the list, a
    // dedicated benchmark client the last (unless it shares the frontend's).
    let front =
        flag(&["infra", "etcd_nats_dedicated_node"]) || flag(&["frontend", "dedicated_node"]);
    let colocate = recipe
        .raw_get(&["benchmark", "colocate_with_frontend"])
        .and_then(|v| v.as_bool())
        .unwrap_or(true);
    let back = flag(&["benchmark", "client_dedicated_node"]) && !(front && colocate);
    let n = ctx.nodelist.len();
    let start = usize::from(front).min(n);
    let end = n.saturating_sub(usize::from(back)).max(start);
    let worker_nodes = start..end;
    if let EngineSettings::Vllm(_) = &engine {
        // VLLMProtocol.should_colocate_prefill_decode
        let (allow, across) = crate::engine::vllm::colocation(recipe);
        let total: u32 = Role::ALL
            .iter()
            .map(|r| inputs.size(*r).workers * inputs.size(*r).gpus_per_worker)
            .sum();
        inputs.pd_colocation = allow
            && inputs.prefill.workers > 0
            && inputs.decode.workers > 0
            && (total <= inputs.gpus_per_node || across);
    }
    let endpoints = super::topology::allocate(&inputs, worker_nodes.len())?;
    let mut dp_sizes = Vec::new();
    let all = match &engine {
        EngineSettings::Sglang | EngineSettings::Mocker(_) => {
            super::topology::processes(&endpoints)
        }
        EngineSettings::Vllm(v) => {
            let per_node = v.values().all(|m| m.per_node);
            let direct = frontend == "vllm";
            let dp_size = |r: Role| {
                model
                    .roles
                    .get(&r)
                    .and_then(|m| m.flags.as_ref())
                    .and_then(|f| {
                        f.0.iter()
                            .find(|(k, _)| k.replace('_', "-") == "data-parallel-size")
                    })
                    .and_then(|(_, v)| v.as_u64())
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0)
            };
            dp_sizes = Role::ALL.iter().map(|r| (*r, dp_size(*r))).collect();
            let dp_of = |r: Role| super::topology::VllmDp {
                dp_size: v.get(&r).filter(|m| m.dp).map(|_| dp_size(r)),
                replica: v.get(&r).map_or(1, |m| m.replica),
            };
            super::topology::vllm_processes(&endpoints, &dp_of, per_node, direct)?
        }
    };
    let here_idx = ctx
        .nodelist
        .iter()
        .position(|x| *x == ctx.name)
        .filter(|i| worker_nodes.contains(i))
        .map(|i| i - start);
    let here: Vec<_> = all
        .iter()
        .filter(|p| Some(p.node) == here_idx)
        .cloned()
        .collect();
    let placed: Vec<Role> = Role::ALL
        .into_iter()
        .filter(|r| here.iter().any(|p| p.mode == *r))
        .collect();
    let list = |rs: &[Role]| rs.iter().map(|r| r.short()).collect::<Vec<_>>().join(",");
    for r in &placed {
        if derived(*r) && !roles.contains(r) {
            return Err(err(
                "--role",
                format!(
                    "srtctl's layout puts {} workers on {} ({}), but --role does not name {}",
                    r.short(),
                    ctx.name,
                    list(&placed),
                    r.short()
                ),
                format!("run this node with --role {}", list(&placed)),
            ));
        }
    }
    for r in roles {
        if derived(*r) && !placed.contains(r) {
            return Err(err(
                "--role",
                format!(
                    "srtctl's layout puts no {} worker on {} ({})",
                    r.short(),
                    ctx.name,
                    if placed.is_empty() {
                        "it runs no worker there".to_string()
                    } else {
                        format!("it runs {} there", list(&placed))
                    }
                ),
                if placed.is_empty() {
                    "run this node with the role its services need, or not at all".to_string()
                } else {
                    format!("run this node with --role {}", list(&placed))
                },
            ));
        }
    }
    let raw_model = recipe
        .raw_get(&["model", "path"])
        .and_then(|v| v.as_str())
        .unwrap_or("model");
    let (model_arg, basename) = match raw_model.strip_prefix("hf:") {
        Some(id) => (
            id.to_string(),
            id.rsplit('/').next().unwrap_or(id).to_string(),
        ),
        None => {
            warnings.push(format!(
                "model.path `{raw_model}`: srtctl resolves it (an srtslurm.yaml alias or a path) and mounts it at /model; mcsup passes --model-path /model as srtctl does, so the model must be there"
            ));
            (
                "/model".to_string(),
                raw_model
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or(raw_model)
                    .to_string(),
            )
        }
    };
    let dynamo_workers = !matches!(frontend, "sglang" | "sglang-router" | "vllm");
    if dynamo_workers && !here.is_empty() {
        warnings.push(format!(
            "workers run {} (frontend.type {frontend}): srtctl installs Dynamo into the container before them (dynamo.version/hash/wheel); mcsup runs them inside this step's container, which must already have it",
            engine.dynamo_module()
        ));
    }
    if let Some(script) = recipe.raw_get(&["setup_script"]).and_then(|v| v.as_str()) {
        warnings.push(format!(
            "setup_script {script}: srtctl runs it in the container before each worker; mcsup does not — run it in the step before mcsup"
        ));
    }
    let served = [Role::Prefill, Role::Aggregated, Role::Decode]
        .iter()
        .filter_map(|r| model.roles.get(r)?.flags.as_ref())
        .find_map(|f| {
            f.get("served-model-name")
                .or(f.get("served_model_name"))
                .map(workers_str)
        })
        .unwrap_or(basename);
    let plane = |k: &str| {
        recipe
            .raw_get(&["dynamo", k])
            .and_then(|v| v.as_str())
            .map(String::from)
    };
    // srtctl v1's `profiling:` (2.0 recipes list it as not read).
    let profiling = if model.spelling == Spelling::V2 {
        None
    } else {
        let disaggregated = all.iter().any(|p| p.mode != Role::Aggregated);
        crate::engine::profiling::Profiling::from_recipe(recipe, disaggregated, frontend)?
    };
    if let (Some(p), BackendType::Vllm) = (&profiling, model.engine) {
        p.check_vllm_flags(
            model
                .roles
                .values()
                .filter_map(|rm| Some((rm.flags_key.as_str(), rm.flags.as_ref()?))),
        )?;
    }
    if let Some(p) = profiling.as_ref().filter(|_| !here.is_empty()) {
        warnings.push(format!(
            "profiling.type {}: the workers' captures go to {}/profiles/<mode>; {}",
            p.kind.as_str(),
            log_dir.display(),
            if p.kind == crate::engine::profiling::ProfileKind::Torch {
                "a capture starts when the benchmark client asks the worker (srtctl's benchmark stage; mcsup runs none)"
            } else {
                "the workers run under `nsys` from their PATH (srtctl's SRTCTL_NSYS_BIN is a setting of srtctl's own process, not read here)"
            }
        ));
    }
    let kv_events = if recipe.roles.is_some() {
        let mut m = serde_yaml::Mapping::new();
        for r in Role::ALL {
            if let Some(v) = recipe.raw_get(&["roles", r.short(), "kv_events"]) {
                m.insert(serde_yaml::Value::from(r.as_str()), v.clone());
            }
        }
        (!m.is_empty()).then_some(serde_yaml::Value::Mapping(m))
    } else {
        recipe.raw_get(&["backend", "kv_events_config"]).cloned()
    };
    let attempts = recipe
        .raw_get(&["health_check", "max_attempts"])
        .and_then(|v| v.as_f64())
        .unwrap_or(180.0);
    let interval = recipe
        .raw_get(&["health_check", "interval_seconds"])
        .and_then(|v| v.as_f64())
        .unwrap_or(10.0);
    let ready_timeout =
        Duration::try_from_secs_f64(attempts * interval).unwrap_or(Duration::from_secs(1800));
    Ok(Some(workers::TopoPlan {
        launch: crate::engine::LaunchContext {
            dynamo: !matches!(frontend, "sglang" | "sglang-router"),
            model_arg,
            served_model_name: served,
            request_plane: plane("request_plane").unwrap_or_else(|| "tcp".into()),
            event_plane: plane("event_plane"),
            log_dir: log_dir.display().to_string(),
            node_names: ctx.nodelist[worker_nodes.clone()].to_vec(),
            node_ips: ctx.node_ips[worker_nodes].to_vec(),
            head_ip: ctx
                .node_ips
                .first()
                .cloned()
                .unwrap_or_else(|| ctx.infra_ip.clone()),
            infra_node: ctx.infra_node.clone(),
            gpus_per_node: inputs.gpus_per_node,
            observability: model.observability.clone(),
            profiling,
        },
        here,
        all,
        head: if flag(&["frontend", "dedicated_node"]) {
            ctx.nodelist.first().cloned().unwrap_or_default()
        } else {
            ctx.nodelist.get(start).cloned().unwrap_or_default()
        },
        frontend: crate::engine::frontend::FrontendSettings::from_recipe(recipe)?,
        dp_sizes,
        kv_events,
        ready_timeout,
        engine,
    }))
}

fn workers_str(v: &serde_yaml::Value) -> String {
    crate::engine::python_str(v)
}

/// Checks on one store instance as planned for this node.
fn check_instance(
    svc: &ServiceModel,
    p: &ProcessSpec,
    ctx: &NodeContext,
    warnings: &mut Vec<String>,
) -> Result<(), PlanError> {
    if p.kind != ProcessKind::Store {
        return Ok(());
    }
    let (seg_key, hint) = match &svc.place {
        Place::Roles(o) => {
            let role = p.roles.first().copied().or(o.first().map(|o| o.role));
            let k = format!(
                "{}.placements.{}.env",
                svc.key,
                role.map_or("<role>", |r| r.as_str())
            );
            (k, "standalone.placements.<role>.env".to_string())
        }
        Place::Node { .. } => (format!("{}.env", svc.key), format!("{}.env", svc.key)),
    };
    lints::store_segment(
        &p.name,
        &ctx.name,
        p.env_value(mooncake::env::GLOBAL_SEGMENT_SIZE),
        &hint,
        warnings,
    )
    .map_err(|m| {
        err(
            format!("{seg_key}.MOONCAKE_GLOBAL_SEGMENT_SIZE"),
            m,
            "give the store at least \"16mb\" (segments are allocated in 16 MiB chunks)",
        )
    })?;
    if p.readiness.is_none() {
        warnings.push(match &svc.place {
            Place::Roles(_) => "standalone.health_check is null: workers start as soon as the store is spawned, before its segment is mounted".into(),
            Place::Node { .. } => format!("{} has no readiness: workers start as soon as the store is spawned, before its segment is mounted — give `readiness: {{port: N}}` with `args: [--port, \"N\"]`", svc.label()),
        });
    }
    Ok(())
}

/// `host` and optional port of an endpoint written as `host:port`, `http://host:port/...` or
/// `nats://host:port`.
fn endpoint(text: &str) -> (String, Option<u16>) {
    let t = text.trim();
    let t = t.split_once("://").map_or(t, |(_, rest)| rest);
    let t = t.split(['/', ',', ';']).next().unwrap_or(t);
    if let Some(rest) = t.strip_prefix('[') {
        if let Some((h, p)) = rest.split_once(']') {
            return (
                h.to_string(),
                p.strip_prefix(':').and_then(|p| p.parse().ok()),
            );
        }
    }
    match t.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h.to_string(), p.parse().ok()),
        _ => (t.to_string(), None),
    }
}

/// The client port of an etcd/NATS service: its probe's port, else the kind's.
fn discovery_port(svc: &ServiceModel) -> u16 {
    match svc.readiness.probe {
        Readiness::Tcp { port } | Readiness::Http { port, .. } => port,
        _ if svc.kind == ServiceType::Etcd => kinds::ETCD_PORT,
        _ => kinds::NATS_PORT,
    }
}

/// `ETCD_ENDPOINTS` / `NATS_SERVER`, each only when such a service is effective (srtctl PR #439),
/// pointing at the infra node or the `external:` endpoint.
fn discovery_env<'m>(
    model: &'m JobModel,
    ctx: &NodeContext,
) -> Vec<(&'static str, String, &'m ServiceModel)> {
    let mut out = Vec::new();
    if let Some(e) = model.effective(ServiceType::Etcd) {
        let v = e
            .external
            .clone()
            .unwrap_or_else(|| format!("http://{}:{}", ctx.infra_ip, discovery_port(e)));
        out.push(("ETCD_ENDPOINTS", v, e));
    }
    if let Some(n) = model.effective(ServiceType::Nats) {
        let v = n
            .external
            .clone()
            .unwrap_or_else(|| format!("nats://{}:{}", ctx.infra_ip, discovery_port(n)));
        out.push(("NATS_SERVER", v, n));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_with_aliases_and_dedupe() {
        assert_eq!(parse_roles("agg").unwrap(), vec![Role::Aggregated]);
        assert_eq!(
            parse_roles("prefill, decode,prefill").unwrap(),
            vec![Role::Prefill, Role::Decode]
        );
        assert!(parse_roles("").is_err());
        assert!(parse_roles("decoder")
            .unwrap_err()
            .to_string()
            .contains("unknown role `decoder`"));
    }

    #[test]
    fn endpoints_split_host_and_port() {
        assert_eq!(endpoint("10.0.0.9:8700"), ("10.0.0.9".into(), Some(8700)));
        assert_eq!(
            endpoint("http://10.0.0.9:2379"),
            ("10.0.0.9".into(), Some(2379))
        );
        assert_eq!(
            endpoint("nats://h1:4222,nats://h2:4222"),
            ("h1".into(), Some(4222))
        );
        assert_eq!(endpoint("[fd00::1]:8700"), ("fd00::1".into(), Some(8700)));
        assert_eq!(endpoint("master.example"), ("master.example".into(), None));
    }
}
