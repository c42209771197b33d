//! The endpoint's canary, live: srtctl's upstream mocker recipe (one aggregated Dynamo mocker
//! worker behind the real frontend, Debian's etcd and NATS) under `mcsup run`, the canary every
//! second with a threshold of 2. Once servable, the mocker worker is frozen with SIGSTOP (a hung
//! engine: the process lives, nothing answers; the frontend still lists it): the canary fails
//! (`canary-failed`, `DEGRADED` in `status`, `mcsup_canary_ok 0`); thawed with SIGCONT, it
//! generates again (`canary-ok`). The run then stops cleanly, leaving nothing.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::recipe::dynamo_venv;
use common::*;

#[test]
fn a_frozen_worker_fails_the_canary_and_its_thaw_brings_it_back() {
    let env = TestEnv::new();
    let (dynamo, model) = dynamo_venv();
    let configs = env.path("configs");
    std::fs::create_dir_all(&configs).unwrap();
    std::os::unix::fs::symlink("/usr/bin/etcd", configs.join("etcd")).unwrap();
    std::os::unix::fs::symlink("/usr/sbin/nats-server", configs.join("nats-server")).unwrap();
    let recipe = env.path("recipe.yaml");
    std::fs::write(
        &recipe,
        format!(
            r#"name: canary
model: {{path: "hf:{model}"}}
resources: {{gpu_type: cpu, gpus_per_node: 1, agg_nodes: 1, agg_workers: 1}}
frontend: {{type: dynamo, enable_multiple_frontends: false}}
backend: {{type: mocker, speedup_ratio: 100}}
dynamo: {{request_plane: nats}}
environment: {{ETCD_ENDPOINTS: "http://127.0.0.1:2379", NATS_SERVER: "nats://127.0.0.1:4222"}}
mcsup:
  configs_dir: {configs}
  log_dir: {logs}
  node_addresses: {{localhost: 127.0.0.1}}
  shutdown: {{deadline_seconds: 10}}
  canary: {{period_seconds: 1, failure_threshold: 2, timeout_seconds: 1}}
"#,
            model = model.display(),
            configs = configs.display(),
            logs = env.log_dir().display(),
        ),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        dynamo.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = Command::new(MCSUP)
        .args([
            "run",
            "--role",
            "agg",
            "--node",
            "localhost",
            "--nodelist",
            "localhost",
        ])
        .arg("--recipe")
        .arg(&recipe)
        .env("PATH", path)
        .env("MCSUP_TEST_TAG", &env.tag)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(env.path("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(env.path("mcsup.stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut m = Mcsup::new(&env, "localhost", child, env.dir.path().to_path_buf());
    let events = || read_events(&env.log_dir().join("localhost.events.jsonl"));
    let has = |event: &str| events().iter().any(|e| e.event == event);
    wait_for("the job servable", Duration::from_secs(90), || {
        has("servable").then_some(())
    });
    // The healthy endpoint: a few canaries, none failing.
    wait_for("3 canary requests", Duration::from_secs(20), || {
        let s = status(&env);
        (s["canary"]["requests_total"].as_u64()? >= 3).then_some(())
    });
    assert!(!has("canary-failed"), "{:?}", names(&events()));
    assert_eq!(status(&env)["canary"]["failures_total"], 0);
    let worker = status(&env)["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| {
            u["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("mocker-agg"))
        })
        .and_then(|u| u["pid"].as_i64())
        .expect("the worker's pid") as i32;
    let pgid = nix::unistd::Pid::from_raw(worker);
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let failed = wait_for("canary-failed", Duration::from_secs(20), || {
        events().into_iter().find(|e| e.event == "canary-failed")
    });
    assert_eq!(failed.process, "frontend_0");
    let view = mcsup_ok([
        "status".as_ref(),
        "--log-dir".as_ref(),
        env.log_dir().as_os_str(),
    ]);
    assert!(
        view.contains("DEGRADED") && view.contains("canary completions in a row failed"),
        "{view}"
    );
    let prom = std::fs::read_to_string(env.log_dir().join("localhost.prom")).unwrap();
    assert!(
        prom.contains("mcsup_canary_ok{node=\"localhost\""),
        "{prom}"
    );
    assert!(
        prom.lines()
            .any(|l| l.starts_with("mcsup_canary_ok{") && l.ends_with(" 0")),
        "{prom}"
    );
    nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGCONT).unwrap();
    wait_for("canary-ok", Duration::from_secs(30), || {
        has("canary-ok").then_some(())
    });
    eprintln!("{:?}", names(&events()));
    m.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(m.wait_exit(Duration::from_secs(40)), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

fn status(env: &TestEnv) -> serde_json::Value {
    std::fs::read_to_string(env.log_dir().join("localhost.status.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null)
}
