//! The supervisor: runs a [`crate::plan::Plan`]'s processes in dependency order, gates each on
//! readiness, restarts per policy, and tears the node down in order.
//!
//! Layout (decisions apart from effects):
//! - [`machine`]: the pure state machine (`handle(event, now) -> actions`); no I/O at all.
//! - `runtime/`: the one loop on a current-thread tokio runtime that turns child exits, probe
//!   results, output lines, timers and signals into events and carries out the actions
//!   (`mod.rs`): reaper and spawner, probe executor, status writer and the watchers' dispatch
//!   table, one file each; the end of a run: orphan sweep, reader drain, final status
//!   (`finish.rs`).
//! - [`watch`]: the watchers, each a pure component the machine asks for with explicit requests
//!   (servable, Mooncake, stores, diagnosis, GPU release), with their async reads.
//! - `spawn`: fork/exec of children (process group, signal dispositions, PDEATHSIG, fds).
//! - `probes`: tcp/http/file probe attempts (exec probes are spawned through `spawn`).
//! - `logs/`: per-process log files with rotation, line splitting, the console mux, the log
//!   directory's safety (one file each: `mod.rs` the reader task, `lines`, `file`, `console`,
//!   `dir`).
//! - `stderr`: mcsup's own log (tracing) on stderr, through a bounded queue and a writer thread.
//! - `signals`: what mcsup does with every signal (the table), signal streams and the
//!   async-signal-safe SIGKILL backstop.
//! - `status`: the events file (`<node>.events.jsonl`), the status file (`<node>.status.json`)
//!   and `print_status`.
//!
//! This module only holds the public surface; it must not grow logic of its own.

pub mod control;
pub mod machine;

mod logs;
mod probes;
mod runtime;
mod signals;
mod spawn;
mod status;
mod stderr;
mod steps;
mod timer;
pub mod watch;

use std::path::{Path, PathBuf};

use crate::exit::ExitCode;
use crate::plan::Plan;

pub use crate::runfiles::{
    events_path, parse_events, status_path, EventRecord, OutputLost, ServableState, ServableStatus,
    StatusExit, StatusFile, StatusProcess, StatusRead,
};
pub use logs::log_path;
pub use machine::ExitStatus;
pub use runtime::run_with_signals;
pub use signals::{
    hold_early_signals, hold_stop_signals, stop_pending, survive_file_size_limit, SignalEvent,
    SignalSource,
};
pub use spawn::SHORT_SLICE;
pub use status::{
    log_tail, read_job, read_job_events, read_roles, read_status, record_refusal, wall_now_ms,
    write_atomic,
};
pub use stderr::{flush_stderr, init_tracing, stderr_write};

/// How the supervisor reports its own events on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// Options that are not part of the plan.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Mirror children's output (prefixed with the process name) on mcsup's stdout.
    pub console: bool,
}

/// What happened, and the exit code mcsup should return: one of [`ExitCode`] (its table states
/// each meaning). A failure code wins over 124 (it is the root cause). A child's own exit code can
/// collide with the fixed codes (a critical process exiting 4 reports 4): the events file tells
/// them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The process exit code ([`ExitCode::code`]).
    pub exit_code: i32,
    /// Why the node was torn down, in words.
    pub reason: String,
    /// Whether any group had to be SIGKILLed during the teardown.
    pub sigkill_needed: bool,
    /// Console lines dropped because mcsup's stdout was too slow (the log files have them all).
    pub console_dropped_lines: u64,
    /// Lines of mcsup's own log lost because stderr was full (nobody reading) or failing.
    pub log_dropped_lines: u64,
    /// Writes (to any file) that failed with EFBIG because they went over `ulimit -f`.
    pub writes_over_file_size_limit: u64,
}

/// Errors that stop the supervisor before or outside normal supervision.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// Anything that prevents supervision from starting.
    #[error("{0}")]
    Setup(String),
    /// The plan cannot be run (cycle, unknown dependency, duplicate name...).
    #[error("plan cannot be run: {0}")]
    Plan(#[from] machine::PlanError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// The status file is not what mcsup writes.
    #[error("{path}: not a mcsup status file: {source}")]
    BadStatus {
        /// The file.
        path: PathBuf,
        /// Why it does not parse.
        #[source]
        source: serde_json::Error,
    },
}

impl SupervisorError {
    /// The exit code for this error (3: supervisor setup error).
    pub fn exit_code(&self) -> i32 {
        ExitCode::SetupFailed.code()
    }

    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        SupervisorError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Run the plan to completion on a current-thread runtime (so every child is forked from this one
/// long-lived thread: PR_SET_PDEATHSIG follows the forking thread, not the process).
///
/// Returns once every child (and every reparented descendant) is gone.
///
/// mcsup's own log goes wherever the caller's tracing subscriber sends it (the binary installs
/// one in `main` with [`init_tracing`]).
/// A current-thread runtime with every driver, for the unit tests of the loop's async parts.
#[cfg(test)]
pub(crate) fn test_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn run_blocking(plan: Plan, opts: RunOptions) -> Result<RunOutcome, SupervisorError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // The blocking pool's threads never take the loop's signals (see `signals`).
        .on_thread_start(signals::block_supervised_signals)
        .build()
        .map_err(|e| SupervisorError::Setup(format!("cannot build the tokio runtime: {e}")))?;
    let outcome = rt.block_on(runtime::run(plan, opts));
    // A blocking task stuck on a file system that stopped answering (a file probe's stat, the
    // control secret's read) must not hold mcsup's exit: dropping the runtime would wait for it.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    outcome
}
