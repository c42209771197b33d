//! The run's files, as one contract: where each lives in the log directory and what it holds.
//! The supervisor writes them (only its runtime loop does); `mcsup status`, `mcsup timeline`, the
//! `.prom` renderer, tools and tests read them with these types.
//!
//! - `<log_dir>/<node>.events.jsonl`: one [`EventRecord`] per line, appended as it happens.
//! - `<log_dir>/<node>.status.json`: a [`StatusFile`], replaced atomically on each change.
//! - `<log_dir>/<node>.prom`: the status as Prometheus text (`crate::render::metrics_text`).
//!
//! How the files are opened and written safely in a directory others may reach is the
//! supervisor's (`supervisor::logs`); this module only names and types them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::frontend::{Expected, Seen};

/// `<log_dir>/<node>.events.jsonl`
pub fn events_path(log_dir: &Path, node: &str) -> PathBuf {
    log_dir.join(format!("{node}.events.jsonl"))
}

/// `<log_dir>/<node>.status.json`
pub fn status_path(log_dir: &Path, node: &str) -> PathBuf {
    log_dir.join(format!("{node}.status.json"))
}

/// `<log_dir>/<node>.prom`: the status as Prometheus text, for node_exporter's textfile collector.
pub fn metrics_path(log_dir: &Path, node: &str) -> PathBuf {
    log_dir.join(format!("{node}.prom"))
}

/// How a process last ended, in the status file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusExit {
    /// Exit code, or 128 + signal.
    pub code: i32,
    /// Signal name when killed by a signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

/// Output a process could not write to its log file (disk full, file too large), in total over
/// its restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputLost {
    pub bytes: u64,
    pub lines: u64,
    /// The last write error (e.g. "No space left on device (os error 28)").
    pub error: String,
}

/// One unit (process or gate) in the status file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusProcess {
    pub name: String,
    /// `master`, `store`, `worker`, or `gate`.
    pub kind: String,
    pub critical: bool,
    /// waiting, spawning, starting, ready, backing-off, stopping, exited, failed (gates: probing,
    /// ready, failed, cancelled).
    pub state: String,
    pub pid: Option<i32>,
    pub restarts: u32,
    pub last_exit: Option<StatusExit>,
    pub spawned_ts_ms: Option<u64>,
    pub state_since_ts_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Output lost to write errors on its log file, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_lost: Option<OutputLost>,
    /// Probe attempts that failed (readiness and liveness), over the whole run.
    #[serde(default)]
    pub probe_failures: u32,
    /// Spawn to ready of the last run that became ready, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_after_ms: Option<u64>,
    /// When it first became ready (the start-up: restarts and re-probes do not move it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_ready_ts_ms: Option<u64>,
    /// The units it waits for before it is spawned (processes and gates of the same node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
}

/// The whole status file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusFile {
    pub node: String,
    pub mcsup_pid: u32,
    /// idle, starting, running, stopping, stopped.
    pub phase: String,
    pub started_ts_ms: u64,
    pub updated_ts_ms: u64,
    /// Why the teardown started, once it has.
    pub reason: Option<String>,
    /// Set when mcsup has finished.
    pub exit_code: Option<i32>,
    pub console_dropped_lines: u64,
    /// Gates first, then processes, in plan order.
    pub units: Vec<StatusProcess>,
    /// The job's endpoint, on the node that runs it, once it has been servable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servable: Option<ServableStatus>,
}

/// One line of `<node>.events.jsonl`: what mcsup writes and what `mcsup status`, tools and the
/// tests read back (the one type of the events file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Wall clock, milliseconds since the epoch.
    pub ts_ms: u64,
    /// Milliseconds since mcsup started (monotonic).
    pub t_ms: f64,
    pub node: String,
    /// The process (or gate, or `mcsup` itself).
    pub process: String,
    /// `spawned`, `ready`, `exited`, `restarting`, `failed`, `stopping`, `stopped`,
    /// `shutdown-requested`, `remounted`, `finished`, ... (`RecordKind::as_str`).
    pub event: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The records of an events file, in order. A line that is not a record (the last one may be
/// half-written while mcsup runs) is skipped.
pub fn read_events(path: &Path) -> std::io::Result<Vec<EventRecord>> {
    let text = std::fs::read_to_string(path)?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect())
}

/// A status file as read by `mcsup status`: its text as written, and its typed content.
#[derive(Debug, Clone)]
pub struct StatusRead {
    pub text: String,
    pub status: StatusFile,
    /// Whether the mcsup that wrote it still runs (its pid answers signal 0).
    pub writer_alive: bool,
}

/// How the endpoint is doing, in the status file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServableState {
    /// Every expected worker is listed.
    Servable,
    /// Some are missing.
    Degraded,
    /// The frontend does not answer (or not as a frontend does).
    Unreachable,
}

impl ServableState {
    pub fn as_str(self) -> &'static str {
        match self {
            ServableState::Servable => "servable",
            ServableState::Degraded => "degraded",
            ServableState::Unreachable => "unreachable",
        }
    }
}

/// The endpoint, in `<node>.status.json` (on the node that runs it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServableStatus {
    /// The public endpoint (`http://<node address>:<port>`).
    pub url: String,
    /// The process whose readiness found the job servable.
    pub frontend: String,
    pub state: ServableState,
    /// When the job first became servable (wall clock, ms).
    pub servable_ts_ms: u64,
    /// When `state` or `seen` last changed.
    pub since_ts_ms: u64,
    pub expected: Expected,
    pub seen: Seen,
    /// Why the frontend was unreachable, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
