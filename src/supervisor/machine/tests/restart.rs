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

/// A worker on GPUs 0 and 1 that restarts on failure (backoff 100 ms, release wait 5 s).
fn on_gpus() -> H {
    let mut w = restarting(proc("w", ProcessKind::Worker), RestartPolicy::OnFailure);
    w.placement = Some(crate::plan::WorkerPlacement {
        endpoint: "agg[0]".into(),
        nodes: vec!["n1".into()],
        rank: 0,
        gpus: vec![0, 1],
        ports: vec![],
    });
    let mut h = H::new(plan(vec![w]));
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    h
}

/// [`on_gpus`]'s worker exits 1: the attempt of the release wait it asks for.
fn crashed(h: &mut H) -> u64 {
    release_asked(&h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(1),
    }))
}

/// The attempt of the release wait among `a`, checking what it asks for.
fn release_asked(a: &[Action]) -> u64 {
    let asked: Vec<_> = a
        .iter()
        .filter_map(|a| match a {
            Action::AwaitRelease {
                attempt,
                pgid,
                gpus,
                within,
            } => Some((*attempt, *pgid, gpus.clone(), *within)),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 1, "{a:?}");
    let (attempt, pgid, gpus, within) = asked[0].clone();
    assert_eq!((pgid, gpus, within), (100, vec![0, 1], d(5_000)));
    attempt
}

#[test]
fn a_restart_on_gpus_waits_for_them_as_well_as_its_backoff() {
    let mut h = on_gpus();
    let a = h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(1),
    });
    let attempt = release_asked(&a);
    assert!(
        detail(&a, "w", RecordKind::Restarting)
            .ends_with("restart 1 in 100 ms, once GPU 0,1 are released by this run (at most 5 s)"),
        "{a:?}"
    );
    // The backoff is over, the GPUs are not: nothing starts; the next wake is the backstop.
    assert!(spawns(&h.at(100)).is_empty());
    assert_eq!(h.state(0), UnitState::BackingOff);
    assert_eq!(h.m.next_deadline(), Some(h.t0 + d(10_000)));
    h.now = h.t0 + d(3_000);
    let a = h.ev(Event::Released {
        attempt,
        result: Ok("GPU 0,1 released 3 s after ...".into()),
    });
    assert_eq!(
        detail(&a, "w", RecordKind::GpuReleased),
        "GPU 0,1 released 3 s after ..."
    );
    assert_eq!(spawns(&a), [0]);
    // A second answer to the same attempt is not news.
    h.ev(Event::Spawned { proc: 0, pid: 101 });
    assert!(records(&h.ev(Event::Released {
        attempt,
        result: Ok("again".into())
    }))
    .is_empty());
}

#[test]
fn gpus_released_before_the_backoff_is_over_wait_for_the_backoff() {
    let mut h = on_gpus();
    let attempt = crashed(&mut h);
    h.now = h.t0 + d(20);
    let a = h.ev(Event::Released {
        attempt,
        result: Ok("released".into()),
    });
    assert!(spawns(&a).is_empty());
    assert_eq!(h.m.next_deadline(), Some(h.t0 + d(100)));
    assert!(spawns(&h.at(99)).is_empty());
    assert_eq!(spawns(&h.at(100)), [0]);
}

#[test]
fn a_release_wait_that_runs_out_or_never_answers_starts_anyway_and_says_so() {
    // The runtime's answer: the wait ran out.
    let mut h = on_gpus();
    let attempt = crashed(&mut h);
    h.now = h.t0 + d(5_000);
    let a = h.ev(Event::Released {
        attempt,
        result: Err("GPU 0 uses 40.0 GiB".into()),
    });
    assert_eq!(
        detail(&a, "w", RecordKind::GpuReleaseLate),
        "GPU 0 uses 40.0 GiB"
    );
    assert_eq!(spawns(&a), [0]);
    // No answer at all: the machine's own bound, 5 s past the wait's.
    let mut h = on_gpus();
    crashed(&mut h);
    assert!(spawns(&h.at(9_999)).is_empty());
    let a = h.at(10_000);
    assert!(
        detail(&a, "w", RecordKind::GpuReleaseLate)
            .starts_with("no answer from the GPU release check within 10 s: starting anyway"),
        "{a:?}"
    );
    assert_eq!(spawns(&a), [0]);
}

