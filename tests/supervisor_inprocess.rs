//! Whole runs driven in-process: the supervisor's signals come from a channel
//! (`run_with_signals`), not from the process's own signal handlers, so a signal scenario needs
//! no second process and no real signal to mcsup. The children are real.

use crate::common;

use std::time::Duration;

use common::*;
use mcsup::plan::*;
use mcsup::supervisor::{run_with_signals, RunOptions, SignalEvent};
use nix::sys::signal::Signal;
use tokio::sync::mpsc::unbounded_channel;

const T: Duration = Duration::from_secs(15);

/// master <- store <- worker, all running until stopped; the store stops with SIGINT.
fn chain(env: &TestEnv) -> Plan {
    let master = env.proc("master", ProcessKind::Master, &[]);
    let mut store = env.proc("store", ProcessKind::Store, &[]);
    store.stop.signal = SignalName::SIGINT;
    dep(&mut store, "master");
    let mut worker = env.proc("worker", ProcessKind::Worker, &[]);
    dep(&mut worker, "store");
    env.plan(vec![master, store, worker])
}

/// Run `plan` on a current-thread runtime; once the worker is ready, send `signals` (with the
/// gap between them), and return the outcome.
fn run_and_signal(
    env: &TestEnv,
    plan: Plan,
    signals: Vec<(Duration, SignalEvent)>,
) -> mcsup::supervisor::RunOutcome {
    let events = mcsup::supervisor::events_path(&env.log_dir(), &plan.node.name);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (tx, rx) = unbounded_channel();
    rt.block_on(async move {
        tokio::spawn(async move {
            // Bounded: if the worker never gets ready, the signals go anyway and the test's
            // assertions on the outcome fail instead of the run hanging.
            let start = tokio::time::Instant::now();
            while start.elapsed() < T
                && !read_events(&events)
                    .iter()
                    .any(|e| e.process == "worker" && e.event == "ready")
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            for (gap, ev) in signals {
                tokio::time::sleep(gap).await;
                let _ = tx.send(ev);
            }
        });
        run_with_signals(plan, RunOptions { console: false }, rx).await
    })
    .expect("run")
}

fn stopped_order(env: &TestEnv) -> Vec<String> {
    read_events(&env.log_dir().join(format!("{}.events.jsonl", env.node)))
        .into_iter()
        .filter(|e| e.event == "stopped")
        .map(|e| e.process)
        .collect()
}

#[test]
fn a_drain_from_the_signal_source_tears_down_in_order() {
    let env = TestEnv::new();
    let out = run_and_signal(
        &env,
        chain(&env),
        vec![(Duration::ZERO, SignalEvent::Stop(Signal::SIGUSR1))],
    );
    assert_eq!(out.exit_code, 0, "{}", out.reason);
    assert!(out.reason.contains("SIGUSR1"), "{}", out.reason);
    assert!(!out.sigkill_needed);
    assert_eq!(stopped_order(&env), ["worker", "store", "master"]);
    env.assert_no_leftovers();
}

#[test]
fn a_second_stop_signal_escalates_to_sigkill() {
    let env = TestEnv::new();
    let mut plan = chain(&env);
    // The worker ignores SIGTERM: only the escalation can end it before its grace. It is ready
    // once it says so, after its signal handling is in place (else the first SIGTERM could
    // arrive before the child has set it to ignored).
    plan.processes[2]
        .argv
        .extend(["--ignore-term", "--ready-line", "up"].map(String::from));
    plan.processes[2].readiness = ready_on_line("^up$", 10_000);
    plan.processes[2].stop.grace = Duration::from_secs(30);
    let out = run_and_signal(
        &env,
        plan,
        vec![
            (Duration::ZERO, SignalEvent::Stop(Signal::SIGTERM)),
            // Past the 100 ms that tells a person's second Ctrl-C from Slurm's TERM burst.
            (
                Duration::from_millis(300),
                SignalEvent::Stop(Signal::SIGINT),
            ),
        ],
    );
    assert_eq!(
        out.exit_code,
        mcsup::exit::ExitCode::TeardownNeededSigkill.code(),
        "{}",
        out.reason
    );
    assert!(out.sigkill_needed);
    env.assert_no_leftovers();
}
