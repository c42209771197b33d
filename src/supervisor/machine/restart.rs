//! Exits: what a process's exit means (success, failure, restart with backoff, give up), the
//! node-level consequence of a critical failure, and the deaths by a stop signal held back until
//! the signal that may follow them has had its chance ([`SIGNAL_DEATH_SETTLE`]).

use std::time::{Duration, Instant};

use super::*;
use crate::domain::{gpu_list, show_secs};

/// How long past its own bound the machine waits for the runtime's answer to
/// [`Action::AwaitRelease`] before it restarts without one.
pub(super) const RELEASE_ANSWER_GRACE: Duration = Duration::from_secs(5);

/// A leader's exit (and its group's emptiness, if that came too) waiting for
/// [`SIGNAL_DEATH_SETTLE`] to pass before the machine judges it.
#[derive(Debug, Clone)]
pub(super) struct HeldExit {
    pub(super) pid: Pid,
    pub(super) status: ExitStatus,
    pub(super) until: Instant,
    pub(super) group_empty: bool,
}

impl Machine {
    /// Whether `pid` died of a stop signal nobody asked for: the node is not being torn down and
    /// mcsup was not stopping this process (a liveness restart sends SIGTERM itself).
    pub(super) fn unasked_stop_signal_death(&self, pid: Pid, status: ExitStatus) -> bool {
        let ExitStatus::Signal(sig) = status else {
            return false;
        };
        is_stop_signal(sig)
            && !matches!(self.phase, Phase::Stopping | Phase::Done)
            && self.procs.iter().any(|p| {
                p.state.live_pid() == Some(pid) && !matches!(p.state, ProcState::Stopping { .. })
            })
    }

    /// Judge the held deaths that are due, or all of them once the node is being torn down
    /// (the signal they were waiting for has been heard).
    pub(super) fn release_held(&mut self, now: Instant, out: &mut Vec<Action>) {
        let stopping = matches!(self.phase, Phase::Stopping | Phase::Done);
        while let Some(i) = self.held.iter().position(|h| stopping || h.until <= now) {
            let h = self.held.remove(i);
            self.on_exited(h.pid, h.status, now, out);
            if h.group_empty {
                self.on_group_empty(h.pid, now, out);
            }
        }
    }

    pub(super) fn on_exited(
        &mut self,
        pid: Pid,
        status: ExitStatus,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let Some(i) = self
            .procs
            .iter()
            .position(|p| p.state.live_pid() == Some(pid))
        else {
            return;
        };
        let p = &mut self.procs[i];
        p.last_exit = Some(status);
        p.last_success =
            matches!(status, ExitStatus::Code(c) if p.spec.restart.success_codes.contains(&c));
        out.push(Action::Record(
            rec(&p.spec.name, RecordKind::Exited)
                .pid(pid)
                .status(status),
        ));
        match &mut p.state {
            ProcState::Stopping { leader, .. } => {
                *leader = Some(status);
                self.version += 1;
                self.maybe_stopped(i, now, out);
            }
            ProcState::Starting { .. } | ProcState::Ready { .. } | ProcState::Draining { .. } => {
                let was_starting = matches!(p.state, ProcState::Starting { .. });
                // The leader is gone; whatever is left of its group is a leftover (pc #520):
                // kill it by the pgid recorded at spawn.
                out.push(Action::Signal {
                    pgid: pid,
                    signal: Signal::SIGKILL,
                });
                if self.phase == Phase::Stopping {
                    // Exiting on its own during teardown (e.g. Slurm linuxproc sent it SIGTERM
                    // too): fine, never restarted, not a failure. Wait for the group to empty.
                    self.await_group(i, pid, status, AfterStop::Teardown, now, out);
                } else {
                    if was_starting {
                        self.procs[i].detail = Some(format!("died before ready ({status})"));
                    }
                    self.apply_exit_policy(i, status, false, now, out);
                }
            }
            _ => {}
        }
    }

    /// Its leader `pid` ended with `status` (its group SIGKILLed): wait for the group to be
    /// empty, then `then`.
    pub(super) fn await_group(
        &mut self,
        i: usize,
        pid: Pid,
        status: ExitStatus,
        then: AfterStop,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let state = ProcState::Stopping {
            pid,
            leader: Some(status),
            group_empty: false,
            kill_at: now,
            killed: true,
            then,
        };
        self.set_state(i, state, now);
        out.push(Action::WatchGroup { pgid: pid });
    }

