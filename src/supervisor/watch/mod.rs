//! Watchers: what the supervisor does beyond starting, probing, restarting and stopping the
//! plan's processes. Each is a pure component, [`Watcher::on`]`(input, now) -> effects`, asked
//! for by the machine with explicit requests ([`WatchRequest`]) and tested like the machine: by
//! feeding it inputs and reading its effects. What a watcher needs done in the world (a read of
//! the frontend, a look at the master, a wait for the GPUs) is a [`Task`] the runtime runs off the
//! loop; its [`Answer`] comes back as an input.
//!
//! | watcher | asked by | does |
//! |---|---|---|
//! | [`servable`] | `WatchRequest::Servable`; the servable probe's attempts | says when the job is servable, then reads what its frontend lists every 2 s (`workers-lost`, `workers-back`) |
//! | [`mooncake`] | `WatchRequest::Master`; the master's output | reads the master's view every 5 s (status, metrics, the job's capacity against its stores); after a master restart, verifies the stores registered again |
//! | [`stores`] | the stores' registration and `/health` probes; every process's output | a store's segment as the master holds it; its client's view of the master; Mooncake's and the engines' failure lines |
//! | [`diagnosis`] | `WatchRequest::Diagnose`; failure lines in the output | what a process died of (the last traceback's exception) |
//! | [`release`] | `Action::AwaitRelease` | a restart's wait for its GPUs (against their memory before the run) |
//! | [`benchmark`] | `WatchRequest::Judge` | the result gate: a benchmark that exited 0 measured something (its result files) |
//! | [`stacks`] | `WatchRequest::Dump` | a process that stopped answering: its threads' states and Python stacks (py-spy) into the log directory before its stop |
//! | [`canary`] | `WatchRequest::Servable` | a 1-token completion through the endpoint every 30 s (`canary-failed`, `canary-ok`) |
//!
//! Adding one: a module here with its watcher (and its tasks' async reads), and one line in
//! `runtime/watchers.rs`'s `registry`. Watchers do no I/O in [`Watcher::on`]; they must not
//! block the loop.

pub mod benchmark;
pub mod canary;
pub mod diagnosis;
pub mod mooncake;
pub mod progress;
pub mod release;
pub mod servable;
pub mod stacks;
pub mod stores;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::frontend::Seen;
use crate::plan::{Plan, ProbeSpec, SegmentProbe, ServableProbe};
use crate::runfiles::{DiagnosisRecord, StatusFile};

use super::logs::{ConsoleFilter, LineTap, Watch};
use super::machine::{Event, Pid, RecordKind, WatchRequest};
use super::status::Clock;

/// What a watcher hears.
#[derive(Debug)]
pub enum Input<'a> {
    /// Process `proc`'s incarnation `generation` was spawned (its output hooks were asked for
    /// with [`Watcher::hooks`] just before).
    Spawned { proc: usize, generation: u64 },
    /// The machine asked (`Action::Watch`).
    Asked(WatchRequest),
    /// The machine asked for an attempt of a probe a watcher owns ([`owns`]): `proc` is `None`
    /// for a gate.
    Probe {
        attempt: u64,
        proc: Option<usize>,
        probe: &'a ProbeSpec,
        timeout: Duration,
    },
    /// A polled probe attempt of process `proc`, started at `since`, passed.
    Passed { proc: usize, since: Instant },
    /// The machine asked to wait for a process group's GPUs (`Action::AwaitRelease`).
    Release {
        attempt: u64,
        pgid: Pid,
        gpus: &'a [u32],
        within: Duration,
    },
    /// The answer of a task a watcher started.
    Answer(Answer),
    /// The teardown began: the job's endpoint goes away on purpose.
    Stopping,
}

