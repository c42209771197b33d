//! Resolved process specifications: the output of planning and the input of the supervisor.
//!
//! Everything here is plain data. Nothing in this module reads the system, spawns, or sleeps: a
//! [`Plan`] is a value that can be printed (`mcsup plan`), serialised (`--json`), compared in
//! tests, and handed to the supervisor, which is the only place that acts on it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::domain::{Role, SignalName};

/// What a process is for; decides its default stop/restart policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessKind {
    Master,
    Store,
    /// Any other `services:` kind (etcd, nats, exporters, generic, ...).
    Service,
    Worker,
    /// The job's endpoint: a Dynamo frontend, an SGLang router, nginx in front of several.
    Frontend,
    /// The recipe's benchmark client (srtctl's benchmark stage), once the job is servable.
    Benchmark,
}

impl ProcessKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessKind::Master => "master",
            ProcessKind::Store => "store",
            ProcessKind::Service => "service",
            ProcessKind::Worker => "worker",
            ProcessKind::Frontend => "frontend",
            ProcessKind::Benchmark => "benchmark",
        }
    }
}

impl fmt::Display for ProcessKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// When a process starts, in srtctl 2.0's phases (workers are a phase of their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// etcd, NATS: before anything else.
    Infra,
    /// The Mooncake master and stores, and other services the workers need.
    BeforeWorkers,
    /// Launched with the workers, not gating them.
    WithWorkers,
    /// The inference workers.
    Workers,
    /// The frontends (and nginx), once the workers they front are ready.
    Frontend,
    /// After the frontends (srtctl's `after_frontend`).
    AfterFrontend,
}

