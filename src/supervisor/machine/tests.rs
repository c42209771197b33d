//! State-machine tests: event sequences in, actions out. No processes, no clock.

use super::*;
use crate::plan::{
    DependencySpec, LivenessSpec, NodeSummary, ReadinessSpec, RestartSpec, ShutdownSpec,
    SignalName, StopSpec,
};
use std::path::PathBuf;

fn d(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn proc(name: &str, kind: ProcessKind) -> ProcessSpec {
    ProcessSpec {
        name: name.into(),
        kind,
        phase: crate::plan::Phase::default_for(kind),
        service: None,
        placement: None,
        roles: vec![],
        argv: vec!["/bin/true".into()],
        preamble: None,
        env: vec![],
        cwd: None,
        depends_on: vec![],
        readiness: None,
        liveness: None,
        restart: RestartSpec {
            policy: RestartPolicy::Never,
            success_codes: vec![0],
            backoff_initial: d(100),
            backoff_factor: 2.0,
            backoff_max: d(1000),
            reset_after: d(10_000),
            max_restarts: 3,
            window: d(60_000),
        },
        stop: StopSpec {
            signal: SignalName::SIGTERM,
            grace: d(1000),
        },
        critical: true,
    }
}

fn dep(p: &mut ProcessSpec, target: &str, condition: DependencyCondition) {
    p.depends_on.push(DependencySpec {
        target: target.into(),
        condition,
    });
}

fn restarting(mut p: ProcessSpec, policy: RestartPolicy) -> ProcessSpec {
    p.restart.policy = policy;
    p
}

fn tcp_ready(mut p: ProcessSpec, timeout: u64) -> ProcessSpec {
    p.readiness = Some(ReadinessSpec {
        probes: vec![ProbeSpec::Tcp {
            host: "127.0.0.1".into(),
            port: 1,
        }],
        initial_delay: d(0),
        interval: d(10),
        max_interval: d(40),
        attempt_timeout: d(100),
        timeout: d(timeout),
    });
    p
}

/// A TCP liveness probe every second (100 ms per attempt) that restarts after `threshold` failures.
fn tcp_liveness(threshold: u32) -> LivenessSpec {
    LivenessSpec {
        probe: ProbeSpec::Tcp {
            host: "127.0.0.1".into(),
            port: 1,
        },
        period: d(1000),
        attempt_timeout: d(100),
        failure_threshold: threshold,
    }
}

fn plan(processes: Vec<ProcessSpec>) -> Plan {
    Plan {
        node: NodeSummary {
            name: "n1".into(),
            ip: "127.0.0.1".into(),
            node_id: 0,
            infra_node: "n1".into(),
            infra_ip: "127.0.0.1".into(),
            runs_master: true,
            job_id: None,
            mode: "local".into(),
        },
        roles: vec![],
        gates: vec![],
        processes,
        services: vec![],
        recipe_schema: String::new(),
        memory: Default::default(),
        redacted: false,
        files: vec![],
        shutdown: ShutdownSpec {
            deadline: d(25_000),
            drain_signal: SignalName::SIGUSR1,
            exit_when_workers_done: true,
        },
        log_dir: PathBuf::from("/nonexistent"),
        ignored_sections: vec![],
        warnings: vec![],
    }
}

/// The usual chain: master <- store (healthy) <- worker (healthy).
fn chain() -> Plan {
    let master = proc("master", ProcessKind::Master);
    let mut store = proc("store", ProcessKind::Store);
    store.stop.signal = SignalName::SIGINT;
    dep(&mut store, "master", DependencyCondition::Healthy);
    let mut worker = proc("worker", ProcessKind::Worker);
    dep(&mut worker, "store", DependencyCondition::Healthy);
    plan(vec![master, store, worker])
}

struct H {
    m: Machine,
    t0: Instant,
    now: Instant,
}

impl H {
    fn new(p: Plan) -> H {
        let t0 = Instant::now();
        H {
            m: Machine::new(&p, t0).expect("valid plan"),
            t0,
            now: t0,
        }
    }
    fn ev(&mut self, e: Event) -> Vec<Action> {
        self.m.handle(e, self.now)
    }
    fn at(&mut self, ms: u64) -> Vec<Action> {
        self.now = self.t0 + d(ms);
        self.ev(Event::Tick)
    }
    /// Start, answering each Spawn with pid 100 + index.
    fn start_all(&mut self) -> Vec<Action> {
        let mut all = Vec::new();
        let mut queue = self.ev(Event::Start);
        while !queue.is_empty() {
            let acts = std::mem::take(&mut queue);
            for a in &acts {
                if let Action::Spawn { proc, .. } = a {
                    queue.extend(self.ev(Event::Spawned {
                        proc: *proc,
                        pid: pid(*proc),
                    }));
                }
            }
            all.extend(acts);
        }
        all
    }
    fn state(&self, i: usize) -> &'static str {
        self.m.procs[i].state.name()
    }
    /// Leader exit + group empty.
    fn gone(&mut self, pid: Pid, status: ExitStatus) -> Vec<Action> {
        let mut a = self.ev(Event::Exited { pid, status });
        a.extend(self.ev(Event::GroupEmpty { pgid: pid }));
        a
    }
}

fn pid(i: usize) -> Pid {
    100 + i as Pid
}

fn spawns(a: &[Action]) -> Vec<usize> {
    a.iter()
        .filter_map(|a| {
            if let Action::Spawn { proc, .. } = a {
                Some(*proc)
            } else {
                None
            }
        })
        .collect()
}

