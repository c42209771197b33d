//! The benchmark stage exactly as srtctl runs it: for every capture of
//! tests/fixtures/srt-slurm-v1/benchmark (srtctl's own `run_benchmark` over upstream recipes,
//! every benchmark type of its registry at c88ef731 plus `manual`; written by
//! scripts/capture/srtctl_benchmark.py), every node of the job is planned (`--role auto`, nodes
//! `node0..` at `10.0.0.<i+1>`, job 4242, as the captures assume) and compared:
//! - every node's plan lists the stage: its type, the client's node, its command, srtctl's
//!   health wait (host, port, the prefill and decode counts, its interval and its budget);
//! - the client node, and only it, runs one `benchmark` process, terminal, whose argv is srtctl's
//!   command and whose environment is srtctl's exports, plus mcsup's `MCSUP_LOG_DIR` and
//!   nothing else;
//! - when mcsup runs on the host (TRT-LLM: its workers are Slurm steps), the client is srtctl's
//!   srun step itself, argv for argv, but for srtctl's `--output` (mcsup keeps a process's
//!   output in its log);
//! - `manual`: no client anywhere;
//! - the client waits for the public endpoint as srtctl's health wait does: on the frontend
//!   process when it runs on the client's node, else on a gate on that node's endpoint.
//!
//! The mounts srtctl gives the step (its runtime's `container_mounts`) are compared with what
//! `mcsup render` mounts in tests/render_sbatch.rs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use mcsup::node::{self, NodeInputs};
use mcsup::plan::{self, ProbeSpec, ProcessKind};
use mcsup::recipe;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/srt-slurm-v1/benchmark")
}

#[derive(Debug, Deserialize)]
struct Capture {
    benchmark_type: String,
    steps: Vec<Step>,
    health_wait: Health,
    nodes: Nodes,
    runtime: Runtime,
}