impl Phase {
    /// The phase a process of `kind` has unless a recipe says otherwise.
    pub fn default_for(kind: ProcessKind) -> Phase {
        match kind {
            ProcessKind::Worker => Phase::Workers,
            ProcessKind::Frontend => Phase::Frontend,
            ProcessKind::Benchmark => Phase::AfterFrontend,
            _ => Phase::BeforeWorkers,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Infra => "infra",
            Phase::BeforeWorkers => "before_workers",
            Phase::WithWorkers => "with_workers",
            Phase::Workers => "workers",
            Phase::Frontend => "frontend",
            Phase::AfterFrontend => "after_frontend",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub use crate::domain::duration_ms;

/// The complete resolved plan for one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Where the plan was resolved: this node, the infra node, the job.
    pub node: NodeSummary,
    /// The roles this node runs, in the order given.
    pub roles: Vec<Role>,
    /// How `--role auto` derived them (absent when they were named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles_from: Option<String>,
    /// Remote conditions that must hold before dependents start (the master on another node).
    pub gates: Vec<GateSpec>,
    /// Processes in start order.
    pub processes: Vec<ProcessSpec>,
    /// Every effective service of the job (implied ones included) and its fate on this node.
    #[serde(default)]
    pub services: Vec<ServiceRow>,
    /// The job's endpoint and what makes it servable, when mcsup runs its frontends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The job's benchmark (srtctl's stage): where and when it runs, and what (every node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmark: Option<BenchmarkSummary>,
    /// The recipe's spelling: `v1`, `v1+standalone` (the seed's), `2.0`.
    #[serde(default)]
    pub recipe_schema: String,
    /// Files written into place before any process starts (e.g. vLLM's Mooncake JSON config).
    pub files: Vec<FileSpec>,
    /// Directories made below `log_dir` before any process starts (profiling output).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<PathBuf>,
    /// This job's scratch directory on the node (`<tmp>/mcsup-<job>-<node>`), when a process
    /// uses it (etcd's and NATS's data): made private (0700) by mcsup before any process starts,
    /// refused when someone else made it or could write in it, removed after the teardown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch_dir: Option<PathBuf>,
    /// Node-wide shutdown behaviour.
    pub shutdown: ShutdownSpec,
    /// What the preflight's DRAM budget needs beyond the processes: HiCache L2 and headroom.
    #[serde(default)]
    pub memory: MemorySpec,
    /// Where per-process logs and the status file go.
    pub log_dir: PathBuf,
    /// Top-level recipe sections that mcsup does not interpret (listed, not errors).
    pub ignored_sections: Vec<String>,
    /// Things that are legal but probably wrong.
    pub warnings: Vec<String>,
    /// What mcsup added that the recipe did not say, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Secret values were replaced by `<redacted>` (a plan printed without `--show-secrets`);
    /// such a plan cannot be run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
    /// What is derived from the node's network where the plan runs (`mcsup.network`).
    #[serde(default, skip_serializing_if = "NetworkSpec::is_off")]
    pub network: NetworkSpec,
    /// The job's control connection between the nodes' mcsups (a Slurm job of several nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlSpec>,
    /// The supervisor's own periods: the product's unless a plan file sets them (a test does).
    #[serde(default, skip_serializing_if = "Periods::is_default")]
    pub periods: Periods,
    /// The canary through the job's endpoint, on the node that runs it (mcsup's; srtctl has
    /// none): the product's unless the recipe's `mcsup.canary` changes it.
    #[serde(default, skip_serializing_if = "CanarySpec::is_default")]
    pub canary: CanarySpec,
}

/// The supervisor's own periods, as values a plan file can set (the planner writes the
/// product's, [`Periods::default`], and leaves them out of the printed plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Periods {
    /// The status file is rewritten at least this often: a reader on another host cannot ask
    /// the pid, so a file three periods old says its writer is gone.
    #[serde(with = "duration_ms", rename = "heartbeat_ms")]
    pub heartbeat: Duration,
    /// How long one write into the log directory may wait before mcsup says the directory is
    /// stuck.
    #[serde(with = "duration_ms", rename = "log_dir_stall_ms")]
    pub log_dir_stall: Duration,
    /// Between two reads of the frontend's health answer once the job is servable.
    #[serde(with = "duration_ms", rename = "frontend_watch_ms")]
    pub frontend_watch: Duration,
    /// Between two looks at the Mooncake master's view (its own report is every 10 s).
    #[serde(with = "duration_ms", rename = "master_look_ms")]
    pub master_look: Duration,
}

impl Default for Periods {
    fn default() -> Self {
        Periods {
            heartbeat: Duration::from_secs(5),
            log_dir_stall: Duration::from_secs(5),
            frontend_watch: Duration::from_secs(2),
            master_look: Duration::from_secs(5),
        }
    }
}

impl Periods {
    /// The product's periods (left out of a printed plan).
    pub fn is_default(&self) -> bool {
        *self == Periods::default()
    }
}

/// The job's control connection (docs/supervision.md, "Across nodes"): the coordinator's mcsup
/// (on the infra node) listens on `port`; every node's mcsup, the coordinator's own included,
/// connects to `address:port`. Every message carries an HMAC-SHA256 under the job's secret in
/// `secret`, which the coordinator creates (0600, in the 0700 log directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlSpec {
    /// The node whose mcsup coordinates (the infra node).
    pub coordinator: String,
    /// Its address, as every node reaches it.
    pub address: String,
    /// `mcsup.control_port`; 0: a free port, chosen at start and written into `secret`'s file.
    pub port: u16,
    /// The coordinator's port and the job's secret: `<log_dir>/control.secret`.
    pub secret: PathBuf,
    /// Every node of the job, in the node list's order.
    pub nodes: Vec<String>,
    /// A peer not heard from for this long (counted in time this side ran) is gone.
    #[serde(
        with = "duration_ms",
        rename = "silent_ms",
        default = "ControlSpec::default_silent",
        skip_serializing_if = "ControlSpec::is_default_silent"
    )]
    pub silent: Duration,
    /// At most this many of the job's Mooncake stores register with the master at a time
    /// (`mcsup.store.register_at_once`); 0: no limit, no store waits for a place.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub stores_at_once: u32,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl ControlSpec {
    /// The product's: a node that lost power sends no FIN; ten heartbeats missed is gone.
    pub const SILENT: Duration = Duration::from_secs(10);

    fn default_silent() -> Duration {
        Self::SILENT
    }

    fn is_default_silent(d: &Duration) -> bool {
        *d == Self::SILENT
    }
}

/// `mcsup.network`: environment derived from the node itself, so computed on the node (by
/// `mcsup run`, or `mcsup plan` there), never from another machine's view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkSpec {
    /// Each worker gets the HCAs nearest its GPUs in `UCX_NET_DEVICES`, `MOONCAKE_DEVICE` and
    /// `NCCL_IB_HCA` (source [`PER_GPU_HCA`]), in place of what the recipe sets.
    #[serde(default)]
    pub per_gpu_hca: bool,
}

impl NetworkSpec {
    fn is_off(&self) -> bool {
        !self.per_gpu_hca
    }
}

/// The source of the variables `mcsup.network.per_gpu_hca` writes (`EnvVar::source` starts
/// with it).
pub const PER_GPU_HCA: &str = "mcsup.network.per_gpu_hca";

