//! Teardown: signals from outside, the ordered stop in waves (`ProcessSpec::teardown_tier`:
//! what runs after the frontends, the frontends, the workers and what runs with them, the stores
//! and services started before the workers, the Mooncake masters, then the infrastructure such
//! as etcd and NATS), per-process grace, the global deadline, escalation and the final SIGKILL.

use std::time::Instant;

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
                ProcState::Starting { pid, .. } | ProcState::Ready { pid, .. } => {
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
        out.push(Action::Record(
            rec("mcsup", RecordKind::ShutdownRequested).detail(reason.to_string()),
        ));
        self.phase = Phase::Stopping;
        self.reason = Some(reason);
        self.teardown_deadline = Some(now + self.shutdown.deadline);
        for g in &mut self.gates {
            if matches!(g.state, GateState::Probing(_)) {
                g.state = GateState::Cancelled;
                g.since = now;
            }
        }
        for i in 0..self.procs.len() {
            match &mut self.procs[i].state {
                ProcState::Waiting | ProcState::BackingOff { .. } => {
                    let r = rec(&self.procs[i].spec.name, RecordKind::Stopped)
                        .detail("never started (teardown)");
                    out.push(Action::Record(r));
                    self.set_state(i, ProcState::Exited, now);
                }
                // Exits during teardown are never restarted.
                ProcState::Stopping { then, .. } if *then == AfterStop::Restart => {
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
        if !gates_pending && self.procs.iter().all(|p| p.state.terminal()) {
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
        // Waves: a process starts stopping once every process of a lower stop level is gone.
        let pending_level = self
            .procs
            .iter()
            .filter(|p| !p.state.terminal())
            .map(|p| p.stop_level)
            .min();
        if let Some(level) = pending_level {
            for i in 0..self.procs.len() {
                let p = &self.procs[i];
                if p.stop_level == level
                    && matches!(
                        p.state,
                        ProcState::Starting { .. } | ProcState::Ready { .. }
                    )
                {
                    self.begin_stop(i, AfterStop::Teardown, now, out);
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
}
