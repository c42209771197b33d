//! Starting: a process spawns once its dependencies are met (gates ready, processes healthy
//! or completed), and its readiness wait begins when it has.

use std::time::{Duration, Instant};

use super::graph::DepStatus;
use super::restart::RELEASE_ANSWER_GRACE;
use super::*;
use crate::domain::show_secs;

impl Machine {
    pub(super) fn on_forked(&mut self, i: usize, pid: Pid, now: Instant) {
        if let Some(ProcState::Spawning) = self.procs.get(i).map(|p| &p.state) {
            self.set_state(i, ProcState::Execing { pid }, now);
        }
    }

    pub(super) fn on_spawned(&mut self, i: usize, pid: Pid, now: Instant, out: &mut Vec<Action>) {
        let Some(p) = self.procs.get_mut(i) else {
            return;
        };
        match p.state {
            ProcState::Spawning => {}
            ProcState::Execing { pid: forked } if forked == pid => {}
            // Stopped (or failed) while it exec'd: that path has its pid.
            _ => return,
        }
        p.spawned_at = Some(now);
        p.last_pid = Some(pid);
        p.detail = None;
        out.push(Action::Record(
            rec(&p.spec.name, RecordKind::Spawned).pid(pid),
        ));
        let state = match &p.spec.readiness {
            Some(r) if !r.probes.is_empty() => ProcState::Starting {
                pid,
                readiness: Readiness::new(r, now, Waiter::Child),
            },
            _ => {
                push_ready(
                    &p.spec,
                    i,
                    rec(&p.spec.name, RecordKind::Ready).pid(pid),
                    out,
                );
                // Ready as it is spawned: no time to ready.
                p.ready_after = Some(Duration::ZERO);
                p.first_ready.get_or_insert(now);
                ProcState::Ready {
                    pid,
                    liveness: Self::new_liveness(p, now),
                }
            }
        };
        self.set_state(i, state, now);
    }

    pub(super) fn on_spawn_failed(
        &mut self,
        i: usize,
        error: String,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let Some(p) = self.procs.get(i) else { return };
        if !matches!(p.state, ProcState::Spawning | ProcState::Execing { .. }) {
            return;
        }
        self.fail(
            i,
            ExitCode::SpawnFailed.code(),
            format!("could not start: {error}"),
            now,
            out,
        );
    }

    pub(super) fn settle_running(&mut self, now: Instant, out: &mut Vec<Action>) {
        for i in 0..self.procs.len() {
            let p = &mut self.procs[i];
            match &mut p.state {
                ProcState::Starting { pid, readiness } => {
                    let pid = *pid;
                    if readiness.all_passed() {
                        let mut r = rec(&p.spec.name, RecordKind::Ready).pid(pid);
                        if let Some(said) = readiness.said() {
                            r = r.detail(said);
                        }
                        push_ready(&p.spec, i, r, out);
                        let l = Self::new_liveness(p, now);
                        p.ready_after = p.spawned_at.map(|s| now.duration_since(s));
                        p.first_ready.get_or_insert(now);
                        self.set_state(i, ProcState::Ready { pid, liveness: l }, now);
                    } else if now >= readiness.deadline {
                        let timeout = p
                            .spec
                            .readiness
                            .as_ref()
                            .map(|r| r.timeout)
                            .unwrap_or_default();
                        let reason = format!(
                            "readiness timed out after {} ms{}",
                            ms(timeout),
                            p.detail
                                .as_ref()
                                .map(|d| format!(" ({d})"))
                                .unwrap_or_default()
                        );
                        let then = AfterStop::Fail {
                            code: ExitCode::ReadinessFailed.code(),
                            reason,
                        };
                        self.begin_stop(i, then, now, out);
                    } else {
                        readiness.emit_due(UnitRef::Proc(i), now, &mut self.next_attempt, out);
                        if let Some(d) = readiness.progress_due(now, p.detail.as_deref()) {
                            out.push(Action::Record(
                                rec(&p.spec.name, RecordKind::StillWaiting)
                                    .pid(pid)
                                    .detail(d),
                            ));
                        }
                    }
                }
                ProcState::Ready {
                    liveness: Some(l), ..
                } if l.in_flight.is_none() && l.next_at <= now => {
                    self.next_attempt += 1;
                    l.in_flight = Some(self.next_attempt);
                    out.push(Action::Probe {
                        attempt: self.next_attempt,
                        unit: UnitRef::Proc(i),
                        probe: l.spec.probe.clone(),
                        timeout: l.spec.attempt_timeout,
                    });
                }
                ProcState::BackingOff { until, release } if *until <= now => {
                    match release {
                        Some(r) if !r.answered && r.deadline > now => continue,
                        Some(r) if !r.answered => {
                            let late = format!(
                                "no answer from the GPU release check within {}: starting anyway",
                                show_secs(p.spec.restart.release_wait + RELEASE_ANSWER_GRACE)
                            );
                            out.push(Action::Record(
                                rec(&p.spec.name, RecordKind::GpuReleaseLate).detail(late),
                            ));
                        }
                        _ => {}
                    }
                    // Re-check dependencies: a dependency may be restarting too.
                    let r = rec(&p.spec.name, RecordKind::Waiting).detail("backoff over");
                    out.push(Action::Record(r));
                    self.set_state(i, ProcState::Waiting, now);
                }
                _ => {}
            }
        }
    }

    pub(super) fn settle_waiting(&mut self, now: Instant, out: &mut Vec<Action>) {
        for i in 0..self.procs.len() {
            if !matches!(self.procs[i].state, ProcState::Waiting) {
                continue;
            }
            let mut all_met = true;
            let mut never = None;
            for &(t, c) in &self.procs[i].deps {
                match self.dep_status(t, c) {
                    DepStatus::Met => {}
                    DepStatus::Pending => all_met = false,
                    DepStatus::Never => {
                        never = Some((t, c));
                        break;
                    }
                }
            }
            if let Some((t, c)) = never {
                let reason = format!(
                    "dependency `{}` can no longer become {:?}",
                    self.unit_name(t),
                    c
                );
                self.fail(i, ExitCode::ReadinessFailed.code(), reason, now, out);
                if self.phase == Phase::Stopping {
                    return;
                }
            } else if all_met {
                let p = &mut self.procs[i];
                p.generation += 1;
                out.push(Action::Spawn {
                    proc: i,
                    generation: p.generation,
                });
                self.set_state(i, ProcState::Spawning, now);
            }
        }
    }
}