/// Identity of the node the plan was made for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSummary {
    pub name: String,
    pub ip: String,
    pub node_id: u32,
    pub infra_node: String,
    pub infra_ip: String,
    /// True when this node runs the Mooncake master.
    pub runs_master: bool,
    pub job_id: Option<String>,
    /// `slurm` or `local`.
    pub mode: String,
}

/// One child process mcsup will run and supervise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSpec {
    /// Unique on the node; used in logs, status and dependencies.
    pub name: String,
    pub kind: ProcessKind,
    /// Start phase; teardown runs the phases in reverse (see [`ProcessSpec::teardown_tier`]).
    pub phase: Phase,
    /// For a `services:` entry: its type and where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceOrigin>,
    /// Ports it listens on that neither its placement nor a probe names (an exporter's web port):
    /// the preflight checks them free, the plan against the node's other processes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listens: Vec<u16>,
    /// For a worker in srtctl's layout: its GPUs, ports, rank and leader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<WorkerPlacement>,
    /// Roles this process serves (a co-located store can serve several).
    pub roles: Vec<Role>,
    /// The program and its arguments, exec'd directly (no shell).
    pub argv: Vec<String>,
    /// Shell run before the program as `sh -c '<preamble>; exec "$@"' sh <argv...>`.
    pub preamble: Option<String>,
    /// Variables set on top of the inherited environment, with where each came from.
    pub env: Vec<EnvVar>,
    /// Working directory; `None` = mcsup's own.
    pub cwd: Option<PathBuf>,
    pub depends_on: Vec<DependencySpec>,
    /// How to tell the process is ready; `None` = ready once started.
    pub readiness: Option<ReadinessSpec>,
    /// Optional periodic check while running; failure restarts per policy.
    pub liveness: Option<LivenessSpec>,
    pub restart: RestartSpec,
    pub stop: StopSpec,
    /// A critical process that fails (or exits unasked) tears the whole node down.
    pub critical: bool,
    /// Regular expressions a line of its output must not match: one that does fails its
    /// liveness (srt-slurm's `health_check.fatal_log_markers`), its process alive or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fatal_log_patterns: Vec<String>,
    /// Its argv is the `srun` client of a step of the job (an MPI endpoint over several nodes,
    /// docs/trtllm.md): it is started without the `SLURM_*` variables of mcsup's own step (but
    /// `SLURM_JOB_ID` and `SLURM_CONF`) nor any `PMIX_*`, `PMI_*`, `OMPI_*`, and stopped through
    /// `scancel` of the step (its tasks on every node), never by a signal to srun.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_step: Option<SlurmStep>,
    /// What the job is for (the benchmark client): when it exits, the job ends with its exit
    /// status (the result gate judges a 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<TerminalSpec>,
}

/// The canary through the job's endpoint ([`Plan::canary`]): a 1-token completion every
/// `period` once the job is servable, `threshold` failures in a row a `canary-failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanarySpec {
    pub enabled: bool,
    #[serde(with = "duration_ms", rename = "period_ms")]
    pub period: Duration,
    pub threshold: u32,
    #[serde(with = "duration_ms", rename = "timeout_ms")]
    pub timeout: Duration,
    pub on_failure: crate::recipe::CanaryAction,
}

impl Default for CanarySpec {
    fn default() -> Self {
        CanarySpec {
            enabled: true,
            period: Duration::from_secs(30),
            threshold: 3,
            timeout: Duration::from_secs(10),
            on_failure: crate::recipe::CanaryAction::Report,
        }
    }
}

impl CanarySpec {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// The job's benchmark as srtctl's stage runs it ([`Plan::benchmark`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchmarkSummary {
    /// `benchmark.type`, and srtctl's name for it.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    /// The node the client runs on.
    pub node: String,
    /// srtctl's command.
    pub command: Vec<String>,
    /// srtctl's health wait before it.
    pub health: BenchmarkHealth,
}

/// srtctl's wait for the endpoint before its benchmark (`wait_for_model`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BenchmarkHealth {
    /// The public API node's name and port.
    pub host: String,
    pub port: u16,
    /// The workers it must list.
    pub prefill: u32,
    pub decode: u32,
    /// `health_check.interval_seconds`, and the whole wait (`max_attempts x interval`).
    pub interval_ms: u64,
    pub timeout_ms: u64,
}

impl std::fmt::Display for BenchmarkSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let h = &self.health;
        write!(
            f,
            "{} ({}) on {} once {}:{} lists {} prefill + {} decode (srtctl's wait: every {} s, up to {} s): {}; the job ends with its exit status",
            self.kind,
            self.title,
            self.node,
            h.host,
            h.port,
            h.prefill,
            h.decode,
            h.interval_ms as f64 / 1000.0,
            h.timeout_ms as f64 / 1000.0,
            crate::engine::flags::shlex_join(&self.command)
        )
    }
}

