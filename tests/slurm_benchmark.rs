//! Jobs that run to completion under the local Slurm: the 1P2D mocker job of
//! [`mocker_1p2d_recipe`] (etcd, NATS and Dynamo's frontend on n1, the prefill worker on n2,
//! the decode workers on n3 and n4), submitted with `mcsup submit`, with a `custom` benchmark:
//! - AIPerf 0.13.0 from PyPI (scripts/setup.sh's .venv-aiperf) against the job's endpoint, at
//!   the address srtctl's stage gives it (`SRT_FRONTEND_HOST`, `SRT_FRONTEND_PORT`), its
//!   artifacts in the job's log directory (`MCSUP_LOG_DIR`): the job ends by itself `COMPLETED
//!   0:0`, its result judged and shown;
//! - a client that exits 3: the job ends `FAILED`, and `mcsup why` names the benchmark;
//! - AIPerf against a stand-in endpoint that answers with zero tokens
//!   (tests/fixtures/zero-token-endpoint): AIPerf exits 0, the result gate does not let it
//!   stand: `FAILED` with `benchmark-invalid` (exit code 9).

use super::*;

/// The 1P2D mocker job with `benchmark:` given as YAML.
fn bench_recipe(env: &TestEnv, benchmark: &str) -> PathBuf {
    let (_, model) = common::recipe::dynamo_venv();
    let recipe = mocker_1p2d_recipe(env, &model);
    let mut r: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&recipe).unwrap()).unwrap();
    r["benchmark"] = serde_yaml::from_str(benchmark).unwrap();
    std::fs::write(&recipe, serde_yaml::to_string(&r).unwrap()).unwrap();
    recipe
}

/// `aiperf profile` of 10 short streaming chats, 2 at a time, against `url` for `model` (the
/// tokenizer is the mocker's tiny model), its artifacts under `$MCSUP_LOG_DIR/aiperf`. A
/// custom benchmark runs in `bash -lc` (a login shell resets PATH): every program by its path.
fn aiperf_command(url: &str, model: &str) -> String {
    let (_, tokenizer) = common::recipe::dynamo_venv();
    format!(
        "unset HF_HUB_OFFLINE TRANSFORMERS_OFFLINE; export TMPDIR=\"$MCSUP_LOG_DIR/aiperf-tmp\"; mkdir -p \"$TMPDIR\"; \
         {aiperf} profile --model {model} --tokenizer {tokenizer} --url {url} \
         --endpoint-type chat --streaming --concurrency 2 --request-count 10 \
         --synthetic-input-tokens-mean 32 --output-tokens-mean 16 --use-server-token-count \
         --no-server-metrics --no-gpu-telemetry --artifact-dir \"$MCSUP_LOG_DIR/aiperf\"",
        aiperf = common::recipe::aiperf().display(),
        tokenizer = tokenizer.display(),
    )
}

/// The custom benchmark YAML running `command`.
fn custom(command: &str) -> String {
    serde_yaml::to_string(&serde_yaml::Mapping::from_iter([
        ("type".into(), "custom".into()),
        ("command".into(), command.into()),
    ]))
    .unwrap()
}

/// Submit, wait until the job leaves the queue by itself, return (id, logs, out).
fn run_to_the_end(env: &TestEnv, cluster: &Cluster, benchmark: &str) -> (String, PathBuf, PathBuf) {
    let recipe = bench_recipe(env, benchmark);
    let (dynamo, _) = common::recipe::dynamo_venv();
    let (id, logs, out) = submit_job(env, cluster, &recipe, &dynamo);
    cluster.wait_gone(&id, Duration::from_secs(240));
    (id, logs, out)
}

fn events_of(logs: &std::path::Path, node: &str) -> Vec<Ev> {
    read_events(&logs.join(format!("{node}.events.jsonl")))
}

