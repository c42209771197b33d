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
use super::model::*;
use super::placeholders::Placeholders;
use super::services::{self, NodeScope, WorkerSlot};
use super::spec::*;
use super::{files, frontends, lints, order, stores, topo, workers};
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
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// A service mcsup does not run is an error instead of a listed note.
    pub strict: bool,
    /// The container of the Slurm steps mcsup starts (TRT-LLM endpoints), when mcsup runs on
    /// the host.
    pub step_container: Option<crate::engine::StepContainer>,
}

/// Resolve the plan for this node.
pub fn plan(recipe: &Recipe, roles: &[Role], ctx: &NodeContext) -> Result<Plan, PlanError> {
    plan_with(recipe, roles, ctx, PlanOptions::default())
}

/// The roles of a node as `--role auto` derives them: srtctl's layout and the node's place in
/// the job's node list. `roles` is empty on a node that runs no worker (a dedicated infra or
/// frontend node, or one the layout does not use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoRoles {
    pub roles: Vec<Role>,
    /// How, in words (`mcsup plan` shows it).
    pub why: String,
}

/// `--role auto`: the roles srtctl's layout puts on this node.
pub fn auto_roles(recipe: &Recipe, ctx: &NodeContext) -> Result<AutoRoles, PlanError> {
    let model = normalize(recipe)?;
    let mc = recipe.mcsup.clone().unwrap_or_default();
    if let Some(r) = Role::ALL
        .into_iter()
        .find(|r| mc.workers.for_role(*r).is_some())
    {
        return Err(err(
            "--role",
            format!(
                "auto: mcsup.workers.{} lists workers by hand, so srtctl's layout does not say which node runs them",
                r.short()
            ),
            "name this node's roles: --role prefill|decode|agg (comma-separated when shared)",
        ));
    }
    let dir = log_dir(&model, &mc, ctx)?;
    let Some(t) = topo::job_layout(recipe, &model, &mc, ctx, &dir, &mut Vec::new())? else {
        if let Some(u) = underivable(recipe, &model, &mc) {
            // What a Slurm job of such a recipe meets first: say what is missing.
            return Err(underivable_error(&model, &u));
        }
        return Err(err(
            "--role",
            "auto: the recipe has no srtctl worker layout to derive roles from (resources: with worker counts, and an engine mcsup launches)",
            "name this node's roles: --role prefill|decode|agg (comma-separated when shared)",
        ));
    };
    Ok(AutoRoles {
        roles: topo::roles_on(&t, &ctx.nodelist, &ctx.name),
        why: topo::roles_derivation(&t, &ctx.nodelist, &ctx.name),
    })
}

/// `--role` as typed: `auto` (this node's roles from srtctl's layout, and how they were found, in
/// [`Plan::roles_from`]) or named roles (`prefill`, `decode,prefill`, ...).
pub fn plan_for_role(
    recipe: &Recipe,
    role_text: &str,
    ctx: &NodeContext,
    opts: PlanOptions,
) -> Result<Plan, PlanError> {
    let (roles, from) = if role_text.trim() == "auto" {
        let a = auto_roles(recipe, ctx)?;
        (a.roles, Some(a.why))
    } else {
        (parse_roles(role_text)?, None)
    };
    let mut plan = plan_with(recipe, &roles, ctx, opts)?;
    plan.roles_from = from;
    Ok(plan)
}