/// A terminal process's result gate ([`ProcessSpec::terminal`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSpec {
    /// The benchmark type, whose result files the gate reads; none for a 2.0 `terminal: true`
    /// service (its exit status alone counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmark: Option<String>,
    /// At most this many failed requests (`benchmark.max_failed_requests`, default 0).
    #[serde(default)]
    pub max_failed_requests: u64,
}

/// A process that is a Slurm step ([`ProcessSpec::slurm_step`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmStep {
    /// The step's name (srun `--job-name`): how mcsup finds the step to signal it.
    pub name: String,
}

impl SlurmStep {
    /// Whether a variable of mcsup's own environment stays out of the step's srun: mcsup's
    /// step's layout would become the new step's options (measured: `--ntasks-per-node=1`
    /// inherited, "More processors requested than permitted"), and PMIx/MPI variables would tie
    /// it to mcsup's step.
    pub fn drops(name: &str) -> bool {
        (name.starts_with("SLURM_") && name != "SLURM_JOB_ID" && name != "SLURM_CONF")
            || ["PMIX_", "PMI_", "OMPI_"]
                .iter()
                .any(|p| name.starts_with(p))
    }
}

/// Whether a probe's `host` is the node `ip` / `name` itself (or loopback, or any address).
pub fn host_is_here(host: &str, ip: &str, name: &str) -> bool {
    matches!(host, "127.0.0.1" | "localhost" | "::1" | "0.0.0.0") || host == ip || host == name
}

impl ProcessSpec {
    /// The ports this process uses on its node, in order, each once: its placement's, then
    /// each its readiness or liveness probes check there (`here`: whether a host is this node).
    pub fn ports_here(&self, here: &dyn Fn(&str) -> bool) -> Vec<u16> {
        let mut ports: Vec<u16> = self
            .placement
            .iter()
            .flat_map(|w| w.ports.iter().map(|(_, port)| *port))
            .chain(self.listens.iter().copied())
            .collect();
        let liveness = self.liveness.iter().map(|l| &l.probe);
        for probe in self
            .readiness
            .iter()
            .flat_map(|r| &r.probes)
            .chain(liveness)
        {
            match probe {
                ProbeSpec::Tcp { host, port }
                | ProbeSpec::MooncakeHealth { host, port }
                | ProbeSpec::Http { host, port, .. }
                    if here(host) =>
                {
                    ports.push(*port)
                }
                ProbeSpec::EngineAlive(a) if here(&a.host) => ports.push(a.port),
                _ => {}
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        ports.retain(|p| *p != 0 && seen.insert(*p));
        ports
    }

    /// Teardown order, lowest first: after-frontend services, the frontends (no new request
    /// reaches a stopping worker), workers (and with-workers services), other before-workers
    /// services such as the stores, the Mooncake master (stores unmount from a live master),
    /// infra services (etcd, NATS).
    pub fn teardown_tier(&self) -> u8 {
        match self.phase {
            Phase::AfterFrontend => 0,
            Phase::Frontend => 1,
            Phase::Workers | Phase::WithWorkers => 2,
            Phase::BeforeWorkers if self.kind == ProcessKind::Master => 4,
            Phase::BeforeWorkers => 3,
            Phase::Infra => 5,
        }
    }

    /// A store's registration readiness probe (what the master must hold for it), if it has one.
    pub fn segment_probe(&self) -> Option<&SegmentProbe> {
        self.readiness
            .as_ref()?
            .probes
            .iter()
            .find_map(|x| match x {
                ProbeSpec::MooncakeSegment(s) => Some(s),
                _ => None,
            })
    }

    /// The job's servable probe, when this process's readiness ends the job's start-up (the
    /// public endpoint's frontend).
    pub fn servable_probe(&self) -> Option<&ServableProbe> {
        self.readiness
            .as_ref()?
            .probes
            .iter()
            .find_map(|x| match x {
                ProbeSpec::Servable(s) => Some(s),
                _ => None,
            })
    }

    /// Whether the process registers memory with an RDMA NIC (a Mooncake client over `rdma`): a
    /// SIGKILL of such a process can leak the NIC's memory keys.
    pub fn registers_rdma_memory(&self) -> bool {
        self.segment_probe().is_some_and(|s| s.protocol == "rdma")
            || self.env_value("MOONCAKE_PROTOCOL") == Some("rdma")
    }

    /// The GPUs it is placed on (none for anything but a worker).
    pub fn gpus(&self) -> &[u32] {
        self.placement.as_ref().map_or(&[], |p| &p.gpus)
    }

    /// Look up the final value of a variable this spec sets.
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.value.as_str())
    }
}

