//! The one runtime loop: turns the world into [`Event`]s and carries out [`Action`]s.
//!
//! Sources of events, all awaited in a single `select!` on the current thread (every child is
//! forked from this thread, which lives as long as mcsup: PR_SET_PDEATHSIG follows the forking
//! thread): SIGCHLD (the reaper), the stop requests and the drain signal (the table in
//! `signals`), probe results and log-line matches (from tasks, over one channel), and the
//! machine's next deadline.
//!
//! One owner of `wait()`: this loop reaps with `waitpid(-1, WNOHANG)` until nothing is left
//! (several exits coalesce into one SIGCHLD) and routes each status to the process, exec probe or
//! orphan it belongs to. Nothing else may wait (tokio::process is deliberately not used).
//!
//! mcsup's own log goes to stderr through the queue in `stderr.rs`; the end of a run (orphan
//! sweep, reader drain, final status) is in `finish.rs`; what is remembered of the master's
//! restarts is `remount::MasterWatch`.
//!
//! This module decides nothing: every policy is in `machine/`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use regex::bytes::Regex;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::task::JoinHandle;

use crate::engine::frontend::Seen;
use crate::plan::{Plan, ProbeSpec, ProcessKind};

use super::logs::{self, Console, PumpConfig};
use super::machine::{Action, Event, ExitStatus, Machine, Phase, Pid, Record, RecordKind, UnitRef};
use super::servable;
use super::signals::SignalEvent;
use super::status::{self, Clock, EventsWriter};
use super::timer::DeadlineTimer;
use super::{
    diagnose, probes, release, remount, signals, spawn, steps, stores, RunOptions, RunOutcome,
    SupervisorError,
};
use crate::domain::signature::SHOWN_CHARS;
use crate::runfiles::{OutputLost, ServableState, ServableStatus, StatusFile};

mod control;
mod finish;

use finish::with_losses;

/// Backstop re-check of watched groups when a member's death may not reach us as SIGCHLD (its
/// parent is alive outside the group). Only runs while a group is being stopped.
const GROUP_RECHECK: Duration = Duration::from_millis(100);
/// The most a helper command (a Slurm step's `scancel`) may take before it is killed.
const HELPER_BOUND: Duration = Duration::from_secs(10);
/// How long a change waits before the status and metrics files are rewritten: the changes of a
/// start-up or a teardown (one every millisecond or so) share one rewrite, which stays off the
/// path from one process getting ready to the next one's spawn. (A rewrite is two files written
/// and renamed over the old ones; on ext4 the rename starts the new file's writeback and evicting
/// the old inode can wait for disk.) The final status is written at once.
const STATUS_DELAY: Duration = Duration::from_millis(25);
/// The status file is rewritten at least this often while mcsup runs: a reader on another host
/// cannot ask the pid, so a file three periods old says its writer is gone.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// How long one write into the log directory may wait before mcsup says the directory is stuck.
const STALL_SAID: Duration = Duration::from_secs(5);
/// The least length at which the list of log readers is pruned of finished ones.
const MIN_READERS_PRUNE: usize = 64;

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
    Remount {
        master: String,
        ok: bool,
        detail: String,
    },
    /// The servable probe's own result (the readiness attempt), with what the frontend listed.
    Servable {
        attempt: u64,
        result: Result<Seen, String>,
    },
    /// A later read of the frontend's health answer.
    Seen(Result<Seen, String>),
    /// The answer to a restart's wait for its GPUs.
    Released {
        attempt: u64,
        result: Result<String, String>,
    },
    /// Output a log file could not take.
    LogLoss(logs::LogLoss),
    /// What the run directory's writer has to say (a recreated log directory).
    Writer(logs::News),
    /// The job's status files, read for the capacity check (off the loop: another node's file
    /// is on the same shared file system).
    JobStores(Vec<Vec<(bool, u64)>>, u64),
    /// One look at the master for a store's segment.
    Segment {
        attempt: u64,
        verdict: crate::mooncake::segments::Verdict,
    },
    /// One `/health` answer of a store.
    Health {
        attempt: u64,
        proc: usize,
        port: u16,
        answer: stores::HealthAnswer,
    },
    /// A line of process `proc`'s incarnation `generation` matched a fatal log pattern.
    FatalLine {
        proc: usize,
        generation: u64,
        detail: String,
    },
    /// A known failure line in the output of process `proc`'s incarnation `generation`.
    Diagnosis {
        proc: usize,
        generation: u64,
        found: diagnose::Found,
    },
    /// A periodic look at the master's admin server (on its node).
    MasterView(Result<crate::mooncake::remount::Look, String>),
    /// What the job's control connection says (`control`).
    Control(crate::supervisor::control::net::Incoming),
}

