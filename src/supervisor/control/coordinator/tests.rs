use super::*;
use crate::supervisor::control::wire::TIER_NONE;

fn unit(policy: RestartPolicy, max_restarts: u32) -> UnitInfo {
    UnitInfo {
        worker: "decode[0]".into(),
        nodes: vec!["n2".into(), "n3".into()],
        policy,
        success_codes: vec![0],
        max_restarts,
        backoff_initial_ms: 1000,
        backoff_factor: 2.0,
        backoff_max_ms: 1500,
        stop_ms: 5000,
    }
}

fn started(policy: RestartPolicy, max_restarts: u32) -> (Coordinator, Instant) {
    let mut c = Coordinator::new();
    let t = Instant::now();
    for node in ["n1", "n2", "n3"] {
        let units = if node == "n1" {
            Vec::new()
        } else {
            vec![unit(policy, max_restarts)]
        };
        let out = c.handle(
            said(
                node,
                Body::Hello {
                    units,
                    terminal: false,
                    stores: 0,
                },
            ),
            t,
        );
        assert!(out.is_empty());
    }
    (c, t)
}

fn said(node: &str, body: Body) -> Input {
    Input::Said {
        node: node.into(),
        body,
    }
}

fn down(node: &str, generation: u64, code: Option<i32>) -> Input {
    said(
        node,
        Body::Down {
            worker: "decode[0]".into(),
            generation,
            code,
            exit: None,
            process: Some("sglang-decode-0".into()),
        },
    )
}

fn sent(out: &[Output]) -> Vec<(String, Body)> {
    out.iter()
        .filter_map(|o| match o {
            Output::Send { to, body } => Some((to.clone(), body.clone())),
            _ => None,
        })
        .collect()
}

fn kinds(out: &[Output]) -> Vec<EventKind> {
    out.iter()
        .filter_map(|o| match o {
            Output::Note(Note::Event { kind, .. }) => Some(*kind),
            _ => None,
        })
        .collect()
}

fn to_both(body: Body) -> Vec<(String, Body)> {
    vec![("n2".into(), body.clone()), ("n3".into(), body)]
}

fn stop(generation: u64) -> Body {
    Body::Stop {
        worker: "decode[0]".into(),
        generation,
    }
}

fn start(generation: u64) -> Body {
    Body::Start {
        worker: "decode[0]".into(),
        generation,
    }
}

/// One generation: the failure, every rank down (in any order, a failure of the stopped
/// generation counting as down), the backoff, the start barrier.
fn restart_once(c: &mut Coordinator, t: Instant, generation: u64, backoff: Duration) -> Instant {
    let out = c.handle(down("n3", generation - 1, Some(137)), t);
    assert_eq!(sent(&out), to_both(stop(generation)));
    assert_eq!(kinds(&out), [EventKind::UnitRestart]);
    // Its peer broke with it: the same failure, not another restart.
    assert!(c.handle(down("n2", generation - 1, Some(1)), t).is_empty());
    assert!(c.handle(down("n2", generation, None), t).is_empty());
    assert_eq!(
        c.next_deadline(),
        Some(t + Duration::from_secs(5) + DOWN_MARGIN)
    );
    let out = c.handle(down("n3", generation, Some(137)), t);
    assert!(sent(&out).is_empty());
    assert_eq!(c.next_deadline(), Some(t + backoff));
    assert!(c
        .handle(Input::Tick, t + backoff - Duration::from_millis(1))
        .is_empty());
    let t = t + backoff;
    let out = c.handle(Input::Tick, t);
    assert_eq!(sent(&out), to_both(start(generation)));
    assert!(out.contains(&Output::Note(Note::Relaunched {
        worker: "decode[0]".into()
    })));
    assert_eq!(c.next_deadline(), None);
    // The leader's ready of this generation, once; an older one is not news.
    let ready = |generation| {
        said(
            "n2",
            Body::Ready {
                worker: "decode[0]".into(),
                generation,
            },
        )
    };
    assert!(c.handle(ready(generation - 1), t).is_empty());
    assert_eq!(
        c.handle(ready(generation), t),
        [Output::Note(Note::ReadyAgain {
            worker: "decode[0]".into()
        })]
    );
    t
}

#[test]
fn a_failed_rank_restarts_every_rank_in_one_generation_after_srtctls_backoff() {
    let (mut c, t) = started(RestartPolicy::OnFailure, 3);
    let t = restart_once(&mut c, t, 1, Duration::from_millis(1000));
    // Doubled, capped at backoff_max.
    let t = restart_once(&mut c, t, 2, Duration::from_millis(1500));
    restart_once(&mut c, t, 3, Duration::from_millis(1500));
    assert_eq!(c.restarts("decode[0]"), Some(3));
}

