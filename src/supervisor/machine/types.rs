//! What goes into the machine and comes out of it: events, actions, records, statuses, and
//! the small types they carry. Plain values, no behaviour beyond formatting.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::engine::stop::MetricSum;
use crate::plan::{ProbeSpec, ProcessKind};

/// A process id (and, since every child leads its own group, its process-group id).
pub type Pid = i32;

/// A second SIGINT/SIGTERM escalates to SIGKILL only if it comes at least this long after the
/// first. Slurm's time limit sends TERM, CONT, TERM in a burst; a person's second Ctrl-C is
/// always slower than this.
pub const ESCALATION_MIN_GAP: Duration = Duration::from_millis(100);

/// After the global teardown deadline every group has been SIGKILLed; if a group is still not
/// empty this long afterwards (a process stuck in uninterruptible sleep), mcsup gives up waiting.
pub const ABANDON_AFTER_DEADLINE: Duration = Duration::from_secs(3);

pub use crate::domain::{is_stop_signal, STOP_SIGNALS};

/// How long a child's death by a stop signal that nobody asked for is held back before the
/// machine judges it: under Slurm's proctrack/linuxproc (or a terminal's Ctrl-C to a whole group)
/// the same signal is on its way to mcsup, and the machine must hear it first, or it would take
/// the death for a crash (restart, or a critical failure with 143 instead of a clean shutdown).
/// The child is dead either way; only the decision waits. A teardown releases it at once.
pub const SIGNAL_DEATH_SETTLE: Duration = Duration::from_millis(25);

/// During a drain, how often a worker's in-flight gauge is read while requests remain.
pub const INFLIGHT_POLL: Duration = Duration::from_millis(500);

/// How long one read of an in-flight gauge may take.
pub const INFLIGHT_READ_TIMEOUT: Duration = Duration::from_secs(1);

/// How a reaped process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitStatus {
    /// Exited with this code (0..=255).
    Code(i32),
    /// Killed by this signal number.
    Signal(i32),
}

impl ExitStatus {
    /// The shell convention: the exit code, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }

    /// The signal's name for a signal death.
    pub fn signal_name(self) -> Option<&'static str> {
        match self {
            ExitStatus::Code(_) => None,
            ExitStatus::Signal(s) => {
                Some(Signal::try_from(s).map(|s| s.as_str()).unwrap_or("SIG?"))
            }
        }
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "exit code {c}"),
            ExitStatus::Signal(_) => {
                write!(
                    f,
                    "killed by {} ({})",
                    self.signal_name().unwrap_or("?"),
                    self.code()
                )
            }
        }
    }
}

/// A process or a gate, by index into the plan's lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnitRef {
    /// Index into `plan.gates`.
    Gate(usize),
    /// Index into `plan.processes`.
    Proc(usize),
}