/// What a watcher asks for.
#[derive(Debug)]
pub enum Effect {
    /// An event (written to the events file and mcsup's log).
    Note {
        unit: String,
        kind: RecordKind,
        detail: String,
        diagnosis: Option<DiagnosisRecord>,
    },
    /// An event for the machine.
    Feed(Event),
    /// Run `task` off the loop; what it finds comes back as [`Input::Answer`]. A keyed task
    /// replaces the running one of its key.
    Run { key: Option<TaskKey>, task: Task },
    /// End the running task of this key.
    Stop(TaskKey),
    /// The status file changed: rewritten with the next batch of changes.
    StatusChanged,
    /// The status file changed: rewritten now.
    StatusNow,
}

impl Effect {
    /// An event without a diagnosis.
    pub fn note(unit: impl Into<String>, kind: RecordKind, detail: impl Into<String>) -> Self {
        Effect::Note {
            unit: unit.into(),
            kind,
            detail: detail.into(),
            diagnosis: None,
        }
    }
}

/// The tasks that run until stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskKey {
    /// The reads of the servable frontend's health answer.
    FrontendWatch,
    /// The looks at the master's view.
    MasterLooks,
    /// The canary's requests through the endpoint.
    Canary,
}

/// Work a watcher needs done in the world, run by the runtime off the loop.
#[derive(Debug)]
pub enum Task {
    /// One attempt of the servable probe: [`Answer::Servable`].
    ServableProbe {
        attempt: u64,
        probe: ServableProbe,
        timeout: Duration,
    },
    /// Read the frontend's health answer every `every`: [`Answer::Seen`] each time.
    FrontendWatch {
        probe: ServableProbe,
        every: Duration,
    },
    /// A 1-token completion through the frontend every `every`: [`Answer::Canary`] each time.
    Canary {
        probe: ServableProbe,
        every: Duration,
        timeout: Duration,
    },
    /// Look at the master's admin server every `every`: [`Answer::MasterView`] each time.
    MasterLooks { port: u16, every: Duration },
    /// Verify that the stores registered with the restarted `master` again:
    /// [`Answer::Remount`].
    Remount {
        master: String,
        target: crate::mooncake::remount::Target,
    },
    /// Read the job's status files (the stores of every node): [`Answer::JobStores`].
    JobStores { dir: PathBuf, capacity: u64 },
    /// One look at the master for a store's segment: [`Answer::Segment`].
    Segment {
        attempt: u64,
        probe: SegmentProbe,
        printed: stores::Printed,
        timeout: Duration,
    },
    /// One attempt of an engine's liveness with its progress: [`Answer::EngineAlive`].
    EngineAlive {
        attempt: u64,
        proc: usize,
        probe: crate::plan::EngineAliveProbe,
        timeout: Duration,
    },
    /// One GET of a store's `/health`: [`Answer::Health`].
    StoreHealth {
        attempt: u64,
        proc: usize,
        host: String,
        port: u16,
        timeout: Duration,
    },
    /// Read and judge the result files a benchmark wrote under `dir` since `since_ms`:
    /// [`Answer::Judged`].
    Judge {
        proc: usize,
        dir: PathBuf,
        since_ms: u64,
        kind: String,
        max_failed: u64,
    },
    /// Dump the stacks of process group `pgid` (process `proc`) into `file`:
    /// [`Answer::Dumped`].
    Dump {
        proc: usize,
        pgid: crate::supervisor::machine::Pid,
        file: PathBuf,
    },
    /// Wait until group `pgid` is empty and its GPUs' memory is back: [`Answer::Released`].
    GpuRelease {
        attempt: u64,
        pgid: Pid,
        gpus: Vec<u32>,
        baseline: release::Baseline,
        within: Duration,
    },
}

