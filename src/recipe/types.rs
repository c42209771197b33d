//! The recipe's data types, as written in YAML. Field docs are the recipe reference.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::lenient::visit_lenient;
pub use super::store::{HealthCheck, MooncakeKvStore, Placement, Placements, Standalone};
use super::values::*;

/// A whole recipe file.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Recipe {
    /// srt-slurm's `backend:` section.
    pub backend: Option<Backend>,
    /// srt-slurm's top-level `environment:` (applied to every worker).
    pub environment: EnvMap,
    /// mcsup's own section.
    pub mcsup: Option<McsupSection>,
    /// srt-slurm 2.0's `schema:` (2); absent in v1 recipes.
    pub schema: Option<u32>,
    /// srt-slurm 2.0's `engine:` (v1's `backend`).
    pub engine: Option<super::v2::Engine>,
    /// srt-slurm 2.0's `roles:` (v1's `*_environment` and `<engine>_config`).
    pub roles: Option<super::v2::Roles>,
    /// srt-slurm 2.0's typed `services:`.
    pub services: Option<Vec<super::v2::ServiceConfig>>,
    /// `frontend:` (only `type` is read: a dynamo frontend implies etcd, and NATS for a NATS
    /// plane, in 2.0).
    pub frontend: Option<serde_yaml::Value>,
    /// `dynamo:` (only `request_plane` / `event_plane` are read).
    pub dynamo: Option<serde_yaml::Value>,
    /// Key paths of sections accepted but not interpreted (e.g. `model`, `slurm`, `benchmark`).
    pub ignored: Vec<String>,
    /// Where each key stands in the file, for errors found after parsing.
    #[serde(skip)]
    pub positions: super::locate::KeyIndex,
    /// What the plan says about the file itself (another user could write it).
    #[serde(skip)]
    pub file_warnings: Vec<String>,
    /// The whole document, for the few values the planner reads from sections mcsup does not
    /// type (`resources`, `model`, `health_check`, `backend.kv_events_config`).
    #[serde(skip)]
    pub raw: serde_yaml::Value,
}

impl Recipe {
    /// A value of the raw document by key path (`["resources", "gpus_per_node"]`).
    pub fn raw_get(&self, path: &[&str]) -> Option<&serde_yaml::Value> {
        let mut v = &self.raw;
        for k in path {
            v = v.get(*k)?;
        }
        Some(v).filter(|v| !v.is_null())
    }

    /// A plan error about this recipe, placed in its `file` at the key's line (or its nearest
    /// ancestor's).
    pub fn place(
        &self,
        file: &std::path::Path,
        e: &crate::domain::PlanError,
    ) -> crate::domain::Diagnostic {
        let at = match e.at_value {
            true => self.positions.find_value(&e.key_path),
            false => None,
        };
        e.diagnostic()
            .in_file(file, at.or_else(|| self.positions.find(&e.key_path)))
    }
}

const RECIPE_KEYS: &[&str] = &[
    "backend",
    "environment",
    "mcsup",
    "schema",
    "engine",
    "roles",
    "services",
    "frontend",
    "dynamo",
];

impl<'de> Deserialize<'de> for Recipe {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Recipe;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a recipe: a YAML mapping with a `backend:` section")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Recipe, A::Error> {
                let mut r = Recipe::default();
                let mut ignored = Vec::new();
                visit_lenient(&mut map, RECIPE_KEYS, "", &mut ignored, |key, map| {
                    match key {
                        "backend" => r.backend = map.next_value()?,
                        "environment" => r.environment = map.next_value()?,
                        "schema" => {
                            let v: u32 = map.next_value()?;
                            if v != 2 {
                                return Err(de::Error::custom(at_key(
                                    "schema",
                                    format!("schema {v} is not a recipe layout mcsup reads"),
                                    "write `schema: 2` for an srt-slurm 2.0 recipe, or drop `schema:` for a v1 recipe",
                                )));
                            }
                            r.schema = Some(v);
                        }
                        "engine" => r.engine = map.next_value()?,
                        "roles" => r.roles = map.next_value()?,
                        "services" => r.services = map.next_value()?,
                        "frontend" => r.frontend = map.next_value()?,
                        "dynamo" => r.dynamo = map.next_value()?,
                        _ => r.mcsup = map.next_value()?,
                    }
                    Ok(())
                })?;
                r.ignored = ignored;
                Ok(r)
            }
        }
        d.deserialize_map(V)
    }
}

