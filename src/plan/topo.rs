//! srtctl's worker layout, in two steps: the job's ([`job_layout`]: which worker processes run
//! on which of the job's nodes, the same on every node) and this node's part of it
//! ([`place_here`]: its processes, checked against `--role`). Pure.

use std::path::Path;

use super::error::{err, PlanError};
use super::model::*;
use super::topology;
use super::workers::TopoPlan;
use crate::domain::Role;
use crate::engine::job::JobSettings;
use crate::engine::profiling::{ProfileKind, Profiling};
use crate::engine::EngineInputs;
use crate::node::NodeContext;
use crate::recipe::*;

/// srtctl's layout of the whole job, when the recipe gives worker counts and mcsup derives the
/// workers (roles without `mcsup.workers`); `None` otherwise. `here` is still empty.
pub fn job_layout(
    recipe: &Recipe,
    model: &JobModel,
    mc: &McsupSection,
    ctx: &NodeContext,
    log_dir: &Path,
    warnings: &mut Vec<String>,
) -> Result<Option<TopoPlan>, PlanError> {
    let Some(mut inputs) = topology::inputs(recipe)? else {
        return Ok(None);
    };
    if !Role::ALL
        .iter()
        .any(|r| mc.workers.for_role(*r).is_none() && inputs.size(*r).workers > 0)
    {
        return Ok(None);
    }
    let job = JobSettings::from_recipe(recipe)?;
    let frontend = job.frontend_type;
    let role_flags = |r: Role| model.roles.get(&r).and_then(|m| m.flags.as_ref());
    let Some(engine) = model.engine.settings(&EngineInputs {
        recipe,
        flags: &role_flags,
        frontend,
    })?
    else {
        warnings.push(format!(
            "{}: mcsup derives no {} workers; list them under mcsup.workers",
            inputs.source,
            model.engine.name()
        ));
        return Ok(None);
    };
    if let Some((only, called)) = frontend.kind().planned_by_engine() {
        if only != model.engine.name() {
            return Err(err(
                "frontend.type",
                format!(
                    "{frontend} fronts {called} workers only; the engine is {} (srtctl refuses it too)",
                    model.engine.name()
                ),
                "use frontend.type dynamo (or the engine's own frontend)",
            ));
        }
    }
    let nodes = job.nodes(ctx.nodelist.len())?;
    if nodes.infra != 0 {
        return Err(err(
            "infra.etcd_nats_dedicated_node",
            "with a dedicated benchmark client sharing it, srtctl reserves the job's last node for etcd and NATS; mcsup runs them (and the Mooncake master) on the first node of the list",
            "set benchmark.colocate_with_frontend: false (infra then takes the first node, the client the last)",
        ));
    }
    let worker_nodes = nodes.workers.clone();
    engine.adjust_layout(&mut inputs);
    let endpoints = topology::allocate(&inputs, worker_nodes.len())?;
    let dp_sizes: Vec<(Role, u32)> = Role::ALL.iter().map(|r| (*r, dp_size(model, *r))).collect();
    let all = engine.processes(&endpoints, &|r| dp_size(model, r))?;
    let (model_arg, basename) = job.model_arg();
    let served = [Role::Prefill, Role::Aggregated, Role::Decode]
        .iter()
        .filter_map(|r| model.roles.get(r)?.flags.as_ref())
        .find_map(|f| {
            f.get("served-model-name")
                .or(f.get("served_model_name"))
                .map(crate::engine::python_str)
        })
        .unwrap_or(basename);
    // srtctl v1's `profiling:` (2.0 recipes list it as not read).
    let profiling = if model.spelling == Spelling::V2 {
        None
    } else {
        let disaggregated = all.iter().any(|p| p.mode != Role::Aggregated);
        Profiling::from_recipe(recipe, disaggregated, frontend)?
    };
    if let Some(p) = &profiling {
        let modes: Vec<(&str, &FlagMap)> = model
            .roles
            .values()
            .filter_map(|rm| Some((rm.flags_key.as_str(), rm.flags.as_ref()?)))
            .collect();
        engine.check_profiling(p, &modes)?;
    }
    Ok(Some(TopoPlan {
        launch: crate::engine::LaunchContext {
            job_id: ctx.job_id.clone(),
            // Given by the caller ([`crate::plan::PlanOptions::step_container`]).
            step_container: None,
            dynamo: !frontend.kind().talks_to_engine_servers(),
            model_arg,
            served_model_name: served,
            request_plane: job.request_plane.clone(),
            event_plane: job.event_plane.clone(),
            log_dir: log_dir.display().to_string(),
            node_names: ctx.nodelist[worker_nodes.clone()].to_vec(),
            node_ips: ctx.node_ips[worker_nodes].to_vec(),
            // srtctl's `head_node_ip`: the head node's address (the first worker node, or the
            // dedicated frontend node), not the infra node's.
            head_ip: ctx
                .node_ips
                .get(nodes.head)
                .or(ctx.node_ips.first())
                .cloned()
                .unwrap_or_else(|| ctx.infra_ip.clone()),
            infra_node: ctx.infra_node.clone(),
            gpus_per_node: inputs.gpus_per_node,
            observability: model.observability.clone(),
            profiling,
        },
        here: Vec::new(),
        all,
        head: ctx.nodelist.get(nodes.head).cloned().unwrap_or_default(),
        frontend: crate::engine::frontend::FrontendSettings::from_recipe(recipe)?,
        dp_sizes,
        kv_events: kv_events(recipe),
        ready_timeout: job.ready_timeout(),
        engine,
        job,
        nodes,
        sizes: inputs,
    }))
}

