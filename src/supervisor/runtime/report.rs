//! The loop as writer of the node's status and metrics files: every change of the machine (a
//! start-up's or a teardown's many, batched), a heartbeat for readers on other hosts, the
//! watchers' parts, and what the log files and the log directory could not take.

use std::time::{Duration, Instant};

// The heartbeat and the stall warning are the plan's periods (`Periods`).

use super::Runtime;
use crate::runfiles::StatusFile;
use crate::supervisor::logs;
use crate::supervisor::machine::RecordKind;
use crate::supervisor::status;

/// How long a change waits before the status and metrics files are rewritten: the changes of a
/// start-up or a teardown (one every millisecond or so) share one rewrite, which stays off the
/// path from one process getting ready to the next one's spawn. (A rewrite is two files written
/// and renamed over the old ones; on ext4 the rename starts the new file's writeback and evicting
/// the old inode can wait for disk.) The final status is written at once.
pub(super) const STATUS_DELAY: Duration = Duration::from_millis(25);

/// Roles as the status file names them.
pub(super) fn roles_of(roles: &[crate::domain::Role]) -> Vec<String> {
    roles.iter().map(|r| r.as_str().to_string()).collect()
}

impl Runtime {
    /// The status changed outside the machine: rewritten with the next batch.
    pub(super) fn status_changed(&mut self) {
        self.report.version = None;
    }

    /// Write the status once [`STATUS_DELAY`] has passed since the first change not written yet.
    pub(super) fn write_status_soon(&mut self) {
        let now = Instant::now();
        if now >= self.report.heartbeat_due {
            // The same status with a fresh timestamp, at once: a heartbeat is no burst of changes
            // to batch, and a heartbeat left due would keep the loop's deadline in the past (it
            // turned without sleeping for the whole STATUS_DELAY, 25 ms of CPU every heartbeat).
            self.report.version = None;
            self.report.due = None;
            self.write_status(None);
            return;
        }
        if self.report.version == Some(self.machine.version()) {
            return;
        }
        if now >= *self.report.due.get_or_insert(now + STATUS_DELAY) {
            self.report.due = None;
            self.write_status(None);
        }
    }

    pub(super) fn write_status(&mut self, final_code: Option<i32>) {
        let v = self.machine.version();
        if final_code.is_none() && self.report.version == Some(v) {
            return;
        }
        self.report.version = Some(v);
        let now = Instant::now();
        self.report.heartbeat_due = now + self.plan.periods.heartbeat;
        let r = &self.report;
        let mut status = StatusFile {
            node: self.plan.node.name.clone(),
            roles: roles_of(&self.plan.roles),
            mcsup_pid: std::process::id(),
            host: r.here.0.clone(),
            pid_ns: r.here.1.clone(),
            phase: self.machine.phase().into(),
            started_ts_ms: self.clock.wall_ms(self.clock.start()),
            updated_ts_ms: self.clock.wall_ms(now),
            heartbeat_ms: self.plan.periods.heartbeat.as_millis() as u64,
            reason: self.machine.reason().map(|r| r.to_string()),
            exit_code: final_code,
            console_dropped_lines: self.console.dropped(),
            holds_ranks_of: self.plan.shutdown.holds_ranks_of.clone(),
            units: self
                .machine
                .snapshot()
                .iter()
                .map(|u| {
                    let mut unit = status::unit_to_status(u, &self.clock);
                    unit.output_lost = r.losses.get(&unit.name).cloned();
                    unit.roles = r.unit_roles.get(&unit.name).cloned().unwrap_or_default();
                    unit
                })
                .collect(),
            servable: None,
            mooncake: None,
            benchmark: None,
            canary: None,
            control: self.control_status(),
        };
        self.watchers.status(&mut status);
        // The metrics follow the status; the teardown's duration once it is over.
        let teardown = final_code
            .and(self.teardown_started)
            .map(|t| now.duration_since(t).as_secs_f64());
        let text = crate::render::metrics_text(&status, teardown);
        match status::status_bytes(&status) {
            Ok(json) => self.writer.snapshot(json, text.into_bytes()),
            Err(e) => tracing::warn!(error = %e, "cannot write the status file"),
        }
    }

    /// A log file lost output: count it for the status file; the first loss of a run of the
    /// process and the total at its end are events, and news for the status file at once.
    pub(super) fn on_log_loss(&mut self, loss: logs::LogLoss) {
        let logs::LogLoss {
            process,
            path,
            bytes,
            lines,
            error,
            when,
        } = loss;
        let detail = match when {
            logs::LossWhen::Again => None,
            logs::LossWhen::First => Some(format!(
                "log file {}: {error}: output is being lost (the status file counts it)",
                path.display()
            )),
            logs::LossWhen::End => Some(format!(
                "{bytes} bytes ({lines} lines) of output not written to {}: {error}",
                path.display()
            )),
        };
        let counted = self.report.losses.entry(process.clone()).or_default();
        if when != logs::LossWhen::End {
            counted.bytes += bytes;
            counted.lines += lines;
        }
        counted.error = error;
        if let Some(detail) = detail {
            self.note(&process, RecordKind::OutputLost, detail);
            self.status_changed();
            self.write_status(None);
        }
    }

    /// Say once when the writer has been stuck on one write for the plan's `log_dir_stall` (a hung log
    /// directory: supervision goes on, what does not fit in its queue is dropped and counted),
    /// and when it moves again.
    pub(super) fn watch_writer(&mut self) {
        let stalled = self.writer.stalled_for();
        let stall = self.plan.periods.log_dir_stall;
        match self.report.stall_said {
            None if stalled >= stall => {
                self.report.stall_said = Some(stalled);
                tracing::warn!(
                    log_dir = %self.plan.log_dir.display(),
                    seconds = stalled.as_secs(),
                    "the log directory has not taken a write for {} s (a hung file system?): supervision goes on; log output and events that do not fit in the queue are dropped and counted",
                    stalled.as_secs()
                );
            }
            Some(_) if stalled < stall => {
                self.report.stall_said = None;
                let dropped = self.writer.events_dropped();
                tracing::warn!(
                    log_dir = %self.plan.log_dir.display(),
                    events_dropped = dropped,
                    "the log directory takes writes again"
                );
            }
            _ => {}
        }
    }
}
