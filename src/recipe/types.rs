//! The recipe's data types, as written in YAML. Field docs are the recipe reference.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

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
}

/// Names close to a known key ([`crate::domain::suggest_typo`]) are treated as typos, not as
/// foreign sections, where unknown keys are otherwise tolerated.
fn close_match<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    crate::domain::suggest_typo(key, known.iter().copied())
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

/// Walk a mapping of a section mcsup shares with srt-slurm: `read` takes each known key's value;
/// other keys are tolerated (recorded in `ignored` as `<prefix><key>`, their values skipped),
/// except near-misses of a known key (a typo would otherwise be silently ignored) and duplicates.
pub(super) fn visit_lenient<'de, A: MapAccess<'de>>(
    map: &mut A,
    known: &[&str],
    prefix: &str,
    ignored: &mut Vec<String>,
    mut read: impl FnMut(&str, &mut A) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    let mut seen: Vec<String> = Vec::new();
    while let Some(key) = map.next_key::<String>()? {
        if seen.contains(&key) {
            return Err(de::Error::custom(format!(
                "duplicate key `{key}`{FIX_MARKER}keep one `{key}:`"
            )));
        }
        seen.push(key.clone());
        if known.contains(&key.as_str()) {
            read(&key, map)?;
            continue;
        }
        if let Some(k) = close_match(&key, known) {
            let what = if prefix.is_empty() {
                "top-level section"
            } else {
                "key"
            };
            return Err(de::Error::custom(at_key(
                &key,
                format!("unknown {what} `{key}`"),
                format!("did you mean `{k}`?"),
            )));
        }
        map.next_value::<IgnoredAny>()?;
        ignored.push(format!("{prefix}{key}"));
    }
    Ok(())
}

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

/// srt-slurm's inference backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendType {
    #[default]
    Sglang,
    Vllm,
    Trtllm,
}

/// srt-slurm's `backend:` section. Keys mcsup does not interpret are listed as ignored.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Backend {
    pub r#type: BackendType,
    pub prefill_environment: EnvMap,
    pub decode_environment: EnvMap,
    pub aggregated_environment: EnvMap,
    pub sglang_config: Option<RoleFlags>,
    pub vllm_config: Option<RoleFlags>,
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
                            "type" => b.r#type = map.next_value()?,
                            "prefill_environment" => b.prefill_environment = map.next_value()?,
                            "decode_environment" => b.decode_environment = map.next_value()?,
                            "aggregated_environment" => {
                                b.aggregated_environment = map.next_value()?
                            }
                            "sglang_config" => b.sglang_config = map.next_value()?,
                            "vllm_config" => b.vllm_config = map.next_value()?,
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

/// `backend.mooncake_kv_store`: the managed Mooncake master, worker env, standalone stores.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MooncakeKvStore {
    /// Container image for the master (informational: mcsup runs inside the job's container).
    #[serde(default)]
    pub container: Option<String>,
    /// Injected on every prefill/decode/aggregated worker (not on the master or stores).
    #[serde(default)]
    pub env: EnvMap,
    /// Appended to the master's argv.
    #[serde(default)]
    pub master_extra_args: Words,
    /// Replaces the default tunables when present; `[]` = Mooncake's own defaults.
    #[serde(default)]
    pub master_args: Option<Words>,
    /// vLLM only: rendered to JSON; `MOONCAKE_CONFIG_PATH` points at it.
    #[serde(default)]
    pub store_config: Option<BTreeMap<String, serde_json::Value>>,
    /// Standalone store services (the seed's feature).
    #[serde(default)]
    pub standalone: Option<Standalone>,
}

fn yes() -> bool {
    true
}

fn default_store_command() -> Command {
    Command(vec![
        "python".into(),
        "-m".into(),
        "mooncake.mooncake_store_service".into(),
    ])
}

fn default_health_check() -> Option<HealthCheck> {
    Some(HealthCheck {
        port: Port(8080),
        timeout_seconds: PositiveSeconds(120.0),
    })
}

/// `mooncake_kv_store.standalone`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Standalone {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "default_store_command")]
    pub command: Command,
    #[serde(default)]
    pub args: Words,
    #[serde(default)]
    pub env: EnvMap,
    pub placements: Placements,
    #[serde(default)]
    pub preamble: Option<String>,
    /// srun option (used by srt-slurm's launcher; recorded, not applied inside a step).
    #[serde(default)]
    pub cpus_per_task: Option<u32>,
    #[serde(default)]
    pub cpu_bind: Option<String>,
    #[serde(default)]
    pub srun_options: BTreeMap<String, serde_yaml::Value>,
    /// TCP readiness on the store's REST port; `null` disables it.
    #[serde(default = "default_health_check", deserialize_with = "nullable")]
    pub health_check: Option<HealthCheck>,
    #[serde(default = "yes")]
    pub critical: bool,
}

/// Per-role store placements. At least one must be given.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Placements {
    pub prefill: Option<Placement>,
    pub decode: Option<Placement>,
    pub aggregated: Option<Placement>,
}

impl Placements {
    pub fn for_role(&self, role: crate::domain::Role) -> Option<&Placement> {
        use crate::domain::Role;
        match role {
            Role::Prefill => self.prefill.as_ref(),
            Role::Decode => self.decode.as_ref(),
            Role::Aggregated => self.aggregated.as_ref(),
        }
    }
}

impl<'de> Deserialize<'de> for Placements {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct RolePlacements {
            #[serde(default)]
            prefill: Option<Placement>,
            #[serde(default)]
            decode: Option<Placement>,
            #[serde(default, alias = "agg")]
            aggregated: Option<Placement>,
        }
        let raw = Option::<RolePlacements>::deserialize(d)?;
        match raw {
            Some(r) if r.prefill.is_some() || r.decode.is_some() || r.aggregated.is_some() => {
                Ok(Placements { prefill: r.prefill, decode: r.decode, aggregated: r.aggregated })
            }
            _ => Err(de::Error::custom(format!(
                "placements must name at least one role{FIX_MARKER}add e.g. `decode: {{env: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: \"400gb\"}}}}` (roles: prefill, decode, aggregated)"
            ))),
        }
    }
}

/// One role's store placement.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Placement {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub env: EnvMap,
    #[serde(default)]
    pub args: Words,
}

/// Store readiness: TCP connect to `port` until `timeout_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthCheck {
    pub port: Port,
    #[serde(default = "default_timeout")]
    pub timeout_seconds: PositiveSeconds,
}

fn default_timeout() -> PositiveSeconds {
    PositiveSeconds(120.0)
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
