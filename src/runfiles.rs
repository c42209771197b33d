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

/// An enum of names written into the run's files, with its wire names; a name this version
/// does not know (a newer mcsup wrote the file) reads as `Other` instead of failing the read.
macro_rules! wire_names {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident => $s:literal,)+ }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vm])* #[serde(rename = $s)] $v,)+
            /// A name this version of mcsup does not know.
            #[serde(other, rename = "other")]
            Other,
        }

        impl $name {
            /// Every known name, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$v,)+];

            /// The name in the file.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$v => $s,)+
                    Self::Other => "other",
                }
            }
        }

        impl From<&str> for $name {
            /// The value a name in the file reads as.
            fn from(name: &str) -> Self {
                match name {
                    $($s => Self::$v,)+
                    _ => Self::Other,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_names! {
    /// What a unit of the status file is.
    UnitKind {
        Master => "master",
        Store => "store",
        Service => "service",
        Worker => "worker",
        Frontend => "frontend",
        /// The recipe's benchmark client.
        Benchmark => "benchmark",
        /// A process on another node this node waits for.
        Gate => "gate",
    }
}

wire_names! {
    /// A unit's state in the status file.
    UnitState {
        /// Dependencies not satisfied yet (a gate: mcsup has not started).
        Waiting => "waiting",
        Spawning => "spawning",
        /// Spawned, readiness pending.
        Starting => "starting",
        /// A gate being probed.
        Probing => "probing",
        Ready => "ready",
        BackingOff => "backing-off",
        /// A drain waits for its in-flight requests before its stop signal.
        Draining => "draining",
        Stopping => "stopping",
        /// Completed, or stopped by the teardown.
        Exited => "exited",
        Failed => "failed",
        /// A gate no longer needed (the teardown started).
        Cancelled => "cancelled",
    }
}

wire_names! {
    /// The node's phase in the status file.
    NodePhase {
        /// Not started yet.
        Idle => "idle",
        /// Something is still waiting, spawning or not ready.
        Starting => "starting",
        /// Everything that should run is ready.
        Running => "running",
        /// Ordered teardown in progress.
        Stopping => "stopping",
        /// Every process is gone.
        Stopped => "stopped",
    }
}

wire_names! {
    /// What an event of the events file reports.
    EventKind {
        Spawned => "spawned",
        Ready => "ready",
        Exited => "exited",
        Completed => "completed",
        Restarting => "restarting",
        Waiting => "waiting",
        /// A readiness wait goes on: what is awaited, for how long (at a calm cadence).
        StillWaiting => "still-waiting",
        LivenessFailed => "liveness-failed",
        /// A drain reads a process's in-flight requests before its stop signal: how many, and
        /// how long it waits for them.
        Draining => "draining",
        /// Its in-flight requests ended within the drain: how many, in how long.
        Drained => "drained",
        /// The drain's time ran out with requests still in flight: how many.
        DrainTimeout => "drain-timeout",
        /// A stop request (SIGTERM, SIGINT) during a drain ended the drain's wait: KillWait is
        /// near, every process is stopped now.
        DrainCut => "drain-cut",
        Stopping => "stopping",
        Killing => "killing",
        Stopped => "stopped",
        Failed => "failed",
        ShutdownRequested => "shutdown-requested",
        Escalated => "escalated",
        SignalIgnored => "signal-ignored",
        Deadline => "deadline",
        Abandoned => "abandoned",
        OrphanKilled => "orphan-killed",
        /// The final sweep for reparented descendants could not read /proc: some may be left.
        SweepBlind => "sweep-blind",
        /// A port the plan listened on is still listened on after the teardown (by whom).
        PortHeld => "port-held",
        /// A process is still on one of the job's GPUs after the teardown (which, how much).
        GpuHeld => "gpu-held",
        /// Before a restart: the previous run's group is gone and its GPUs' memory is back
        /// (how long it took after the exit).
        GpuReleased => "gpu-released",
        /// Before a restart: the wait for the GPUs ran out (what still held them); it starts
        /// anyway.
        GpuReleaseLate => "gpu-release-late",
        /// A restarted master lists this node's stores again (written by the runtime, not the
        /// machine: see `supervisor::watch::mooncake`).
        Remounted => "remounted",
        /// A restarted master still misses this node's stores after the bound.
        RemountLate => "remount-late",
        /// A process that stopped answering had its stacks dumped before its stop: the file and
        /// the top frames (`supervisor::watch::stacks`).
        StackDump => "stack-dump",
        /// A known failure line in a process's output (Mooncake's, with its fix), or a fact
        /// about a process that explains later trouble.
        Diagnosis => "diagnosis",
        /// A Mooncake store's `/health` says it has lost the master.
        MasterUnreachable => "master-unreachable",
        /// It reaches the master again.
        MasterReachable => "master-reachable",
        /// The master's node compared the master's capacity with the job's stores' planned
        /// segments: whole, or short (the detail says).
        Capacity => "capacity",
        /// The job is servable through this frontend (written by the runtime: see
        /// `supervisor::watch::servable`).
        Servable => "servable",
        /// The frontend lists fewer workers than expected, or does not answer.
        WorkersLost => "workers-lost",
        /// The canary's 1-token completions through the endpoint failed `threshold` times in a
        /// row (written by the runtime: see `supervisor::watch::canary`).
        CanaryFailed => "canary-failed",
        /// A canary completion generated again after `canary-failed`.
        CanaryOk => "canary-ok",
        /// It lists every expected worker again.
        WorkersBack => "workers-back",
        /// A process's output could not be written to its log file (and is counted).
        OutputLost => "output-lost",
        /// The log directory was removed while mcsup ran, and made again.
        LogDirRecreated => "log-dir-recreated",
        /// A rank of a worker over several nodes is down here (it died, or was stopped for the
        /// worker's restart): the coordinator is told; the generation and cause are in the detail.
        RankDown => "rank-down",
        /// The coordinator restarts a worker over several nodes: every rank stops, then all
        /// start again in the next generation (written by the coordinator's node).
        UnitRestart => "unit-restart",
        /// The coordinator gave a worker over several nodes up (its restart limit, or its
        /// policy): every rank is failed; each rank's `critical` decides.
        UnitFailed => "unit-failed",
        /// A message on the control connection was refused (wrong secret, another job, a replay):
        /// who sent it and why. Nothing else happens.
        ControlRefused => "control-refused",
        /// Another node failed for good, or the coordinator is gone: this node drains.
        PeerFailed => "peer-failed",
        /// The teardown across nodes (written by the coordinator's node): a tier stopped on
        /// every node, and which may stop next.
        TierDone => "tier-done",
        /// This node stopped a tier without the job's word that every lower tier had stopped
        /// everywhere: its own deadline could not wait longer (the detail names the nodes the
        /// job was waiting for).
        TierAlone => "tier-alone",
        /// The coordinator gave a node's stores their place to register with the master (at
        /// most `mcsup.store.register_at_once` of the job's stores register at a time): on the
        /// coordinator's node; on the node itself, when its word came.
        StoreSlot => "store-slot",
        /// The coordinator's node was asked to stop (a signal to its mcsup alone): every node
        /// stops, in order (written by the coordinator's node, and by each node told).
        JobStop => "job-stop",
        /// A node's stores that waited for their place are registered with the master (how long
        /// it took): their places are free (written by the coordinator's node).
        StoresRegistered => "stores-registered",
        /// What the job is for ended (the benchmark client, a terminal service): the job ends
        /// with its exit status; on another node: this node drains.
        JobDone => "job-done",
        /// Every terminal process of this node ended, in a job of several nodes: the node
        /// waits for the coordinator's `job-done` (another node's part may still run).
        PartDone => "part-done",
        /// The benchmark's result files say it measured something: their headline numbers.
        BenchmarkResult => "benchmark-result",
        /// The benchmark exited 0 but its results measured nothing (the number that was wrong):
        /// the job fails.
        BenchmarkInvalid => "benchmark-invalid",
        /// This node's mcsup refused to start anything (its preflight failed, or it could not
        /// set up): why, and its exit code. The node's part of the job never ran.
        Refused => "refused",
        Finished => "finished",
    }
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
    pub kind: UnitKind,
    pub critical: bool,
    pub state: UnitState,
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
    /// A Mooncake store: the segment the plan gives it (what the master must hold for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_bytes: Option<u64>,
    /// The roles it serves (a worker's prefill, decode or agg), as the plan says; none for the
    /// job's infrastructure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
}

/// What the Mooncake master said at its last look (on the node that runs it): its `/metrics`
/// and `/get_all_segments`, read every few seconds once it is ready.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MooncakeView {
    /// When it was read.
    pub ts_ms: u64,
    /// `master_total_capacity_bytes`: the segments mounted, summed.
    pub capacity_bytes: u64,
    /// `master_allocated_bytes`: what the cached keys use.
    pub allocated_bytes: u64,
    /// `master_key_count`.
    pub keys: u64,
    /// `master_active_clients`.
    pub clients: u64,
    /// Segments listed.
    pub segments: u64,
    /// Each listed segment's capacity (`segment_total_capacity_bytes{segment=...}`).
    #[serde(default)]
    pub segment_capacity: Vec<(String, u64)>,
    /// Why the last look failed, if it did (the values are from the look before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The whole status file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusFile {
    pub node: String,
    /// The node's roles (prefill, decode, agg; none on a dedicated infra or frontend node).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    pub mcsup_pid: u32,
    /// Where `mcsup_pid` means something: the writer's host name and PID namespace
    /// (`pid:[4026531836]`). A reader elsewhere goes by the heartbeat instead.
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub pid_ns: String,
    pub phase: NodePhase,
    pub started_ts_ms: u64,
    /// Rewritten at least every `heartbeat_ms` while mcsup runs, changed or not.
    pub updated_ts_ms: u64,
    #[serde(default)]
    pub heartbeat_ms: u64,
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
    /// The Mooncake master's view, on the node that runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mooncake: Option<MooncakeView>,
    /// The benchmark's judged result (on the client's node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmark: Option<BenchmarkStatus>,
    /// The canary through the job's endpoint, on the node that runs it, once servable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStatus>,
    /// The Slurm steps of other nodes' mcsups with ranks here (the plan's
    /// `shutdown.holds_ranks_of`): why a node with no unit of its own stays up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds_ranks_of: Vec<String>,
    /// The job's control connection (`supervisor::control`), in a job of several nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlStatus>,
}

/// This node's end of the job's control connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlStatus {
    /// Joined the coordinator: a worker over several nodes restarts as one unit, and another
    /// node's failure reaches this node at once.
    pub joined: bool,
    /// Why not, when it is known (not reached yet, or the connection lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// The host name and PID namespace of this process, as a status file records them.
pub fn where_am_i() -> (String, String) {
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|l| l.to_string_lossy().into_owned())
        .unwrap_or_default();
    (host, ns)
}

/// Slack on a heartbeat for a late write or clocks a little apart between nodes.
const HEARTBEAT_SLACK_MS: u64 = 2_000;

impl StatusFile {
    /// Whether the mcsup that writes this file still runs, seen from `here` (host name, PID
    /// namespace) at `now_ms`. Its pid answers only where it means that mcsup: same host, same
    /// PID namespace, and not 0 or 1 (which always answer). Anywhere else the heartbeat decides:
    /// written within three periods (and not in the future). A file without either is not alive.
    pub fn writer_alive(&self, here: &(String, String), now_ms: u64) -> bool {
        let local = !self.host.is_empty() && self.host == here.0 && self.pid_ns == here.1;
        if local && self.mcsup_pid > 1 {
            // A pid past i32 is no process (round 4's N8: 4294967295 became kill(-1, 0), which
            // succeeds, and a dead job showed as running for ever).
            return i32::try_from(self.mcsup_pid).is_ok_and(|pid| {
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
            });
        }
        self.heartbeat_ms > 0
            && self.updated_ts_ms <= now_ms.saturating_add(HEARTBEAT_SLACK_MS)
            && now_ms.saturating_sub(self.updated_ts_ms)
                <= self
                    .heartbeat_ms
                    .saturating_mul(3)
                    .saturating_add(HEARTBEAT_SLACK_MS)
    }
}

/// The part of a status file the timeline reads: which roles each unit serves.
#[derive(Debug, Clone, Deserialize)]
pub struct StatusRoles {
    pub node: String,
    #[serde(default)]
    pub roles: Vec<String>,
    pub units: Vec<UnitRoles>,
}

/// One unit of [`StatusRoles`].
#[derive(Debug, Clone, Deserialize)]
pub struct UnitRoles {
    pub name: String,
    pub kind: UnitKind,
    #[serde(default)]
    pub roles: Vec<String>,
}

impl StatusFile {
    /// The node's Mooncake stores: (ready, the segment the plan gives it).
    pub fn store_segments(&self) -> Vec<(bool, u64)> {
        self.units
            .iter()
            .filter(|u| u.kind == UnitKind::Store)
            .filter_map(|u| Some((u.state == UnitState::Ready, u.segment_bytes?)))
            .collect()
    }
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
    pub event: EventKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// A `diagnosis` event's known failure line, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<DiagnosisRecord>,
}

/// A known failure line a process printed (a `diagnosis` event): which signature of the
/// catalogue, the line, the lines before it, what it means and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiagnosisRecord {
    /// The signature's id (`cuda-oom`).
    pub signature: String,
    /// The catalogue's version.
    pub catalogue: u32,
    pub line: String,
    /// The lines printed before it, oldest first.
    #[serde(default)]
    pub context: Vec<String>,
    pub what: String,
    pub fix: String,
    pub source: String,
    /// The line only says that something failed and that the cause is another line (SGLang's
    /// "Scheduler hit an exception"): a reader looking for the cause prefers another diagnosis.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub points_elsewhere: bool,
}

