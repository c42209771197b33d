//! `backend.mooncake_kv_store`: the managed Mooncake master's settings, the workers' Mooncake
//! environment and the seed's standalone stores. Shared by v1 recipes (`types`) and srt-slurm
//! 2.0's `mooncake-store` service (`v2`), which reuses the standalone store's settings.

use std::collections::BTreeMap;

use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize};

use super::values::*;

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