/// Input to the machine.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Begin: start probing gates and spawn what has no unmet dependency.
    Start,
    /// The runtime forked the child of [`Action::Spawn`]: it leads process group `pid`, its
    /// exec not yet done (an exec on a file system that stopped answering may take forever).
    Forked { proc: usize, pid: Pid },
    /// The child of [`Action::Spawn`] has exec'd; it leads process group `pid`.
    Spawned { proc: usize, pid: Pid },
    /// [`Action::Spawn`] failed (fork/exec error, e.g. the program does not exist).
    SpawnFailed { proc: usize, error: String },
    /// A process group leader the runtime spawned was reaped.
    Exited { pid: Pid, status: ExitStatus },
    /// A group asked for with [`Action::WatchGroup`] has no member left.
    GroupEmpty { pgid: Pid },
    /// The result of [`Action::Probe`].
    ProbeDone {
        attempt: u64,
        ok: bool,
        detail: String,
    },
    /// The result of [`Action::Probe`] when the probe knows that retrying cannot help (the
    /// master lists a store's segment at another size): a readiness wait fails at once, a
    /// liveness check counts as failed past its threshold.
    ProbeFailed { attempt: u64, detail: String },
    /// A log-line readiness probe matched a line of the process's output.
    LogMatched {
        proc: usize,
        generation: u64,
        probe: usize,
    },
    /// A line of the process's output matched one of its fatal log patterns (srt-slurm's
    /// `health_check.fatal_log_markers`): its engine is dead whatever its process does; `detail`
    /// names the pattern and the line.
    FatalLine {
        proc: usize,
        generation: u64,
        detail: String,
    },
    /// mcsup received a signal (SIGTERM, SIGINT, SIGHUP or the drain signal).
    Signal(Signal),
    /// The answer to [`Action::ReadInflight`]: the requests the process's engine is serving.
    Inflight {
        attempt: u64,
        result: Result<u64, String>,
    },
    /// The signal handler's backstop SIGKILLed every group itself (a second stop signal came
    /// while the loop was busy): the teardown needed SIGKILL, whatever the machine saw.
    BackstopKilled,
    /// The answer to [`Action::AwaitRelease`]: released (what was seen), or the wait ran out
    /// (what still held the GPUs).
    Released {
        attempt: u64,
        result: Result<String, String>,
    },
    /// The coordinator restarts the worker this process is a rank of (`restart.unit`): stop it
    /// (by its stop rules) and report it down.
    RankStop { proc: usize },
    /// Every rank of the worker is down: start this one again (generation `generation` of the
    /// worker), once its dependencies hold.
    RankStart { proc: usize, generation: u64 },
    /// The coordinator gave the worker up: this rank fails (its `critical` decides).
    RankGiveUp { proc: usize, reason: String },
    /// Another node failed for good, or the coordinator is gone: drain this node.
    PeerFailed { detail: String },
    /// The coordinator's node was asked to stop (`signal`): so is the whole job.
    JobStop { node: String, signal: Signal },
    /// What the job is for ended on every node that runs part of it (the coordinator's word,
    /// or this node's own when it is alone): drain; the exit status is this node's terminal
    /// processes' (0 on a node without one).
    JobDone { detail: String },
    /// The result gate's verdict on terminal process `proc` (`WatchRequest::Judge`): `Ok`
    /// what it measured, `Err` the number that was wrong.
    Judged {
        proc: usize,
        verdict: Result<String, String>,
    },
    /// The stack dump of process `proc` is written (or could not be): its stop goes ahead.
    Dumped { proc: usize },
    /// The job's endpoint failed its canary, whose policy is to drain (`mcsup.canary.on_failure:
    /// drain`): the job ends, exit code 6.
    EndpointFailed { detail: String },
    /// The coordinator's word on the teardown's order across nodes: the highest teardown tier
    /// this node may stop, and the nodes that hold the next one back; `None` when the control
    /// connection is gone (or never was): the node's own order.
    JobTier {
        floor: Option<u8>,
        waiting: Vec<String>,
    },
    /// Time passed: act on whatever is due.
    Tick,
}

/// Output of the machine, carried out by the runtime in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Spawn the process (its own group); answer with `Forked`, then `Spawned` or `SpawnFailed`
    /// (or `SpawnFailed` at once, when it could not even fork). An exit of the child comes after
    /// either.
    Spawn { proc: usize, generation: u64 },
    /// `killpg(pgid, signal)`; ESRCH means the group is already gone.
    Signal { pgid: Pid, signal: Signal },
    /// Send `GroupEmpty` once no process is left in this group.
    WatchGroup { pgid: Pid },
    /// Run one probe attempt (at most `timeout`) and answer with `ProbeDone`.
    Probe {
        attempt: u64,
        unit: UnitRef,
        probe: ProbeSpec,
        timeout: Duration,
    },
    /// Read the engine's in-flight gauge (at most `timeout`) and answer with `Inflight`.
    ReadInflight {
        attempt: u64,
        gauge: MetricSum,
        timeout: Duration,
    },
    /// Wait (at most `within`) until group `pgid` is empty and the memory of `gpus` is back
    /// near its level before the run; answer with `Released`.
    AwaitRelease {
        attempt: u64,
        pgid: Pid,
        gpus: Vec<u32>,
        within: Duration,
    },
    /// Tell the coordinator a rank of its worker is down here: `exit` when it ended unasked
    /// (the failure the coordinator decides on), none when it was stopped as asked or never ran.
    RankDown {
        proc: usize,
        exit: Option<ExitStatus>,
    },
    /// Every terminal process here has exited and been judged: tell the coordinator (`detail`),
    /// which answers `JobDone` once every node's have (the node drains then). Without a
    /// connection, answer `JobDone` at once: the node ends alone.
    Finished { detail: String },
    /// Log this and append it to the events file.
    Record(Record),
    /// Follow-up work for the watchers (`supervisor::watch`), always right after the record it
    /// follows.
    Watch(WatchRequest),
}

