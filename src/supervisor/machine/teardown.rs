//! Teardown: signals from outside, the ordered stop in waves (`ProcessSpec::teardown_tier`:
//! what runs after the frontends, the frontends, the workers and what runs with them, the stores
//! and services started before the workers, the Mooncake masters, then the infrastructure such
//! as etcd and NATS), per-process grace, the global deadline, escalation and the final SIGKILL.

use std::time::{Duration, Instant};

use crate::domain::show_secs;

use nix::sys::signal::Signal;

use super::*;

impl Machine {
    pub(super) fn on_signal(&mut self, sig: Signal, now: Instant, out: &mut Vec<Action>) {
        let counts =
            matches!(sig, Signal::SIGINT | Signal::SIGTERM) && sig != self.shutdown.drain_signal.0;
        if matches!(self.phase, Phase::Stopping | Phase::Done) {
            if counts {
                match self.first_stop_signal_at {
                    Some(first) if now.saturating_duration_since(first) >= ESCALATION_MIN_GAP => {
                        self.escalate(sig, now, out);
                        return;
                    }
                    None => self.first_stop_signal_at = Some(now),
                    _ => {}
                }
                if self.cut_drain(sig, now, out) {
                    return;
                }
            }
            out.push(Action::Record(
                rec("mcsup", RecordKind::SignalIgnored)
                    .detail(format!("{} during teardown", sig.as_str())),
            ));
            return;
        }
        if counts {
            self.first_stop_signal_at = Some(now);
        }
        self.begin_teardown(ShutdownReason::Signal(sig), now, out);
    }

    /// A stop request during a drain (round 4's M5): under Slurm a SIGTERM means KillWait's
    /// SIGKILL is near, so the drain's wait ends at once and every process is stopped in its
    /// tier now, within the teardown's own deadline. Whether there was a drain to cut.
    fn cut_drain(&mut self, sig: Signal, now: Instant, out: &mut Vec<Action>) -> bool {
        let Some(until) = self.drain_until.filter(|u| *u > now) else {
            return false;
        };
        out.push(Action::Record(rec("mcsup", RecordKind::DrainCut).detail(format!(
            "{} during the drain ({} of it left): a stop request does not wait for requests; every process is stopped now, the teardown within {}",
            sig.as_str(),
            show_secs(until.saturating_duration_since(now)),
            show_secs(self.shutdown.deadline)
        ))));
        self.drain_until = Some(now);
        self.drain_cut = Some(sig);
        self.teardown_deadline = self
            .teardown_deadline
            .map(|d| d.min(now + self.shutdown.deadline));
        for p in &mut self.procs {
            match &mut p.state {
                ProcState::Draining { drain, .. } => drain.until = drain.until.min(now),
                // A drained frontend, signalled already, was given the drain to finish what it
                // admitted: from now, its own grace (the re-run of round 4's M5: it kept its 35 s,
                // the workers behind it were never signalled, and the deadline SIGKILLed all).
                ProcState::Stopping {
                    kill_at,
                    killed: false,
                    ..
                } => *kill_at = (*kill_at).min(now + p.spec.stop.grace),
                _ => {}
            }
        }
        self.version += 1;
        true
    }

    pub(super) fn escalate(&mut self, sig: Signal, now: Instant, out: &mut Vec<Action>) {
        if self.escalated {
            return;
        }
        self.escalated = true;
        let why = format!("second {}", sig.as_str());
        out.push(Action::Record(
            rec("mcsup", RecordKind::Escalated).detail(format!("{why}: SIGKILL to every group")),
        ));
        self.kill_everything(now, &why, out);
    }

