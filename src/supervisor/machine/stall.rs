//! A process that stops answering (its liveness failed, or it printed a fatal line) is not stopped
//! at once: first its stacks are dumped (`WatchRequest::Dump`: py-spy for Python, the kernel's
//! view of every thread otherwise; `supervisor::watch::stacks`), for at most [`DUMP_WITHIN`],
//! so that what it was stuck in is in the log directory before anything else happens to it.
//! Then it is stopped and its restart policy decides, as before.

use std::time::{Duration, Instant};

use super::*;

/// How long the dump may take before the stop goes ahead without it.
pub const DUMP_WITHIN: Duration = Duration::from_secs(15);

/// A process waiting for its stack dump before its stop.
#[derive(Debug, Clone)]
pub(super) struct Stalled {
    pub(super) proc: usize,
    pub(super) generation: u64,
    pub(super) until: Instant,
}

impl Machine {
    /// Process `i` failed its liveness: its stacks are dumped, then it is stopped.
    pub(super) fn stalled(&mut self, i: usize, now: Instant, out: &mut Vec<Action>) {
        let p = &mut self.procs[i];
        // No more probes of this incarnation: its verdict is in.
        if let ProcState::Ready { liveness, .. } = &mut p.state {
            *liveness = None;
        }
        if self.stalls.iter().any(|s| s.proc == i) {
            return;
        }
        let Some(pgid) = p.state.live_pid() else {
            return;
        };
        self.stalls.push(Stalled {
            proc: i,
            generation: p.generation,
            until: now + DUMP_WITHIN,
        });
        out.push(Action::Watch(WatchRequest::Dump { proc: i, pgid }));
    }

    /// The dump of process `proc` is written (or could not be): its stop goes ahead.
    pub(super) fn on_dumped(&mut self, proc: usize, now: Instant, out: &mut Vec<Action>) {
        if let Some(at) = self.stalls.iter().position(|s| s.proc == proc) {
            let s = self.stalls.remove(at);
            self.stop_stalled(s, now, out);
        }
    }

    /// Dumps that took too long: the stops go ahead without them.
    pub(super) fn settle_stalls(&mut self, now: Instant, out: &mut Vec<Action>) {
        while let Some(at) = self.stalls.iter().position(|s| now >= s.until) {
            let s = self.stalls.remove(at);
            self.stop_stalled(s, now, out);
        }
    }

    /// Stop the stalled incarnation, if it still runs (it may have exited meanwhile, or the
    /// teardown taken it).
    fn stop_stalled(&mut self, s: Stalled, now: Instant, out: &mut Vec<Action>) {
        let p = &self.procs[s.proc];
        let live = p.generation == s.generation
            && matches!(
                p.state,
                ProcState::Starting { .. } | ProcState::Ready { .. }
            );
        if live && self.phase == Phase::Running {
            self.begin_stop(s.proc, AfterStop::Restart, now, out);
        }
    }

    /// When the next dump runs out.
    pub(super) fn stalls_deadline(&self) -> Option<Instant> {
        self.stalls.iter().map(|s| s.until).min()
    }
}
