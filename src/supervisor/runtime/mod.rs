//! The one runtime loop: turns the world into [`Event`]s and carries out [`Action`]s.
//!
//! Sources of events, all awaited in a single `select!` on the current thread (every child is
//! forked from this thread, which lives as long as mcsup: PR_SET_PDEATHSIG follows the forking
//! thread): SIGCHLD (the reaper), the stop requests and the drain signal (the table in
//! `signals`), probe results, log-line matches and the watchers' answers (from tasks, over one
//! channel), and the machine's next deadline.
//!
//! One owner of `wait()`: this loop reaps with `waitpid(-1, WNOHANG)` until nothing is left
//! (several exits coalesce into one SIGCHLD) and routes each status to the process, exec probe or
//! orphan it belongs to. Nothing else may wait (tokio::process is deliberately not used).
//!
//! The runtime is a reaper and spawner (`children.rs`), a probe executor (`probe.rs`), the writer
//! of the status and metrics files (`report.rs`), and a dispatch table: what the machine asks of
//! the watchers goes to them, and what they ask for is carried out (`watchers.rs`). The run's
//! set-up is `setup.rs`, its end `finish.rs`, the job's control connection `control.rs`. mcsup's
//! own log goes to stderr through the queue in `stderr.rs`.
//!
//! This module decides nothing: every policy is in `machine/` and `watch/`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use regex::bytes::Regex;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use crate::plan::{Plan, ProbeSpec};

use super::logs::{self, Console};
use super::machine::{Action, Event, Machine, Phase, Pid, Record, RecordKind, UnitRef};
use super::signals::SignalEvent;
use super::status::{Clock, EventsWriter};
use super::timer::DeadlineTimer;
use super::watch::{self, Answer};
use super::{probes, signals, spawn, RunOptions, RunOutcome, SupervisorError};

mod children;
mod control;
mod finish;
mod probe;
mod report;
mod setup;
mod watchers;

use finish::with_losses;

/// Backstop re-check of watched groups when a member's death may not reach us as SIGCHLD (its
/// parent is alive outside the group). Only runs while a group is being stopped.
const GROUP_RECHECK: Duration = Duration::from_millis(100);

/// Messages from helper tasks to the loop.
enum Msg {
    /// One read of an engine's in-flight gauge during a drain.
    Inflight {
        attempt: u64,
        result: Result<u64, String>,
    },
    Probe {
        attempt: u64,
        result: Result<(), String>,
    },
    LogMatched {
        proc: usize,
        generation: u64,
        probe: usize,
    },
    ExecTimeout {
        attempt: u64,
        pid: Pid,
    },
    /// A helper command (`helpers`) overran its bound.
    HelperTimeout {
        pid: Pid,
    },
    /// How the exec of child `pid` went (`spawn::Exec`): `None` when it exec'd.
    Exec {
        pid: Pid,
        error: Option<std::io::Error>,
    },
    /// Output a log file could not take.
    LogLoss(logs::LogLoss),
    /// What the run directory's writer has to say (a recreated log directory).
    Writer(logs::News),
    /// A line of process `proc`'s incarnation `generation` matched a fatal log pattern.
    FatalLine {
        proc: usize,
        generation: u64,
        detail: String,
    },
    /// What a watcher's task (or a line watch) found.
    Watch(Answer),
    /// What the job's control connection says (`control`).
    Control(crate::supervisor::control::net::Incoming),
}

/// What the status and metrics files are written from, besides the machine and the watchers
/// (`report.rs`).
struct Report {
    /// The machine's version last written.
    version: Option<u64>,
    /// When the pending status change is written ([`report::STATUS_DELAY`] after the first
    /// unwritten one).
    due: Option<Instant>,
    /// When the status is rewritten even if nothing changed (the plan's heartbeat after the last
    /// write).
    heartbeat_due: Instant,
    /// Where this mcsup runs (host name, PID namespace).
    here: (String, String),
    /// Each process's roles, by name.
    unit_roles: HashMap<String, Vec<String>>,
    /// Output each process's log file could not take, by process.
    losses: std::collections::BTreeMap<String, crate::runfiles::OutputLost>,
    /// Since when the writer has been stuck, once that was said.
    stall_said: Option<Duration>,
}

