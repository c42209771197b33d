//! The coordinator's decisions (the infra node's mcsup): pure, `handle(input, now) -> outputs`.
//!
//! It learns the job's workers over several nodes from the nodes' hellos, counts each worker's
//! restarts over the whole job (srtctl's `max_restarts`), and runs one restart generation at a
//! time: `stop` to every node holding a rank, every `down` in, srtctl's backoff, `start` to
//! every node (the start barrier). A node that goes away without saying it leaves, says it
//! failed, or does not stop its rank in time is a failed node: every node is told to drain.
//!
//! In a teardown it keeps the order across nodes: each node says the lowest teardown tier it
//! still runs (`tier`), and every node hears the highest tier it may stop (`may-stop`): the
//! lowest of every connected node's (one that has said nothing is at tier 0, so a node whose
//! stop signal comes a moment later still holds the others back). A node gone is out of it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::wire::{Body, UnitInfo};
use crate::plan::RestartPolicy;
use crate::runfiles::EventKind;

/// Beyond a rank's own stop grace, how long the coordinator waits for its `down`.
pub const DOWN_MARGIN: Duration = Duration::from_secs(10);

/// What the coordinator hears.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// What `node` said on its connection: `hello`, `down`, `ready`, `failing` or `leaving`
    /// (anything else is no news).
    Said {
        node: String,
        body: Body,
    },
    /// The node's connection closed, or its heartbeats stopped.
    Lost {
        node: String,
        why: String,
    },
    Tick,
}

/// What it does: tell a node, or note on its own node.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    Send { to: String, body: Body },
    Note(Note),
}

/// What the coordinator's node keeps of a decision: its events file and `worker_restarts.json`
/// (the node's loop hears it as [`super::net::Incoming::Decided`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// An event about `unit` (a worker or a node).
    Event {
        unit: String,
        kind: EventKind,
        detail: String,
    },
    /// A worker's restart decided.
    Restart(RestartRecord),
    /// A worker handed back without a restart.
    Settled(Settled),
    /// Its ranks were told to start again (srtctl's `relaunched`).
    Relaunched { worker: String },
    /// Its leader rank is ready again (srtctl's `ready`).
    ReadyAgain { worker: String },
}

/// One restart decision, as srtctl's `RestartEvent` records it.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartRecord {
    pub worker: String,
    /// The node whose rank failed.
    pub node: String,
    /// Its process there, when the node said (its log: `<node>.<process>.log`).
    pub process: Option<String>,
    /// 1 for the first restart.
    pub attempt: u32,
    pub exit_code: Option<i32>,
    /// `scheduled` (then `relaunched`, `ready`: [`Note::Relaunched`], [`Note::ReadyAgain`]),
    /// or `exhausted`.
    pub outcome: &'static str,
    pub backoff: Duration,
    pub policy: RestartPolicy,
    pub max_restarts: u32,
}

/// A worker whose policy hands it back without a restart (srtctl's `_release`: a success under
/// `on-failure`): listed in `worker_restarts.json`'s `endpoints`, with no event.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub worker: String,
    pub policy: RestartPolicy,
    pub restarts: u32,
    pub max_restarts: u32,
}

#[derive(Debug, Clone, PartialEq)]
enum Phase {
    Running,
    Stopping {
        waiting: BTreeSet<String>,
        deadline: Instant,
    },
    BackingOff {
        until: Instant,
    },
    /// Why: a late node's rank is given up with it.
    GivenUp(String),
}

#[derive(Debug, Clone)]
struct Unit {
    info: UnitInfo,
    generation: u64,
    restarts: u32,
    backoff: Duration,
    phase: Phase,
}

