//! Fleet view: several nodes' `mcsup preflight --json` reports, compared for differences that
//! break Mooncake between nodes (active MTU, GID index, device names, memlock) — each node's own
//! preflight cannot see those.
//!
//! Input is JSON text (one file per node, or one file with the concatenated output of
//! `srun mcsup preflight --json`); output is a [`Report`] whose checks are the cross-node verdicts.

use std::collections::BTreeMap;

use super::facts::Facts;
use super::report::{Check, Report, Status};

const G: &str = "fleet";

/// One node's report as read back.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct NodeReport {
    pub node: String,
    #[serde(default)]
    pub passed: Option<bool>,
    #[serde(default)]
    pub checks: Vec<NodeCheck>,
    #[serde(default)]
    pub facts: Facts,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct NodeCheck {
    pub name: String,
    pub status: String,
    #[serde(default)]
    pub message: String,
}

/// Parse every JSON document in `text` (concatenated documents are fine).
pub fn parse_reports(text: &str) -> Result<Vec<NodeReport>, String> {
    let mut out = Vec::new();
    for doc in serde_json::Deserializer::from_str(text).into_iter::<NodeReport>() {
        out.push(doc.map_err(|e| format!("line {} column {}: {e}", e.line(), e.column()))?);
    }
    Ok(out)
}

/// Nodes grouped by the value of one fact (nodes without it are left out).
fn group_by(
    reports: &[NodeReport],
    fact: impl Fn(&Facts) -> Option<String>,
) -> BTreeMap<String, Vec<String>> {
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in reports {
        if let Some(v) = fact(&r.facts).filter(|v| !v.is_empty()) {
            m.entry(v).or_default().push(r.node.clone());
        }
    }
    m
}