/// What the machine asks of the watchers beyond supervising a process, and when: the table of
/// every follow-up a record has (nothing else starts one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchRequest {
    /// Process `proc`, whose readiness includes the servable probe, is ready: the job is
    /// servable, and its frontend is watched from now on.
    Servable { proc: usize },
    /// The Mooncake master `proc` is ready: its view is read from now on; ready again after a
    /// restart, its stores' remount is verified.
    Master { proc: usize },
    /// A rank of a worker over several nodes is ready: a relaunched leader rank is told to the
    /// coordinator.
    Rank { proc: usize },
    /// `proc` failed, is restarting or failed its liveness: what its output said it died of.
    Diagnose { proc: usize },
    /// Terminal process `proc` (the benchmark client) exited 0: do its result files say it
    /// measured something? Answered with `Event::Judged`.
    Judge { proc: usize },
    /// `proc` stopped answering (its liveness failed): dump its stacks before it is stopped.
    /// Answered with `Event::Dumped`.
    Dump { proc: usize, pgid: Pid },
}

/// What a [`Record`] reports: the events file's names.
pub use crate::runfiles::EventKind as RecordKind;

/// One machine-readable event about a unit (or about mcsup itself: `unit == "mcsup"`).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Process or gate name, or `mcsup`.
    pub unit: String,
    /// What happened.
    pub kind: RecordKind,
    /// The process (group leader) concerned, if any.
    pub pid: Option<Pid>,
    /// How it ended, for exits.
    pub status: Option<ExitStatus>,
    /// A human explanation (reason, delay, signal...).
    pub detail: Option<String>,
}

/// The node's overall phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not started yet.
    Idle,
    /// Something is still waiting, spawning or not ready.
    Starting,
    /// Everything that should run is ready.
    Running,
    /// Ordered teardown in progress.
    Stopping,
    /// Every process is gone; the runtime may finish.
    Done,
}

impl From<Phase> for crate::runfiles::NodePhase {
    /// The name written to the status file.
    fn from(p: Phase) -> Self {
        use crate::runfiles::NodePhase;
        match p {
            Phase::Idle => NodePhase::Idle,
            Phase::Starting => NodePhase::Starting,
            Phase::Running => NodePhase::Running,
            Phase::Stopping => NodePhase::Stopping,
            Phase::Done => NodePhase::Stopped,
        }
    }
}

/// Why the node is being torn down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShutdownReason {
    /// SIGTERM, SIGINT, SIGHUP or the drain signal.
    Signal(Signal),
    /// Every worker has exited (`exit_when_workers_done`).
    WorkersDone,
    /// Nothing is left running or waiting.
    NothingLeft,
    /// A critical unit failed; mcsup exits with `code`.
    CriticalFailure { unit: String, code: i32 },
    /// Another node failed for good, or the coordinator is gone (the detail says which).
    PeerFailed(String),
    /// What the job is for ended here (every terminal process exited): the worst exit status.
    Finished { unit: String, code: i32 },
    /// What the job is for ended on the nodes that run it, not here.
    JobDone(String),
    /// The endpoint's canary failed and its policy is to drain.
    EndpointFailed(String),
    /// The coordinator's node was asked to stop (`signal`): the whole job stops, this node as if
    /// it had been asked (a drain when it is the drain signal), without counting as this node's
    /// own first stop request.
    JobStop { node: String, signal: Signal },
}