/// See the module doc.
#[derive(Debug, Default)]
pub struct Coordinator {
    /// Nodes with a live connection, and whether each said it leaves.
    nodes: BTreeMap<String, bool>,
    units: BTreeMap<String, Unit>,
    /// A node failed, and why: every node was told (one that joins later, when it joins);
    /// nothing more is decided.
    failed: Option<(String, String)>,
    /// The job's nodes: the job is done only once each has said hello (and so whether it
    /// holds a terminal process). Empty: whoever joined.
    expected: BTreeSet<String>,
    /// Nodes that said hello, ever.
    greeted: BTreeSet<String>,
    /// Nodes holding a terminal process (the benchmark client) that have not finished yet.
    terminal_pending: BTreeSet<String>,
    /// What the finished ones said, by node.
    finished: BTreeMap<String, String>,
    /// The job is done (the last terminal node, and what was said): every node was told.
    done: Option<(String, String)>,
    /// Each node's lowest teardown tier still running, as it said (`Body::Tier`).
    tiers: BTreeMap<String, u8>,
    /// The last `may-stop` said to every node, once a teardown began somewhere (its tier), and
    /// the nodes its tier waits for now.
    may_stop: Option<(u8, Vec<String>)>,
    /// The places of the stores that register with the master (`may-register`).
    slots: slots::Slots,
    /// The coordinator's own node: its stop request is the whole job's.
    home: Option<String>,
    /// The whole job was told to stop (`job-stop`): the signal, as its node said it.
    job_stop: Option<(String, String)>,
}

impl Coordinator {
    pub fn new() -> Self {
        Self::default()
    }

    /// A coordinator for a job of these nodes (in the node list's order), of whose stores at
    /// most `stores_at_once` register with the master at a time (0: no limit).
    pub fn expecting(nodes: Vec<String>, stores_at_once: u32) -> Self {
        Self {
            slots: slots::Slots::new(stores_at_once, nodes.clone()),
            expected: nodes.into_iter().collect(),
            ..Self::default()
        }
    }

    /// Running on `node`: a stop request there (`asked`) stops the whole job.
    pub fn at(mut self, node: &str) -> Self {
        self.home = Some(node.to_string());
        self
    }

