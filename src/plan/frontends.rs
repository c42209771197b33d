//! The job's frontends on this node ([`crate::engine::frontend`]), when srtctl's layout derives
//! the workers: processes of the `frontend` phase, stopped before the workers. The SGLang router
//! starts once the workers it is given are ready (here: a dependency; on other nodes: a gate on
//! each worker's health port); nginx once its frontends accept; a Dynamo frontend, which
//! discovers its workers, once etcd/NATS are (as srtctl starts it). The public endpoint (nginx,
//! or the only frontend) is ready when the job is servable (a [`ProbeSpec::Servable`] probe); a
//! frontend behind nginx when its port accepts. Pure.

use std::time::Duration;

use super::env::EnvBuilder;
use super::error::PlanError;
use super::policy::*;
use super::spec::*;
use super::workers::TopoPlan;
use crate::domain::Role;
use crate::engine::frontend::{
    self, Expected, FrontendJob, FrontendProcess, FrontendRole, FrontendType, Leader,
};
use crate::engine::stop::MetricSum;
use crate::node::NodeContext;
use crate::recipe::FlagMap;

/// What the frontend stage adds to this node's plan.
#[derive(Debug, Default)]
pub struct FrontendPlan {
    pub processes: Vec<ProcessSpec>,
    /// Readiness of what the frontends here wait for on other nodes.
    pub gates: Vec<GateSpec>,
    pub files: Vec<FileSpec>,
    /// The job's endpoint and what makes it servable, on every node (for the plan's listing).
    pub summary: Option<String>,
}

/// The request counters the servable probe reads around its completion, so that it proves the
/// decode side served it: in a disaggregated job whose workers are Dynamo's, every decode
/// process's system port on its node's address (a rank that serves no endpoint of its own does
/// not count against it: `supervisor::probes::decode_moved`). None otherwise: an
/// aggregated job, or engine servers behind their own router (the completion alone).
pub fn decode_served(t: &TopoPlan, kind: FrontendType) -> Vec<MetricSum> {
    let disaggregated = t.all.iter().any(|p| p.mode == Role::Prefill);
    if !disaggregated || !kind.kind().dynamo_workers() {
        return Vec::new();
    }
    t.all
        .iter()
        .filter(|p| p.mode == Role::Decode)
        .map(|p| MetricSum::served_by_dynamo_worker(&t.launch.node_ips[p.node], p.sys_port))
        .collect()
}

/// srtctl's `_get_health_expectations`: what the frontend must list. A Dynamo frontend in front
/// of vLLM data parallelism lists one `generate` instance per DP rank (`per_gpu`, or
/// `data-parallel-size` per logical worker), or per node-local process (`per_node`) unless a
/// rank spans nodes; everything else counts logical workers, aggregated ones as decode.
pub fn expected(t: &TopoPlan, kind: FrontendType) -> Expected {
    let logical = |r: Role| {
        t.all
            .iter()
            .filter(|p| p.mode == r)
            .map(|p| p.index)
            .collect::<std::collections::BTreeSet<u32>>()
            .len() as u32
    };
    let dp_size = |r: Role| {
        t.dp_sizes
            .iter()
            .find(|(m, _)| *m == r)
            .map_or(0, |(_, d)| *d)
    };
    let count = |role: Role| -> u32 {
        let c = crate::engine::HealthCount {
            role,
            logical: logical(role),
            all: &t.all,
            frontend: kind,
        };
        t.engine.health_count(&c, &dp_size)
    };
    if logical(Role::Aggregated) > 0 {
        Expected {
            prefill: 0,
            decode: count(Role::Aggregated),
        }
    } else {
        Expected {
            prefill: count(Role::Prefill),
            decode: count(Role::Decode),
        }
    }
}