/// The records of an events file's text, in order. A line that is not a record (the last one may be
/// half-written while mcsup runs) is skipped.
pub fn parse_events(text: &str) -> Vec<EventRecord> {
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A status file as read by `mcsup status`: its text as written, and its typed content.
#[derive(Debug, Clone)]
pub struct StatusRead {
    pub text: String,
    pub status: StatusFile,
    /// Whether the mcsup that wrote it still runs (its pid answers signal 0).
    pub writer_alive: bool,
}

impl StatusRead {
    /// A node whose status file never took its last write (a full disk, a hung mount) but whose
    /// events file did: its mcsup finished, and the status read says so, with the exit code its
    /// `finished` event gives (the adversarial re-run's D17: such a node was shown "gone without
    /// finishing: killed?"). Only a status whose writer is gone and that has no exit code changes.
    pub fn finish_from_events(&mut self, events: &[EventRecord]) {
        if self.writer_alive || self.status.exit_code.is_some() {
            return;
        }
        let Some(fin) = events
            .iter()
            .rev()
            .find(|e| e.process == "mcsup" && e.event == EventKind::Finished)
        else {
            return;
        };
        let detail = fin.detail.as_deref().unwrap_or_default();
        let Some(code) = detail
            .strip_prefix("exit code ")
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit() && c != '-').next())
            .and_then(|n| n.parse::<i32>().ok())
        else {
            return;
        };
        self.status.exit_code = Some(code);
        self.status.phase = crate::runfiles::NodePhase::Stopped;
        let was = self
            .status
            .reason
            .take()
            .map(|r| format!("{r}; "))
            .unwrap_or_default();
        self.status.reason = Some(format!(
            "{was}its status file did not take the last writes, its events did: {detail}"
        ));
    }
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

