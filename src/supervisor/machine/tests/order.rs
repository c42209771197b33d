//! The teardown's order across nodes (`order.rs`): a tier waits for the coordinator's word, or
//! for this node's own deadline.

use super::*;

fn word(h: &mut H, floor: Option<u8>, waiting: &[&str]) -> Vec<Action> {
    h.ev(Event::JobTier {
        floor,
        waiting: waiting.iter().map(|s| s.to_string()).collect(),
    })
}

#[test]
fn each_tier_waits_for_the_jobs_word_that_the_lower_ones_stopped_everywhere() {
    let mut h = H::new(chain());
    h.start_all();
    // Joined: nothing past tier 0 stops without the job's word.
    word(&mut h, Some(0), &[]);
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert!(signals(&a).is_empty(), "{a:?}");
    assert_eq!(h.m.pending_tier(), Some(2));
    // Every node's frontends are down: the workers may stop (the worker is tier 2).
    let a = word(&mut h, Some(2), &["n2"]);
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
    let a = h.gone(102, ExitStatus::Signal(15));
    // The store (tier 3) waits: another node's workers still run.
    assert!(signals(&a).is_empty(), "{a:?}");
    assert_eq!(h.m.pending_tier(), Some(3));
    let a = word(&mut h, Some(3), &["n1", "n2"]);
    assert_eq!(signals(&a), [(101, Signal::SIGINT), (101, Signal::SIGCONT)]);
    let a = h.gone(101, ExitStatus::Code(0));
    assert!(signals(&a).is_empty(), "{a:?}");
    // The link goes: the node's own order, at once.
    let a = word(&mut h, None, &[]);
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGTERM), (100, Signal::SIGCONT)]
    );
    let a = h.gone(100, ExitStatus::Code(0));
    assert!(has(&a, "mcsup", RecordKind::Finished));
    assert_eq!(h.m.pending_tier(), None);
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn a_tier_the_job_holds_back_goes_when_this_node_cannot_wait_longer() {
    // Deadline 24 s, graces 1 s, 3 s and 5 s (a sixth of the teardown is 4 s): the worker must
    // start by 24 - (1 + 3 + 4) = 16 s, the store by 24 - 7 = 17 s, the master by 20 s.
    let mut p = chain();
    p.shutdown.deadline = d(24_000);
    p.processes[1].stop.grace = d(3_000);
    p.processes[0].stop.grace = d(5_000);
    let mut h = H::new(p);
    h.start_all();
    word(&mut h, Some(0), &[]);
    h.ev(Event::Signal(Signal::SIGTERM));
    word(&mut h, Some(1), &["n2"]);
    assert_eq!(h.m.next_deadline(), Some(h.t0 + d(16_000)));
    assert!(signals(&h.at(15_999)).is_empty());
    let a = h.at(16_000);
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
    assert_eq!(
        detail(&a, "mcsup", RecordKind::TierAlone),
        "the workers stop now without the job's word: 8 s of this node's teardown is left, what they and the tiers after them need; the job was waiting for the frontends on n2 when that tier's turn came"
    );
    // Stopping, the worker is no longer held: nothing is due before its grace ends (a deadline
    // in the past here once spun the loop).
    assert_eq!(h.m.next_deadline(), Some(h.t0 + d(17_000)));
    let a = h.gone(102, ExitStatus::Signal(15));
    assert!(signals(&a).is_empty(), "{a:?}");
    let a = h.at(17_000);
    assert_eq!(signals(&a), [(101, Signal::SIGINT), (101, Signal::SIGCONT)]);
    assert!(has(&a, "mcsup", RecordKind::TierAlone));
    let a = h.gone(101, ExitStatus::Code(0));
    assert!(signals(&a).is_empty());
    // The job's word comes: the master goes at once.
    let a = word(&mut h, Some(4), &["n1"]);
    assert_eq!(
        signals(&a),
        [(100, Signal::SIGTERM), (100, Signal::SIGCONT)]
    );
    h.gone(100, ExitStatus::Code(0));
    // Each went within its grace: nothing was SIGKILLed.
    assert_eq!(h.m.exit_code(), 0);
}

#[test]
fn without_the_jobs_word_the_node_keeps_its_own_order() {
    let mut h = H::new(chain());
    h.start_all();
    let a = h.ev(Event::Signal(Signal::SIGTERM));
    assert_eq!(
        signals(&a),
        [(102, Signal::SIGTERM), (102, Signal::SIGCONT)]
    );
    assert!(!has(&a, "mcsup", RecordKind::TierAlone));
}