/// This node's share of the frontend stage.
pub fn plan_frontends(
    t: &TopoPlan,
    ctx: &NodeContext,
    local_workers: &[String],
    environment: &[(String, String)],
    role_flags: &dyn Fn(Role) -> Option<FlagMap>,
) -> Result<FrontendPlan, PlanError> {
    if let Some(o) = t.engine.orchestrator(&t.launch, &t.all, &t.head)? {
        return Ok(orchestrator_plan(t, ctx, local_workers, o));
    }
    let Some(settings) = &t.frontend else {
        return Ok(FrontendPlan::default());
    };
    let node_ips: Vec<(String, String)> = ctx
        .nodelist
        .iter()
        .cloned()
        .zip(ctx.node_ips.iter().cloned())
        .collect();
    let grpc = |r: Role| {
        role_flags(r).is_some_and(|f| {
            f.0.iter()
                .any(|(k, v)| k == "grpc-mode" && v.as_bool() == Some(true))
        })
    };
    let leaders = t
        .all
        .iter()
        .filter(|p| p.is_leader())
        .map(|p| Leader {
            mode: p.mode,
            ip: t.launch.node_ips[p.node].clone(),
            http_port: p.http_port,
            bootstrap_port: p.bootstrap_port,
            grpc: grpc(p.mode),
        })
        .collect();
    let layout = frontend::layout(settings, &t.launch.node_names, &t.head);
    let job = FrontendJob {
        infra_node: &t.launch.infra_node,
        request_plane: &t.launch.request_plane,
        event_plane: t.launch.event_plane.as_deref(),
        environment: environment.to_vec(),
        ips: &node_ips,
        leaders,
        disaggregated: t.all.iter().any(|p| p.mode != Role::Aggregated),
        log_dir: &t.launch.log_dir,
        observability: &t.launch.observability,
    };
    let stage = frontend::stage(settings, layout, &job)?;
    let expected = expected(t, settings.kind);
    let public = stage
        .processes
        .iter()
        .find(|p| p.public)
        .map(|p| (p.node.clone(), p.port));
    let mut out = FrontendPlan {
        summary: public.as_ref().map(|(node, port)| {
            format!(
                "{} frontend; endpoint http://{}:{port} on {node}, servable when it lists {} prefill + {} decode and a completion answers",
                settings.kind.as_str(),
                job.ip_of(node),
                expected.prefill,
                expected.decode
            )
        }),
        ..FrontendPlan::default()
    };
    let worker_gates = remote_worker_gates(t, ctx);
    for fp in stage.processes.iter().filter(|p| p.node == ctx.name) {
        let mut waits: Vec<String> = Vec::new();
        match fp.role {
            // Dynamo's frontend finds the workers itself (etcd/NATS discovery), as they
            // register: it starts with them, as srtctl starts it, and the servable probe is what
            // waits for every worker. Started after them, it would add its own start-up (about
            // 2 s of Python imports, measured) to the time to servable.
            FrontendRole::Frontend if settings.kind.kind().discovers_workers() => {}
            // The router is given its workers' URLs and checks them as it starts.
            FrontendRole::Frontend => {
                waits.extend(local_workers.iter().cloned());
                for g in &worker_gates {
                    waits.push(g.name.clone());
                    if !out.gates.iter().any(|x| x.name == g.name) {
                        out.gates.push(g.clone());
                    }
                }
            }
            FrontendRole::Nginx => {
                nginx_waits(t, ctx, &stage, &job, &mut waits, &mut out);
            }
        }
        out.processes
            .push(frontend_process(t, ctx, settings, fp, expected, &waits));
    }
    Ok(out)
}

/// A disaggregated `trtllm_serve` job's orchestrator, on the head node: started once every
/// worker leader answers `/health` (here: a dependency; elsewhere: a gate), as srtctl waits for
/// each before it writes `ser.yaml`; ready when its own `/health` answers.
fn orchestrator_plan(
    t: &TopoPlan,
    ctx: &NodeContext,
    local_workers: &[String],
    o: crate::engine::trtllm::Orchestrator,
) -> FrontendPlan {
    let leaders = |m: Role| {
        t.all
            .iter()
            .filter(|p| p.mode == m && p.is_leader())
            .count()
    };
    let head_ip = ctx
        .nodelist
        .iter()
        .position(|n| *n == t.head)
        .and_then(|i| ctx.node_ips.get(i).cloned())
        .unwrap_or_else(|| t.head.clone());
    let mut out = FrontendPlan {
        summary: Some(format!(
            "trtllm_serve frontend (trtllm-serve disaggregated); endpoint http://{head_ip}:{} on {}, ready when its /health answers, started once the {} prefill and {} decode workers answer theirs",
            o.port,
            t.head,
            leaders(Role::Prefill),
            leaders(Role::Decode)
        )),
        ..FrontendPlan::default()
    };
    if ctx.name != t.head {
        return out;
    }
    let mut waits: Vec<String> = local_workers.to_vec();
    for g in remote_worker_gates(t, ctx) {
        waits.push(g.name.clone());
        out.gates.push(g);
    }
    let mut env = EnvBuilder::new();
    for (k, v) in &o.env {
        env.set(k, v.clone(), "frontend.env");
    }
    let (stop, restart) = policy_defaults(ProcessKind::Frontend);
    out.processes.push(ProcessSpec {
        name: "trtllm_serve_orchestrator".into(),
        kind: ProcessKind::Frontend,
        phase: Phase::Frontend,
        service: None,
        placement: None,
        listens: Vec::new(),
        roles: Vec::new(),
        argv: o.argv,
        preamble: None,
        env: env.build(),
        cwd: None,
        depends_on: waits.iter().flat_map(|w| healthy(Some(w))).collect(),
        readiness: Some(readiness(
            vec![ProbeSpec::health("127.0.0.1", o.port)],
            t.ready_timeout,
        )),
        liveness: None,
        restart,
        stop,
        critical: true,
        fatal_log_patterns: Vec::new(),
        slurm_step: Some(SlurmStep { name: o.step }),
        terminal: None,
    });
    out.files.push(FileSpec {
        path: o.ser_path.into(),
        contents: o.ser,
        purpose: "trtllm-serve disaggregated's config (srtctl's ser.yaml): the prefill (context) and decode (generation) workers' URLs and the public port".into(),
    });
    out
}