    /// SIGKILL every live group at once (escalation or global deadline); `why` goes into each
    /// `killing` event.
    pub(super) fn kill_everything(&mut self, now: Instant, why: &str, out: &mut Vec<Action>) {
        for i in 0..self.procs.len() {
            let name = self.procs[i].spec.name.clone();
            match &mut self.procs[i].state {
                ProcState::Stopping { pid, killed, .. } => {
                    if !*killed {
                        *killed = true;
                        out.push(Action::Record(
                            rec(&name, RecordKind::Killing).pid(*pid).detail(why),
                        ));
                    }
                    out.push(Action::Signal {
                        pgid: *pid,
                        signal: Signal::SIGKILL,
                    });
                    self.sigkill_needed = true;
                }
                ProcState::Starting { pid, .. }
                | ProcState::Ready { pid, .. }
                | ProcState::Execing { pid }
                | ProcState::Draining { pid, .. } => {
                    let pid = *pid;
                    out.push(Action::Record(
                        rec(&name, RecordKind::Killing).pid(pid).detail(why),
                    ));
                    out.push(Action::Signal {
                        pgid: pid,
                        signal: Signal::SIGKILL,
                    });
                    out.push(Action::WatchGroup { pgid: pid });
                    let state = ProcState::Stopping {
                        pid,
                        leader: None,
                        group_empty: false,
                        kill_at: now,
                        killed: true,
                        then: AfterStop::Teardown,
                    };
                    self.set_state(i, state, now);
                    self.sigkill_needed = true;
                }
                _ => {}
            }
        }
        self.version += 1;
    }

    pub(super) fn begin_teardown(
        &mut self,
        reason: ShutdownReason,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        if matches!(self.phase, Phase::Stopping | Phase::Done) {
            return;
        }
        let drain = match reason {
            ShutdownReason::Signal(sig) | ShutdownReason::JobStop { signal: sig, .. }
                if sig == self.shutdown.drain_signal.0 =>
            {
                self.shutdown.drain
            }
            _ => Duration::ZERO,
        };
        let detail = if drain.is_zero() {
            reason.to_string()
        } else {
            format!(
                "{reason}: in-flight requests have {} to end, then the teardown {}",
                show_secs(drain),
                show_secs(self.shutdown.deadline)
            )
        };
        out.push(Action::Record(
            rec("mcsup", RecordKind::ShutdownRequested).detail(detail),
        ));
        self.phase = Phase::Stopping;
        self.order.began = Some(now);
        self.reason = Some(reason);
        self.drain_until = (!drain.is_zero()).then(|| now + drain);
        self.teardown_deadline = Some(now + drain + self.shutdown.deadline);
        for g in &mut self.gates {
            if matches!(g.state, GateState::Probing(_)) {
                g.state = GateState::Cancelled;
                g.since = now;
            }
        }
        for i in 0..self.procs.len() {
            match &mut self.procs[i].state {
                ProcState::Waiting | ProcState::BackingOff { .. } | ProcState::Rejoining { .. } => {
                    let r = rec(&self.procs[i].spec.name, RecordKind::Stopped)
                        .detail("never started (teardown)");
                    out.push(Action::Record(r));
                    self.set_state(i, ProcState::Exited, now);
                }
                // Exits during teardown are never restarted, nor reported to the coordinator.
                ProcState::Stopping { then, .. }
                    if matches!(then, AfterStop::Restart | AfterStop::RankDown { .. }) =>
                {
                    *then = AfterStop::Teardown
                }
                _ => {}
            }
        }
        self.version += 1;
    }

