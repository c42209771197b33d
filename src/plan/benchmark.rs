//! The job's benchmark on this node ([`crate::engine::benchmark`]): srtctl's client, run on the
//! client node once the job is servable (the public frontend here: a dependency; elsewhere: a
//! gate on its servable endpoint), as a terminal process: when it exits, the job ends with its
//! exit status, after the result gate (`supervisor::watch::benchmark`). `manual` plans nothing:
//! the job serves until it is stopped. Pure.

use std::time::Duration;

use super::env::EnvBuilder;
use super::error::{err, PlanError};
use super::frontends::{expected, FrontendPlan};
use super::model::JobModel;
use super::policy::*;
use super::spec::*;
use super::workers::TopoPlan;
use crate::domain::Role;
use crate::engine::benchmark::{
    self, BenchContext, BenchmarkSettings, BenchmarkStage, HealthWait, ProfilingWindows,
};
use crate::engine::frontend::PUBLIC_PORT;
use crate::node::NodeContext;
use crate::recipe::Recipe;

/// srtctl's wait for a stopped client before it is killed (`_BENCHMARK_TERMINATE_TIMEOUT`).
const CLIENT_GRACE: Duration = Duration::from_secs(15);

/// What the benchmark adds to this node's plan.
#[derive(Debug, Default)]
pub struct BenchmarkPlan {
    /// The client, on its node.
    pub process: Option<ProcessSpec>,
    /// The public endpoint on another node, servable (what the client waits for).
    pub gate: Option<GateSpec>,
    /// The stage as srtctl runs it (every node: the plan's listing).
    pub stage: Option<BenchmarkStage>,
}

/// srtctl 2.0 refuses a `terminal: true` service beside a benchmark other than `manual`: what
/// ends the job must be one thing.
pub fn check_terminal_services(recipe: &Recipe, model: &JobModel) -> Result<(), PlanError> {
    let Some(svc) = model.services.iter().find(|s| s.enabled && s.terminal) else {
        return Ok(());
    };
    let b = BenchmarkSettings::from_recipe(recipe)?;
    if b.kind == "manual" {
        return Ok(());
    }
    Err(err(
        format!("{}.terminal", svc.key),
        format!(
            "{}.terminal is set, and benchmark.type is `{}`: a job ends either when its terminal services end or when its benchmark does, not both",
            svc.label(),
            b.kind
        ),
        "set `benchmark.type: manual` (the terminal services end the job), or remove `terminal:`",
    ))
}

/// The benchmark's share of this node's plan; without a layout, a warning when the recipe has a
/// benchmark to run.
pub fn here(
    recipe: &Recipe,
    topo: Option<&TopoPlan>,
    ctx: &NodeContext,
    model: &JobModel,
    fe: &FrontendPlan,
    warnings: &mut Vec<String>,
) -> Result<BenchmarkPlan, PlanError> {
    match topo {
        Some(t) => plan_benchmark(recipe, t, ctx, &model.environment.0, fe),
        None => {
            warnings.extend(unplaced(recipe)?);
            Ok(BenchmarkPlan::default())
        }
    }
}

/// A benchmark that cannot be placed (the recipe has no srtctl layout: workers by hand): said,
/// not silently dropped.
pub fn unplaced(recipe: &Recipe) -> Result<Option<String>, PlanError> {
    let b = BenchmarkSettings::from_recipe(recipe)?;
    Ok((b.kind != benchmark::MANUAL).then(|| {
        format!(
            "benchmark.type `{}` is not run: srtctl places its client by the job's layout (resources: with worker counts), which this recipe does not give; the job serves until it is stopped",
            b.kind
        )
    }))
}