fn signals(a: &[Action]) -> Vec<(Pid, Signal)> {
    a.iter()
        .filter_map(|a| {
            if let Action::Signal { pgid, signal } = a {
                Some((*pgid, *signal))
            } else {
                None
            }
        })
        .collect()
}

fn records(a: &[Action]) -> Vec<(String, RecordKind)> {
    a.iter()
        .filter_map(|a| {
            if let Action::Record(r) = a {
                Some((r.unit.clone(), r.kind))
            } else {
                None
            }
        })
        .collect()
}

fn has(a: &[Action], unit: &str, kind: RecordKind) -> bool {
    records(a).iter().any(|(u, k)| u == unit && *k == kind)
}

fn probes(a: &[Action]) -> Vec<u64> {
    a.iter()
        .filter_map(|a| {
            if let Action::Probe { attempt, .. } = a {
                Some(*attempt)
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn instant_chain_starts_in_dependency_order_in_one_go() {
    let mut h = H::new(chain());
    let first = h.ev(Event::Start);
    assert_eq!(spawns(&first), [0], "only the master has no dependency");
    let a = h.ev(Event::Spawned { proc: 0, pid: 100 });
    assert!(has(&a, "master", RecordKind::Ready));
    assert_eq!(spawns(&a), [1]);
    let a = h.ev(Event::Spawned { proc: 1, pid: 101 });
    assert_eq!(spawns(&a), [2]);
    h.ev(Event::Spawned { proc: 2, pid: 102 });
    assert_eq!(h.m.phase(), Phase::Running);
    assert_eq!(
        h.m.next_deadline(),
        None,
        "nothing timed while idle: no wakeups"
    );
}

#[test]
fn readiness_probes_start_at_once_and_back_off_to_max_interval() {
    let mut h = H::new(plan(vec![tcp_ready(proc("m", ProcessKind::Master), 5000)]));
    h.ev(Event::Start);
    let a = h.ev(Event::Spawned { proc: 0, pid: 100 });
    let p = probes(&a);
    assert_eq!(p.len(), 1, "first probe immediately at spawn");
    // Failures: retry after 10, 20, 40, 40 ms.
    let mut attempt = p[0];
    let mut t = 0;
    for expect in [10, 20, 40, 40] {
        h.ev(Event::ProbeDone {
            attempt,
            ok: false,
            detail: "refused".into(),
        });
        assert_eq!(h.m.next_deadline(), Some(h.t0 + d(t + expect)));
        assert!(probes(&h.at(t + expect - 1)).is_empty());
        let a = h.at(t + expect);
        attempt = probes(&a)[0];
        t += expect;
    }
    let a = h.ev(Event::ProbeDone {
        attempt,
        ok: true,
        detail: String::new(),
    });
    assert!(has(&a, "m", RecordKind::Ready));
    assert_eq!(h.state(0), "ready");
    // The status no longer shows the last refusal once the process is ready.
    assert_eq!(h.m.snapshot()[0].detail, None);
}

#[test]
fn stale_probe_results_and_exits_are_ignored() {
    let mut h = H::new(plan(vec![tcp_ready(proc("m", ProcessKind::Master), 5000)]));
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    assert!(h
        .ev(Event::ProbeDone {
            attempt: 999,
            ok: true,
            detail: String::new()
        })
        .is_empty());
    assert!(h
        .ev(Event::Exited {
            pid: 4242,
            status: ExitStatus::Code(1)
        })
        .is_empty());
    assert_eq!(h.state(0), "starting");
}

#[test]
fn readiness_timeout_stops_the_process_and_fails_with_code_5() {
    let mut h = H::new(plan(vec![tcp_ready(proc("m", ProcessKind::Master), 100)]));
    h.ev(Event::Start);
    let a = h.ev(Event::Spawned { proc: 0, pid: 100 });
    let attempt = probes(&a)[0];
    h.ev(Event::ProbeDone {
        attempt,
        ok: false,
        detail: "refused".into(),
    });
    let a = h.at(100);
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGTERM), (100, Signal::SIGCONT)]
    );
    assert_eq!(h.state(0), "stopping");
    let a = h.gone(100, ExitStatus::Signal(15));
    assert!(has(&a, "m", RecordKind::Failed));
    assert!(has(&a, "mcsup", RecordKind::Finished));
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), ExitCode::ReadinessFailed.code());
}

#[test]
fn death_during_readiness_fails_at_once_with_its_status() {
    let mut p = plan(vec![tcp_ready(proc("m", ProcessKind::Master), 60_000)]);
    p.processes[0].readiness.as_mut().unwrap().probes = vec![ProbeSpec::LogLine {
        pattern: "ready".into(),
    }];
    let mut h = H::new(p);
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    h.at(5);
    let a = h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(3),
    });
    assert!(has(&a, "m", RecordKind::Failed));
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGKILL)],
        "leftovers of the group are killed"
    );
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), 3);
}

#[test]
fn log_line_match_makes_ready_only_for_the_current_generation() {
    let mut p = plan(vec![restarting(
        tcp_ready(proc("m", ProcessKind::Master), 60_000),
        RestartPolicy::Always,
    )]);
    p.processes[0].readiness.as_mut().unwrap().probes = vec![ProbeSpec::LogLine {
        pattern: "ready".into(),
    }];
    let mut h = H::new(p);
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    h.ev(Event::LogMatched {
        proc: 0,
        generation: 7,
        probe: 0,
    });
    assert_eq!(h.state(0), "starting");
    let a = h.ev(Event::LogMatched {
        proc: 0,
        generation: 1,
        probe: 0,
    });
    assert!(has(&a, "m", RecordKind::Ready));
}