/// The event `event` of the benchmark on n1 (the head node, where srtctl runs the client).
fn bench_event(logs: &std::path::Path, event: &str) -> Option<String> {
    events_of(logs, "n1")
        .into_iter()
        .find(|e| e.process == "benchmark" && e.event == event)
        .map(|e| e.raw["detail"].as_str().unwrap_or_default().to_string())
}

/// Issue 49: the job is for its benchmark. AIPerf runs once the endpoint is servable, its result
/// lands in the job's log directory and is judged, the job drains in order and ends `COMPLETED
/// 0:0` by itself; `status --job`, the metrics and the events say what it measured.
#[test]
fn a_mocker_1p2d_job_with_an_aiperf_benchmark_completes_with_its_result() {
    let env = TestEnv::new();
    let cluster = Cluster::start_n(&env, "cgroup", 18210, 4);
    let (_, model) = common::recipe::dynamo_venv();
    let started = Instant::now();
    let command = aiperf_command(
        "http://$SRT_FRONTEND_HOST:$SRT_FRONTEND_PORT",
        &model.display().to_string(),
    );
    let (id, logs, out) = run_to_the_end(&env, &cluster, &custom(&command));
    let job_out = std::fs::read_to_string(&out).unwrap_or_default();
    eprintln!("the job ended by itself after {:?}", started.elapsed());
    assert_eq!(cluster.job_state(&id), "COMPLETED 0:0", "{job_out}");
    // It started once the job was servable, and its result stands.
    let n1 = events_of(&logs, "n1");
    let at = |process: &str, event: &str| {
        n1.iter()
            .position(|e| e.process == process && e.event == event)
            .unwrap_or_else(|| panic!("no {event} of {process} on n1"))
    };
    assert!(at("frontend_0", "servable") < at("benchmark", "spawned"));
    let said = bench_event(&logs, "benchmark-result").expect("a judged result");
    assert!(
        said.contains("10 requests completed") && said.contains("0 failed"),
        "{said}"
    );
    assert!(bench_event(&logs, "benchmark-invalid").is_none());
    // The job ended because the benchmark did: every node drained, n1's teardown says why.
    let shutdown = n1
        .iter()
        .find(|e| e.event == "shutdown-requested")
        .map(|e| e.raw["detail"].to_string())
        .unwrap_or_default();
    assert!(
        shutdown.contains("`benchmark` ended (exit code 0)"),
        "{shutdown}"
    );
    for node in ["n2", "n3", "n4"] {
        assert!(
            events_of(&logs, node).iter().any(|e| e.event == "job-done"),
            "{node} drained on the coordinator's job-done"
        );
    }
    // A healthy run: the canary and the engines' liveness (both on by default) said nothing.
    for node in ["n1", "n2", "n3", "n4"] {
        let alarms: Vec<String> = events_of(&logs, node)
            .iter()
            .filter(|e| {
                ["canary-failed", "liveness-failed", "stack-dump"].contains(&e.event.as_str())
            })
            .map(|e| format!("{} {}", e.process, e.event))
            .collect();
        assert!(alarms.is_empty(), "{node}: {alarms:?}");
    }
    let canary = &serde_json::from_str::<serde_json::Value>(
        &std::fs::read_to_string(logs.join("n1.status.json")).unwrap(),
    )
    .unwrap()["canary"];
    assert_eq!(canary["failures_total"], 0, "{canary}");
    // Its artifacts are in the job's log directory, the one the result was read from.
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(logs.join("n1.status.json")).unwrap())
            .unwrap();
    let file = status["benchmark"]["results"][0]["file"]
        .as_str()
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(file, "aiperf/profile_export_aiperf.json");
    assert!(logs.join(file).is_file());
    let view = job_status(&cluster_job(&id, &logs, &out));
    eprintln!("{view}");
    assert!(
        view.contains("benchmark: custom VALID: custom: 10 requests completed"),
        "{view}"
    );
    let prom = std::fs::read_to_string(logs.join("n1.prom")).unwrap();
    assert!(
        prom.contains("mcsup_benchmark_valid{node=\"n1\",type=\"custom\"} 1")
            && prom.contains("mcsup_benchmark_requests_completed{node=\"n1\",type=\"custom\",file=\"aiperf/profile_export_aiperf.json\",concurrency=\"\"} 10"),
        "{prom}"
    );
    assert_job_leaves_nothing(&env);
}

