//! Readiness and liveness probes: schedule, timeouts, stale results, log-line matches.

use super::*;

#[test]
fn readiness_probes_start_at_once_ramp_up_retry_fast_then_back_off_to_max_interval() {
    let mut h = H::new(plan(vec![tcp_ready(
        proc("m", ProcessKind::Master),
        60_000,
    )]));
    h.ev(Event::Start);
    let a = h.ev(Event::Spawned { proc: 0, pid: 100 });
    let p = probes(&a);
    assert_eq!(p.len(), 1, "first probe immediately at spawn");
    let mut attempt = p[0];
    let mut t = Duration::ZERO;
    let us = Duration::from_micros;
    // Fails the attempt in flight (answered at once) and checks that the next one is due exactly
    // `expect` later, and not a microsecond before.
    let fail_and_expect = |h: &mut H, attempt: &mut u64, t: &mut Duration, expect: Duration| {
        h.ev(Event::ProbeDone {
            attempt: *attempt,
            ok: false,
            detail: "refused".into(),
        });
        assert_eq!(h.m.next_deadline(), Some(h.t0 + *t + expect), "at {t:?}");
        assert!(probes(&h.at_time(*t + expect - us(1))).is_empty());
        let a = h.at_time(*t + expect);
        *attempt = probes(&a)[0];
        *t += expect;
    };
    // The ramp: 100 us, then 25 % more per failure (125, 156.25 us, ...), up to the interval.
    fail_and_expect(&mut h, &mut attempt, &mut t, us(100));
    fail_and_expect(&mut h, &mut attempt, &mut t, us(125));
    let mut step = us(125).mul_f64(1.25);
    let mut ramp_steps = 2;
    while step < d(10) {
        fail_and_expect(&mut h, &mut attempt, &mut t, step);
        step = step.mul_f64(1.25);
        ramp_steps += 1;
    }
    // 100 us * 1.25^20 = 8.7 ms is the last step below the 10 ms interval.
    assert_eq!(ramp_steps, 21);
    assert!(t < d(45), "the ramp takes {t:?}");
    // Within FAST_WINDOW a refused TCP probe is retried at the interval, without backing off.
    let fast = super::super::probing::FAST_WINDOW;
    while t < fast {
        fail_and_expect(&mut h, &mut attempt, &mut t, d(10));
    }
    // Then it doubles up to the maximum: 10, 20, 40, 40 ms.
    for expect in [10, 20, 40, 40] {
        fail_and_expect(&mut h, &mut attempt, &mut t, d(expect));
    }
    let a = h.ev(Event::ProbeDone {
        attempt,
        ok: true,
        detail: String::new(),
    });
    assert!(has(&a, "m", RecordKind::Ready));
    assert_eq!(h.state(0), UnitState::Ready);
    // The status no longer shows the last refusal once the process is ready.
    assert_eq!(h.m.snapshot()[0].detail, None);
}

#[test]
fn exec_probes_and_gates_are_never_polled_fast() {
    // An exec probe forks per attempt: at least SLOW_PROBE_MIN_INTERVAL, backing off at once.
    let mut p = tcp_ready(proc("m", ProcessKind::Master), 60_000);
    let r = p.readiness.as_mut().unwrap();
    r.probes = vec![ProbeSpec::Exec {
        argv: vec!["true".into()],
    }];
    r.interval = d(1);
    let mut h = H::new(plan(vec![p]));
    h.ev(Event::Start);
    let a = h.ev(Event::Spawned { proc: 0, pid: 100 });
    let min = super::super::probing::SLOW_PROBE_MIN_INTERVAL.as_millis() as u64;
    let mut attempt = probes(&a)[0];
    let mut t = 0;
    for expect in [min, 2 * min, 4 * min] {
        h.ev(Event::ProbeDone {
            attempt,
            ok: false,
            detail: "exit 1".into(),
        });
        assert_eq!(h.m.next_deadline(), Some(h.t0 + d(t + expect)));
        attempt = probes(&h.at(t + expect))[0];
        t += expect;
    }
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
    assert_eq!(h.state(0), UnitState::Starting);
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
    assert_eq!(h.state(0), UnitState::Stopping);
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
    assert_eq!(h.state(0), UnitState::Starting);
    let a = h.ev(Event::LogMatched {
        proc: 0,
        generation: 1,
        probe: 0,
    });
    assert!(has(&a, "m", RecordKind::Ready));
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
            // Its stacks are dumped first; then it is stopped.
            assert!(a
                .iter()
                .any(|x| matches!(x, Action::Watch(WatchRequest::Dump { proc: 0, pgid: 100 }))));
            assert!(signals(&a).is_empty(), "{a:?}");
            let a = h.ev(Event::Dumped { proc: 0 });
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
    h.ev(Event::Dumped { proc: 0 });
    assert_eq!(h.state(0), UnitState::Stopping);
    h.ev(Event::Signal(Signal::SIGTERM));
    let a = h.gone(100, ExitStatus::Signal(15));
    assert!(spawns(&a).is_empty());
    assert_eq!(h.m.phase(), Phase::Done);
}

