//! Which Mooncake the node will run, and which of Mooncake's GID ranking rules applies to it.
//!
//! The version comes from the wheel's metadata next to the `mooncake_master` found on `PATH`
//! (`<prefix>/bin/mooncake_master` → `<prefix>/lib/python3.*/site-packages/
//! mooncake_transfer_engine*.dist-info/METADATA`, `Version:`). File reads only: nothing is run.
//! The auto-GID rule changed across releases (kvcache-ai/Mooncake `rdma_context.cpp`; #947
//! `51160174c`, #1077 `fe4e67ddb`, #1597 `34dacaec1`, #2269 `4d7c1a19b`):
//! ≤ 0.3.7 auto only when the index is 0; 0.3.8–0.3.9 IPv4-mapped RoCE v2 or IB only;
//! 0.3.10–0.3.11 adds IPv6 and stops at the first hole in the table; 0.3.12 and later the
//! tiered rule mcsup implements (`mooncake::gid`). The older rules are predicted too
//! (`mooncake::gid::select_gid_legacy`), where they pick another index.

use std::path::{Path, PathBuf};

use super::report::{Check, Report};

const G: &str = "tools";

/// The installed Mooncake wheel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub package: String,
    pub version: String,
    pub metadata: PathBuf,
}

/// Find `mooncake_master` on `path_var` and read its wheel's version.
pub fn detect(path_var: Option<&str>) -> Option<Installed> {
    for dir in path_var?.split(':').filter(|d| !d.is_empty()) {
        let bin = Path::new(dir).join("mooncake_master");
        if !bin.is_file() {
            continue;
        }
        let prefix = Path::new(dir).parent()?;
        let Ok(libs) = std::fs::read_dir(prefix.join("lib")) else {
            continue;
        };
        for py in libs
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
        {
            let Ok(site) = std::fs::read_dir(py.path().join("site-packages")) else {
                continue;
            };
            for e in site.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if !(name.starts_with("mooncake_transfer_engine") && name.ends_with(".dist-info")) {
                    continue;
                }
                let metadata = e.path().join("METADATA");
                let Ok(text) = std::fs::read_to_string(&metadata) else {
                    continue;
                };
                let field = |k: &str| {
                    text.lines()
                        .find_map(|l| l.strip_prefix(k))
                        .map(|v| v.trim().to_string())
                };
                if let (Some(package), Some(version)) = (field("Name:"), field("Version:")) {
                    return Some(Installed {
                        package,
                        version,
                        metadata,
                    });
                }
            }
        }
    }
    None
}

/// `(major, minor, patch)` of a version such as `0.3.13.post1`.
pub fn triple(version: &str) -> Option<(u32, u32, u32)> {
    let mut parts = version.split('.').map(|p| {
        p.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
    });
    let n = |s: Option<String>| s.and_then(|s| s.parse().ok());
    Some((
        n(parts.next())?,
        n(parts.next())?,
        n(parts.next()).unwrap_or(0),
    ))
}

/// The auto-GID rule of a release, and whether mcsup predicts it exactly.
pub fn gid_rule(version: &str) -> (&'static str, bool) {
    match triple(version) {
        Some(v) if v >= (0, 3, 12) => ("tiered ranking (0.3.12 and later)", true),
        Some(v) if v >= (0, 3, 10) => (
            "IPv4 first, then IPv6/IB, stopping at the first empty slot (0.3.10-0.3.11)",
            false,
        ),
        Some(v) if v >= (0, 3, 8) => (
            "first IPv4-mapped RoCE v2 or IB GID, netdev first (0.3.8-0.3.9)",
            false,
        ),
        Some(_) => ("auto only when the index is 0 (0.3.7 and earlier)", false),
        None => ("unknown", false),
    }
}

/// The line for a run that did not look for the install (`preflight::Scope::Verdicts` on a node
/// that does not use RDMA): no fact, no verdict.
pub fn skip_unread(protocol: &str, report: &mut Report) {
    report.push(Check::skip(
        G,
        "mooncake version",
        format!("not read: MOONCAKE_PROTOCOL is {protocol}, and no Mooncake process here transfers over TCP without the connection pool; only the RDMA checks and that one use it"),
    ));
}

