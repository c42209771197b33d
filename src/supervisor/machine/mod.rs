//! The supervisor's decisions: a pure state machine, `handle(event, now) -> actions`.
//!
//! Every per-process and per-gate state lives here, and every decision (start, probe, restart,
//! give up, stop, kill, finish) is made here from events and the time passed in. It must not do
//! any I/O, read the clock, spawn, signal or sleep: the runtime (`runtime/`) turns the world into
//! [`Event`]s and carries out the [`Action`]s. That keeps every policy testable with plain values
//! (see `tests.rs`, which drives restart storms, double signals and teardown order without a
//! single process).
//!
//! Timers are not actions: the machine exposes [`Machine::next_deadline`] and the runtime sends
//! [`Event::Tick`] when it passes. With nothing due it returns `None`, so an idle node never
//! wakes up except for configured liveness probes.
//!
//! Files: `types` (what goes in and out), `probing` (readiness and liveness), `start`
//! (gating and spawning), `restart` (exits and restart policy), `teardown` (signals, ordered
//! stop, kill deadline), `graph` (dependencies and stop levels); this file holds the state and
//! the event loop of the machine itself.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::plan::{
    DependencyCondition, GateSpec, Plan, ProbeSpec, ProcessKind, ProcessSpec, RestartPolicy,
    ShutdownSpec,
};

use crate::exit::ExitCode;
use crate::runfiles::UnitState;

mod graph;
mod order;
mod probing;
mod restart;
mod stall;
mod start;
mod teardown;
mod terminal;
mod types;
mod unit;

pub use types::*;

use graph::stop_levels;
use probing::{Answer, Liveness, Readiness, Waiter};
use restart::HeldExit;
use types::{push_failure, push_ready, rec};

// ---------------------------------------------------------------------------------------------
// Internal state
// ---------------------------------------------------------------------------------------------

/// What to do once a stopping process's group is empty.
#[derive(Debug, Clone, PartialEq)]
enum AfterStop {
    /// Part of the node's teardown: the process is simply stopped.
    Teardown,
    /// Liveness failed: apply the restart policy.
    Restart,
    /// Readiness timed out: the process is failed with this code.
    Fail { code: i32, reason: String },
    /// A rank of a worker over several nodes (`unit.rs`): report it down (with how it ended
    /// when that was unasked) and wait for the coordinator.
    RankDown { failed: Option<ExitStatus> },
}

#[derive(Debug, Clone)]
enum ProcState {
    /// Dependencies not satisfied yet.
    Waiting,
    /// Spawn requested, answer pending.
    Spawning,
    /// Forked, its exec not done yet: a live group that a stop must reach.
    Execing { pid: Pid },
    /// Spawned, readiness pending.
    Starting { pid: Pid, readiness: Readiness },
    /// Ready (and optionally liveness-checked).
    Ready {
        pid: Pid,
        liveness: Option<Liveness>,
    },
    /// Waiting to be restarted: until the backoff is over and, for a process on GPUs, the
    /// previous run has released them.
    BackingOff {
        until: Instant,
        release: Option<ReleaseWait>,
    },
    /// A rank of a worker over several nodes, down, waiting for the coordinator to start every
    /// rank again (`unit.rs`); first, on GPUs, for them to be released before it is reported
    /// down (with how it ended).
    Rejoining {
        release: Option<(ReleaseWait, Option<ExitStatus>)>,
    },
    /// A drain reads its in-flight requests before its stop signal.
    Draining { pid: Pid, drain: Drain },
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
    fn name(&self) -> UnitState {
        match self {
            ProcState::Waiting => UnitState::Waiting,
            ProcState::Spawning | ProcState::Execing { .. } => UnitState::Spawning,
            ProcState::Starting { .. } => UnitState::Starting,
            ProcState::Ready { .. } => UnitState::Ready,
            ProcState::BackingOff { .. } | ProcState::Rejoining { .. } => UnitState::BackingOff,
            ProcState::Draining { .. } => UnitState::Draining,
            ProcState::Stopping { .. } => UnitState::Stopping,
            ProcState::Exited => UnitState::Exited,
            ProcState::Failed => UnitState::Failed,
        }
    }

    fn terminal(&self) -> bool {
        matches!(self, ProcState::Exited | ProcState::Failed)
    }

    /// A live process group that needs stopping.
    fn live_pid(&self) -> Option<Pid> {
        match self {
            ProcState::Starting { pid, .. }
            | ProcState::Ready { pid, .. }
            | ProcState::Execing { pid } => Some(*pid),
            ProcState::Draining { pid, .. } | ProcState::Stopping { pid, .. } => Some(*pid),
            _ => None,
        }
    }
}

/// A restart's wait for the previous run's GPUs (`restart.rs`): the runtime answers
/// [`Action::AwaitRelease`] by `deadline` at the latest, or the machine stops waiting then.
#[derive(Debug, Clone)]
struct ReleaseWait {
    attempt: u64,
    deadline: Instant,
    answered: bool,
}