impl std::fmt::Display for ShutdownReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShutdownReason::Signal(s) => write!(f, "received {}", s.as_str()),
            ShutdownReason::WorkersDone => f.write_str("all workers exited"),
            ShutdownReason::NothingLeft => f.write_str("no process left to supervise"),
            ShutdownReason::CriticalFailure { unit, code } => {
                write!(f, "critical `{unit}` failed (exit code {code})")
            }
            ShutdownReason::PeerFailed(detail) => f.write_str(detail),
            ShutdownReason::Finished { unit, code } => {
                write!(f, "`{unit}` ended (exit code {code}): the job is done")
            }
            ShutdownReason::JobDone(detail) | ShutdownReason::EndpointFailed(detail) => {
                f.write_str(detail)
            }
            ShutdownReason::JobStop { node, signal } => write!(
                f,
                "the coordinator's node {node} received {}: the whole job stops",
                signal.as_str()
            ),
        }
    }
}

/// A plan the machine cannot run (found before anything starts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// Point-in-time view of one unit, for the status file.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitStatus {
    /// Unit name.
    pub name: String,
    /// `None` for a gate.
    pub kind: Option<ProcessKind>,
    /// Whether its failure tears the node down.
    pub critical: bool,
    /// Its state, as the status file names it.
    pub state: crate::runfiles::UnitState,
    /// Current process (group leader) while one exists.
    pub pid: Option<Pid>,
    /// Restarts so far.
    pub restarts: u32,
    /// How the last run ended.
    pub last_exit: Option<ExitStatus>,
    /// When the current (or last) run was spawned.
    pub spawned_at: Option<Instant>,
    /// When the unit entered its current state.
    pub since: Instant,
    /// Why it is in this state (failure reason, backoff...).
    pub detail: Option<String>,
    /// Probe attempts that failed (readiness and liveness), over the whole run.
    pub probe_failures: u32,
    /// Spawn to ready of the last run that became ready.
    pub ready_after: Option<Duration>,
    /// When it first became ready (restarts and re-probes do not move it).
    pub first_ready_at: Option<Instant>,
    /// The units it waits for before it is spawned (none for a gate).
    pub depends_on: Vec<String>,
}

/// Process `i` became ready: its record, then what its spec asks of the watchers.
pub(super) fn push_ready(
    spec: &crate::plan::ProcessSpec,
    i: usize,
    r: Record,
    out: &mut Vec<Action>,
) {
    out.push(Action::Record(r));
    if spec.kind == ProcessKind::Master {
        out.push(Action::Watch(WatchRequest::Master { proc: i }));
    }
    if spec.restart.unit.is_some() {
        out.push(Action::Watch(WatchRequest::Rank { proc: i }));
    }
    if spec.servable_probe().is_some() {
        out.push(Action::Watch(WatchRequest::Servable { proc: i }));
    }
}

/// Process `i` failed, is restarting or failed its liveness: its record, then the request to
/// say what its output said it died of.
pub(super) fn push_failure(i: usize, r: Record, out: &mut Vec<Action>) {
    out.push(Action::Record(r));
    out.push(Action::Watch(WatchRequest::Diagnose { proc: i }));
}

pub(super) fn rec(unit: &str, kind: RecordKind) -> Record {
    Record {
        unit: unit.to_string(),
        kind,
        pid: None,
        status: None,
        detail: None,
    }
}

impl Record {
    pub(super) fn pid(mut self, pid: Pid) -> Self {
        self.pid = Some(pid);
        self
    }
    pub(super) fn status(mut self, s: ExitStatus) -> Self {
        self.status = Some(s);
        self
    }
    pub(super) fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }
}

pub(super) fn ms(d: Duration) -> u128 {
    d.as_millis()
}