/// The children the loop owns beside the plan's processes' states in the machine.
#[derive(Default)]
struct Children {
    /// Log-line readiness probes per process: (probe index, regex).
    matchers: Vec<Vec<(usize, Regex)>>,
    /// Group leaders we spawned and have not reaped.
    leaders: HashSet<Pid>,
    /// Exec probes in flight: pid -> attempt.
    exec_probes: HashMap<Pid, u64>,
    /// Children forked whose exec has not said how it went (`children.rs`).
    execing: HashMap<Pid, children::Execing>,
    /// Leaders that are the srun client of a Slurm step, with the step's name (`steps`).
    steps: HashMap<Pid, String>,
    /// Commands run for mcsup itself (a step's `scancel`), by pid: what each does.
    helpers: HashMap<Pid, String>,
    /// Groups to report empty.
    watched: HashSet<Pid>,
    readers: Vec<JoinHandle<()>>,
    /// `readers` is pruned of finished ones when it reaches this length (then twice what is left):
    /// amortized O(1) per spawn, where a scan on every spawn made a start of n processes O(n²).
    readers_prune_at: usize,
}

struct Runtime {
    machine: Machine,
    plan: Plan,
    drain: Signal,
    clock: Clock,
    events: EventsWriter,
    /// Writes every file of the run directory, off the loop (`logs::writer`).
    writer: logs::RunWriter,
    tx: UnboundedSender<Msg>,
    console: Console,
    children: Children,
    report: Report,
    /// The watchers and their running tasks (`watchers.rs`).
    watchers: watchers::Watchers,
    /// Whether the first SIGXFSZ is in the events file.
    file_size_reported: bool,
    /// The probe attempts under way on processes: which process, started when.
    probing: HashMap<u64, (usize, Instant)>,
    /// The processes mcsup SIGKILLed, in order, for the final record.
    sigkilled: Vec<String>,
    /// When the machine entered its teardown (for `mcsup_teardown_seconds`).
    teardown_started: Option<Instant>,
    /// The job's control connection (`control`).
    control: control::ControlState,
}

/// Run a plan to completion (see [`super::run_blocking`]).
pub async fn run(plan: Plan, opts: RunOptions) -> Result<RunOutcome, SupervisorError> {
    let drain = plan.shutdown.drain_signal.0;
    signals::install_backstop(drain)
        .map_err(|e| SupervisorError::Setup(format!("cannot install signal handlers: {e}")))?;
    // Listen before the first spawn so no signal can be missed.
    let sigs = signals::SignalEvents::new(drain)
        .map_err(|e| SupervisorError::Setup(format!("cannot listen for signals: {e}")))?;
    signals::release_early_signals();
    run_with_signals(plan, opts, sigs).await
}

/// `run` with the signals coming from `sigs` instead of the process's own (mini-redis style:
/// the shutdown source is a parameter), so a test can drive a whole run in-process, e.g. with a
/// channel ([`signals::SignalSource`] is implemented for one).
pub async fn run_with_signals(
    plan: Plan,
    opts: RunOptions,
    mut sigs: impl signals::SignalSource,
) -> Result<RunOutcome, SupervisorError> {
    // The scratch directory is held until `run` returns (after the teardown) and goes with it.
    let (mut rt, _scratch, mut sigchld, mut rx) = setup::runtime(plan, opts).await?;
    let node = rt.plan.node.name.clone();
    tracing::info!(node = %node, processes = rt.plan.processes.len(), gates = rt.plan.gates.len(), "mcsup starting");
    if !rt.plan.shutdown.holds_ranks_of.is_empty() {
        tracing::info!(
            "this node holds ranks of {}: it stays up until told to stop",
            rt.plan.shutdown.holds_ranks_of.join(", ")
        );
    }
    // Before anything starts: an error after the first spawn would leave without a teardown.
    let mut timer = DeadlineTimer::new().map_err(|e| SupervisorError::Io {
        path: PathBuf::from("timerfd"),
        source: e,
    })?;
    rt.reap(); // anything inherited that already exited
    rt.feed(Event::Start);
    // Coalesced like every later change: the first processes are starting now, and rendering the
    // status and metrics competes with them for the CPU (the file follows within STATUS_DELAY).
    rt.write_status_soon();
    while rt.machine.phase() != Phase::Done {
        let deadline = [
            rt.machine.next_deadline(),
            rt.report.due,
            Some(rt.report.heartbeat_due),
        ]
        .into_iter()
        .flatten()
        .min();
        let recheck = !rt.children.watched.is_empty();
        tokio::select! {
            // Signals before SIGCHLD: when the backstop's SIGKILL (run inside the second
            // SIGINT's handler) and the resulting exits wake the loop together, the machine must
            // hear the signal first, or it sees the deaths as ordinary exits during teardown.
            biased;
            sig = sigs.recv() => rt.on_signal(sig),
            _ = sigchld.recv() => rt.reap(),
            Some(msg) = rx.recv() => rt.on_msg(msg),
            _ = timer.wait(deadline) => rt.feed(Event::Tick),
            _ = tokio::time::sleep(GROUP_RECHECK), if recheck => rt.check_groups(),
        }
        if matches!(rt.machine.phase(), Phase::Stopping | Phase::Done) {
            rt.say_bye();
            rt.report_tier();
            if rt.teardown_started.is_none() {
                // The wake-up that started the teardown: the metrics' teardown duration starts
                // here, and the endpoint is going away on purpose.
                rt.teardown_started = Some(Instant::now());
                rt.watch_and_feed(watch::Input::Stopping);
            }
        }
        // Not per event, nor per wake-up: a teardown of 16 children is dozens of events.
        rt.write_status_soon();
        rt.watch_writer();
    }
    rt.finish(&mut sigchld, &mut rx).await
}