#[test]
fn crash_restarts_with_exponential_backoff_up_to_the_cap() {
    let mut p = plan(vec![restarting(
        proc("s", ProcessKind::Store),
        RestartPolicy::OnFailure,
    )]);
    p.processes[0].restart.max_restarts = 100;
    let mut h = H::new(p);
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    let mut t = 0;
    for (pid, expect) in (100..).zip([100, 200, 400, 800, 1000, 1000]) {
        let a = h.ev(Event::Exited {
            pid,
            status: ExitStatus::Code(1),
        });
        assert!(has(&a, "s", RecordKind::Restarting));
        assert_eq!(h.state(0), "backing-off");
        assert_eq!(h.m.next_deadline(), Some(h.t0 + d(t + expect)));
        assert!(spawns(&h.at(t + expect - 1)).is_empty());
        let a = h.at(t + expect);
        assert_eq!(spawns(&a), [0]);
        h.ev(Event::Spawned {
            proc: 0,
            pid: pid + 1,
        });
        t += expect;
    }
    assert_eq!(h.m.procs[0].restarts, 6);
}

#[test]
fn backoff_resets_after_a_stable_run() {
    let mut p = plan(vec![restarting(
        proc("s", ProcessKind::Store),
        RestartPolicy::Always,
    )]);
    p.processes[0].restart.max_restarts = 100;
    let mut h = H::new(p);
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(1),
    });
    h.at(100);
    h.ev(Event::Spawned { proc: 0, pid: 101 });
    h.ev(Event::Exited {
        pid: 101,
        status: ExitStatus::Code(1),
    });
    assert_eq!(
        h.m.next_deadline(),
        Some(h.t0 + d(300)),
        "second delay doubled"
    );
    h.at(300);
    h.ev(Event::Spawned { proc: 0, pid: 102 });
    // Runs 10 s (reset_after) before crashing: back to the initial delay.
    h.now = h.t0 + d(10_300);
    h.ev(Event::Exited {
        pid: 102,
        status: ExitStatus::Code(0),
    });
    assert_eq!(h.m.next_deadline(), Some(h.t0 + d(10_400)));
}

#[test]
fn restart_limit_fails_a_critical_process_and_tears_down_in_order() {
    let mut p = chain();
    p.processes[1] = restarting(p.processes[1].clone(), RestartPolicy::OnFailure);
    p.processes[1].restart.max_restarts = 2;
    let mut h = H::new(p);
    h.start_all();
    let mut t = 0;
    let mut store_pid = 101;
    for _ in 0..2 {
        h.ev(Event::Exited {
            pid: store_pid,
            status: ExitStatus::Code(9),
        });
        t += 1000;
        h.at(t);
        store_pid += 10;
        h.ev(Event::Spawned {
            proc: 1,
            pid: store_pid,
        });
    }
    let a = h.ev(Event::Exited {
        pid: store_pid,
        status: ExitStatus::Code(9),
    });
    assert!(has(&a, "store", RecordKind::Failed));
    assert!(has(&a, "mcsup", RecordKind::ShutdownRequested));
    // The worker (tier 0) stops first; the master waits.
    assert_eq!(
        signals(&a),
        [
            (store_pid, Signal::SIGKILL),
            (102, Signal::SIGTERM),
            (102, Signal::SIGCONT)
        ]
    );
    let a = h.gone(102, ExitStatus::Signal(15));
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGTERM), (100, Signal::SIGCONT)]
    );
    let a = h.gone(100, ExitStatus::Code(0));
    assert!(has(&a, "mcsup", RecordKind::Finished));
    assert_eq!(h.m.exit_code(), 9);
}

#[test]
fn restart_storm_is_bounded_by_the_window() {
    let mut p = plan(vec![restarting(
        proc("w", ProcessKind::Worker),
        RestartPolicy::Always,
    )]);
    p.processes[0].critical = false;
    p.processes[0].restart.max_restarts = 5;
    p.processes[0].restart.window = d(10_000);
    p.processes[0].restart.backoff_max = d(100);
    let mut h = H::new(p);
    h.ev(Event::Start);
    let mut pid = 100;
    h.ev(Event::Spawned { proc: 0, pid });
    let mut spawned = 1;
    for step in 1..100u64 {
        h.ev(Event::Exited {
            pid,
            status: ExitStatus::Signal(11),
        });
        if h.state(0) == "failed" {
            break;
        }
        let a = h.at(step * 100);
        if spawns(&a).is_empty() {
            continue;
        }
        pid += 1;
        spawned += 1;
        h.ev(Event::Spawned { proc: 0, pid });
    }
    assert_eq!(h.state(0), "failed");
    assert_eq!(spawned, 6, "first start + 5 restarts");
    // The only worker failed: the node finishes, reporting the failure.
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), ExitCode::FinishedWithFailures.code());
}

#[test]
fn restarts_outside_the_window_do_not_count() {
    let mut p = plan(vec![restarting(
        proc("s", ProcessKind::Store),
        RestartPolicy::Always,
    )]);
    p.processes[0].restart.max_restarts = 1;
    p.processes[0].restart.window = d(1000);
    let mut h = H::new(p);
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(1),
    });
    h.at(100);
    h.ev(Event::Spawned { proc: 0, pid: 101 });
    h.now = h.t0 + d(5000);
    h.ev(Event::Exited {
        pid: 101,
        status: ExitStatus::Code(1),
    });
    assert_eq!(h.state(0), "backing-off");
}

#[test]
fn critical_exit_zero_unasked_is_a_failure() {
    let mut h = H::new(chain());
    h.start_all();
    let a = h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(0),
    });
    assert!(has(&a, "master", RecordKind::Failed));
    assert!(has(&a, "mcsup", RecordKind::ShutdownRequested));
    h.gone(102, ExitStatus::Code(0));
    h.gone(101, ExitStatus::Code(0));
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), ExitCode::CriticalExitedZero.code());
}