/// [`plan`] with options. A pipeline of named steps: the recipe's model, the request checked
/// against it, where files go and where the master is, the workers (srtctl's layout), the
/// services, the frontends, the files, the waits on other nodes and the start order, the stop
/// policy, the memory budget.
pub fn plan_with(
    recipe: &Recipe,
    roles: &[Role],
    ctx: &NodeContext,
    opts: PlanOptions,
) -> Result<Plan, PlanError> {
    // No role is a node without workers (`--role auto` on a dedicated infra or frontend node):
    // it runs the services and frontends placed on it, and must run something.
    let model = normalize(recipe)?;
    super::benchmark::check_terminal_services(recipe, &model)?;
    let mc = recipe.mcsup.clone().unwrap_or_default();
    check_request(recipe, &model, &mc, roles)?;
    let mut warnings: Vec<String> = [&ctx.warnings[..], &recipe.file_warnings].concat();
    warnings.extend(model.warnings.iter().cloned());
    let mut ignored: Vec<String> = model.ignored.clone();
    warnings.extend(underivable(recipe, &model, &mc).map(|u| underivable_warning(&model, &u)));
    let log_dir = log_dir(&model, &mc, ctx)?;
    let ph = Placeholders::new(ctx, model.master_ports[0], model.master_ports[1], &log_dir);
    let master = order::MasterAt::of(&model, ctx);
    let discovery = order::discovery_env(&model, ctx);
    let scope = NodeScope {
        model: &model,
        mc: &mc,
        ctx,
        roles,
        ph: &ph,
        log_dir: &log_dir,
        master_addr: mooncake::master_address(&master.host, master.rpc),
        metadata_url: mooncake::metadata_url(&master.host, model.master_ports[1]),
        discovery: discovery.iter().map(|(k, v, _)| (*k, v.clone())).collect(),
    };

    // Per node: the file carries this node's local_hostname, and log_dir is often shared.
    let vllm_config_path = log_dir.join(format!("{}.mooncake_store_config.json", ctx.name));
    let mut taken = BTreeSet::new();
    // Services' errors come first (a store conflict explains more than a worker's name clash),
    // but `per: worker` services need the workers: plan both, report in that order.
    let (workers_planned, topo) = match node_layout(recipe, &scope, &opts, &mut warnings) {
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
    let slots = worker_slots(workers_planned.as_deref().unwrap_or_default());
    let placed = services::place(
        &scope,
        &slots,
        opts.strict,
        &mut taken,
        &mut warnings,
        &mut ignored,
    )?;
    let worker_procs = workers_planned?;
    let mut fe = frontends_here(topo.as_ref(), &model, ctx, &worker_procs, &mut taken)?;
    let bench = super::benchmark::here(recipe, topo.as_ref(), ctx, &model, &fe, &mut warnings)?;
    fe.gates.extend(bench.gate.clone());
    let files = files::node_files(
        &scope,
        &placed.processes,
        &worker_procs,
        &fe,
        topo.as_ref(),
        &vllm_config_path,
        &mut warnings,
    );
    let dirs = files::profile_dirs(topo.as_ref());
    let waits = order::remote_waits(
        &model,
        &mc,
        ctx,
        &master,
        &discovery,
        &placed.processes,
        &worker_procs,
        &fe,
        &mut warnings,
    );
    let mut processes =
        order::start_order(&model, &waits, placed.processes, worker_procs, fe.processes);
    add_client(&mut processes, &mut taken, bench.process)?;
    let control = super::control::spec(ctx, &mc, &log_dir);
    let mut gates = waits.gates;
    let mut notes = wire_mooncake(
        &mut processes,
        &master,
        &mc,
        ctx,
        control.as_ref(),
        &mut gates,
    );
    notes.extend(liveness_note(&processes, &mc));
    stores::lints(
        &processes,
        master.service.map(|s| s.argv.as_slice()),
        &mut warnings,
    );
    let shutdown = shutdown_spec(&mc, &processes, topo.as_ref(), &mut warnings)?;
    process_lints(&processes, &mc, shutdown.deadline, ctx, &mut warnings);
    check_not_empty(recipe, &model, &mc, roles, ctx, &processes, topo.as_ref())?;
    not_named_mcsup(&processes)?;
    values_as_their_readers_read_them(recipe, &processes)?;
    let memory = memory_here(&model, &mc, roles, &processes);
    let scratch_dir = uses_scratch(&processes, &ctx.scratch_dir).then(|| ctx.scratch_dir.clone());
    Ok(Plan {
        node: node_summary(ctx, &processes),
        roles: roles.to_vec(),
        roles_from: None,
        gates,
        processes,
        services: placed.rows,
        endpoint: fe.summary,
        benchmark: bench.stage.as_ref().map(super::benchmark::summary),
        recipe_schema: model.spelling.as_str().into(),
        files,
        dirs,
        scratch_dir,
        shutdown,
        memory,
        log_dir,
        ignored_sections: ignored,
        warnings,
        notes,
        redacted: false,
        network: NetworkSpec {
            per_gpu_hca: mc.network.per_gpu_hca,
        },
        control,
        periods: Periods::default(),
        canary: super::policy::canary(&mc.canary)?,
    })
}

/// What the plan takes from Mooncake: the master's cleanup flags (its `--client_ttl` sized for
/// the stores that may join at once), each store's registration readiness and `/health`
/// liveness, and the gate on a place to register when the job limits how many register at a
/// time. Returns the notes.
fn wire_mooncake(
    processes: &mut [ProcessSpec],
    master: &order::MasterAt,
    mc: &McsupSection,
    ctx: &NodeContext,
    control: Option<&ControlSpec>,
    gates: &mut Vec<GateSpec>,
) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(m) = processes.iter_mut().find(|p| p.kind == ProcessKind::Master) {
        let mut added = stores::master_cleanup_added(&m.argv);
        if !added.is_empty() {
            let joining = stores::joining_at_once(
                ctx.nodelist.len().max(1),
                control.map_or(0, |c| c.stores_at_once),
            );
            stores::set_added_ttl(&mut m.argv, &mut added, stores::client_ttl(joining));
            notes.push(stores::master_cleanup_note(&added, joining));
        }
    }
    let admin = master
        .service
        .filter(|_| !master.external)
        .and_then(|s| mooncake::remount::master_metrics_port(&s.argv))
        .map(|port| stores::MasterAdmin {
            host: master.host.clone(),
            port,
        });
    let client_port = mc
        .store
        .client_http_port
        .map_or(stores::DEFAULT_CLIENT_HTTP_PORT, |p| p.0);
    notes.extend(stores::wire(processes, admin.as_ref(), client_port));
    if let Some((gate, note)) = stores::wait_for_places(processes, control) {
        gates.push(gate);
        notes.push(note);
    }
    notes
}

