//! The teardown's order across nodes (issue: the whole job in order): with a control connection,
//! a process of teardown tier `t` starts its stop only once the coordinator says every node's
//! processes of the lower tiers have stopped (`Event::JobTier`), or once this node cannot wait
//! longer: what is left of its teardown is what its tiers from `t` on need (`latest_start`), so a
//! node that does not answer cannot take the time the later tiers need. Without a connection (a
//! single node, a link never made or lost) the node's own order is all there is.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::*;
use crate::domain::show_secs;
use crate::plan::TEARDOWN_TIERS;

/// How many shares of the teardown's time the tiers' reserve is counted in: one per tier.
const SHARES: u32 = TEARDOWN_TIERS.len() as u32;

/// What the coordinator last said of the job-wide teardown.
#[derive(Debug, Clone, Default)]
pub(super) struct JobOrder {
    /// The highest tier this node may stop (`None`: no job-wide order, the node's own).
    floor: Option<u8>,
    /// The nodes whose processes of tier `floor` still run.
    waiting: Vec<String>,
    /// When this node's teardown began (its time is what the tiers' reserve is counted in).
    pub(super) began: Option<Instant>,
    /// Tiers this node stopped without the job's word (said once each).
    alone: BTreeSet<u8>,
}

impl Machine {
    /// The coordinator's word on the teardown's order (`None`: the link is gone, or never was).
    pub(super) fn on_job_tier(&mut self, floor: Option<u8>, waiting: Vec<String>) {
        self.order.floor = floor;
        self.order.waiting = waiting;
    }

    /// The lowest teardown tier of a process still alive here (`None`: nothing is).
    pub fn pending_tier(&self) -> Option<u8> {
        self.procs
            .iter()
            .filter(|p| !p.state.terminal())
            .map(|p| p.spec.teardown_tier())
            .min()
    }

    /// When this node's processes of `tier` must start their stop, whatever the other nodes:
    /// the teardown deadline less, for this tier and each later one here, its longest grace but
    /// at most a sixth of the teardown (a tier whose grace alone could take the whole teardown
    /// does not make every wait zero). A lower tier elsewhere may take as long as its own stop
    /// needs (a drained frontend finishes what it admitted); one that takes longer, or a node
    /// that does not answer, is passed over then.
    fn latest_start(&self, tier: u8) -> Option<Instant> {
        let (began, deadline) = (self.order.began?, self.teardown_deadline?);
        let share = deadline.saturating_duration_since(began) / SHARES;
        let mut longest: BTreeMap<u8, Duration> = BTreeMap::new();
        for p in self.procs.iter().filter(|p| !p.state.terminal()) {
            let t = p.spec.teardown_tier();
            if t >= tier {
                let g = longest.entry(t).or_default();
                *g = (*g).max(p.spec.stop.grace.min(share));
            }
        }
        deadline.checked_sub(longest.values().sum())
    }

    /// Whether process `i` may start its stop as far as the job-wide order goes; the first of a
    /// tier that goes without the job's word says so.
    pub(super) fn tier_may_stop(&mut self, i: usize, now: Instant, out: &mut Vec<Action>) -> bool {
        let tier = self.procs[i].spec.teardown_tier();
        let Some(floor) = self.order.floor.filter(|f| tier > *f) else {
            return true;
        };
        if self.order.alone.contains(&tier) {
            return true;
        }
        if self.latest_start(tier).is_some_and(|at| now < at) {
            return false;
        }
        self.order.alone.insert(tier);
        let name = |t: u8| TEARDOWN_TIERS.get(usize::from(t)).copied().unwrap_or("?");
        let left = self
            .teardown_deadline
            .map_or(Duration::ZERO, |d| d.saturating_duration_since(now));
        out.push(Action::Record(rec("mcsup", RecordKind::TierAlone).detail(format!(
            "{} stop now without the job's word: {} of this node's teardown is left, what they and the tiers after them need; the job was waiting for {} on {} when that tier's turn came",
            name(tier),
            show_secs(left),
            name(floor),
            if self.order.waiting.is_empty() {
                "its nodes".to_string()
            } else {
                self.order.waiting.join(", ")
            }
        ))));
        true
    }

    /// When a tier held back for the job's word goes anyway (for [`Machine::next_deadline`]):
    /// only while a process of it has not started its stop.
    pub(super) fn order_deadline(&self) -> Option<Instant> {
        let floor = self.order.floor?;
        let tier = self
            .procs
            .iter()
            .filter(|p| {
                matches!(
                    p.state,
                    ProcState::Ready { .. }
                        | ProcState::Starting { .. }
                        | ProcState::Execing { .. }
                )
            })
            .map(|p| p.spec.teardown_tier())
            .filter(|t| *t > floor && !self.order.alone.contains(t))
            .min()?;
        self.latest_start(tier)
    }
}