/// The teardown tiers' names, by [`ProcessSpec::teardown_tier`].
pub const TEARDOWN_TIERS: [&str; 6] = [
    "the services after the frontends",
    "the frontends",
    "the workers",
    "the stores and the services before the workers",
    "the Mooncake masters",
    "the infrastructure (etcd, NATS)",
];

/// One wave of the ordered teardown and the longest it can take: the largest stop grace of its
/// processes (they are stopped together; a process still alive after its grace is SIGKILLed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TeardownTier {
    pub tier: u8,
    pub names: Vec<String>,
    pub longest_grace: Duration,
}

/// The teardown tiers of `processes`, in stop order. Dependencies inside a tier can add waves
/// (the supervisor stops a process after its dependents), so the sum of the tiers' graces is the
/// least the worst case can take.
pub fn teardown_tiers(processes: &[ProcessSpec]) -> Vec<TeardownTier> {
    let mut tiers: Vec<TeardownTier> = Vec::new();
    for p in processes {
        let t = p.teardown_tier();
        match tiers.iter_mut().find(|x| x.tier == t) {
            Some(x) => {
                x.names.push(p.name.clone());
                x.longest_grace = x.longest_grace.max(p.stop.grace);
            }
            None => tiers.push(TeardownTier {
                tier: t,
                names: vec![p.name.clone()],
                longest_grace: p.stop.grace,
            }),
        }
    }
    tiers.sort_by_key(|x| x.tier);
    tiers
}

/// Where srtctl's layout puts a worker process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerPlacement {
    /// `prefill[0]`: the worker (endpoint) this process belongs to.
    pub endpoint: String,
    /// The worker's nodes; the first is its leader.
    pub nodes: Vec<String>,
    /// This node's rank in the worker (vLLM data parallelism: the DP start rank or DP rank).
    pub rank: u32,
    pub gpus: Vec<u32>,
    /// Named ports (`http`, `dyn_system`, `nccl`, `bootstrap`, `kv_events`, `nixl`, `dp_rpc`).
    pub ports: Vec<(String, u16)>,
}

/// Which `services:` entry a process runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceOrigin {
    /// The entry's `name`.
    pub service: String,
    /// Its `type` (`mooncake-store`, `etcd`, ...).
    pub r#type: String,
    /// The recipe key it came from, in the user's spelling (`services[2]`,
    /// `backend.mooncake_kv_store.standalone`).
    pub key: String,
    /// Why an implied service exists (`backend.mooncake_kv_store`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implied_by: Option<String>,
}

/// One effective service of the job, as srtctl's dry-run lists it, and what mcsup does with it on
/// this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRow {
    pub name: String,
    pub r#type: String,
    /// `placement.node` (or `roles: prefill,decode` for the seed's placements).
    pub placement: String,
    pub start: String,
    pub critical: bool,
    /// The command as written, before this node's placeholders.
    pub command: Vec<String>,
    /// The readiness, described (`tcp/8700, timeout=120s`, `none`).
    pub readiness: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implied_by: Option<String>,
    pub key: String,
    /// What mcsup does with it here.
    pub here: ServiceHere,
}

/// A service's fate on this node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ServiceHere {
    /// Runs on this node as these processes.
    Runs { processes: Vec<String> },
    /// Placed on other nodes of the job.
    Elsewhere,
    /// `external:`: nothing launched; clients get this address.
    External { endpoint: String },
    /// `enabled: false`.
    Disabled,
    /// A kind or feature mcsup does not run (containers, builds, pools, ...).
    NotRun { why: String },
}

/// A remote readiness condition (no child process): e.g. the master on the infra node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateSpec {
    pub name: String,
    pub readiness: ReadinessSpec,
}

/// A file mcsup writes before starting processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSpec {
    pub path: PathBuf,
    pub contents: String,
    /// Why it exists (shown in the plan).
    pub purpose: String,
}

/// One environment variable with its provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
    /// The layer that set the final value (e.g. `placement:decode`, `forced`).
    pub source: String,
    /// Earlier layers whose values this one replaced, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrode: Vec<EnvOverride>,
}

/// A value that a later layer replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvOverride {
    pub source: String,
    pub value: String,
}

/// Which condition of another process (or gate) must hold before this one starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DependencySpec {
    /// Name of a process or gate in the same plan.
    pub target: String,
    pub condition: DependencyCondition,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DependencyCondition {
    /// The target has been spawned.
    Started,
    /// The target passed its readiness probes (or has none and was spawned).
    Healthy,
    /// The target exited with a success code.
    CompletedSuccessfully,
}

