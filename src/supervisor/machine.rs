//! The supervisor's decisions: a pure state machine, `handle(event, now) -> actions`.
//!
//! Every per-process and per-gate state lives here, and every decision (start, probe, restart,
//! give up, stop, kill, finish) is made here from events and the time passed in. It must not do
//! any I/O, read the clock, spawn, signal or sleep: the runtime (`runtime.rs`) turns the world into
//! [`Event`]s and carries out the [`Action`]s. That keeps every policy testable with plain values
//! (see the unit tests at the bottom, which drive restart storms, double signals and teardown
//! order without a single process).
//!
//! Timers are not actions: the machine exposes [`Machine::next_deadline`] and the runtime sends
//! [`Event::Tick`] when it passes. With nothing due it returns `None`, so an idle node never
//! wakes up except for configured liveness probes.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::plan::{
    DependencyCondition, GateSpec, LivenessSpec, Plan, ProbeSpec, ProcessKind, ProcessSpec,
    ReadinessSpec, RestartPolicy, ShutdownSpec,
};

use super::exit_codes;

/// A process id (and, since every child leads its own group, its process-group id).
pub type Pid = i32;

/// A second SIGINT/SIGTERM escalates to SIGKILL only if it comes at least this long after the
/// first. Slurm's time limit sends TERM, CONT, TERM in a burst; a person's second Ctrl-C is
/// always slower than this.
pub const ESCALATION_MIN_GAP: Duration = Duration::from_millis(100);

/// After the global teardown deadline every group has been SIGKILLed; if a group is still not
/// empty this long afterwards (a process stuck in uninterruptible sleep), mcsup gives up waiting.
pub const ABANDON_AFTER_DEADLINE: Duration = Duration::from_secs(3);

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
    /// The runtime carried out [`Action::Spawn`]; the child leads process group `pid`.
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
    /// A log-line readiness probe matched a line of the process's output.
    LogMatched {
        proc: usize,
        generation: u64,
        probe: usize,
    },
    /// mcsup received a signal (SIGTERM, SIGINT, SIGHUP or the drain signal).
    Signal(Signal),
    /// Time passed: act on whatever is due.
    Tick,
}

/// Output of the machine, carried out by the runtime in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Spawn the process (its own group); answer with `Spawned` or `SpawnFailed`.
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
    /// Log this and append it to the events file.
    Record(Record),
}

/// What a [`Record`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordKind {
    Spawned,
    Ready,
    Exited,
    Completed,
    Restarting,
    Waiting,
    LivenessFailed,
    Stopping,
    Killing,
    Stopped,
    Failed,
    ShutdownRequested,
    Escalated,
    SignalIgnored,
    Deadline,
    Abandoned,
    OrphanKilled,
    /// A restarted master lists this node's stores again (written by the runtime, not the
    /// machine: see `supervisor::remount`).
    Remounted,
    /// A restarted master still misses this node's stores after the bound.
    RemountLate,
    Finished,
}

impl RecordKind {
    /// The name written to the events file (`spawned`, `ready`, `stopping`...).
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Spawned => "spawned",
            RecordKind::Ready => "ready",
            RecordKind::Exited => "exited",
            RecordKind::Completed => "completed",
            RecordKind::Restarting => "restarting",
            RecordKind::Waiting => "waiting",
            RecordKind::LivenessFailed => "liveness-failed",
            RecordKind::Stopping => "stopping",
            RecordKind::Killing => "killing",
            RecordKind::Stopped => "stopped",
            RecordKind::Failed => "failed",
            RecordKind::ShutdownRequested => "shutdown-requested",
            RecordKind::Escalated => "escalated",
            RecordKind::SignalIgnored => "signal-ignored",
            RecordKind::Deadline => "deadline",
            RecordKind::Abandoned => "abandoned",
            RecordKind::OrphanKilled => "orphan-killed",
            RecordKind::Remounted => "remounted",
            RecordKind::RemountLate => "remount-late",
            RecordKind::Finished => "finished",
        }
    }
}

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

impl Phase {
    /// The name written to the status file.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Starting => "starting",
            Phase::Running => "running",
            Phase::Stopping => "stopping",
            Phase::Done => "stopped",
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
    /// State name (see [`crate::supervisor::StatusProcess::state`]).
    pub state: &'static str,
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
}

// ---------------------------------------------------------------------------------------------
// Internal state
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct ProbeRun {
    spec: ProbeSpec,
    passed: bool,
    in_flight: Option<u64>,
    next_at: Instant,
    interval: Duration,
}

