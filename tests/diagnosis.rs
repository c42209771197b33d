//! Known failure lines and fatal log patterns, end to end on one node: the real `mcsup run
//! --plan-file` with children (the `mcsup-testchild` helper) that print what a failing engine
//! prints, then `mcsup why` on the log directory.

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::*;
use mcsup::plan::*;

const T: Duration = Duration::from_secs(15);

/// What a vLLM engine core prints when the GPU is full, as its API server stays up (the shape
/// srt-slurm's `health_check.extra_fatal_log_patterns` exists for).
const OOM: &[&str] = &[
    "INFO 12:00:00 engine.py:1] starting the engine core",
    "Traceback (most recent call last):",
    "  File \"/opt/vllm/v1/engine/core.py\", line 512, in run_engine_core",
    "    engine_core.run_busy_loop()",
    "RuntimeError: CUDA error: out of memory",
];

/// The test child's arguments to print [`OOM`]'s traceback frames, then `exception`.
fn traceback_ending(exception: &'static str) -> Vec<&'static str> {
    OOM[1..4]
        .iter()
        .chain([exception].iter())
        .flat_map(|l| ["--print", *l])
        .collect()
}

fn why(env: &TestEnv, json: bool) -> String {
    let mut cmd = Command::new(MCSUP);
    cmd.arg("why").arg(env.log_dir());
    if json {
        cmd.arg("--json");
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn a_fatal_log_line_fails_a_live_worker_and_why_names_it() {
    let env = TestEnv::new();
    let pid_file = env.path("worker.pid");
    let mut args: Vec<&str> = OOM.iter().flat_map(|l| ["--print", *l]).collect();
    args.extend(["--pid-file", pid_file.to_str().unwrap()]);
    let mut worker = env.proc("worker", ProcessKind::Worker, &args);
    worker.fatal_log_patterns = vec!["CUDA error: out of memory".into()];
    let mut m = env.start(&env.plan(vec![worker]));
    // A critical worker whose liveness failed, restart policy never: code 6.
    assert_eq!(m.wait_exit(T), 6, "{}", m.stderr());
    let evs = m.events();
    let failed = Mcsup::find(&evs, "worker", "liveness-failed");
    let d = failed.raw["detail"].as_str().unwrap_or("");
    assert!(
        d.contains("pattern `CUDA error: out of memory`")
            && d.ends_with(": RuntimeError: CUDA error: out of memory"),
        "{d}"
    );
    // It was alive: mcsup stopped it (SIGTERM), it did not exit by itself.
    let i = Mcsup::index_of(&evs, "worker", "liveness-failed");
    assert!(i < Mcsup::index_of(&evs, "worker", "stopping"));
    let stopped = Mcsup::find(&evs, "worker", "stopped");
    assert_eq!(stopped.raw["signal"], "SIGTERM", "{:?}", stopped.raw);
    // The known line is a diagnosis with the lines before it; the exception line, once it
    // failed, another.
    let diagnoses: Vec<&Ev> = evs.iter().filter(|e| e.event == "diagnosis").collect();
    let ids: Vec<&str> = diagnoses
        .iter()
        .map(|e| e.raw["diagnosis"]["signature"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(ids, ["cuda-oom", "python-exception"], "{diagnoses:?}");
    assert_eq!(
        diagnoses[0].raw["diagnosis"]["context"],
        serde_json::json!([OOM[1], OOM[2], OOM[3]])
    );
    let text = why(&env, false);
    eprintln!("mcsup why:\n{text}");
    assert!(text.starts_with("first failure: n1/worker at +"), "{text}");
    assert!(
        text.contains("its liveness failed: a fatal log line"),
        "{text}"
    );
    assert!(
        text.contains("cause: cuda-oom: the GPU ran out of memory\n"),
        "{text}"
    );
    assert!(
        text.contains("\n  > RuntimeError: CUDA error: out of memory\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "log: {}",
            env.log_dir().join("n1.worker.log").display()
        )),
        "{text}"
    );
    let j: serde_json::Value = serde_json::from_str(&why(&env, true)).unwrap();
    assert_eq!(j["first_failure"]["process"], "worker");
    assert_eq!(j["first_failure"]["event"], "liveness-failed");
    env.assert_no_leftovers();
}

#[test]
fn an_exception_printed_by_a_healthy_process_is_no_diagnosis() {
    let env = TestEnv::new();
    // A server logs a request's traceback and keeps serving (Dynamo does, at every cancelled
    // request), then stops when asked.
    let args = traceback_ending("ValueError: request 7 cancelled");
    let worker = env.proc("worker", ProcessKind::Worker, &args);
    let mut m = env.start(&env.plan(vec![worker]));
    m.wait_event("worker", "ready", T);
    m.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let evs = m.events();
    assert!(!evs.iter().any(|e| e.event == "diagnosis"), "{evs:?}");
    assert!(why(&env, false).starts_with("no process failed"));
    env.assert_no_leftovers();
}

#[test]
fn a_process_that_dies_after_its_traceback_gets_the_exception_as_its_diagnosis() {
    let env = TestEnv::new();
    let mut args = traceback_ending("KeyError: 'qwen3_5'");
    args.extend(["--exit-after", "100", "--code", "1"]);
    let worker = env.proc("worker", ProcessKind::Worker, &args);
    let mut m = env.start(&env.plan(vec![worker]));
    assert_eq!(m.wait_exit(T), 1, "{}", m.stderr());
    let ev = m.wait_event("worker", "diagnosis", T);
    assert_eq!(ev.raw["diagnosis"]["signature"], "python-exception");
    assert_eq!(ev.raw["diagnosis"]["line"], "KeyError: 'qwen3_5'");
    let text = why(&env, false);
    assert!(
        text.contains("exited with code 1, unasked; it raised KeyError: 'qwen3_5'"),
        "{text}"
    );
    env.assert_no_leftovers();
}