/// This node's share of the benchmark stage.
pub fn plan_benchmark(
    recipe: &Recipe,
    t: &TopoPlan,
    ctx: &NodeContext,
    environment: &[(String, String)],
    fe: &FrontendPlan,
) -> Result<BenchmarkPlan, PlanError> {
    let b = BenchmarkSettings::from_recipe(recipe)?;
    let c = context(recipe, t, ctx, environment)?;
    let hc = health(t, &c);
    let Some(stage) = benchmark::stage(&b, &c, hc)? else {
        return Ok(BenchmarkPlan::default());
    };
    let mut out = BenchmarkPlan {
        stage: Some(stage.clone()),
        ..BenchmarkPlan::default()
    };
    if stage.node != ctx.name {
        return Ok(out);
    }
    let public_here = fe
        .processes
        .iter()
        .find(|p| p.servable_probe().is_some())
        .map(|p| p.name.clone());
    let wait = match public_here {
        Some(name) => name,
        None => {
            let g = servable_gate(t, &c, &stage);
            let name = g.name.clone();
            out.gate = Some(g);
            name
        }
    };
    let argv = match &t.launch.step_container {
        None => stage.command.clone(),
        Some(container) => srun_step(t, &stage, container, recipe)?,
    };
    out.process = Some(client(t, &stage, argv, b.max_failed_requests, &wait));
    Ok(out)
}

/// When mcsup runs on the host (its workers are Slurm steps: TRT-LLM), the client is srtctl's
/// step: `srun --overlap` on its node (its output is the process's log, not srtctl's
/// `--output benchmark.out`), in the job's (or
/// `benchmark.container_image`'s) container, the recipe's `srun_options`, and `bash -c` with
/// the exports before the command.
fn srun_step(
    t: &TopoPlan,
    s: &BenchmarkStage,
    container: &crate::engine::StepContainer,
    recipe: &Recipe,
) -> Result<Vec<String>, PlanError> {
    let mut argv: Vec<String> = vec!["srun".into()];
    if let Some(job) = &t.launch.job_id {
        argv.extend(["--jobid".into(), job.clone()]);
    }
    argv.extend(
        [
            "--overlap",
            "--nodes",
            "1",
            "--ntasks",
            "1",
            "--nodelist",
            &s.node,
        ]
        .map(String::from),
    );
    let container = crate::engine::StepContainer {
        image: s.image.clone().unwrap_or_else(|| container.image.clone()),
        mounts: container.mounts.clone(),
    };
    argv.extend(container.srun_args());
    argv.extend(srun_options(recipe)?);
    let mut body: Vec<String> = s
        .env
        .iter()
        .map(|(k, v)| format!("export {k}={}", crate::engine::flags::shlex_quote(v)))
        .collect();
    body.push(crate::engine::flags::shlex_join(&s.command));
    argv.extend(["bash".to_string(), "-c".into(), body.join(" && ")]);
    Ok(argv)
}

/// The recipe's `srun_options` as srtctl passes them (`start_srun_process`): `--key=value`, or
/// `--key` for a value Python finds false (null, empty, `false`, 0).
fn srun_options(recipe: &Recipe) -> Result<Vec<String>, PlanError> {
    match recipe.raw_get(&["srun_options"]) {
        None => Ok(Vec::new()),
        Some(serde_yaml::Value::Mapping(m)) => Ok(m
            .iter()
            .map(|(k, v)| {
                let k = crate::engine::python_str(k);
                use serde_yaml::Value as V;
                let falsy = match v {
                    V::Null => true,
                    V::Bool(b) => !b,
                    V::String(x) => x.is_empty(),
                    V::Number(n) => n.as_f64() == Some(0.0),
                    V::Sequence(s) => s.is_empty(),
                    V::Mapping(m) => m.is_empty(),
                    V::Tagged(_) => false,
                };
                if falsy {
                    format!("--{k}")
                } else {
                    format!("--{k}={}", crate::engine::python_str(v))
                }
            })
            .collect()),
        Some(_) => Err(super::error::err(
            "srun_options",
            "is not a mapping",
            "write srun_options: {key: value}",
        )),
    }
}