struct Runtime {
    machine: Machine,
    plan: Plan,
    drain: Signal,
    clock: Clock,
    events: EventsWriter,
    /// Writes every file of the run directory, off the loop (`logs::writer`).
    writer: logs::RunWriter,
    /// Since when the writer has been stuck, once that was said.
    stall_said: Option<Duration>,
    /// Whether a read of the job's status files is under way.
    reading_job: bool,
    status_version: Option<u64>,
    /// When the status is rewritten even if nothing changed ([`HEARTBEAT`] after the last write).
    heartbeat_due: Instant,
    /// Where this mcsup runs (host name, PID namespace), for the status file.
    here: (String, String),
    /// When the pending status change is written ([`STATUS_DELAY`] after the first unwritten one).
    status_due: Option<Instant>,
    tx: UnboundedSender<Msg>,
    console: Console,
    /// Log-line readiness probes per process: (probe index, regex).
    matchers: Vec<Vec<(usize, Regex)>>,
    /// Group leaders we spawned and have not reaped.
    leaders: HashSet<Pid>,
    /// Exec probes in flight: pid -> attempt.
    exec_probes: HashMap<Pid, u64>,
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
    /// Whether the first SIGXFSZ is in the events file.
    file_size_reported: bool,
    /// The master processes' restarts and key counts (the remount check after a restart).
    masters: remount::MasterWatch,
    /// What the stores printed and what their `/health` said; Mooncake's failure lines.
    stores: stores::StoreWatch,
    /// The exception lines of tracebacks, until their process fails, restarts or passes a
    /// probe started after them.
    exceptions: diagnose::Exceptions,
    /// The probe attempts under way on processes: which process, started when.
    probing: HashMap<u64, (usize, Instant)>,
    /// The master's view (on its node), its poller, and the last capacity verdict said (whole,
    /// and how many looks in a row were short).
    mooncake: Option<crate::runfiles::MooncakeView>,
    master_poller: Option<JoinHandle<()>>,
    /// Each store's planned segment (its registration probe's size), by name, for the status file.
    planned_segments: HashMap<String, u64>,
    /// Each process's roles, by name, for the status file.
    unit_roles: HashMap<String, Vec<String>>,
    capacity_said: Option<bool>,
    short_looks: u32,
    /// The processes mcsup SIGKILLed, in order, for the final record.
    sigkilled: Vec<String>,
    /// When the machine entered its teardown (for `mcsup_teardown_seconds`).
    teardown_started: Option<Instant>,
    /// The job's endpoint once servable, and the task that keeps reading what it sees.
    servable: Option<ServableStatus>,
    servable_watch: Option<JoinHandle<()>>,
    /// What the last servable attempt saw (for the `servable` record).
    last_seen: Option<Seen>,
    /// Output each process's log file could not take, by process.
    losses: BTreeMap<String, OutputLost>,
    /// The GPUs' memory before anything started, when a restart may have to wait for it.
    gpu_baseline: Option<release::Baseline>,
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
    let clock = Clock::new();
    let machine = Machine::new(&plan, Instant::now())?;
    // Before the reaper runs (this waits for its own children) and before anything starts.
    for said in stale_steps(&plan) {
        tracing::warn!("{said}");
    }
    let matchers = compile_matchers(&plan)?;
    // The failure catalogue's searcher, built now rather than at the first spawn (whose time it
    // would delay).
    stores::warm_finders();
    let drain = plan.shutdown.drain_signal.0;
    let node = plan.node.name.clone();
    let (tx, mut rx) = unbounded_channel::<Msg>();
    // Held until `run` returns (after the teardown): the scratch directory goes with it.
    let (writer, _scratch) = prepare_run_dir(&plan, &tx)?;
    let events = EventsWriter::new(writer.clone(), &node);
    // This thread spawns, reaps and probes: it should not wait for a busy child's slice to end.
    if let Err(e) = spawn::prefer_short_slice() {
        tracing::debug!(error = %e, "cannot ask for a short scheduler slice (the default stays)");
    }
    if let Err(e) = spawn::become_subreaper() {
        tracing::warn!(error = %e, "cannot become a child subreaper: orphaned grandchildren will escape to PID 1");
    }
    // Listen before the first spawn so no exit can be missed.
    let mut sigchld = signal(SignalKind::child())
        .map_err(|e| SupervisorError::Setup(format!("cannot listen for SIGCHLD: {e}")))?;
    let console = Console::start(opts.console)
        .map_err(|e| SupervisorError::Setup(format!("cannot start the console thread: {e}")))?;
    // Every handler is in place now: the children's dispositions are worked out from these.
    spawn::Dispositions::refresh();
    let planned_segments = plan
        .processes
        .iter()
        .filter_map(|p| Some((p.name.clone(), p.segment_probe()?.size_bytes?)))
        .collect();
    let unit_roles = plan
        .processes
        .iter()
        .filter(|p| !p.roles.is_empty())
        .map(|p| (p.name.clone(), roles_of(&p.roles)))
        .collect();
    let mut rt = Runtime {
        machine,
        plan,
        drain,
        clock,
        events,
        writer,
        stall_said: None,
        reading_job: false,
        status_version: None,
        heartbeat_due: Instant::now() + HEARTBEAT,
        here: crate::runfiles::where_am_i(),
        status_due: None,
        tx,
        console,
        matchers,
        leaders: HashSet::new(),
        exec_probes: HashMap::new(),
        steps: HashMap::new(),
        helpers: HashMap::new(),
        watched: HashSet::new(),
        readers: Vec::new(),
        readers_prune_at: MIN_READERS_PRUNE,
        file_size_reported: false,
        masters: remount::MasterWatch::default(),
        stores: stores::StoreWatch::default(),
        exceptions: diagnose::Exceptions::default(),
        probing: HashMap::new(),
        mooncake: None,
        master_poller: None,
        planned_segments,
        unit_roles,
        capacity_said: None,
        short_looks: 0,
        sigkilled: Vec::new(),
        teardown_started: None,
        servable: None,
        servable_watch: None,
        last_seen: None,
        losses: BTreeMap::new(),
        gpu_baseline: None,
        control: control::ControlState::default(),
    };
    rt.start_control()?;
    rt.read_gpu_baseline().await;
    tracing::info!(node = %node, processes = rt.plan.processes.len(), gates = rt.plan.gates.len(), "mcsup starting");
    if !rt.plan.shutdown.holds_ranks_of.is_empty() {
        tracing::info!(
            "this node holds ranks of {}: it stays up until told to stop",
            rt.plan.shutdown.holds_ranks_of.join(", ")
        );
    }
    rt.reap(); // anything inherited that already exited
    rt.feed(Event::Start);
    // Coalesced like every later change: the first processes are starting now, and rendering the
    // status and metrics competes with them for the CPU (the file follows within STATUS_DELAY).
    rt.write_status_soon();
    let mut timer = DeadlineTimer::new().map_err(|e| SupervisorError::Io {
        path: PathBuf::from("timerfd"),
        source: e,
    })?;
    while rt.machine.phase() != Phase::Done {
        let deadline = [
            rt.machine.next_deadline(),
            rt.status_due,
            Some(rt.heartbeat_due),
        ]
        .into_iter()
        .flatten()
        .min();
        let recheck = !rt.watched.is_empty();
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
            // The wake-up that started the teardown: the metrics' teardown duration starts here.
            rt.teardown_started.get_or_insert_with(Instant::now);
            rt.say_bye();
            // The endpoint is going away on purpose: no more reads, no loss to report.
            if let Some(w) = rt.servable_watch.take() {
                w.abort();
            }
        }
        // Not per event, nor per wake-up: a teardown of 16 children is dozens of events.
        rt.write_status_soon();
        rt.watch_writer();
    }
    rt.finish(&mut sigchld, &mut rx).await
}