/// The canary, in `<node>.status.json` (on the node that runs the job's endpoint).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryStatus {
    /// The endpoint it asks.
    pub url: String,
    /// No `canary-failed` stands (fewer failures in a row than the threshold).
    pub ok: bool,
    pub failures_in_a_row: u32,
    pub requests_total: u64,
    pub failures_total: u64,
    /// Since when `ok` is what it is.
    pub since_ts_ms: u64,
    /// The last failure's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The benchmark's result, in `<node>.status.json` (on the client's node), once judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkStatus {
    /// `benchmark.type`.
    pub kind: String,
    /// Whether the result gate found that it measured something.
    pub valid: bool,
    /// The result line (`benchmark-result`), or the number that was wrong (`benchmark-invalid`).
    pub said: String,
    /// Each result file it judged, with its numbers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<BenchmarkNumbers>,
}

/// One result file's numbers (sa-bench's `results_*.json`, AIPerf's export).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BenchmarkNumbers {
    /// The file, relative to the log directory.
    pub file: String,
    /// Its concurrency, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u64>,
    pub completed: u64,
    pub failed: u64,
    pub output_tokens: u64,
    /// Requests and output tokens per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_throughput: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_throughput: Option<f64>,
    /// Latency percentiles in ms, by name (`p50_ttft_ms`, `p99_itl_ms`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_ms: Vec<(String, f64)>,
    /// The run ended before it finished (AIPerf's `was_cancelled`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Is the writer alive? By its pid only on its own host and PID namespace (and never by pid
    /// 0 or 1, which always answer); elsewhere by a heartbeat at most three periods old (plus
    /// slack), not from the future.
    #[test]
    fn a_writer_is_alive_by_its_pid_at_home_and_by_its_heartbeat_elsewhere() {
        let here = ("gpu-01".to_string(), "pid:[4026531836]".to_string());
        let now = 1_000_000;
        let file = |host: &str, pid: u32, updated: u64, hb: u64| StatusFile {
            node: "n1".into(),
            roles: vec![],
            mcsup_pid: pid,
            host: host.into(),
            pid_ns: "pid:[4026531836]".into(),
            phase: NodePhase::Running,
            started_ts_ms: 0,
            updated_ts_ms: updated,
            heartbeat_ms: hb,
            reason: None,
            exit_code: None,
            console_dropped_lines: 0,
            units: vec![],
            servable: None,
            mooncake: None,
            benchmark: None,
            canary: None,
            holds_ranks_of: vec![],
            control: None,
        };
        let me = std::process::id();
        let dead = u32::MAX - 1; // no such pid
        let stale = now - 5_000 * 3 - 2_001;
        for (f, alive, why) in [
            (
                file("gpu-01", me, stale, 5_000),
                true,
                "at home, its pid answers",
            ),
            (
                file("gpu-01", dead, now, 5_000),
                false,
                "at home, its pid is gone",
            ),
            (
                file("gpu-01", 1, stale, 5_000),
                false,
                "pid 1 always answers: the heartbeat decides",
            ),
            (
                file("gpu-01", u32::MAX, now, 5_000),
                false,
                "4294967295 is -1 as an i32: kill(-1, 0) would answer for every process",
            ),
            (
                file("gpu-01", 0, now, 5_000),
                true,
                "pid 0: a fresh heartbeat",
            ),
            (
                file("gpu-02", dead, now - 4_000, 5_000),
                true,
                "another host: a fresh heartbeat",
            ),
            (
                file("gpu-02", me, stale, 5_000),
                false,
                "another host: a stale heartbeat, whatever pid",
            ),
            (
                file("gpu-02", me, now + 60_000, 5_000),
                false,
                "a heartbeat from the future",
            ),
            (file("gpu-02", me, now, 0), false, "no heartbeat at all"),
            (
                file("", me, now - 1_000, 5_000),
                true,
                "no host said: the heartbeat",
            ),
        ] {
            assert_eq!(f.writer_alive(&here, now), alive, "{why}");
        }
        let other_ns = ("gpu-01".to_string(), "pid:[4026532000]".to_string());
        assert!(
            !file("gpu-01", me, stale, 5_000).writer_alive(&other_ns, now),
            "another PID namespace on the same host: its pids mean other processes"
        );
        let (host, ns) = where_am_i();
        assert!(!host.is_empty() && ns.starts_with("pid:["), "{host} {ns}");
    }

    fn round_trips<T>(all: &[T])
    where
        T: Copy + PartialEq + std::fmt::Debug + std::fmt::Display + Serialize,
        T: for<'a> Deserialize<'a> + for<'a> From<&'a str>,
    {
        for &v in all {
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(
                json,
                format!("\"{v}\""),
                "{v:?} is written by its wire name"
            );
            assert_eq!(
                serde_json::from_str::<T>(&json).unwrap(),
                v,
                "{json} reads back"
            );
            assert_eq!(T::from(v.to_string().as_str()), v);
        }
    }

    #[test]
    fn every_name_round_trips_through_the_file() {
        round_trips(UnitKind::ALL);
        round_trips(UnitState::ALL);
        round_trips(NodePhase::ALL);
        round_trips(EventKind::ALL);
    }

    #[test]
    fn a_name_from_a_newer_mcsup_reads_as_other() {
        let e: EventKind = serde_json::from_str("\"warp-drive-engaged\"").unwrap();
        assert_eq!(e, EventKind::Other);
        assert_eq!(UnitState::from("hibernating"), UnitState::Other);
        let line = r#"{"ts_ms":1,"t_ms":0.5,"node":"n0","process":"p","event":"new-thing"}"#;
        let r: EventRecord = serde_json::from_str(line).unwrap();
        assert_eq!(r.event, EventKind::Other);
        assert_eq!(r.process, "p", "the rest of the record is kept");
    }
}
