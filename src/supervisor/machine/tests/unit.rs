//! Ranks of a worker over several nodes: reported down, never restarted alone, stopped, started
//! and given up when the coordinator says; a failed peer node drains this one.

use super::*;

/// A store and a worker that is rank `rank` of `decode[0]` over n2, n3 (policy always).
fn rank_plan() -> Plan {
    let store = proc("store", ProcessKind::Store);
    let mut w = restarting(proc("w", ProcessKind::Worker), RestartPolicy::Always);
    dep(&mut w, "store", DependencyCondition::Healthy);
    w.restart.unit = Some(crate::plan::RestartUnit {
        worker: "decode[0]".into(),
        nodes: vec!["n2".into(), "n3".into()],
    });
    plan(vec![store, w])
}

fn downs(a: &[Action]) -> Vec<(usize, Option<ExitStatus>)> {
    a.iter()
        .filter_map(|a| match a {
            Action::RankDown { proc, exit } => Some((*proc, *exit)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_rank_that_dies_waits_for_its_group_then_reports_down_and_never_restarts_alone() {
    let mut h = H::new(rank_plan());
    h.start_all();
    let a = h.ev(Event::Exited {
        pid: pid(1),
        status: ExitStatus::Code(1),
    });
    // Its group is killed and watched; nothing is reported until it is empty.
    assert!(signals(&a).contains(&(pid(1), Signal::SIGKILL)));
    assert!(downs(&a).is_empty());
    let a = h.ev(Event::GroupEmpty { pgid: pid(1) });
    assert_eq!(downs(&a), [(1, Some(ExitStatus::Code(1)))]);
    assert!(has(&a, "w", RecordKind::RankDown));
    assert_eq!(h.state(1), UnitState::BackingOff);
    // However long: the policy says always, but only the coordinator starts it.
    assert!(spawns(&h.at(600_000)).is_empty());
    assert_eq!(h.m.next_deadline(), None);
    // Told to stop (the generation it failed in): down already, said again.
    let a = h.ev(Event::RankStop { proc: 1 });
    assert_eq!(downs(&a), [(1, None)]);
    let a = h.ev(Event::RankStart {
        proc: 1,
        generation: 1,
    });
    assert!(detail(&a, "w", RecordKind::Restarting).contains("generation 1 of decode[0]"));
    assert_eq!(spawns(&a), [1]);
    assert_eq!(h.m.procs[1].restarts, 1);
    // A second start of the same generation does nothing.
    h.ev(Event::Spawned { proc: 1, pid: 300 });
    assert!(spawns(&h.ev(Event::RankStart {
        proc: 1,
        generation: 1
    }))
    .is_empty());
}

#[test]
fn a_running_rank_told_to_stop_stops_by_its_rules_then_reports_down() {
    let mut h = H::new(rank_plan());
    h.start_all();
    let a = h.ev(Event::RankStop { proc: 1 });
    assert_eq!(
        signals(&a),
        [(pid(1), Signal::SIGTERM), (pid(1), Signal::SIGCONT)]
    );
    assert!(downs(&a).is_empty());
    // Its grace ends in SIGKILL.
    assert!(signals(&h.at(1000)).contains(&(pid(1), Signal::SIGKILL)));
    let a = h.gone(pid(1), ExitStatus::Signal(9));
    assert_eq!(downs(&a), [(1, None)]);
    // The store was never touched.
    assert_eq!(h.state(0), UnitState::Ready);
}

#[test]
fn a_rank_given_up_fails_and_its_critical_setting_decides() {
    let mut h = H::new(rank_plan());
    h.start_all();
    let a = h.ev(Event::RankGiveUp {
        proc: 1,
        reason: "decode[0] given up: restart limit reached".into(),
    });
    assert_eq!(signals(&a)[0], (pid(1), Signal::SIGTERM));
    let a = h.gone(pid(1), ExitStatus::Signal(15));
    assert!(detail(&a, "w", RecordKind::Failed).contains("restart limit reached"));
    // Critical: the node tears down.
    assert_eq!(h.m.phase(), Phase::Stopping);
    // Not critical: the node keeps serving without it.
    // Not critical, in a job of several nodes: the job keeps serving without it, and this node
    // stays up even once nothing runs here (its end would drain the job).
    let mut p = rank_plan();
    p.processes[1].critical = false;
    p.control = Some(crate::plan::ControlSpec {
        coordinator: "n1".into(),
        address: "127.0.0.1".into(),
        port: 1,
        secret: "/nonexistent/control.secret".into(),
        nodes: vec!["n1".into(), "n2".into(), "n3".into()],
        silent: crate::plan::ControlSpec::SILENT,
        stores_at_once: 0,
    });
    let mut h = H::new(p.clone());
    h.start_all();
    h.gone(pid(1), ExitStatus::Code(3));
    h.ev(Event::RankGiveUp {
        proc: 1,
        reason: "policy".into(),
    });
    assert_eq!(h.state(1), UnitState::Failed);
    assert_eq!(h.state(0), UnitState::Ready);
    assert_ne!(h.m.phase(), Phase::Stopping);
    h.m.procs[0].spec.critical = false;
    let a = h.gone(pid(0), ExitStatus::Code(1));
    assert!(detail(&a, "mcsup", RecordKind::Waiting).contains("this node stays up"));
    assert_ne!(h.m.phase(), Phase::Stopping);
    // Only a stop ends it.
    h.ev(Event::Signal(Signal::SIGTERM));
    assert_eq!(h.m.phase(), Phase::Done);
    // One node (no peers): every worker ended, the node finishes, with failures.
    p.control = None;
    let mut h = H::new(p);
    h.start_all();
    h.gone(pid(1), ExitStatus::Code(3));
    h.ev(Event::RankGiveUp {
        proc: 1,
        reason: "policy".into(),
    });
    assert_eq!(h.m.phase(), Phase::Stopping);
}

#[test]
fn a_peer_node_failing_drains_this_node_and_ranks_are_not_reported_in_the_teardown() {
    let mut h = H::new(rank_plan());
    h.start_all();
    let a = h.ev(Event::PeerFailed {
        detail: "node n3 failed: critical `w` failed (exit code 1)".into(),
    });
    assert!(detail(&a, "mcsup", RecordKind::ShutdownRequested).contains("node n3 failed"));
    assert_eq!(h.m.phase(), Phase::Stopping);
    let mut all = Vec::new();
    all.extend(h.gone(pid(1), ExitStatus::Signal(15)));
    all.extend(h.gone(pid(0), ExitStatus::Signal(15)));
    assert!(downs(&all).is_empty());
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn without_a_unit_nothing_changes() {
    // A plain restarting worker restarts on its own, never reported.
    let mut p = rank_plan();
    p.processes[1].restart.unit = None;
    let mut h = H::new(p);
    h.start_all();
    let a = h.gone(pid(1), ExitStatus::Code(1));
    assert!(downs(&a).is_empty());
    assert_eq!(spawns(&h.at(100)), [1]);
    // And the coordinator's words for a process that is no rank are ignored.
    let a = h.ev(Event::RankStop { proc: 1 });
    assert!(a.is_empty());
}

#[test]
fn a_rank_on_gpus_is_reported_down_once_they_are_released_or_the_wait_runs_out() {
    let mut p = rank_plan();
    p.processes[1].placement = Some(crate::plan::WorkerPlacement {
        endpoint: "decode[0]".into(),
        nodes: vec!["n2".into(), "n3".into()],
        rank: 0,
        gpus: vec![0, 1],
        ports: vec![],
    });
    for answered in [true, false] {
        let mut h = H::new(p.clone());
        h.start_all();
        let mut a = h.ev(Event::Exited {
            pid: pid(1),
            status: ExitStatus::Code(1),
        });
        a.extend(h.ev(Event::GroupEmpty { pgid: pid(1) }));
        let attempt = a
            .iter()
            .find_map(|a| match a {
                Action::AwaitRelease {
                    attempt,
                    pgid,
                    gpus,
                    ..
                } if *pgid == pid(1) && *gpus == [0, 1] => Some(*attempt),
                _ => None,
            })
            .expect("a release wait");
        assert!(downs(&a).is_empty(), "not before its GPUs are free");
        assert!(detail(&a, "w", RecordKind::RankDown).contains("once GPU 0,1 are released"));
        // Told to stop meanwhile: its report is still to come, not a second one.
        assert!(downs(&h.ev(Event::RankStop { proc: 1 })).is_empty());
        let a = if answered {
            h.ev(Event::Released {
                attempt,
                result: Ok("released 0.4 s after the exit".into()),
            })
        } else {
            // 5 s of release wait, 5 s of grace for the answer.
            assert!(downs(&h.at(9_999)).is_empty());
            h.at(10_000)
        };
        assert_eq!(
            downs(&a),
            [(1, Some(ExitStatus::Code(1)))],
            "answered: {answered}"
        );
        let kind = if answered {
            RecordKind::GpuReleased
        } else {
            RecordKind::GpuReleaseLate
        };
        assert!(has(&a, "w", kind));
        assert_eq!(h.m.next_deadline(), None);
        assert_eq!(
            spawns(&h.ev(Event::RankStart {
                proc: 1,
                generation: 1
            })),
            [1]
        );
    }
}