/// Report the version found (or not) by [`detect`] and the GID rule it implies; facts
/// `mooncake.version`, `mooncake.gid_rule`. An older rule is a warning only where a GID is chosen:
/// over RDMA (`protocol`).
pub fn check_installed(installed: Option<&Installed>, protocol: &str, report: &mut Report) {
    match installed {
        Some(i) => {
            let (rule, exact) = gid_rule(&i.version);
            report.facts.mooncake_version = Some(i.version.clone());
            report.facts.mooncake_gid_rule = Some(rule.into());
            if !exact && protocol != "rdma" {
                report.push(Check::skip(
                    G,
                    "mooncake version",
                    format!(
                        "{} {}: its automatic GID choice is the {rule}, but MOONCAKE_PROTOCOL is {protocol}: no GID is chosen",
                        i.package, i.version
                    ),
                ));
            } else if exact {
                report.push(Check::ok(
                    G,
                    "mooncake version",
                    format!(
                        "{} {} ({}): GID choice predicted with its {rule}",
                        i.package,
                        i.version,
                        i.metadata.display()
                    ),
                ));
            } else {
                report.push(Check::warn(
                    G,
                    "mooncake version",
                    format!("{} {}: its automatic GID choice is the {rule}; where it picks another GID than 0.3.12+ would, or reads an explicit index differently (0 meaning auto up to 0.3.7, a GID without a netdev failing the device in 0.3.8-0.3.9), the RDMA checks say so", i.package, i.version),
                    "upgrade Mooncake to 0.3.12 or later, or pin MC_GID_INDEX explicitly",
                ));
            }
        }
        None => {
            report.facts.mooncake_version = Some("not found".into());
            report.facts.mooncake_gid_rule = Some("assumed 0.3.12+".into());
            report.push(Check::skip(
                G,
                "mooncake version",
                "no mooncake_master on PATH with wheel metadata beside it: GID verdicts assume the 0.3.12+ rule",
            ));
        }
    }
}

/// Whether a process's `MC_TCP_ENABLE_CONNECTION_POOL` turns the pool on, as Mooncake reads it
/// (`tcp_transport.cpp`: any value but `0`, `false` or `no`, case-insensitive).
fn pool_enabled(value: Option<&str>) -> bool {
    value.is_some_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false" | "no"))
}

/// The node's Mooncake clients (stores, and every process told where the master is) whose
/// transfers go over TCP without the connection pool: `node_protocol` where a process does not
/// set its own `MOONCAKE_PROTOCOL`.
pub fn tcp_without_pool<'a>(plan: &'a crate::plan::Plan, node_protocol: &str) -> Vec<&'a str> {
    use crate::mooncake::env;
    plan.processes
        .iter()
        .filter(|p| p.kind == crate::plan::ProcessKind::Store || p.env_value(env::MASTER).is_some())
        .filter(|p| {
            p.env_value(env::PROTOCOL)
                .map_or(node_protocol.to_string(), |v| v.trim().to_ascii_lowercase())
                == "tcp"
        })
        .filter(|p| !pool_enabled(p.env_value(TCP_POOL)))
        .map(|p| p.name.as_str())
        .collect()
}

const TCP_POOL: &str = "MC_TCP_ENABLE_CONNECTION_POOL";

/// The first release whose TCP transport reuses a few connections per peer without the pool
/// (kvcache-ai/Mooncake #2974, `a29338494`, 2026-08-11: "bounded per-peer connection lanes").
const LANES_SINCE: (u32, u32, u32) = (0, 3, 13);