/// srt-slurm's `backend:` section. Keys mcsup does not interpret are listed as ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Backend {
    /// `backend.type` as written (srtctl's default `sglang` when absent): the engine registry
    /// (`crate::engine::ENGINES`) decides what it names.
    pub r#type: Option<String>,
    pub prefill_environment: EnvMap,
    pub decode_environment: EnvMap,
    pub aggregated_environment: EnvMap,
    pub sglang_config: Option<RoleFlags>,
    pub vllm_config: Option<RoleFlags>,
    /// The mocker's per-mode flags (`MockerServerConfig`).
    pub mocker_config: Option<RoleFlags>,
    /// `null` or absent: Mooncake is not managed.
    pub mooncake_kv_store: Option<MooncakeKvStore>,
    pub ignored: Vec<String>,
}

/// The `backend:` keys mcsup reads.
pub const BACKEND_KEYS: &[&str] = &[
    "type",
    "prefill_environment",
    "decode_environment",
    "aggregated_environment",
    "sglang_config",
    "vllm_config",
    "mocker_config",
    "mooncake_kv_store",
];

impl<'de> Deserialize<'de> for Backend {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Backend;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("the backend section (a mapping)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Backend, A::Error> {
                let mut b = Backend::default();
                let mut ignored = Vec::new();
                visit_lenient(
                    &mut map,
                    BACKEND_KEYS,
                    "backend.",
                    &mut ignored,
                    |key, map| {
                        match key {
                            "type" => b.r#type = Some(map.next_value()?),
                            "prefill_environment" => b.prefill_environment = map.next_value()?,
                            "decode_environment" => b.decode_environment = map.next_value()?,
                            "aggregated_environment" => {
                                b.aggregated_environment = map.next_value()?
                            }
                            "sglang_config" => b.sglang_config = map.next_value()?,
                            "vllm_config" => b.vllm_config = map.next_value()?,
                            "mocker_config" => b.mocker_config = map.next_value()?,
                            _ => b.mooncake_kv_store = map.next_value()?,
                        }
                        Ok(())
                    },
                )?;
                b.ignored = ignored;
                Ok(b)
            }
        }
        d.deserialize_map(V)
    }
}

impl Backend {
    /// The per-role flags under `backend.<section>` (`sglang_config`, `vllm_config`,
    /// `mocker_config`), when the section is one of those and set.
    pub fn role_flags(&self, section: &str) -> Option<&RoleFlags> {
        match section {
            "sglang_config" => self.sglang_config.as_ref(),
            "vllm_config" => self.vllm_config.as_ref(),
            "mocker_config" => self.mocker_config.as_ref(),
            _ => None,
        }
    }
}

/// Per-role free-form flags (`sglang_config` / `vllm_config`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleFlags {
    #[serde(default)]
    pub prefill: Option<FlagMap>,
    #[serde(default)]
    pub decode: Option<FlagMap>,
    #[serde(default, alias = "agg")]
    pub aggregated: Option<FlagMap>,
}

