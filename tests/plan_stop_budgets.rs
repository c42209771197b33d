//! Stop budgets in the plan: each worker's engine budget and where it comes from, and the rule
//! table of docs/supervision.md ("Stop budgets") applied to recipes that do not add up.

use crate::node_plan;

use std::time::Duration;

use mcsup::plan::{Plan, ProcessKind, Role};
use node_plan::plan_on;

fn plan(yaml: &str) -> Plan {
    plan_on(yaml, "n1", &[Role::Aggregated]).unwrap_or_else(|e| panic!("{e}"))
}

fn worker(p: &Plan) -> &mcsup::plan::ProcessSpec {
    p.processes
        .iter()
        .find(|x| x.kind == ProcessKind::Worker)
        .unwrap()
}

fn budget_warnings(p: &Plan) -> Vec<&String> {
    p.warnings
        .iter()
        .filter(|w| w.contains("stop grace") || w.contains("may take"))
        .collect()
}

const VLLM: &str = "name: v\nmodel: {path: /m}\nbackend:\n  type: vllm\n  vllm_config:\n    agg:\n      port: 8001\n";

#[test]
fn vllm_without_a_shutdown_timeout_aborts_and_needs_no_grace() {
    let p = plan(VLLM);
    let b = worker(&p).stop.budget.as_ref().unwrap();
    assert_eq!((b.engine.as_str(), b.total), ("vLLM", Duration::ZERO));
    assert!(b.unbounded.as_deref().unwrap().contains("aborts in-flight"));
    assert!(budget_warnings(&p).is_empty(), "{:?}", p.warnings);
}

#[test]
fn a_vllm_drain_longer_than_the_grace_is_warned_with_the_numbers() {
    let p = plan(&format!("{VLLM}      shutdown-timeout: 30\n"));
    let w = budget_warnings(&p);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        w[0].as_str(),
        "vllm-aggregated: vLLM may take 30 s to stop (30 s: vLLM --shutdown-timeout 30), but the stop grace is 10 s (it needs the budget + 5 s margin, 35 s): mcsup would SIGKILL it while it stops; lower --shutdown-timeout, or raise the stop grace to 35 s or more (mcsup.worker_defaults.stop.grace_seconds, or the worker's stop.grace_seconds) and mcsup.shutdown.deadline_seconds (now 25 s) with it"
    );
}

