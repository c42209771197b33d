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

/// The chain with a worker whose engine counts its requests, and a drain of `drain_ms`.
fn drained_chain(drain_ms: u64) -> Plan {
    let mut p = chain();
    p.shutdown.drain = d(drain_ms);
    p.processes[2].stop.inflight = Some(gauge());
    p
}

#[test]
fn a_drain_waits_for_the_workers_requests_before_its_stop_signal() {
    let mut h = H::new(drained_chain(30_000));
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGUSR1));
    let why = detail(&a, "mcsup", RecordKind::ShutdownRequested);
    assert!(
        why.contains("in-flight requests have 30 s to end, then the teardown 25 s"),
        "{why}"
    );
    assert!(signals(&a).is_empty(), "nobody is signalled yet: {a:?}");
    assert_eq!(h.state(2), UnitState::Draining);
    let [first] = reads(&a)[..] else {
        panic!("one read: {a:?}")
    };
    let a = h.ev(Event::Inflight {
        attempt: first,
        result: Ok(8),
    });
    let said = detail(&a, "worker", RecordKind::Draining);
    assert!(
        said.contains("8 in flight: waiting up to 30 s for them to end before SIGTERM"),
        "{said}"
    );
    assert!(signals(&a).is_empty() && reads(&a).is_empty());
    // The next read comes after the poll interval, not before.
    assert!(reads(&h.at(400)).is_empty());
    let a = h.at(500);
    let [second] = reads(&a)[..] else {
        panic!("{a:?}")
    };
    let a = h.ev(Event::Inflight {
        attempt: second,
        result: Ok(3),
    });
    assert!(records(&a).is_empty() && signals(&a).is_empty(), "{a:?}");
    // A stale answer (an earlier attempt) changes nothing.
    assert!(h
        .ev(Event::Inflight {
            attempt: first,
            result: Ok(0)
        })
        .is_empty());
    let a = h.at(1000);
    let [third] = reads(&a)[..] else {
        panic!("{a:?}")
    };
    let a = h.ev(Event::Inflight {
        attempt: third,
        result: Ok(0),
    });
    let said = detail(&a, "worker", RecordKind::Drained);
    assert_eq!(said, "drained 8 in-flight request(s) in 1 s: SIGTERM now");
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
    // Its grace starts now: the usual 1 s, not shortened by the drain.
    assert!(signals(&h.at(1900)).is_empty());
    let a = h.gone(102, ExitStatus::Code(0));
    assert_eq!(signals(&a), [(101, Signal::SIGINT), (101, Signal::SIGCONT)]);
    h.gone(101, ExitStatus::Code(0));
    h.gone(100, ExitStatus::Code(0));
    assert_eq!(h.m.phase(), Phase::Done);
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn a_drain_that_runs_out_of_time_says_how_many_were_left_then_stops() {
    let mut h = H::new(drained_chain(2000));
    h.start_all();
    let mut a = h.ev(Event::Signal(Signal::SIGUSR1));
    let mut t = 0;
    while t < 2000 {
        for attempt in reads(&a) {
            h.ev(Event::Inflight {
                attempt,
                result: Ok(5),
            });
        }
        t += 500;
        a = h.at(t);
    }
    let said = detail(&a, "worker", RecordKind::DrainTimeout);
    assert_eq!(
        said,
        "drain time of 2 s spent with 5 in flight (of 5 at the start): SIGTERM now"
    );
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
    // The teardown deadline counts from the end of the drain: 2 s + 25 s.
    assert!(signals(&h.at(2999)).is_empty());
    let a = h.at(3000);
    assert_eq!(signals(&a), [(102, Signal::SIGKILL)], "its own 1 s grace");
}

#[test]
fn an_unreadable_gauge_does_not_hold_the_drain() {
    let mut h = H::new(drained_chain(30_000));
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGUSR1));
    let a = h.ev(Event::Inflight {
        attempt: reads(&a)[0],
        result: Err("GET http://127.0.0.1:1/metrics: connection refused".into()),
    });
    let said = detail(&a, "worker", RecordKind::Draining);
    assert!(
        said.starts_with("cannot read its in-flight requests (GET http://127.0.0.1:1/metrics: connection refused): SIGTERM now"),
        "{said}"
    );
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
}

#[test]
fn a_stop_request_does_not_wait_for_requests() {
    let mut h = H::new(drained_chain(30_000));
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert!(reads(&a).is_empty());
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
    let why = detail(&a, "mcsup", RecordKind::ShutdownRequested);
    assert!(!why.contains("in-flight"), "{why}");
}

#[test]
fn a_worker_that_exits_while_draining_is_stopped_not_restarted() {
    let mut p = drained_chain(30_000);
    p.processes[2].restart.policy = RestartPolicy::Always;
    let mut h = H::new(p);
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGUSR1));
    h.ev(Event::Inflight {
        attempt: reads(&a)[0],
        result: Ok(2),
    });
    let a = h.gone(102, ExitStatus::Code(1));
    assert!(spawns(&a).is_empty());
    assert!(has(&a, "worker", RecordKind::Stopped));
    assert_eq!(
        signals(&a)[..2],
        [(102, Signal::SIGKILL), (101, Signal::SIGINT)]
    );
}

