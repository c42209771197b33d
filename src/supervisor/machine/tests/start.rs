//! Starting: dependency order, gates, one-shot dependencies, plans refused before start.

use super::*;

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
    assert_eq!(h.state(1), UnitState::Waiting);
    let a = h.at(100);
    assert_eq!(spawns(&a), [0]);
    let a = h.ev(Event::Spawned { proc: 0, pid: 110 });
    let attempt = probes(&a)[0];
    assert_eq!(h.state(1), UnitState::Waiting);
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
    assert_eq!(h.state(1), UnitState::Waiting);
    let a = h.at(1000);
    assert_eq!(spawns(&a), [0]);
    let a = h.ev(Event::Spawned { proc: 0, pid: 200 });
    assert_eq!(spawns(&a), [1]);
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

pub(super) fn gated() -> Plan {
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
        [UnitState::Ready; 3]
    );
    assert_eq!(s[0].pid, Some(100));
    let v = h.m.version();
    h.ev(Event::Tick);
    assert_eq!(h.m.version(), v, "a no-op tick changes nothing");
}

/// What the machine asks of the watchers, by the process's kind, right after the record it
/// follows: nothing else starts a watcher's work.
#[test]
fn a_ready_master_and_a_failing_worker_ask_the_watchers_right_after_their_records() {
    let watches = |a: &[Action]| -> Vec<WatchRequest> {
        a.iter()
            .filter_map(|x| match x {
                Action::Watch(w) => Some(*w),
                _ => None,
            })
            .collect()
    };
    let mut w = proc("worker", ProcessKind::Worker);
    w.restart.policy = RestartPolicy::OnFailure;
    let mut h = H::new(plan(vec![proc("master", ProcessKind::Master), w]));
    let a = h.start_all();
    assert_eq!(watches(&a), [WatchRequest::Master { proc: 0 }]);
    let at = a
        .iter()
        .position(|x| matches!(x, Action::Watch(_)))
        .unwrap();
    assert!(
        matches!(&a[at - 1], Action::Record(r) if r.unit == "master" && r.kind == RecordKind::Ready)
    );
    let a = h.gone(pid(1), ExitStatus::Code(3));
    assert_eq!(watches(&a), [WatchRequest::Diagnose { proc: 1 }]);
    let at = a
        .iter()
        .position(|x| matches!(x, Action::Watch(_)))
        .unwrap();
    assert!(
        matches!(&a[at - 1], Action::Record(r) if r.unit == "worker" && r.kind == RecordKind::Restarting)
    );
}
