//! The coordinator's places for stores that register with the Mooncake master: at most
//! `at_once` stores of the job register at a time (a node with more than that many goes alone),
//! given out in the node list's order; a node's places come back once it says its stores are
//! registered (its stores' readiness: the master lists each at its size), or when it is gone.
//! So the master never sees the whole job's stores join at once (a master busy longer than
//! `client_ttl` expires every client: kvcache-ai/Mooncake#3937, #4181). Pure.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use super::{Note, Output};
use crate::runfiles::EventKind;
use crate::supervisor::control::wire::Body;

/// See the module doc.
#[derive(Debug, Default)]
pub(super) struct Slots {
    /// 0: no limit (every node's stores may register at once).
    at_once: u32,
    /// Each node's place in the node list: who is served first (a node not in it, last).
    rank: HashMap<String, usize>,
    /// Nodes whose stores wait for a place, and how many, first in the node list first.
    waiting: BTreeMap<(usize, String), u32>,
    /// Nodes whose stores are registering: how many, and since when.
    holding: BTreeMap<String, (u32, Instant)>,
    /// Nodes that said their stores are registered (or will not be).
    done: BTreeSet<String>,
}

impl Slots {
    pub(super) fn new(at_once: u32, order: Vec<String>) -> Self {
        Self {
            at_once,
            rank: order.into_iter().enumerate().map(|(i, n)| (n, i)).collect(),
            ..Self::default()
        }
    }

    /// Where `node` waits.
    fn key(&self, node: &str) -> (usize, String) {
        (
            self.rank.get(node).copied().unwrap_or(usize::MAX),
            node.to_string(),
        )
    }

    /// `node` said hello with `stores` waiting for a place (again, after a reconnect: what it
    /// holds is said again).
    pub(super) fn ask(&mut self, node: &str, stores: u32, now: Instant, out: &mut Vec<Output>) {
        if stores == 0 || self.done.contains(node) {
            return;
        }
        if self.holding.contains_key(node) {
            out.push(self.may_register(node));
            return;
        }
        self.waiting.insert(self.key(node), stores);
        self.give(now, out);
    }

    /// `node`'s stores are registered, or will not be: its places are free.
    pub(super) fn registered(&mut self, node: &str, now: Instant, out: &mut Vec<Output>) {
        self.waiting.remove(&self.key(node));
        if let Some((stores, since)) = self.holding.remove(node) {
            out.push(Output::Note(Note::Event {
                unit: node.to_string(),
                kind: EventKind::StoresRegistered,
                detail: format!(
                    "{node}'s {} registered with the master {} after their place was given; {} registering, {} waiting for a place",
                    stores_word(stores),
                    crate::domain::show_secs(now.duration_since(since)),
                    self.registering(),
                    self.queued()
                ),
            }));
        }
        self.done.insert(node.to_string());
        self.give(now, out);
    }

    /// `node` is gone: whatever it held or waited for is free.
    pub(super) fn gone(&mut self, node: &str, now: Instant, out: &mut Vec<Output>) {
        let held = self.holding.remove(node).is_some();
        self.waiting.remove(&self.key(node));
        if held {
            self.give(now, out);
        }
    }

    fn registering(&self) -> u32 {
        self.holding.values().map(|(n, _)| n).sum()
    }

    fn queued(&self) -> u32 {
        self.waiting.values().sum()
    }

    fn may_register(&self, node: &str) -> Output {
        Output::Send {
            to: node.to_string(),
            body: Body::MayRegister {
                registering: self.registering(),
                waiting: self.queued(),
            },
        }
    }

    /// Places to the waiting nodes, first in the node list first, while they fit (a node with
    /// more stores than `at_once` once nothing else registers). No one passes a node that does
    /// not fit yet: a node with many stores is not starved by smaller ones.
    fn give(&mut self, now: Instant, out: &mut Vec<Output>) {
        loop {
            let Some((key, stores)) = self.waiting.first_key_value() else {
                return;
            };
            let (key, stores) = (key.clone(), *stores);
            let busy = self.registering();
            if self.at_once != 0 && busy > 0 && busy + stores > self.at_once {
                return;
            }
            self.waiting.remove(&key);
            let node = key.1;
            self.holding.insert(node.clone(), (stores, now));
            out.push(Output::Note(Note::Event {
                unit: node.clone(),
                kind: EventKind::StoreSlot,
                detail: format!(
                    "{node}'s {} may register with the master: {} registering (at most {} at once), {} waiting",
                    stores_word(stores),
                    self.registering(),
                    self.at_once,
                    self.queued()
                ),
            }));
            out.push(self.may_register(&node));
        }
    }
}

fn stores_word(n: u32) -> String {
    if n == 1 {
        "1 store".into()
    } else {
        format!("{n} stores")
    }
}