#[test]
fn one_shot_completion_unlocks_completed_successfully_dependents() {
    let setup = proc("setup", ProcessKind::Store);
    let mut w = proc("worker", ProcessKind::Worker);
    dep(&mut w, "setup", DependencyCondition::CompletedSuccessfully);
    let mut h = H::new(plan(vec![setup, w]));
    h.ev(Event::Start);
    let a = h.ev(Event::Spawned { proc: 0, pid: 100 });
    assert!(spawns(&a).is_empty());
    let a = h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(0),
    });
    assert!(has(&a, "setup", RecordKind::Completed));
    assert_eq!(spawns(&a), [1]);
}

#[test]
fn failed_dependency_fails_waiting_dependents() {
    let setup = proc("setup", ProcessKind::Store);
    let mut w = proc("worker", ProcessKind::Worker);
    dep(&mut w, "setup", DependencyCondition::CompletedSuccessfully);
    let mut p = plan(vec![setup, w]);
    p.processes[0].critical = false;
    let mut h = H::new(p);
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    let a = h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(2),
    });
    assert!(has(&a, "setup", RecordKind::Failed));
    assert!(has(&a, "worker", RecordKind::Failed));
    assert_eq!(h.m.exit_code(), ExitCode::ReadinessFailed.code());
}

#[test]
fn teardown_goes_in_tiers_and_waits_for_empty_groups() {
    let mut h = H::new(chain());
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert!(has(&a, "mcsup", RecordKind::ShutdownRequested));
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
    // The worker's leader exits, but a group member survives (pc #520): the store must wait.
    let a = h.ev(Event::Exited {
        pid: 102,
        status: ExitStatus::Signal(15),
    });
    assert!(signals(&a).is_empty(), "{a:?}");
    assert_eq!(h.state(2), "stopping");
    // The grace expires: SIGKILL to the whole group.
    let a = h.at(1000);
    assert_eq!(signals(&a), [(102, Signal::SIGKILL)]);
    assert!(h.m.sigkill_needed());
    let a = h.ev(Event::GroupEmpty { pgid: 102 });
    assert!(has(&a, "worker", RecordKind::Stopped));
    // The store's own stop signal is SIGINT.
    assert_eq!(signals(&a), [(101, Signal::SIGINT), (101, Signal::SIGCONT)]);
    let a = h.gone(101, ExitStatus::Code(0));
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGTERM), (100, Signal::SIGCONT)]
    );
    let a = h.gone(100, ExitStatus::Code(0));
    assert!(has(&a, "mcsup", RecordKind::Finished));
    assert_eq!(h.m.exit_code(), ExitCode::TeardownNeededSigkill.code());
}

#[test]
fn clean_requested_teardown_exits_zero() {
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGUSR1,
    ] {
        let mut h = H::new(chain());
        h.start_all();
        h.ev(Event::Signal(sig));
        for pid in [102, 101, 100] {
            h.gone(pid, ExitStatus::Code(0));
        }
        assert_eq!(h.m.phase(), Phase::Done, "{sig}");
        assert_eq!(h.m.exit_code(), 0, "{sig}");
        assert_eq!(h.m.reason(), Some(&ShutdownReason::Signal(sig)));
    }
}

#[test]
fn stop_levels_follow_dependencies_within_a_tier() {
    // Two workers where w2 depends on w1: w2 stops first, then w1, then the store.
    let store = proc("store", ProcessKind::Store);
    let mut w1 = proc("w1", ProcessKind::Worker);
    dep(&mut w1, "store", DependencyCondition::Started);
    let mut w2 = proc("w2", ProcessKind::Worker);
    dep(&mut w2, "w1", DependencyCondition::Started);
    let mut h = H::new(plan(vec![store, w1, w2]));
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert_eq!(signals(&a)[0], (102, Signal::SIGTERM));
    let a = h.gone(102, ExitStatus::Code(0));
    assert_eq!(signals(&a)[0], (101, Signal::SIGTERM));
    let a = h.gone(101, ExitStatus::Code(0));
    assert_eq!(signals(&a)[0], (100, Signal::SIGTERM));
}

#[test]
fn second_sigint_escalates_to_sigkill_of_every_group() {
    let mut h = H::new(chain());
    h.start_all();
    h.ev(Event::Signal(Signal::SIGINT));
    // Within the gap (Slurm's TERM, CONT, TERM burst): not an escalation.
    h.now = h.t0 + d(10);
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert!(has(&a, "mcsup", RecordKind::SignalIgnored));
    assert!(signals(&a).is_empty());
    h.now = h.t0 + d(300);
    let a = h.ev(Event::Signal(Signal::SIGINT));
    assert!(has(&a, "mcsup", RecordKind::Escalated));
    let mut killed: Vec<Pid> = signals(&a)
        .into_iter()
        .filter(|(_, s)| *s == Signal::SIGKILL)
        .map(|(p, _)| p)
        .collect();
    killed.sort();
    assert_eq!(killed, [100, 101, 102]);
    for pid in [100, 101, 102] {
        h.gone(pid, ExitStatus::Signal(9));
    }
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), ExitCode::TeardownNeededSigkill.code());
}

#[test]
fn drain_then_term_does_not_escalate() {
    let mut h = H::new(chain());
    h.start_all();
    h.ev(Event::Signal(Signal::SIGUSR1));
    h.now = h.t0 + d(500);
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert!(!has(&a, "mcsup", RecordKind::Escalated));
}