/// The lints over this node's planned processes: stop budgets, request migration, ports.
fn process_lints(
    processes: &[ProcessSpec],
    mc: &McsupSection,
    deadline: std::time::Duration,
    ctx: &NodeContext,
    warnings: &mut Vec<String>,
) {
    lints::stop_budgets(processes, deadline, warnings);
    lints::migration_limit(processes, workers_restart(processes, mc), warnings);
    let here = |h: &str| super::spec::host_is_here(h, &ctx.ip, &ctx.name);
    lints::port_clashes(processes, &here, warnings);
}

/// The workers that got their engine's liveness probe from mcsup (srtctl has none), in one note.
fn liveness_note(processes: &[ProcessSpec], mc: &McsupSection) -> Option<String> {
    if mc.engine_liveness.enabled == Some(false) {
        return None;
    }
    let given: Vec<String> = processes
        .iter()
        .filter(|p| p.kind == ProcessKind::Worker && p.placement.is_some())
        .filter_map(|p| {
            let l = p.liveness.as_ref()?;
            Some(format!(
                "{} ({}, every {}, {} failures in a row)",
                p.name,
                l.probe,
                crate::domain::show_secs(l.period),
                l.failure_threshold
            ))
        })
        .collect();
    (!given.is_empty()).then(|| {
        format!(
            "engine liveness (mcsup's; srtctl has none): {}; once ready, a worker that stops answering (or, with requests in flight, stops progressing) is stopped and its restart policy decides; mcsup.engine_liveness.enabled: false turns it off",
            given.join("; ")
        )
    })
}