#[test]
fn past_max_restarts_over_the_job_the_worker_is_given_up_on_every_node() {
    let (mut c, t) = started(RestartPolicy::Always, 1);
    let t = restart_once(&mut c, t, 1, Duration::from_millis(1000));
    let out = c.handle(down("n2", 1, Some(9)), t);
    let [(_, Body::GiveUp { reason, .. }), _] = &sent(&out)[..] else {
        panic!("{out:?}")
    };
    assert!(
        reason.contains("restart limit reached: 1 restart(s) over the job"),
        "{reason}"
    );
    assert_eq!(sent(&out).len(), 2);
    assert_eq!(kinds(&out), [EventKind::UnitFailed]);
    assert_eq!(
        recorded(&out),
        [Output::Note(Note::Restart(RestartRecord {
            worker: "decode[0]".into(),
            node: "n2".into(),
            process: Some("sglang-decode-0".into()),
            attempt: 2,
            exit_code: Some(9),
            outcome: "exhausted",
            backoff: Duration::ZERO,
            policy: RestartPolicy::Always,
            max_restarts: 1,
        }))]
    );
    // Nothing more for it.
    assert!(c.handle(down("n3", 1, Some(9)), t).is_empty());
}

/// What `worker_restarts.json` hears of `out`: restart records and workers handed back.
fn recorded(out: &[Output]) -> Vec<Output> {
    out.iter()
        .filter(|o| matches!(o, Output::Note(Note::Restart(_) | Note::Settled(_))))
        .cloned()
        .collect()
}

#[test]
fn the_policy_decides_first() {
    // `never`: given up; srtctl does not supervise it, so no record.
    let (mut c, t) = started(RestartPolicy::Never, 3);
    let out = c.handle(down("n2", 0, Some(1)), t);
    assert!(
        matches!(&sent(&out)[0].1, Body::GiveUp { reason, .. } if reason.contains("restart policy never"))
    );
    assert_eq!(recorded(&out), []);
    // A success under `on-failure`: handed back (srtctl's `_release`), listed without an event.
    let (mut c, t) = started(RestartPolicy::OnFailure, 3);
    let out = c.handle(down("n2", 0, Some(0)), t);
    assert!(
        matches!(&sent(&out)[0].1, Body::GiveUp { reason, .. } if reason.contains("a success"))
    );
    assert_eq!(
        recorded(&out),
        [Output::Note(Note::Settled(Settled {
            worker: "decode[0]".into(),
            policy: RestartPolicy::OnFailure,
            restarts: 0,
            max_restarts: 3,
        }))]
    );
    // A down that is not a failure starts nothing.
    let (mut c, t) = started(RestartPolicy::Always, 3);
    assert!(c.handle(down("n2", 0, None), t).is_empty());
}

#[test]
fn a_node_gone_without_leaving_or_failing_drains_every_other_node_once() {
    let (mut c, t) = started(RestartPolicy::Always, 3);
    let out = c.handle(
        Input::Lost {
            node: "n3".into(),
            why: "its connection closed".into(),
        },
        t,
    );
    let to: Vec<String> = sent(&out).into_iter().map(|(n, _)| n).collect();
    assert_eq!(to, ["n1", "n2"]);
    assert!(matches!(&sent(&out)[0].1, Body::NodeFailed { node, .. } if node == "n3"));
    assert_eq!(kinds(&out), [EventKind::PeerFailed]);
    assert!(c
        .handle(said("n2", Body::Failing { reason: "x".into() }), t)
        .is_empty());
    // A node that said it leaves may go.
    let (mut c, t) = started(RestartPolicy::Always, 3);
    c.handle(said("n2", Body::Leaving), t);
    let lost = Input::Lost {
        node: "n2".into(),
        why: "closed".into(),
    };
    assert!(c.handle(lost, t).is_empty());
    let out = c.handle(
        said(
            "n3",
            Body::Failing {
                reason: "critical `w` failed".into(),
            },
        ),
        t,
    );
    let to: Vec<String> = sent(&out).into_iter().map(|(n, _)| n).collect();
    assert_eq!(to, ["n1"]);
}