#[test]
fn exits_during_teardown_are_never_restarted_nor_failures() {
    let mut p = chain();
    for s in &mut p.processes {
        s.restart.policy = RestartPolicy::Always;
    }
    let mut h = H::new(p);
    h.start_all();
    h.ev(Event::Signal(Signal::SIGTERM));
    // Under linuxproc the master got SIGTERM too and exits at once, before its turn.
    let a = h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Signal(15),
    });
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGKILL)],
        "only its leftovers are killed"
    );
    assert!(spawns(&a).is_empty());
    h.ev(Event::GroupEmpty { pgid: 100 });
    let a = h.gone(102, ExitStatus::Code(1));
    assert!(spawns(&a).is_empty());
    h.gone(101, ExitStatus::Code(1));
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn sigterm_during_startup_stops_what_runs_and_cancels_the_rest() {
    let mut p = chain();
    p.processes[0] = tcp_ready(p.processes[0].clone(), 60_000);
    let mut h = H::new(p);
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert!(has(&a, "store", RecordKind::Stopped));
    assert!(has(&a, "worker", RecordKind::Stopped));
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGTERM), (100, Signal::SIGCONT)]
    );
    h.gone(100, ExitStatus::Signal(15));
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn process_spawned_after_teardown_began_is_stopped_at_once() {
    let mut h = H::new(chain());
    h.ev(Event::Start);
    h.ev(Event::Signal(Signal::SIGTERM));
    assert_eq!(h.state(0), "spawning");
    let a = h.ev(Event::Spawned { proc: 0, pid: 100 });
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGTERM), (100, Signal::SIGCONT)]
    );
}

#[test]
fn global_deadline_shortens_graces_and_kills_everything() {
    let mut p = chain();
    p.shutdown.deadline = d(1500);
    for s in &mut p.processes {
        s.stop.grace = d(10_000);
    }
    let mut h = H::new(p);
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert!(records(&a)
        .iter()
        .any(|(u, k)| u == "worker" && *k == RecordKind::Stopping));
    assert_eq!(
        h.m.next_deadline(),
        Some(h.t0 + d(1500)),
        "grace capped by the deadline"
    );
    h.now = h.t0 + d(200);
    h.gone(102, ExitStatus::Code(0));
    let a = h.at(1500);
    let mut killed: Vec<Pid> = signals(&a)
        .into_iter()
        .filter(|(_, s)| *s == Signal::SIGKILL)
        .map(|(p, _)| p)
        .collect();
    killed.sort();
    killed.dedup();
    assert_eq!(
        killed,
        [100, 101],
        "the store (stopping) and the master (not yet) both killed"
    );
    h.gone(101, ExitStatus::Signal(9));
    h.gone(100, ExitStatus::Signal(9));
    assert_eq!(h.m.exit_code(), ExitCode::TeardownNeededSigkill.code());
}

#[test]
fn unkillable_group_is_abandoned_after_the_deadline() {
    let mut p = chain();
    p.shutdown.deadline = d(100);
    let mut h = H::new(p);
    h.start_all();
    h.ev(Event::Signal(Signal::SIGTERM));
    h.at(100);
    let a = h.at(100 + ABANDON_AFTER_DEADLINE.as_millis() as u64);
    assert!(has(&a, "worker", RecordKind::Abandoned));
    assert_eq!(h.m.phase(), Phase::Done);
}

#[test]
fn dependents_keep_waiting_while_a_dependency_restarts() {
    let mut master = tcp_ready(
        restarting(proc("master", ProcessKind::Master), RestartPolicy::Always),
        60_000,
    );
    master.restart.max_restarts = 10;
    let mut w = proc("worker", ProcessKind::Worker);
    dep(&mut w, "master", DependencyCondition::Healthy);
    let mut h = H::new(plan(vec![master, w]));
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    // Crashes before ready: restarted, worker keeps waiting.
    h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(1),
    });
    assert_eq!(h.state(1), "waiting");
    let a = h.at(100);
    assert_eq!(spawns(&a), [0]);
    let a = h.ev(Event::Spawned { proc: 0, pid: 110 });
    let attempt = probes(&a)[0];
    assert_eq!(h.state(1), "waiting");
    let a = h.ev(Event::ProbeDone {
        attempt,
        ok: true,
        detail: String::new(),
    });
    assert_eq!(spawns(&a), [1]);
}

#[test]
fn restarting_process_rechecks_its_own_dependencies() {
    let mut master = restarting(proc("master", ProcessKind::Master), RestartPolicy::Always);
    master.restart.backoff_initial = d(1000);
    let mut w = restarting(proc("worker", ProcessKind::Worker), RestartPolicy::Always);
    w.restart.backoff_initial = d(100);
    dep(&mut w, "master", DependencyCondition::Healthy);
    let mut h = H::new(plan(vec![master, w]));
    h.start_all();
    h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(1),
    });
    h.ev(Event::Exited {
        pid: 101,
        status: ExitStatus::Code(1),
    });
    let a = h.at(100);
    assert!(spawns(&a).is_empty(), "the master is still backing off");
    assert_eq!(h.state(1), "waiting");
    let a = h.at(1000);
    assert_eq!(spawns(&a), [0]);
    let a = h.ev(Event::Spawned { proc: 0, pid: 200 });
    assert_eq!(spawns(&a), [1]);
}