/// Whether the job's workers restart: this node's, or the recipe's defaults for every worker.
fn workers_restart(processes: &[ProcessSpec], mc: &McsupSection) -> bool {
    processes
        .iter()
        .any(|p| p.kind == ProcessKind::Worker && p.restart.policy != RestartPolicy::Never)
        || mc
            .worker_defaults
            .restart
            .as_ref()
            .and_then(|r| r.policy)
            .is_some_and(|p| p != crate::recipe::RestartPolicyName::Never)
}

/// The benchmark client, last: what the job is for starts once everything else is up.
fn add_client(
    processes: &mut Vec<ProcessSpec>,
    taken: &mut BTreeSet<String>,
    client: Option<ProcessSpec>,
) -> Result<(), PlanError> {
    let Some(client) = client else { return Ok(()) };
    if !taken.insert(client.name.clone()) {
        return Err(err(
            "benchmark",
            format!("process name `{}` is used twice on this node", client.name),
            "rename the worker or service that uses it",
        ));
    }
    processes.push(client);
    Ok(())
}

/// `mcsup` is mcsup's own name in the events, the status and the log lines.
fn not_named_mcsup(processes: &[ProcessSpec]) -> Result<(), PlanError> {
    if processes.iter().any(|p| p.name == "mcsup") {
        return Err(err(
            "mcsup",
            "a worker or service is named `mcsup`: that is mcsup's own name in the events, the status and the log lines".to_string(),
            "rename it",
        ));
    }
    Ok(())
}

/// What each process gets is what the program reading it will take: no placeholder left, and
/// sizes Mooncake reads.
fn values_as_their_readers_read_them(
    recipe: &Recipe,
    processes: &[ProcessSpec],
) -> Result<(), PlanError> {
    no_placeholder_left(recipe, processes)?;
    sizes_as_mooncake_reads_them(processes)
}

/// No process gets a `{name}` placeholder nothing filled (srtctl passes one as written: a sweep
/// parameter in a recipe planned as one job, a typo in a template). Named at the recipe key
/// that holds it, where one does.
fn no_placeholder_left(recipe: &Recipe, processes: &[ProcessSpec]) -> Result<(), PlanError> {
    use crate::recipe::variants::{key_holding, placeholders_in};
    // A template name srtctl (RuntimeContext.format_string, the workers' env templating) or mcsup
    // (plan/placeholders.rs, 2.0 services) fills somewhere is srtctl's business where it stays
    // (srtctl passes `{node}` as written to a frontend's environment); any other is not.
    const TEMPLATE: &[&str] = &[
        "node",
        "node_id",
        "node_ip",
        "job_id",
        "run_name",
        "head_node",
        "head_node_ip",
        "head_ip",
        "infra_node",
        "infra_ip",
        "log_dir",
        "model_path",
        "container_image",
        "gpus_per_node",
        "master_port",
        "metadata_port",
        "scratch_dir",
        "index",
        "role",
    ];
    let unfilled = |s: &str| {
        placeholders_in(s).into_iter().find(|x| {
            let name = &x[1..x.len() - 1];
            !TEMPLATE.contains(&name) && !name.starts_with("worker_") && !name.starts_with("pool_")
        })
    };
    for p in processes {
        let found = p
            .argv
            .iter()
            .find_map(|a| unfilled(a).map(|x| (x, "argument", a.clone())))
            .or_else(|| {
                p.env.iter().find_map(|e| {
                    unfilled(&e.value).map(|x| (x, "variable", format!("{}={}", e.name, e.value)))
                })
            });
        if let Some((x, what, at)) = found {
            let sweep = match recipe.raw.get("sweep") {
                Some(_) => "a sweep parameter: `mcsup render -f FILE -o DIR` or `mcsup submit -f FILE` expand `sweep:` into its jobs, as srtctl does",
                None => "a sweep parameter? add it under `sweep:` and render or submit the file; else write the value",
            };
            return Err(err(
                key_holding(&recipe.raw, &x).unwrap_or_else(|| p.name.clone()),
                format!(
                    "`{x}` would reach {}'s {what} `{at}` as written: nothing fills it",
                    p.name
                ),
                sweep,
            ));
        }
    }
    Ok(())
}