#[test]
fn a_long_readiness_wait_is_reported_at_a_calm_cadence() {
    let mut h = H::new(plan(vec![tcp_ready(
        proc("m", ProcessKind::Master),
        600_000,
    )]));
    h.ev(Event::Start);
    let mut acts = h.ev(Event::Spawned { proc: 0, pid: 100 });
    let mut reports: Vec<(u64, String)> = Vec::new();
    loop {
        let mut all = std::mem::take(&mut acts);
        for attempt in probes(&all.clone()) {
            all.extend(h.ev(Event::ProbeDone {
                attempt,
                ok: false,
                detail: "connection refused".into(),
            }));
        }
        let at = h.now.duration_since(h.t0).as_millis() as u64;
        for a in &all {
            if let Action::Record(r) = a {
                if r.kind == RecordKind::StillWaiting {
                    reports.push((at, r.detail.clone().unwrap_or_default()));
                }
            }
        }
        let next = h.m.next_deadline().expect("a wait is timed");
        let t = next.duration_since(h.t0);
        if t > d(140_000) {
            break;
        }
        acts = h.at_time(t);
    }
    let times: Vec<u64> = reports.iter().map(|(t, _)| *t).collect();
    // 5 s, then gaps of 10, 20, 40 and 60 s (the cap): never a line per probe attempt.
    assert_eq!(times, [5_000, 15_000, 35_000, 75_000, 135_000]);
    assert!(
        reports[0].1.starts_with("tcp 127.0.0.1:1 — 5 s of 600 s")
            && reports[0].1.contains("connection refused"),
        "{}",
        reports[0].1
    );
    assert!(
        reports[4].1.contains("— 135 s of 600 s"),
        "{}",
        reports[4].1
    );
}

#[test]
fn a_new_probe_complaint_reaches_the_status_file_a_repeated_one_waits() {
    // The status file is rewritten when the machine's version moves. A probe retried every
    // millisecond must not rewrite it each time, but its first complaint, or a different one,
    // is news: without it the status shows no reason until the 5 s progress record.
    let fail = |h: &mut H, attempt: u64, detail: &str| {
        let before = h.m.version();
        h.ev(Event::ProbeDone {
            attempt,
            ok: false,
            detail: detail.into(),
        });
        h.m.version() != before
    };
    // A process's readiness probe.
    let mut h = H::new(plan(vec![tcp_ready(
        proc("m", ProcessKind::Master),
        60_000,
    )]));
    h.ev(Event::Start);
    let mut attempt = probes(&h.ev(Event::Spawned { proc: 0, pid: 100 }))[0];
    for (detail, news) in [("refused", true), ("refused", false), ("timed out", true)] {
        assert_eq!(fail(&mut h, attempt, detail), news, "{detail}");
        assert_eq!(
            h.m.snapshot()[0].detail.as_deref(),
            Some(format!("not ready yet: {detail}").as_str())
        );
        let next = h.m.next_deadline().unwrap().duration_since(h.t0);
        attempt = probes(&h.at_time(next))[0];
    }
    assert_eq!(h.m.snapshot()[0].probe_failures, 3);
    // A gate's probe.
    let mut h = H::new(super::start::gated());
    let mut attempt = probes(&h.ev(Event::Start))[0];
    for (detail, news) in [("refused", true), ("refused", false), ("no route", true)] {
        assert_eq!(fail(&mut h, attempt, detail), news, "{detail}");
        let gate = &h.m.snapshot()[0];
        assert_eq!(gate.name, "remote-master");
        assert_eq!(gate.detail.as_deref(), Some(detail));
        let next = h.m.next_deadline().unwrap().duration_since(h.t0);
        attempt = probes(&h.at_time(next))[0];
    }
    assert_eq!(h.m.snapshot()[0].probe_failures, 3);
}