/// [`drained_chain`] behind a Dynamo frontend (pid 103), started, and the drain signal sent:
/// the machine and what it did.
fn drained_frontend(drain_ms: u64) -> (H, Vec<Action>) {
    let mut p = drained_chain(drain_ms);
    let mut frontend = proc("frontend", ProcessKind::Frontend);
    frontend.stop.inflight = Some(crate::engine::stop::MetricSum::of_dynamo_frontend(2));
    dep(&mut frontend, "worker", DependencyCondition::Healthy);
    p.processes.push(frontend);
    let mut h = H::new(p);
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGUSR1));
    (h, a)
}

#[test]
fn a_drained_frontend_is_read_signalled_at_once_and_given_the_drain_to_finish() {
    let (mut h, a) = drained_frontend(30_000);
    assert_eq!(h.state(3), UnitState::Draining);
    assert_eq!(
        h.state(2),
        UnitState::Ready,
        "the worker waits for the frontend"
    );
    let a = h.ev(Event::Inflight {
        attempt: reads(&a)[0],
        result: Ok(8),
    });
    let said = detail(&a, "frontend", RecordKind::Draining);
    assert_eq!(
        said,
        "8 in flight: SIGTERM stops admission; it has 30 s to finish them"
    );
    assert_eq!(
        signals(&a),
        [(103, Signal::SIGTERM), (103, Signal::SIGCONT)]
    );
    // Not SIGKILLed after its 1 s grace: it has the drain and then its grace.
    assert!(signals(&h.at(30_999)).is_empty());
    h.now = h.t0 + d(12_000);
    let a = h.gone(103, ExitStatus::Code(0));
    let said = detail(&a, "frontend", RecordKind::Drained);
    assert_eq!(
        said,
        "drained 8 in-flight request(s) in 12 s: it stopped admitting on SIGTERM and exited once they were done"
    );
    // Then the worker is read, finds nothing in flight, and stops without a drained event.
    let a2 = h.ev(Event::Inflight {
        attempt: reads(&a)[0],
        result: Ok(0),
    });
    assert!(!has(&a2, "worker", RecordKind::Drained));
    assert_eq!(
        signals(&a2),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
}

#[test]
fn a_frontend_past_its_drain_and_grace_is_killed() {
    let (mut h, a) = drained_frontend(3000);
    h.ev(Event::Inflight {
        attempt: reads(&a)[0],
        result: Ok(1),
    });
    assert!(signals(&h.at(3999)).is_empty());
    let a = h.at(4000);
    assert_eq!(signals(&a), [(103, Signal::SIGKILL)]);
    let a = h.gone(103, ExitStatus::Signal(9));
    assert!(!has(&a, "frontend", RecordKind::Drained), "{a:?}");
}

#[test]
fn a_node_holding_ranks_of_another_nodes_step_stays_up_until_told() {
    // Nothing of its own to run: without ranks to hold, the node is done at once.
    let mut h = H::new(plan(vec![]));
    h.start_all();
    h.at(1_000);
    assert_ne!(h.m.phase(), Phase::Running);
    // Holding ranks of a TRT-LLM endpoint led elsewhere, it waits for the drain.
    let mut p = plan(vec![]);
    p.shutdown.holds_ranks_of = vec!["decode[0] (step mcsup.trtllm-decode-0, led by n2)".into()];
    let mut h = H::new(p);
    h.start_all();
    h.at(60_000);
    assert_eq!(h.m.phase(), Phase::Running);
    h.ev(Event::Signal(Signal::SIGUSR1));
    h.at(61_000);
    assert_ne!(h.m.phase(), Phase::Running);
}

#[test]
fn a_failed_canary_with_the_drain_policy_tears_down_with_exit_code_6() {
    let mut h = H::new(chain());
    h.start_all();
    let a = h.ev(Event::EndpointFailed {
        detail: "the endpoint's canary failed (3 in a row)".into(),
    });
    assert!(has(&a, "mcsup", RecordKind::ShutdownRequested));
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
    for pid in [102, 101, 100] {
        h.gone(pid, ExitStatus::Code(0));
    }
    assert_eq!(h.m.exit_code(), ExitCode::LivenessFailed.code());
    assert_eq!(h.m.exit_code(), 6);
}

/// A child whose exec hangs (its program on a file system that stopped answering) is a live
/// group: the teardown stops it in its tier like a running one, and its late `Spawned` changes
/// nothing.
#[test]
fn a_process_whose_exec_hangs_is_stopped_in_its_tier() {
    let mut h = H::new(chain());
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    h.ev(Event::Spawned { proc: 1, pid: 101 });
    // The worker is forked; its exec does not finish.
    h.ev(Event::Forked { proc: 2, pid: 102 });
    assert_eq!(h.state(2), UnitState::Spawning);
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)],
        "the worker's tier first, its group reached before its exec"
    );
    assert_eq!(h.state(2), UnitState::Stopping);
    // The signal ends the exec's wait: the handshake closes, then the exit.
    let a = h.ev(Event::Spawned { proc: 2, pid: 102 });
    assert!(!has(&a, "worker", RecordKind::Spawned), "{a:?}");
    let a = h.gone(102, ExitStatus::Signal(15));
    assert!(has(&a, "worker", RecordKind::Stopped));
    assert_eq!(signals(&a), [(101, Signal::SIGINT), (101, Signal::SIGCONT)]);
}