#[test]
fn a_node_that_does_not_stop_its_rank_in_time_is_a_failed_node() {
    let (mut c, t) = started(RestartPolicy::Always, 3);
    c.handle(down("n2", 0, Some(1)), t);
    c.handle(down("n2", 1, None), t);
    let due = c.next_deadline().unwrap();
    assert!(c
        .handle(Input::Tick, due - Duration::from_millis(1))
        .is_empty());
    let out = c.handle(Input::Tick, due);
    assert!(
        matches!(&sent(&out)[0].1, Body::NodeFailed { node, reason } if node == "n3" && reason.contains("did not report its rank of decode[0] down"))
    );
}

/// n1 and n2 joined; n3 (a rank of decode[0]) has not yet.
fn without_n3(policy: RestartPolicy) -> (Coordinator, Instant) {
    let mut c = Coordinator::new();
    let t = Instant::now();
    c.handle(
        said(
            "n1",
            Body::Hello {
                units: vec![],
                terminal: false,
                stores: 0,
            },
        ),
        t,
    );
    c.handle(
        said(
            "n2",
            Body::Hello {
                units: vec![unit(policy, 3)],
                terminal: false,
                stores: 0,
            },
        ),
        t,
    );
    (c, t)
}

fn n3_joins(c: &mut Coordinator, t: Instant) -> Vec<(String, Body)> {
    sent(&c.handle(
        said(
            "n3",
            Body::Hello {
                units: vec![unit(RestartPolicy::OnFailure, 3)],
                terminal: false,
                stores: 0,
            },
        ),
        t,
    ))
}

#[test]
fn a_node_that_joins_late_hears_what_it_missed() {
    // Nothing happened yet: nothing to hear.
    let (mut c, t) = without_n3(RestartPolicy::OnFailure);
    assert!(n3_joins(&mut c, t).is_empty());

    // A generation waits for its rank's `down`: it is told to stop it.
    let (mut c, t) = without_n3(RestartPolicy::OnFailure);
    c.handle(down("n2", 0, Some(1)), t);
    assert_eq!(n3_joins(&mut c, t), [("n3".to_string(), stop(1))]);
    c.handle(down("n2", 1, None), t);
    let out = c.handle(down("n3", 1, None), t);
    assert_eq!(kinds(&out), [EventKind::UnitRestart]);

    // Its worker was given up: so is its rank, for the same reason.
    let (mut c, t) = without_n3(RestartPolicy::Never);
    let out = c.handle(down("n2", 0, Some(1)), t);
    let told = sent(&out)[0].1.clone();
    assert!(matches!(&told, Body::GiveUp { .. }), "{told:?}");
    assert_eq!(n3_joins(&mut c, t), [("n3".to_string(), told)]);

    // A node failed: it drains too.
    let (mut c, t) = without_n3(RestartPolicy::OnFailure);
    c.handle(
        said(
            "n2",
            Body::Failing {
                reason: "critical `w` failed".into(),
            },
        ),
        t,
    );
    assert_eq!(
        n3_joins(&mut c, t),
        [(
            "n3".to_string(),
            Body::NodeFailed {
                node: "n2".into(),
                reason: "critical `w` failed".into()
            }
        )]
    );
}

fn hello(c: &mut Coordinator, node: &str, terminal: bool, t: Instant) -> Vec<(String, Body)> {
    sent(&c.handle(
        said(
            node,
            Body::Hello {
                units: vec![],
                terminal,
                stores: 0,
            },
        ),
        t,
    ))
}

fn finished(c: &mut Coordinator, node: &str, t: Instant) -> Vec<Output> {
    c.handle(
        said(
            node,
            Body::Finished {
                detail: format!("`benchmark` on {node} ended (exit code 0)"),
            },
        ),
        t,
    )
}

fn job_done_to(out: &[(String, Body)]) -> Vec<String> {
    let mut to: Vec<String> = out
        .iter()
        .filter(|(_, b)| matches!(b, Body::JobDone { .. }))
        .map(|(n, _)| n.clone())
        .collect();
    to.sort();
    to
}