fn describe(groups: &BTreeMap<String, Vec<String>>) -> String {
    groups
        .iter()
        .map(|(v, nodes)| format!("{v} on {}", nodes.join(",")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Compare nodes.
pub fn aggregate(reports: &[NodeReport]) -> Report {
    let mut rep = Report {
        node: format!("{} nodes", reports.len()),
        ..Report::default()
    };
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reports {
        *seen.entry(r.node.as_str()).or_default() += 1;
    }
    for (n, c) in seen.iter().filter(|(_, c)| **c > 1) {
        rep.push(Check::warn(
            G,
            "duplicates",
            format!("node {n} reported {c} times; the last report counts"),
            "collect one report per node (srun --ntasks-per-node=1)",
        ));
    }
    for r in reports {
        let failed: Vec<&NodeCheck> = r.checks.iter().filter(|c| c.status == "fail").collect();
        if failed.is_empty() && r.passed != Some(false) {
            rep.push(Check::ok(
                G,
                &format!("node {}", r.node),
                "preflight passed",
            ));
        } else {
            rep.push(Check::fail(
                G,
                &format!("node {}", r.node),
                format!(
                    "preflight failed: {}",
                    failed
                        .iter()
                        .map(|c| format!("{} ({})", c.name, c.message))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
                format!("run `mcsup preflight` on {} for the fixes", r.node),
            ));
        }
    }

    let pmtu = group_by(reports, |f| f.path_mtu.map(|m| m.to_string()));
    if pmtu.len() > 1 {
        rep.push(Check::fail(
            G,
            "path mtu",
            format!("the path MTU Mooncake uses differs between nodes: {} — peers do not exchange it, so connections between them fail", describe(&pmtu)),
            "give every node the same MC_MTU (the smallest), or the same netdev MTU",
        ));
    }
    let mtu = group_by(reports, |f| f.active_mtu.map(|m| m.to_string()));
    match mtu.len() {
        0 => rep.push(Check::skip(G, "active mtu", "no node reported an RDMA MTU")),
        1 => rep.push(Check::ok(G, "active mtu", format!("{} on every node that reported one", mtu.keys().next().map_or("", String::as_str)))),
        _ => rep.push(Check::fail(
            G,
            "active mtu",
            format!("active MTU differs between nodes: {} — Mooncake does not negotiate MTU, so transfers between them fail", describe(&mtu)),
            "give every node's RoCE netdevs the same MTU",
        )),
    }

    // GID indices: per device; a fleet-wide MC_GID_INDEX only works where every node agrees.
    let mut per_node_index: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in reports {
        if let Some(v) = r.facts.gid_index.as_ref().filter(|v| !v.is_empty()) {
            let mut uniq: Vec<u32> = v.iter().map(|(_, i)| *i).collect();
            uniq.sort();
            uniq.dedup();
            let uniq: Vec<String> = uniq.iter().map(u32::to_string).collect();
            per_node_index
                .entry(uniq.join("/"))
                .or_default()
                .push(r.node.clone());
        }
    }
    match per_node_index.len() {
        0 => rep.push(Check::skip(G, "gid index", "no node reported a GID index")),
        1 => rep.push(Check::ok(G, "gid index", format!("index {} on every node", per_node_index.keys().next().map_or("", String::as_str)))),
        _ => rep.push(Check::warn(
            G,
            "gid index",
            format!("the usable GID index differs between nodes: {}; one MC_GID_INDEX in the recipe cannot suit them all", describe(&per_node_index)),
            "unset MC_GID_INDEX (let Mooncake pick per node) or fix the nodes' IP configuration so the index matches",
        )),
    }

    let devices = group_by(reports, |f| f.devices_present.as_ref().map(|d| d.join(",")));
    if devices.len() > 1 {
        rep.push(Check::warn(
            G,
            "device names",
            format!("RDMA device names differ between nodes: {}", describe(&devices)),
            "use MOONCAKE_DEVICE names present on every node (or auto-discovery); udev renames (rocep*) differ per host",
        ));
    } else if devices.len() == 1 {
        rep.push(Check::ok(
            G,
            "device names",
            format!(
                "{} on every node",
                devices.keys().next().map_or("", String::as_str)
            ),
        ));
    }

    // The fabric variables: each node's preflight checks its own against its devices; a value
    // that differs between nodes is worth a look (right only where the devices differ too).
    for var in super::fabric::VARIABLES {
        let values = group_by(reports, |f| {
            Some(f.fabric(var).unwrap_or("(unset)").to_string())
        });
        let any_set = values.keys().any(|v| v != "(unset)");
        if values.len() > 1 && any_set {
            rep.push(Check::warn(
                G,
                var,
                format!("{var} differs between nodes: {}", describe(&values)),
                "give every node the same value unless their devices differ (each node's own preflight checks its value against its devices)",
            ));
        } else if let Some(v) = values.keys().next().filter(|_| any_set) {
            rep.push(Check::ok(G, var, format!("{v} on every node")));
        }
    }

    let memlock = group_by(reports, |f| f.memlock.clone());
    if memlock.len() > 1 {
        let status = if memlock.keys().any(|k| k != "unlimited") {
            Status::Fail
        } else {
            Status::Ok
        };
        let msg = format!(
            "RLIMIT_MEMLOCK differs between nodes: {}",
            describe(&memlock)
        );
        let fix = "make every node's slurmd run with LimitMEMLOCK=infinity and set PropagateResourceLimitsExcept=MEMLOCK";
        rep.push(if status == Status::Fail {
            Check::fail(G, "memlock", msg, fix)
        } else {
            Check::ok(G, "memlock", msg)
        });
    } else if let Some(v) = memlock.keys().next() {
        rep.push(Check::ok(G, "memlock", format!("{v} on every node")));
    }
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabric_values_that_differ_between_nodes_are_warned() {
        let report = |node: &str, facts: &str| {
            format!(r#"{{"node": "{node}", "passed": true, "checks": [], "facts": {{{facts}}}}}"#)
        };
        let text = [
            report(
                "n1",
                r#""fabric.NCCL_IB_HCA": "=mlx5_0,mlx5_1", "fabric.UCX_NET_DEVICES": "mlx5_0:1""#,
            ),
            report(
                "n2",
                r#""fabric.NCCL_IB_HCA": "=mlx5_0,mlx5_1", "fabric.UCX_NET_DEVICES": "all""#,
            ),
            report("n3", r#""fabric.NCCL_IB_HCA": "=mlx5_0,mlx5_1""#),
        ]
        .join("\n");
        let rep = aggregate(&parse_reports(&text).unwrap());
        let check = |name: &str| rep.checks.iter().find(|c| c.name == name).cloned();
        let hca = check("NCCL_IB_HCA").expect("NCCL_IB_HCA compared");
        assert_eq!(hca.status, Status::Ok);
        assert!(
            hca.message.contains("=mlx5_0,mlx5_1 on every node"),
            "{}",
            hca.message
        );
        let ucx = check("UCX_NET_DEVICES").expect("UCX_NET_DEVICES compared");
        assert_eq!(ucx.status, Status::Warn);
        assert_eq!(
            ucx.message,
            "UCX_NET_DEVICES differs between nodes: (unset) on n3; all on n2; mlx5_0:1 on n1"
        );
        assert!(
            check("NCCL_SOCKET_IFNAME").is_none(),
            "set nowhere: not compared"
        );
    }

    fn doc(node: &str, mtu: &str, gid: &str, devs: &str, memlock: &str, fail: bool) -> String {
        let status = if fail { "fail" } else { "ok" };
        format!(
            r#"{{"passed": {}, "node": "{node}", "checks": [{{"group":"rdma","name":"x","status":"{status}","message":"m"}}],
               "facts": {{"rdma.active_mtu": "{mtu}", "rdma.gid_index": "{gid}", "rdma.devices_present": "{devs}", "memlock": "{memlock}"}}}}"#,
            !fail
        )
    }

    #[test]
    fn finds_cross_node_differences() {
        let text = format!(
            "{}\n{}",
            doc(
                "n1",
                "4096",
                "mlx5_0=3,mlx5_1=3",
                "mlx5_0,mlx5_1",
                "unlimited",
                false
            ),
            doc(
                "n2",
                "1024",
                "mlx5_0=5,mlx5_1=5",
                "mlx5_0,mlx5_1",
                "8 MiB",
                true
            )
        );
        let r = aggregate(&parse_reports(&text).unwrap());
        let st = |n: &str| r.checks.iter().find(|c| c.name == n).unwrap().status;
        assert_eq!(st("active mtu"), Status::Fail);
        assert_eq!(st("gid index"), Status::Warn);
        assert_eq!(st("memlock"), Status::Fail);
        assert_eq!(st("node n1"), Status::Ok);
        assert_eq!(st("node n2"), Status::Fail);
        assert_eq!(st("device names"), Status::Ok);
        assert!(!r.passed(false));
    }

    #[test]
    fn path_mtu_differences_fail_even_with_equal_active_mtus() {
        let doc = |node: &str, pmtu: &str| {
            format!(
                r#"{{"passed": true, "node": "{node}", "checks": [], "facts": {{"rdma.active_mtu": "4096", "rdma.path_mtu": "{pmtu}"}}}}"#
            )
        };
        let r = aggregate(
            &parse_reports(&format!("{}\n{}", doc("n1", "4096"), doc("n2", "1024"))).unwrap(),
        );
        let c = r.checks.iter().find(|c| c.name == "path mtu").unwrap();
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.message.contains("n1") || c.message.contains("4096"),
            "{}",
            c.message
        );
        let same = aggregate(
            &parse_reports(&format!("{}\n{}", doc("n1", "1024"), doc("n2", "1024"))).unwrap(),
        );
        assert!(same.checks.iter().all(|c| c.name != "path mtu"));
    }

    #[test]
    fn identical_nodes_pass() {
        let text = format!(
            "{}{}",
            doc("n1", "4096", "mlx5_0=3", "mlx5_0", "unlimited", false),
            doc("n2", "4096", "mlx5_0=3", "mlx5_0", "unlimited", false)
        );
        let r = aggregate(&parse_reports(&text).unwrap());
        assert!(r.passed(true), "{}", r.to_human(true));
    }
}
