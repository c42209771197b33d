//! The end of a run, once the machine is done: kill the orphans left among mcsup's children,
//! let the log readers drain, write the final status and say what was lost on the way.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::sync::mpsc::UnboundedReceiver;

use super::{Msg, Runtime};
use crate::supervisor::machine::{Event, Record, RecordKind};
use crate::supervisor::stderr::stderr_lost;
use crate::supervisor::{logs, signals, spawn, RunOutcome, SupervisorError};

/// How long the final sweep may take to kill reparented orphans.
const ORPHAN_SWEEP: Duration = Duration::from_secs(3);
/// How long the final status and events may take to reach the log directory.
const FINAL_WRITES: Duration = Duration::from_secs(2);
/// How long log readers get to drain after the last process is gone (more while the writer
/// still writes what holds them back).
const READER_DRAIN: Duration = Duration::from_secs(1);
/// How often the last waits for the log writer look at its progress.
const WRITE_STEP: Duration = Duration::from_millis(250);

/// The final record's detail plus what mcsup lost on the way: writes over the file size limit
/// and lines of its own log that stderr did not take.
pub(super) fn with_losses(mut detail: String, writer: &logs::RunWriter) -> String {
    let mut add = |part: String| {
        if !detail.is_empty() {
            detail.push_str("; ");
        }
        detail.push_str(&part);
    };
    let exceeded = signals::file_size_exceeded();
    if exceeded > 0 {
        add(format!(
            "{exceeded} writes over the file size limit (ulimit -f) failed with EFBIG"
        ));
    }
    let events = writer.events_dropped();
    if events > 0 {
        add(format!(
            "{events} event lines dropped (the log directory did not take writes)"
        ));
    }
    let failed_files = writer.failed_writes();
    if failed_files > 0 {
        add(format!(
            "{failed_files} writes of the events, status or metrics files failed"
        ));
    }
    let (dropped, failed) = stderr_lost();
    if dropped > 0 {
        add(format!(
            "{dropped} lines of mcsup's own log dropped (stderr was full)"
        ));
    }
    if failed > 0 {
        add(format!(
            "{failed} lines of mcsup's own log lost (writing stderr failed)"
        ));
    }
    detail
}

impl Runtime {
    /// How long the last output may take to reach the logs: what is left of the teardown's
    /// deadline (Slurm's KillWait is behind it), at least [`FINAL_WRITES`].
    fn last_write_by(&self) -> tokio::time::Instant {
        let now = Instant::now();
        let by = self
            .teardown_started
            .map_or(now, |t| t + self.plan.shutdown.deadline)
            .max(now + FINAL_WRITES);
        tokio::time::Instant::from_std(by)
    }

    /// Let the log readers read their pipes to the end: [`READER_DRAIN`], and past it as long
    /// as the writer still has output queued and writes it (a reader waits for room there:
    /// a slow log directory, not a stuck one), until `by`.
    async fn drain_readers(&mut self, by: tokio::time::Instant) {
        let drain_end = tokio::time::Instant::now() + READER_DRAIN;
        for mut h in std::mem::take(&mut self.children.readers) {
            loop {
                let step = (tokio::time::Instant::now() + WRITE_STEP).min(by);
                if tokio::time::timeout_at(step, &mut h).await.is_ok() {
                    break;
                }
                let now = tokio::time::Instant::now();
                let writing = self.writer.queued() > 0 && self.writer.stalled_for() < FINAL_WRITES;
                if now >= by || (now >= drain_end && !writing) {
                    h.abort();
                    break;
                }
            }
        }
    }

    /// Wait until what is queued is written: while the writer goes on writing, until `by`;
    /// at most [`FINAL_WRITES`] once one write waits that long (a stuck directory). Whether all
    /// of it was written.
    fn wait_for_writes(&self, by: tokio::time::Instant) -> bool {
        loop {
            if self.writer.sync(WRITE_STEP) {
                return true;
            }
            if tokio::time::Instant::now() >= by || self.writer.stalled_for() >= FINAL_WRITES {
                return false;
            }
        }
    }