    pub(super) fn on_group_empty(&mut self, pgid: Pid, now: Instant, out: &mut Vec<Action>) {
        let Some(i) = self
            .procs
            .iter()
            .position(|p| matches!(p.state, ProcState::Stopping { pid, .. } if pid == pgid))
        else {
            return;
        };
        if let ProcState::Stopping { group_empty, .. } = &mut self.procs[i].state {
            *group_empty = true;
        }
        self.maybe_stopped(i, now, out);
    }

    pub(super) fn maybe_stopped(&mut self, i: usize, now: Instant, out: &mut Vec<Action>) {
        let ProcState::Stopping {
            pid,
            leader: Some(status),
            group_empty: true,
            then,
            killed,
            ..
        } = &self.procs[i].state
        else {
            return;
        };
        let (pid, status, then, killed) = (*pid, *status, then.clone(), *killed);
        let name = self.procs[i].spec.name.clone();
        match then {
            AfterStop::Teardown => {
                if let Some((n, at)) = self.procs[i].drained_from.take() {
                    if n > 0 && !killed {
                        let detail = format!(
                            "drained {n} in-flight request(s) in {}: it stopped admitting on {} and exited once they were done",
                            show_secs(now.saturating_duration_since(at)),
                            self.procs[i].spec.stop.signal
                        );
                        out.push(Action::Record(
                            rec(&name, RecordKind::Drained).pid(pid).detail(detail),
                        ));
                    }
                }
                out.push(Action::Record(
                    rec(&name, RecordKind::Stopped).pid(pid).status(status),
                ));
                self.set_state(i, ProcState::Exited, now);
            }
            AfterStop::Restart => {
                out.push(Action::Record(
                    rec(&name, RecordKind::Stopped).pid(pid).status(status),
                ));
                if self.phase == Phase::Stopping {
                    self.set_state(i, ProcState::Exited, now);
                } else {
                    self.apply_exit_policy(i, status, true, now, out);
                }
            }
            AfterStop::RankDown { failed } => {
                out.push(Action::Record(
                    rec(&name, RecordKind::Stopped).pid(pid).status(status),
                ));
                if self.phase == Phase::Stopping {
                    self.set_state(i, ProcState::Exited, now);
                } else {
                    self.rank_is_down(i, failed, now, out);
                }
            }
            AfterStop::Fail { code, reason } => {
                out.push(Action::Record(
                    rec(&name, RecordKind::Stopped).pid(pid).status(status),
                ));
                self.fail(i, code, reason, now, out);
            }
        }
    }