#[test]
fn liveness_failures_restart_per_policy() {
    let mut s = restarting(proc("s", ProcessKind::Store), RestartPolicy::OnFailure);
    s.liveness = Some(tcp_liveness(3));
    let mut h = H::new(plan(vec![s]));
    h.start_all();
    assert_eq!(
        h.m.next_deadline(),
        Some(h.t0 + d(1000)),
        "liveness is the only timer"
    );
    let mut t = 0;
    for i in 0..3 {
        t += 1000;
        let a = h.at(t);
        let attempt = probes(&a)[0];
        let a = h.ev(Event::ProbeDone {
            attempt,
            ok: false,
            detail: "refused".into(),
        });
        if i < 2 {
            assert!(signals(&a).is_empty());
        } else {
            assert!(has(&a, "s", RecordKind::LivenessFailed));
            assert_eq!(
                signals(&a),
                [(100, Signal::SIGTERM), (100, Signal::SIGCONT)]
            );
        }
    }
    let a = h.gone(100, ExitStatus::Signal(15));
    assert!(has(&a, "s", RecordKind::Restarting), "{a:?}");
}

#[test]
fn liveness_success_resets_the_failure_count() {
    let mut s = restarting(proc("s", ProcessKind::Store), RestartPolicy::OnFailure);
    s.liveness = Some(tcp_liveness(2));
    let mut h = H::new(plan(vec![s]));
    h.start_all();
    for (i, ok) in [false, true, false, true].into_iter().enumerate() {
        let a = h.at((i as u64 + 1) * 1000);
        let attempt = probes(&a)[0];
        let a = h.ev(Event::ProbeDone {
            attempt,
            ok,
            detail: String::new(),
        });
        assert!(signals(&a).is_empty());
    }
}

#[test]
fn health_failure_during_shutdown_is_ignored() {
    let mut s = restarting(proc("s", ProcessKind::Store), RestartPolicy::Always);
    s.liveness = Some(tcp_liveness(1));
    let mut h = H::new(plan(vec![s]));
    h.start_all();
    let a = h.at(1000);
    let attempt = probes(&a)[0];
    h.ev(Event::Signal(Signal::SIGTERM));
    let a = h.ev(Event::ProbeDone {
        attempt,
        ok: false,
        detail: "refused".into(),
    });
    assert!(!has(&a, "s", RecordKind::LivenessFailed));
    let a = h.gone(100, ExitStatus::Signal(15));
    assert!(spawns(&a).is_empty());
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn liveness_restart_stop_turns_into_teardown_when_shutdown_arrives() {
    let mut s = restarting(proc("s", ProcessKind::Store), RestartPolicy::Always);
    s.liveness = Some(tcp_liveness(1));
    let mut h = H::new(plan(vec![s]));
    h.start_all();
    let a = h.at(1000);
    let attempt = probes(&a)[0];
    h.ev(Event::ProbeDone {
        attempt,
        ok: false,
        detail: "refused".into(),
    });
    assert_eq!(h.state(0), "stopping");
    h.ev(Event::Signal(Signal::SIGTERM));
    let a = h.gone(100, ExitStatus::Signal(15));
    assert!(spawns(&a).is_empty());
    assert_eq!(h.m.phase(), Phase::Done);
}

#[test]
fn all_workers_exiting_tears_the_node_down() {
    let mut p = chain();
    p.processes[2].critical = false;
    let mut h = H::new(p);
    h.start_all();
    let a = h.ev(Event::Exited {
        pid: 102,
        status: ExitStatus::Code(0),
    });
    assert!(has(&a, "worker", RecordKind::Completed));
    assert!(has(&a, "mcsup", RecordKind::ShutdownRequested));
    assert_eq!(signals(&a)[1], (101, Signal::SIGINT));
    h.gone(101, ExitStatus::Code(0));
    h.gone(100, ExitStatus::Code(0));
    assert_eq!(h.m.reason(), Some(&ShutdownReason::WorkersDone));
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn non_critical_worker_failure_keeps_the_node_running_until_all_workers_are_gone() {
    let mut p = chain();
    let mut w2 = p.processes[2].clone();
    w2.name = "worker2".into();
    p.processes.push(w2);
    p.processes[2].critical = false;
    p.processes[3].critical = false;
    let mut h = H::new(p);
    h.start_all();
    let a = h.ev(Event::Exited {
        pid: 102,
        status: ExitStatus::Code(7),
    });
    assert!(has(&a, "worker", RecordKind::Failed));
    assert_eq!(h.m.phase(), Phase::Running);
    let a = h.ev(Event::Exited {
        pid: 103,
        status: ExitStatus::Code(0),
    });
    assert!(has(&a, "mcsup", RecordKind::ShutdownRequested));
    h.gone(101, ExitStatus::Code(0));
    h.gone(100, ExitStatus::Code(0));
    assert_eq!(h.m.exit_code(), ExitCode::FinishedWithFailures.code());
}

#[test]
fn workers_done_disabled_keeps_running() {
    let mut p = chain();
    p.processes[2].critical = false;
    p.shutdown.exit_when_workers_done = false;
    let mut h = H::new(p);
    h.start_all();
    h.ev(Event::Exited {
        pid: 102,
        status: ExitStatus::Code(0),
    });
    assert_eq!(h.m.phase(), Phase::Running);
}

#[test]
fn every_exit_status_maps_to_its_exit_code() {
    for code in 0..=255 {
        let mut h = H::new(plan(vec![proc("m", ProcessKind::Master)]));
        h.start_all();
        h.ev(Event::Exited {
            pid: 100,
            status: ExitStatus::Code(code),
        });
        assert_eq!(h.m.phase(), Phase::Done);
        let want = if code == 0 {
            ExitCode::CriticalExitedZero.code()
        } else {
            code
        };
        assert_eq!(h.m.exit_code(), want, "code {code}");
    }
    for sig in 1..=64 {
        let mut h = H::new(plan(vec![proc("m", ProcessKind::Master)]));
        h.start_all();
        h.ev(Event::Exited {
            pid: 100,
            status: ExitStatus::Signal(sig),
        });
        if is_stop_signal(sig) {
            // Held back: the same signal may be on its way to mcsup.
            assert_eq!(h.m.phase(), Phase::Running, "signal {sig}");
            h.at(SIGNAL_DEATH_SETTLE.as_millis() as u64);
        }
        assert_eq!(h.m.phase(), Phase::Done, "signal {sig}");
        assert_eq!(h.m.exit_code(), 128 + sig, "signal {sig}");
    }
}

#[test]
fn a_step_wide_sigterm_reaching_the_children_first_is_a_clean_shutdown() {
    // Under Slurm proctrack/linuxproc, scancel's SIGTERM reaches every child and mcsup at about
    // the same moment: the children die (and are reaped) before mcsup's own copy is handled.
    // Their deaths are held back, mcsup's signal arrives within the settle time, and the run is
    // a clean teardown: no restart, no failure, exit 0.
    let mut p = chain();
    for s in &mut p.processes {
        s.restart.policy = RestartPolicy::Always;
    }
    let mut h = H::new(p);
    h.start_all();
    h.now = h.t0 + d(1_000);
    for pid in [100, 101, 102] {
        let a = h.gone(pid, ExitStatus::Signal(libc::SIGTERM));
        assert!(a.is_empty(), "judged before the settle time: {a:?}");
    }
    assert_eq!(
        h.m.next_deadline(),
        Some(h.now + SIGNAL_DEATH_SETTLE),
        "the runtime wakes for the held deaths"
    );
    h.now += SIGNAL_DEATH_SETTLE - d(1);
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert!(spawns(&a).is_empty(), "{a:?}");
    assert!(!has(&a, "master", RecordKind::Failed) && !has(&a, "worker", RecordKind::Restarting));
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), ExitCode::Ok.code());
    assert_eq!(h.m.reason(), Some(&ShutdownReason::Signal(Signal::SIGTERM)));
}