impl RoleFlags {
    pub fn for_role(&self, role: crate::domain::Role) -> Option<&FlagMap> {
        use crate::domain::Role;
        match role {
            Role::Prefill => self.prefill.as_ref(),
            Role::Decode => self.decode.as_ref(),
            Role::Aggregated => self.aggregated.as_ref(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// mcsup's own section
// ---------------------------------------------------------------------------------------------

/// `mcsup:` — what srt-slurm leaves to its orchestrator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McsupSection {
    #[serde(default)]
    pub master: MasterConfig,
    #[serde(default)]
    pub store: StoreConfig,
    /// Worker processes per role. A role without an entry gets one worker derived from
    /// `sglang_config` / `vllm_config`, if present.
    #[serde(default)]
    pub workers: WorkersConfig,
    /// Defaults for every worker's stop/restart policy.
    #[serde(default)]
    pub worker_defaults: PolicyConfig,
    #[serde(default)]
    pub shutdown: ShutdownConfig,
    /// Log directory; placeholders `{job_id}` and `{node}` allowed. Default `mcsup-logs/{job_id}`.
    #[serde(default)]
    pub log_dir: Option<String>,
    /// Node name → address, for nodes whose name does not resolve to the right interface.
    #[serde(default)]
    pub node_addresses: BTreeMap<String, String>,
    #[serde(default)]
    pub preflight: PreflightConfig,
    /// Supervision of `services:` entries, by service name (stop, restart, liveness).
    #[serde(default)]
    pub services: BTreeMap<String, ServicePolicyConfig>,
    /// Where srtctl's `/configs` binaries (etcd, nats-server) are on this machine; default
    /// `/configs`, the path srtctl mounts into its containers.
    #[serde(default)]
    pub configs_dir: Option<String>,
    /// Accept a node on which nothing runs (no service, store or worker). Default false: such a
    /// plan is an error, so a recipe mcsup misreads cannot pass as an empty success.
    #[serde(default)]
    pub allow_empty_node: bool,
    /// What mcsup derives from the node's network when it starts there.
    #[serde(default)]
    pub network: NetworkConfig,
    /// The TCP port of the job's control connection on the infra node (its mcsup coordinates
    /// the restarts of workers over several nodes and tells every node when one failed).
    /// Default: a free port, chosen at start and written with the secret into the log directory.
    #[serde(default)]
    pub control_port: Option<Port>,
    /// The canary: a 1-token completion through the job's endpoint while it serves.
    #[serde(default)]
    pub canary: CanaryConfig,
    /// The liveness probe mcsup gives the workers it derives (each engine's own signal).
    #[serde(default)]
    pub engine_liveness: EngineLivenessConfig,
}

/// `mcsup.engine_liveness`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineLivenessConfig {
    /// Default true.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Default 10.
    #[serde(default)]
    pub period_seconds: Option<PositiveSeconds>,
    /// One probe's bound. Default 5 (20 for SGLang's `/health_generate`).
    #[serde(default)]
    pub timeout_seconds: Option<PositiveSeconds>,
    /// Failures in a row before the worker is stopped (then its restart policy). Default 6.
    #[serde(default)]
    pub failure_threshold: Option<u32>,
    /// A worker with requests in flight whose progress counter (Dynamo's response bytes) has not
    /// grown this long fails its liveness attempts. Default 120; 0 turns the check off.
    #[serde(default)]
    pub stall_seconds: Option<Seconds>,
}

/// `mcsup.canary`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CanaryConfig {
    /// Default true (on the node that runs the job's public endpoint).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Default 30.
    #[serde(default)]
    pub period_seconds: Option<PositiveSeconds>,
    /// Failures in a row before `canary-failed`. Default 3.
    #[serde(default)]
    pub failure_threshold: Option<u32>,
    /// One request's bound. Default 10.
    #[serde(default)]
    pub timeout_seconds: Option<PositiveSeconds>,
    /// `report` (default: an event, `DEGRADED`, a metric) or `drain` (the job ends, exit code 6).
    #[serde(default)]
    pub on_failure: Option<CanaryAction>,
}

/// What a failed canary does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CanaryAction {
    #[default]
    Report,
    Drain,
}

/// `mcsup.network`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    /// Give each worker the HCAs nearest its GPUs (`UCX_NET_DEVICES`, `MOONCAKE_DEVICE`,
    /// `NCCL_IB_HCA`), from the node's sysfs, in place of what the recipe sets.
    #[serde(default)]
    pub per_gpu_hca: bool,
}