#[derive(Debug, Deserialize)]
struct Step {
    node: String,
    command: Vec<String>,
    env: BTreeMap<String, String>,
    env_order: Vec<String>,
    srun_argv: Vec<String>,
    container_mounts: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Health {
    host: String,
    port: u16,
    n_prefill: u32,
    n_decode: u32,
    poll_interval: f64,
    timeout: f64,
}

#[derive(Debug, Deserialize)]
struct Nodes {
    all: Vec<String>,
    ip: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct Runtime {
    container_image: String,
}

fn captures() -> Vec<(String, Capture)> {
    let mut out: Vec<(String, Capture)> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".srtctl.json"))
        .map(|p| {
            let stem = p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .trim_end_matches(".srtctl.json")
                .to_string();
            let c: Capture = serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
                .unwrap_or_else(|e| panic!("{stem}: {e}"));
            (stem, c)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every node's plan of a capture's job. `host`: mcsup runs on the host and its steps run in
/// the capture's container (what `mcsup render` gives a TRT-LLM job).
fn plans(stem: &str, c: &Capture, host: bool) -> Vec<(String, plan::Plan)> {
    let r = recipe::load_file(&dir().join(format!("{stem}.yaml")))
        .unwrap_or_else(|e| panic!("{stem}: {e}"));
    let n = c.nodes.all.len();
    let step_container = host.then(|| mcsup::engine::StepContainer {
        image: c.runtime.container_image.clone(),
        mounts: c.steps[0].container_mounts.join(","),
    });
    c.nodes
        .all
        .iter()
        .map(|name| {
            let inputs = NodeInputs {
                node: Some(name.clone()),
                nodelist: Some(format!("node[0-{}]", n - 1)),
                job_id: Some("4242".into()),
                hostname: "x".into(),
                cwd: "/job".into(),
                ..Default::default()
            };
            let ctx = node::resolve(&inputs, &c.nodes.ip, &|_| None).unwrap();
            let opts = plan::PlanOptions {
                step_container: step_container.clone(),
                ..Default::default()
            };
            let p = plan::plan_for_role(&r, "auto", &ctx, opts)
                .unwrap_or_else(|e| panic!("{stem} {name}: {e}"));
            (name.clone(), p)
        })
        .collect()
}

/// Whether mcsup runs a capture's job from the host (its engine's workers are Slurm steps).
fn from_host(stem: &str) -> bool {
    let r = recipe::load_file(&dir().join(format!("{stem}.yaml"))).unwrap();
    mcsup::engine::of_recipe(&r).unwrap().steps_from_host()
}

/// The capture's srun argv without srtctl's `--output <file>`.
fn without_output(argv: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip = false;
    for a in argv {
        if skip {
            skip = false;
        } else if a == "--output" {
            skip = true;
        } else {
            out.push(a.clone());
        }
    }
    out
}

/// Captures whose job mcsup refuses to plan, with the recipe key its error names (both derived,
/// not upstream recipes): the public frontend on a decode node (mcsup places it on the head
/// node), and etcd/NATS on the job's last node beside a dedicated client (mcsup runs them on
/// the first).
const REFUSED: &[(&str, &str)] = &[
    (
        "dsr1-b200-1p3d-first-decode-orchestrator",
        "frontend.orchestrator_placement",
    ),
    (
        "trtllm-dep32-client-on-infra-node",
        "infra.etcd_nats_dedicated_node",
    ),
];

/// Compare one capture with mcsup's plans; what was compared, in words.
fn check(stem: &str, c: &Capture) -> String {
    if let Some((_, key)) = REFUSED.iter().find(|(s, _)| *s == stem) {
        let r = recipe::load_file(&dir().join(format!("{stem}.yaml"))).unwrap();
        let inputs = NodeInputs {
            node: Some("node0".into()),
            nodelist: Some(format!("node[0-{}]", c.nodes.all.len() - 1)),
            job_id: Some("4242".into()),
            hostname: "x".into(),
            cwd: "/job".into(),
            ..Default::default()
        };
        let ctx = node::resolve(&inputs, &c.nodes.ip, &|_| None).unwrap();
        let e = plan::plan_for_role(&r, "auto", &ctx, plan::PlanOptions::default())
            .expect_err("refused");
        assert_eq!(e.key_path, *key, "{stem}: {e}");
        return format!("{stem}: refused at {key}");
    }
    let host = from_host(stem);
    let plans = plans(stem, c, host);
    let clients: Vec<(&str, &plan::ProcessSpec)> = plans
        .iter()
        .flat_map(|(n, p)| {
            p.processes
                .iter()
                .filter(|x| x.kind == ProcessKind::Benchmark)
                .map(move |x| (n.as_str(), x))
        })
        .collect();
    let Some(step) = c.steps.first() else {
        assert_eq!(
            c.benchmark_type, "manual",
            "{stem}: a capture without a step"
        );
        assert!(clients.is_empty(), "{stem}: manual runs no client");
        for (n, p) in &plans {
            assert_eq!(p.benchmark, None, "{stem} {n}: manual lists no stage");
        }
        return format!("{stem}: manual, no client on {} nodes", plans.len());
    };
    for (n, p) in &plans {
        let b = p
            .benchmark
            .as_ref()
            .unwrap_or_else(|| panic!("{stem} {n}: the plan lists no benchmark"));
        assert_eq!(b.kind, c.benchmark_type, "{stem} {n}: type");
        assert_eq!(b.node, step.node, "{stem} {n}: the client's node");
        assert_eq!(b.command, step.command, "{stem} {n}: command");
        let h = &b.health;
        let w = &c.health_wait;
        assert_eq!(
            (h.host.as_str(), h.port, h.prefill, h.decode),
            (w.host.as_str(), w.port, w.n_prefill, w.n_decode),
            "{stem} {n}: health wait"
        );
        assert_eq!(
            (h.interval_ms, h.timeout_ms),
            (
                (w.poll_interval * 1000.0) as u64,
                (w.timeout * 1000.0) as u64
            ),
            "{stem} {n}: health wait's interval and budget"
        );
    }
    assert_eq!(clients.len(), 1, "{stem}: one client in the job");
    let (node, client) = clients[0];
    assert_eq!(node, step.node, "{stem}: the client runs on srtctl's node");
    let t = client.terminal.as_ref().expect("the client is terminal");
    assert_eq!(t.benchmark.as_deref(), Some(c.benchmark_type.as_str()));
    let names: Vec<&str> = client.env.iter().map(|v| v.name.as_str()).collect();
    if host {
        assert_eq!(
            client.argv,
            without_output(&step.srun_argv),
            "{stem}: srtctl's srun step"
        );
        assert_eq!(
            names,
            ["MCSUP_LOG_DIR"],
            "{stem}: the step exports the rest"
        );
    } else {
        assert_eq!(client.argv, step.command, "{stem}: argv");
        // A process's environment is a set (the plan lists it by name); the order of srtctl's
        // exports counts only in a `bash -c`, compared above.
        let mut want: Vec<&str> = step.env_order.iter().map(String::as_str).collect();
        want.push("MCSUP_LOG_DIR");
        want.sort_unstable();
        let mut names = names;
        names.sort_unstable();
        assert_eq!(names, want, "{stem}: the environment");
        for (k, v) in &step.env {
            assert_eq!(client.env_value(k), Some(v.as_str()), "{stem}: {k}");
        }
    }
    let (_, here) = plans.iter().find(|(n, _)| n == node).unwrap();
    waits_for_the_endpoint(stem, here, client, &c.health_wait);
    format!(
        "{stem}: {} on {node} ({})",
        c.benchmark_type,
        if host {
            "srun step"
        } else {
            "in the container"
        }
    )
}

/// The client starts once the public endpoint lists srtctl's counts: the frontend here, or a
/// gate on the public node's endpoint.
fn waits_for_the_endpoint(stem: &str, p: &plan::Plan, client: &plan::ProcessSpec, w: &Health) {
    let dep = client
        .depends_on
        .first()
        .unwrap_or_else(|| panic!("{stem}: the client waits for nothing"));
    let probes: Vec<&ProbeSpec> = match p.processes.iter().find(|x| x.name == dep.target) {
        Some(fe) => fe.readiness.iter().flat_map(|r| r.probes.iter()).collect(),
        None => p
            .gates
            .iter()
            .filter(|g| g.name == dep.target)
            .flat_map(|g| g.readiness.probes.iter())
            .collect(),
    };
    let servable = probes
        .iter()
        .find_map(|x| match x {
            ProbeSpec::Servable(s) => Some(s),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{stem}: `{}` has no servable probe", dep.target));
    assert_eq!(
        (servable.expected.prefill, servable.expected.decode),
        (w.n_prefill, w.n_decode),
        "{stem}: the counts the client waits for"
    );
    assert_eq!(servable.port, w.port, "{stem}: the port");
}

/// Issue 49, item 1: every capture, every benchmark type of srtctl's registry.
#[test]
fn every_capture_matches_srtctls_benchmark_stage() {
    let all = captures();
    let mut done = Vec::new();
    for (stem, c) in &all {
        done.push(check(stem, c));
    }
    let types: std::collections::BTreeSet<&str> =
        all.iter().map(|(_, c)| c.benchmark_type.as_str()).collect();
    let want = [
        "custom",
        "gpqa",
        "gsm8k",
        "lm-eval",
        "longbenchv2",
        "manual",
        "mmlu",
        "mooncake-router",
        "router",
        "sa-bench",
        "sglang-bench",
        "trace-replay",
    ];
    assert_eq!(types.into_iter().collect::<Vec<_>>(), want);
    assert!(all.len() >= 38, "{} captures", all.len());
    eprintln!("{}", done.join("\n"));
}