/// vLLM's `data-parallel-size` of a mode's flags (0 when it sets none).
fn dp_size(model: &JobModel, r: Role) -> u32 {
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
}

/// srtctl's kv-events setting: 2.0's `roles.<role>.kv_events` per mode, v1's
/// `backend.kv_events_config`. Passed to the engine as written.
fn kv_events(recipe: &Recipe) -> Option<serde_yaml::Value> {
    if recipe.roles.is_none() {
        return recipe.raw_get(&["backend", "kv_events_config"]).cloned();
    }
    let mut m = serde_yaml::Mapping::new();
    for r in Role::ALL {
        if let Some(v) = recipe.raw_get(&["roles", r.short(), "kv_events"]) {
            m.insert(serde_yaml::Value::from(r.as_str()), v.clone());
        }
    }
    (!m.is_empty()).then_some(serde_yaml::Value::Mapping(m))
}

/// The roles srtctl's layout puts on `node` (none on a dedicated or unused node).
pub fn roles_on(t: &TopoPlan, nodelist: &[String], node: &str) -> Vec<Role> {
    let here = processes_on(t, nodelist, node);
    Role::ALL
        .into_iter()
        .filter(|r| here.iter().any(|p| p.mode == *r))
        .collect()
}

/// How [`roles_on`] reached its answer for `node`, in words for `mcsup plan`: the node's place in
/// the job's node list and the workers srtctl's layout puts there.
pub fn roles_derivation(t: &TopoPlan, nodelist: &[String], node: &str) -> String {
    let Some(i) = nodelist.iter().position(|x| x == node) else {
        return format!("{node} is not in the job's node list: no worker here");
    };
    let at = format!(
        "{node} is node {} of {} in the job's node list",
        i + 1,
        nodelist.len()
    );
    let nodes = &t.nodes;
    if !nodes.workers.contains(&i) {
        let mut what = Vec::new();
        if i == nodes.infra {
            what.push("etcd and NATS (infra.etcd_nats_dedicated_node)");
        }
        if i == nodes.head && t.job.dedicated_frontend_node {
            what.push("the frontend (frontend.dedicated_node)");
        }
        if i == nodes.bench && t.job.dedicated_client_node {
            what.push("the benchmark client (benchmark.client_dedicated_node)");
        }
        return format!("{at}, reserved for {}: no worker here", what.join(", "));
    }
    let here = processes_on(t, nodelist, node);
    if here.is_empty() {
        let used = t.launch.node_names.len();
        return format!(
            "{at}: srtctl's layout places its workers on {used} node(s) from node {}, none here",
            nodes.workers.start + 1
        );
    }
    let workers: Vec<String> = here
        .iter()
        .map(|p| format!("{}[{}] rank {}", p.mode.short(), p.index, p.node_rank))
        .collect();
    format!("{at}: srtctl's layout puts {} here", workers.join(", "))
}