/// A single check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProbeSpec {
    /// TCP connect succeeds.
    Tcp { host: String, port: u16 },
    /// `GET http://host:port/path` answers `status`, and the body contains `body_contains` if set.
    Http {
        host: String,
        port: u16,
        path: String,
        status: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body_contains: Option<String>,
    },
    /// The command exits 0.
    Exec { argv: Vec<String> },
    /// A line of the process's stdout/stderr matches the regex (readiness only).
    LogLine { pattern: String },
    /// The path exists.
    File { path: PathBuf },
    /// The job is servable through this frontend: its health answer lists every expected
    /// worker, then a one-token completion succeeds (readiness only).
    Servable(ServableProbe),
    /// The Mooncake master lists this store's segment under its name, at the planned size and
    /// protocol (readiness only; a mismatch fails at once).
    MooncakeSegment(SegmentProbe),
    /// A Mooncake client's own `/health` (`MOONCAKE_CLIENT_HTTP_PORT`): 200 is healthy; 503
    /// `master_unreachable` is the master's trouble, reported as an event and not counted
    /// against the store (it remounts by itself when the master is back).
    MooncakeHealth { host: String, port: u16 },
    /// An engine is alive and makes progress (liveness only): its health answer is 200, and
    /// while requests are in flight it has sent a response byte within `stall`.
    EngineAlive(EngineAliveProbe),
    /// The job's coordinator gave this node's stores their place to register with the master
    /// (at most `at_once` of the job's stores register at a time; a gate only). Answered by
    /// the control connection, never polled over the network.
    StorePlace { coordinator: String, at_once: u32 },
}

/// An engine's health answer and its progress (see `supervisor::watch::progress`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineAliveProbe {
    /// `GET http://<host>:<port><path>` answers 200.
    pub host: String,
    pub port: u16,
    pub path: String,
    /// How many requests it is serving.
    pub inflight: crate::engine::stop::MetricSum,
    /// What grows while it serves them (response bytes sent).
    pub progress: crate::engine::stop::MetricSum,
    /// Requests in flight and no growth this long: a stall.
    #[serde(with = "duration_ms", rename = "stall_ms")]
    pub stall: Duration,
}

impl ProbeSpec {
    /// `GET http://<host>:<port>/health` answering 200: an engine's or a server's health.
    pub fn health(host: &str, port: u16) -> Self {
        ProbeSpec::Http {
            host: host.to_string(),
            port,
            path: "/health".into(),
            status: 200,
            body_contains: None,
        }
    }
}

/// What a store must have registered with the master (see `mooncake::segments`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentProbe {
    /// The master's admin server (`--metrics_port`).
    pub master_host: String,
    pub admin_port: u16,
    /// `MOONCAKE_LOCAL_HOSTNAME`: the segment's name (a port is appended when it has none).
    pub hostname: String,
    /// The planned segment; `None` when a `MOONCAKE_CONFIG_PATH` file sets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// `MOONCAKE_PROTOCOL` (`tcp` when unset).
    pub protocol: String,
}

/// What makes a job servable, checked on the node of its public endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServableProbe {
    /// Where the frontend answers on this node.
    pub host: String,
    pub port: u16,
    pub frontend: crate::engine::frontend::FrontendType,
    pub expected: crate::engine::frontend::Expected,
    /// The model name a completion asks for (the served model name).
    pub model: String,
    /// The endpoint as clients reach it (`http://<node address>:<port>`).
    pub url: String,
    /// A disaggregated job's decode workers' request counters: one of them must move with the
    /// probe's completion (the decode side served it). Empty where mcsup knows no such counter
    /// (an aggregated job; workers that are not Dynamo's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decode_served: Vec<crate::engine::stop::MetricSum>,
}