/// Every Mooncake size a process gets (`MOONCAKE_GLOBAL_SEGMENT_SIZE`,
/// `MOONCAKE_LOCAL_BUFFER_SIZE`), as its environment has it once templates are filled, is one
/// Mooncake reads (round 4's D18: `"400gib{}"` and `"{node}gb"` passed as written, the store then
/// failed at its start and its readiness check expected Mooncake's default). Named at the key
/// that set it.
fn sizes_as_mooncake_reads_them(processes: &[ProcessSpec]) -> Result<(), PlanError> {
    for p in processes {
        for e in &p.env {
            if !crate::recipe::SIZE_VARIABLES.contains(&e.name.as_str()) {
                continue;
            }
            if let Err(why) = crate::mooncake::size::parse_mooncake_size(&e.value) {
                return Err(err(
                    format!("{}.{}", e.source, e.name),
                    format!(
                        "{}'s {}={:?} is not a size Mooncake reads: {why}",
                        p.name, e.name, e.value
                    ),
                    "write a number with an optional unit kb/mb/gb/tb (powers of 1024), e.g. \"100gb\" or \"512mb\"; GiB-style units are rejected by Mooncake",
                ));
            }
        }
    }
    Ok(())
}

/// Whether a process names the node's scratch directory (in its argv, preamble or env).
fn uses_scratch(processes: &[ProcessSpec], scratch: &std::path::Path) -> bool {
    let s = scratch.to_string_lossy();
    processes.iter().any(|p| {
        p.argv.iter().any(|a| a.contains(s.as_ref()))
            || p.preamble
                .as_deref()
                .is_some_and(|x| x.contains(s.as_ref()))
            || p.env.iter().any(|v| v.value.contains(s.as_ref()))
    })
}

/// What the command line asks for, checked against the recipe: `mcsup.services` names existing
/// services, and every `--role` is a declared role.
fn check_request(
    recipe: &Recipe,
    model: &JobModel,
    mc: &McsupSection,
    roles: &[Role],
) -> Result<(), PlanError> {
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
    let Some(declared) = &recipe.roles else {
        return Ok(());
    };
    let Some(&role) = roles.iter().find(|r| declared.for_role(**r).is_none()) else {
        return Ok(());
    };
    let names: Vec<&str> = Role::ALL
        .into_iter()
        .filter(|r| declared.for_role(*r).is_some())
        .map(Role::short)
        .collect();
    Err(err(
        "roles",
        format!(
            "the recipe declares no `{}` role (roles: {})",
            role.short(),
            names.join(", ")
        ),
        format!("run this node with --role {}", names.join(" or --role ")),
    ))
}

/// `mcsup.log_dir` (default `mcsup-logs/{job_id}`) with its placeholders, under the working
/// directory when relative. Empty, or with a `{name}` left after the placeholders it takes, is
/// an error (the adversarial re-run's D18: `""` meant the working directory, `{role}` and `{foo}`
/// stayed literal, `{{node}}` became `{vm}`).
fn log_dir(model: &JobModel, mc: &McsupSection, ctx: &NodeContext) -> Result<PathBuf, PlanError> {
    let [rpc, meta, _] = model.master_ports;
    let base = Placeholders::new(ctx, rpc, meta, std::path::Path::new(""));
    let raw = mc
        .log_dir
        .clone()
        .unwrap_or_else(|| "mcsup-logs/{job_id}".into());
    const FIX: &str = "give a directory, with {job_id}, {node}, {node_id}, {infra_node} or {scratch_dir} where it should vary (default mcsup-logs/{job_id})";
    if raw.trim().is_empty() {
        return Err(err("mcsup.log_dir", "is empty", FIX));
    }
    let filled = base.apply(&raw);
    if let Some(left) = crate::recipe::variants::placeholders_in(&filled).first() {
        return Err(err(
            "mcsup.log_dir",
            format!("`{raw}` keeps `{left}` after its placeholders are filled: the log directory is one for every role and process of the node, and takes only the node's and the job's names"),
            FIX,
        ));
    }
    let p = PathBuf::from(filled);
    Ok(if p.is_absolute() { p } else { ctx.cwd.join(p) })
}

