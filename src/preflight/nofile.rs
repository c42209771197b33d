//! Open files: mcsup holds a few descriptors for every process it runs (its output pipe, its log
//! file, the exec handshake while it starts) and, on the coordinator, one connection per node.
//! mcsup raises its own soft limit to the hard one at start (its processes keep theirs), so the
//! hard limit is what must hold them (round 4's M7: 1024 sleepers under `ulimit -Sn 1024` failed
//! half their spawns with EMFILE, and then the teardown's own timer).

use super::report::{Check, Report};
use super::system::Sysroot;
use crate::plan::Plan;

/// Descriptors mcsup needs besides its processes' and nodes': its runtime, signals, the writer,
/// probes in flight.
const BASE: u64 = 64;

/// What the plan needs: [`BASE`], 3 per process, and the control connections: on the
/// coordinator 2 per node of the job, elsewhere 2.
pub fn need(plan: &Plan) -> u64 {
    need_of(
        plan.processes.len(),
        plan.control
            .as_ref()
            .map(|c| (c.coordinator == plan.node.name, c.nodes.len())),
    )
}

/// [`need`] of `processes` processes and, with a control connection, whether this node
/// coordinates `nodes` nodes.
fn need_of(processes: usize, control: Option<(bool, usize)>) -> u64 {
    let connections = match control {
        Some((true, nodes)) => 2 * nodes as u64,
        Some((false, _)) => 2,
        None => 0,
    };
    BASE + 3 * processes as u64 + connections
}

/// The soft and hard open-files limits in `/proc/self/limits` (`u64::MAX`: unlimited).
fn read(root: &Sysroot) -> Option<(u64, u64)> {
    let l = root.procfs::<procfs::process::Limits>("/proc/self/limits")?;
    let value = |v: &procfs::process::LimitValue| match v {
        procfs::process::LimitValue::Unlimited => u64::MAX,
        procfs::process::LimitValue::Value(v) => *v,
    };
    Some((
        value(&l.max_open_files.soft_limit),
        value(&l.max_open_files.hard_limit),
    ))
}

pub fn check(plan: &Plan, root: &Sysroot, report: &mut Report) {
    let coordinates = plan
        .control
        .as_ref()
        .filter(|c| c.coordinator == plan.node.name)
        .map(|c| c.nodes.len());
    report.push(judge(
        read(root),
        need(plan),
        plan.processes.len(),
        coordinates,
    ));
}

/// The verdict on `limits` (soft, hard) for `need` descriptors of `processes` processes and, on
/// the coordinator, the connections of `nodes` nodes.
fn judge(limits: Option<(u64, u64)>, need: u64, processes: usize, nodes: Option<usize>) -> Check {
    const L: &str = "limits";
    let Some((soft, hard)) = limits else {
        return Check::skip(L, "open files", "/proc/self/limits not read");
    };
    let show = |v: u64| {
        if v == u64::MAX {
            "unlimited".to_string()
        } else {
            v.to_string()
        }
    };
    let what = format!(
        "about {need} open files for {processes} process(es){}",
        nodes.map_or(String::new(), |n| format!(
            " and the control connections of {n} node(s)"
        ))
    );
    if hard < need {
        Check::fail(
            L,
            "open files",
            format!("mcsup needs {what}, but the hard limit (ulimit -Hn) is {}: spawns would fail with EMFILE", show(hard)),
            "raise the open-files limit for jobs: nofile in /etc/security/limits.conf on the login node (Slurm propagates it, PropagateResourceLimits), or LimitNOFILE for slurmd; `ulimit -Hn` cannot be raised by the job itself",
        )
    } else if soft < need {
        Check::ok(
            L,
            "open files",
            format!(
                "mcsup needs {what}: its soft limit {} is raised to the hard {} at start (its processes keep {})",
                show(soft),
                show(hard),
                show(soft)
            ),
        )
    } else {
        Check::ok(
            L,
            "open files",
            format!("mcsup needs {what}; the limit is {}", show(soft)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preflight::report::Status;

    #[test]
    fn the_hard_limit_must_hold_every_process_and_the_coordinators_connections() {
        assert_eq!(need_of(40, None), 64 + 120);
        assert_eq!(need_of(40, Some((false, 100))), 64 + 120 + 2);
        let need = need_of(40, Some((true, 100)));
        assert_eq!(need, 64 + 120 + 200);
        let c = judge(Some((64, 4096)), need, 40, Some(100));
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(
            c.message.contains(
                "its soft limit 64 is raised to the hard 4096 at start (its processes keep 64)"
            ),
            "{}",
            c.message
        );
        let c = judge(Some((256, 256)), need, 40, Some(100));
        assert_eq!(c.status, Status::Fail, "{c:?}");
        assert!(
            c.message.contains("about 384 open files for 40 process(es) and the control connections of 100 node(s)")
                && c.message.contains("the hard limit (ulimit -Hn) is 256"),
            "{}",
            c.message
        );
        assert_eq!(
            judge(Some((u64::MAX, u64::MAX)), need, 40, None).status,
            Status::Ok
        );
        assert_eq!(judge(None, need, 40, None).status, Status::Skip);
    }

    /// `/proc/self/limits` as the kernel writes it (the preflight's fixture).
    #[test]
    fn the_limits_are_read_from_proc() {
        let d = tempfile::tempdir().unwrap();
        crate::preflight::fixture::write_proc(d.path(), &Default::default()).unwrap();
        assert_eq!(read(&Sysroot::new(d.path())), Some((20000, 20000)));
    }
}
