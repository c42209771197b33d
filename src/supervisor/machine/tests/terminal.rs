//! What the job is for: a terminal process (the benchmark client, a 2.0 `terminal: true`
//! service) ends the job with its exit status, after the result gate for a benchmark.

use super::*;
use crate::plan::TerminalSpec;

const JUDGE_WITHIN: Duration = super::super::terminal::JUDGE_WITHIN;

/// worker (ready) <- benchmark (terminal, judged as `sa-bench`).
fn bench_plan() -> Plan {
    let worker = proc("worker", ProcessKind::Worker);
    let mut b = proc("benchmark", ProcessKind::Benchmark);
    dep(&mut b, "worker", DependencyCondition::Healthy);
    b.terminal = Some(TerminalSpec {
        benchmark: Some("sa-bench".into()),
        max_failed_requests: 0,
    });
    plan(vec![worker, b])
}

/// `p` in a job of two nodes (a control connection to the coordinator).
fn with_peers(mut p: Plan) -> Plan {
    p.control = Some(crate::plan::ControlSpec {
        coordinator: "n1".into(),
        address: "127.0.0.1".into(),
        port: 0,
        secret: PathBuf::from("/nonexistent/control.secret"),
        nodes: vec!["n1".into(), "n2".into()],
        silent: crate::plan::ControlSpec::SILENT,
        stores_at_once: 0,
    });
    p
}

fn judges(a: &[Action]) -> Vec<usize> {
    a.iter()
        .filter_map(|a| match a {
            Action::Watch(WatchRequest::Judge { proc }) => Some(*proc),
            _ => None,
        })
        .collect()
}

fn finished(a: &[Action]) -> Vec<String> {
    a.iter()
        .filter_map(|a| match a {
            Action::Finished { detail } => Some(detail.clone()),
            _ => None,
        })
        .collect()
}

/// The worker's stop, after the client ended: SIGTERM to its group, then it is gone (the
/// ended client's group only gets the SIGKILL of leftovers).
fn worker_stops(h: &mut H, a: &[Action]) {
    let to_worker: Vec<_> = signals(a).into_iter().filter(|(p, _)| *p == 100).collect();
    assert_eq!(
        to_worker,
        [(100, Signal::SIGTERM), (100, Signal::SIGCONT)],
        "{a:?}"
    );
    let a = h.gone(100, ExitStatus::Code(0));
    assert!(has(&a, "mcsup", RecordKind::Finished), "{a:?}");
}

