//! The control connection over real sockets on 127.0.0.1: three nodes join a coordinator, a
//! rank's failure becomes one generation for both nodes holding the worker, a forged client is
//! refused, a node that vanishes drains the others, and the secret is read only when it is safe.

use std::sync::{Arc, Mutex};

use super::*;
use crate::supervisor::control::wire::{Hello, UnitInfo};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spec(dir: &Path, port: u16) -> ControlSpec {
    ControlSpec {
        coordinator: "n1".into(),
        address: "127.0.0.1".into(),
        port,
        secret: dir.join("control.secret"),
        nodes: vec!["n1".into(), "n2".into(), "n3".into()],
        silent: crate::plan::ControlSpec::SILENT,
        stores_at_once: 0,
    }
}

fn unit() -> UnitInfo {
    UnitInfo {
        worker: "decode[0]".into(),
        nodes: vec!["n2".into(), "n3".into()],
        policy: crate::plan::RestartPolicy::OnFailure,
        success_codes: vec![0],
        max_restarts: 3,
        backoff_initial_ms: 50,
        backoff_factor: 2.0,
        backoff_max_ms: 1000,
        stop_ms: 1000,
    }
}

type Heard = Arc<Mutex<Vec<Incoming>>>;

fn recorder() -> (Heard, Deliver) {
    let heard: Heard = Arc::default();
    let h = heard.clone();
    (heard, Box::new(move |i| h.lock().unwrap().push(i)))
}

/// Node `name`'s end of the connection, started (inside the runtime), and what it hears.
fn node(spec: &ControlSpec, name: &str, units: Vec<UnitInfo>, reach: Duration) -> (Link, Heard) {
    let (heard, deliver) = recorder();
    (
        start(
            spec,
            name,
            "77",
            Hello {
                units,
                terminal: false,
                stores: 0,
            },
            reach,
            deliver,
        )
        .unwrap(),
        heard,
    )
}

async fn until(heard: &Heard, what: &str, f: impl Fn(&Incoming) -> bool) {
    for _ in 0..200 {
        if heard.lock().unwrap().iter().any(&f) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("never heard {what}: {:?}", heard.lock().unwrap());
}

use crate::supervisor::test_runtime as rt;

#[test]
fn a_failed_rank_is_one_generation_on_both_nodes_and_a_forgery_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // A free port, chosen by the coordinator and read from the secret's file by every node.
    let spec = spec(dir.path(), 0);
    rt().block_on(async {
        let (n1, h1) = node(&spec, "n1", vec![], REACH_WITHIN);
        let (n2, h2) = node(&spec, "n2", vec![unit()], REACH_WITHIN);
        let (n3, h3) = node(&spec, "n3", vec![unit()], REACH_WITHIN);
        for h in [&h1, &h2, &h3] {
            until(h, "joined", |i| *i == Incoming::Joined).await;
        }
        // The secret is private.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&spec.secret).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        // A forged message: the handshake is fine, the MAC is not.
        let (port, _) = read_secret(&spec.secret).unwrap();
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let (r, mut w) = s.split();
        let mut r = tokio::io::BufReader::new(r);
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        let theirs = wire::parse_nonce(&line).unwrap();
        w.write_all(wire::nonce_line(&wire::random().unwrap()).as_bytes()).await.unwrap();
        let mut forger = Sealer::new(b"a guess at the secret", theirs, "77", "n2");
        w.write_all(forger.seal(Body::Failing { reason: "forged".into() }).as_bytes()).await.unwrap();
        until(&h1, "the refusal", |i| {
            matches!(i, Incoming::Refused { why, .. } if why.contains("MAC does not match"))
        })
        .await;
        // Its connection is closed; nobody was told to drain.
        line.clear();
        assert_eq!(r.read_line(&mut line).await.unwrap(), 0);
        drop(s);

        // n3's rank dies: both n2 and n3 stop, report, then start generation 1.
        n3.send(Outgoing::Say(Body::Down {
            worker: "decode[0]".into(),
            generation: 0,
            code: Some(137),
            exit: Some("killed by SIGKILL (137)".into()),
            process: None,
        }));
        let stop = Incoming::Said(Body::Stop {
            worker: "decode[0]".into(),
            generation: 1,
        });
        until(&h2, "stop", |i| *i == stop).await;
        until(&h3, "stop", |i| *i == stop).await;
        assert!(!h1.lock().unwrap().contains(&stop), "n1 holds no rank");
        for n in [&n2, &n3] {
            n.send(Outgoing::Say(Body::Down {
                worker: "decode[0]".into(),
                generation: 1,
                code: None,
                exit: None,
                process: None,
            }));
        }
        let start_ = Incoming::Said(Body::Start {
            worker: "decode[0]".into(),
            generation: 1,
        });
        until(&h2, "start", |i| *i == start_).await;
        until(&h3, "start", |i| *i == start_).await;
        until(&h1, "relaunched", |i| *i == Incoming::Decided(Note::Relaunched { worker: "decode[0]".into() })).await;
        until(&h1, "the coordinator's record", |i| {
            matches!(i, Incoming::Decided(Note::Restart(r)) if r.node == "n3" && r.attempt == 1 && r.outcome == "scheduled")
        })
        .await;
        for h in [&h1, &h2, &h3] {
            assert!(
                !h.lock().unwrap().iter().any(|i| matches!(i, Incoming::Said(Body::NodeFailed { .. }) | Incoming::Lost(_))),
                "{:?}",
                h.lock().unwrap()
            );
        }

        // n3's mcsup vanishes (its tasks end without a word): the others drain.
        drop(n3);
        let failed =
            |i: &Incoming| matches!(i, Incoming::Said(Body::NodeFailed { node, .. }) if node == "n3");
        until(&h2, "n3 failed", failed).await;
        until(&h1, "n3 failed", failed).await;
        // n2 leaves in order: nothing more.
        n2.send(Outgoing::Say(Body::Leaving));
        tokio::time::sleep(Duration::from_millis(100)).await;
        drop(n2);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            h1.lock().unwrap().iter().filter(|i| matches!(i, Incoming::Said(Body::NodeFailed { .. }))).count(),
            1
        );
        drop(n1);
    });
}

