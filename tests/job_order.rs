//! Two nodes' mcsups on this host joined by the control connection (issue: the whole job in
//! order): n1 coordinates, each runs one worker (`mcsup-testchild`). Real processes, real
//! signals; the peer's silence shortened to 2 s (`ControlSpec::silent`, 10 s in the product).

use crate::common;

use std::time::Duration;

use common::*;
use mcsup::plan::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const T: Duration = Duration::from_secs(20);

/// n1 (the coordinator) and n2, each with a worker, both joined.
fn two_nodes() -> (TestEnv, TestEnv, Mcsup, Mcsup) {
    let e1 = TestEnv::new();
    let mut e2 = TestEnv::new();
    e2.node = "n2".into();
    let control = ControlSpec {
        coordinator: "n1".into(),
        address: "127.0.0.1".into(),
        port: common::free_port(),
        secret: e1.log_dir().join("control.secret"),
        nodes: vec!["n1".into(), "n2".into()],
        silent: Duration::from_secs(2),
    };
    let mut p1 = e1.plan(vec![e1.up("worker", ProcessKind::Worker, &[])]);
    p1.control = Some(control.clone());
    let mut p2 = e2.plan(vec![e2.up("worker", ProcessKind::Worker, &[])]);
    p2.control = Some(control);
    p2.node.infra_node = "n1".into();
    p2.node.runs_master = false;
    let mut m1 = e1.start(&p1);
    let mut m2 = e2.start(&p2);
    for m in [&mut m1, &mut m2] {
        m.wait_event("worker", "ready", T);
        wait_for("the node to join", T, || {
            m.stderr()
                .contains("joined the job's control connection")
                .then_some(())
        });
    }
    (e1, e2, m1, m2)
}

/// SIGSTOP (or SIGCONT) a node's mcsup and its worker's group, as `scontrol suspend` does.
fn signal_node(m: &Mcsup, sig: Signal) {
    let worker = m.pid_of("worker").expect("worker pid");
    kill(Pid::from_raw(m.pid()), sig).unwrap();
    kill(Pid::from_raw(-worker), sig).unwrap();
}

fn peer_failed(m: &Mcsup) -> Option<String> {
    m.events()
        .iter()
        .find(|e| e.event == "peer-failed")
        .map(|e| e.raw["detail"].as_str().unwrap_or_default().to_string())
}

/// A node that stops answering (stopped alone: its mcsup cannot say anything) is gone after the
/// silent period: the coordinator drains the job. Before, each heartbeat this side sent restarted
/// the wait for the peer's line, so a silent peer was never called gone.
#[test]
fn a_node_that_stops_answering_is_gone_after_the_silent_period() {
    let (e1, e2, mut m1, mut m2) = two_nodes();
    signal_node(&m2, Signal::SIGSTOP);
    let ev = m1.wait_event("mcsup", "peer-failed", T);
    let detail = ev.raw["detail"].as_str().unwrap_or_default().to_string();
    assert!(
        detail.contains("node n2 failed") && detail.contains("silent for 2 s"),
        "{detail}"
    );
    signal_node(&m2, Signal::SIGCONT);
    // n1 drains and ends; n2, continued, finds the coordinator gone and drains too.
    assert_eq!(m1.wait_exit(T), 0, "{}", m1.stderr());
    m2.wait_exit(T);
    assert!(peer_failed(&m2).is_some(), "{}", m2.stderr());
    e1.assert_no_leftovers();
    e2.assert_no_leftovers();
}

/// Round 4's H3: the whole job stopped (every mcsup and child) for longer than the silent period
/// and continued is not a dead job: no node is called gone, the job goes on, and a stop request
/// afterwards ends it cleanly.
#[test]
fn a_job_stopped_whole_and_continued_goes_on() {
    let (e1, e2, mut m1, mut m2) = two_nodes();
    for m in [&m1, &m2] {
        signal_node(m, Signal::SIGSTOP);
    }
    std::thread::sleep(Duration::from_secs(6));
    for m in [&m1, &m2] {
        signal_node(m, Signal::SIGCONT);
    }
    // Twice the silent period after the resume: long enough for a wrong verdict to show.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(peer_failed(&m1), None, "{}", m1.stderr());
    assert_eq!(peer_failed(&m2), None, "{}", m2.stderr());
    for m in [&m1, &m2] {
        assert!(
            m.stderr().contains("did not run for"),
            "each side saw its own pause: {}",
            m.stderr()
        );
        m.signal(Signal::SIGTERM);
    }
    assert_eq!(m2.wait_exit(T), 0, "{}", m2.stderr());
    assert_eq!(m1.wait_exit(T), 0, "{}", m1.stderr());
    e1.assert_no_leftovers();
    e2.assert_no_leftovers();
}
