//! Teardown: tiers, signals, escalation, the deadline, workers done, the backstop.

use super::*;

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
    assert_eq!(h.state(2), UnitState::Stopping);
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
    assert_eq!(h.state(0), UnitState::Spawning);
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