#[test]
fn the_coordinator_gone_is_a_lost_link() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), free_port());
    rt().block_on(async {
        let (n1, _h1) = node(&spec, "n1", vec![], REACH_WITHIN);
        let (_n2, h2) = node(&spec, "n2", vec![], REACH_WITHIN);
        until(&h2, "joined", |i| *i == Incoming::Joined).await;
        drop(n1);
        until(
            &h2,
            "lost",
            |i| matches!(i, Incoming::Lost(why) if why.contains("coordinator")),
        )
        .await;
    });
}

#[test]
fn a_second_coordinator_on_a_taken_port_says_how_to_fix_it() {
    let dir = tempfile::tempdir().unwrap();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let spec = spec(dir.path(), held.local_addr().unwrap().port());
    rt().block_on(async {
        let (_h, d) = recorder();
        let e = start(&spec, "n1", "77", Hello::default(), REACH_WITHIN, d)
            .err()
            .unwrap();
        assert!(e.contains("set mcsup.control_port"), "{e}");
    });
}

#[test]
fn the_secret_is_read_only_when_it_is_this_users_private_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("control.secret");
    let good = "ab".repeat(32);
    std::fs::write(&path, format!("4242 {good}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        read_secret(&path).unwrap(),
        (4242, good.as_bytes().to_vec())
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(read_secret(&path)
        .unwrap_err()
        .contains("readable or writable by others"));
    let link = dir.path().join("link.secret");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(read_secret(&link).is_err());
    for bad in [
        "not hex",
        &good,
        &format!("0 {good}"),
        &format!("70000 {good}"),
        "4242 abcd",
    ] {
        std::fs::write(&path, bad).unwrap();
        assert!(
            read_secret(&path)
                .unwrap_err()
                .contains("does not hold a port and a secret"),
            "{bad}"
        );
    }
    assert!(read_secret(&dir.path().join("absent")).is_err());
}

#[test]
fn a_stranger_with_the_secret_and_a_flood_of_connections_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 0);
    rt().block_on(async {
        let (_n1, h1) = node(&spec, "n1", vec![], REACH_WITHIN);
        until(&h1, "joined", |i| *i == Incoming::Joined).await;
        // The job's secret, but a name the job does not have.
        let mut other = spec.clone();
        other.coordinator = "n1".into();
        let (_n9, h9) = node(&other, "n9", vec![], REACH_WITHIN);
        until(
            &h1,
            "the stranger refused",
            |i| matches!(i, Incoming::Refused { why, .. } if why == "n9 is not a node of this job"),
        )
        .await;
        assert!(!h9.lock().unwrap().contains(&Incoming::Joined));
        // 32 connections may wait for their hello; a newer one closes the oldest (said once a
        // minute per address), so silent strangers cannot keep the job's own nodes out.
        let (port, _) = read_secret(&spec.secret).unwrap();
        let mut flood = Vec::new();
        for _ in 0..60 {
            flood.push(
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap(),
            );
        }
        // While the flood goes on (its connections held, more coming), a node of the job joins.
        let (_n2, h2) = node(&spec, "n2", vec![], REACH_WITHIN);
        for _ in 0..40 {
            flood.push(
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap(),
            );
        }
        until(&h2, "n2 joined during the flood", |i| {
            *i == Incoming::Joined
        })
        .await;
        // The oldest waiting ones were closed: 100 connections, yet only the stranger's refusal
        // is said (the rest from 127.0.0.1 is counted, and said when its minute is over).
        let refused: Vec<String> = h1
            .lock()
            .unwrap()
            .iter()
            .filter_map(|i| match i {
                Incoming::Refused { why, .. } => Some(why.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            refused,
            ["n9 is not a node of this job"],
            "one line per address and minute"
        );
        drop(flood);
    });
}

#[test]
fn a_node_that_cannot_reach_the_coordinator_says_so_and_joins_when_it_comes() {
    let dir = tempfile::tempdir().unwrap();
    // Port 0: the nodes read it from the secret's file, which only the coordinator writes.
    let spec = spec(dir.path(), 0);
    let reach = Duration::from_millis(200);
    rt().block_on(async {
        let (n2, h2) = node(&spec, "n2", vec![unit()], reach);
        let (n3, h3) = node(&spec, "n3", vec![unit()], reach);
        for h in [&h2, &h3] {
            until(h, "the coordinator unreachable", |i| {
                matches!(i, Incoming::Unavailable(why) if why.contains("could not be reached within 0.2 s") && why.contains("still trying every 2 s"))
            })
            .await;
        }
        // n3 fails before it has joined; a flush does not wait for a connection it has not got.
        n3.send(Outgoing::Say(Body::Failing {
            reason: "critical `w` failed".into(),
        }));
        let flushed = tokio::time::Instant::now();
        n3.flush(Duration::from_secs(30)).await;
        assert!(flushed.elapsed() < Duration::from_secs(5));
        assert_eq!(
            h2.lock().unwrap().iter().filter(|i| matches!(i, Incoming::Unavailable(_))).count(),
            1,
            "said once"
        );

        // The coordinator comes: both join; n3's failure is said and reaches n2, whichever
        // of the two joined first.
        let (_n1, h1) = node(&spec, "n1", vec![], REACH_WITHIN);
        let failed = Incoming::Said(Body::NodeFailed {
            node: "n3".into(),
            reason: "critical `w` failed".into(),
        });
        until(&h2, "joined late", |i| *i == Incoming::Joined).await;
        until(&h3, "joined late", |i| *i == Incoming::Joined).await;
        until(&h2, "n3's failure", |i| *i == failed).await;
        until(&h1, "n3's failure", |i| *i == failed).await;
        drop(n2);
    });
}

#[test]
fn sixty_four_nodes_join_and_one_failure_reaches_every_other_node() {
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (1..=64).map(|i| format!("n{i}")).collect();
    let mut spec = spec(dir.path(), 0);
    spec.nodes = names.clone();
    rt().block_on(async {
        let (links, heard): (Vec<Link>, Vec<Heard>) = names
            .iter()
            .map(|name| node(&spec, name, vec![], REACH_WITHIN))
            .unzip();
        for h in &heard {
            until(h, "joined", |i| *i == Incoming::Joined).await;
        }
        links[40].send(Outgoing::Say(Body::Failing {
            reason: "critical `w` failed".into(),
        }));
        let failed = Incoming::Said(Body::NodeFailed {
            node: "n41".into(),
            reason: "critical `w` failed".into(),
        });
        for (i, h) in heard.iter().enumerate() {
            if i != 40 {
                until(h, "n41's failure", |x| *x == failed).await;
            }
        }
        // Told once each; n41 itself is not told.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for (i, h) in heard.iter().enumerate() {
            let told = h.lock().unwrap().iter().filter(|x| **x == failed).count();
            assert_eq!(told, usize::from(i != 40), "n{}", i + 1);
        }
        // No refusal: 64 nodes are within the cap (2 x 64 + 32 connections).
        assert!(!heard[0]
            .lock()
            .unwrap()
            .iter()
            .any(|x| matches!(x, Incoming::Refused { .. })));
    });
}

