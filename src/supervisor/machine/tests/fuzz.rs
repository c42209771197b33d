//! Arbitrary event sequences (proptest): no panic, and a kill always finishes.

use super::*;

/// One arbitrary input for the machine, with the milliseconds before it.
fn any_event() -> impl proptest::strategy::Strategy<Value = (u64, Event)> {
    use proptest::prelude::*;
    let pid = (100..104i32).prop_map(|p| p as Pid);
    let ev = prop_oneof![
        (0..3usize, pid.clone()).prop_map(|(proc, pid)| Event::Spawned { proc, pid }),
        (0..3usize, pid.clone()).prop_map(|(proc, pid)| Event::Forked { proc, pid }),
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
        (0..10u64, proptest::option::of(0..5u64)).prop_map(|(attempt, n)| Event::Inflight {
            attempt,
            result: n.ok_or_else(|| "refused".to_string()),
        }),
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
        // The drain signal waits for the worker's requests (read by `Inflight` answers).
        p.shutdown.drain = d(2000);
        p.processes[2].stop.inflight = Some(gauge());
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