/// srtctl's layout and this node's part of it.
fn node_layout(
    recipe: &Recipe,
    s: &NodeScope<'_>,
    opts: &PlanOptions,
    warnings: &mut Vec<String>,
) -> Result<Option<workers::TopoPlan>, PlanError> {
    let (model, mc, ctx) = (s.model, s.mc, s.ctx);
    let Some(mut t) = topo::job_layout(recipe, model, mc, ctx, s.log_dir, warnings)? else {
        return Ok(None);
    };
    t.launch.step_container = opts.step_container.clone();
    topo::place_here(&mut t, mc, s.roles, ctx, warnings)?;
    Ok(Some(t))
}

/// The workers as `per: worker` services see them: name, role and index among its role's.
fn worker_slots(planned: &[ProcessSpec]) -> Vec<WorkerSlot> {
    planned
        .iter()
        .enumerate()
        .map(|(i, w)| WorkerSlot {
            name: w.name.clone(),
            role: w.roles[0],
            index: planned[..i].iter().filter(|x| x.roles == w.roles).count() as u32,
        })
        .collect()
}

/// The job's frontends placed on this node, their names not taken by a worker or a service.
fn frontends_here(
    topo: Option<&workers::TopoPlan>,
    model: &JobModel,
    ctx: &NodeContext,
    worker_procs: &[ProcessSpec],
    taken: &mut BTreeSet<String>,
) -> Result<frontends::FrontendPlan, PlanError> {
    let Some(t) = topo else {
        return Ok(frontends::FrontendPlan::default());
    };
    let local: Vec<String> = worker_procs.iter().map(|p| p.name.clone()).collect();
    let fe = frontends::plan_frontends(t, ctx, &local, &model.environment.0, &|r| {
        model.roles.get(&r).and_then(|m| m.flags.clone())
    })?;
    if let Some(p) = fe.processes.iter().find(|p| !taken.insert(p.name.clone())) {
        return Err(err(
            "frontend",
            format!("process name `{}` is used twice on this node", p.name),
            "rename the worker or service that uses it",
        ));
    }
    Ok(fe)
}

/// How long a drain waits for in-flight requests by default: srt-slurm 2.0's worker shutdown
/// timeout (`worker_shutdown_timeout_seconds`, 30 s).
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(30);

/// `mcsup.shutdown`, checked against Slurm's default KillWait and the processes' stop signals.
fn shutdown_spec(
    mc: &McsupSection,
    processes: &[ProcessSpec],
    topo: Option<&workers::TopoPlan>,
    warnings: &mut Vec<String>,
) -> Result<ShutdownSpec, PlanError> {
    use crate::slurm::{DEFAULT_KILL_WAIT, KILL_MARGIN};
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
        holds_ranks_of: topo.map(ranks_held).unwrap_or_default(),
        drain: mc
            .shutdown
            .drain_seconds
            .map_or(DEFAULT_DRAIN, |s| s.duration()),
    };
    if shutdown.deadline + KILL_MARGIN > DEFAULT_KILL_WAIT {
        warnings.push(format!(
            "mcsup.shutdown.deadline_seconds {} (+{} s to kill and reap) is past Slurm's default KillWait of {} s: unless this cluster's KillWait is longer (the preflight reads it), Slurm SIGKILLs the step in the middle of the teardown; keep the deadline at {} s or less",
            shutdown.deadline.as_secs(),
            KILL_MARGIN.as_secs(),
            DEFAULT_KILL_WAIT.as_secs(),
            (DEFAULT_KILL_WAIT - KILL_MARGIN).as_secs()
        ));
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
    Ok(shutdown)
}