/// The client process: srtctl's command and exports, terminal, never restarted.
fn client(
    t: &TopoPlan,
    s: &BenchmarkStage,
    argv: Vec<String>,
    max_failed: u64,
    wait: &str,
) -> ProcessSpec {
    let mut env = EnvBuilder::new();
    // A Slurm step exports them itself, in its `bash -c` (srtctl's step, exactly).
    if t.launch.step_container.is_none() {
        for (k, v) in &s.env {
            env.set(k, v.clone(), "srtctl benchmark stage");
        }
    }
    // mcsup's: where the job's files are outside a container (inside one, /logs is the same).
    env.set(
        "MCSUP_LOG_DIR",
        t.launch.log_dir.clone(),
        "mcsup: the job's log directory",
    );
    let (stop, mut restart) = policy_defaults(ProcessKind::Benchmark);
    restart.policy = RestartPolicy::Never;
    ProcessSpec {
        name: "benchmark".into(),
        kind: ProcessKind::Benchmark,
        phase: Phase::AfterFrontend,
        service: None,
        placement: None,
        listens: Vec::new(),
        roles: Vec::new(),
        argv,
        preamble: None,
        env: env.build(),
        cwd: None,
        depends_on: healthy(Some(wait)),
        readiness: None,
        liveness: None,
        restart,
        stop: StopSpec {
            grace: CLIENT_GRACE,
            ..stop
        },
        critical: true,
        fatal_log_patterns: Vec::new(),
        slurm_step: None,
        terminal: Some(TerminalSpec {
            benchmark: Some(s.kind.to_string()),
            max_failed_requests: max_failed,
        }),
    }
}

/// The public endpoint on another node, servable as srtctl's health wait counts it.
fn servable_gate(t: &TopoPlan, c: &BenchContext<'_>, s: &BenchmarkStage) -> GateSpec {
    let probe = ProbeSpec::Servable(ServableProbe {
        host: c.public_ip.clone(),
        port: PUBLIC_PORT,
        frontend: c.frontend,
        expected: crate::engine::frontend::Expected {
            prefill: s.health.prefill,
            decode: s.health.decode,
        },
        model: t.launch.served_model_name.clone(),
        url: format!("http://{}:{PUBLIC_PORT}", c.public_ip),
        decode_served: super::frontends::decode_served(t, c.frontend),
    });
    remote_gate(
        &format!("servable@{}", c.public_node),
        vec![probe],
        Duration::from_secs_f64(s.health.timeout_s),
    )
}

/// srtctl's `wait_for_model`: the public node, its port and the counts the frontend lists.
fn health(t: &TopoPlan, c: &BenchContext<'_>) -> HealthWait {
    let e = expected(t, c.frontend);
    HealthWait {
        host: c.public_node.clone(),
        port: PUBLIC_PORT,
        prefill: e.prefill,
        decode: e.decode,
        interval_s: t.job.health_interval_seconds as f64,
        timeout_s: t.job.ready_timeout().as_secs_f64(),
    }
}