/// `mcsup.services.<name>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServicePolicyConfig {
    #[serde(default)]
    pub stop: Option<StopConfig>,
    #[serde(default)]
    pub restart: Option<RestartConfig>,
    #[serde(default)]
    pub liveness: Option<LivenessConfig>,
}

/// `mcsup.master`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MasterConfig {
    /// Default `[mooncake_master]`.
    #[serde(default)]
    pub command: Option<Command>,
    /// Default 8700.
    #[serde(default)]
    pub rpc_port: Option<Port>,
    /// Default 8701.
    #[serde(default)]
    pub metadata_port: Option<Port>,
    /// Default 8702.
    #[serde(default)]
    pub metrics_port: Option<Port>,
    #[serde(default)]
    pub env: EnvMap,
    /// Readiness timeout, default 120 s.
    #[serde(default)]
    pub timeout_seconds: Option<PositiveSeconds>,
    #[serde(default)]
    pub stop: Option<StopConfig>,
    #[serde(default)]
    pub restart: Option<RestartConfig>,
    /// Pass `--enable_metadata_cleanup_on_timeout=true --client_ttl=10` (unless the master's args
    /// set them): a crashed client's metadata is removed with its segment. Default true.
    #[serde(default)]
    pub metadata_cleanup: Option<bool>,
}

/// `mcsup.store`: supervision of the standalone store (what it runs comes from
/// `backend.mooncake_kv_store.standalone`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Default: SIGINT (older store services handle only SIGINT) and the store's grace
    /// (`plan::policy::policy_defaults`; docs/recipe.md states it, tested).
    #[serde(default)]
    pub stop: Option<StopConfig>,
    /// Default on-failure, 3 restarts in 10 minutes.
    #[serde(default)]
    pub restart: Option<RestartConfig>,
    #[serde(default)]
    pub liveness: Option<LivenessConfig>,
    /// The first store's client HTTP port (`MOONCAKE_CLIENT_HTTP_PORT`, its `/health` is the
    /// store's liveness); the node's next stores get the ports after it. Default 9300,
    /// Mooncake's.
    #[serde(default)]
    pub client_http_port: Option<Port>,
    /// At most this many of the job's stores register with the Mooncake master at a time; the
    /// next node's stores start once the master lists those before at their size. Default 8
    /// (`plan::stores::REGISTER_AT_ONCE`); 0: no limit.
    #[serde(default)]
    pub register_at_once: Option<u32>,
}

/// `mcsup.worker_defaults`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    #[serde(default)]
    pub stop: Option<StopConfig>,
    #[serde(default)]
    pub restart: Option<RestartConfig>,
}

/// `mcsup.workers`: per role, a list of worker processes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkersConfig {
    #[serde(default)]
    pub prefill: Option<Vec<WorkerConfig>>,
    #[serde(default)]
    pub decode: Option<Vec<WorkerConfig>>,
    #[serde(default, alias = "agg")]
    pub aggregated: Option<Vec<WorkerConfig>>,
}

impl WorkersConfig {
    pub fn for_role(&self, role: crate::domain::Role) -> Option<&Vec<WorkerConfig>> {
        use crate::domain::Role;
        match role {
            Role::Prefill => self.prefill.as_ref(),
            Role::Decode => self.decode.as_ref(),
            Role::Aggregated => self.aggregated.as_ref(),
        }
    }
}

fn yes() -> bool {
    true
}

fn one() -> u32 {
    1
}

/// One worker entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// Process name (unique on the node); with `count` > 1 each instance gets `-<index>`.
    pub name: String,
    pub command: Command,
    #[serde(default)]
    pub args: Words,
    #[serde(default)]
    pub env: EnvMap,
    /// Instances on each node, default 1. `{index}` tells them apart.
    #[serde(default = "one")]
    pub count: u32,
    #[serde(default)]
    pub preamble: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub readiness: Option<ReadinessConfig>,
    #[serde(default)]
    pub liveness: Option<LivenessConfig>,
    #[serde(default)]
    pub stop: Option<StopConfig>,
    #[serde(default)]
    pub restart: Option<RestartConfig>,
    /// A critical worker that fails tears the node down. Default true.
    #[serde(default = "yes")]
    pub critical: bool,
}