/// The Slurm job the steps belong to: the live job's (a plan file can come from anywhere), else
/// the plan's.
fn job_of(plan: &Plan) -> Option<String> {
    std::env::var("SLURM_JOB_ID")
        .ok()
        .filter(|j| !j.is_empty())
        .or_else(|| plan.node.job_id.clone())
}

/// Cancel what an earlier mcsup of this node left of the plan's Slurm steps (`steps`).
fn stale_steps(plan: &Plan) -> Vec<String> {
    let names: Vec<String> = plan
        .processes
        .iter()
        .filter_map(|p| Some(p.slurm_step.as_ref()?.name.clone()))
        .collect();
    match job_of(plan) {
        Some(job) if !names.is_empty() => steps::cancel_stale(&job, &names),
        _ => Vec::new(),
    }
}

/// Make the run's directories and files, before anything starts: the log directory claimed
/// (and locked), the scratch directory, the plan's files, the events file rotated; then the
/// writer thread that owns them from here on.
fn prepare_run_dir(
    plan: &Plan,
    tx: &UnboundedSender<Msg>,
) -> Result<(logs::RunWriter, Option<logs::ScratchDir>), SupervisorError> {
    let log_dir = plan.log_dir.clone();
    let node = plan.node.name.clone();
    // Held until `run` returns: one mcsup per log directory and node (see `logs`).
    let log_dir_lock = logs::claim_log_dir(plan)?;
    std::fs::create_dir_all(&log_dir).map_err(|e| SupervisorError::io(&log_dir, e))?;
    let scratch = plan
        .scratch_dir
        .as_deref()
        .map(logs::ScratchDir::claim)
        .transpose()?;
    for f in &plan.files {
        if let Some(parent) = f.path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| SupervisorError::io(parent, e))?;
        }
        status::write_private_atomic(&f.path, f.contents.as_bytes())?;
    }
    for d in &plan.dirs {
        std::fs::create_dir_all(d).map_err(|e| SupervisorError::io(d, e))?;
    }
    let ev_path = crate::runfiles::events_path(&log_dir, &node);
    logs::rotate(&ev_path, logs::KEEP_ROTATED).map_err(|e| SupervisorError::io(&ev_path, e))?;
    let ev_file = status::open_events(&ev_path).map_err(|e| SupervisorError::io(&ev_path, e))?;
    let news_tx = tx.clone();
    let writer = logs::RunWriter::start(
        log_dir_lock,
        ev_file,
        logs::RunFiles {
            events: ev_path,
            status: crate::runfiles::status_path(&log_dir, &node),
            metrics: crate::runfiles::metrics_path(&log_dir, &node),
        },
        Box::new(move |news| {
            let _ = news_tx.send(Msg::Writer(news));
        }),
    )
    .map_err(|e| SupervisorError::Setup(format!("cannot start the log writer thread: {e}")))?;
    Ok((writer, scratch))
}