    /// Send the stop signal (with SIGCONT: a stopped process never handles SIGTERM) and arm the
    /// grace timer.
    pub(super) fn begin_stop(
        &mut self,
        i: usize,
        then: AfterStop,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let Some(pid) = self.procs[i].state.live_pid() else {
            return;
        };
        let stop = self.procs[i].spec.stop.clone();
        let mut kill_at = now + stop.grace;
        if let (Some(until), Some(_)) = (self.drain_until, &stop.inflight) {
            if !drain_waits(self.procs[i].spec.kind) {
                // A drained frontend finishes what it admitted before it exits: it has the drain.
                kill_at = kill_at.max(until + stop.grace);
            }
        }
        if let (Some(d), Phase::Stopping) = (self.teardown_deadline, self.phase) {
            // The global deadline shortens later graces.
            kill_at = kill_at.min(d);
        }
        let detail = format!(
            "{} then SIGKILL after {} ms",
            stop.signal,
            ms(kill_at.saturating_duration_since(now))
        );
        out.push(Action::Record(
            rec(&self.procs[i].spec.name, RecordKind::Stopping)
                .pid(pid)
                .detail(detail),
        ));
        out.push(Action::Signal {
            pgid: pid,
            signal: stop.signal.0,
        });
        if stop.signal.0 != Signal::SIGCONT && stop.signal.0 != Signal::SIGKILL {
            out.push(Action::Signal {
                pgid: pid,
                signal: Signal::SIGCONT,
            });
        }
        out.push(Action::WatchGroup { pgid: pid });
        let killed = stop.signal.0 == Signal::SIGKILL;
        let state = ProcState::Stopping {
            pid,
            leader: None,
            group_empty: false,
            kill_at,
            killed,
            then,
        };
        self.set_state(i, state, now);
    }

    pub(super) fn check_node_done(&mut self, now: Instant, out: &mut Vec<Action>) {
        if !matches!(self.phase, Phase::Starting | Phase::Running) {
            return;
        }
        // srtctl's `critical: false`: the job keeps serving without the worker. Ending this node
        // would end the job (the batch script drains every node once one has ended).
        if self.peers
            && self.procs.iter().any(|p| {
                p.spec.kind == ProcessKind::Worker
                    && !p.spec.critical
                    && matches!(p.state, ProcState::Failed)
            })
        {
            if !self.stays_up_said && self.procs.iter().all(|p| p.state.terminal()) {
                self.stays_up_said = true;
                out.push(Action::Record(rec("mcsup", RecordKind::Waiting).detail(
                    "nothing runs here any more, and a non-critical worker failed: this node stays up while the job serves on its other nodes, until told to stop",
                )));
            }
            return;
        }
        let mut workers = self
            .procs
            .iter()
            .filter(|p| p.spec.kind == ProcessKind::Worker)
            .peekable();
        if self.shutdown.exit_when_workers_done
            && workers.peek().is_some()
            && workers.all(|p| p.state.terminal())
        {
            self.begin_teardown(ShutdownReason::WorkersDone, now, out);
            return;
        }
        let gates_pending = self
            .gates
            .iter()
            .any(|g| matches!(g.state, GateState::Probing(_)));
        // A node holding ranks of another node's Slurm step stays up until told to stop.
        if !gates_pending
            && self.shutdown.holds_ranks_of.is_empty()
            && self.procs.iter().all(|p| p.state.terminal())
        {
            self.begin_teardown(ShutdownReason::NothingLeft, now, out);
        }
    }