/// A readiness wait in progress (process or gate).
#[derive(Debug, Clone)]
struct Readiness {
    deadline: Instant,
    max_interval: Duration,
    attempt_timeout: Duration,
    probes: Vec<ProbeRun>,
}

impl Readiness {
    fn new(spec: &ReadinessSpec, now: Instant) -> Self {
        let first = now + spec.initial_delay;
        Readiness {
            deadline: now + spec.timeout,
            max_interval: spec.max_interval.max(spec.interval),
            attempt_timeout: spec.attempt_timeout,
            probes: spec
                .probes
                .iter()
                .map(|p| ProbeRun {
                    spec: p.clone(),
                    passed: false,
                    in_flight: None,
                    next_at: first,
                    interval: spec.interval,
                })
                .collect(),
        }
    }

    fn all_passed(&self) -> bool {
        self.probes.iter().all(|p| p.passed)
    }

    /// Probes that are due (log-line probes are never polled: output lines are events).
    fn emit_due(
        &mut self,
        unit: UnitRef,
        now: Instant,
        next_attempt: &mut u64,
        out: &mut Vec<Action>,
    ) {
        for p in &mut self.probes {
            if p.passed || p.in_flight.is_some() || matches!(p.spec, ProbeSpec::LogLine { .. }) {
                continue;
            }
            if p.next_at <= now {
                *next_attempt += 1;
                p.in_flight = Some(*next_attempt);
                out.push(Action::Probe {
                    attempt: *next_attempt,
                    unit,
                    probe: p.spec.clone(),
                    timeout: self.attempt_timeout,
                });
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let probes = self
            .probes
            .iter()
            .filter(|p| {
                !p.passed && p.in_flight.is_none() && !matches!(p.spec, ProbeSpec::LogLine { .. })
            })
            .map(|p| p.next_at);
        probes.chain(std::iter::once(self.deadline)).min()
    }

    /// Returns true if the attempt belonged to this wait.
    fn on_result(&mut self, attempt: u64, ok: bool, now: Instant) -> bool {
        let max = self.max_interval;
        for p in &mut self.probes {
            if p.in_flight == Some(attempt) {
                p.in_flight = None;
                if ok {
                    p.passed = true;
                } else {
                    p.next_at = now + p.interval;
                    p.interval = (p.interval * 2).min(max);
                }
                return true;
            }
        }
        false
    }
}

#[derive(Debug, Clone)]
struct Liveness {
    spec: LivenessSpec,
    in_flight: Option<u64>,
    next_at: Instant,
    failures: u32,
}

/// What to do once a stopping process's group is empty.
#[derive(Debug, Clone, PartialEq)]
enum AfterStop {
    /// Part of the node's teardown: the process is simply stopped.
    Teardown,
    /// Liveness failed: apply the restart policy.
    Restart,
    /// Readiness timed out: the process is failed with this code.
    Fail { code: i32, reason: String },
}

#[derive(Debug, Clone)]
enum ProcState {
    /// Dependencies not satisfied yet.
    Waiting,
    /// Spawn requested, answer pending.
    Spawning,
    /// Spawned, readiness pending.
    Starting { pid: Pid, readiness: Readiness },
    /// Ready (and optionally liveness-checked).
    Ready {
        pid: Pid,
        liveness: Option<Liveness>,
    },
    /// Waiting to be restarted.
    BackingOff { until: Instant },
    /// Stop signal sent (or group being killed); done when the leader is reaped AND the group is
    /// empty: a member surviving its leader must still be killed (process-compose #520).
    Stopping {
        pid: Pid,
        leader: Option<ExitStatus>,
        group_empty: bool,
        kill_at: Instant,
        killed: bool,
        then: AfterStop,
    },
    /// Terminal: completed, or stopped by the teardown.
    Exited,
    /// Terminal: failed (restart limit, readiness, spawn, dependency).
    Failed,
}

impl ProcState {
    fn name(&self) -> &'static str {
        match self {
            ProcState::Waiting => "waiting",
            ProcState::Spawning => "spawning",
            ProcState::Starting { .. } => "starting",
            ProcState::Ready { .. } => "ready",
            ProcState::BackingOff { .. } => "backing-off",
            ProcState::Stopping { .. } => "stopping",
            ProcState::Exited => "exited",
            ProcState::Failed => "failed",
        }
    }

    fn terminal(&self) -> bool {
        matches!(self, ProcState::Exited | ProcState::Failed)
    }

    /// A live process group that needs stopping.
    fn live_pid(&self) -> Option<Pid> {
        match self {
            ProcState::Starting { pid, .. } | ProcState::Ready { pid, .. } => Some(*pid),
            ProcState::Stopping { pid, .. } => Some(*pid),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Proc {
    spec: ProcessSpec,
    deps: Vec<(UnitRef, DependencyCondition)>,
    /// Teardown wave: lower levels stop first; always above every dependent's level.
    stop_level: u32,
    /// Nobody waits for it to complete: exiting 0 unasked is not normal.
    long_running: bool,
    state: ProcState,
    since: Instant,
    generation: u64,
    restarts: u32,
    restart_times: VecDeque<Instant>,
    backoff: Duration,
    last_exit: Option<ExitStatus>,
    /// Whether the last exit counted as success (for `completed_successfully`).
    last_success: bool,
    spawned_at: Option<Instant>,
    detail: Option<String>,
}

#[derive(Debug, Clone)]
enum GateState {
    Probing(Readiness),
    Ready,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone)]
struct Gate {
    spec: GateSpec,
    state: GateState,
    since: Instant,
    detail: Option<String>,
}

/// The supervisor's state machine. See the module doc.
#[derive(Debug)]
pub struct Machine {
    procs: Vec<Proc>,
    gates: Vec<Gate>,
    shutdown: ShutdownSpec,
    phase: Phase,
    reason: Option<ShutdownReason>,
    teardown_deadline: Option<Instant>,
    deadline_hit: bool,
    /// First SIGINT/SIGTERM, for escalation.
    first_stop_signal_at: Option<Instant>,
    escalated: bool,
    /// A group had to be SIGKILLed during teardown (grace or deadline expired, or escalation).
    sigkill_needed: bool,
    next_attempt: u64,
    /// Bumped on every state change, so the runtime rewrites the status file only when needed.
    version: u64,
}

fn rec(unit: &str, kind: RecordKind) -> Record {
    Record {
        unit: unit.to_string(),
        kind,
        pid: None,
        status: None,
        detail: None,
    }
}

impl Record {
    fn pid(mut self, pid: Pid) -> Self {
        self.pid = Some(pid);
        self
    }
    fn status(mut self, s: ExitStatus) -> Self {
        self.status = Some(s);
        self
    }
    fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

impl Machine {
    /// Build the machine for a plan, rejecting what cannot run: duplicate names, unknown
    /// dependency targets, dependency cycles, log-line probes on gates.
    pub fn new(plan: &Plan, now: Instant) -> Result<Self, PlanError> {
        let mut names: HashMap<&str, UnitRef> = HashMap::new();
        for (i, g) in plan.gates.iter().enumerate() {
            if names.insert(g.name.as_str(), UnitRef::Gate(i)).is_some() {
                return Err(PlanError(format!("duplicate unit name `{}`", g.name)));
            }
            if g.readiness
                .probes
                .iter()
                .any(|p| matches!(p, ProbeSpec::LogLine { .. }))
            {
                return Err(PlanError(format!(
                    "gate `{}` has a log-line probe, but a gate has no output (use tcp, http, exec or file)",
                    g.name
                )));
            }
        }
        for (i, p) in plan.processes.iter().enumerate() {
            if names.insert(p.name.as_str(), UnitRef::Proc(i)).is_some() {
                return Err(PlanError(format!("duplicate unit name `{}`", p.name)));
            }
            if p.argv.is_empty() {
                return Err(PlanError(format!("process `{}` has an empty argv", p.name)));
            }
        }
        let mut deps_of = Vec::with_capacity(plan.processes.len());
        for p in &plan.processes {
            let mut deps = Vec::new();
            for d in &p.depends_on {
                let Some(&target) = names.get(d.target.as_str()) else {
                    return Err(PlanError(format!(
                        "process `{}` depends on `{}`, which is neither a process nor a gate of this plan",
                        p.name, d.target
                    )));
                };
                if target == UnitRef::Proc(deps_of.len()) {
                    return Err(PlanError(format!("process `{}` depends on itself", p.name)));
                }
                deps.push((target, d.condition));
            }
            deps_of.push(deps);
        }
        let levels = stop_levels(&plan.processes, &deps_of)?;
        let mut waited_for = vec![false; plan.processes.len()];
        for deps in &deps_of {
            for (t, c) in deps {
                if let (UnitRef::Proc(j), DependencyCondition::CompletedSuccessfully) = (t, c) {
                    waited_for[*j] = true;
                }
            }
        }
        let procs = plan
            .processes
            .iter()
            .zip(deps_of)
            .enumerate()
            .map(|(i, (spec, deps))| Proc {
                backoff: spec.restart.backoff_initial,
                spec: spec.clone(),
                deps,
                stop_level: levels[i],
                long_running: !waited_for[i],
                state: ProcState::Waiting,
                since: now,
                generation: 0,
                restarts: 0,
                restart_times: VecDeque::new(),
                last_exit: None,
                last_success: false,
                spawned_at: None,
                detail: None,
            })
            .collect();
        let gates = plan
            .gates
            .iter()
            .map(|g| Gate {
                spec: g.clone(),
                state: GateState::Cancelled,
                since: now,
                detail: None,
            })
            .collect();
        Ok(Machine {
            procs,
            gates,
            shutdown: plan.shutdown.clone(),
            phase: Phase::Idle,
            reason: None,
            teardown_deadline: None,
            deadline_hit: false,
            first_stop_signal_at: None,
            escalated: false,
            sigkill_needed: false,
            next_attempt: 0,
            version: 0,
        })
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Why the teardown started, once it has.
    pub fn reason(&self) -> Option<&ShutdownReason> {
        self.reason.as_ref()
    }

    /// Changes on every state change.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether a group had to be SIGKILLed during the teardown.
    pub fn sigkill_needed(&self) -> bool {
        self.sigkill_needed
    }

    /// The exit code mcsup should return (meaningful once [`Phase::Done`]); see
    /// [`super::RunOutcome`] for the table.
    pub fn exit_code(&self) -> i32 {
        match &self.reason {
            Some(ShutdownReason::CriticalFailure { code, .. }) => *code,
            Some(ShutdownReason::WorkersDone | ShutdownReason::NothingLeft)
                if self
                    .procs
                    .iter()
                    .any(|p| matches!(p.state, ProcState::Failed)) =>
            {
                exit_codes::FINISHED_WITH_FAILURES
            }
            _ if self.sigkill_needed => exit_codes::TEARDOWN_NEEDED_SIGKILL,
            _ => exit_codes::OK,
        }
    }

    /// When the runtime should send the next [`Event::Tick`]; `None` = nothing is timed.
    pub fn next_deadline(&self) -> Option<Instant> {
        let stopping = self.phase == Phase::Stopping;
        let mut best: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                best = Some(best.map_or(t, |b: Instant| b.min(t)));
            }
        };
        if !stopping {
            for g in &self.gates {
                if let GateState::Probing(r) = &g.state {
                    consider(r.next_deadline());
                }
            }
        }
        for p in &self.procs {
            match &p.state {
                ProcState::Starting { readiness, .. } if !stopping => {
                    consider(readiness.next_deadline())
                }
                ProcState::Ready {
                    liveness: Some(l), ..
                } if !stopping && l.in_flight.is_none() => consider(Some(l.next_at)),
                ProcState::BackingOff { until } if !stopping => consider(Some(*until)),
                ProcState::Stopping {
                    killed: false,
                    kill_at,
                    ..
                } => consider(Some(*kill_at)),
                _ => {}
            }
        }
        if let Some(d) = self.teardown_deadline {
            if self.phase == Phase::Stopping {
                consider(Some(if self.deadline_hit {
                    d + ABANDON_AFTER_DEADLINE
                } else {
                    d
                }));
            }
        }
        best
    }

    /// Status of every gate, then every process, in plan order.
    pub fn snapshot(&self) -> Vec<UnitStatus> {
        let gates = self.gates.iter().map(|g| UnitStatus {
            name: g.spec.name.clone(),
            kind: None,
            critical: false,
            state: match g.state {
                GateState::Probing(_) => "probing",
                GateState::Ready => "ready",
                GateState::Failed => "failed",
                GateState::Cancelled => {
                    if self.phase == Phase::Idle {
                        "waiting"
                    } else {
                        "cancelled"
                    }
                }
            },
            pid: None,
            restarts: 0,
            last_exit: None,
            spawned_at: None,
            since: g.since,
            detail: g.detail.clone(),
        });
        let procs = self.procs.iter().map(|p| UnitStatus {
            name: p.spec.name.clone(),
            kind: Some(p.spec.kind),
            critical: p.spec.critical,
            state: p.state.name(),
            pid: p.state.live_pid(),
            restarts: p.restarts,
            last_exit: p.last_exit,
            spawned_at: p.spawned_at,
            since: p.since,
            detail: p.detail.clone(),
        });
        gates.chain(procs).collect()
    }

    /// Process groups that are (or may still be) alive: for a forced kill.
    pub fn live_groups(&self) -> Vec<Pid> {
        self.procs
            .iter()
            .filter_map(|p| p.state.live_pid())
            .collect()
    }

    /// Feed one event; returns what to do, in order.
    pub fn handle(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        let before = self.version;
        match event {
            Event::Start => self.on_start(now, &mut out),
            Event::Spawned { proc, pid } => self.on_spawned(proc, pid, now, &mut out),
            Event::SpawnFailed { proc, error } => self.on_spawn_failed(proc, error, now, &mut out),
            Event::Exited { pid, status } => self.on_exited(pid, status, now, &mut out),
            Event::GroupEmpty { pgid } => self.on_group_empty(pgid, now, &mut out),
            Event::ProbeDone {
                attempt,
                ok,
                detail,
            } => self.on_probe(attempt, ok, detail, now, &mut out),
            Event::LogMatched {
                proc,
                generation,
                probe,
            } => {
                if let Some(p) = self.procs.get_mut(proc) {
                    if p.generation == generation {
                        if let ProcState::Starting { readiness, .. } = &mut p.state {
                            if let Some(pr) = readiness.probes.get_mut(probe) {
                                pr.passed = true;
                            }
                        }
                    }
                }
            }
            Event::Signal(sig) => self.on_signal(sig, now, &mut out),
            Event::Tick => {}
        }
        self.settle(now, &mut out);
        if !out.is_empty() && self.version == before {
            // Probe bookkeeping changes no visible state; records and signals do.
            if out.iter().any(|a| !matches!(a, Action::Probe { .. })) {
                self.version += 1;
            }
        }
        out
    }

    // -----------------------------------------------------------------------------------------
    // Event handlers
    // -----------------------------------------------------------------------------------------

    fn set_state(&mut self, i: usize, state: ProcState, now: Instant) {
        let p = &mut self.procs[i];
        // A readiness complaint ("not ready yet: ...") is stale once the process is ready.
        if matches!(state, ProcState::Ready { .. }) {
            p.detail = None;
        }
        p.state = state;
        p.since = now;
        self.version += 1;
    }

    fn on_start(&mut self, now: Instant, _out: &mut [Action]) {
        if self.phase != Phase::Idle {
            return;
        }
        self.phase = Phase::Starting;
        for g in &mut self.gates {
            g.state = GateState::Probing(Readiness::new(&g.spec.readiness, now));
            g.since = now;
        }
        self.version += 1;
    }

    fn on_spawned(&mut self, i: usize, pid: Pid, now: Instant, out: &mut Vec<Action>) {
        let Some(p) = self.procs.get_mut(i) else {
            return;
        };
        if !matches!(p.state, ProcState::Spawning) {
            return;
        }
        p.spawned_at = Some(now);
        p.detail = None;
        out.push(Action::Record(
            rec(&p.spec.name, RecordKind::Spawned).pid(pid),
        ));
        let state = match &p.spec.readiness {
            Some(r) if !r.probes.is_empty() => ProcState::Starting {
                pid,
                readiness: Readiness::new(r, now),
            },
            _ => {
                out.push(Action::Record(
                    rec(&p.spec.name, RecordKind::Ready).pid(pid),
                ));
                ProcState::Ready {
                    pid,
                    liveness: Self::new_liveness(p, now),
                }
            }
        };
        self.set_state(i, state, now);
    }

    fn new_liveness(p: &Proc, now: Instant) -> Option<Liveness> {
        p.spec.liveness.as_ref().and_then(|l| {
            // A log-line probe only makes sense for readiness (a line is printed once).
            if matches!(l.probe, ProbeSpec::LogLine { .. }) {
                return None;
            }
            Some(Liveness {
                spec: l.clone(),
                in_flight: None,
                next_at: now + l.period,
                failures: 0,
            })
        })
    }

    fn on_spawn_failed(&mut self, i: usize, error: String, now: Instant, out: &mut Vec<Action>) {
        let Some(p) = self.procs.get(i) else { return };
        if !matches!(p.state, ProcState::Spawning) {
            return;
        }
        self.fail(
            i,
            exit_codes::SPAWN_FAILED,
            format!("could not start: {error}"),
            now,
            out,
        );
    }

    fn on_exited(&mut self, pid: Pid, status: ExitStatus, now: Instant, out: &mut Vec<Action>) {
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
            ProcState::Starting { .. } | ProcState::Ready { .. } => {
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
                    let state = ProcState::Stopping {
                        pid,
                        leader: Some(status),
                        group_empty: false,
                        kill_at: now,
                        killed: true,
                        then: AfterStop::Teardown,
                    };
                    self.set_state(i, state, now);
                    out.push(Action::WatchGroup { pgid: pid });
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

    fn on_group_empty(&mut self, pgid: Pid, now: Instant, out: &mut Vec<Action>) {
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

    fn maybe_stopped(&mut self, i: usize, now: Instant, out: &mut Vec<Action>) {
        let ProcState::Stopping {
            pid,
            leader: Some(status),
            group_empty: true,
            then,
            ..
        } = &self.procs[i].state
        else {
            return;
        };
        let (pid, status, then) = (*pid, *status, then.clone());
        let name = self.procs[i].spec.name.clone();
        match then {
            AfterStop::Teardown => {
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
            AfterStop::Fail { code, reason } => {
                out.push(Action::Record(
                    rec(&name, RecordKind::Stopped).pid(pid).status(status),
                ));
                self.fail(i, code, reason, now, out);
            }
        }
    }

    /// After an unrequested exit (or a liveness-driven stop): restart, complete or fail.
    fn apply_exit_policy(
        &mut self,
        i: usize,
        status: ExitStatus,
        liveness: bool,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let p = &mut self.procs[i];
        let success = !liveness && p.last_success;
        let restart = match p.spec.restart.policy {
            RestartPolicy::Never => false,
            RestartPolicy::OnFailure => !success,
            RestartPolicy::Always => true,
        };
        let failure_code = if liveness {
            exit_codes::LIVENESS_FAILED
        } else if status.code() == 0 {
            exit_codes::CRITICAL_EXITED_ZERO
        } else {
            status.code()
        };
        if !restart {
            if success {
                if p.spec.critical && p.long_running {
                    let reason =
                        format!("exited unasked ({status}) and nothing waits for it to complete");
                    self.fail(i, exit_codes::CRITICAL_EXITED_ZERO, reason, now, out);
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
        let detail = format!("restart {} in {} ms", p.restarts, ms(delay));
        out.push(Action::Record(
            rec(&p.spec.name, RecordKind::Restarting)
                .status(status)
                .detail(detail),
        ));
        self.set_state(i, ProcState::BackingOff { until: now + delay }, now);
    }

    fn fail(&mut self, i: usize, code: i32, reason: String, now: Instant, out: &mut Vec<Action>) {
        let p = &mut self.procs[i];
        let mut r = rec(&p.spec.name, RecordKind::Failed).detail(reason.clone());
        r.status = p.last_exit;
        out.push(Action::Record(r));
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

    // The readiness arm cannot become a match guard: `on_result` mutates the wait.
    #[allow(clippy::collapsible_match)]
    fn on_probe(
        &mut self,
        attempt: u64,
        ok: bool,
        detail: String,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        for g in &mut self.gates {
            if let GateState::Probing(r) = &mut g.state {
                if r.on_result(attempt, ok, now) {
                    if !ok {
                        g.detail = Some(detail);
                    }
                    return;
                }
            }
        }
        for i in 0..self.procs.len() {
            let p = &mut self.procs[i];
            match &mut p.state {
                ProcState::Starting { readiness, .. } => {
                    if readiness.on_result(attempt, ok, now) {
                        if !ok {
                            p.detail = Some(format!("not ready yet: {detail}"));
                        }
                        return;
                    }
                }
                ProcState::Ready {
                    pid,
                    liveness: Some(l),
                } if l.in_flight == Some(attempt) => {
                    let pid = *pid;
                    l.in_flight = None;
                    l.next_at = now + l.spec.period;
                    if ok {
                        l.failures = 0;
                        return;
                    }
                    l.failures += 1;
                    if l.failures < l.spec.failure_threshold.max(1) {
                        return;
                    }
                    let d = format!("{} consecutive failures, last: {detail}", l.failures);
                    out.push(Action::Record(
                        rec(&p.spec.name, RecordKind::LivenessFailed)
                            .pid(pid)
                            .detail(d),
                    ));
                    self.begin_stop(i, AfterStop::Restart, now, out);
                    return;
                }
                _ => {}
            }
        }
    }

    fn on_signal(&mut self, sig: Signal, now: Instant, out: &mut Vec<Action>) {
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

    fn escalate(&mut self, sig: Signal, now: Instant, out: &mut Vec<Action>) {
        if self.escalated {
            return;
        }
        self.escalated = true;
        out.push(Action::Record(rec("mcsup", RecordKind::Escalated).detail(
            format!("second {}: SIGKILL to every group", sig.as_str()),
        )));
        self.kill_everything(now, out);
    }

    /// SIGKILL every live group at once (escalation or global deadline).
    fn kill_everything(&mut self, now: Instant, out: &mut Vec<Action>) {
        for i in 0..self.procs.len() {
            let name = self.procs[i].spec.name.clone();
            match &mut self.procs[i].state {
                ProcState::Stopping { pid, killed, .. } => {
                    if !*killed {
                        *killed = true;
                        out.push(Action::Record(rec(&name, RecordKind::Killing).pid(*pid)));
                    }
                    out.push(Action::Signal {
                        pgid: *pid,
                        signal: Signal::SIGKILL,
                    });
                    self.sigkill_needed = true;
                }
                ProcState::Starting { pid, .. } | ProcState::Ready { pid, .. } => {
                    let pid = *pid;
                    out.push(Action::Record(rec(&name, RecordKind::Killing).pid(pid)));
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

    fn begin_teardown(&mut self, reason: ShutdownReason, now: Instant, out: &mut Vec<Action>) {
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
    fn begin_stop(&mut self, i: usize, then: AfterStop, now: Instant, out: &mut Vec<Action>) {
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

    // -----------------------------------------------------------------------------------------
    // Settling: timers, dependencies, teardown progress
    // -----------------------------------------------------------------------------------------

    /// Whether the dependency holds now, can never hold, or may hold later.
    fn dep_status(&self, target: UnitRef, cond: DependencyCondition) -> DepStatus {
        match target {
            UnitRef::Gate(g) => match (&self.gates[g].state, cond) {
                (_, DependencyCondition::Started) => DepStatus::Met,
                (GateState::Ready, _) => DepStatus::Met,
                (GateState::Failed | GateState::Cancelled, _) => DepStatus::Never,
                (GateState::Probing(_), _) => DepStatus::Pending,
            },
            UnitRef::Proc(j) => {
                let t = &self.procs[j];
                match (&t.state, cond) {
                    (
                        ProcState::Starting { .. } | ProcState::Ready { .. },
                        DependencyCondition::Started,
                    ) => DepStatus::Met,
                    (ProcState::Ready { .. }, DependencyCondition::Healthy) => DepStatus::Met,
                    (ProcState::Exited, DependencyCondition::CompletedSuccessfully)
                        if t.last_success =>
                    {
                        DepStatus::Met
                    }
                    (ProcState::Exited | ProcState::Failed, _) => DepStatus::Never,
                    _ => DepStatus::Pending,
                }
            }
        }
    }

    fn unit_name(&self, u: UnitRef) -> &str {
        match u {
            UnitRef::Gate(g) => &self.gates[g].spec.name,
            UnitRef::Proc(p) => &self.procs[p].spec.name,
        }
    }

    fn settle(&mut self, now: Instant, out: &mut Vec<Action>) {
        // Each pass can unlock the next (a gate turns ready, a dependent spawns...). The number
        // of passes is bounded by the number of units: every productive pass moves a unit on.
        for _ in 0..(self.procs.len() + self.gates.len() + 4) {
            let before = (self.version, out.len());
            if matches!(self.phase, Phase::Starting | Phase::Running) {
                self.settle_gates(now, out);
                self.settle_running(now, out);
                self.settle_waiting(now, out);
                self.check_node_done(now, out);
            }
            if self.phase == Phase::Stopping {
                self.settle_teardown(now, out);
            }
            self.settle_kills(now, out);
            if (self.version, out.len()) == before {
                break;
            }
        }
        if matches!(self.phase, Phase::Starting | Phase::Running) {
            let all_up = self.procs.iter().all(|p| {
                matches!(
                    p.state,
                    ProcState::Ready { .. } | ProcState::Exited | ProcState::Failed
                )
            });
            let phase = if all_up {
                Phase::Running
            } else {
                Phase::Starting
            };
            if phase != self.phase {
                self.phase = phase;
                self.version += 1;
            }
        }
    }

    fn settle_gates(&mut self, now: Instant, out: &mut Vec<Action>) {
        for gi in 0..self.gates.len() {
            let g = &mut self.gates[gi];
            let GateState::Probing(r) = &mut g.state else {
                continue;
            };
            if r.all_passed() {
                out.push(Action::Record(rec(&g.spec.name, RecordKind::Ready)));
                g.state = GateState::Ready;
                g.since = now;
                self.version += 1;
            } else if now >= r.deadline {
                let d = format!(
                    "readiness timed out after {} ms{}",
                    ms(g.spec.readiness.timeout),
                    g.detail
                        .as_ref()
                        .map(|d| format!(" (last: {d})"))
                        .unwrap_or_default()
                );
                out.push(Action::Record(
                    rec(&g.spec.name, RecordKind::Failed).detail(d.clone()),
                ));
                g.detail = Some(d);
                g.state = GateState::Failed;
                g.since = now;
                self.version += 1;
            } else {
                r.emit_due(UnitRef::Gate(gi), now, &mut self.next_attempt, out);
            }
        }
    }

    fn settle_running(&mut self, now: Instant, out: &mut Vec<Action>) {
        for i in 0..self.procs.len() {
            let p = &mut self.procs[i];
            match &mut p.state {
                ProcState::Starting { pid, readiness } => {
                    let pid = *pid;
                    if readiness.all_passed() {
                        out.push(Action::Record(
                            rec(&p.spec.name, RecordKind::Ready).pid(pid),
                        ));
                        let l = Self::new_liveness(p, now);
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
                            code: exit_codes::READINESS_FAILED,
                            reason,
                        };
                        self.begin_stop(i, then, now, out);
                    } else {
                        readiness.emit_due(UnitRef::Proc(i), now, &mut self.next_attempt, out);
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
                ProcState::BackingOff { until } if *until <= now => {
                    // Re-check dependencies: a dependency may be restarting too.
                    let r = rec(&p.spec.name, RecordKind::Waiting).detail("backoff over");
                    out.push(Action::Record(r));
                    self.set_state(i, ProcState::Waiting, now);
                }
                _ => {}
            }
        }
    }

    fn settle_waiting(&mut self, now: Instant, out: &mut Vec<Action>) {
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
                self.fail(i, exit_codes::READINESS_FAILED, reason, now, out);
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

    fn check_node_done(&mut self, now: Instant, out: &mut Vec<Action>) {
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

    fn settle_teardown(&mut self, now: Instant, out: &mut Vec<Action>) {
        let Some(deadline) = self.teardown_deadline else {
            return;
        };
        if now >= deadline && !self.deadline_hit {
            self.deadline_hit = true;
            if self.procs.iter().any(|p| p.state.live_pid().is_some()) {
                out.push(Action::Record(rec("mcsup", RecordKind::Deadline).detail(
                    format!(
                        "teardown deadline of {} ms reached: SIGKILL to every group",
                        ms(self.shutdown.deadline)
                    ),
                )));
                self.kill_everything(now, out);
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
    fn settle_kills(&mut self, now: Instant, out: &mut Vec<Action>) {
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DepStatus {
    Met,
    Pending,
    Never,
}

/// Teardown waves: `level(p) = max(tier(p), 1 + max(level(d)) over p's dependents d)`, so a
/// process stops after everything that depends on it and after every lower tier (workers, then
/// the store, then the master). Also rejects dependency cycles.
fn stop_levels(
    procs: &[ProcessSpec],
    deps: &[Vec<(UnitRef, DependencyCondition)>],
) -> Result<Vec<u32>, PlanError> {
    let n = procs.len();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for (t, _) in d {
            if let UnitRef::Proc(j) = t {
                dependents[*j].push(i);
            }
        }
    }
    // 0 = unvisited, 1 = on the stack, 2 = done.
    let mut mark = vec![0u8; n];
    let mut level = vec![0u32; n];
    fn visit(
        i: usize,
        procs: &[ProcessSpec],
        dependents: &[Vec<usize>],
        mark: &mut [u8],
        level: &mut [u32],
    ) -> Result<u32, PlanError> {
        match mark[i] {
            2 => return Ok(level[i]),
            1 => {
                return Err(PlanError(format!(
                    "dependency cycle through process `{}`",
                    procs[i].name
                )));
            }
            _ => {}
        }
        mark[i] = 1;
        let mut l = u32::from(procs[i].teardown_tier());
        for &d in &dependents[i] {
            l = l.max(visit(d, procs, dependents, mark, level)? + 1);
        }
        mark[i] = 2;
        level[i] = l;
        Ok(l)
    }
    for i in 0..n {
        visit(i, procs, &dependents, &mut mark, &mut level)?;
    }
    Ok(level)
}

#[cfg(test)]
mod tests;