fn processes_on(t: &TopoPlan, nodelist: &[String], node: &str) -> Vec<topology::TopoProcess> {
    let workers = &t.nodes.workers;
    let idx = nodelist
        .iter()
        .position(|x| x == node)
        .filter(|i| workers.contains(i) && *i - workers.start < t.launch.node_names.len())
        .map(|i| i - workers.start);
    t.all
        .iter()
        .filter(|p| Some(p.node) == idx)
        .cloned()
        .collect()
}

/// This node's part of the layout, checked against `--role`: every derived role the layout puts
/// here must be named, and every derived role named must be placed here. With the notes a user
/// needs about what srtctl does for these workers and mcsup does not.
pub fn place_here(
    t: &mut TopoPlan,
    mc: &McsupSection,
    roles: &[Role],
    ctx: &NodeContext,
    warnings: &mut Vec<String>,
) -> Result<(), PlanError> {
    let derived = |r: Role| mc.workers.for_role(r).is_none();
    t.here = processes_on(t, &ctx.nodelist, &ctx.name);
    let placed = roles_on(t, &ctx.nodelist, &ctx.name);
    let list = |rs: &[Role]| rs.iter().map(|r| r.short()).collect::<Vec<_>>().join(",");
    if let Some(r) = placed.iter().find(|r| derived(**r) && !roles.contains(r)) {
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
    if let Some(r) = roles.iter().find(|r| derived(**r) && !placed.contains(r)) {
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
    notes(t, warnings);
    Ok(())
}

/// What srtctl does around these workers that mcsup leaves to the job's step.
fn notes(t: &TopoPlan, warnings: &mut Vec<String>) {
    let job = &t.job;
    if !job.model_path.starts_with("hf:") {
        warnings.push(format!(
            "model.path `{}`: srtctl resolves it (an srtslurm.yaml alias or a path) and mounts it at /model; mcsup passes --model-path /model as srtctl does, so the model must be there",
            job.model_path
        ));
    }
    t.engine.notes(&t.launch, &t.here, warnings);
    if job.dynamo_workers() && !t.here.is_empty() && !t.engine.step_per_endpoint() {
        warnings.push(format!(
            "workers run {} (frontend.type {}): srtctl installs Dynamo into the container before them (dynamo.version/hash/wheel); mcsup runs them inside this step's container, which must already have it",
            t.engine.kind().dynamo_module(),
            job.frontend_type
        ));
    }
    if let Some(script) = &job.setup_script {
        warnings.push(format!(
            "setup_script {script}: srtctl runs it in the container before each worker; mcsup does not — run it in the step before mcsup"
        ));
    }
    if let Some(p) = t.launch.profiling.as_ref().filter(|_| !t.here.is_empty()) {
        warnings.push(format!(
            "profiling.type {}: the workers' captures go to {}/profiles/<mode>; {}",
            p.kind.as_str(),
            t.launch.log_dir,
            if p.kind == ProfileKind::Torch {
                "a capture starts when the benchmark client asks the worker (srtctl's benchmark stage; mcsup runs none)"
            } else {
                "the workers run under `nsys` from their PATH (srtctl's SRTCTL_NSYS_BIN is a setting of srtctl's own process, not read here)"
            }
        ));
    }
}