/// The endpoints with ranks on this node that another node's mcsup starts (TRT-LLM).
fn ranks_held(t: &workers::TopoPlan) -> Vec<String> {
    if !t.engine.step_per_endpoint() {
        return Vec::new();
    }
    t.here
        .iter()
        .filter(|p| !p.is_leader())
        .map(|p| {
            format!(
                "{}[{}] (step {}, led by {})",
                p.mode.short(),
                p.index,
                crate::engine::trtllm::step_name(p.mode, p.index),
                t.launch.node_names[p.endpoint_nodes[0]]
            )
        })
        .collect()
}

/// A recipe whose workers mcsup would have to derive and cannot (its engine says why: a TRT-LLM
/// recipe without srtctl's worker counts); a recipe that lists its own (`mcsup.workers`) is
/// fine.
fn underivable(
    recipe: &Recipe,
    model: &JobModel,
    mc: &McsupSection,
) -> Option<crate::engine::Underivable> {
    if mc.workers != WorkersConfig::default() {
        return None;
    }
    let has_layout = matches!(crate::engine::layout::inputs(recipe), Ok(Some(_)));
    model.engine.underivable(recipe, has_layout)
}

/// Such a recipe on a node whose services still run.
fn underivable_warning(model: &JobModel, u: &crate::engine::Underivable) -> String {
    format!(
        "engine {}: {}; this node runs only its services, and the job cannot serve",
        model.engine.name(),
        u.gap
    )
}

/// Why such a recipe's worker node cannot be planned: what srtctl does, and what mcsup lacks
/// to do it for this recipe.
fn underivable_error(model: &JobModel, u: &crate::engine::Underivable) -> PlanError {
    err(
        u.key,
        format!(
            "{}: {}; {}, so nothing would run on this node and no node of this job could serve",
            model.engine.name(),
            u.srtctl,
            u.gap
        ),
        u.fix,
    )
}

/// A node with nothing to run is a mistake unless the recipe says it is intended.
fn check_not_empty(
    recipe: &Recipe,
    model: &JobModel,
    mc: &McsupSection,
    roles: &[Role],
    ctx: &NodeContext,
    processes: &[ProcessSpec],
    topo: Option<&workers::TopoPlan>,
) -> Result<(), PlanError> {
    // A node that holds only ranks of TRT-LLM endpoints led elsewhere runs nothing itself.
    let hosts_ranks = topo.is_some_and(|t| t.engine.step_per_endpoint() && !t.here.is_empty());
    if !processes.is_empty() || mc.allow_empty_node || hosts_ranks {
        return Ok(());
    }
    if let Some(u) = underivable(recipe, model, mc) {
        return Err(underivable_error(model, &u));
    }
    let roles_txt = Role::list(roles);
    Err(err(
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
    ))
}

/// The memory budget; with srtctl's layout known, a role's HiCache ranks on this node are its
/// workers' GPUs here (one rank per GPU), unless the recipe says otherwise.
fn memory_here(
    model: &JobModel,
    mc: &McsupSection,
    roles: &[Role],
    processes: &[ProcessSpec],
) -> MemorySpec {
    let mut m = super::memory::memory_spec(model, mc, roles);
    for l in &mut m.hicache {
        let HiCacheL2::Sized {
            role,
            per_rank_gb,
            ranks,
            bytes,
            ranks_from,
            ..
        } = l
        else {
            continue;
        };
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
            *ranks_from = format!("srtctl's layout: {gpus} GPUs of {role} workers on this node");
        }
    }
    m
}

fn node_summary(ctx: &NodeContext, processes: &[ProcessSpec]) -> NodeSummary {
    NodeSummary {
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
    }
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
}