    /// After an unrequested exit (or a liveness-driven stop): restart, complete or fail.
    pub(super) fn apply_exit_policy(
        &mut self,
        i: usize,
        status: ExitStatus,
        liveness: bool,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        if self.in_unit(i) {
            // The coordinator decides for the whole worker, whatever the policy says.
            self.rank_ended(i, status, liveness, now, out);
            return;
        }
        if self.procs[i].spec.terminal.is_some() && !liveness {
            // What the job is for: its end is the job's.
            self.terminal_exited(i, status, now, out);
            return;
        }
        let p = &mut self.procs[i];
        let success = !liveness && p.last_success;
        let restart = match p.spec.restart.policy {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => !success,
            RestartPolicy::Always => true,
        };
        let failure_code = if liveness {
            ExitCode::LivenessFailed.code()
        } else if status.code() == 0 {
            ExitCode::CriticalExitedZero.code()
        } else {
            status.code()
        };
        if !restart {
            if success {
                if p.spec.critical && p.long_running {
                    let reason =
                        format!("exited unasked ({status}) and nothing waits for it to complete");
                    self.fail(i, ExitCode::CriticalExitedZero.code(), reason, now, out);
                } else {
                    out.push(Action::Record(
                        rec(&p.spec.name, RecordKind::Completed).status(status),
                    ));
                    self.set_state(i, ProcState::Exited, now);
                }
            } else {
                let reason = if liveness {
                    "liveness probe failed (restart policy: never)".to_string()
                } else {
                    format!("{status} (restart policy: {})", p.spec.restart.policy)
                };
                self.fail(i, failure_code, reason, now, out);
            }
            return;
        }
        let spec = &p.spec.restart;
        // Backoff resets after a stable run (Kubernetes: reset after 10 min without a crash).
        if p.spawned_at
            .is_some_and(|t| now.saturating_duration_since(t) >= spec.reset_after)
        {
            p.backoff = spec.backoff_initial;
        }
        while p
            .restart_times
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= spec.window)
        {
            p.restart_times.pop_front();
        }
        if p.restart_times.len() as u64 >= u64::from(spec.max_restarts) {
            let reason = format!(
                "restart limit reached: {} restarts within {} ms (last: {})",
                p.restart_times.len(),
                ms(spec.window),
                if liveness {
                    "liveness probe failed".to_string()
                } else {
                    status.to_string()
                }
            );
            self.fail(i, failure_code, reason, now, out);
            return;
        }
        p.restart_times.push_back(now);
        p.restarts += 1;
        let delay = p.backoff;
        let next = p.backoff.as_secs_f64() * spec.backoff_factor.max(1.0);
        p.backoff = Duration::try_from_secs_f64(next)
            .unwrap_or(spec.backoff_max)
            .min(spec.backoff_max);
        let mut detail = format!("restart {} in {} ms", p.restarts, ms(delay));
        let release = self.ask_release(i, now, out).map(|(wait, gpus, within)| {
            detail.push_str(&format!(
                ", once {gpus} released by this run (at most {})",
                show_secs(within)
            ));
            wait
        });
        let p = &self.procs[i];
        push_failure(
            i,
            rec(&p.spec.name, RecordKind::Restarting)
                .status(status)
                .detail(detail),
            out,
        );
        let state = ProcState::BackingOff {
            until: now + delay,
            release,
        };
        self.set_state(i, state, now);
    }

    /// Ask the runtime to wait until process `i`'s last run has released its GPUs (when it ran,
    /// has GPUs and a release wait): the wait, the GPUs said (`GPU 0,1 are`) and its bound.
    pub(super) fn ask_release(
        &mut self,
        i: usize,
        now: Instant,
        out: &mut Vec<Action>,
    ) -> Option<(ReleaseWait, String, Duration)> {
        let p = &self.procs[i];
        let within = p.spec.restart.release_wait;
        let gpus = p.spec.gpus().to_vec();
        let pgid = p
            .last_pid
            .filter(|_| !gpus.is_empty() && !within.is_zero())?;
        let said = format!(
            "GPU {} {}",
            gpu_list(&gpus),
            if gpus.len() == 1 { "is" } else { "are" }
        );
        self.next_attempt += 1;
        out.push(Action::AwaitRelease {
            attempt: self.next_attempt,
            pgid,
            gpus,
            within,
        });
        let wait = ReleaseWait {
            attempt: self.next_attempt,
            deadline: now + within + RELEASE_ANSWER_GRACE,
            answered: false,
        };
        Some((wait, said, within))
    }

    /// The runtime's answer to [`Action::AwaitRelease`]: the restart may go ahead once its
    /// backoff is over too.
    pub(super) fn on_released(
        &mut self,
        attempt: u64,
        result: Result<String, String>,
        out: &mut Vec<Action>,
    ) {
        let Some(i) = self.procs.iter().position(|p| match &p.state {
            ProcState::BackingOff {
                release: Some(r), ..
            }
            | ProcState::Rejoining {
                release: Some((r, _)),
            } => r.attempt == attempt && !r.answered,
            _ => false,
        }) else {
            return;
        };
        let (kind, detail) = match result {
            Ok(d) => (RecordKind::GpuReleased, d),
            Err(d) => (RecordKind::GpuReleaseLate, d),
        };
        out.push(Action::Record(
            rec(&self.procs[i].spec.name, kind).detail(detail),
        ));
        self.version += 1;
        match &mut self.procs[i].state {
            ProcState::BackingOff {
                release: Some(r), ..
            } => r.answered = true,
            ProcState::Rejoining { release } => {
                let exit = release.take().and_then(|(_, exit)| exit);
                out.push(Action::RankDown { proc: i, exit });
            }
            _ => {}
        }
    }

    pub(super) fn fail(
        &mut self,
        i: usize,
        code: i32,
        reason: String,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let p = &mut self.procs[i];
        let mut r = rec(&p.spec.name, RecordKind::Failed).detail(reason.clone());
        r.status = p.last_exit;
        push_failure(i, r, out);
        p.detail = Some(reason);
        let (critical, name) = (p.spec.critical, p.spec.name.clone());
        self.set_state(i, ProcState::Failed, now);
        if critical && self.phase != Phase::Stopping && self.phase != Phase::Done {
            self.begin_teardown(
                ShutdownReason::CriticalFailure { unit: name, code },
                now,
                out,
            );
        }
    }
}