#[test]
fn a_fatal_line_fails_the_live_incarnation_that_printed_it_and_no_other() {
    let mut h = H::new(plan(vec![restarting(
        proc("w", ProcessKind::Worker),
        RestartPolicy::OnFailure,
    )]));
    h.start_all();
    assert_eq!(h.state(0), UnitState::Ready);
    let gen = h.m.procs[0].generation;
    // A line of an earlier incarnation, read late: nothing.
    let a = h.ev(Event::FatalLine {
        proc: 0,
        generation: gen - 1,
        detail: "old".into(),
    });
    assert!(a.is_empty(), "{a:?}");
    let a = h.ev(Event::FatalLine {
        proc: 0,
        generation: gen,
        detail: "a fatal log line: RuntimeError: CUDA error: out of memory".into(),
    });
    assert!(detail(&a, "w", RecordKind::LivenessFailed).ends_with("out of memory"));
    assert!(signals(&a).is_empty(), "the dump first: {a:?}");
    let a = h.ev(Event::Dumped { proc: 0 });
    assert!(a.iter().any(|x| matches!(
        x,
        Action::Signal {
            signal: Signal::SIGTERM,
            ..
        }
    )));
    assert_eq!(h.state(0), UnitState::Stopping);
    // While it stops, another line changes nothing; once gone, its policy restarts it.
    assert!(h
        .ev(Event::FatalLine {
            proc: 0,
            generation: gen,
            detail: "again".into(),
        })
        .is_empty());
    let a = h.gone(pid(0), ExitStatus::Signal(libc::SIGTERM));
    assert!(has(&a, "w", RecordKind::Restarting), "{a:?}");
}

/// A process whose liveness failed is stopped once its stack dump is written, or after
/// `DUMP_WITHIN` without it; one that exits meanwhile is not stopped again; the teardown does
/// not wait for a dump.
#[test]
fn a_stalled_process_is_dumped_then_stopped_and_the_dump_is_bounded() {
    let bound = super::super::stall::DUMP_WITHIN.as_millis() as u64;
    let fail = |h: &mut H, at: u64| {
        let a = h.at(at);
        let attempt = probes(&a)[0];
        h.ev(Event::ProbeDone {
            attempt,
            ok: false,
            detail: "timed out".into(),
        })
    };
    // No dump within the bound: stopped at the bound.
    let mut s = restarting(proc("s", ProcessKind::Store), RestartPolicy::OnFailure);
    s.liveness = Some(tcp_liveness(1));
    let mut h = H::new(plan(vec![s.clone()]));
    h.start_all();
    let a = fail(&mut h, 1000);
    assert!(signals(&a).is_empty());
    assert_eq!(h.m.next_deadline(), Some(h.t0 + d(1000 + bound)));
    assert!(signals(&h.at(1000 + bound - 1)).is_empty());
    let a = h.at(1000 + bound);
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGTERM), (100, Signal::SIGCONT)]
    );
    // A late dump changes nothing.
    assert!(signals(&h.ev(Event::Dumped { proc: 0 })).is_empty());
    // It exits while its stacks are dumped: its exit is handled, no stop follows the dump.
    let mut h = H::new(plan(vec![s.clone()]));
    h.start_all();
    fail(&mut h, 1000);
    let a = h.gone(100, ExitStatus::Code(1));
    assert!(has(&a, "s", RecordKind::Restarting), "{a:?}");
    assert!(signals(&h.ev(Event::Dumped { proc: 0 })).is_empty());
    // The teardown begins meanwhile: it stops the process itself.
    let mut h = H::new(plan(vec![s]));
    h.start_all();
    fail(&mut h, 1000);
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGTERM), (100, Signal::SIGCONT)]
    );
    h.gone(100, ExitStatus::Signal(15));
    assert!(signals(&h.ev(Event::Dumped { proc: 0 })).is_empty());
    assert_eq!(h.m.phase(), Phase::Done);
}