/// What the job is for ends on the nodes holding a terminal process: once every one of them
/// finished (and every node said hello), every node hears `job-done`, the finished ones too;
/// not before.
#[test]
fn the_job_is_done_once_every_terminal_node_finished() {
    let mut c = Coordinator::expecting(vec!["n1".into(), "n2".into(), "n3".into()], 0);
    let t = Instant::now();
    assert!(hello(&mut c, "n1", false, t).is_empty());
    assert!(hello(&mut c, "n2", true, t).is_empty());
    assert!(hello(&mut c, "n3", true, t).is_empty());
    // n2's part is done; n3's still runs (and may use n2's workers): nothing yet.
    assert!(sent(&finished(&mut c, "n2", t)).is_empty());
    let out = finished(&mut c, "n3", t);
    assert_eq!(job_done_to(&sent(&out)), ["n1", "n2", "n3"]);
    assert!(out.iter().any(|o| matches!(
        o,
        Output::Note(Note::Event { kind: EventKind::JobDone, detail, .. })
            if detail.contains("n2: `benchmark` on n2 ended") && detail.contains("n3: ")
    )));
    // A node that joins again (a reconnect) hears it at once; nothing is decided twice.
    assert_eq!(job_done_to(&hello(&mut c, "n1", false, t)), ["n1"]);
    assert!(sent(&finished(&mut c, "n2", t)).is_empty());
}

/// A node that has not said hello yet may hold a terminal process: the job waits for it.
#[test]
fn the_job_is_not_done_before_every_node_said_hello() {
    let mut c = Coordinator::expecting(vec!["n1".into(), "n2".into(), "n3".into()], 0);
    let t = Instant::now();
    hello(&mut c, "n1", true, t);
    hello(&mut c, "n2", false, t);
    assert!(sent(&finished(&mut c, "n1", t)).is_empty());
    // n3 holds none: its hello completes the job, and it hears so with the others.
    assert_eq!(
        job_done_to(&hello(&mut c, "n3", false, t)),
        ["n1", "n2", "n3"]
    );

    // n3 holds one: the job goes on until n3 finishes.
    let mut c = Coordinator::expecting(vec!["n1".into(), "n2".into(), "n3".into()], 0);
    hello(&mut c, "n1", true, t);
    hello(&mut c, "n2", false, t);
    finished(&mut c, "n1", t);
    assert!(hello(&mut c, "n3", true, t).is_empty());
    assert_eq!(
        job_done_to(&sent(&finished(&mut c, "n3", t))),
        ["n1", "n2", "n3"]
    );
}

/// A failed node decides the job: a `finished` after it changes nothing.
#[test]
fn a_failed_job_is_not_done_by_a_later_finish() {
    let mut c = Coordinator::expecting(vec!["n1".into(), "n2".into()], 0);
    let t = Instant::now();
    hello(&mut c, "n1", true, t);
    hello(&mut c, "n2", false, t);
    c.handle(
        said(
            "n2",
            Body::Failing {
                reason: "critical `decode` failed".into(),
            },
        ),
        t,
    );
    assert!(job_done_to(&sent(&finished(&mut c, "n1", t))).is_empty());
}

fn tier(c: &mut Coordinator, node: &str, pending: u8, t: Instant) -> Vec<Output> {
    c.handle(said(node, Body::Tier { pending }), t)
}

/// The `may-stop` each node heard in `out` (the same to all), if any.
fn may_stop(out: &[Output]) -> Option<(u8, Vec<String>)> {
    let heard: Vec<(String, Body)> = sent(out);
    let mut to: Vec<&str> = heard.iter().map(|(n, _)| n.as_str()).collect();
    to.sort();
    let first = heard.first()?;
    assert_eq!(to, ["n1", "n2", "n3"], "{heard:?}");
    assert!(heard.iter().all(|(_, b)| *b == first.1), "{heard:?}");
    match &first.1 {
        Body::MayStop { tier, waiting } => Some((*tier, waiting.clone())),
        other => panic!("{other:?}"),
    }
}