#[test]
fn a_node_that_joins_after_another_failed_is_told_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 0);
    rt().block_on(async {
        let (_n1, h1) = node(&spec, "n1", vec![], REACH_WITHIN);
        let (n3, h3) = node(&spec, "n3", vec![unit()], REACH_WITHIN);
        until(&h3, "n3 joined", |i| *i == Incoming::Joined).await;
        n3.send(Outgoing::Say(Body::Failing {
            reason: "critical `w` failed".into(),
        }));
        let failed = Incoming::Said(Body::NodeFailed {
            node: "n3".into(),
            reason: "critical `w` failed".into(),
        });
        until(&h1, "n3's failure", |i| *i == failed).await;
        // n2 was not there to hear it: it is told as it joins, right after the welcome.
        let (_n2, h2) = node(&spec, "n2", vec![unit()], REACH_WITHIN);
        until(&h2, "n3's failure, on joining", |i| *i == failed).await;
        let heard = h2.lock().unwrap().clone();
        assert_eq!(heard, [Incoming::Joined, failed], "{heard:?}");
    });
}

/// Round 4's M3: refusals from one address are said once, then counted, and said as one line
/// when the minute is over; another address has its own window.
#[test]
fn refusals_from_one_address_are_said_once_a_minute() {
    let t0 = std::time::Instant::now();
    let mut r = Refusals::default();
    assert_eq!(
        r.add("10.0.0.7:5000".into(), "bad hello".into(), t0),
        Some(("10.0.0.7:5000".into(), "bad hello".into()))
    );
    for i in 1..=11_324 {
        let at = t0 + Duration::from_millis(i);
        assert_eq!(
            r.add(
                format!("10.0.0.7:{}", 5000 + i % 60_000),
                "garbage".into(),
                at
            ),
            None
        );
    }
    assert!(
        r.add("10.0.0.8:1".into(), "x".into(), t0).is_some(),
        "its own window"
    );
    assert!(r.due(t0 + Duration::from_secs(59)).is_empty());
    assert_eq!(r.next_deadline(), Some(t0 + REFUSALS_WINDOW));
    assert_eq!(
        r.due(t0 + REFUSALS_WINDOW),
        [(
            "10.0.0.7".to_string(),
            "11324 more refused from 10.0.0.7 in the last minute (the last: garbage)".to_string()
        )]
    );
    // A new window starts with its first refusal said again.
    assert!(r
        .add("10.0.0.7:1".into(), "again".into(), t0 + REFUSALS_WINDOW)
        .is_some());
}

