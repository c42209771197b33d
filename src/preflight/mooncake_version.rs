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
        format!("not read: MOONCAKE_PROTOCOL is {protocol}, and only the RDMA checks use it"),
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

#[cfg(test)]
mod tests {
    use super::*;

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
