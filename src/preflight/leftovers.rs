//! Files earlier jobs left in memory-backed or shared scratch space: `/dev/shm` (NCCL's and
//! Mooncake's shared segments, PyTorch's `torch_*`, semaphores; tmpfs, so every byte is RAM the
//! store and HiCache budget counted on) and mcsup's own scratch directories
//! (`/tmp/mcsup-<job>-<node>`). One whose owner has no process left on the node is a leftover:
//! reported with owner, size and age, largest first, with the command that removes them. A warning,
//! never a failure: mcsup cannot tell a leftover from a file a live daemon of that user keeps.

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;

use super::report::{Check, Report};
use super::system::Sysroot;

const G: &str = "leftovers";
/// How many leftovers are named; the rest are counted.
const NAMED: usize = 5;

struct Leftover {
    path: String,
    uid: u32,
    bytes: u64,
    age_s: u64,
}

/// The users with a process on the node (from `/proc/<pid>/status` under the root).
fn live_uids(root: &Sysroot) -> BTreeSet<u32> {
    std::fs::read_dir(root.path("/proc"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let uid = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
            uid.split_whitespace().next()?.parse().ok()
        })
        .collect()
}

fn size_of(path: &std::path::Path, meta: &std::fs::Metadata) -> u64 {
    if !meta.is_dir() {
        return meta.len();
    }
    // A scratch directory: what is in it, one level down is enough for etcd's and NATS's data.
    let mut total = 0;
    let mut todo = vec![path.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            seen += 1;
            if seen > 10_000 {
                return total;
            }
            if let Ok(m) = e.path().symlink_metadata() {
                if m.is_dir() {
                    todo.push(e.path());
                } else {
                    total += m.len();
                }
            }
        }
    }
    total
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn age(s: u64) -> String {
    match s {
        s if s >= 86_400 => format!("{} d", s / 86_400),
        s if s >= 3_600 => format!("{} h", s / 3_600),
        s => format!("{} min", s / 60),
    }
}

fn user(uid: u32) -> String {
    super::tools::account_name(uid).unwrap_or_else(|| format!("uid {uid}"))
}

/// Report leftovers in `/dev/shm` and `$TMPDIR/mcsup-*` (`tmp` is the scratch root).
pub fn check(root: &Sysroot, tmp: &std::path::Path, report: &mut Report) {
    let live = live_uids(root);
    let now = std::time::SystemTime::now();
    let mut found: Vec<Leftover> = Vec::new();
    let places = [
        (root.path("/dev/shm"), "/dev/shm".to_string(), None),
        (root.path(tmp), tmp.display().to_string(), Some("mcsup-")),
    ];
    for (dir, shown, prefix) in places {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if prefix.is_some_and(|p| !name.starts_with(p)) {
                continue;
            }
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            if live.contains(&meta.uid()) {
                continue;
            }
            let age_s = meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .map_or(0, |d| d.as_secs());
            found.push(Leftover {
                path: format!("{shown}/{name}"),
                uid: meta.uid(),
                bytes: size_of(&e.path(), &meta),
                age_s,
            });
        }
    }
    if found.is_empty() {
        report.push(Check::ok(
            G,
            "shm and scratch",
            "nothing in /dev/shm or mcsup's scratch directories belongs to a user without a process here",
        ));
        return;
    }
    found.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.path.cmp(&b.path)));
    let total: u64 = found.iter().map(|l| l.bytes).sum();
    let named: Vec<String> = found
        .iter()
        .take(NAMED)
        .map(|l| {
            format!(
                "{} ({}, {}, {} old)",
                crate::domain::signature::for_terminal(&l.path),
                user(l.uid),
                human(l.bytes),
                age(l.age_s)
            )
        })
        .collect();
    let more = found.len().saturating_sub(NAMED);
    report.push(Check::warn(
        G,
        "shm and scratch",
        format!(
            "{} leftover(s) of users with no process on this node, {} in all: {}{}",
            found.len(),
            human(total),
            named.join("; "),
            if more > 0 {
                format!("; and {more} more")
            } else {
                String::new()
            }
        ),
        "remove them if their jobs are over (`rm -rf PATH`, as their owner or root): /dev/shm is RAM the store's segment and HiCache were budgeted from",
    ));
}
