//! HiCache L2 (host DRAM) that SGLang will take on this node, from `sglang_config.<role>`.
//!
//! `--hicache-size N` is decimal GB (10^9 bytes) PER RANK; ranks on the node are
//! `mcsup.preflight.hicache_ranks.<role>` when given, else `tp-size` × `dp-size` / `nnodes`
//! (a node runs its share of the model's ranks), at least 1. `--hicache-ratio` mode sizes the pool
//! from the GPU's KV pool, unknown before the GPU starts: reported as unknown.

use crate::plan::Role;
use crate::recipe::Recipe;

/// One role's HiCache on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L2 {
    /// Not enabled for this role.
    None,
    /// Known size.
    Sized {
        role: Role,
        per_rank_gb: u64,
        ranks: u64,
        bytes: u64,
        ranks_from: String,
    },
    /// Ratio mode: the size depends on the GPU's KV pool.
    Ratio { role: Role, ratio: String },
}

fn flag_u64(v: &serde_yaml::Value) -> Option<u64> {
    match v {
        serde_yaml::Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64)),
        serde_yaml::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn truthy(v: &serde_yaml::Value) -> bool {
    match v {
        serde_yaml::Value::Bool(b) => *b,
        serde_yaml::Value::String(s) => {
            matches!(s.to_ascii_lowercase().as_str(), "true" | "1" | "yes")
        }
        serde_yaml::Value::Null => true,
        _ => false,
    }
}

/// HiCache L2 for each role on this node.
pub fn l2_for_node(recipe: &Recipe, roles: &[Role]) -> Vec<L2> {
    let Some(sg) = recipe
        .backend
        .as_ref()
        .and_then(|b| b.sglang_config.as_ref())
    else {
        return Vec::new();
    };
    let overrides = recipe
        .mcsup
        .as_ref()
        .map(|m| m.preflight.hicache_ranks.clone())
        .unwrap_or_default();
    roles
        .iter()
        .filter_map(|&role| {
            let flags = sg.for_role(role)?;
            let enabled = flags.get("enable-hierarchical-cache").is_some_and(truthy);
            if !enabled {
                return Some(L2::None);
            }
            if let Some(gb) = flags
                .get("hicache-size")
                .and_then(flag_u64)
                .filter(|g| *g > 0)
            {
                let (ranks, from) = match overrides.get(role.as_str()) {
                    Some(r) => (
                        u64::from(*r).max(1),
                        format!("mcsup.preflight.hicache_ranks.{role}"),
                    ),
                    None => {
                        let tp = flags
                            .get("tp-size")
                            .or(flags.get("tp"))
                            .and_then(flag_u64)
                            .unwrap_or(1)
                            .max(1);
                        let dp = flags
                            .get("dp-size")
                            .or(flags.get("dp"))
                            .and_then(flag_u64)
                            .unwrap_or(1)
                            .max(1);
                        let nnodes = flags.get("nnodes").and_then(flag_u64).unwrap_or(1).max(1);
                        (
                            (tp * dp / nnodes).max(1),
                            format!("tp-size {tp} x dp-size {dp} / nnodes {nnodes}"),
                        )
                    }
                };
                return Some(L2::Sized {
                    role,
                    per_rank_gb: gb,
                    ranks,
                    bytes: gb.saturating_mul(1_000_000_000).saturating_mul(ranks),
                    ranks_from: from,
                });
            }
            let ratio = flags
                .get("hicache-ratio")
                .map(|v| {
                    serde_yaml::to_string(v)
                        .unwrap_or_default()
                        .trim()
                        .to_string()
                })
                .unwrap_or_else(|| "2.0 (SGLang default)".into());
            Some(L2::Ratio { role, ratio })
        })
        .collect()
}