/// At the deadline a hung exec is SIGKILLed with the rest; an exec that failed fails the process.
#[test]
fn a_hung_exec_is_killed_at_the_deadline_and_a_failed_one_fails() {
    let mut h = H::new(chain());
    h.ev(Event::Start);
    h.ev(Event::Forked { proc: 0, pid: 100 });
    let a = h.ev(Event::SpawnFailed {
        proc: 0,
        error: "/mnt/x: No such file or directory (os error 2)".into(),
    });
    assert!(has(&a, "master", RecordKind::Failed), "{a:?}");
    assert_eq!(h.m.exit_code(), ExitCode::SpawnFailed.code());

    let mut h = H::new(chain());
    h.ev(Event::Start);
    h.ev(Event::Forked { proc: 0, pid: 100 });
    h.ev(Event::Signal(Signal::SIGTERM));
    // SIGTERM did not end it (the exec waits uninterruptibly): the deadline kills the group.
    let a = h.at(60_000);
    assert!(signals(&a).contains(&(100, Signal::SIGKILL)), "{a:?}");
}

/// Round 4's M5: USR1 drains; a SIGTERM 2 s later (Slurm's KillWait is near) ends the drain's
/// wait at once: the worker is stopped now, not after its 30 s, and the teardown's deadline
/// counts from the SIGTERM.
#[test]
fn a_stop_request_during_a_drain_ends_the_drains_wait() {
    let mut h = H::new(drained_chain(30_000));
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGUSR1));
    let [first] = reads(&a)[..] else {
        panic!("one read: {a:?}")
    };
    h.ev(Event::Inflight {
        attempt: first,
        result: Ok(2),
    });
    assert_eq!(h.state(2), UnitState::Draining);
    h.now = h.t0 + d(2000);
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    let said = detail(&a, "mcsup", RecordKind::DrainCut);
    assert!(
        said.starts_with(
            "SIGTERM during the drain (28 s of it left): a stop request does not wait for requests"
        ),
        "{said}"
    );
    assert!(!has(&a, "mcsup", RecordKind::SignalIgnored), "{a:?}");
    let cut = detail(&a, "worker", RecordKind::DrainTimeout);
    assert_eq!(
        cut,
        "the drain was cut short by SIGTERM with 2 in flight: SIGTERM now"
    );
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
    // The deadline is the teardown's from now (25 s), not the drain's 30 s plus it.
    let a = h.at(2000 + 25_000);
    assert!(has(&a, "mcsup", RecordKind::Deadline), "{a:?}");
    // A second SIGTERM later still escalates, as without a drain.
    let mut h = H::new(drained_chain(30_000));
    h.start_all();
    h.ev(Event::Signal(Signal::SIGUSR1));
    h.now = h.t0 + d(1000);
    h.ev(Event::Signal(Signal::SIGTERM));
    h.now = h.t0 + d(5000);
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert!(has(&a, "mcsup", RecordKind::Escalated), "{a:?}");
}

/// The re-run of round 4's M5: a SIGTERM during the drain reaches a frontend already signalled
/// at the drain's start (it was finishing what it admitted, with the drain and its grace): from
/// the SIGTERM it has its own grace, then the worker behind it is stopped, all before the deadline.
#[test]
fn a_stop_request_during_a_drain_gives_a_draining_frontend_its_grace_from_now() {
    let (mut h, a) = drained_frontend(30_000);
    h.ev(Event::Inflight {
        attempt: reads(&a)[0],
        result: Ok(2),
    });
    assert_eq!(h.state(3), UnitState::Stopping);
    h.now = h.t0 + d(2000);
    h.ev(Event::Signal(Signal::SIGTERM));
    // Its grace (1 s) from the SIGTERM, not the drain's 30 s and then its grace.
    assert_eq!(h.m.next_deadline(), Some(h.t0 + d(3000)));
    let a = h.at(3000);
    assert_eq!(signals(&a), [(103, Signal::SIGKILL)]);
    let a = h.gone(103, ExitStatus::Signal(9));
    // The worker's drain is over as it begins (the cut): it is stopped at once, long before the
    // deadline.
    assert!(has(&a, "worker", RecordKind::DrainTimeout), "{a:?}");
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
}
