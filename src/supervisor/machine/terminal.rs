//! What the job is for: a terminal process (the benchmark client) ends the job when it exits,
//! with its exit status (srtctl: `run()` returns the benchmark's exit code). A 0 is first
//! judged by the result gate (`WatchRequest::Judge`: its result files say it measured
//! something) within [`JUDGE_WITHIN`]; an invalid result fails the job with
//! `ExitCode::BenchmarkInvalid`. With several terminal processes (srt-slurm 2.0's `terminal:
//! true` services), the node ends once all of them have exited, with the worst exit status.

use std::time::{Duration, Instant};

use super::*;

/// How long the result gate may take to read the result files (a hung log directory must not
/// hold the job).
pub const JUDGE_WITHIN: Duration = Duration::from_secs(10);

/// A 0 exit waiting for the result gate's verdict.
#[derive(Debug, Clone)]
pub(super) struct Judging {
    pub(super) proc: usize,
    pub(super) until: Instant,
}

impl Machine {
    /// Terminal process `i` exited on its own with `status`.
    pub(super) fn terminal_exited(
        &mut self,
        i: usize,
        status: ExitStatus,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let p = &self.procs[i];
        let name = p.spec.name.clone();
        let judged = p
            .spec
            .terminal
            .as_ref()
            .is_some_and(|t| t.benchmark.is_some());
        let code = status.code();
        let detail = format!("it ended ({status}): what the job is for is done");
        if code == 0 {
            out.push(Action::Record(
                rec(&name, RecordKind::Completed)
                    .status(status)
                    .detail(detail),
            ));
            self.set_state(i, ProcState::Exited, now);
        } else {
            push_failure(
                i,
                rec(&name, RecordKind::Failed).status(status).detail(detail),
                out,
            );
            self.procs[i].detail = Some(format!("{status}"));
            self.set_state(i, ProcState::Failed, now);
        }
        self.terminal_codes.push((name, code));
        if code == 0 && judged {
            self.judging.push(Judging {
                proc: i,
                until: now + JUDGE_WITHIN,
            });
            out.push(Action::Watch(WatchRequest::Judge { proc: i }));
            return;
        }
        self.maybe_job_done(now, out);
    }

    /// The result gate's verdict on terminal process `proc`: `Ok` what it measured, `Err` the
    /// number that was wrong.
    pub(super) fn on_judged(
        &mut self,
        proc: usize,
        verdict: Result<String, String>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let Some(at) = self.judging.iter().position(|j| j.proc == proc) else {
            return;
        };
        self.judging.remove(at);
        let name = self.procs[proc].spec.name.clone();
        match verdict {
            Ok(said) => out.push(Action::Record(
                rec(&name, RecordKind::BenchmarkResult).detail(said),
            )),
            Err(why) => {
                out.push(Action::Record(
                    rec(&name, RecordKind::BenchmarkInvalid).detail(why.clone()),
                ));
                self.procs[proc].detail = Some(why);
                if let Some(c) = self.terminal_codes.iter_mut().find(|(n, _)| *n == name) {
                    c.1 = ExitCode::BenchmarkInvalid.code();
                }
            }
        }
        self.maybe_job_done(now, out);
    }

    /// A verdict that did not come in time: the 0 stands, said so.
    pub(super) fn settle_judging(&mut self, now: Instant, out: &mut Vec<Action>) {
        while let Some(at) = self.judging.iter().position(|j| now >= j.until) {
            let j = self.judging.remove(at);
            let name = self.procs[j.proc].spec.name.clone();
            out.push(Action::Record(rec(&name, RecordKind::BenchmarkResult).detail(
                format!(
                    "not judged: its result files were not read within {} (a slow or hung log directory?); the exit status 0 stands",
                    crate::domain::show_secs(JUDGE_WITHIN)
                ),
            )));
            self.maybe_job_done(now, out);
        }
    }

    /// Every terminal process here has exited and been judged: this node's part of the job
    /// is done, with the worst status. Alone, the node drains now; in a job of several nodes
    /// the coordinator hears it and answers `JobDone` once every node's part is done (another
    /// node's benchmark may still use this node's workers).
    fn maybe_job_done(&mut self, now: Instant, out: &mut Vec<Action>) {
        let running = self
            .procs
            .iter()
            .any(|p| p.spec.terminal.is_some() && !p.state.terminal());
        if running || !self.judging.is_empty() || self.finished.is_some() {
            return;
        }
        let worst = self
            .terminal_codes
            .iter()
            .max_by_key(|(_, c)| (*c != 0, *c))
            .cloned();
        let Some((unit, code)) = worst else { return };
        self.finished = Some((unit.clone(), code));
        if self.peers {
            let detail = format!("`{unit}` ended (exit code {code})");
            out.push(Action::Record(rec("mcsup", RecordKind::PartDone).detail(
                format!(
                    "{detail}: this node's part of the job is done; it drains once every node's is"
                ),
            )));
            out.push(Action::Finished { detail });
        } else {
            self.begin_teardown(ShutdownReason::Finished { unit, code }, now, out);
        }
    }

    /// The job is done on every node that runs part of it: drain, with this node's terminal
    /// status when it has one.
    pub(super) fn job_done(&mut self, detail: String, now: Instant, out: &mut Vec<Action>) {
        let reason = match self.finished.clone() {
            Some((unit, code)) => ShutdownReason::Finished { unit, code },
            None => ShutdownReason::JobDone(detail),
        };
        self.begin_teardown(reason, now, out);
    }

    /// When the next judging runs out.
    pub(super) fn judging_deadline(&self) -> Option<Instant> {
        self.judging.iter().map(|j| j.until).min()
    }
}