    pub(super) fn settle_teardown(&mut self, now: Instant, out: &mut Vec<Action>) {
        let Some(deadline) = self.teardown_deadline else {
            return;
        };
        if now >= deadline && !self.deadline_hit {
            self.deadline_hit = true;
            if self.procs.iter().any(|p| p.state.live_pid().is_some()) {
                let why = format!(
                    "teardown deadline of {} ms reached",
                    ms(self.shutdown.deadline)
                );
                out.push(Action::Record(
                    rec("mcsup", RecordKind::Deadline)
                        .detail(format!("{why}: SIGKILL to every group")),
                ));
                self.kill_everything(now, &why, out);
            }
        }
        if self.deadline_hit && now >= deadline + ABANDON_AFTER_DEADLINE {
            for i in 0..self.procs.len() {
                if let Some(pid) = self.procs[i].state.live_pid() {
                    let r = rec(&self.procs[i].spec.name, RecordKind::Abandoned)
                        .pid(pid)
                        .detail("group still not empty after SIGKILL (uninterruptible sleep?)");
                    out.push(Action::Record(r));
                    self.set_state(i, ProcState::Exited, now);
                }
            }
        }
        self.settle_drains(now, out);
        // Waves: a process starts stopping once every process of a lower stop level is gone.
        let pending_level = self
            .procs
            .iter()
            .filter(|p| !p.state.terminal())
            .map(|p| p.stop_level)
            .min();
        if let Some(level) = pending_level {
            for i in 0..self.procs.len() {
                if self.procs[i].stop_level != level
                    || self.procs[i].state.live_pid().is_none()
                    || matches!(
                        self.procs[i].state,
                        ProcState::Stopping { .. } | ProcState::Draining { .. }
                    )
                    || !self.tier_may_stop(i, now, out)
                {
                    continue;
                }
                let p = &self.procs[i];
                match (&p.state, self.drain_until, &p.spec.stop.inflight) {
                    (ProcState::Ready { pid, .. }, Some(until), Some(_)) => {
                        let pid = *pid;
                        self.begin_drain(i, pid, until, now);
                    }
                    (
                        ProcState::Execing { .. }
                        | ProcState::Starting { .. }
                        | ProcState::Ready { .. },
                        ..,
                    ) => self.begin_stop(i, AfterStop::Teardown, now, out),
                    _ => {}
                }
            }
        }
        if self.procs.iter().all(|p| p.state.terminal()) {
            self.phase = Phase::Done;
            self.version += 1;
            let code = self.exit_code();
            let r = rec("mcsup", RecordKind::Finished).detail(format!("exit code {code}"));
            out.push(Action::Record(r));
        }
    }

    /// Grace periods that ran out: SIGKILL the whole group.
    pub(super) fn settle_kills(&mut self, now: Instant, out: &mut Vec<Action>) {
        let stopping = self.phase == Phase::Stopping;
        for p in &mut self.procs {
            if let ProcState::Stopping {
                pid,
                killed,
                kill_at,
                then,
                ..
            } = &mut p.state
            {
                if !*killed && *kill_at <= now {
                    *killed = true;
                    if stopping && *then == AfterStop::Teardown {
                        self.sigkill_needed = true;
                    }
                    let r = rec(&p.spec.name, RecordKind::Killing)
                        .pid(*pid)
                        .detail("grace expired");
                    out.push(Action::Record(r));
                    out.push(Action::Signal {
                        pgid: *pid,
                        signal: Signal::SIGKILL,
                    });
                    self.version += 1;
                }
            }
        }
    }

    /// A drain reaches a ready process whose engine counts its requests: read it first.
    fn begin_drain(&mut self, i: usize, pid: Pid, until: Instant, now: Instant) {
        let drain = Drain {
            started: now,
            // A frontend is read once, then stopped, whatever the answer.
            until: if drain_waits(self.procs[i].spec.kind) {
                until
            } else {
                now + INFLIGHT_READ_TIMEOUT
            },
            first: None,
            last: None,
            next_read: Some(now),
            attempt: 0,
        };
        self.set_state(i, ProcState::Draining { pid, drain }, now);
    }