#[test]
fn a_sigterm_death_nobody_followed_up_is_judged_after_the_settle_time() {
    let p = plan(vec![restarting(
        proc("s", ProcessKind::Store),
        RestartPolicy::OnFailure,
    )]);
    let mut h = H::new(p);
    h.start_all();
    let a = h.gone(100, ExitStatus::Signal(libc::SIGTERM));
    assert!(a.is_empty(), "{a:?}");
    assert_eq!(h.state(0), "ready", "not judged yet");
    let settle = SIGNAL_DEATH_SETTLE.as_millis() as u64;
    assert!(records(&h.at(settle - 1)).is_empty());
    let a = h.at(settle);
    assert!(has(&a, "s", RecordKind::Restarting), "{a:?}");
    assert_eq!(h.state(0), "backing-off");
    // A SIGKILL death (not a stop signal) is judged at once.
    let mut h = H::new(plan(vec![restarting(
        proc("s", ProcessKind::Store),
        RestartPolicy::OnFailure,
    )]));
    h.start_all();
    let a = h.gone(100, ExitStatus::Signal(libc::SIGKILL));
    assert!(has(&a, "s", RecordKind::Restarting), "{a:?}");
}

#[test]
fn a_backstop_kill_makes_a_clean_teardown_report_sigkill() {
    let mut h = H::new(chain());
    h.start_all();
    h.ev(Event::Signal(Signal::SIGTERM));
    // The second signal's handler SIGKILLed every group before the loop heard of it.
    for pid in [102, 101, 100] {
        h.gone(pid, ExitStatus::Signal(libc::SIGKILL));
    }
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), ExitCode::Ok.code());
    h.ev(Event::BackstopKilled);
    assert!(h.m.sigkill_needed());
    assert_eq!(h.m.exit_code(), ExitCode::TeardownNeededSigkill.code());
    // It never hides a failure's own code.
    let mut h = H::new(plan(vec![proc("m", ProcessKind::Master)]));
    h.start_all();
    h.gone(100, ExitStatus::Code(3));
    h.ev(Event::BackstopKilled);
    assert_eq!(h.m.exit_code(), 3);
}

#[test]
fn success_codes_are_per_process() {
    let mut p = plan(vec![restarting(
        proc("s", ProcessKind::Store),
        RestartPolicy::OnFailure,
    )]);
    p.processes[0].restart.success_codes = vec![0, 42];
    p.processes[0].critical = false;
    let mut h = H::new(p);
    h.start_all();
    let a = h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(42),
    });
    assert!(has(&a, "s", RecordKind::Completed));
}

#[test]
fn spawn_failure_of_a_critical_process_is_code_7() {
    let mut h = H::new(chain());
    h.ev(Event::Start);
    let a = h.ev(Event::SpawnFailed {
        proc: 0,
        error: "No such file".into(),
    });
    assert!(has(&a, "master", RecordKind::Failed));
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), ExitCode::SpawnFailed.code());
}

fn gated() -> Plan {
    let mut p = chain();
    p.processes.remove(0);
    p.processes[0].depends_on = vec![DependencySpec {
        target: "remote-master".into(),
        condition: DependencyCondition::Healthy,
    }];
    p.gates.push(GateSpec {
        name: "remote-master".into(),
        readiness: ReadinessSpec {
            probes: vec![ProbeSpec::Tcp {
                host: "127.0.0.1".into(),
                port: 1,
            }],
            initial_delay: d(0),
            interval: d(50),
            max_interval: d(50),
            attempt_timeout: d(50),
            timeout: d(1000),
        },
    });
    p
}