#[test]
fn a_teardown_during_a_release_wait_ends_it() {
    let mut h = on_gpus();
    let attempt = crashed(&mut h);
    h.ev(Event::Signal(Signal::SIGTERM));
    assert_eq!(h.state(0), UnitState::Exited);
    assert_eq!(h.m.phase(), Phase::Done);
    let a = h.ev(Event::Released {
        attempt,
        result: Ok("released".into()),
    });
    assert!(records(&a).is_empty() && spawns(&a).is_empty(), "{a:?}");
}

#[test]
fn only_a_process_on_gpus_with_a_wait_asks_for_one() {
    // No GPUs.
    let mut h = H::new(plan(vec![restarting(
        proc("s", ProcessKind::Store),
        RestartPolicy::OnFailure,
    )]));
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    let a = h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(1),
    });
    assert!(!a.iter().any(|a| matches!(a, Action::AwaitRelease { .. })));
    assert_eq!(spawns(&h.at(100)), [0]);
    // GPUs, but a wait of zero.
    let mut h = on_gpus();
    h.m.procs[0].spec.restart.release_wait = Duration::ZERO;
    let a = h.ev(Event::Exited {
        pid: 100,
        status: ExitStatus::Code(1),
    });
    assert!(!a.iter().any(|a| matches!(a, Action::AwaitRelease { .. })));
    assert_eq!(spawns(&h.at(100)), [0]);
}

#[test]
fn srtctls_role_restart_counts_over_the_whole_job_and_never_resets_its_backoff() {
    // roles.<role>.restart as srt-slurm 2.0 writes it: always, 2 restarts per worker over the
    // job, backoff from 1 s doubling. Each run lasts a day: far past mcsup's own reset and
    // window, which srtctl does not have.
    let v: serde_yaml::Value =
        serde_yaml::from_str("{policy: always, max_restarts: 2, backoff_seconds: 1}").unwrap();
    let cfg = crate::plan::role_restart::from_recipe(&v, "roles.agg.restart").unwrap();
    let base = crate::plan::policy::policy_defaults(ProcessKind::Worker).1;
    let mut w = proc("w", ProcessKind::Worker);
    w.restart = crate::plan::policy::apply_restart(base, Some(&cfg), "roles.agg.restart").unwrap();
    w.critical = false;
    let mut h = H::new(plan(vec![w]));
    h.ev(Event::Start);
    h.ev(Event::Spawned { proc: 0, pid: 100 });
    const DAY: u64 = 86_400_000;
    let mut t = 0;
    for (pid, delay) in [(100, 1_000), (101, 2_000)] {
        t += DAY;
        h.now = h.t0 + d(t);
        let a = h.ev(Event::Exited {
            pid,
            status: ExitStatus::Code(0),
        });
        assert!(has(&a, "w", RecordKind::Restarting));
        assert_eq!(h.m.next_deadline(), Some(h.t0 + d(t + delay)), "pid {pid}");
        t += delay;
        assert_eq!(spawns(&h.at(t)), [0]);
        h.ev(Event::Spawned {
            proc: 0,
            pid: pid + 1,
        });
    }
    t += DAY;
    h.now = h.t0 + d(t);
    let a = h.ev(Event::Exited {
        pid: 102,
        status: ExitStatus::Code(0),
    });
    assert!(has(&a, "w", RecordKind::Failed), "{a:?}");
    assert_eq!(h.m.procs[0].restarts, 2);
}