#[test]
fn a_benchmark_that_exits_0_and_measured_something_ends_the_job_with_0() {
    let mut h = H::new(bench_plan());
    let a = h.start_all();
    assert_eq!(spawns(&a), [0, 1]);
    let a = h.gone(101, ExitStatus::Code(0));
    assert!(has(&a, "benchmark", RecordKind::Completed), "{a:?}");
    // Judged first: nothing stops yet.
    assert_eq!(judges(&a), [1]);
    assert!(signals(&a).iter().all(|(p, _)| *p == 101), "{a:?}");
    assert_eq!(h.m.phase(), Phase::Running);
    let a = h.ev(Event::Judged {
        proc: 1,
        verdict: Ok("1 file: 10 requests completed".into()),
    });
    assert_eq!(
        detail(&a, "benchmark", RecordKind::BenchmarkResult),
        "1 file: 10 requests completed"
    );
    assert!(matches!(
        h.m.reason(),
        Some(ShutdownReason::Finished { code: 0, .. })
    ));
    worker_stops(&mut h, &a);
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn an_invalid_result_fails_the_job_with_benchmark_invalid() {
    let mut h = H::new(bench_plan());
    h.start_all();
    h.gone(101, ExitStatus::Code(0));
    let a = h.ev(Event::Judged {
        proc: 1,
        verdict: Err("results_concurrency_4.json: 0 output tokens".into()),
    });
    assert!(detail(&a, "benchmark", RecordKind::BenchmarkInvalid).contains("0 output tokens"));
    worker_stops(&mut h, &a);
    assert_eq!(h.m.exit_code(), ExitCode::BenchmarkInvalid.code());
    assert_eq!(h.m.exit_code(), 9);
}

#[test]
fn a_failing_benchmark_ends_the_job_with_its_exit_status_unjudged() {
    let mut h = H::new(bench_plan());
    h.start_all();
    let a = h.gone(101, ExitStatus::Code(3));
    assert!(has(&a, "benchmark", RecordKind::Failed), "{a:?}");
    assert!(judges(&a).is_empty());
    assert!(matches!(
        h.m.reason(),
        Some(ShutdownReason::Finished { code: 3, .. })
    ));
    worker_stops(&mut h, &a);
    assert_eq!(h.m.exit_code(), 3);
    assert_eq!(h.state(1), UnitState::Failed);
}

#[test]
fn a_verdict_that_never_comes_lets_the_0_stand_after_the_bound() {
    let mut h = H::new(bench_plan());
    h.start_all();
    h.gone(101, ExitStatus::Code(0));
    assert_eq!(h.m.next_deadline(), Some(h.now + JUDGE_WITHIN));
    let a = h.at(JUDGE_WITHIN.as_millis() as u64 - 1);
    assert!(records(&a).is_empty(), "{a:?}");
    let a = h.at(JUDGE_WITHIN.as_millis() as u64);
    assert!(detail(&a, "benchmark", RecordKind::BenchmarkResult).contains("not judged"));
    // A verdict after the bound changes nothing.
    let late = h.ev(Event::Judged {
        proc: 1,
        verdict: Err("late".into()),
    });
    assert!(records(&late).is_empty(), "{late:?}");
    worker_stops(&mut h, &a);
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn a_benchmark_stopped_by_the_teardown_does_not_decide_the_exit() {
    let mut h = H::new(bench_plan());
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert_eq!(
        signals(&a),
        [(101, Signal::SIGTERM), (101, Signal::SIGCONT)],
        "the client stops first"
    );
    let a = h.gone(101, ExitStatus::Code(1));
    assert!(judges(&a).is_empty());
    assert!(!has(&a, "benchmark", RecordKind::Failed));
    h.gone(100, ExitStatus::Code(0));
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn with_peers_the_node_waits_for_the_coordinators_job_done() {
    let mut h = H::new(with_peers(bench_plan()));
    h.start_all();
    h.gone(101, ExitStatus::Code(0));
    let a = h.ev(Event::Judged {
        proc: 1,
        verdict: Ok("measured".into()),
    });
    // The coordinator hears it; the node keeps serving (another node's part may use it).
    assert_eq!(finished(&a), ["`benchmark` ended (exit code 0)"]);
    assert!(has(&a, "mcsup", RecordKind::PartDone));
    assert!(signals(&a).is_empty(), "{a:?}");
    assert_eq!(h.m.phase(), Phase::Running);
    let a = h.ev(Event::JobDone {
        detail: "n1: done".into(),
    });
    assert!(matches!(
        h.m.reason(),
        Some(ShutdownReason::Finished { code: 0, .. })
    ));
    worker_stops(&mut h, &a);
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn with_peers_an_invalid_result_is_still_this_nodes_exit_status() {
    let mut h = H::new(with_peers(bench_plan()));
    h.start_all();
    h.gone(101, ExitStatus::Code(0));
    h.ev(Event::Judged {
        proc: 1,
        verdict: Err("0 completed".into()),
    });
    // Whatever ends the node afterwards (here: the coordinator is gone), the verdict stands.
    let a = h.ev(Event::PeerFailed {
        detail: "the coordinator is gone".into(),
    });
    worker_stops(&mut h, &a);
    assert_eq!(h.m.exit_code(), ExitCode::BenchmarkInvalid.code());
}

#[test]
fn a_node_without_a_terminal_process_drains_on_job_done_and_exits_0() {
    let mut h = H::new(chain());
    h.start_all();
    let a = h.ev(Event::JobDone {
        detail: "benchmark on n3 ended (exit code 3)".into(),
    });
    assert!(matches!(h.m.reason(), Some(ShutdownReason::JobDone(_))));
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
    for pid in [102, 101, 100] {
        h.gone(pid, ExitStatus::Code(0));
    }
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn several_terminal_services_end_the_job_once_all_exited_with_the_worst_status() {
    let worker = proc("worker", ProcessKind::Worker);
    let svc = |name: &str| {
        let mut s = proc(name, ProcessKind::Service);
        dep(&mut s, "worker", DependencyCondition::Healthy);
        s.terminal = Some(TerminalSpec {
            benchmark: None,
            max_failed_requests: 0,
        });
        s
    };
    let mut h = H::new(plan(vec![worker, svc("load-a"), svc("load-b")]));
    h.start_all();
    let a = h.gone(101, ExitStatus::Code(0));
    assert!(has(&a, "load-a", RecordKind::Completed));
    // No result gate for a service; the other still runs: nothing ends.
    assert!(judges(&a).is_empty());
    assert_eq!(h.m.phase(), Phase::Running);
    let a = h.gone(102, ExitStatus::Code(2));
    assert!(has(&a, "load-b", RecordKind::Failed));
    assert!(matches!(
        h.m.reason(),
        Some(ShutdownReason::Finished { code: 2, .. })
    ));
    worker_stops(&mut h, &a);
    assert_eq!(h.m.exit_code(), 2);
}