    /// Reads that are due, and waits whose time ran out.
    fn settle_drains(&mut self, now: Instant, out: &mut Vec<Action>) {
        for i in 0..self.procs.len() {
            let p = &mut self.procs[i];
            let ProcState::Draining { drain, .. } = &mut p.state else {
                continue;
            };
            if now >= drain.until {
                let (last, first) = (drain.last, drain.first);
                if let (Some(sig), true) = (self.drain_cut, drain_waits(p.spec.kind)) {
                    let detail = format!(
                        "the drain was cut short by {} with {} in flight: {} now",
                        sig.as_str(),
                        last.map_or("an unknown number".into(), |n| n.to_string()),
                        self.procs[i].spec.stop.signal
                    );
                    out.push(Action::Record(
                        rec(&self.procs[i].spec.name, RecordKind::DrainTimeout).detail(detail),
                    ));
                } else if drain_waits(p.spec.kind) {
                    let detail = format!(
                        "drain time of {} spent with {} in flight (of {} at the start): {} now",
                        show_secs(self.shutdown.drain),
                        last.map_or("an unknown number".into(), |n| n.to_string()),
                        first.map_or("?".into(), |n| n.to_string()),
                        self.procs[i].spec.stop.signal
                    );
                    out.push(Action::Record(
                        rec(&self.procs[i].spec.name, RecordKind::DrainTimeout).detail(detail),
                    ));
                }
                self.begin_stop(i, AfterStop::Teardown, now, out);
                continue;
            }
            if drain.next_read.is_some_and(|t| t <= now) {
                let Some(gauge) = p.spec.stop.inflight.clone() else {
                    continue;
                };
                drain.next_read = None;
                drain.attempt = self.next_attempt;
                self.next_attempt += 1;
                out.push(Action::ReadInflight {
                    attempt: drain.attempt,
                    gauge,
                    timeout: INFLIGHT_READ_TIMEOUT,
                });
            }
        }
    }

    /// A gauge's answer: stop a worker once nothing is in flight, a frontend at once.
    pub(super) fn on_inflight(
        &mut self,
        attempt: u64,
        result: Result<u64, String>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let Some(i) = self.procs.iter().position(|p| {
            matches!(&p.state, ProcState::Draining { drain, .. }
                if drain.next_read.is_none() && drain.attempt == attempt)
        }) else {
            return;
        };
        let signal = self.procs[i].spec.stop.signal;
        let name = self.procs[i].spec.name.clone();
        let waits = drain_waits(self.procs[i].spec.kind);
        let ProcState::Draining { pid, drain } = &mut self.procs[i].state else {
            return;
        };
        let pid = *pid;
        let say = |kind, detail: String| Action::Record(rec(&name, kind).pid(pid).detail(detail));
        let n = match result {
            Ok(n) => n,
            Err(e) => {
                let detail = match drain.last {
                    None => format!("cannot read its in-flight requests ({e}): {signal} now"),
                    Some(last) => format!(
                        "its in-flight gauge stopped answering ({e}) with {last} in flight at the last read: {signal} now"
                    ),
                };
                out.push(say(RecordKind::Draining, detail));
                self.begin_stop(i, AfterStop::Teardown, now, out);
                return;
            }
        };
        let first = *drain.first.get_or_insert(n);
        let is_first = drain.last.is_none();
        drain.last = Some(n);
        if !waits {
            if n > 0 {
                let until = self.drain_until.unwrap_or(now);
                out.push(say(
                    RecordKind::Draining,
                    format!(
                        "{n} in flight: {signal} stops admission; it has {} to finish them",
                        show_secs(until.saturating_duration_since(now))
                    ),
                ));
            }
            self.procs[i].drained_from = Some((n, now));
            self.begin_stop(i, AfterStop::Teardown, now, out);
            return;
        }
        if n == 0 {
            if first > 0 {
                let took = now.saturating_duration_since(drain.started);
                out.push(say(
                    RecordKind::Drained,
                    format!(
                        "drained {first} in-flight request(s) in {}: {signal} now",
                        show_secs(took)
                    ),
                ));
            }
            self.begin_stop(i, AfterStop::Teardown, now, out);
            return;
        }
        if is_first {
            let left = drain.until.saturating_duration_since(now);
            out.push(say(
                RecordKind::Draining,
                format!(
                    "{n} in flight: waiting up to {} for them to end before {signal}",
                    show_secs(left)
                ),
            ));
        }
        drain.next_read = Some(now + INFLIGHT_POLL);
        self.version += 1;
    }
}

/// Whether a drain waits for a process's in-flight requests to end before its stop signal: a
/// worker's, yes; a frontend's, no (it is read once: its stop signal stops admission, and it
/// finishes what it admitted before it exits).
fn drain_waits(kind: ProcessKind) -> bool {
    kind != ProcessKind::Frontend
}
