//! Services on this node: which instances of each effective service run here, and each one's
//! argv, environment (srtctl 2.0's layering), readiness and policies.
//!
//! Environment, later layers win (`_service_environment`): discovery (`ETCD_ENDPOINTS`,
//! `NATS_SERVER`, only for effective services and never on etcd/NATS themselves) < the kind's
//! defaults (a store's `MOONCAKE_LOCAL_HOSTNAME=<node ip>`) < the recipe's env layers < the kind's
//! forced variables (a store's `MOONCAKE_MASTER` / `MOONCAKE_TE_META_DATA_SERVER`), which the
//! recipe cannot override. Pure.

use std::collections::BTreeSet;
use std::time::Duration;

use super::env::EnvBuilder;
use super::model::*;
use super::placeholders::Placeholders;
use super::policy::*;
use super::spec::*;
use super::PlanError;
use crate::domain::{plan_err, Role};
use crate::mooncake;
use crate::node::NodeContext;
use crate::recipe::*;

/// What every service instance on this node shares.
pub struct NodeScope<'a> {
    pub model: &'a JobModel,
    pub mc: &'a McsupSection,
    pub ctx: &'a NodeContext,
    pub roles: &'a [Role],
    pub ph: &'a Placeholders,
    pub log_dir: &'a std::path::Path,
    /// `MOONCAKE_MASTER` for clients.
    pub master_addr: String,
    /// `MOONCAKE_TE_META_DATA_SERVER` for clients.
    pub metadata_url: String,
    /// Discovery variables (`ETCD_ENDPOINTS`, `NATS_SERVER`) and their values.
    pub discovery: Vec<(&'static str, String)>,
}

/// A worker already planned on this node, for `per: worker` services.
#[derive(Debug, Clone)]
pub struct WorkerSlot {
    pub name: String,
    pub role: Role,
    pub index: u32,
}

fn role_matches(node: PlacementNode, role: Role) -> bool {
    matches!(
        (node, role),
        (PlacementNode::Prefill, Role::Prefill)
            | (PlacementNode::Decode, Role::Decode)
            | (PlacementNode::Agg, Role::Aggregated)
            | (PlacementNode::Workers | PlacementNode::Compute, _)
    )
}

/// Does `node` (a placement) select this node? `head`, `infra` and `dedicated` are the infra
/// node (the first of the job's node list, as in srtctl); role placements follow `--role`.
pub fn placed_here(node: PlacementNode, ctx: &NodeContext, roles: &[Role]) -> bool {
    match node {
        PlacementNode::Head | PlacementNode::Infra | PlacementNode::Dedicated => {
            ctx.infra_node == ctx.name
        }
        PlacementNode::All => true,
        n => roles.iter().any(|r| role_matches(n, *r)),
    }
}