#[test]
fn gate_ready_releases_its_dependents() {
    let mut h = H::new(gated());
    let a = h.ev(Event::Start);
    assert!(spawns(&a).is_empty());
    let attempt = probes(&a)[0];
    let a = h.ev(Event::ProbeDone {
        attempt,
        ok: true,
        detail: String::new(),
    });
    assert!(has(&a, "remote-master", RecordKind::Ready));
    assert_eq!(spawns(&a), [0]);
}

#[test]
fn gate_timeout_fails_critical_dependents() {
    let mut h = H::new(gated());
    let a = h.ev(Event::Start);
    let attempt = probes(&a)[0];
    h.ev(Event::ProbeDone {
        attempt,
        ok: false,
        detail: "refused".into(),
    });
    let a = h.at(1000);
    assert!(has(&a, "remote-master", RecordKind::Failed));
    assert!(has(&a, "store", RecordKind::Failed));
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), ExitCode::ReadinessFailed.code());
}

#[test]
fn bad_plans_are_rejected_before_anything_starts() {
    let mut p = chain();
    p.processes[0].depends_on = vec![DependencySpec {
        target: "worker".into(),
        condition: DependencyCondition::Started,
    }];
    let e = Machine::new(&p, Instant::now()).unwrap_err();
    assert!(e.0.contains("cycle"), "{e}");
    let mut p = chain();
    p.processes[1].depends_on[0].target = "mastr".into();
    let e = Machine::new(&p, Instant::now()).unwrap_err();
    assert!(e.0.contains("`mastr`"), "{e}");
    let mut p = chain();
    p.processes[2].name = "store".into();
    assert!(Machine::new(&p, Instant::now())
        .unwrap_err()
        .0
        .contains("duplicate"));
    let mut p = gated();
    p.gates[0].readiness.probes = vec![ProbeSpec::LogLine {
        pattern: "x".into(),
    }];
    assert!(Machine::new(&p, Instant::now())
        .unwrap_err()
        .0
        .contains("log-line"));
}

#[test]
fn empty_plan_finishes_at_once() {
    let mut h = H::new(plan(vec![]));
    let a = h.ev(Event::Start);
    assert!(has(&a, "mcsup", RecordKind::Finished));
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn snapshot_reports_states_and_versions_move() {
    let mut h = H::new(chain());
    let v0 = h.m.version();
    h.start_all();
    assert!(h.m.version() > v0);
    let s = h.m.snapshot();
    assert_eq!(
        s.iter().map(|u| u.state).collect::<Vec<_>>(),
        ["ready", "ready", "ready"]
    );
    assert_eq!(s[0].pid, Some(100));
    let v = h.m.version();
    h.ev(Event::Tick);
    assert_eq!(h.m.version(), v, "a no-op tick changes nothing");
}

/// One arbitrary input for the machine, with the milliseconds before it.
fn any_event() -> impl proptest::strategy::Strategy<Value = (u64, Event)> {
    use proptest::prelude::*;
    let pid = (100..104i32).prop_map(|p| p as Pid);
    let ev = prop_oneof![
        (0..3usize, pid.clone()).prop_map(|(proc, pid)| Event::Spawned { proc, pid }),
        (pid.clone(), 0..3i32).prop_map(|(pid, c)| Event::Exited {
            pid,
            status: ExitStatus::Code(c)
        }),
        // Deaths by a stop signal are held back by the machine (SIGNAL_DEATH_SETTLE).
        (
            pid.clone(),
            prop_oneof![Just(libc::SIGTERM), Just(libc::SIGKILL)]
        )
            .prop_map(|(pid, s)| Event::Exited {
                pid,
                status: ExitStatus::Signal(s)
            }),
        pid.prop_map(|pgid| Event::GroupEmpty { pgid }),
        (0..10u64, any::<bool>()).prop_map(|(attempt, ok)| Event::ProbeDone {
            attempt,
            ok,
            detail: String::new()
        }),
        Just(Event::Tick),
        (0..3usize).prop_map(|proc| Event::SpawnFailed {
            proc,
            error: "x".into()
        }),
        (0..2u64).prop_map(|generation| Event::LogMatched {
            proc: 0,
            generation,
            probe: 0
        }),
        Just(Event::Signal(Signal::SIGUSR1)),
        Just(Event::BackstopKilled),
    ];
    (0..300u64, ev)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

    /// Arbitrary events in arbitrary order, then SIGTERM, SIGINT and every group gone: the
    /// machine never panics and always reaches Done.
    #[test]
    fn random_event_sequences_never_panic_and_always_finish_after_kill(
        critical in proptest::collection::vec(proptest::prelude::any::<bool>(), 3),
        events in proptest::collection::vec(any_event(), 0..40),
    ) {
        let mut p = chain();
        p.processes[0] = tcp_ready(p.processes[0].clone(), 500);
        for (s, c) in p.processes.iter_mut().zip(&critical) {
            s.restart.policy = RestartPolicy::Always;
            s.critical = *c;
        }
        let mut h = H::new(p);
        h.ev(Event::Start);
        let mut t = 0;
        for (dt, ev) in events {
            t += dt;
            h.now = h.t0 + d(t);
            h.ev(ev);
        }
        h.ev(Event::Signal(Signal::SIGTERM));
        h.now += d(1000);
        h.ev(Event::Signal(Signal::SIGINT));
        for i in 0..3 {
            if matches!(h.m.procs[i].state, ProcState::Spawning) {
                h.ev(Event::Spawned {
                    proc: i,
                    pid: 200 + i as Pid,
                });
            }
        }
        for _ in 0..3 {
            for pid in h.m.live_groups() {
                h.gone(pid, ExitStatus::Signal(9));
            }
        }
        proptest::prop_assert_eq!(h.m.phase(), Phase::Done);
    }
}