/// A peer's silence is judged on heartbeat ticks: gone once nothing was heard for `silent` of
/// this side's running time (each heartbeat restarted the read's timeout before, so a peer that
/// stopped answering was never called gone while this side's own heartbeats went out).
#[test]
fn a_peer_not_heard_for_the_silent_period_is_gone() {
    let t0 = tokio::time::Instant::now();
    let s = |ms: u64| t0 + Duration::from_millis(ms);
    let mut silence = Silence::new(Duration::from_secs(10), t0);
    for tick in 1..10 {
        assert_eq!(silence.check(s(tick * 1000)), Ok(()));
    }
    assert_eq!(silence.check(s(10_000)), Err("silent for 10 s".into()));
    // Heard at 9.5 s: a fresh window.
    let mut silence = Silence::new(Duration::from_secs(10), t0);
    for tick in 1..=9 {
        silence.check(s(tick * 1000)).unwrap();
    }
    silence.heard(s(9_500));
    for tick in 10..=19 {
        assert_eq!(silence.check(s(tick * 1000)), Ok(()), "{tick}");
    }
    assert!(silence.check(s(20_000)).is_err());
}

/// Round 4's H3: the whole job stopped for 15 s (`scontrol suspend`) and continued. This side's
/// own tick comes 15 s late: it did not run, so the peer's silence meanwhile is no news; the peer
/// gets a fresh window from the resume (its heartbeat comes within a second).
#[test]
fn a_pause_of_this_side_is_not_the_peers_silence() {
    let t0 = tokio::time::Instant::now();
    let s = |ms: u64| t0 + Duration::from_millis(ms);
    let mut silence = Silence::new(Duration::from_secs(10), t0);
    silence.check(s(1_000)).unwrap();
    silence.heard(s(1_200));
    // Stopped from 1.5 s to 16.5 s: the next tick is at 16.5 s.
    assert_eq!(silence.check(s(16_500)), Ok(()));
    silence.check(s(17_500)).unwrap();
    silence.heard(s(17_600));
    for tick in 18..=27 {
        assert_eq!(silence.check(s(tick * 1000 + 500)), Ok(()), "{tick}");
    }
    // Nothing heard after the resume either: gone 10 s after it.
    let mut silence = Silence::new(Duration::from_secs(10), t0);
    silence.check(s(16_500)).unwrap();
    for tick in 17..26 {
        assert_eq!(silence.check(s(tick * 1000 + 500)), Ok(()), "{tick}");
    }
    assert!(silence.check(s(26_500)).is_err());
}