/// The workers on other nodes, each by its health port (a follower rank serves nothing).
fn remote_worker_gates(t: &TopoPlan, ctx: &NodeContext) -> Vec<GateSpec> {
    t.all
        .iter()
        .filter(|p| t.launch.node_names[p.node] != ctx.name)
        .filter_map(|p| {
            let w = crate::engine::launch(&*t.engine, &t.launch, p, None, None);
            let port = w.health_port?;
            let node = &t.launch.node_names[p.node];
            Some(remote_gate(
                &format!("{}@{node}", w.name),
                vec![ProbeSpec::health(&t.launch.node_ips[p.node], port)],
                t.ready_timeout,
            ))
        })
        .collect()
}

/// nginx waits for the job's frontends (here, or by their port elsewhere) and writes its
/// config.
fn nginx_waits(
    t: &TopoPlan,
    ctx: &NodeContext,
    stage: &frontend::FrontendStage,
    job: &FrontendJob,
    waits: &mut Vec<String>,
    out: &mut FrontendPlan,
) {
    for other in stage
        .processes
        .iter()
        .filter(|p| p.role == FrontendRole::Frontend)
    {
        if other.node == ctx.name {
            waits.push(other.name.clone());
            continue;
        }
        let g = remote_gate(
            &format!("{}@{}", other.name, other.node),
            vec![tcp(&job.ip_of(&other.node), other.port)],
            t.ready_timeout,
        );
        waits.push(g.name.clone());
        out.gates.push(g);
    }
    if let Some((path, text)) = &stage.nginx_conf {
        out.files.push(FileSpec {
            path: path.into(),
            contents: text.clone(),
            purpose: "nginx in front of the job's frontends (srtctl's nginx.conf)".into(),
        });
    }
}

/// One frontend process: its env, and its readiness (the public one: the servable probe).
fn frontend_process(
    t: &TopoPlan,
    ctx: &NodeContext,
    settings: &frontend::FrontendSettings,
    fp: &FrontendProcess,
    expected: Expected,
    waits: &[String],
) -> ProcessSpec {
    let mut env = EnvBuilder::new();
    for (k, v, source) in &fp.env {
        env.set(k, v.clone(), source);
    }
    let probe = if fp.public {
        ProbeSpec::Servable(ServableProbe {
            host: "127.0.0.1".into(),
            port: fp.port,
            frontend: settings.kind,
            expected,
            model: t.launch.served_model_name.clone(),
            url: format!("http://{}:{}", ctx.ip, fp.port),
            decode_served: decode_served(t, settings.kind),
        })
    } else {
        tcp("127.0.0.1", fp.port)
    };
    let (mut stop, restart) = policy_defaults(ProcessKind::Frontend);
    if fp.role == FrontendRole::Frontend {
        stop.inflight = settings.kind.kind().inflight_gauge(fp.port);
    }
    ProcessSpec {
        name: fp.name.clone(),
        kind: ProcessKind::Frontend,
        phase: Phase::Frontend,
        service: None,
        placement: None,
        listens: Vec::new(),
        roles: Vec::new(),
        argv: fp.argv.clone(),
        preamble: fp.preamble.clone(),
        env: env.build(),
        cwd: None,
        depends_on: waits.iter().flat_map(|w| healthy(Some(w))).collect(),
        readiness: Some(if fp.public {
            // Each attempt is an HTTP read (and, once every worker is listed, a one-token
            // completion): often enough to see the moment within a fraction of a second.
            ReadinessSpec {
                interval: Duration::from_millis(50),
                max_interval: Duration::from_millis(500),
                attempt_timeout: Duration::from_secs(10),
                ..readiness(vec![probe], t.ready_timeout)
            }
        } else {
            readiness(vec![probe], t.ready_timeout)
        }),
        liveness: None,
        restart,
        stop,
        critical: true,
        fatal_log_patterns: Vec::new(),
        slurm_step: None,
        terminal: None,
    }
}
