//! The DRAM the node needs besides its stores, as the planner can know it: SGLang's HiCache L2
//! per role (`--hicache-size N` is decimal GB, 10^9 bytes, PER RANK; ranks on the node are
//! `mcsup.preflight.hicache_ranks.<role>` when given, else `tp-size` x `dp-size` / `nnodes`, at
//! least 1; `--hicache-ratio` sizes the pool from the GPU's KV pool, unknown before the GPU
//! starts) and the headroom. Pure; the preflight compares it with what the node has.
//!
//! Arithmetic saturates rather than wraps, and says so in `ranks_from`: a flag too large to be
//! real must make the budget fail loudly, never shrink it.

use std::collections::BTreeMap;

use super::model::JobModel;
use super::spec::{HiCacheL2, MemorySpec};
use crate::domain::Role;
use crate::recipe::McsupSection;

const GIB: u64 = 1 << 30;

/// The node's memory needs beyond the stores.
pub fn memory_spec(model: &JobModel, mc: &McsupSection, roles: &[Role]) -> MemorySpec {
    let headroom_gib = mc.preflight.headroom_gib.unwrap_or(10.0);
    let headroom_bytes = if headroom_gib.is_finite() && headroom_gib >= 0.0 {
        (headroom_gib * GIB as f64) as u64
    } else {
        10 * GIB
    };
    MemorySpec {
        hicache: hicache_for_node(model, &mc.preflight.hicache_ranks, roles),
        headroom_bytes,
    }
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

/// HiCache L2 for each role on this node (SGLang only: the flags are SGLang's).
pub fn hicache_for_node(
    model: &JobModel,
    overrides: &BTreeMap<String, u32>,
    roles: &[Role],
) -> Vec<HiCacheL2> {
    if !model.engine.host_cache_flags() {
        return Vec::new();
    }
    roles
        .iter()
        .filter_map(|&role| {
            let rm = model.roles.get(&role)?;
            let flags = rm.flags.as_ref()?;
            let get = |k: &str| flags.get(k).or_else(|| flags.get(&k.replace('-', "_")));
            let enabled = get("enable-hierarchical-cache").is_some_and(truthy);
            if !enabled {
                return Some(HiCacheL2::None { role });
            }
            if let Some(gb) = get("hicache-size").and_then(flag_u64).filter(|g| *g > 0) {
                let (ranks, from) = match overrides.get(role.as_str()) {
                    Some(r) => (
                        u64::from(*r).max(1),
                        format!("mcsup.preflight.hicache_ranks.{role}"),
                    ),
                    None => {
                        let tp = get("tp-size")
                            .or(get("tp"))
                            .and_then(flag_u64)
                            .unwrap_or(1)
                            .max(1);
                        let dp = get("dp-size")
                            .or(get("dp"))
                            .and_then(flag_u64)
                            .unwrap_or(1)
                            .max(1);
                        let nnodes = get("nnodes").and_then(flag_u64).unwrap_or(1).max(1);
                        let from = format!("tp-size {tp} x dp-size {dp} / nnodes {nnodes}");
                        // Saturated and said so: the preflight fails on a size this large
                        // instead of budgeting a wrapped "1 ranks".
                        match tp.checked_mul(dp) {
                            Some(p) => ((p / nnodes).max(1), from),
                            None => (u64::MAX, format!("{from}, which overflows 64 bits")),
                        }
                    }
                };
                return Some(HiCacheL2::Sized {
                    role,
                    per_rank_gb: gb,
                    ranks,
                    bytes: gb.saturating_mul(1_000_000_000).saturating_mul(ranks),
                    ranks_from: from,
                    key: rm.flags_key.clone(),
                });
            }
            let ratio = get("hicache-ratio")
                .map(|v| {
                    serde_yaml::to_string(v)
                        .unwrap_or_default()
                        .trim()
                        .to_string()
                })
                .unwrap_or_else(|| "2.0 (SGLang default)".into());
            Some(HiCacheL2::Ratio {
                role,
                ratio,
                key: rm.flags_key.clone(),
            })
        })
        .collect()
}