/// A process the drain reads before its stop signal (`teardown.rs`).
#[derive(Debug, Clone)]
struct Drain {
    /// When the drain reached this process.
    started: Instant,
    /// When it stops waiting (a frontend: when its one read is overdue).
    until: Instant,
    /// In flight at the first read.
    first: Option<u64>,
    /// In flight at the last read.
    last: Option<u64>,
    /// When to read next; `None` while a read is outstanding.
    next_read: Option<Instant>,
    /// The outstanding read's attempt number.
    attempt: u64,
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
    /// The last run's group leader (a restart waits for its group to release the GPUs).
    last_pid: Option<Pid>,
    detail: Option<String>,
    /// Readiness and liveness probe attempts that failed, over the whole run.
    probe_failures: u32,
    /// Spawn to ready of the last run that became ready.
    ready_after: Option<Duration>,
    /// When it first became ready (the start-up; restarts do not move it).
    first_ready: Option<Instant>,
    /// A drained frontend: in flight at its stop signal, and when it was sent.
    drained_from: Option<(u64, Instant)>,
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
    probe_failures: u32,
    /// When it first passed (the start-up; a re-probe does not move it).
    first_ready: Option<Instant>,
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
    /// Set by the drain signal: until when the drain waits for in-flight requests.
    drain_until: Option<Instant>,
    /// The stop request that cut the drain short, if one did.
    drain_cut: Option<Signal>,
    deadline_hit: bool,
    /// Deaths by a stop signal held back for [`SIGNAL_DEATH_SETTLE`], in arrival order.
    held: Vec<HeldExit>,
    /// First SIGINT/SIGTERM, for escalation.
    first_stop_signal_at: Option<Instant>,
    escalated: bool,
    /// A group had to be SIGKILLed during teardown (grace or deadline expired, or escalation).
    sigkill_needed: bool,
    next_attempt: u64,
    /// Bumped on every state change, so the runtime rewrites the status file only when needed.
    version: u64,
    /// The job has other nodes (a control connection): a worker that failed non-critically
    /// leaves this node up, since the job keeps serving on them (`teardown.rs`).
    peers: bool,
    /// That this node stays up for that reason was said.
    stays_up_said: bool,
    /// Terminal processes that exited, with their exit status (the result gate's verdict).
    terminal_codes: Vec<(String, i32)>,
    /// Terminal processes that exited 0, waiting for the result gate.
    judging: Vec<terminal::Judging>,
    /// Every terminal process here has ended: the worst of them, which is the node's exit
    /// status whatever ends it afterwards.
    finished: Option<(String, i32)>,
    /// Processes whose liveness failed, waiting for their stack dump before their stop.
    stalls: Vec<stall::Stalled>,
    /// The teardown's order across nodes, as the coordinator last said (`order.rs`).
    order: order::JobOrder,
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
                last_pid: None,
                detail: None,
                probe_failures: 0,
                ready_after: None,
                first_ready: None,
                drained_from: None,
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
                probe_failures: 0,
                first_ready: None,
            })
            .collect();
        Ok(Machine {
            procs,
            gates,
            shutdown: plan.shutdown.clone(),
            phase: Phase::Idle,
            reason: None,
            teardown_deadline: None,
            drain_until: None,
            drain_cut: None,
            deadline_hit: false,
            first_stop_signal_at: None,
            escalated: false,
            sigkill_needed: false,
            next_attempt: 0,
            version: 0,
            held: Vec::new(),
            peers: plan.control.is_some(),
            stays_up_said: false,
            terminal_codes: Vec::new(),
            judging: Vec::new(),
            finished: None,
            stalls: Vec::new(),
            order: order::JobOrder::default(),
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
        // What the job is for decides: the benchmark's status (0 after its result gate).
        if let Some((_, code)) = &self.finished {
            return *code;
        }
        match &self.reason {
            Some(ShutdownReason::CriticalFailure { code, .. }) => *code,
            Some(ShutdownReason::Finished { code, .. }) => *code,
            Some(ShutdownReason::EndpointFailed(_)) => ExitCode::LivenessFailed.code(),
            Some(ShutdownReason::WorkersDone | ShutdownReason::NothingLeft)
                if self
                    .procs
                    .iter()
                    .any(|p| matches!(p.state, ProcState::Failed)) =>
            {
                ExitCode::FinishedWithFailures.code()
            }
            _ if self.sigkill_needed => ExitCode::TeardownNeededSigkill.code(),
            _ => ExitCode::Ok.code(),
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
                ProcState::BackingOff { until, release } if !stopping => {
                    consider(Some(match release {
                        Some(r) if !r.answered => (*until).max(r.deadline),
                        _ => *until,
                    }))
                }
                ProcState::Rejoining {
                    release: Some((r, _)),
                } if !stopping => consider(Some(r.deadline)),
                ProcState::Stopping {
                    killed: false,
                    kill_at,
                    ..
                } => consider(Some(*kill_at)),
                ProcState::Draining { drain, .. } => {
                    consider(Some(drain.until));
                    consider(drain.next_read);
                }
                _ => {}
            }
        }
        consider(self.judging_deadline());
        consider(self.stalls_deadline());
        if stopping {
            consider(self.order_deadline());
        }
        for h in &self.held {
            consider(Some(h.until));
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
                GateState::Probing(_) => UnitState::Probing,
                GateState::Ready => UnitState::Ready,
                GateState::Failed => UnitState::Failed,
                GateState::Cancelled => {
                    if self.phase == Phase::Idle {
                        UnitState::Waiting
                    } else {
                        UnitState::Cancelled
                    }
                }
            },
            pid: None,
            restarts: 0,
            last_exit: None,
            spawned_at: None,
            since: g.since,
            detail: g.detail.clone(),
            probe_failures: g.probe_failures,
            ready_after: None,
            first_ready_at: g.first_ready,
            depends_on: Vec::new(),
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
            probe_failures: p.probe_failures,
            ready_after: p.ready_after,
            first_ready_at: p.first_ready,
            depends_on: p.spec.depends_on.iter().map(|d| d.target.clone()).collect(),
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
            Event::Forked { proc, pid } => self.on_forked(proc, pid, now),
            Event::Spawned { proc, pid } => self.on_spawned(proc, pid, now, &mut out),
            Event::SpawnFailed { proc, error } => self.on_spawn_failed(proc, error, now, &mut out),
            Event::Exited { pid, status } => {
                if self.unasked_stop_signal_death(pid, status) {
                    self.held.push(HeldExit {
                        pid,
                        status,
                        until: now + SIGNAL_DEATH_SETTLE,
                        group_empty: false,
                    });
                } else {
                    self.on_exited(pid, status, now, &mut out)
                }
            }
            Event::GroupEmpty { pgid } => match self.held.iter_mut().find(|h| h.pid == pgid) {
                Some(h) => h.group_empty = true,
                None => self.on_group_empty(pgid, now, &mut out),
            },
            Event::Inflight { attempt, result } => self.on_inflight(attempt, result, now, &mut out),
            Event::BackstopKilled => {
                if !self.sigkill_needed {
                    self.sigkill_needed = true;
                    self.version += 1;
                }
            }
            Event::ProbeDone {
                attempt,
                ok,
                detail,
            } => self.on_probe(attempt, Answer::of(ok), detail, now, &mut out),
            Event::ProbeFailed { attempt, detail } => {
                self.on_probe(attempt, Answer::Final, detail, now, &mut out)
            }
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
            Event::FatalLine {
                proc,
                generation,
                detail,
            } => self.on_fatal_line(proc, generation, detail, now, &mut out),
            Event::Signal(sig) => self.on_signal(sig, now, &mut out),
            Event::Released { attempt, result } => self.on_released(attempt, result, &mut out),
            Event::RankStop { proc } => self.on_rank_stop(proc, now, &mut out),
            Event::RankStart { proc, generation } => {
                self.on_rank_start(proc, generation, now, &mut out)
            }
            Event::RankGiveUp { proc, reason } => self.on_rank_give_up(proc, reason, now, &mut out),
            Event::PeerFailed { detail } => {
                self.begin_teardown(ShutdownReason::PeerFailed(detail), now, &mut out)
            }
            Event::JobStop { node, signal } => {
                self.begin_teardown(ShutdownReason::JobStop { node, signal }, now, &mut out)
            }
            Event::JobDone { detail } => self.job_done(detail, now, &mut out),
            Event::EndpointFailed { detail } => {
                self.begin_teardown(ShutdownReason::EndpointFailed(detail), now, &mut out)
            }
            Event::Judged { proc, verdict } => self.on_judged(proc, verdict, now, &mut out),
            Event::Dumped { proc } => self.on_dumped(proc, now, &mut out),
            Event::JobTier { floor, waiting } => self.on_job_tier(floor, waiting),
            Event::Tick => {}
        }
        self.release_held(now, &mut out);
        self.settle(now, &mut out);
        if !out.is_empty() && self.version == before {
            // Probe bookkeeping changes no visible state; records and signals do.
            if out
                .iter()
                .any(|a| !matches!(a, Action::Probe { .. } | Action::ReadInflight { .. }))
            {
                self.version += 1;
            }
        }
        out
    }

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
            g.state = GateState::Probing(Readiness::new(&g.spec.readiness, now, Waiter::Gate));
            g.since = now;
        }
        self.version += 1;
    }

    fn settle(&mut self, now: Instant, out: &mut Vec<Action>) {
        // Each pass can unlock the next (a gate turns ready, a dependent spawns...). The number
        // of passes is bounded by the number of units: every productive pass moves a unit on.
        for _ in 0..(self.procs.len() + self.gates.len() + 4) {
            let before = (self.version, out.len());
            if matches!(self.phase, Phase::Starting | Phase::Running) {
                self.settle_gates(now, out);
                self.settle_running(now, out);
                self.settle_rejoining(now, out);
                self.settle_waiting(now, out);
                self.settle_judging(now, out);
                self.settle_stalls(now, out);
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
}

#[cfg(test)]
pub(crate) mod tests;