impl fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeSpec::Tcp { host, port } => write!(f, "tcp {host}:{port}"),
            ProbeSpec::Http {
                host,
                port,
                path,
                status,
                body_contains,
            } => {
                write!(f, "http GET http://{host}:{port}{path} -> {status}")?;
                if let Some(b) = body_contains {
                    write!(f, " containing {b:?}")?;
                }
                Ok(())
            }
            ProbeSpec::Exec { argv } => write!(f, "exec {}", argv.join(" ")),
            ProbeSpec::LogLine { pattern } => write!(f, "log line /{pattern}/"),
            ProbeSpec::File { path } => write!(f, "file {}", path.display()),
            ProbeSpec::Servable(s) => {
                write!(
                    f,
                    "servable: GET http://{}:{}{} lists {} prefill + {} decode, then a 1-token completion of {}",
                    s.host,
                    s.port,
                    s.frontend.health_path(),
                    s.expected.prefill,
                    s.expected.decode,
                    s.model
                )?;
                match s.decode_served.len() {
                    0 => Ok(()),
                    n => write!(
                        f,
                        " that moves a decode worker's request count ({n} read: {})",
                        s.decode_served
                            .iter()
                            .map(|c| c.url.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }
            }
            ProbeSpec::StorePlace {
                coordinator,
                at_once,
            } => write!(
                f,
                "a place to register with the master from the coordinator on {coordinator} (at most {at_once} of the job's stores at once)"
            ),
            ProbeSpec::MooncakeSegment(s) => {
                write!(
                    f,
                    "mooncake segment: GET http://{}:{}{} lists {} at ",
                    s.master_host,
                    s.admin_port,
                    crate::mooncake::segments::SEGMENTS_DETAIL_PATH,
                    s.hostname
                )?;
                match s.size_bytes {
                    Some(b) => write!(f, "{}", crate::mooncake::size::Bytes(b))?,
                    None => f.write_str("the config file's size")?,
                }
                write!(f, " over {}", s.protocol)
            }
            ProbeSpec::EngineAlive(p) => write!(
                f,
                "http GET http://{}:{}{} -> 200, and while {} > 0, {} grows within {}s",
                p.host,
                p.port,
                p.path,
                p.inflight.metrics.join("+"),
                p.progress.metrics.join("+"),
                p.stall.as_secs()
            ),
            ProbeSpec::MooncakeHealth { host, port } => {
                write!(f, "mooncake client GET http://{host}:{port}/health -> 200")
            }
        }
    }
}

/// Readiness: every probe must pass (each is retried until it does, or the deadline passes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadinessSpec {
    pub probes: Vec<ProbeSpec>,
    /// Wait this long after spawn before the first probe (default 0: probe at once).
    #[serde(with = "duration_ms", rename = "initial_delay_ms")]
    pub initial_delay: Duration,
    /// First retry interval; doubles after each failure up to `max_interval`.
    #[serde(with = "duration_ms", rename = "interval_ms")]
    pub interval: Duration,
    #[serde(with = "duration_ms", rename = "max_interval_ms")]
    pub max_interval: Duration,
    /// One probe attempt may take at most this long.
    #[serde(with = "duration_ms", rename = "attempt_timeout_ms")]
    pub attempt_timeout: Duration,
    /// Give up (readiness failure) after this long since spawn.
    #[serde(with = "duration_ms", rename = "timeout_ms")]
    pub timeout: Duration,
}

/// Liveness: checked every `period` once ready; `failure_threshold` consecutive failures restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LivenessSpec {
    pub probe: ProbeSpec,
    #[serde(with = "duration_ms", rename = "period_ms")]
    pub period: Duration,
    #[serde(with = "duration_ms", rename = "attempt_timeout_ms")]
    pub attempt_timeout: Duration,
    pub failure_threshold: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicy {
    Never,
    OnFailure,
    Always,
}

impl fmt::Display for RestartPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RestartPolicy::Never => "never",
            RestartPolicy::OnFailure => "on-failure",
            RestartPolicy::Always => "always",
        })
    }
}

/// When and how often to restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestartSpec {
    pub policy: RestartPolicy,
    /// Exit codes that count as success (default `[0]`).
    pub success_codes: Vec<i32>,
    #[serde(with = "duration_ms", rename = "backoff_initial_ms")]
    pub backoff_initial: Duration,
    pub backoff_factor: f64,
    #[serde(with = "duration_ms", rename = "backoff_max_ms")]
    pub backoff_max: Duration,
    /// Running this long without exiting resets the backoff.
    #[serde(with = "duration_ms", rename = "reset_after_ms")]
    pub reset_after: Duration,
    /// At most this many restarts within `window`; one more and the process is failed.
    pub max_restarts: u32,
    #[serde(with = "duration_ms", rename = "window_ms")]
    pub window: Duration,
    /// Before a process on GPUs starts again, wait at most this long for its previous run's
    /// group to be empty and the GPUs' memory to be back near its level before mcsup started
    /// anything (a CUDA context outlives its process for a while: smg-project/smg #2464). Zero
    /// does not wait.
    #[serde(
        with = "duration_ms",
        rename = "release_wait_ms",
        default = "default_release_wait"
    )]
    pub release_wait: Duration,
    /// A rank of a worker over several nodes: its restarts are decided for the whole worker by
    /// the coordinator ([`ControlSpec`]), every rank stopped and started again in one
    /// generation; `max_restarts` counts over the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<RestartUnit>,
}