/// A benchmark that fails ends the job with its exit status: Slurm says FAILED, `mcsup why`
/// names the benchmark first.
#[test]
fn a_mocker_1p2d_job_whose_benchmark_exits_3_fails_and_why_names_it() {
    let env = TestEnv::new();
    let cluster = Cluster::start_n(&env, "cgroup", 18230, 4);
    let (id, logs, out) = run_to_the_end(
        &env,
        &cluster,
        &custom("echo 'the load generator gave up'; exit 3"),
    );
    let job_out = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        cluster.job_state(&id).starts_with("FAILED 3:"),
        "{}: {job_out}",
        cluster.job_state(&id)
    );
    let why = common::mcsup_ok(["why".as_ref(), logs.as_os_str()]);
    eprintln!("{why}");
    assert!(
        why.starts_with("first failure: n1/benchmark at +")
            && why
                .lines()
                .next()
                .unwrap()
                .contains("exited with code 3, unasked"),
        "{why}"
    );
    let log = std::fs::read_to_string(logs.join("n1.benchmark.log")).unwrap_or_default();
    assert!(log.contains("the load generator gave up"), "{log}");
    assert_job_leaves_nothing(&env);
}

/// upstream srt-slurm #429: a client that exits 0 having measured nothing. AIPerf against an
/// endpoint that answers text but reports zero generated tokens exits 0; the result gate fails
/// the job with `benchmark-invalid` (exit code 9) and names the number.
#[test]
fn a_mocker_1p2d_job_whose_benchmark_measured_zero_tokens_is_invalid() {
    let env = TestEnv::new();
    let cluster = Cluster::start_n(&env, "cgroup", 18250, 4);
    let port = common::free_port();
    let python = common::recipe::aiperf().with_file_name("python3");
    let server = repo().join("tests/fixtures/zero-token-endpoint/server.py");
    let command = format!(
        "{python} {server} {port} & stand_in=$!; {aiperf}; rc=$?; kill $stand_in; wait $stand_in; exit $rc",
        python = python.display(),
        server = server.display(),
        aiperf = aiperf_command(&format!("http://127.0.0.1:{port}"), "stand-in"),
    );
    let (id, logs, out) = run_to_the_end(&env, &cluster, &custom(&command));
    let job_out = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        cluster.job_state(&id).starts_with("FAILED 9:"),
        "{}: {job_out}",
        cluster.job_state(&id)
    );
    // AIPerf itself said all was well.
    let exited = events_of(&logs, "n1")
        .into_iter()
        .find(|e| e.process == "benchmark" && e.event == "exited")
        .expect("the client's exit");
    assert_eq!(exited.raw["exit_code"], 0);
    let said = bench_event(&logs, "benchmark-invalid").expect("benchmark-invalid");
    assert!(
        said.starts_with("generated tokens: 0 in aiperf/profile_export_aiperf.json"),
        "{said}"
    );
    let why = common::mcsup_ok(["why".as_ref(), logs.as_os_str()]);
    assert!(
        why.lines().next().unwrap().contains(
            "exited 0, but its result is invalid (benchmark-invalid): generated tokens: 0"
        ),
        "{why}"
    );
    assert_job_leaves_nothing(&env);
}