/// What srtctl's stage reads of the job (its config and `RuntimeContext`).
fn context<'a>(
    recipe: &Recipe,
    t: &'a TopoPlan,
    ctx: &NodeContext,
    environment: &[(String, String)],
) -> Result<BenchContext<'a>, PlanError> {
    let raw = |path: &[&str]| recipe.raw_get(path);
    let frontend = t.job.frontend_type;
    let frontend_written = raw(&["frontend", "type"])
        .and_then(|v| v.as_str())
        .unwrap_or(frontend.as_str())
        .to_string();
    let (model_path, hf_model) = match t.job.model_path.strip_prefix("hf:") {
        Some(id) => (id.to_string(), true),
        None => (t.job.model_path.clone(), false),
    };
    let role_set = |role: Role| {
        let short = role.short();
        match recipe.roles {
            Some(_) => raw(&["roles", short]).is_some(),
            None => raw(&["resources", &format!("{short}_nodes")]).is_some(),
        }
    };
    let agg_nodes = match recipe.roles {
        Some(_) => raw(&["roles", "agg", "nodes"]),
        None => raw(&["resources", "agg_nodes"]),
    }
    .and_then(|v| v.as_u64())
    .filter(|n| *n > 0)
    .map_or(1, |n| n as u32);
    let node_ip = |name: &str| {
        ctx.nodelist
            .iter()
            .position(|n| n == name)
            .and_then(|i| ctx.node_ips.get(i).cloned())
            .unwrap_or_else(|| name.to_string())
    };
    let leader_node = |p: &crate::engine::layout::TopoProcess| t.launch.node_names[p.node].clone();
    let decode_leaders: Vec<String> = decode_leader_nodes(t);
    let bench = match benchmark_placement(recipe) {
        Placement::Head => ctx
            .nodelist
            .get(t.nodes.bench)
            .cloned()
            .unwrap_or_else(|| t.head.clone()),
        Placement::FirstDecode => first_or(&decode_leaders, "first_decode")?,
        Placement::LastDecode => last_or(&decode_leaders, "last_decode")?,
    };
    let agg_leaders: Vec<&crate::engine::layout::TopoProcess> = t
        .all
        .iter()
        .filter(|p| p.mode == Role::Aggregated && p.is_leader())
        .collect();
    let public_node = match (frontend.kind().worker_serves(), agg_leaders.as_slice()) {
        (true, [one]) => leader_node(one),
        _ => t.head.clone(),
    };
    let public_ip = node_ip(&public_node);
    let kvbm_port = ["prefill_environment", "aggregated_environment"]
        .iter()
        .find_map(|k| raw(&["backend", k, "DYN_KVBM_METRICS_PORT"]))
        .map(crate::engine::python_str);
    let telemetry = raw(&["telemetry", "enabled"])
        .and_then(|v| v.as_bool())
        .filter(|on| *on)
        .map(|_| {
            raw(&["telemetry", "storage_subdir"])
                .and_then(|v| v.as_str())
                .unwrap_or("power")
                .to_string()
        });
    Ok(BenchContext {
        engine: t.engine.kind(),
        frontend_written,
        frontend,
        model_path,
        hf_model,
        served_model_name: t.launch.served_model_name.clone(),
        sizes: &t.sizes,
        disaggregated: role_set(Role::Prefill) || role_set(Role::Decode),
        agg_nodes,
        processes: &t.all,
        node_names: &t.launch.node_names,
        node_ips: &t.launch.node_ips,
        head: t.head.clone(),
        bench,
        public_node,
        public_ip,
        environment: environment.to_vec(),
        profiling: t.launch.profiling.as_ref().map(|p| ProfilingWindows {
            kind: p.kind.as_str().to_string(),
            steps: p
                .phases
                .iter()
                .map(|(role, s)| (role.short(), s.start, s.stop))
                .collect(),
        }),
        telemetry,
        kvbm_port,
    })
}

/// `benchmark.client_placement`.
enum Placement {
    Head,
    FirstDecode,
    LastDecode,
}

fn benchmark_placement(recipe: &Recipe) -> Placement {
    match recipe
        .raw_get(&["benchmark", "client_placement"])
        .and_then(|v| v.as_str())
    {
        Some("first_decode") => Placement::FirstDecode,
        Some("last_decode") => Placement::LastDecode,
        _ => Placement::Head,
    }
}

/// srtctl's `ordered_decode_leader_nodes`: each decode leader's node, by endpoint index.
fn decode_leader_nodes(t: &TopoPlan) -> Vec<String> {
    let mut leaders: Vec<&crate::engine::layout::TopoProcess> = t
        .all
        .iter()
        .filter(|p| p.mode == Role::Decode && p.is_leader())
        .collect();
    leaders.sort_by_key(|p| p.index);
    leaders
        .into_iter()
        .map(|p| t.launch.node_names[p.node].clone())
        .collect()
}

fn first_or(nodes: &[String], placement: &str) -> Result<String, PlanError> {
    nodes.first().cloned().ok_or_else(|| no_decode(placement))
}

fn last_or(nodes: &[String], placement: &str) -> Result<String, PlanError> {
    nodes.last().cloned().ok_or_else(|| no_decode(placement))
}

fn no_decode(placement: &str) -> PlanError {
    super::error::err(
        "benchmark.client_placement",
        format!("benchmark.client_placement={placement:?} but no decode workers were found"),
        "use client_placement: head, or give the job decode workers",
    )
}

/// The stage in words for the plan: where the client runs, after what, and what it runs.
pub fn summary(s: &BenchmarkStage) -> BenchmarkSummary {
    let ms = |secs: f64| (secs * 1000.0).round() as u64;
    BenchmarkSummary {
        kind: s.kind.to_string(),
        title: s.title.to_string(),
        node: s.node.clone(),
        command: s.command.clone(),
        health: BenchmarkHealth {
            host: s.health.host.clone(),
            port: s.health.port,
            prefill: s.health.prefill,
            decode: s.health.decode,
            interval_ms: ms(s.health.interval_s),
            timeout_ms: ms(s.health.timeout_s),
        },
    }
}
