//! Exits and restart policy: backoff, limits, windows, success codes, exit codes, held deaths.

use super::*;

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
        assert_eq!(h.state(0), UnitState::BackingOff);
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
        if h.state(0) == UnitState::Failed {
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
    assert_eq!(h.state(0), UnitState::Failed);
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
    assert_eq!(h.state(0), UnitState::BackingOff);
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
fn a_sigterm_death_nobody_followed_up_is_judged_after_the_settle_time() {
    let p = plan(vec![restarting(
        proc("s", ProcessKind::Store),
        RestartPolicy::OnFailure,
    )]);
    let mut h = H::new(p);
    h.start_all();
    let a = h.gone(100, ExitStatus::Signal(libc::SIGTERM));
    assert!(a.is_empty(), "{a:?}");
    assert_eq!(h.state(0), UnitState::Ready, "not judged yet");
    let settle = SIGNAL_DEATH_SETTLE.as_millis() as u64;
    assert!(records(&h.at(settle - 1)).is_empty());
    let a = h.at(settle);
    assert!(has(&a, "s", RecordKind::Restarting), "{a:?}");
    assert_eq!(h.state(0), UnitState::BackingOff);
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