fn compile_matchers(plan: &Plan) -> Result<Vec<Vec<(usize, Regex)>>, SupervisorError> {
    plan.processes
        .iter()
        .map(|p| {
            let Some(r) = &p.readiness else { return Ok(Vec::new()) };
            r.probes
                .iter()
                .enumerate()
                .filter_map(|(i, probe)| match probe {
                    ProbeSpec::LogLine { pattern } => Some(Regex::new(pattern).map(|re| (i, re)).map_err(|e| {
                        SupervisorError::Setup(format!(
                            "process `{}`: log-line probe pattern {pattern:?} is not a valid regex: {e}",
                            p.name
                        ))
                    })),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

impl Runtime {
    /// Hand an event to the machine and carry out what it decides (which may produce further
    /// events at once, e.g. `Spawned`).
    fn feed(&mut self, event: Event) {
        let mut queue = VecDeque::from([event]);
        while let Some(ev) = queue.pop_front() {
            let now = Instant::now();
            if let Event::ProbeDone { attempt, .. } | Event::ProbeFailed { attempt, .. } = &ev {
                if let Some((proc, since)) = self.probing.remove(attempt) {
                    if matches!(ev, Event::ProbeDone { ok: true, .. }) {
                        self.exceptions.outlived(proc, since);
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
                self.watched.insert(pgid);
                if !spawn::signal_group(pgid, None).unwrap_or(false) {
                    self.watched.remove(&pgid);
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
                if let Some(ev) = self.probe(attempt, unit, probe, timeout) {
                    queue.push_back(ev);
                }
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
            Action::AwaitRelease {
                attempt,
                pgid,
                gpus,
                within,
            } => {
                let baseline = self
                    .gpu_baseline
                    .clone()
                    .unwrap_or_else(|| Err("not read before the run".into()));
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let result = release::wait(pgid, gpus, baseline, within).await;
                    let _ = tx.send(Msg::Released { attempt, result });
                });
            }
            Action::Record(mut r) => {
                if r.kind == RecordKind::Ready {
                    self.after_ready(&r.unit);
                    self.rank_ready(&r.unit);
                }
                let servable = r.kind == RecordKind::Ready;
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
                    if let Some(what) =
                        spawn::describe_unstopped(pid, stop.map(|p| p.stop.signal.0))
                    {
                        r.detail = Some(match r.detail.take() {
                            Some(d) => format!("{d}; {what}"),
                            None => what,
                        });
                    }
                }
                self.events.write(&r, now, &self.clock);
                if matches!(
                    r.kind,
                    RecordKind::Failed | RecordKind::Restarting | RecordKind::LivenessFailed
                ) {
                    let proc = self.plan.processes.iter().position(|p| p.name == r.unit);
                    if let Some(f) = proc.and_then(|i| self.exceptions.failed(i).map(|f| (i, f))) {
                        self.diagnosis(f.0, f.1);
                    }
                }
                let code = r.status.map(|s| s.code());
                match r.kind {
                    RecordKind::Failed | RecordKind::Killing | RecordKind::GpuReleaseLate => {
                        tracing::warn!(process = %r.unit, pid = r.pid, exit_code = code, detail = r.detail.as_deref(), "{}", r.kind.as_str())
                    }
                    _ => {
                        tracing::info!(process = %r.unit, pid = r.pid, exit_code = code, detail = r.detail.as_deref(), "{}", r.kind.as_str())
                    }
                }
                if servable {
                    self.on_servable(&r.unit);
                }
            }
        }
    }

    fn spawn(&mut self, proc: usize, generation: u64) -> Event {
        let spec = &self.plan.processes[proc];
        let path = logs::log_path(&self.plan.log_dir, &self.plan.node.name, &spec.name);
        let tx = self.tx.clone();
        let report: logs::LossReport = std::sync::Arc::new(move |loss| {
            let _ = tx.send(Msg::LogLoss(loss));
        });
        // Opened by the writer thread: a stalled log directory does not hold the spawn back.
        let file = self.writer.open_log(path, &spec.name, report);
        let spawned = match spawn::spawn_process(spec, self.drain) {
            Ok(s) => s,
            Err(e) => {
                let argv0 = spawn::effective_argv(spec)
                    .into_iter()
                    .next()
                    .unwrap_or_default();
                return Event::SpawnFailed {
                    proc,
                    error: spawn::failure_text(&argv0, &e),
                };
            }
        };
        let pid = spawned.pid;
        signals::register_group(pid);
        self.leaders.insert(pid);
        match &spec.slurm_step {
            Some(step) => self.steps.insert(pid, step.name.clone()),
            None => self.steps.remove(&pid),
        };
        let name = spec.name.clone();
        let tap = (spec.kind == ProcessKind::Master).then(|| self.masters.tap(proc));
        self.exceptions.spawned(proc, generation);
        // Stores are always watched: their readiness needs what they print.
        let watch = (diagnose::enabled() || spec.kind == ProcessKind::Store).then(|| {
            let tx = self.tx.clone();
            self.stores.watch(
                proc,
                spec.kind,
                Box::new(move |found| {
                    let _ = tx.send(Msg::Diagnosis {
                        proc,
                        generation,
                        found,
                    });
                }),
            )
        });
        match tokio::net::unix::pipe::Receiver::from_owned_fd(spawned.output) {
            Ok(rx) => {
                let tx = self.tx.clone();
                let cfg = PumpConfig {
                    prefix: format!("{name} | "),
                    console: self.console.handle(),
                    matchers: self.matchers[proc].clone(),
                    on_match: Box::new(move |probe| {
                        let _ = tx.send(Msg::LogMatched {
                            proc,
                            generation,
                            probe,
                        });
                    }),
                    tap,
                    watch,
                    console_filter: (spec.kind == ProcessKind::Master).then(master_console),
                    fatal: self.fatal_watch(proc, generation),
                };
                self.readers.push(tokio::spawn(logs::pump(rx, file, cfg)));
            }
            // The pipe is dropped: the child gets EPIPE/SIGPIPE on output; it is still supervised.
            Err(e) => {
                tracing::warn!(process = %name, error = %e, "cannot read the output pipe")
            }
        }
        if self.readers.len() >= self.readers_prune_at {
            self.readers.retain(|h| !h.is_finished());
            self.readers_prune_at = (2 * self.readers.len()).max(MIN_READERS_PRUNE);
        }
        Event::Spawned { proc, pid }
    }

    fn probe(
        &mut self,
        attempt: u64,
        unit: UnitRef,
        probe: ProbeSpec,
        timeout: Duration,
    ) -> Option<Event> {
        let tx = self.tx.clone();
        let send = move |result| {
            let _ = tx.send(Msg::Probe { attempt, result });
        };
        match probe {
            ProbeSpec::Tcp { host, port } => {
                tokio::spawn(async move { send(probes::tcp(host, port, timeout).await) });
            }
            ProbeSpec::Http {
                host,
                port,
                path,
                status,
                body_contains,
            } => {
                tokio::spawn(async move {
                    send(probes::http(host, port, path, status, body_contains, timeout).await)
                });
            }
            ProbeSpec::File { path } => {
                tokio::spawn(async move { send(probes::file(path, timeout).await) });
            }
            ProbeSpec::Exec { argv } => match spawn::spawn_probe(&argv, self.drain) {
                Ok(pid) => {
                    signals::register_group(pid);
                    self.exec_probes.insert(pid, attempt);
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(timeout).await;
                        let _ = tx.send(Msg::ExecTimeout { attempt, pid });
                    });
                }
                Err(e) => {
                    let detail = format!(
                        "exec {}: {e}",
                        argv.first().map(String::as_str).unwrap_or("")
                    );
                    return Some(Event::ProbeDone {
                        attempt,
                        ok: false,
                        detail,
                    });
                }
            },
            ProbeSpec::Servable(p) => {
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let result = probes::servable(p, timeout).await;
                    let _ = tx.send(Msg::Servable { attempt, result });
                });
            }
            ProbeSpec::MooncakeSegment(p) => {
                let printed = match unit {
                    UnitRef::Proc(i) => self.stores.printed(i),
                    UnitRef::Gate(_) => stores::Printed::default(),
                };
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let verdict = stores::segment(p, printed, timeout).await;
                    let _ = tx.send(Msg::Segment { attempt, verdict });
                });
            }
            ProbeSpec::MooncakeHealth { host, port } => {
                let UnitRef::Proc(proc) = unit else {
                    return Some(Event::ProbeDone {
                        attempt,
                        ok: false,
                        detail: "a store's /health is not a gate".into(),
                    });
                };
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    let answer = stores::health(host, port, timeout).await;
                    let _ = tx.send(Msg::Health {
                        attempt,
                        proc,
                        port,
                        answer,
                    });
                });
            }
            ProbeSpec::LogLine { .. } => {} // matched by the log reader, never polled
        }
        None
    }

    /// A look at the master: kept for the status and metrics files, and the job's capacity
    /// checked against the stores' planned segments (each node's status file lists its stores).
    fn on_master_view(&mut self, look: Result<crate::mooncake::remount::Look, String>) {
        let ts_ms = self.clock.wall_ms(Instant::now());
        let view = match look {
            Ok(l) => crate::runfiles::MooncakeView {
                ts_ms,
                capacity_bytes: l.capacity.unwrap_or(0),
                allocated_bytes: l.allocated.unwrap_or(0),
                keys: l.keys.unwrap_or(0),
                clients: l.clients.unwrap_or(0),
                segments: l.segments.len() as u64,
                segment_capacity: l.segment_capacity,
                error: None,
            },
            Err(e) => crate::runfiles::MooncakeView {
                ts_ms,
                error: Some(e),
                ..self.mooncake.clone().unwrap_or_default()
            },
        };
        let (fresh, capacity) = (view.error.is_none(), view.capacity_bytes);
        self.mooncake = Some(view);
        self.status_version = None; // rewrite the status and metrics files
        if !fresh {
            return;
        }
        if self.reading_job {
            return; // the last read has not come back (a slow file system): skip this look
        }
        self.reading_job = true;
        let (dir, tx) = (self.plan.log_dir.clone(), self.tx.clone());
        tokio::task::spawn_blocking(move || {
            let stores = match status::read_job(&dir) {
                Ok((nodes, _)) => nodes
                    .iter()
                    .map(|(_, r)| r.status.store_segments())
                    .collect(),
                Err(_) => Vec::new(),
            };
            let _ = tx.send(Msg::JobStores(stores, capacity));
        });
    }

    /// The job's stores (from every node's status file) against the master's capacity.
    fn on_job_stores(&mut self, stores: &[Vec<(bool, u64)>], capacity: u64) {
        let c = crate::mooncake::segments::Capacity::of(capacity, stores);
        if c.ready < c.stores || c.stores == 0 {
            return; // said once every store is ready
        }
        let whole = c.whole();
        self.short_looks = if whole { 0 } else { self.short_looks + 1 };
        // A short look is said when it lasts (two looks: a master restart's remount takes
        // about a second), a whole one at once; each only when it changes.
        if (whole || self.short_looks >= 2) && self.capacity_said != Some(whole) {
            self.capacity_said = Some(whole);
            let unit = self
                .plan
                .processes
                .iter()
                .find(|p| p.kind == ProcessKind::Master)
                .map_or("mcsup".to_string(), |p| p.name.clone());
            self.note(&unit, RecordKind::Capacity, c.text());
        }
    }

    /// A process whose readiness is a servable probe became ready: the job is servable. Say so
    /// once per readiness, and watch what the frontend sees from now on.
    fn on_servable(&mut self, unit: &str) {
        let Some(probe) = self
            .plan
            .processes
            .iter()
            .find(|p| p.name == unit)
            .and_then(|p| p.readiness.as_ref())
            .and_then(|r| {
                r.probes.iter().find_map(|p| match p {
                    ProbeSpec::Servable(s) => Some(s.clone()),
                    _ => None,
                })
            })
        else {
            return;
        };
        let now = Instant::now();
        let seen = self.last_seen.unwrap_or(Seen {
            prefill: probe.expected.prefill,
            decode: probe.expected.decode,
        });
        let ts = self.clock.wall_ms(now);
        let first = self.servable.as_ref().map_or(ts, |s| s.servable_ts_ms);
        let detail = format!(
            "{}: {}, a 1-token completion answered; {:.1} s after mcsup started",
            probe.url,
            servable::describe(&probe.expected, &seen),
            self.clock.since_start_ms(now) / 1000.0
        );
        self.servable = Some(ServableStatus {
            url: probe.url.clone(),
            frontend: unit.to_string(),
            state: ServableState::Servable,
            servable_ts_ms: first,
            since_ts_ms: ts,
            expected: probe.expected,
            seen,
            error: None,
        });
        self.note(unit, RecordKind::Servable, detail);
        if let Some(w) = self.servable_watch.take() {
            w.abort();
        }
        let out = self.tx.clone();
        self.servable_watch = Some(tokio::spawn(servable::watch(probe, move |read| {
            out.send(Msg::Seen(read)).is_ok()
        })));
    }

    /// A later health read: a change of state or count is an event and a new status.
    fn on_seen(&mut self, read: Result<Seen, String>) {
        if self.servable_watch.is_none() {
            return;
        }
        let Some(cur) = self.servable.clone() else {
            return;
        };
        let state = servable::judge(&cur.expected, &read);
        let seen = read.as_ref().copied().unwrap_or(Seen {
            prefill: 0,
            decode: 0,
        });
        if state == cur.state && seen == cur.seen {
            return;
        }
        let now = Instant::now();
        // An event when the endpoint loses or regains workers; more than expected (a restarted
        // worker listed before its old registration expires) only updates the status.
        let kind = match (cur.state, state) {
            (ServableState::Servable, ServableState::Servable) => None,
            (_, ServableState::Servable) => Some(RecordKind::WorkersBack),
            _ => Some(RecordKind::WorkersLost),
        };
        let frontend = cur.frontend.clone();
        let detail = match &read {
            Ok(_) => format!("{}: {}", cur.url, servable::describe(&cur.expected, &seen)),
            Err(e) => format!("{}: the frontend does not answer: {e}", cur.url),
        };
        self.servable = Some(ServableStatus {
            state,
            seen,
            since_ts_ms: self.clock.wall_ms(now),
            error: read.err(),
            ..cur
        });
        if let Some(kind) = kind {
            self.note(&frontend, kind, detail);
        }
        // Not a machine change: write the status now.
        self.status_version = None;
        self.write_status(None);
    }

    /// A log file lost output: count it for the status file; the first loss of a run of the
    /// process and the total at its end are events, and news for the status file at once.
    fn on_log_loss(&mut self, loss: logs::LogLoss) {
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
        let counted = self.losses.entry(process.clone()).or_default();
        if when != logs::LossWhen::End {
            counted.bytes += bytes;
            counted.lines += lines;
        }
        counted.error = error;
        if let Some(detail) = detail {
            self.note(&process, RecordKind::OutputLost, detail);
            self.status_version = None;
            self.write_status(None);
        }
    }

    /// Before anything starts: the memory in use on the GPUs of the processes that may restart
    /// (a restart waits for it to come back, `release`).
    async fn read_gpu_baseline(&mut self) {
        let gpus: std::collections::BTreeSet<u32> = self
            .plan
            .processes
            .iter()
            .filter(|p| {
                p.restart.policy != crate::plan::RestartPolicy::Never
                    && !p.restart.release_wait.is_zero()
            })
            .flat_map(|p| p.gpus().iter().copied())
            .collect();
        if gpus.is_empty() {
            return;
        }
        let read = release::baseline(&gpus).await;
        match &read {
            Ok(b) => tracing::debug!(?b, "GPU memory in use before the run"),
            Err(why) => tracing::info!(
                "GPU memory before the run not read ({why}): a restart on GPUs waits for its process group only"
            ),
        }
        self.gpu_baseline = Some(read);
    }

    /// `killpg(pgid, signal)`; for a Slurm step's srun, the signal goes to the step's tasks on
    /// every node instead (`steps`): SIGCONT is left to Slurm, SIGKILL cancels the step and
    /// kills srun too.
    fn signal(&mut self, pgid: Pid, signal: Signal) {
        let step = self.steps.get(&pgid).cloned();
        let job = job_of(&self.plan);
        let (Some(name), Some(job)) = (step, job) else {
            if let Err(e) = spawn::signal_group(pgid, Some(signal)) {
                tracing::warn!(pgid, signal = signal.as_str(), error = %e, "kill failed");
            }
            return;
        };
        if signal == Signal::SIGCONT {
            return;
        }
        let what = format!("{} of Slurm step {name} (job {job})", signal.as_str());
        match spawn::spawn_probe(&steps::scancel_argv(&job, &name, signal), self.drain) {
            Ok(pid) => {
                tracing::info!(pid, "{what}: scancel");
                signals::register_group(pid);
                self.helpers.insert(pid, format!("scancel: {what}"));
                let tx = self.tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(HELPER_BOUND).await;
                    let _ = tx.send(Msg::HelperTimeout { pid });
                });
            }
            Err(e) => {
                // No scancel: the signal reaches srun, which SIGKILLs the tasks (no grace).
                tracing::warn!(error = %e, "cannot run scancel for {what}: signalling srun");
                let _ = spawn::signal_group(pgid, Some(signal));
            }
        }
        if signal == Signal::SIGKILL {
            let _ = spawn::signal_group(pgid, Some(Signal::SIGKILL));
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
            | RecordKind::MasterUnreachable => {
                tracing::warn!(process = %r.unit, detail = r.detail.as_deref(), "{}", kind.as_str())
            }
            _ => {
                tracing::info!(process = %r.unit, detail = r.detail.as_deref(), "{}", kind.as_str())
            }
        }
    }

    /// The fatal log patterns of process `proc`'s incarnation `generation`, as a watch that
    /// tells the machine of the first line matching one.
    fn fatal_watch(&self, proc: usize, generation: u64) -> Option<logs::FatalWatch> {
        let spec = &self.plan.processes[proc];
        let tx = self.tx.clone();
        let on_match = Box::new(move |pattern: &str, line: &[u8]| {
            let line = crate::domain::signature::shown_line(line, SHOWN_CHARS);
            let _ = tx.send(Msg::FatalLine {
                proc,
                generation,
                detail: format!("a fatal log line (pattern `{pattern}` of health_check.extra_fatal_log_patterns): {line}"),
            });
        });
        match logs::FatalWatch::new(&spec.fatal_log_patterns, on_match) {
            Ok(w) => w,
            Err(e) => {
                // The planner checked them; a plan file written by hand may not have been.
                tracing::warn!(process = %spec.name, error = %e, "its fatal log patterns do not compile: not watched");
                None
            }
        }
    }

    /// Write a `diagnosis` event for process `proc`.
    fn diagnosis(&mut self, proc: usize, found: diagnose::Found) {
        let unit = self.plan.processes[proc].name.clone();
        self.note_with(
            &unit,
            RecordKind::Diagnosis,
            found.detail(),
            Some(found.record()),
        );
    }

    /// A master that becomes ready for the second time or later was restarted: verify, in the
    /// background, that this node's stores registered with it again.
    fn after_ready(&mut self, unit: &str) {
        let Some(i) = self
            .plan
            .processes
            .iter()
            .position(|p| p.name == unit && p.kind == ProcessKind::Master)
        else {
            return;
        };
        if self.master_poller.is_none() {
            if let Some(port) =
                crate::mooncake::remount::master_metrics_port(&self.plan.processes[i].argv)
            {
                let tx = self.tx.clone();
                self.master_poller = Some(tokio::spawn(async move {
                    loop {
                        let look =
                            remount::look("127.0.0.1".into(), port, Duration::from_secs(2)).await;
                        if tx.send(Msg::MasterView(look)).is_err() {
                            return;
                        }
                        tokio::time::sleep(stores::MASTER_LOOK_EVERY).await;
                    }
                }));
            }
        }
        let Some(target) = self.masters.on_ready(&self.plan, i) else {
            return;
        };
        let tx = self.tx.clone();
        let master = unit.to_string();
        tokio::spawn(async move {
            let (ok, detail) = remount::verify(target, remount::REMOUNT_WITHIN).await;
            let _ = tx.send(Msg::Remount { master, ok, detail });
        });
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
            Msg::Released { attempt, result } => self.feed(Event::Released { attempt, result }),
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
            Msg::Remount { master, ok, detail } => {
                let r = Record {
                    unit: master,
                    kind: if ok {
                        RecordKind::Remounted
                    } else {
                        RecordKind::RemountLate
                    },
                    pid: None,
                    status: None,
                    detail: Some(detail),
                };
                self.events.write(&r, Instant::now(), &self.clock);
                if ok {
                    tracing::info!(process = %r.unit, detail = r.detail.as_deref(), "remounted");
                } else {
                    tracing::warn!(process = %r.unit, detail = r.detail.as_deref(), "remount-late");
                }
            }
            Msg::Servable { attempt, result } => {
                if let Ok(seen) = &result {
                    self.last_seen = Some(*seen);
                }
                self.feed(Event::ProbeDone {
                    attempt,
                    ok: result.is_ok(),
                    detail: result.err().unwrap_or_default(),
                });
            }
            Msg::Segment { attempt, verdict } => {
                use crate::mooncake::segments::Verdict;
                self.feed(match verdict {
                    Verdict::Registered(detail) => Event::ProbeDone {
                        attempt,
                        ok: true,
                        detail,
                    },
                    Verdict::NotYet(detail) => Event::ProbeDone {
                        attempt,
                        ok: false,
                        detail,
                    },
                    Verdict::Mismatch(detail) => Event::ProbeFailed { attempt, detail },
                });
            }
            Msg::Health {
                attempt,
                proc,
                port,
                answer,
            } => {
                let o = self.stores.on_health(proc, port, answer);
                if let Some((kind, detail)) = o.event {
                    let unit = self.plan.processes[proc].name.clone();
                    self.note(&unit, kind, detail);
                }
                self.feed(Event::ProbeDone {
                    attempt,
                    ok: o.ok,
                    detail: o.detail,
                });
            }
            Msg::FatalLine {
                proc,
                generation,
                detail,
            } => self.feed(Event::FatalLine {
                proc,
                generation,
                detail,
            }),
            Msg::Diagnosis {
                proc,
                generation,
                found,
            } => {
                if let Some(f) = self
                    .exceptions
                    .found(proc, generation, found, Instant::now())
                {
                    self.diagnosis(proc, f);
                }
            }
            Msg::MasterView(look) => self.on_master_view(look),
            Msg::Control(i) => self.on_control(i),
            Msg::Seen(read) => self.on_seen(read),
            Msg::LogLoss(loss) => self.on_log_loss(loss),
            Msg::Writer(logs::News::LogDirRecreated(dir)) => self.note(
                "mcsup",
                RecordKind::LogDirRecreated,
                format!(
                    "{} was removed while mcsup ran; recreated (mode 0700)",
                    dir.display()
                ),
            ),
            Msg::JobStores(stores, capacity) => {
                self.reading_job = false;
                self.on_job_stores(&stores, capacity);
            }
            Msg::HelperTimeout { pid } => {
                if let Some(what) = self.helpers.remove(&pid) {
                    tracing::warn!(
                        pid,
                        "{what} did not finish within {}: killed",
                        crate::domain::show_secs(HELPER_BOUND)
                    );
                    let _ = spawn::signal_group(pid, Some(Signal::SIGKILL));
                    signals::unregister_group(pid);
                }
            }
            Msg::ExecTimeout { attempt, pid } => {
                if self.exec_probes.get(&pid) == Some(&attempt) {
                    self.exec_probes.remove(&pid);
                    // Still our unreaped child: its pid (= pgid) cannot have been reused.
                    let _ = spawn::signal_group(pid, Some(Signal::SIGKILL));
                    signals::unregister_group(pid);
                    self.feed(Event::ProbeDone {
                        attempt,
                        ok: false,
                        detail: "exec probe timed out".into(),
                    });
                }
            }
        }
    }

    /// Reap every exited child (several exits coalesce into one SIGCHLD) and route each status.
    fn reap(&mut self) {
        let mut evs = Vec::new();
        loop {
            let (pid, status) =
                match waitpid(nix::unistd::Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::Exited(pid, code)) => (pid.as_raw(), ExitStatus::Code(code)),
                    Ok(WaitStatus::Signaled(pid, sig, _)) => {
                        (pid.as_raw(), ExitStatus::Signal(sig as i32))
                    }
                    Ok(WaitStatus::StillAlive) => break,
                    Ok(_) => continue,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => break, // ECHILD: no children at all
                };
            if let Some(what) = self.helpers.remove(&pid) {
                signals::unregister_group(pid);
                match status {
                    ExitStatus::Code(0) => tracing::debug!(pid, "{what}: done"),
                    ExitStatus::Code(steps::NO_SUCH_STEP) => {
                        tracing::debug!(pid, "{what}: the step is gone already")
                    }
                    _ => tracing::warn!(pid, %status, "{what} failed"),
                }
            } else if let Some(attempt) = self.exec_probes.remove(&pid) {
                signals::unregister_group(pid);
                let ok = status == ExitStatus::Code(0);
                let detail = if ok {
                    String::new()
                } else {
                    format!("exec probe: {status}")
                };
                evs.push(Event::ProbeDone {
                    attempt,
                    ok,
                    detail,
                });
            } else if self.leaders.remove(&pid) {
                // Watch the group even if the machine does not: the backstop's table must drop
                // the pgid once the group is gone (its number may be reused after that).
                self.watched.insert(pid);
                // A death by a stop signal is held back by the machine (SIGNAL_DEATH_SETTLE).
                evs.push(Event::Exited { pid, status });
            } else {
                tracing::debug!(pid, %status, "reaped an orphaned descendant");
            }
        }
        for ev in evs {
            self.feed(ev);
        }
        self.check_groups();
    }

    fn check_groups(&mut self) {
        let gone: Vec<Pid> = self
            .watched
            .iter()
            .copied()
            .filter(|&g| {
                !self.leaders.contains(&g) && !spawn::signal_group(g, None).unwrap_or(false)
            })
            .collect();
        for g in gone {
            self.watched.remove(&g);
            signals::unregister_group(g);
            self.feed(Event::GroupEmpty { pgid: g });
        }
    }

    /// Write the status once [`STATUS_DELAY`] has passed since the first change not written yet.
    fn write_status_soon(&mut self) {
        let now = Instant::now();
        if now >= self.heartbeat_due {
            self.status_version = None; // the same status, a fresh timestamp
        }
        if self.status_version == Some(self.machine.version()) {
            return;
        }
        if now >= *self.status_due.get_or_insert(now + STATUS_DELAY) {
            self.status_due = None;
            self.write_status(None);
        }
    }

    fn write_status(&mut self, final_code: Option<i32>) {
        let v = self.machine.version();
        if final_code.is_none() && self.status_version == Some(v) {
            return;
        }
        self.status_version = Some(v);
        let now = Instant::now();
        self.heartbeat_due = now + HEARTBEAT;
        let status = StatusFile {
            node: self.plan.node.name.clone(),
            roles: roles_of(&self.plan.roles),
            mcsup_pid: std::process::id(),
            host: self.here.0.clone(),
            pid_ns: self.here.1.clone(),
            phase: self.machine.phase().into(),
            started_ts_ms: self.clock.wall_ms(self.clock.start()),
            updated_ts_ms: self.clock.wall_ms(now),
            heartbeat_ms: HEARTBEAT.as_millis() as u64,
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
                    unit.output_lost = self.losses.get(&unit.name).cloned();
                    unit.segment_bytes = self.planned_segments.get(&unit.name).copied();
                    unit.roles = self.unit_roles.get(&unit.name).cloned().unwrap_or_default();
                    unit
                })
                .collect(),
            servable: self.servable.clone(),
            mooncake: self.mooncake.clone(),
            control: self.control_status(),
        };
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

    /// Say once when the writer has been stuck on one write for [`STALL_SAID`] (a hung log
    /// directory: supervision goes on, what does not fit in its queue is dropped and counted),
    /// and when it moves again.
    fn watch_writer(&mut self) {
        let stalled = self.writer.stalled_for();
        match self.stall_said {
            None if stalled >= STALL_SAID => {
                self.stall_said = Some(stalled);
                tracing::warn!(
                    log_dir = %self.plan.log_dir.display(),
                    seconds = stalled.as_secs(),
                    "the log directory has not taken a write for {} s (a hung file system?): supervision goes on; log output and events that do not fit in the queue are dropped and counted",
                    stalled.as_secs()
                );
            }
            Some(_) if stalled < STALL_SAID => {
                self.stall_said = None;
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

/// Roles as the status file names them.
fn roles_of(roles: &[crate::domain::Role]) -> Vec<String> {
    roles.iter().map(|r| r.as_str().to_string()).collect()
}

/// The master's console: its periodic report (a ~2.5 KB line every 10 s) as a one-line summary,
/// shown only when it changed; everything else as it is. The log file keeps every report whole.
fn master_console() -> logs::ConsoleFilter {
    let mut last: Option<String> = None;
    Box::new(
        move |line| match crate::mooncake::remount::report_summary(line) {
            None => logs::ConsoleLine::AsIs,
            Some(s) if last.as_ref() == Some(&s) => logs::ConsoleLine::Skip,
            Some(s) => {
                last = Some(s.clone());
                logs::ConsoleLine::Instead(s)
            }
        },
    )
}