#[test]
fn a_grace_past_the_deadline_is_warned_and_a_fitting_one_is_quiet() {
    let yaml = format!(
        "{VLLM}      shutdown-timeout: 30\nmcsup:\n  worker_defaults:\n    stop:\n      grace_seconds: 35\n"
    );
    let p = plan(&yaml);
    let w = budget_warnings(&p);
    assert_eq!(
        w.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        ["vllm-aggregated: stop grace 35 s is longer than the teardown deadline 25 s: whatever still runs at the deadline is SIGKILLed; lower the grace or raise mcsup.shutdown.deadline_seconds"]
    );
    let p = plan(&format!("{yaml}  shutdown:\n    deadline_seconds: 40\n"));
    assert!(budget_warnings(&p).is_empty(), "{:?}", p.warnings);
    // The deadline itself is then past Slurm's default KillWait: that warning stays.
    assert!(
        p.warnings.iter().any(|w| w.contains("KillWait")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn dynamo_workers_read_the_total_budget_and_its_legacy_name() {
    let base = "name: d\nmodel: {path: /m}\nmcsup:\n  workers:\n    agg:\n      - name: w\n        command: [python3, -m, dynamo.vllm]\n        env:\n";
    let p = plan(&format!(
        "{base}          DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT: \"8\"\n"
    ));
    let b = worker(&p).stop.budget.as_ref().unwrap();
    assert_eq!(b.total, Duration::from_secs(8));
    assert_eq!(
        b.parts,
        ["8 s: Dynamo's DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT=8"]
    );
    let w = budget_warnings(&p);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("lower DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT"),
        "{}",
        w[0]
    );
    // A hand-written worker gets no stop-profile variables of its own.
    let p = plan(&format!(
        "{base}          DYN_WORKER_SHUTDOWN_TOTAL_TIMEOUT_SECS: \"5\"\n          DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT: \"100\"\n"
    ));
    assert_eq!(
        worker(&p).stop.budget.as_ref().unwrap().total,
        Duration::from_secs(5)
    );
    assert!(budget_warnings(&p).is_empty(), "{:?}", p.warnings);
}

#[test]
fn sglang_workers_get_srtctls_switches_unless_the_recipe_sets_them() {
    let sgl = "name: s\nmodel: {path: /m}\nbackend:\n  type: sglang\n  sglang_config:\n    agg:\n      tp-size: 1\n";
    let p = plan(sgl);
    let w = worker(&p);
    assert_eq!(w.env_value("SGLANG_CUDA_COREDUMP_BEFORE_CRASH"), Some("0"));
    assert_eq!(w.env_value("SGLANG_PYSPY_DUMP_BEFORE_CRASH"), Some("0"));
    assert_eq!(
        w.stop.budget.as_ref().unwrap().total,
        Duration::from_secs(5)
    );
    assert!(budget_warnings(&p).is_empty(), "{:?}", p.warnings);
    let p = plan(&format!(
        "{sgl}environment:\n  SGLANG_PYSPY_DUMP_BEFORE_CRASH: \"true\"\n"
    ));
    let w = budget_warnings(&p);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("SGLang may take 10 s to stop")
            && w[0].contains("set SGLANG_PYSPY_DUMP_BEFORE_CRASH=0"),
        "{}",
        w[0]
    );
}

/// Issue 50, item 5: a Dynamo frontend that migrates no request in front of workers that
/// restart loses the requests in flight on a worker that dies: a plan warning with the fix; none
/// once a limit is set, or when the workers do not restart.
#[test]
fn a_dynamo_frontend_without_request_migration_before_restarting_workers_is_warned() {
    let base = "name: m\nmodel: {path: \"hf:x/y\"}\nresources: {gpu_type: cpu, gpus_per_node: 1, agg_nodes: 1, agg_workers: 1}\nfrontend: {type: dynamo, enable_multiple_frontends: false}\nbackend: {type: mocker}\n";
    let warned = |yaml: &str| -> Vec<String> {
        plan(yaml)
            .warnings
            .into_iter()
            .filter(|w| w.contains("migrates no request"))
            .collect()
    };
    // Workers that never restart (the default): nothing to lose to a restart.
    assert!(warned(base).is_empty());
    let restarting =
        format!("{base}mcsup: {{worker_defaults: {{restart: {{policy: on-failure}}}}}}\n");
    let w = warned(&restarting);
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("frontend_0: Dynamo's frontend migrates no request (--migration-limit 0, Dynamo's default)")
            && w[0].contains("frontend.args: {migration-limit: 3}"),
        "{}",
        w[0]
    );
    let with_flag = restarting.replace(
        "frontend: {type: dynamo, enable_multiple_frontends: false}",
        "frontend: {type: dynamo, enable_multiple_frontends: false, args: {migration-limit: 3}}",
    );
    assert!(
        warned(&with_flag).is_empty(),
        "{:?}",
        plan(&with_flag).processes[0].argv
    );
    let with_env = restarting.replace(
        "frontend: {type: dynamo, enable_multiple_frontends: false}",
        "frontend: {type: dynamo, enable_multiple_frontends: false, env: {DYN_MIGRATION_LIMIT: \"2\"}}",
    );
    assert!(warned(&with_env).is_empty());
    let zero = restarting.replace(
        "frontend: {type: dynamo, enable_multiple_frontends: false}",
        "frontend: {type: dynamo, enable_multiple_frontends: false, env: {DYN_MIGRATION_LIMIT: \"0\"}}",
    );
    assert_eq!(warned(&zero).len(), 1);
}

/// `mcsup.canary`: its defaults are left out of the plan, a change is in it, and nonsense is an
/// error naming the key.
#[test]
fn the_canary_is_the_recipes_and_nonsense_is_refused() {
    let base = "name: m\nmodel: {path: \"hf:x/y\"}\nresources: {gpu_type: cpu, gpus_per_node: 1, agg_nodes: 1, agg_workers: 1}\nfrontend: {type: dynamo, enable_multiple_frontends: false}\nbackend: {type: mocker}\n";
    let p = plan(base);
    assert!(p.canary.is_default());
    let json = serde_json::to_value(&p).unwrap();
    assert!(json.get("canary").is_none());
    let p = plan(&format!(
        "{base}mcsup: {{canary: {{period_seconds: 5, on_failure: drain}}}}\n"
    ));
    assert_eq!(p.canary.period, Duration::from_secs(5));
    assert_eq!(p.canary.on_failure, mcsup::recipe::CanaryAction::Drain);
    assert_eq!(
        serde_json::to_value(&p).unwrap()["canary"]["period_ms"],
        5000
    );
    let e = plan_on(
        &format!("{base}mcsup: {{canary: {{failure_threshold: 0}}}}\n"),
        "n1",
        &[Role::Aggregated],
    )
    .unwrap_err();
    assert_eq!(e.key_path, "mcsup.canary.failure_threshold");
    let r = mcsup::recipe::parse_str(
        std::path::Path::new("t.yaml"),
        &format!("{base}mcsup: {{canary: {{period: 5}}}}\n"),
    );
    assert!(r.is_err_and(|e| e.to_string().contains("period")));
}