/// What a task found (or a line watch on a process's output).
#[derive(Debug)]
pub enum Answer {
    Servable {
        attempt: u64,
        result: Result<Seen, String>,
    },
    Seen(Result<Seen, String>),
    /// One canary request: it generated a token, or why not.
    Canary(Result<(), String>),
    MasterView(Result<crate::mooncake::remount::Look, String>),
    Remount {
        master: String,
        ok: bool,
        detail: String,
    },
    JobStores {
        stores: Vec<Vec<(bool, u64)>>,
        capacity: u64,
    },
    Segment {
        attempt: u64,
        verdict: crate::mooncake::segments::Verdict,
    },
    Health {
        attempt: u64,
        proc: usize,
        port: u16,
        answer: stores::HealthAnswer,
    },
    /// An engine's health answer was 200 (else `Err`), and what its metrics page says: the
    /// requests in flight and its progress (`None` when the page does not answer).
    EngineAlive {
        attempt: u64,
        proc: usize,
        result: Result<Option<(u64, u64)>, String>,
    },
    Released {
        attempt: u64,
        result: Result<String, String>,
    },
    /// The result gate's verdict on terminal process `proc`.
    Judged {
        proc: usize,
        status: crate::runfiles::BenchmarkStatus,
    },
    /// The stacks of process `proc` are dumped: what the event says (the file, the top frames).
    Dumped {
        proc: usize,
        said: String,
    },
    /// A known failure line in the output of process `proc`'s incarnation `generation`.
    Found {
        proc: usize,
        generation: u64,
        found: diagnosis::Found,
    },
}

/// Where an answer from another thread or task goes (the loop's channel).
pub type Report = Arc<dyn Fn(Answer) + Send + Sync>;

/// The time a watcher is told: the loop's instant and the run's clock.
#[derive(Clone, Copy)]
pub struct Now<'a> {
    pub at: Instant,
    pub clock: &'a Clock,
}

impl Now<'_> {
    /// Milliseconds since the epoch at [`Now::at`].
    pub fn wall_ms(&self) -> u64 {
        self.clock.wall_ms(self.at)
    }
}

/// What a new incarnation's output feeds, besides its log file and the console.
#[derive(Default)]
pub struct Hooks {
    /// Sees every line.
    pub tap: Option<LineTap>,
    /// Sees the lines holding one of its needles.
    pub watch: Option<Watch>,
    /// What the console shows of a line.
    pub console: Option<ConsoleFilter>,
}

/// One watcher.
pub trait Watcher {
    /// React to one input: the effects, in order.
    fn on(&mut self, plan: &Plan, input: &Input<'_>, now: Now<'_>) -> Vec<Effect>;

    /// The output hooks of process `proc`'s new incarnation `generation`; answers found in its
    /// output go to `report`. Hooks already taken by an earlier watcher are not offered again.
    fn hooks(
        &mut self,
        _plan: &Plan,
        _proc: usize,
        _generation: u64,
        _report: &Report,
        _taken: &Hooks,
    ) -> Hooks {
        Hooks::default()
    }

    /// Its part of the status file.
    fn status(&self, _status: &mut StatusFile) {}
}

/// Whether a watcher answers this probe kind's attempts (the runtime runs the others).
pub fn owns(probe: &ProbeSpec) -> bool {
    matches!(
        probe,
        ProbeSpec::Servable(_)
            | ProbeSpec::MooncakeSegment(_)
            | ProbeSpec::MooncakeHealth { .. }
            | ProbeSpec::EngineAlive(_)
    )
}

/// A probe attempt's result as the machine takes it.
pub(crate) fn probe_done(attempt: u64, result: Result<(), String>) -> Effect {
    Effect::Feed(Event::ProbeDone {
        attempt,
        ok: result.is_ok(),
        detail: result.err().unwrap_or_default(),
    })
}

/// The GPUs of the processes that may restart and wait for them (their memory before the run is
/// read before anything starts).
pub fn restart_gpus(plan: &Plan) -> BTreeSet<u32> {
    plan.processes
        .iter()
        .filter(|p| {
            p.restart.policy != crate::plan::RestartPolicy::Never
                && !p.restart.release_wait.is_zero()
        })
        .flat_map(|p| p.gpus().iter().copied())
        .collect()
}

#[cfg(test)]
mod tests;