impl Runtime {
    /// Hand an event to the machine and carry out what it decides (which may produce further
    /// events at once, e.g. `Spawned`).
    fn feed(&mut self, event: Event) {
        self.feed_all([event]);
    }

    /// [`Runtime::feed`] for several events in order, each decision's events after them all.
    fn feed_all(&mut self, events: impl IntoIterator<Item = Event>) {
        let mut queue: VecDeque<Event> = events.into_iter().collect();
        while let Some(ev) = queue.pop_front() {
            let now = Instant::now();
            if let Event::ProbeDone { attempt, .. } | Event::ProbeFailed { attempt, .. } = &ev {
                if let Some((proc, since)) = self.probing.remove(attempt) {
                    if matches!(ev, Event::ProbeDone { ok: true, .. }) {
                        queue.extend(self.watch(watch::Input::Passed { proc, since }));
                    }
                }
            }
            for action in self.machine.handle(ev, now) {
                self.execute(action, now, &mut queue);
            }
        }
    }

    fn execute(&mut self, action: Action, now: Instant, queue: &mut VecDeque<Event>) {
        match action {
            Action::Spawn { proc, generation } => queue.push_back(self.spawn(proc, generation)),
            Action::Signal { pgid, signal } => self.signal(pgid, signal),
            Action::WatchGroup { pgid } => {
                self.children.watched.insert(pgid);
                if !spawn::signal_group(pgid, None).unwrap_or(false) {
                    self.children.watched.remove(&pgid);
                    signals::unregister_group(pgid);
                    queue.push_back(Event::GroupEmpty { pgid });
                }
            }
            Action::Probe {
                attempt,
                unit,
                probe,
                timeout,
            } => {
                // Each polled attempt ends in `ProbeDone` or `ProbeFailed` (log lines are
                // matched as they arrive, never polled).
                if let (UnitRef::Proc(proc), false) =
                    (unit, matches!(probe, ProbeSpec::LogLine { .. }))
                {
                    self.probing.insert(attempt, (proc, now));
                }
                queue.extend(self.probe(attempt, unit, probe, timeout));
            }
            Action::ReadInflight {
                attempt,
                gauge,
                timeout,
            } => {
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let result = probes::inflight(gauge, timeout).await;
                    let _ = tx.send(Msg::Inflight { attempt, result });
                });
            }
            Action::RankDown { proc, exit } => self.rank_down(proc, exit, queue),
            Action::Finished { detail } => self.part_done(detail, queue),
            Action::AwaitRelease {
                attempt,
                pgid,
                gpus,
                within,
            } => queue.extend(self.watch(watch::Input::Release {
                attempt,
                pgid,
                gpus: &gpus,
                within,
            })),
            Action::Record(r) => self.record(r, now),
            Action::Watch(request) => {
                if let super::machine::WatchRequest::Rank { proc } = request {
                    self.rank_ready(proc);
                }
                queue.extend(self.watch(watch::Input::Asked(request)));
            }
        }
    }

    /// A record the machine decided: completed with what only the runtime knows, written, logged.
    fn record(&mut self, mut r: Record, now: Instant) {
        if r.kind == RecordKind::Finished {
            let detail = with_losses(r.detail.take().unwrap_or_default(), &self.writer);
            r.detail = Some(self.with_sigkills(detail));
        }
        if r.kind == RecordKind::Killing && !self.sigkilled.contains(&r.unit) {
            self.sigkilled.push(r.unit.clone());
        }
        if let (RecordKind::Killing, Some(pid)) = (r.kind, r.pid) {
            // Why did it not stop? What the kernel says of it, just before the SIGKILL.
            let stop = self.plan.processes.iter().find(|p| p.name == r.unit);
            if let Some(what) = spawn::describe_unstopped(pid, stop.map(|p| p.stop.signal.0)) {
                r.detail = Some(match r.detail.take() {
                    Some(d) => format!("{d}; {what}"),
                    None => what,
                });
            }
        }
        self.events.write(&r, now, &self.clock);
        self.place_used(&r.unit, r.kind);
        let code = r.status.map(|s| s.code());
        match r.kind {
            RecordKind::Failed | RecordKind::Killing | RecordKind::GpuReleaseLate => {
                tracing::warn!(process = %r.unit, pid = r.pid, exit_code = code, detail = r.detail.as_deref(), "{}", r.kind.as_str())
            }
            _ => {
                tracing::info!(process = %r.unit, pid = r.pid, exit_code = code, detail = r.detail.as_deref(), "{}", r.kind.as_str())
            }
        }
    }

    fn on_signal(&mut self, sig: SignalEvent) {
        match sig {
            SignalEvent::Stop(sig) => self.feed(Event::Signal(sig)),
            // Every failed write raises it again (the events file itself may be over the limit):
            // report the first, count the rest for the final record.
            SignalEvent::Ignored(libc::SIGXFSZ) => {
                if !self.file_size_reported {
                    self.file_size_reported = true;
                    self.note_ignored(
                        "SIGXFSZ: a write went over the file size limit (ulimit -f) and failed with EFBIG; the file misses output from here on (the final record counts the failed writes)",
                    );
                }
            }
            SignalEvent::Ignored(signo) => {
                let name = signals::signal_name(signo);
                self.note_ignored(&format!("{name}: not a signal mcsup acts on"));
            }
        }
    }

    fn note_ignored(&mut self, detail: &str) {
        let r = Record {
            unit: "mcsup".into(),
            kind: RecordKind::SignalIgnored,
            pid: None,
            status: None,
            detail: Some(detail.to_string()),
        };
        self.events.write(&r, Instant::now(), &self.clock);
        tracing::warn!("signal ignored: {detail}");
    }

    fn on_msg(&mut self, msg: Msg) {
        match msg {
            Msg::Inflight { attempt, result } => self.feed(Event::Inflight { attempt, result }),
            Msg::Probe { attempt, result } => {
                let ok = result.is_ok();
                self.feed(Event::ProbeDone {
                    attempt,
                    ok,
                    detail: result.err().unwrap_or_default(),
                });
            }
            Msg::LogMatched {
                proc,
                generation,
                probe,
            } => self.feed(Event::LogMatched {
                proc,
                generation,
                probe,
            }),
            Msg::FatalLine {
                proc,
                generation,
                detail,
            } => self.feed(Event::FatalLine {
                proc,
                generation,
                detail,
            }),
            Msg::Watch(answer) => self.watch_and_feed(watch::Input::Answer(answer)),
            Msg::Control(i) => self.on_control(i),
            Msg::LogLoss(loss) => self.on_log_loss(loss),
            Msg::Writer(logs::News::LogDirRecreated(dir)) => self.note(
                "mcsup",
                RecordKind::LogDirRecreated,
                format!(
                    "{} was removed while mcsup ran; recreated (mode 0700)",
                    dir.display()
                ),
            ),
            Msg::HelperTimeout { pid } => self.helper_timeout(pid),
            Msg::Exec { pid, error } => self.exec_done(pid, error),
            Msg::ExecTimeout { attempt, pid } => self.exec_timeout(attempt, pid),
        }
    }

    /// Write a record the runtime (not the machine) decides, and log it.
    fn note(&mut self, unit: &str, kind: RecordKind, detail: String) {
        self.note_with(unit, kind, detail, None);
    }

    /// [`Runtime::note`] with a known failure line (a `diagnosis` event's).
    fn note_with(
        &mut self,
        unit: &str,
        kind: RecordKind,
        detail: String,
        diagnosis: Option<crate::runfiles::DiagnosisRecord>,
    ) {
        let r = Record {
            unit: unit.to_string(),
            kind,
            pid: None,
            status: None,
            detail: Some(detail),
        };
        self.events
            .write_with(&r, diagnosis, Instant::now(), &self.clock);
        match kind {
            RecordKind::WorkersLost
            | RecordKind::SweepBlind
            | RecordKind::PortHeld
            | RecordKind::GpuHeld
            | RecordKind::OutputLost
            | RecordKind::LogDirRecreated
            | RecordKind::Diagnosis
            | RecordKind::RemountLate
            | RecordKind::MasterUnreachable => {
                tracing::warn!(process = %r.unit, detail = r.detail.as_deref(), "{}", kind.as_str())
            }
            _ => {
                tracing::info!(process = %r.unit, detail = r.detail.as_deref(), "{}", kind.as_str())
            }
        }
    }
}