/// The re-run of round 4's M4 under latency: a node whose handshake is slow (its nonce came, its
/// hello not yet) while more than `WAITING` silent connections flood in is not the one closed
/// for them: strangers that said nothing go first. (The oldest went before: a node 10 ms away
/// took 29.5 s to join through a flood.)
#[test]
fn a_node_mid_handshake_outlives_a_flood_of_silent_connections() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    assert_eq!(to_close(&[SPOKE, QUIET, SPOKE, QUIET]), 1);
    assert_eq!(to_close(&[SPOKE, SPOKE]), 0);
    let dir = tempfile::tempdir().unwrap();
    let spec = spec(dir.path(), 0);
    rt().block_on(async {
        let (_n1, h1) = node(&spec, "n1", vec![], REACH_WITHIN);
        until(&h1, "joined", |i| *i == Incoming::Joined).await;
        let (port, secret) = read_secret(&spec.secret).unwrap();
        // n2, by hand and slowly: the nonces, then a pause.
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let (r, mut w) = stream.into_split();
        let mut r = tokio::io::BufReader::new(r);
        let mine = wire::random().unwrap();
        w.write_all(wire::nonce_line(&mine).as_bytes())
            .await
            .unwrap();
        let mut line = String::new();
        r.read_line(&mut line).await.unwrap();
        let theirs = wire::parse_nonce(&line).unwrap();
        // The flood: more silent connections than may wait, all held.
        let mut flood = Vec::new();
        for _ in 0..WAITING + 20 {
            flood.push(
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap(),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        // n2's hello, at last: the coordinator's welcome proves the connection was kept.
        let mut sealer = Sealer::new(&secret, theirs, "77", "n2");
        w.write_all(sealer.seal(Hello::default().body()).as_bytes())
            .await
            .unwrap();
        let mut welcome = String::new();
        tokio::time::timeout(Duration::from_secs(5), r.read_line(&mut welcome))
            .await
            .expect("an answer in time")
            .unwrap();
        let opened = Opener::new(&secret, mine, "77").open(&welcome);
        assert!(opened.is_ok(), "closed or refused: {welcome:?} {opened:?}");
        drop(flood);
    });
}