    /// When [`Input::Tick`] is next due.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.units
            .values()
            .filter_map(|u| match &u.phase {
                Phase::Stopping { deadline, .. } => Some(*deadline),
                Phase::BackingOff { until } => Some(*until),
                _ => None,
            })
            .min()
    }

    /// A worker's restarts so far.
    pub fn restarts(&self, worker: &str) -> Option<u32> {
        self.units.get(worker).map(|u| u.restarts)
    }

    pub fn handle(&mut self, input: Input, now: Instant) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Said { node, body } => match body {
                Body::Hello {
                    units,
                    terminal,
                    stores,
                } => {
                    let first = self.greeted.insert(node.clone());
                    if terminal && first && !self.finished.contains_key(&node) {
                        self.terminal_pending.insert(node.clone());
                    }
                    for info in units {
                        self.units
                            .entry(info.worker.clone())
                            .or_insert_with(|| Unit {
                                backoff: Duration::from_millis(info.backoff_initial_ms),
                                info,
                                generation: 0,
                                restarts: 0,
                                phase: Phase::Running,
                            });
                    }
                    self.catch_up(&node, &mut out);
                    self.nodes.insert(node.clone(), false);
                    self.maybe_done(&node, &mut out);
                    self.order_teardown(&mut out);
                    self.slots.ask(&node, stores, now, &mut out);
                }
                Body::Down {
                    worker,
                    generation,
                    code,
                    exit,
                    process,
                } => self.on_down(node, process, worker, generation, code, exit, now, &mut out),
                Body::Ready { worker, generation }
                    if self.units.get(&worker).is_some_and(|u| {
                        u.generation == generation && generation > 0 && u.phase == Phase::Running
                    }) =>
                {
                    out.push(Output::Note(Note::ReadyAgain { worker }));
                }
                Body::Failing { reason } => self.node_failed(&node, reason, &mut out),
                Body::Leaving => {
                    self.nodes.insert(node, true);
                }
                Body::Finished { detail } if self.done.is_none() && self.failed.is_none() => {
                    self.terminal_pending.remove(&node);
                    self.finished.insert(node.clone(), detail);
                    self.maybe_done(&node, &mut out);
                }
                Body::Tier { pending } => {
                    self.tiers.insert(node, pending);
                    self.order_teardown(&mut out);
                }
                Body::Registered => self.slots.registered(&node, now, &mut out),
                Body::Asked { signal } if self.home.as_deref() == Some(node.as_str()) => {
                    self.stop_job(&node, signal, &mut out)
                }
                _ => {}
            },
            Input::Lost { node, why } => {
                if self.nodes.remove(&node) == Some(false) {
                    self.node_failed(&node, why, &mut out);
                }
                self.order_teardown(&mut out);
                self.slots.gone(&node, now, &mut out);
            }
            Input::Tick => self.on_tick(now, &mut out),
        }
        out
    }

    /// `process`: the rank's process on `node`, as the node named it.
    #[allow(clippy::too_many_arguments)]
    fn on_down(
        &mut self,
        node: String,
        process: Option<String>,
        worker: String,
        generation: u64,
        code: Option<i32>,
        exit: Option<String>,
        now: Instant,
        out: &mut Vec<Output>,
    ) {
        if self.failed.is_some() {
            return;
        }
        let Some(u) = self.units.get_mut(&worker) else {
            return;
        };
        // A report of an earlier generation is the failure already being handled.
        if generation != u.generation {
            return;
        }
        match &mut u.phase {
            Phase::Stopping { waiting, .. } => {
                waiting.remove(&node);
                if waiting.is_empty() {
                    let delay = u.backoff;
                    u.backoff = next_backoff(&u.info, u.backoff);
                    u.phase = Phase::BackingOff { until: now + delay };
                    out.push(Output::Note(Note::Event {
                        unit: worker.clone(),
                        kind: EventKind::UnitRestart,
                        detail: format!(
                            "generation {}: every rank of {worker} is down; all start again in {}",
                            u.generation,
                            crate::domain::show_secs(delay)
                        ),
                    }));
                }
            }
            Phase::Running => {
                let Some(code) = code else { return };
                let exit = exit.unwrap_or_else(|| format!("exit code {code}"));
                let info = u.info.clone();
                // Why it is given up, and what `worker_restarts.json` says of it (as srtctl:
                // `never` is not supervised, so nothing; a success is handed back, listed
                // without an event; the limit is an `exhausted` event).
                let give_up = match info.policy {
                    RestartPolicy::Always => None,
                    RestartPolicy::OnFailure if info.success_codes.contains(&code) => Some((
                        format!(
                            "its rank on {node} ended ({exit}), a success: policy on-failure does not restart it"
                        ),
                        Some(Output::Note(Note::Settled(Settled {
                            worker: worker.clone(),
                            policy: info.policy,
                            restarts: u.restarts,
                            max_restarts: info.max_restarts,
                        }))),
                    )),
                    RestartPolicy::OnFailure => None,
                    RestartPolicy::Never => Some((
                        format!(
                            "its rank on {node} ended ({exit}); restart policy {}",
                            info.policy
                        ),
                        None,
                    )),
                }
                .or_else(|| {
                    (u.restarts >= info.max_restarts).then(|| {
                        let exhausted = RestartRecord {
                            worker: worker.clone(),
                            node: node.clone(),
                            process: process.clone(),
                            attempt: u.restarts + 1,
                            exit_code: Some(code),
                            outcome: "exhausted",
                            backoff: Duration::ZERO,
                            policy: info.policy,
                            max_restarts: info.max_restarts,
                        };
                        (
                            format!(
                                "restart limit reached: {} restart(s) over the job (max_restarts {}); last, its rank on {node} ended ({exit})",
                                u.restarts, info.max_restarts
                            ),
                            Some(Output::Note(Note::Restart(exhausted))),
                        )
                    })
                });
                if let Some((reason, record)) = give_up {
                    u.phase = Phase::GivenUp(reason.clone());
                    out.extend(record);
                    out.push(Output::Note(Note::Event {
                        unit: worker.clone(),
                        kind: EventKind::UnitFailed,
                        detail: reason.clone(),
                    }));
                    for to in &info.nodes {
                        out.push(Output::Send {
                            to: to.clone(),
                            body: Body::GiveUp {
                                worker: worker.clone(),
                                reason: reason.clone(),
                            },
                        });
                    }
                    return;
                }
                u.restarts += 1;
                u.generation += 1;
                out.push(Output::Note(Note::Restart(RestartRecord {
                    worker: worker.clone(),
                    node: node.clone(),
                    process,
                    attempt: u.restarts,
                    exit_code: Some(code),
                    outcome: "scheduled",
                    backoff: u.backoff,
                    policy: info.policy,
                    max_restarts: info.max_restarts,
                })));
                u.phase = Phase::Stopping {
                    waiting: info.nodes.iter().cloned().collect(),
                    deadline: now + Duration::from_millis(info.stop_ms) + DOWN_MARGIN,
                };
                out.push(Output::Note(Note::Event {
                    unit: worker.clone(),
                    kind: EventKind::UnitRestart,
                    detail: format!(
                        "generation {}: its rank on {node} ended ({exit}); every rank ({}) stops, then all start again (restart {} of at most {} over the job)",
                        u.generation,
                        info.nodes.join(", "),
                        u.restarts,
                        info.max_restarts
                    ),
                }));
                for to in &info.nodes {
                    out.push(Output::Send {
                        to: to.clone(),
                        body: Body::Stop {
                            worker: worker.clone(),
                            generation: u.generation,
                        },
                    });
                }
            }
            Phase::BackingOff { .. } | Phase::GivenUp(_) => {}
        }
    }

    fn on_tick(&mut self, now: Instant, out: &mut Vec<Output>) {
        let mut late = None;
        for (worker, u) in &mut self.units {
            match &u.phase {
                Phase::Stopping { waiting, deadline } if *deadline <= now => {
                    let node = waiting.iter().next().cloned().unwrap_or_default();
                    late.get_or_insert((
                        node.clone(),
                        format!(
                            "{node} did not report its rank of {worker} down within {} of the stop",
                            crate::domain::show_secs(
                                Duration::from_millis(u.info.stop_ms) + DOWN_MARGIN
                            )
                        ),
                    ));
                }
                Phase::BackingOff { until } if *until <= now => {
                    u.phase = Phase::Running;
                    out.push(Output::Note(Note::Relaunched {
                        worker: worker.clone(),
                    }));
                    for to in &u.info.nodes {
                        out.push(Output::Send {
                            to: to.clone(),
                            body: Body::Start {
                                worker: worker.clone(),
                                generation: u.generation,
                            },
                        });
                    }
                }
                _ => {}
            }
        }
        if let Some((node, why)) = late {
            self.node_failed(&node, why, out);
        }
    }

    /// `node` failed for good: every other node is told to drain, once.
    fn node_failed(&mut self, node: &str, reason: String, out: &mut Vec<Output>) {
        if self.failed.is_some() {
            return;
        }
        for u in self.units.values_mut() {
            u.phase = Phase::GivenUp(format!("node {node} failed"));
        }
        out.push(Output::Note(Note::Event {
            unit: node.to_string(),
            kind: EventKind::PeerFailed,
            detail: format!("node {node} failed: {reason}; every node drains"),
        }));
        for to in self.nodes.keys().filter(|n| n.as_str() != node) {
            out.push(Output::Send {
                to: to.clone(),
                body: Body::NodeFailed {
                    node: node.to_string(),
                    reason: reason.clone(),
                },
            });
        }
        self.failed = Some((node.to_string(), reason));
    }

    /// What the job is for: once a node said its part ended, every node that holds a terminal
    /// process did, and every node of the job has said hello (one that has not may hold one),
    /// the job is done and every node drains (`last`, the node whose word completed it).
    fn maybe_done(&mut self, last: &str, out: &mut Vec<Output>) {
        let all_greeted = self.expected.iter().all(|n| self.greeted.contains(n));
        if self.done.is_some()
            || self.failed.is_some()
            || self.finished.is_empty()
            || !self.terminal_pending.is_empty()
            || !all_greeted
        {
            return;
        }
        let detail = self
            .finished
            .iter()
            .map(|(n, d)| format!("{n}: {d}"))
            .collect::<Vec<_>>()
            .join("; ");
        out.push(Output::Note(Note::Event {
            unit: last.to_string(),
            kind: EventKind::JobDone,
            detail: format!("{detail}: the job is done, every node drains"),
        }));
        for to in self.nodes.keys() {
            out.push(Output::Send {
                to: to.clone(),
                body: Body::JobDone {
                    node: last.to_string(),
                    detail: detail.clone(),
                },
            });
        }
        self.done = Some((last.to_string(), detail));
    }

    /// The teardown's order across nodes: once some node said its tier, every connected node
    /// hears the highest tier it may stop when that changes, and the coordinator's node notes
    /// each tier done everywhere.
    fn order_teardown(&mut self, out: &mut Vec<Output>) {
        if self.tiers.is_empty() {
            return;
        }
        let tier_of = |n: &String| self.tiers.get(n).copied().unwrap_or(0);
        let Some(tier) = self.nodes.keys().map(tier_of).min() else {
            return;
        };
        let waiting: Vec<String> = self
            .nodes
            .keys()
            .filter(|n| tier_of(n) == tier)
            .cloned()
            .collect();
        let before = self.may_stop.as_ref().map(|(t, _)| *t);
        if before == Some(tier) {
            // The same tier, fewer nodes left in it: no news worth a message to every node
            // (said each time, a tier of N nodes cost N broadcasts of N names: at 128 nodes
            // 154 KB per node in a teardown, and 220 ms between two tiers).
            self.may_stop = Some((tier, waiting));
            return;
        }
        if let Some(done) = before.filter(|b| *b < tier) {
            let names = crate::plan::TEARDOWN_TIERS;
            let name = |t: u8| names.get(usize::from(t)).copied().unwrap_or("nothing");
            let next = if tier == super::wire::TIER_NONE {
                "nothing is left on the nodes still connected".to_string()
            } else {
                format!("{} may stop", name(tier))
            };
            out.push(Output::Note(Note::Event {
                unit: "mcsup".into(),
                kind: EventKind::TierDone,
                detail: format!(
                    "teardown across nodes: {} stopped on every node ({}): {next}",
                    (done..tier)
                        .filter_map(|t| names.get(usize::from(t)))
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", "),
                    self.nodes.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            }));
        }
        for to in self.nodes.keys() {
            out.push(Output::Send {
                to: to.clone(),
                body: Body::MayStop {
                    tier,
                    waiting: waiting.clone(),
                },
            });
        }
        self.may_stop = Some((tier, waiting));
    }

    /// The coordinator's node (`from`) was asked to stop: so is every other node, once (the
    /// teardown's order across nodes then holds: every node is in it). Not after the job is
    /// done or failed: every node drains already.
    fn stop_job(&mut self, from: &str, signal: String, out: &mut Vec<Output>) {
        if self.job_stop.is_some() || self.done.is_some() || self.failed.is_some() {
            return;
        }
        out.push(Output::Note(Note::Event {
            unit: from.to_string(),
            kind: EventKind::JobStop,
            detail: format!(
                "{from} (the coordinator's node) received {signal}: every node stops, in order"
            ),
        }));
        self.job_stop = Some((from.to_string(), signal));
        out.extend(self.nodes.keys().filter_map(|to| self.job_stop_to(to)));
    }

    /// The `job-stop` for node `to`, once the job was told to stop (none for the node asked).
    fn job_stop_to(&self, to: &str) -> Option<Output> {
        let (from, signal) = self.job_stop.as_ref().filter(|(f, _)| f != to)?;
        Some(Output::Send {
            to: to.to_string(),
            body: Body::JobStop {
                node: from.clone(),
                signal: signal.clone(),
            },
        })
    }

    /// A node joins (late, or again): what it missed. A failed node (it drains); its workers'
    /// give-ups; the stop of a generation that waits for its rank.
    fn catch_up(&self, node: &str, out: &mut Vec<Output>) {
        if let Some((from, detail)) = &self.done {
            out.push(Output::Send {
                to: node.to_string(),
                body: Body::JobDone {
                    node: from.clone(),
                    detail: detail.clone(),
                },
            });
            return;
        }
        if let Some(stop) = self.job_stop_to(node) {
            out.push(stop);
            return;
        }
        if let Some((failed, reason)) = &self.failed {
            if failed != node {
                out.push(Output::Send {
                    to: node.to_string(),
                    body: Body::NodeFailed {
                        node: failed.clone(),
                        reason: reason.clone(),
                    },
                });
            }
            return;
        }
        for (worker, u) in &self.units {
            if !u.info.nodes.iter().any(|n| n == node) {
                continue;
            }
            let body = match &u.phase {
                Phase::GivenUp(reason) => Body::GiveUp {
                    worker: worker.clone(),
                    reason: reason.clone(),
                },
                Phase::Stopping { waiting, .. } if waiting.contains(node) => Body::Stop {
                    worker: worker.clone(),
                    generation: u.generation,
                },
                _ => continue,
            };
            out.push(Output::Send {
                to: node.to_string(),
                body,
            });
        }
    }
}

fn next_backoff(info: &UnitInfo, now: Duration) -> Duration {
    let next = now.as_secs_f64() * info.backoff_factor.max(1.0);
    Duration::try_from_secs_f64(next)
        .unwrap_or(Duration::MAX)
        .min(Duration::from_millis(info.backoff_max_ms))
}

mod slots;

#[cfg(test)]
mod tests;
