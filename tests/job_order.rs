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
        stores_at_once: 0,
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

/// Issue 51's start-up order: three nodes whose stores may register only one at a time
/// (`ControlSpec::stores_at_once` 1, `mcsup.store.register_at_once` in a recipe). Each store
/// waits for its place from the coordinator, holds it until it is ready, and the next starts
/// only then: no two stores' spawn-to-ready overlap, by the events' wall clock, and the
/// coordinator's node records each place and each registration.
#[test]
fn stores_register_one_at_a_time_when_the_job_allows_one() {
    let envs: Vec<TestEnv> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| {
            let mut e = TestEnv::new();
            e.node = n.to_string();
            e
        })
        .collect();
    let control = ControlSpec {
        coordinator: "n1".into(),
        address: "127.0.0.1".into(),
        port: common::free_port(),
        secret: envs[0].log_dir().join("control.secret"),
        nodes: vec!["n1".into(), "n2".into(), "n3".into()],
        silent: Duration::from_secs(10),
        stores_at_once: 1,
    };
    let gate = "store-places@n1";
    let mut ms: Vec<Mcsup> = envs
        .iter()
        .map(|e| {
            // The store says it is up 400 ms after its start: long enough for an overlap to show.
            let mut store = e.up("store", ProcessKind::Store, &["--ready-after", "400"]);
            store.depends_on.push(DependencySpec {
                target: gate.into(),
                condition: DependencyCondition::Healthy,
            });
            let mut p = e.plan(vec![store]);
            p.gates.push(policy::remote_gate(
                gate,
                vec![ProbeSpec::StorePlace {
                    coordinator: "n1".into(),
                    at_once: 1,
                }],
                T,
            ));
            p.control = Some(control.clone());
            if e.node != "n1" {
                p.node.infra_node = "n1".into();
                p.node.runs_master = false;
            }
            e.start(&p)
        })
        .collect();
    let mut spans = Vec::new();
    for (e, m) in envs.iter().zip(ms.iter_mut()) {
        let ready = m.wait_event("store", "ready", T);
        let evs = m.events();
        let spawned = Mcsup::find(&evs, "store", "spawned");
        let ts = |e: &Ev| e.raw["ts_ms"].as_u64().unwrap();
        spans.push((ts(&spawned), ts(&ready), e.node.clone()));
    }
    spans.sort();
    eprintln!("stores' spawn..ready: {spans:?}");
    for w in spans.windows(2) {
        assert!(
            w[0].1 <= w[1].0,
            "{} spawned at {} before {}'s store was ready at {}",
            w[1].2,
            w[1].0,
            w[0].2,
            w[0].1
        );
    }
    // The coordinator's node recorded a place and a registration per node; each node its place.
    wait_for("three registrations", T, || {
        (ms[0]
            .events()
            .iter()
            .filter(|e| e.event == "stores-registered")
            .count()
            == 3)
            .then_some(())
    });
    let evs = ms[0].events();
    let places: Vec<&str> = evs
        .iter()
        .filter(|e| e.event == "store-slot" && e.process != "mcsup")
        .map(|e| e.process.as_str())
        .collect();
    assert_eq!(places.len(), 3, "{places:?}");
    for m in &ms {
        assert!(
            m.events()
                .iter()
                .any(|e| e.process == "mcsup" && e.event == "store-slot"),
            "{}",
            m.stderr()
        );
        m.signal(Signal::SIGTERM);
    }
    for m in &mut ms {
        assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    }
    for e in &envs {
        e.assert_no_leftovers();
    }
}

/// A stop request to the coordinator's mcsup alone (a `kill` on its node, a signal Slurm gave
/// only the batch host) stops the whole job, in order: the other node hears `job-stop` and
/// stops as if asked, both nodes' tiers go by the job's word (no `tier-alone`), nobody is called
/// gone, both end 0. Before, the coordinator's node stopped each tier alone after a sixth of its
/// deadline and the other node drained only once it had gone (`peer-failed`).
#[test]
fn a_stop_request_to_the_coordinators_node_stops_the_whole_job_in_order() {
    let (e1, e2, mut m1, mut m2) = two_nodes();
    m1.signal(Signal::SIGTERM);
    let ev = m2.wait_event("mcsup", "job-stop", T);
    let detail = ev.raw["detail"].as_str().unwrap_or_default().to_string();
    assert!(
        detail.starts_with("n1 (the coordinator's node) received SIGTERM"),
        "{detail}"
    );
    assert_eq!(m2.wait_exit(T), 0, "{}", m2.stderr());
    assert_eq!(m1.wait_exit(T), 0, "{}", m1.stderr());
    let said = |m: &Mcsup, kind: &str| m.events().iter().any(|e| e.event == kind);
    assert!(!said(&m1, "tier-alone"), "{}", m1.stderr());
    assert!(!said(&m2, "peer-failed"), "{}", m2.stderr());
    assert!(said(&m1, "job-stop"), "the coordinator's node records it");
    e1.assert_no_leftovers();
    e2.assert_no_leftovers();
}
