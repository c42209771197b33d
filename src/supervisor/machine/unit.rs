//! Ranks of a worker over several nodes (`restart.unit`): the coordinator decides for the whole
//! worker (docs/supervision.md, "Across nodes"). This node only reports its rank down (it died,
//! or it was stopped as asked), and stops, starts or fails it when told. A rank never restarts
//! on its own: alone, it could not rejoin its group while its peers wait in a collective.

use std::time::Instant;

use super::*;

impl Machine {
    /// Whether process `i` is a rank whose restarts the coordinator decides.
    pub(super) fn in_unit(&self, i: usize) -> bool {
        self.procs[i].spec.restart.unit.is_some()
    }

    /// The worker process `i` is a rank of (`decode[0]`).
    fn worker_of(&self, i: usize) -> String {
        let unit = self.procs[i].spec.restart.unit.as_ref();
        unit.map_or_else(String::new, |u| u.worker.clone())
    }

    /// A rank ended unasked (or failed its liveness, `group_gone`): wait for its group to be
    /// empty, then report it down with how it ended.
    pub(super) fn rank_ended(
        &mut self,
        i: usize,
        status: ExitStatus,
        group_gone: bool,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let Some(pid) = self.procs[i].last_pid.filter(|_| !group_gone) else {
            self.rank_is_down(i, Some(status), now, out);
            return;
        };
        let then = AfterStop::RankDown {
            failed: Some(status),
        };
        self.await_group(i, pid, status, then, now, out);
    }

    /// The rank's group is empty: it waits for the coordinator, which is told, once the rank's
    /// GPUs are released (as a restart of one process waits for them: `restart.release_wait`).
    pub(super) fn rank_is_down(
        &mut self,
        i: usize,
        exit: Option<ExitStatus>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let worker = self.worker_of(i);
        let mut detail = match exit {
            Some(s) => {
                format!("{s}: the coordinator decides for {worker}, whose ranks restart together")
            }
            None => format!("stopped for the restart of {worker}; waiting for its other ranks"),
        };
        let release = self.ask_release(i, now, out).map(|(wait, gpus, within)| {
            detail.push_str(&format!(
                " (reported once {gpus} released, at most {})",
                crate::domain::show_secs(within)
            ));
            (wait, exit)
        });
        let name = self.procs[i].spec.name.clone();
        out.push(Action::Record(
            rec(&name, RecordKind::RankDown).detail(detail.clone()),
        ));
        if release.is_none() {
            out.push(Action::RankDown { proc: i, exit });
        }
        self.procs[i].detail = Some(detail);
        self.set_state(i, ProcState::Rejoining { release }, now);
    }

    /// A rank whose GPU release check did not answer in time is reported down anyway.
    pub(super) fn settle_rejoining(&mut self, now: Instant, out: &mut Vec<Action>) {
        for i in 0..self.procs.len() {
            let ProcState::Rejoining { release } = &mut self.procs[i].state else {
                continue;
            };
            if release.as_ref().is_none_or(|(r, _)| r.deadline > now) {
                continue;
            }
            let exit = release.take().and_then(|(_, exit)| exit);
            let late = "no answer from the GPU release check in time: reported down anyway";
            out.push(Action::Record(
                rec(&self.procs[i].spec.name, RecordKind::GpuReleaseLate).detail(late),
            ));
            out.push(Action::RankDown { proc: i, exit });
            self.version += 1;
        }
    }

    /// The coordinator restarts the worker: stop this rank if it runs, else say it is down.
    pub(super) fn on_rank_stop(&mut self, i: usize, now: Instant, out: &mut Vec<Action>) {
        if i >= self.procs.len() || !self.in_unit(i) || self.phase == Phase::Stopping {
            return;
        }
        match self.procs[i].state {
            ProcState::Execing { .. } | ProcState::Starting { .. } | ProcState::Ready { .. } => {
                self.begin_stop(i, AfterStop::RankDown { failed: None }, now, out)
            }
            // Down already (the rank that failed): the coordinator counts it for this generation
            // (once its GPUs are released, when that is still awaited: the report follows).
            ProcState::Rejoining { release: None } => out.push(Action::RankDown {
                proc: i,
                exit: None,
            }),
            ProcState::Waiting | ProcState::BackingOff { .. } => {
                self.rank_is_down(i, None, now, out)
            }
            // Stopping (its answer follows), spawning (its stop follows the spawn), or done.
            _ => {}
        }
    }

    /// Every rank is down: this one starts again once its dependencies hold.
    pub(super) fn on_rank_start(
        &mut self,
        i: usize,
        generation: u64,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        if i >= self.procs.len() || self.phase == Phase::Stopping {
            return;
        }
        if !matches!(self.procs[i].state, ProcState::Rejoining { release: None }) {
            return;
        }
        let worker = self.worker_of(i);
        let p = &mut self.procs[i];
        p.restarts += 1;
        let detail = format!("generation {generation} of {worker}: every rank starts again");
        push_failure(
            i,
            rec(&p.spec.name, RecordKind::Restarting).detail(detail),
            out,
        );
        self.procs[i].detail = None;
        self.set_state(i, ProcState::Waiting, now);
    }

    /// The coordinator gave the worker up: this rank fails, stopped first if it runs.
    pub(super) fn on_rank_give_up(
        &mut self,
        i: usize,
        reason: String,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        if i >= self.procs.len() || matches!(self.phase, Phase::Stopping | Phase::Done) {
            return;
        }
        let code = self.procs[i]
            .last_exit
            .map(ExitStatus::code)
            .filter(|c| *c != 0)
            .unwrap_or(1);
        match self.procs[i].state {
            ProcState::Execing { .. } | ProcState::Starting { .. } | ProcState::Ready { .. } => {
                self.begin_stop(i, AfterStop::Fail { code, reason }, now, out)
            }
            ProcState::Waiting
            | ProcState::Spawning
            | ProcState::BackingOff { .. }
            | ProcState::Rejoining { .. } => self.fail(i, code, reason, now, out),
            _ => {}
        }
    }
}