    /// After the machine is done: kill reparented orphans, let the log readers drain, report.
    pub(super) async fn finish(
        mut self,
        sigchld: &mut tokio::signal::unix::Signal,
        rx: &mut UnboundedReceiver<Msg>,
    ) -> Result<RunOutcome, SupervisorError> {
        for (&pid, _) in self.children.exec_probes.iter() {
            let _ = spawn::signal_group(pid, Some(Signal::SIGKILL));
        }
        // The coordinator hears why this node leaves before its connection closes.
        self.flush_control().await;
        self.sweep_orphans(sigchld).await;
        self.check_ports_released();
        self.check_gpus_released();
        let last_write = self.last_write_by();
        self.drain_readers(last_write).await;
        // The logs are closed once what was queued for them is written: what they lost is
        // said by then (bounded: a stuck directory is left behind).
        let synced = self.wait_for_writes(last_write);
        // What the readers and the logs said last (output they lost) still goes into the files.
        while let Ok(msg) = rx.try_recv() {
            if let Msg::LogLoss(loss) = msg {
                self.on_log_loss(loss);
            }
        }
        if signals::backstop_fired() {
            // The backstop killed the groups before the loop heard the second signal.
            self.feed(Event::BackstopKilled);
        }
        let code = self.machine.exit_code();
        let reason = self
            .machine
            .reason()
            .map(|r| r.to_string())
            .unwrap_or_default();
        self.write_status(Some(code));
        // The last status and events reach the directory, unless it is stuck: then they are
        // left to the writer thread (the process's exit ends it), and stderr says so.
        if !synced || !self.writer.stop(FINAL_WRITES) {
            tracing::warn!(
                log_dir = %self.plan.log_dir.display(),
                unwritten_bytes = self.writer.queued(),
                "the log directory did not take the last writes in time: its status and events files may be behind, and the output still queued is not in the logs (a hung file system?)"
            );
        }
        let sigkill_needed = self.machine.sigkill_needed();
        let (run_files_failed, events_dropped) =
            (self.writer.failed_writes(), self.writer.events_dropped());
        let Runtime { console, .. } = self;
        let dropped = console.finish(Duration::from_millis(500));
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "console was too slow: lines dropped from stdout (the log files have them)"
            );
        }
        let (log_dropped, log_failed) = stderr_lost();
        let file_size_exceeded = signals::file_size_exceeded();
        // What the log directory did not take, besides mcsup's own log lines (round 4's D17:
        // the last line said `log_lines_failed=0` on a full disk where the status never landed).
        tracing::info!(
            exit_code = code,
            reason = %reason,
            log_lines_dropped = log_dropped,
            log_lines_failed = log_failed,
            run_file_writes_failed = run_files_failed,
            event_lines_dropped = events_dropped,
            writes_over_file_size_limit = file_size_exceeded,
            "mcsup finished"
        );
        Ok(RunOutcome {
            exit_code: code,
            reason,
            sigkill_needed,
            console_dropped_lines: dropped,
            log_dropped_lines: log_dropped + log_failed,
            writes_over_file_size_limit: file_size_exceeded,
        })
    }

    /// SIGKILL whatever is left among our children (reparented orphans: setsid'd or double-forked
    /// grandchildren) until none is left, bounded by [`ORPHAN_SWEEP`].
    async fn sweep_orphans(&mut self, sigchld: &mut tokio::signal::unix::Signal) {
        let end = Instant::now() + ORPHAN_SWEEP;
        // A descendant that takes a few rounds to die is told once.
        let mut told = std::collections::HashSet::new();
        loop {
            self.reap();
            let kids = match spawn::list_children() {
                Ok(kids) => kids,
                Err(why) => {
                    // Blind: reparented descendants (setsid'd, double-forked) may be left.
                    self.note("mcsup", RecordKind::SweepBlind, format!(
                        "the orphan sweep could not look for reparented descendants ({why}): setsid'd or double-forked ones may still run; fix: run mcsup where /proc is mounted and readable (no hidepid for its user)"
                    ));
                    return;
                }
            };
            // A leader still unreaped now is one the machine gave up (SIGKILLed, and still in an
            // uninterruptible sleep: an exec or a write on a hung file system): killed again
            // below, but not waited for.
            if kids.iter().all(|k| self.children.leaders.contains(k)) {
                for &k in &kids {
                    spawn::kill_child(k);
                }
                return;
            }
            if Instant::now() >= end {
                tracing::warn!(pids = ?kids, "children still present after the orphan sweep");
                return;
            }
            for &k in &kids {
                // An unreaped child: its pid cannot be reused. If it leads a group, the rest of
                // that group (its own descendants) goes too.
                if nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(k))).map(|g| g.as_raw())
                    == Ok(k)
                {
                    let _ = spawn::signal_group(k, Some(Signal::SIGKILL));
                }
                spawn::kill_child(k);
                if !told.insert(k) {
                    continue;
                }
                let r = Record {
                    unit: "mcsup".into(),
                    kind: RecordKind::OrphanKilled,
                    pid: Some(k),
                    status: None,
                    detail: Some("reparented descendant killed at teardown".into()),
                };
                self.events.write(&r, Instant::now(), &self.clock);
                tracing::info!(pid = k, "killed an orphaned descendant");
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), sigchld.recv()).await;
        }
    }
    /// Every port the plan listened on must be free once everything is gone: a listener left is
    /// a process that escaped the teardown (a worker's child that left its group and the job's
    /// cgroup, as SGLang's DP schedulers did: sgl-project/sglang #23627), or another job's.
    /// Named in a `port-held` event, once per port.
    fn check_ports_released(&mut self) {
        for (name, port) in crate::preflight::tools::listening_ports(&self.plan) {
            let Some(holder) = crate::preflight::tools::port_holder(port) else {
                continue;
            };
            self.note(&name, RecordKind::PortHeld, format!(
                "port {port} ({name}'s) is still listened on after the teardown, by {holder}: a process that escaped the teardown holds it, or another job does; the next job on this node cannot bind it"
            ));
        }
    }

    /// Nothing may be left on the job's GPUs either: a process there now escaped the teardown
    /// (or belongs to another job), and the next job on this node would run out of memory.
    /// Named in a `gpu-held` event per process.
    fn check_gpus_released(&mut self) {
        for (gpu, holder) in crate::preflight::residue::holders(&self.plan) {
            self.note("mcsup", RecordKind::GpuHeld, format!(
                "GPU {gpu} still has a process on it after the teardown: {holder}; the next job on this node would find its memory taken"
            ));
        }
    }

    /// The final record's detail plus the processes mcsup had to SIGKILL, and a warning for those
    /// that had RDMA memory registered: repeated SIGKILLs of RDMA clients leak the NIC's memory
    /// keys until the node reboots (Mooncake's troubleshooting guide, MKEY exhaustion).
    pub(super) fn with_sigkills(&self, mut detail: String) -> String {
        if self.sigkilled.is_empty() {
            return detail;
        }
        let rdma: Vec<&str> = self
            .sigkilled
            .iter()
            .filter(|n| {
                self.plan
                    .processes
                    .iter()
                    .any(|p| &p.name == *n && p.registers_rdma_memory())
            })
            .map(String::as_str)
            .collect();
        if !detail.is_empty() {
            detail.push_str("; ");
        }
        detail.push_str(&format!(
            "SIGKILLed {} process(es) that did not stop in time: {}",
            self.sigkilled.len(),
            self.sigkilled.join(", ")
        ));
        if !rdma.is_empty() {
            tracing::warn!(
                processes = %rdma.join(", "),
                "SIGKILLed processes with RDMA memory registered: repeated SIGKILLs leak the NIC's memory keys until the node reboots"
            );
            detail.push_str(&format!(
                "; warning: {} had RDMA memory registered, and repeated SIGKILLs of RDMA clients leak the NIC's memory keys until the node reboots (Mooncake troubleshooting: MKEY exhaustion); give them a longer stop grace",
                rdma.join(", ")
            ));
        }
        detail
    }
}
