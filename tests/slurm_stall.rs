//! The stall watchdog under the local Slurm: the 1P2D mocker job of [`mocker_1p2d_recipe`]
//! (frontend on n1, prefill on n2, decode on n3 and n4), `mcsup submit`, with the engine
//! liveness at 1 s x 3 and the canary at 1 s x 2. The decode worker on n3 is frozen with
//! SIGSTOP: n3's mcsup finds it unresponsive (`liveness-failed`), writes its stacks into the
//! job's log directory (py-spy's Python frames of the frozen process) before it stops it, and
//! restarts it; meanwhile `status --job` shows the endpoint DEGRADED; then servable again, and a
//! completion returns tokens. The job then drains in order and completes.

use super::*;

#[test]
fn a_frozen_decode_worker_of_a_mocker_1p2d_job_is_dumped_restarted_and_the_job_serves_again() {
    let env = TestEnv::new();
    let cluster = Cluster::start_n(&env, "cgroup", 18270, 4);
    let (dynamo, model) = common::recipe::dynamo_venv();
    let recipe = mocker_1p2d_recipe(&env, &model);
    let mut r: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&recipe).unwrap()).unwrap();
    r["mcsup"]["engine_liveness"] =
        serde_yaml::from_str("{period_seconds: 1, timeout_seconds: 1, failure_threshold: 3}")
            .unwrap();
    r["mcsup"]["canary"] =
        serde_yaml::from_str("{period_seconds: 1, timeout_seconds: 1, failure_threshold: 2}")
            .unwrap();
    r["mcsup"]["worker_defaults"]["restart"] = serde_yaml::from_str(
        "{policy: on-failure, backoff_initial_seconds: 1, backoff_max_seconds: 1}",
    )
    .unwrap();
    std::fs::write(&recipe, serde_yaml::to_string(&r).unwrap()).unwrap();
    let (id, logs, out) = submit_job(&env, &cluster, &recipe, &dynamo);
    let events = |node: &str| read_events(&logs.join(format!("{node}.events.jsonl")));
    let job_out = || std::fs::read_to_string(&out).unwrap_or_default();
    wait_for("the job servable", Duration::from_secs(90), || {
        if cluster.run("squeue", &["-h", "-j", &id]).stdout.is_empty() {
            panic!("job {id} left the queue early:\n{}", job_out());
        }
        events("n1")
            .iter()
            .any(|e| e.event == "servable")
            .then_some(())
    });
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(logs.join("n3.status.json")).unwrap())
            .unwrap();
    let pid = status["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "mocker-decode-0")
        .and_then(|u| u["pid"].as_i64())
        .expect("n3's decode worker") as i32;
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    // While it is frozen or restarting, the job view says the endpoint is degraded.
    let degraded = wait_for("status --job DEGRADED", Duration::from_secs(60), || {
        let view = job_status(&cluster_job(&id, &logs, &out));
        view.contains("DEGRADED").then_some(view)
    });
    eprintln!("{degraded}");
    let dump = wait_for("n3's stack dump", Duration::from_secs(60), || {
        events("n3")
            .into_iter()
            .find(|e| e.process == "mocker-decode-0" && e.event == "stack-dump")
    });
    let said = dump.raw["detail"].as_str().unwrap_or_default().to_string();
    let file = said.split(": ").next().unwrap().to_string();
    assert!(file.starts_with(&logs.display().to_string()), "{file}");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert!(
        text.contains(&format!("== pid {pid}"))
            && text.contains("state T")
            && text.contains("Thread "),
        "{text}"
    );
    let n3 = events("n3");
    let at = |event: &str| {
        n3.iter()
            .position(|e| e.process == "mocker-decode-0" && e.event == event)
            .unwrap_or_else(|| panic!("n3: no {event}"))
    };
    assert!(at("liveness-failed") < at("stack-dump") && at("stack-dump") < at("stopping"));
    // Back: the decode worker restarted and ready, the endpoint servable with every worker.
    let view = wait_for("servable again", Duration::from_secs(90), || {
        let ready = events("n3")
            .iter()
            .filter(|e| e.process == "mocker-decode-0" && e.event == "ready")
            .count();
        let view = job_status(&cluster_job(&id, &logs, &out));
        (ready >= 2
            && view.contains("servable: http://127.0.0.1:8000, 3/3 workers")
            && !view.contains("DEGRADED"))
        .then_some(view)
    });
    eprintln!("{view}");
    let answer = wait_for("a completion with tokens", Duration::from_secs(60), || {
        let v: serde_json::Value = ureq::post("http://127.0.0.1:8000/v1/completions")
            .timeout(Duration::from_secs(10))
            .send_json(serde_json::json!({
                "model": model.display().to_string(),
                "prompt": "ping",
                "max_tokens": 3,
            }))
            .ok()?
            .into_json()
            .ok()?;
        (v["usage"]["completion_tokens"].as_u64()? >= 1).then_some(v)
    });
    eprintln!("{answer}");
    assert!(cluster
        .run("scancel", &["--batch", "--signal=USR1", &id])
        .status
        .success());
    cluster.wait_gone(&id, Duration::from_secs(90));
    assert_eq!(cluster.job_state(&id), "COMPLETED 0:0", "{}", job_out());
    assert_job_leaves_nothing(&env);
}