/// The worker a rank restarts with ([`RestartSpec::unit`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestartUnit {
    /// `decode[0]`.
    pub worker: String,
    /// The nodes holding its ranks; the first is its leader.
    pub nodes: Vec<String>,
}

/// [`RestartSpec::release_wait`] when a plan file does not say.
pub const DEFAULT_RELEASE_WAIT: Duration = Duration::from_secs(60);

fn default_release_wait() -> Duration {
    DEFAULT_RELEASE_WAIT
}

/// How to stop a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopSpec {
    /// Sent (with SIGCONT) to the process group.
    pub signal: SignalName,
    /// Then SIGKILL to the whole group after this long.
    #[serde(with = "duration_ms", rename = "grace_ms")]
    pub grace: Duration,
    /// What the process's engine may take to stop after the signal, when mcsup knows the engine
    /// ([`crate::engine::stop`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::engine::stop::StopBudget>,
    /// Where the engine counts the requests it is serving: a drain waits for them
    /// ([`crate::engine::stop::MetricSum`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inflight: Option<crate::engine::stop::MetricSum>,
}

/// Node-wide shutdown behaviour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownSpec {
    /// The whole ordered teardown must finish within this (default 25 s < Slurm's KillWait 30 s).
    #[serde(with = "duration_ms", rename = "deadline_ms")]
    pub deadline: Duration,
    /// Signal that starts the ordered teardown and that children ignore (default SIGUSR1).
    pub drain_signal: SignalName,
    /// On the drain signal, before the teardown's deadline starts: how long the frontends may
    /// take to finish what they admitted and the workers' in-flight requests may take to end
    /// (`mcsup.shutdown.drain_seconds`). A plan written before this field existed has none.
    #[serde(default, with = "duration_ms", rename = "drain_ms")]
    pub drain: Duration,
    /// Tear down when every worker has exited (default true).
    pub exit_when_workers_done: bool,
    /// The Slurm steps with ranks on this node that another node's mcsup starts (TRT-LLM
    /// endpoints led elsewhere), as `decode[0] (step mcsup.trtllm-decode-0, led by node2)`: this
    /// node stays up until it is told to stop, even with nothing of its own left running (its
    /// step ending early would drain the job).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holds_ranks_of: Vec<String>,
}

/// The DRAM the node must keep besides the store: SGLang's HiCache L2 per role, and headroom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySpec {
    pub hicache: Vec<HiCacheL2>,
    /// DRAM kept free beyond store + HiCache (`mcsup.preflight.headroom_gib`, default 10 GiB).
    pub headroom_bytes: u64,
}

impl Default for MemorySpec {
    /// No HiCache, and the default 10 GiB headroom (a plan file written before this field
    /// existed keeps the budget it had).
    fn default() -> Self {
        MemorySpec {
            hicache: Vec::new(),
            headroom_bytes: 10 << 30,
        }
    }
}

/// One role's HiCache on this node. `--hicache-size N` is decimal GB (10^9 bytes) PER RANK;
/// `--hicache-ratio` sizes the pool from the GPU's KV pool, unknown before the GPU starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum HiCacheL2 {
    /// Not enabled for this role.
    None { role: Role },
    /// Known size.
    Sized {
        role: Role,
        per_rank_gb: u64,
        ranks: u64,
        bytes: u64,
        ranks_from: String,
        /// Where the flags came from (`roles.prefill.args`).
        key: String,
    },
    /// Ratio mode: the size depends on the GPU's KV pool.
    Ratio {
        role: Role,
        ratio: String,
        key: String,
    },
}

#[cfg(test)]
mod periods_tests {
    use super::*;

    /// The product's periods, which a printed plan leaves out and a plan file may set.
    #[test]
    fn the_planned_periods_are_the_products_and_a_plan_file_may_set_them() {
        let p = Periods::default();
        assert_eq!(p.heartbeat, Duration::from_secs(5));
        assert_eq!(p.log_dir_stall, Duration::from_secs(5));
        assert_eq!(p.frontend_watch, Duration::from_secs(2));
        assert_eq!(p.master_look, Duration::from_secs(5));
        let set: Periods = serde_json::from_str(r#"{"heartbeat_ms": 1000}"#).unwrap();
        assert_eq!(set.heartbeat, Duration::from_secs(1));
        assert_eq!(set.master_look, p.master_look);
        assert!(p.is_default() && !set.is_default());
    }
}