/// TCP transfers and the ephemeral ports: before 0.3.13, Mooncake's TCP transport opens a socket
/// per transfer unless `MC_TCP_ENABLE_CONNECTION_POOL` is set, and sustained KV traffic runs the
/// initiator out of ports (`connect: Cannot assign requested address`; Mooncake's
/// troubleshooting guide, "TCP Transport"). Measured on loopback, 2,000 puts and gets of 64 KiB
/// through a store (`scripts/capture/mooncake_tcp_sockets.sh`): with 0.3.12.post1, 3,440 to 3,817
/// sockets entered TIME-WAIT (about one per transfer; the same with the variable 0, none with 1);
/// with 0.3.13.post1 none. `clients` are those without the pool.
pub fn check_tcp_pool(clients: &[&str], installed: Option<&Installed>, report: &mut Report) {
    const NAME: &str = "mooncake tcp connections";
    if clients.is_empty() {
        return;
    }
    let who = clients.join(", ");
    match installed.map(|i| (i, triple(&i.version))) {
        Some((i, Some(v))) if v < LANES_SINCE => report.push(Check::warn(
            G,
            NAME,
            format!(
                "{who}: {} {} over TCP opens a new connection for every transfer unless {TCP_POOL} is set; sustained KV traffic leaves a socket in TIME-WAIT per transfer until the node runs out of ephemeral ports (\"connect: Cannot assign requested address\"; Mooncake troubleshooting guide, TCP Transport)",
                i.package, i.version
            ),
            format!("set {TCP_POOL}=1 for the Mooncake processes (backend.environment, or the store's env), or upgrade Mooncake to 0.3.13 or later (TCP transfers on bounded per-peer lanes, kvcache-ai/Mooncake #2974)"),
        )),
        Some((i, Some(_))) => report.push(Check::ok(
            G,
            NAME,
            format!(
                "{who}: {} {} reuses a few TCP connections per peer without {TCP_POOL} (bounded per-peer lanes since 0.3.13)",
                i.package, i.version
            ),
        )),
        Some((i, None)) => report.push(Check::skip(
            G,
            NAME,
            format!("{who}: version {:?} of {} not understood: cannot tell whether TCP transfers need {TCP_POOL}=1 (they do before 0.3.13)", i.version, i.package),
        )),
        None => report.push(Check::skip(
            G,
            NAME,
            format!("{who}: no Mooncake found on PATH: cannot tell whether TCP transfers need {TCP_POOL}=1 (they do before 0.3.13)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_pool_is_read_as_mooncake_reads_it() {
        for (v, on) in [
            (None, false),
            (Some("0"), false),
            (Some("False"), false),
            (Some(" no "), false),
            (Some("1"), true),
            (Some("true"), true),
            (Some("yes"), true),
            (Some(""), true),
        ] {
            assert_eq!(pool_enabled(v), on, "{v:?}");
        }
    }

    #[test]
    fn tcp_without_the_pool_warns_before_0_3_13_only() {
        let at = |version: &str| Installed {
            package: "mooncake-transfer-engine-non-cuda".into(),
            version: version.into(),
            metadata: PathBuf::from("/x/METADATA"),
        };
        let verdict = |clients: &[&str], i: Option<Installed>| {
            let mut r = Report::default();
            check_tcp_pool(clients, i.as_ref(), &mut r);
            r.checks
                .iter()
                .map(|c| (c.status, c.message.clone(), c.fix.clone()))
                .collect::<Vec<_>>()
        };
        let old = verdict(
            &["mooncake-store", "sglang-decode-0"],
            Some(at("0.3.12.post1")),
        );
        assert_eq!(old.len(), 1);
        assert_eq!(old[0].0, crate::preflight::Status::Warn);
        assert!(old[0].1.starts_with("mooncake-store, sglang-decode-0: mooncake-transfer-engine-non-cuda 0.3.12.post1 over TCP"), "{}", old[0].1);
        assert!(old[0]
            .2
            .as_deref()
            .unwrap()
            .contains("MC_TCP_ENABLE_CONNECTION_POOL=1"));
        for v in ["0.3.13", "0.3.13.post1", "0.4.0"] {
            assert_eq!(
                verdict(&["s"], Some(at(v)))[0].0,
                crate::preflight::Status::Ok,
                "{v}"
            );
        }
        assert_eq!(
            verdict(&["s"], Some(at("dev")))[0].0,
            crate::preflight::Status::Skip
        );
        assert_eq!(verdict(&["s"], None)[0].0, crate::preflight::Status::Skip);
        assert!(
            verdict(&[], Some(at("0.3.9"))).is_empty(),
            "no client, no line"
        );
    }

    #[test]
    fn versions_and_rules() {
        assert_eq!(triple("0.3.13.post1"), Some((0, 3, 13)));
        assert_eq!(triple("0.3.10"), Some((0, 3, 10)));
        assert!(gid_rule("0.3.13.post1").1);
        assert!(gid_rule("0.3.12").1);
        assert!(!gid_rule("0.3.11.post1").1);
        assert!(gid_rule("0.3.9").0.contains("0.3.8-0.3.9"));
        assert!(gid_rule("0.3.7").0.contains("0.3.7"));
        assert_eq!(gid_rule("x").0, "unknown");
    }

    #[test]
    fn finds_the_wheel_next_to_the_master() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("mooncake_master"), "#!/bin/sh\n").unwrap();
        let meta = d.path().join(
            "lib/python3.11/site-packages/mooncake_transfer_engine_non_cuda-0.3.10.dist-info",
        );
        std::fs::create_dir_all(&meta).unwrap();
        std::fs::write(
            meta.join("METADATA"),
            "Metadata-Version: 2.4\nName: mooncake-transfer-engine-non-cuda\nVersion: 0.3.10\n",
        )
        .unwrap();
        let path = format!("/nonexistent:{}", bin.display());
        let i = detect(Some(&path)).unwrap();
        assert_eq!(i.version, "0.3.10");
        let mut r = Report::default();
        check_installed(Some(&i), "rdma", &mut r);
        assert_eq!(r.facts.mooncake_version.as_deref(), Some("0.3.10"));
        assert_eq!(r.checks[0].status, super::super::Status::Warn);
        // Over TCP no GID is chosen: the older rule is said, not warned about.
        let mut tcp = Report::default();
        check_installed(Some(&i), "tcp", &mut tcp);
        assert_eq!(tcp.checks[0].status, super::super::Status::Skip);
        assert_eq!(tcp.facts, r.facts);
        assert!(r
            .facts
            .mooncake_gid_rule
            .as_deref()
            .unwrap()
            .contains("0.3.10-0.3.11"));
        let mut r = Report::default();
        check_installed(detect(Some("/nonexistent")).as_ref(), "rdma", &mut r);
        assert_eq!(
            r.facts.mooncake_gid_rule.as_deref(),
            Some("assumed 0.3.12+")
        );
    }
}