/// The placement as a word for listings.
pub fn place_label(place: &Place) -> String {
    match place {
        Place::Node { node, per_worker } => {
            if *per_worker {
                format!("{node} (per worker)")
            } else {
                node.to_string()
            }
        }
        Place::Roles(o) => format!(
            "roles: {}",
            o.iter()
                .map(|r| r.role.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// The services placed on this node: their processes, and one listing row per service.
pub struct Placed {
    pub processes: Vec<ProcessSpec>,
    pub rows: Vec<ServiceRow>,
}

/// Place every service of the model on this node (or say why it does not run here): names and
/// ports unique on the node, stores checked. `strict` makes a service mcsup does not run an
/// error. The services' unread keys join `ignored`.
pub fn place(
    scope: &NodeScope,
    slots: &[WorkerSlot],
    strict: bool,
    taken: &mut BTreeSet<String>,
    warnings: &mut Vec<String>,
    ignored: &mut Vec<String>,
) -> Result<Placed, PlanError> {
    let model = scope.model;
    let mut processes: Vec<ProcessSpec> = Vec::new();
    let mut rows = Vec::new();
    let mut owners: Vec<(u16, String)> = Vec::new();
    for svc in &model.services {
        ignored.extend(svc.recorded.iter().cloned());
        let here = if !svc.enabled {
            ServiceHere::Disabled
        } else if let Some(e) = &svc.external {
            ServiceHere::External {
                endpoint: e.clone(),
            }
        } else if let Err(why) = &svc.runnable {
            if strict {
                return Err(plan_err(svc.key.clone(), format!("{} (type {}) is not run by mcsup: {why}", svc.label(), svc.kind), "remove the service or run it outside mcsup, or drop --strict to list it and go on"));
            }
            ServiceHere::NotRun { why: why.clone() }
        } else {
            let insts = instances(scope, svc, slots)?;
            let names: Vec<String> = insts.iter().map(|i| i.spec.name.clone()).collect();
            for inst in insts {
                if !taken.insert(inst.spec.name.clone()) {
                    return Err(plan_err(
                        format!("{}.name", svc.key),
                        format!(
                            "process name `{}` is used twice on this node",
                            inst.spec.name
                        ),
                        "give the service a name no worker or other service uses",
                    ));
                }
                for port in &inst.ports {
                    if let Some((_, other)) = owners.iter().find(|(p, _)| p == port) {
                        return Err(plan_err(
                            svc.key.clone(),
                            format!("services[{other}] and {} both listen on port {port} on node {}; give them disjoint placements or ports", svc.label(), scope.ctx.name),
                            "for stores of co-located roles use one entry with `placement.node: workers`",
                        ));
                    }
                    owners.push((*port, svc.name.clone()));
                }
                check_store(svc, &inst.spec, scope.ctx, warnings)?;
                processes.push(inst.spec);
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
            placement: place_label(&svc.place),
            start: svc.start.to_string(),
            critical: svc.critical,
            command: svc.argv.clone(),
            readiness: describe_readiness(&svc.readiness, model.master_ports),
            implied_by: svc.implied_by.clone(),
            key: svc.key.clone(),
            here,
        });
    }
    Ok(Placed { processes, rows })
}

/// Checks on one store instance as planned for this node: its segment, and that something
/// says when it is mounted.
fn check_store(
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
    super::lints::store_segment(
        &p.name,
        &ctx.name,
        p.env_value(mooncake::env::GLOBAL_SEGMENT_SIZE),
        &hint,
        warnings,
    )
    .map_err(|m| {
        plan_err(
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

/// One process to run, before dependencies are wired.
pub struct Instance {
    pub spec: ProcessSpec,
    /// The ports it owns on this node.
    pub ports: Vec<u16>,
}

/// Processes of service `svc` on this node (empty when it is not placed here).
pub fn instances(
    s: &NodeScope<'_>,
    svc: &ServiceModel,
    workers: &[WorkerSlot],
) -> Result<Vec<Instance>, PlanError> {
    if !svc.enabled || svc.external.is_some() || svc.runnable.is_err() {
        return Ok(Vec::new());
    }
    // (role label for {role}, index, per-role overlay layers, worker slot)
    let mut plans: Vec<(String, u32, Vec<&RoleOverlay>, Option<&WorkerSlot>)> = Vec::new();
    match &svc.place {
        Place::Node {
            node,
            per_worker: false,
        } => {
            if placed_here(*node, s.ctx, s.roles) {
                plans.push((node.to_string(), 0, Vec::new(), None));
            }
        }
        Place::Node {
            node,
            per_worker: true,
        } => {
            for (i, w) in workers
                .iter()
                .filter(|w| role_matches(*node, w.role))
                .enumerate()
            {
                plans.push((node.to_string(), i as u32, Vec::new(), Some(w)));
            }
        }
        Place::Roles(overlays) => {
            let here: Vec<&RoleOverlay> = overlays
                .iter()
                .filter(|o| s.roles.contains(&o.role))
                .collect();
            if let Some((first, rest)) = here.split_first() {
                for o in rest {
                    let mut differing = Vec::new();
                    let keys: BTreeSet<&str> = first
                        .env
                        .iter()
                        .chain(o.env.iter())
                        .map(|(k, _)| k)
                        .collect();
                    for k in keys {
                        if first.env.get(k) != o.env.get(k) {
                            differing.push(format!("env.{k}"));
                        }
                    }
                    if first.args != o.args {
                        differing.push("args".into());
                    }
                    if !differing.is_empty() {
                        return Err(PlanError {
                            key_path: format!("{}.placements", svc.key),
                            message: format!(
                                "Mooncake standalone placements for co-located roles on node {} conflict: {}, {} (differing: {})",
                                s.ctx.name,
                                first.role,
                                o.role,
                                differing.join(", ")
                            ),
                            fix: "use identical placement env/args for co-located roles, or disable one placement (enabled: false)".into(),
                            at_value: false,
                        });
                    }
                }
                let label = here
                    .iter()
                    .map(|o| o.role.as_str())
                    .collect::<Vec<_>>()
                    .join("_");
                plans.push((label, 0, here, None));
            }
        }
    }
    let mut out = Vec::new();
    for (role_label, index, overlays, worker) in plans {
        let mut ph = s.ph.instance(&role_label, index);
        let name = match worker {
            Some(w) => {
                ph = ph
                    .with("worker_role", w.role.as_str())
                    .with("worker_index", w.index.to_string())
                    .with("worker_node_rank", "0");
                format!("{}-{}-{}", svc.name, w.role, w.index)
            }
            None => svc.name.clone(),
        };
        out.push(instance(s, svc, &ph, name, &overlays, worker)?);
    }
    Ok(out)
}

fn instance(
    s: &NodeScope<'_>,
    svc: &ServiceModel,
    ph: &Placeholders,
    name: String,
    overlays: &[&RoleOverlay],
    worker: Option<&WorkerSlot>,
) -> Result<Instance, PlanError> {
    let kind = match svc.kind {
        ServiceType::MooncakeMaster => ProcessKind::Master,
        ServiceType::MooncakeStore => ProcessKind::Store,
        _ => ProcessKind::Service,
    };
    let mut argv = svc.argv.clone();
    if let Some(o) = overlays.first() {
        argv.extend(o.args.iter().cloned());
    }
    let argv = ph.apply_all(&argv);
    let (stop, restart, liveness) = instance_policy(s, svc, kind, ph)?;
    let phase = match svc.start {
        StartPhase::Infra => Phase::Infra,
        StartPhase::BeforeWorkers => Phase::BeforeWorkers,
        StartPhase::WithWorkers => Phase::WithWorkers,
        StartPhase::AfterFrontend => Phase::AfterFrontend,
    };
    let roles = match &svc.place {
        Place::Roles(o) => o
            .iter()
            .map(|r| r.role)
            .filter(|r| s.roles.contains(r))
            .collect(),
        Place::Node { .. } => match worker {
            Some(w) => vec![w.role],
            None => Vec::new(),
        },
    };
    let ports = match (&svc.place, &svc.readiness.probe) {
        (
            Place::Node {
                per_worker: true, ..
            },
            _,
        ) => Vec::new(),
        _ => svc.owned_ports(s.model.master_ports),
    };
    Ok(Instance {
        spec: ProcessSpec {
            name,
            kind,
            phase,
            placement: None,
            listens: svc.listens.clone(),
            service: Some(ServiceOrigin {
                service: svc.name.clone(),
                r#type: svc.kind.to_string(),
                key: svc.key.clone(),
                implied_by: svc.implied_by.clone(),
            }),
            roles,
            argv,
            preamble: svc.preamble.as_ref().map(|p| ph.apply(p)),
            env: instance_env(s, svc, ph, overlays).build(),
            cwd: None,
            depends_on: Vec::new(),
            readiness: instance_readiness(s, svc, ph),
            liveness,
            restart,
            stop,
            critical: svc.critical,
            fatal_log_patterns: Vec::new(),
            slurm_step: None,
            terminal: svc.terminal.then_some(TerminalSpec {
                benchmark: None,
                max_failed_requests: 0,
            }),
        },
        ports,
    })
}

/// An instance's environment, later layers winning: discovery < the kind's defaults < the
/// service's env layers < the role overlay's env < the kind's forced variables.
fn instance_env(
    s: &NodeScope<'_>,
    svc: &ServiceModel,
    ph: &Placeholders,
    overlays: &[&RoleOverlay],
) -> EnvBuilder {
    let mut env = EnvBuilder::new();
    if svc.inherit_discovery_env && !matches!(svc.kind, ServiceType::Etcd | ServiceType::Nats) {
        for (k, v) in &s.discovery {
            env.set(k, v.clone(), "discovery");
        }
    }
    if svc.kind == ServiceType::MooncakeStore {
        set_local_defaults(&mut env, s.ctx);
    }
    for (source, vars) in &svc.env {
        env.layer(vars.iter().map(|(k, v)| (k, ph.apply(v))), source);
    }
    if let Some(o) = overlays.first() {
        let source = if s.model.spelling == Spelling::V2 {
            format!("{}.env", o.key)
        } else {
            format!("placements.{}.env", o.role)
        };
        env.layer(o.env.iter().map(|(k, v)| (k, ph.apply(v))), &source);
    }
    if svc.kind == ServiceType::MooncakeStore {
        super::stores::set_master(&mut env, &s.master_addr);
        env.set(
            mooncake::env::METADATA_SERVER,
            s.metadata_url.clone(),
            "forced",
        );
    }
    env
}

/// Stop, restart and liveness: the kind's defaults, then `mcsup.master` / `mcsup.store` /
/// `mcsup.services.<name>`.
fn instance_policy(
    s: &NodeScope<'_>,
    svc: &ServiceModel,
    kind: ProcessKind,
    ph: &Placeholders,
) -> Result<(StopSpec, RestartSpec, Option<LivenessSpec>), PlanError> {
    let policy = s.mc.services.get(&svc.name);
    let (mut stop, restart) = policy_defaults(kind);
    if let Some(sig) = super::kinds::defaults(svc.kind).stop_signal {
        stop.signal = sig;
    }
    let (stop_cfg, restart_cfg, restart_key, liveness_cfg, liveness_key) = match kind {
        ProcessKind::Master => (
            s.mc.master.stop.as_ref(),
            s.mc.master.restart.as_ref(),
            "mcsup.master.restart".to_string(),
            None,
            String::new(),
        ),
        ProcessKind::Store if s.model.spelling != Spelling::V2 => (
            s.mc.store.stop.as_ref(),
            s.mc.store.restart.as_ref(),
            "mcsup.store.restart".to_string(),
            s.mc.store.liveness.as_ref(),
            "mcsup.store.liveness".to_string(),
        ),
        _ => (
            policy
                .and_then(|p| p.stop.as_ref())
                .or(if kind == ProcessKind::Store {
                    s.mc.store.stop.as_ref()
                } else {
                    None
                }),
            policy
                .and_then(|p| p.restart.as_ref())
                .or(if kind == ProcessKind::Store {
                    s.mc.store.restart.as_ref()
                } else {
                    None
                }),
            format!("mcsup.services.{}.restart", svc.name),
            policy
                .and_then(|p| p.liveness.as_ref())
                .or(if kind == ProcessKind::Store {
                    s.mc.store.liveness.as_ref()
                } else {
                    None
                }),
            format!("mcsup.services.{}.liveness", svc.name),
        ),
    };
    let stop = apply_stop(stop, stop_cfg);
    let restart = apply_restart(restart, restart_cfg, &restart_key)?;
    let liveness = match liveness_cfg {
        Some(l) => Some(liveness_spec(ph, l, &liveness_key, &s.ctx.cwd)?),
        None => None,
    };
    Ok((stop, restart, liveness))
}

/// The service's readiness probes on this node; `None` when it has none.
fn instance_readiness(
    s: &NodeScope<'_>,
    svc: &ServiceModel,
    ph: &Placeholders,
) -> Option<ReadinessSpec> {
    let r = &svc.readiness;
    let timeout = Duration::from_secs_f64(r.timeout_s);
    let [rpc, meta, metrics] = s.model.master_ports;
    let probes = match &r.probe {
        Readiness::None => Vec::new(),
        Readiness::Tcp { port } => vec![tcp("127.0.0.1", *port)],
        Readiness::Http { port, path, status } => vec![ProbeSpec::Http {
            host: "127.0.0.1".into(),
            port: *port,
            path: ph.apply(path),
            status: *status,
            body_contains: None,
        }],
        Readiness::Log { pattern } => vec![ProbeSpec::LogLine {
            pattern: pattern.clone(),
        }],
        Readiness::File { path } => vec![ProbeSpec::File {
            path: s.log_dir.join(ph.apply(path)),
        }],
        Readiness::MasterPorts => vec![
            tcp("127.0.0.1", rpc),
            tcp("127.0.0.1", meta),
            tcp("127.0.0.1", metrics),
        ],
    };
    (!probes.is_empty()).then(|| {
        let mut spec = readiness(probes, timeout);
        if let Some(i) = r.interval_s {
            spec.max_interval = Duration::from_secs_f64(i).max(spec.interval);
        }
        spec
    })
}

/// Defaults every Mooncake client on the node gets (the user may override them): the address it
/// advertises, and the address its transfer engine binds. Without `MC_TCP_BIND_ADDRESS` Mooncake
/// advertises the first non-loopback interface for its RPC and TCP data even when
/// `MOONCAKE_LOCAL_HOSTNAME` is 127.0.0.1 (observed with 0.3.13.post1), so traffic meant for one
/// interface leaves through another.
pub fn set_local_defaults(env: &mut EnvBuilder, ctx: &NodeContext) {
    env.set(mooncake::env::LOCAL_HOSTNAME, ctx.ip.clone(), "default");
    if ctx.ip.parse::<std::net::IpAddr>().is_ok() {
        env.set(mooncake::env::TCP_BIND_ADDRESS, ctx.ip.clone(), "default");
    }
}

/// A readiness in srtctl's dry-run words (`tcp/8700, timeout=120s`).
pub fn describe_readiness(r: &ReadinessModel, master_ports: [u16; 3]) -> String {
    let t = r.timeout_s;
    match &r.probe {
        Readiness::None => "none (ready once started)".into(),
        Readiness::Tcp { port } => format!("tcp/{port}, timeout={t}s"),
        Readiness::Http { port, path, status } => {
            format!("http://<node>:{port}{path} -> {status}, timeout={t}s")
        }
        Readiness::Log { pattern } => format!("log matches /{pattern}/, timeout={t}s"),
        Readiness::File { path } => format!("nonempty file {path}, timeout={t}s"),
        Readiness::MasterPorts => format!(
            "tcp/{} + tcp/{} + tcp/{}, timeout={t}s",
            master_ports[0], master_ports[1], master_ports[2]
        ),
    }
}