/// How to stop a process.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopConfig {
    #[serde(default)]
    pub signal: Option<SignalValue>,
    #[serde(default)]
    pub grace_seconds: Option<Seconds>,
}

/// Restart policy name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartPolicyName {
    Never,
    #[serde(alias = "on_failure")]
    OnFailure,
    Always,
}

/// When and how often to restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartConfig {
    #[serde(default)]
    pub policy: Option<RestartPolicyName>,
    #[serde(default)]
    pub success_codes: Option<Vec<i32>>,
    #[serde(default)]
    pub backoff_initial_seconds: Option<Seconds>,
    #[serde(default)]
    pub backoff_factor: Option<f64>,
    #[serde(default)]
    pub backoff_max_seconds: Option<Seconds>,
    #[serde(default)]
    pub reset_after_seconds: Option<Seconds>,
    #[serde(default)]
    pub max_restarts: Option<u32>,
    #[serde(default)]
    pub window_seconds: Option<PositiveSeconds>,
    /// Before a restart on GPUs: how long to wait for the previous run's GPU memory (0 = not).
    #[serde(default)]
    pub release_wait_seconds: Option<Seconds>,
}

/// A worker's readiness: every probe given must pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadinessConfig {
    #[serde(default)]
    pub tcp: Option<TcpProbeConfig>,
    #[serde(default)]
    pub http: Option<HttpProbeConfig>,
    #[serde(default)]
    pub exec: Option<Command>,
    /// Regex matched against each line the process prints.
    #[serde(default)]
    pub log_line: Option<Pattern>,
    /// A path that must exist.
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub timeout_seconds: Option<PositiveSeconds>,
    #[serde(default)]
    pub initial_delay_seconds: Option<Seconds>,
    #[serde(default)]
    pub interval_seconds: Option<PositiveSeconds>,
}

/// Liveness: one probe, checked periodically once ready.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LivenessConfig {
    #[serde(default)]
    pub tcp: Option<TcpProbeConfig>,
    #[serde(default)]
    pub http: Option<HttpProbeConfig>,
    #[serde(default)]
    pub exec: Option<Command>,
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub period_seconds: Option<PositiveSeconds>,
    #[serde(default)]
    pub timeout_seconds: Option<PositiveSeconds>,
    #[serde(default)]
    pub failure_threshold: Option<u32>,
}

/// `tcp: {port: 30000}` (host defaults to 127.0.0.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpProbeConfig {
    #[serde(default)]
    pub host: Option<String>,
    pub port: Port,
}

/// `http: {port: 30000, path: /health, status: 200}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpProbeConfig {
    #[serde(default)]
    pub host: Option<String>,
    pub port: Port,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub body_contains: Option<String>,
}

/// `mcsup.shutdown`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// Whole-teardown deadline, default 25 s (under Slurm's default KillWait of 30 s).
    #[serde(default)]
    pub deadline_seconds: Option<PositiveSeconds>,
    /// Default SIGUSR1.
    #[serde(default)]
    pub drain_signal: Option<SignalValue>,
    /// On the drain signal, how long in-flight requests may take to end before the teardown
    /// proper (default 30 s; 0: no wait).
    #[serde(default)]
    pub drain_seconds: Option<Seconds>,
    /// Tear the node down once every worker has exited. Default true.
    #[serde(default)]
    pub exit_when_workers_done: Option<bool>,
}

/// `mcsup.preflight`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreflightConfig {
    /// DRAM kept free beyond store + HiCache, in GiB (2^30). Default 10.
    #[serde(default)]
    pub headroom_gib: Option<f64>,
    /// HiCache ranks per node, per role (default: derived from `tp-size` etc.).
    #[serde(default)]
    pub hicache_ranks: BTreeMap<String, u32>,
}
