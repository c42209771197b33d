//! srt-slurm's fatal log markers, live: a recipe's `health_check.extra_fatal_log_patterns` line
//! fails the worker while its process is still alive. The real Dynamo mocker, behind the real
//! frontend with Debian's etcd and NATS, from srtctl's upstream mocker recipe on this machine;
//! tests/fixtures/failing-engine makes the mocker print PyTorch's `CUDA error: out of memory`
//! (srtctl's own test uses that pattern) and keep running, as an engine whose scheduler died
//! behind a live launcher.

use crate::common;

use std::time::Duration;

use common::recipe::{dynamo_venv, repo, run_local_agg};
use common::*;

const PATTERN: &str = "CUDA error: out of memory";

#[test]
fn a_recipes_fatal_pattern_fails_the_worker_while_its_process_lives() {
    let env = TestEnv::new();
    let (_, model) = dynamo_venv();
    let configs = env.path("configs");
    std::fs::create_dir_all(&configs).unwrap();
    std::os::unix::fs::symlink("/usr/bin/etcd", configs.join("etcd")).unwrap();
    std::os::unix::fs::symlink("/usr/sbin/nats-server", configs.join("nats-server")).unwrap();
    let fixture = repo().join("tests/fixtures/failing-engine");
    let recipe = env.path("recipe.yaml");
    std::fs::write(
        &recipe,
        format!(
            r#"name: fatal-marker
model: {{path: "hf:{model}"}}
resources: {{gpu_type: cpu, gpus_per_node: 1, agg_nodes: 1, agg_workers: 1}}
frontend: {{type: dynamo, enable_multiple_frontends: false}}
backend:
  type: mocker
  speedup_ratio: 100
  aggregated_environment:
    PYTHONPATH: "{fixture}"
    MCSUP_TEST_FAIL_LINES: "{fixture}/cuda-error-oom.log"
    MCSUP_TEST_FAIL_ON: dynamo.mocker
    MCSUP_TEST_FAIL_AFTER: "3"
dynamo: {{request_plane: nats}}
environment: {{ETCD_ENDPOINTS: "http://127.0.0.1:2379", NATS_SERVER: "nats://127.0.0.1:4222"}}
health_check:
  extra_fatal_log_patterns: ["{PATTERN}"]
mcsup:
  configs_dir: {configs}
  log_dir: {logs}
  node_addresses: {{localhost: 127.0.0.1}}
  worker_defaults: {{restart: {{policy: never}}}}
  shutdown: {{deadline_seconds: 10}}
"#,
            model = model.display(),
            fixture = fixture.display(),
            configs = configs.display(),
            logs = env.log_dir().display(),
        ),
    )
    .unwrap();
    let mut m = run_local_agg(&env, &recipe);
    let code = m.wait_exit(Duration::from_secs(90));
    let evs = read_events(&env.log_dir().join("localhost.events.jsonl"));
    let worker = evs
        .iter()
        .find(|e| e.event == "liveness-failed")
        .unwrap_or_else(|| panic!("no liveness failure: {:?}", names(&evs)))
        .clone();
    assert!(worker.process.starts_with("mocker-agg"), "{worker:?}");
    let detail = worker.raw["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(PATTERN) && detail.contains("RuntimeError: CUDA error: out of memory"),
        "{detail}"
    );
    // It was alive: mcsup stopped it after the line, and it had not exited before.
    let at = |event: &str| {
        evs.iter()
            .position(|e| e.process == worker.process && e.event == event)
            .unwrap_or_else(|| panic!("no {event} of {}: {:?}", worker.process, names(&evs)))
    };
    let failed = at("liveness-failed");
    assert!(at("spawned") < failed && failed < at("stopping") && at("stopping") < at("exited"));
    // A critical worker that failed for good: the node tears down and mcsup says so.
    assert_ne!(code, 0, "{}", m.stderr());
    let why = mcsup_ok(["why".as_ref(), env.log_dir().as_os_str()]);
    eprintln!("{:?}\n{why}", names(&evs));
    assert!(
        why.starts_with(&format!("first failure: localhost/{} at +", worker.process))
            && why.contains("its liveness failed"),
        "{why}"
    );
    env.assert_no_leftovers();
}