/// The order across nodes: n1 runs the frontend (tier 1), the master (4) and etcd (5); n2 and
/// n3 workers (2) and stores (3). A tier may stop once every node's lower tiers are down; a node
/// that has said nothing holds everything back (its stop signal may come a moment later); a node
/// gone is out of the count.
#[test]
fn each_tier_stops_on_every_node_before_the_next_starts_anywhere() {
    let (mut c, t) = started(RestartPolicy::Always, 3);
    // Nothing is said before a teardown.
    assert!(sent(&c.handle(said("n1", Body::Heartbeat), t)).is_empty());
    // n1 is first to stop; n2 and n3 have said nothing yet: only tier 0 may stop.
    let out = tier(&mut c, "n1", 1, t);
    assert_eq!(may_stop(&out), Some((0, vec!["n2".into(), "n3".into()])));
    tier(&mut c, "n2", 2, t);
    let out = tier(&mut c, "n3", 2, t);
    assert_eq!(may_stop(&out), Some((1, vec!["n1".into()])));
    // n1's frontend is down: every node's workers may stop.
    let out = tier(&mut c, "n1", 4, t);
    assert_eq!(may_stop(&out), Some((2, vec!["n2".into(), "n3".into()])));
    assert_eq!(kinds(&out), [EventKind::TierDone]);
    // n2's workers are down, n3's not: the same tier, nothing said to anyone (one message per
    // node per tier, not one per node per node).
    let out = tier(&mut c, "n2", 3, t);
    assert_eq!(may_stop(&out), None);
    assert!(out.is_empty());
    // n3's workers too: the stores may stop, on both.
    let out = tier(&mut c, "n3", 3, t);
    assert_eq!(may_stop(&out), Some((3, vec!["n2".into(), "n3".into()])));
    tier(&mut c, "n2", TIER_NONE, t);
    let out = tier(&mut c, "n3", TIER_NONE, t);
    assert_eq!(may_stop(&out), Some((4, vec!["n1".into()])));
    let note = out
        .iter()
        .find_map(|o| match o {
            Output::Note(Note::Event { detail, .. }) => Some(detail.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        note,
        "teardown across nodes: the stores and the services before the workers stopped on every node (n1, n2, n3): the Mooncake masters may stop"
    );
    // No news, nothing said.
    assert!(sent(&tier(&mut c, "n3", TIER_NONE, t)).is_empty());
}

#[test]
fn a_node_gone_does_not_hold_the_others_back() {
    let (mut c, t) = started(RestartPolicy::Always, 3);
    c.handle(said("n3", Body::Leaving), t);
    tier(&mut c, "n1", 4, t);
    tier(&mut c, "n2", 3, t);
    // n3 said it leaves but nothing of its tiers: held at 0 until its connection ends.
    let out = c.handle(
        Input::Lost {
            node: "n3".into(),
            why: "its connection closed".into(),
        },
        t,
    );
    let heard = sent(&out);
    assert_eq!(
        heard,
        [
            (
                "n1".to_string(),
                Body::MayStop {
                    tier: 3,
                    waiting: vec!["n2".into()]
                }
            ),
            (
                "n2".to_string(),
                Body::MayStop {
                    tier: 3,
                    waiting: vec!["n2".into()]
                }
            ),
        ]
    );
    // Leaving first, so not a failure.
    assert!(!kinds(&out).contains(&EventKind::PeerFailed));
}

fn stores_hello(c: &mut Coordinator, node: &str, stores: u32, t: Instant) -> Vec<Output> {
    c.handle(
        said(
            node,
            Body::Hello {
                units: vec![],
                terminal: false,
                stores,
            },
        ),
        t,
    )
}

/// The nodes told they may register, in the order told.
fn may_register(out: &[Output]) -> Vec<String> {
    sent(out)
        .into_iter()
        .filter(|(_, b)| matches!(b, Body::MayRegister { .. }))
        .map(|(to, _)| to)
        .collect()
}

fn five_nodes() -> Vec<String> {
    (1..=5).map(|i| format!("n{i}")).collect()
}

/// At most `at_once` stores register at a time: the first nodes of the node list get their
/// place (whatever order their hellos came in), the next ones as places come back; each place
/// and each registration is an event with the numbers.
#[test]
fn stores_register_at_most_so_many_at_a_time_in_the_node_lists_order() {
    let mut c = Coordinator::expecting(five_nodes(), 2);
    let t = Instant::now();
    // n3 says hello first: a place is free, it gets it.
    assert_eq!(may_register(&stores_hello(&mut c, "n3", 1, t)), ["n3"]);
    assert_eq!(may_register(&stores_hello(&mut c, "n5", 1, t)), ["n5"]);
    // Both places taken: the rest wait.
    for n in ["n4", "n2", "n1"] {
        assert!(
            may_register(&stores_hello(&mut c, n, 1, t)).is_empty(),
            "{n}"
        );
    }
    // n5's stores are in: the first waiting node of the list (n1, not n4) is next.
    let out = c.handle(
        said("n5", Body::Registered),
        t + Duration::from_millis(1500),
    );
    assert_eq!(may_register(&out), ["n1"]);
    let registered = out
        .iter()
        .find_map(|o| match o {
            Output::Note(Note::Event {
                kind: EventKind::StoresRegistered,
                detail,
                ..
            }) => Some(detail.clone()),
            _ => None,
        })
        .expect("a stores-registered event");
    assert_eq!(
        registered,
        "n5's 1 store registered with the master 1.5 s after their place was given; 1 registering, 3 waiting for a place"
    );
    let slot = out
        .iter()
        .find_map(|o| match o {
            Output::Note(Note::Event {
                kind: EventKind::StoreSlot,
                unit,
                detail,
            }) => Some((unit.clone(), detail.clone())),
            _ => None,
        })
        .expect("a store-slot event");
    assert_eq!(
        slot,
        (
            "n1".to_string(),
            "n1's 1 store may register with the master: 2 registering (at most 2 at once), 2 waiting".to_string()
        )
    );
    assert_eq!(
        sent(&out).last().unwrap().1,
        Body::MayRegister {
            registering: 2,
            waiting: 2
        }
    );
    // A node that is gone gives its place back; one that only waited changes nothing.
    assert!(may_register(&c.handle(
        Input::Lost {
            node: "n4".into(),
            why: "closed".into()
        },
        t
    ))
    .is_empty());
    let out = c.handle(
        Input::Lost {
            node: "n3".into(),
            why: "closed".into(),
        },
        t,
    );
    assert_eq!(may_register(&out), ["n2"]);
    // Everyone in: nothing more to give; a `registered` said twice changes nothing.
    assert!(may_register(&c.handle(said("n1", Body::Registered), t)).is_empty());
    assert!(may_register(&c.handle(said("n2", Body::Registered), t)).is_empty());
    assert!(c.handle(said("n2", Body::Registered), t).is_empty());
}

/// A node with more stores than places goes alone, once nothing else registers, and nobody
/// passes it meanwhile; a node that joins again while holding its place hears it again; a node
/// done does not ask again.
#[test]
fn a_node_with_many_stores_goes_alone_and_a_reconnect_hears_its_place_again() {
    let mut c = Coordinator::expecting(five_nodes(), 2);
    let t = Instant::now();
    assert_eq!(may_register(&stores_hello(&mut c, "n1", 1, t)), ["n1"]);
    assert!(may_register(&stores_hello(&mut c, "n2", 3, t)).is_empty());
    // n3 would fit beside n1, but n2 comes first in the list and waits for an empty master.
    assert!(may_register(&stores_hello(&mut c, "n3", 1, t)).is_empty());
    assert_eq!(
        may_register(&c.handle(said("n1", Body::Registered), t)),
        ["n2"]
    );
    // n2 reconnects: its place is said again, nothing else changes.
    assert_eq!(may_register(&stores_hello(&mut c, "n2", 3, t)), ["n2"]);
    assert_eq!(
        may_register(&c.handle(said("n2", Body::Registered), t)),
        ["n3"]
    );
    // n1, done, reconnects: it is not queued again.
    assert!(may_register(&stores_hello(&mut c, "n1", 1, t)).is_empty());
    assert!(may_register(&c.handle(said("n3", Body::Registered), t)).is_empty());
}

/// No limit (0): every node's stores may register at once.
#[test]
fn without_a_limit_every_node_may_register_at_once() {
    let mut c = Coordinator::expecting(five_nodes(), 0);
    let t = Instant::now();
    for n in five_nodes() {
        assert_eq!(may_register(&stores_hello(&mut c, &n, 4, t)), [n.as_str()]);
    }
}

/// The coordinator's own node asked to stop: every other node is told `job-stop`, once; a late
/// joiner hears it at its hello. Another node asked to stop stops alone.
#[test]
fn a_stop_request_on_the_coordinators_node_stops_every_node() {
    let mut c = Coordinator::expecting(vec!["n1".into(), "n2".into(), "n3".into()], 0).at("n1");
    let t = Instant::now();
    hello(&mut c, "n1", false, t);
    hello(&mut c, "n2", false, t);
    let asked = |signal: &str| Body::Asked {
        signal: signal.into(),
    };
    // n2's own stop is its own.
    assert!(sent(&c.handle(said("n2", asked("SIGTERM")), t)).is_empty());
    let out = c.handle(said("n1", asked("SIGUSR1")), t);
    let stop = Body::JobStop {
        node: "n1".into(),
        signal: "SIGUSR1".into(),
    };
    assert_eq!(sent(&out), [("n2".to_string(), stop.clone())]);
    assert_eq!(kinds(&out), [EventKind::JobStop]);
    assert!(c.handle(said("n1", asked("SIGTERM")), t).is_empty(), "once");
    assert_eq!(hello(&mut c, "n3", false, t), [("n3".to_string(), stop)]);
}
