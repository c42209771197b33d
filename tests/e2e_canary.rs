//! The endpoint's canary, live: srtctl's upstream mocker recipe (one aggregated Dynamo mocker
//! worker behind the real frontend, Debian's etcd and NATS) under `mcsup run`, the canary every
//! second with a threshold of 2. Once servable, the mocker worker is frozen with SIGSTOP (a hung
//! engine: the process lives, nothing answers; the frontend still lists it): the canary fails
//! (`canary-failed`, `DEGRADED` in `status`, `mcsup_canary_ok 0`); thawed with SIGCONT, it
//! generates again (`canary-ok`). The run then stops cleanly, leaving nothing. And the stall
//! watchdog: frozen longer than its engine liveness allows, the worker's stacks are dumped
//! (py-spy's Python frames and every thread's state) before it is stopped and restarted; the
//! job serves again.

use crate::common;

use std::time::Duration;

use common::recipe::{dynamo_venv, run_local_agg};
use common::*;

#[test]
fn a_frozen_worker_fails_the_canary_and_its_thaw_brings_it_back() {
    let env = TestEnv::new();
    let recipe = recipe(
        &env,
        "  canary: {period_seconds: 1, failure_threshold: 2, timeout_seconds: 1}\n",
    );
    let mut m = run_local_agg(&env, &recipe);
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

/// The recipe of both tests: the upstream mocker job on this machine, with `extra` under `mcsup:`.
fn recipe(env: &TestEnv, extra: &str) -> std::path::PathBuf {
    recipe_at(env, 100.0, extra)
}

/// [`recipe`] with the mocker's `speedup_ratio`.
fn recipe_at(env: &TestEnv, speedup: f64, extra: &str) -> std::path::PathBuf {
    let (_, model) = dynamo_venv();
    let configs = env.path("configs");
    std::fs::create_dir_all(&configs).unwrap();
    std::os::unix::fs::symlink("/usr/bin/etcd", configs.join("etcd")).unwrap();
    std::os::unix::fs::symlink("/usr/sbin/nats-server", configs.join("nats-server")).unwrap();
    let recipe = env.path("recipe.yaml");
    std::fs::write(
        &recipe,
        format!(
            r#"name: stall
model: {{path: "hf:{model}"}}
resources: {{gpu_type: cpu, gpus_per_node: 1, agg_nodes: 1, agg_workers: 1}}
frontend: {{type: dynamo, enable_multiple_frontends: false}}
backend: {{type: mocker, speedup_ratio: {speedup}}}
dynamo: {{request_plane: nats}}
environment: {{ETCD_ENDPOINTS: "http://127.0.0.1:2379", NATS_SERVER: "nats://127.0.0.1:4222"}}
mcsup:
  configs_dir: {configs}
  log_dir: {logs}
  node_addresses: {{localhost: 127.0.0.1}}
  shutdown: {{deadline_seconds: 10}}
{extra}"#,
            model = model.display(),
            speedup = speedup,
            configs = configs.display(),
            logs = env.log_dir().display(),
        ),
    )
    .unwrap();
    recipe
}

/// Issue 50, item 4: SIGSTOP of the mocker worker for longer than its engine liveness allows
/// (1 s period, 2 failures): `liveness-failed`, then its stacks in the log directory (the
/// frozen thread's state, py-spy's Python frames) before its stop, then its restart; the job is
/// servable again and a completion returns tokens; `mcsup why` shows the dump.
#[test]
fn a_frozen_worker_is_dumped_before_its_restart_and_the_job_serves_again() {
    let env = TestEnv::new();
    let recipe = recipe(
        &env,
        "  canary: {enabled: false}\n  engine_liveness: {period_seconds: 1, timeout_seconds: 1, failure_threshold: 2}\n  worker_defaults: {restart: {policy: on-failure, backoff_initial_seconds: 1}}\n",
    );
    let mut m = run_local_agg(&env, &recipe);
    let events = || read_events(&env.log_dir().join("localhost.events.jsonl"));
    let count = |event: &str| events().iter().filter(|e| e.event == event).count();
    wait_for("the job servable", Duration::from_secs(90), || {
        (count("servable") > 0).then_some(())
    });
    let worker = status(&env)["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| {
            u["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("mocker-agg"))
        })
        .map(|u| {
            (
                u["name"].as_str().unwrap().to_string(),
                u["pid"].as_i64().unwrap() as i32,
            )
        })
        .expect("the worker");
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(worker.1),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let dump = wait_for("the stack dump", Duration::from_secs(40), || {
        events().into_iter().find(|e| e.event == "stack-dump")
    });
    assert_eq!(dump.process, worker.0);
    let said = dump.raw["detail"].as_str().unwrap_or_default().to_string();
    let file = said.split(": ").next().unwrap().to_string();
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert!(
        text.contains(&format!("== pid {}", worker.1)) && text.contains("state T"),
        "{text}"
    );
    assert!(
        text.contains("py-spy dump --nonblocking") && text.contains("Thread "),
        "{text}"
    );
    // The order: the failure, the dump, then the stop.
    let evs = events();
    let at = |event: &str| {
        evs.iter()
            .position(|e| e.process == worker.0 && e.event == event)
            .unwrap_or_else(|| panic!("no {event}: {:?}", names(&evs)))
    };
    assert!(at("liveness-failed") < at("stack-dump") && at("stack-dump") < at("stopping"));
    wait_for("the worker ready again", Duration::from_secs(60), || {
        (events()
            .iter()
            .filter(|e| e.process == worker.0 && e.event == "ready")
            .count()
            >= 2)
            .then_some(())
    });
    let model = dynamo_venv().1.display().to_string();
    let answer = wait_for("a completion with tokens", Duration::from_secs(60), || {
        let v: serde_json::Value = ureq::post("http://127.0.0.1:8000/v1/completions")
            .timeout(Duration::from_secs(5))
            .send_json(serde_json::json!({"model": model, "prompt": "ping", "max_tokens": 3}))
            .ok()?
            .into_json()
            .ok()?;
        (v["usage"]["completion_tokens"].as_u64()? >= 1).then_some(v)
    });
    eprintln!("{said}\n{answer}\n{:?}", names(&events()));
    let why = mcsup_ok(["why".as_ref(), env.log_dir().as_os_str()]);
    assert!(why.contains(&format!("stacks: {file}: pid ")), "{why}");
    m.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(m.wait_exit(Duration::from_secs(40)), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

/// Issue 50, item 4, the counters: a worker with a request in flight whose response bytes do not
/// grow for longer than its stall bound has stalled, though its `/health` answers. The real
/// mocker slowed 100 times (`speedup_ratio: 0.01`), the bound 3 s: a streamed 20-token answer
/// grows the worker's `dynamo_component_response_bytes_total` every fraction of a second for
/// longer than the bound (a long decode is progress: no failure); a 1,500-token prompt's prefill
/// (about 9 s here, no byte sent) outlasts it: `liveness-failed` naming the counter, the stack
/// dump, the restart, and the job serves again.
#[test]
fn a_worker_with_a_request_in_flight_and_no_progress_is_stalled() {
    let env = TestEnv::new();
    let recipe = recipe_at(
        &env,
        0.01,
        "  canary: {enabled: false}\n  engine_liveness: {period_seconds: 1, timeout_seconds: 1, failure_threshold: 2, stall_seconds: 3}\n  worker_defaults: {restart: {policy: on-failure, backoff_initial_seconds: 1}}\n",
    );
    let mut m = run_local_agg(&env, &recipe);
    let events = || read_events(&env.log_dir().join("localhost.events.jsonl"));
    let failed = || events().into_iter().find(|e| e.event == "liveness-failed");
    wait_for("the job servable", Duration::from_secs(120), || {
        events().iter().any(|e| e.event == "servable").then_some(())
    });
    let model = dynamo_venv().1.display().to_string();
    let started = std::time::Instant::now();
    let streamed = ureq::post("http://127.0.0.1:8000/v1/completions")
        .timeout(Duration::from_secs(60))
        .send_json(serde_json::json!({
            "model": model, "prompt": "ping", "max_tokens": 20, "stream": true,
            "ignore_eos": true
        }))
        .unwrap()
        .into_string()
        .unwrap();
    let took = started.elapsed();
    assert!(streamed.contains("[DONE]"), "{streamed}");
    assert!(
        took > Duration::from_secs(4),
        "the decode took {took:?}: not longer than the bound"
    );
    assert!(
        failed().is_none(),
        "a progressing decode failed: {:?}",
        failed()
    );
    // A prefill with no byte for longer than the bound.
    let long = {
        let model = model.clone();
        std::thread::spawn(move || {
            let _ = ureq::post("http://127.0.0.1:8000/v1/completions")
                .timeout(Duration::from_secs(60))
                .send_json(serde_json::json!({
                    "model": model, "prompt": "hello ".repeat(1500), "max_tokens": 5
                }));
        })
    };
    let ev = wait_for("liveness-failed", Duration::from_secs(30), failed);
    assert!(ev.process.starts_with("mocker-agg"), "{}", ev.process);
    let detail = ev.raw["detail"].as_str().unwrap_or_default().to_string();
    assert!(
        detail.contains(
            "1 request(s) in flight and dynamo_component_response_bytes_total has not grown for"
        ) && detail.contains("its stall bound is 3 s"),
        "{detail}"
    );
    wait_for("the stack dump", Duration::from_secs(30), || {
        events()
            .iter()
            .any(|e| e.event == "stack-dump" && e.process == ev.process)
            .then_some(())
    });
    wait_for("the worker ready again", Duration::from_secs(120), || {
        (events()
            .iter()
            .filter(|e| e.process == ev.process && e.event == "ready")
            .count()
            >= 2)
            .then_some(())
    });
    let answer = wait_for("a completion with tokens", Duration::from_secs(60), || {
        let v: serde_json::Value = ureq::post("http://127.0.0.1:8000/v1/completions")
            .timeout(Duration::from_secs(10))
            .send_json(serde_json::json!({"model": model, "prompt": "ping", "max_tokens": 1}))
            .ok()?
            .into_json()
            .ok()?;
        (v["usage"]["completion_tokens"].as_u64()? >= 1).then_some(v)
    });
    eprintln!(
        "decode of 20 tokens in {took:?}; {detail}\n{answer}\n{:?}",
        names(&events())
    );
    long.join().unwrap();
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