/// Issue 56: many jobs. A 4-variant sweep of the 1P2D mocker job (its custom benchmark's
/// `exit {code}` over 0 and 3, times a `{tag}` it prints) submits one job per variant, one line
/// each, in srtctl's order; `mcsup jobs` lists the four with their names, Slurm's states and
/// outcomes; `mcsup wait` of all four returns the first failed variant's exit code (3), of the
/// completed ones 0, and of a job Slurm never knew 1: an empty queue is never a success.
#[test]
fn a_sweep_submits_a_job_per_variant_and_wait_returns_their_outcome() {
    let env = TestEnv::new();
    let cluster = Cluster::start_n(&env, "cgroup", 18290, 4);
    let recipe = bench_recipe(
        &env,
        &custom("echo 'client {tag} exits {code}'; exit {code}"),
    );
    let mut r: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&recipe).unwrap()).unwrap();
    r["sweep"] = serde_yaml::from_str("{code: [0, 3], tag: [a, b]}").unwrap();
    std::fs::write(&recipe, serde_yaml::to_string(&r).unwrap()).unwrap();
    let name = r["name"].as_str().unwrap().to_string();
    let (dynamo, _) = common::recipe::dynamo_venv();
    // One job at a time, as on a cluster's own nodes: the fake nodes share this machine's
    // ports (etcd, NATS), which two jobs at once would both take.
    let o = submit_output(
        &env,
        &cluster,
        &recipe,
        &dynamo,
        std::path::Path::new(MCSUP),
        &[],
        &["--exclusive"],
    );
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ids: Vec<String> = stdout
        .lines()
        .map(|l| {
            assert!(l.starts_with("submitted job "), "{stdout}");
            l.split_whitespace().nth(2).unwrap().to_string()
        })
        .collect();
    let variants = [("0", "a"), ("0", "b"), ("3", "a"), ("3", "b")];
    assert_eq!(ids.len(), variants.len(), "{stdout}");
    for ((code, tag), line) in variants.iter().zip(stdout.lines()) {
        let want = format!("{name}_code{code}_tag{tag} (code={code} tag={tag}; 4 nodes)");
        assert!(line.contains(&want), "{want} in {stdout}");
    }
    let mcsup = |args: &[&str]| {
        let o = cluster
            .cmd(MCSUP)
            .args(args)
            .current_dir(env.dir.path())
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        )
    };
    let out = env.path("out").display().to_string();
    let mut args = vec![
        "wait",
        "--output-dir",
        &out,
        "--interval",
        "1",
        "--timeout",
        "600",
    ];
    args.extend(ids.iter().map(String::as_str));
    let (code, table) = mcsup(&args);
    eprintln!("{table}");
    assert_eq!(code, Some(3), "{table}");
    let line = |id: &str| {
        table
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_default()
            .to_string()
    };
    for (id, (code, tag)) in ids.iter().zip(variants) {
        let l = line(id);
        assert!(
            l.contains(&format!("{name}_code{code}_tag{tag}")),
            "{table}"
        );
        if code == "0" {
            assert!(l.contains("COMPLETED") && l.contains("ok: "), "{table}");
        } else {
            assert!(
                l.contains("FAILED (exit 3)") && l.contains("benchmark"),
                "{table}"
            );
        }
    }
    let (code, _) = mcsup(&["wait", "--output-dir", &out, &ids[0], &ids[1]]);
    assert_eq!(code, Some(0));
    let (code, table) = mcsup(&["wait", "--output-dir", &out, "--interval", "1", "999999"]);
    assert_eq!(code, Some(1), "{table}");
    assert!(table.contains("without a status from any node"), "{table}");
    let (code, listed) = mcsup(&["jobs", &out]);
    assert_eq!(code, Some(0));
    eprintln!("{listed}");
    assert_eq!(
        listed.lines().count(),
        5,
        "a header and a line per job: {listed}"
    );
    assert!(
        listed.lines().nth(1).unwrap().starts_with(&ids[0]),
        "{listed}"
    );
    assert!(
        listed.contains("SERVABLE AFTER") && listed.lines().nth(1).unwrap().contains(" s "),
        "{listed}"
    );
    assert_job_leaves_nothing(&env);
}
