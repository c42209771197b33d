//! Host memory: what is available (MemAvailable, cgroup v2/v1 headroom, the Slurm allocation)
//! against what this node's store and HiCache need, and the locked-memory limit RDMA needs.
//!
//! [`MemoryFacts::read`] is the only reader (through the sysroot); [`budget`] is pure.

use super::report::{Budget, BudgetLine, Check, Report};
use super::system::Sysroot;
use super::StoreSizes;
use crate::mooncake::size::Bytes;
use crate::plan::HiCacheL2 as L2;
use crate::plan::Plan;

const G: &str = "memory";
/// cgroup v1's "no limit" (PAGE_COUNTER_MAX × page size, rounded); anything this large is no limit.
const V1_UNLIMITED: u64 = 0x7FFF_FFFF_FFFF_F000;

/// A cgroup memory limit that applies to this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMemory {
    pub version: u8,
    /// The cgroup (or ancestor) whose limit is tightest.
    pub path: String,
    pub limit: u64,
    pub usage: u64,
}

impl CgroupMemory {
    pub fn headroom(&self) -> u64 {
        self.limit.saturating_sub(self.usage)
    }
}

/// Hugepage pool of the default size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hugepages {
    pub page_size: u64,
    pub free: u64,
    pub reserved: u64,
}

/// Which of the system's memory files to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// `/proc/meminfo` and the cgroup's limits: the DRAM budget.
    pub budget: bool,
    /// `/proc/self/{limits,status}`: RLIMIT_MEMLOCK and CAP_IPC_LOCK, for RDMA's pinned memory.
    pub limits: bool,
}

impl Needs {
    pub const ALL: Needs = Needs {
        budget: true,
        limits: true,
    };
}

impl Default for Needs {
    fn default() -> Self {
        Needs::ALL
    }
}

/// Whether this node has a DRAM budget to check: a store, or a HiCache L2 pool.
pub fn has_budget(plan: &Plan, sizes: Option<&StoreSizes>) -> bool {
    sizes.is_some()
        || plan
            .memory
            .hicache
            .iter()
            .any(|l| !matches!(l, L2::None { .. }))
}

/// Everything the memory checks read from the system.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemoryFacts {
    /// What was read; the rest is left unknown.
    pub read: Needs,
    pub mem_total: Option<u64>,
    pub mem_available: Option<u64>,
    pub cgroup: Option<CgroupMemory>,
    /// Slurm's allocation and where it came from.
    pub slurm: Option<(u64, String)>,
    /// Slurm's variables are set but give no usable size (not a number, or more than 2^64 bytes).
    pub slurm_error: Option<String>,
    pub hugepages: Option<Hugepages>,
    /// RLIMIT_MEMLOCK soft limit: `None` = unlimited.
    pub memlock: Option<Option<u64>>,
    /// CAP_IPC_LOCK in the effective set.
    pub cap_ipc_lock: bool,
}

impl MemoryFacts {
    /// Read the facts through the sysroot (`proc/meminfo`, `proc/self/{cgroup,mountinfo,limits,status}`,
    /// the cgroup files) and Slurm's variables.
    pub fn read(root: &Sysroot, slurm_env: &[(String, String)]) -> Self {
        Self::read_for(root, slurm_env, Needs::ALL)
    }

    /// [`MemoryFacts::read`], leaving out the files `needs` does not ask for. Slurm's variables
    /// are always read: a malformed one is worth a warning on any node.
    pub fn read_for(root: &Sysroot, slurm_env: &[(String, String)], needs: Needs) -> Self {
        let mut f = MemoryFacts {
            read: needs,
            ..MemoryFacts::default()
        };
        match slurm_allocation(slurm_env) {
            Ok(a) => f.slurm = a,
            Err(e) => f.slurm_error = Some(e),
        }
        if needs.budget {
            f.read_budget(root);
        }
        if needs.limits {
            f.read_limits(root);
        }
        f
    }

    fn read_budget(&mut self, root: &Sysroot) {
        if let Some(m) = root.procfs::<procfs::Meminfo>("/proc/meminfo") {
            self.mem_total = Some(m.mem_total);
            self.mem_available = m.mem_available;
            if let (Some(size), Some(free)) = (m.hugepagesize, m.hugepages_free) {
                if m.hugepages_total.unwrap_or(0) > 0 {
                    self.hugepages = Some(Hugepages {
                        page_size: size,
                        free,
                        reserved: m.hugepages_rsvd.unwrap_or(0),
                    });
                }
            }
        }
        self.cgroup = read_cgroup(root);
    }

    fn read_limits(&mut self, root: &Sysroot) {
        if let Some(l) = root.procfs::<procfs::process::Limits>("/proc/self/limits") {
            self.memlock = Some(match l.max_locked_memory.soft_limit {
                procfs::process::LimitValue::Unlimited => None,
                procfs::process::LimitValue::Value(v) => Some(v),
            });
        }
        if let Some(s) = root.procfs::<procfs::process::Status>("/proc/self/status") {
            self.cap_ipc_lock = s.capeff & (1 << 14) != 0;
        }
    }
}

/// Slurm's allocation for this node: `SLURM_MEM_PER_NODE` (MiB), or `SLURM_MEM_PER_CPU` ×
/// `SLURM_CPUS_ON_NODE`. `Ok(None)` when they are not set; an error (naming the variable) when
/// they are set but are not a number or overflow 64-bit bytes (`mb << 20` used to wrap to 0 B).
pub fn slurm_allocation(env: &[(String, String)]) -> Result<Option<(u64, String)>, String> {
    let get = |k: &str| -> Result<Option<u64>, String> {
        match env.iter().find(|(n, _)| n == k).map(|(_, v)| v.trim()) {
            None | Some("") => Ok(None),
            Some(v) => v.parse::<u64>().map(Some).map_err(|_| {
                format!("{k}={v} is not a whole number of MiB (or is larger than 2^64)")
            }),
        }
    };
    let bytes = |mib: u64, what: String| {
        mib.checked_mul(1 << 20)
            .map(|b| Some((b, what.clone())))
            .ok_or_else(|| {
                format!("{what} is more than 2^64 bytes (16 EiB): not a real allocation")
            })
    };
    if let Some(mb) = get("SLURM_MEM_PER_NODE")?.filter(|m| *m > 0) {
        return bytes(mb, format!("SLURM_MEM_PER_NODE={mb} MiB"));
    }
    match (get("SLURM_MEM_PER_CPU")?, get("SLURM_CPUS_ON_NODE")?) {
        (Some(per), Some(cpus)) if per > 0 && cpus > 0 => {
            let what = format!("SLURM_MEM_PER_CPU={per} MiB x SLURM_CPUS_ON_NODE={cpus}");
            match per.checked_mul(cpus) {
                Some(mib) => bytes(mib, what),
                None => Err(format!(
                    "{what} is more than 2^64 bytes (16 EiB): not a real allocation"
                )),
            }
        }
        _ => Ok(None),
    }
}

/// The directory of a process's cgroup: the hierarchy's mount point (found in mountinfo by
/// `is_mount`, else `default_mount`) joined with the cgroup path relative to the mount's root.
/// Returns (mount point, cgroup directory).
fn cgroup_dir(
    mounts: Option<&procfs::process::MountInfos>,
    pathname: &str,
    default_mount: &str,
    is_mount: impl Fn(&procfs::process::MountInfo) -> bool,
) -> (std::path::PathBuf, std::path::PathBuf) {
    let (mount_point, mount_root) = mounts
        .and_then(|m| {
            m.0.iter()
                .find(|mi| is_mount(mi))
                .map(|mi| (mi.mount_point.clone(), mi.root.clone()))
        })
        .unwrap_or_else(|| (default_mount.into(), "/".into()));
    let rel = pathname
        .strip_prefix(&mount_root)
        .unwrap_or(pathname)
        .trim_start_matches('/');
    let dir = mount_point.join(rel);
    (mount_point, dir)
}

fn read_cgroup(root: &Sysroot) -> Option<CgroupMemory> {
    let groups = root.procfs::<procfs::ProcessCGroups>("/proc/self/cgroup")?;
    let mounts = root.procfs::<procfs::process::MountInfos>("/proc/self/mountinfo");
    // cgroup v2: the `0::/path` line and the cgroup2 mount.
    if let Some(g) = groups
        .0
        .iter()
        .find(|g| g.hierarchy == 0 && g.controllers.is_empty())
    {
        let (mount, mut dir) = cgroup_dir(mounts.as_ref(), &g.pathname, "/sys/fs/cgroup", |mi| {
            mi.fs_type == "cgroup2"
        });
        let mut best: Option<CgroupMemory> = None;
        loop {
            let usage = root.read_limit(dir.join("memory.current")).flatten();
            for file in ["memory.max", "memory.high"] {
                if let Some(Some(limit)) = root.read_limit(dir.join(file)) {
                    let c = CgroupMemory {
                        version: 2,
                        path: format!("{}/{file}", dir.display()),
                        limit,
                        usage: usage.unwrap_or(0),
                    };
                    if best.as_ref().is_none_or(|b| c.headroom() < b.headroom()) {
                        best = Some(c);
                    }
                }
            }
            if dir == mount || !dir.pop() || !dir.starts_with(&mount) {
                break;
            }
        }
        if best.is_some() {
            return best;
        }
    }
    // cgroup v1: the memory controller's hierarchy.
    let g = groups
        .0
        .iter()
        .find(|g| g.controllers.iter().any(|c| c == "memory"))?;
    let (_, dir) = cgroup_dir(
        mounts.as_ref(),
        &g.pathname,
        "/sys/fs/cgroup/memory",
        |mi| mi.fs_type == "cgroup" && mi.super_options.contains_key("memory"),
    );
    // memory.stat's hierarchical_memory_limit already is the minimum over ancestors.
    let stat = root.read(dir.join("memory.stat")).unwrap_or_default();
    let hier = stat.lines().find_map(|l| {
        l.strip_prefix("hierarchical_memory_limit ")
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    let limit = hier.or_else(|| root.read_limit(dir.join("memory.limit_in_bytes")).flatten())?;
    if limit >= V1_UNLIMITED {
        return None;
    }
    let usage = root
        .read_limit(dir.join("memory.usage_in_bytes"))
        .flatten()
        .unwrap_or(0);
    Some(CgroupMemory {
        version: 1,
        path: dir.join("memory.limit_in_bytes").display().to_string(),
        limit,
        usage,
    })
}

/// The budget: need versus the smallest available limit. Pure.
pub fn budget(
    sizes: Option<&StoreSizes>,
    hicache: &[L2],
    headroom: u64,
    facts: &MemoryFacts,
) -> Budget {
    let mut b = Budget::default();
    if let Some(s) = sizes {
        if s.hugepages {
            b.need.push(BudgetLine {
                item: "store segment".into(),
                bytes: 0,
                source: "in hugepages (MC_STORE_USE_HUGEPAGE), budgeted separately".into(),
            });
        } else {
            b.need.push(BudgetLine {
                item: "store segment".into(),
                bytes: s.segment,
                source: s.segment_source.clone(),
            });
        }
        b.need.push(BudgetLine {
            item: "store local buffer".into(),
            bytes: s.local_buffer,
            source: s.local_buffer_source.clone(),
        });
    }
    for l in hicache {
        if let L2::Sized {
            role,
            per_rank_gb,
            ranks,
            bytes,
            ranks_from,
            ..
        } = l
        {
            b.need.push(BudgetLine {
                item: format!("HiCache L2 ({role})"),
                bytes: *bytes,
                source: format!("hicache-size {per_rank_gb} GB x {ranks} ranks ({ranks_from})"),
            });
        }
    }
    b.need.push(BudgetLine {
        item: "headroom".into(),
        bytes: headroom,
        source: "mcsup.preflight.headroom_gib".into(),
    });
    b.need_total = b
        .need
        .iter()
        .map(|l| l.bytes)
        .fold(0u64, u64::saturating_add);

    if let Some(a) = facts.mem_available {
        b.available.push(BudgetLine {
            item: "MemAvailable".into(),
            bytes: a,
            source: "/proc/meminfo (host-wide)".into(),
        });
    }
    if let Some(c) = &facts.cgroup {
        b.available.push(BudgetLine {
            item: format!("cgroup v{} headroom", c.version),
            bytes: c.headroom(),
            source: format!(
                "{} limit {} - usage {}",
                c.path,
                Bytes(c.limit),
                Bytes(c.usage)
            ),
        });
    }
    if let Some((alloc, src)) = &facts.slurm {
        let used = facts.cgroup.as_ref().map_or(0, |c| c.usage);
        b.available.push(BudgetLine {
            item: "Slurm allocation".into(),
            bytes: alloc.saturating_sub(used),
            source: if used > 0 {
                format!("{src} - usage {}", Bytes(used))
            } else {
                src.clone()
            },
        });
    }
    b.available_total = b.available.iter().map(|l| l.bytes).min();
    b
}

/// The DRAM budget check.
pub fn check(plan: &Plan, sizes: Option<&StoreSizes>, facts: &MemoryFacts, report: &mut Report) {
    let hicache = &plan.memory.hicache;
    let headroom = plan.memory.headroom_bytes;
    for l in hicache {
        if let L2::Ratio { role, ratio, key } = l {
            report.push(Check::warn(
                G,
                &format!("hicache {role}"),
                format!("{role} enables HiCache with hicache-ratio {ratio}: its host pool is sized from the GPU's KV pool, unknown before the GPU starts, so it is NOT in the budget"),
                format!("set an explicit `hicache-size` (GB per rank) in {key}"),
            ));
        }
    }
    let no_budget = !has_budget(plan, sizes);
    if let Some(e) = &facts.slurm_error {
        let fix = "check the job's --mem / --mem-per-cpu (Slurm sets these in MiB), or unset the variable if something else set it";
        report.push(if no_budget {
            Check::warn(G, "slurm allocation", e, fix)
        } else {
            Check::fail(G, "slurm allocation", e, fix)
        });
    }
    if no_budget {
        report.push(Check::skip(
            G,
            "budget",
            "no store and no HiCache on this node",
        ));
        return;
    }
    let b = budget(sizes, hicache, headroom, facts);
    if overflows(hicache, &b, report) {
        report.budget = Some(b);
        return;
    }
    check_budget(&b, sizes, report);
    if let Some(s) = sizes.filter(|s| s.hugepages) {
        check_hugepages(s, facts, report);
    }
    report.budget = Some(b);
}

/// Sizes too large to be real were saturated upstream: say which, rather than budget them.
fn overflows(hicache: &[L2], b: &Budget, report: &mut Report) -> bool {
    let mut overflow = false;
    for l in hicache {
        if let L2::Sized {
            role,
            per_rank_gb,
            ranks,
            ranks_from,
            key,
            ..
        } = l
        {
            if per_rank_gb
                .checked_mul(1_000_000_000)
                .and_then(|b| b.checked_mul(*ranks))
                .is_none()
            {
                overflow = true;
                report.push(Check::fail(
                    G,
                    &format!("hicache {role}"),
                    format!("hicache-size {per_rank_gb} GB x {ranks} ranks ({ranks_from}) overflows 64-bit bytes: not a real size"),
                    format!("check hicache-size, tp-size, dp-size and nnodes in {key} (ranks on this node are tp-size x dp-size / nnodes)"),
                ));
            }
        }
    }
    if !overflow
        && b.need
            .iter()
            .try_fold(0u64, |sum, l| sum.checked_add(l.bytes))
            .is_none()
    {
        overflow = true;
        report.push(Check::fail(
            G,
            "budget",
            format!(
                "the memory needed overflows 64-bit bytes: {}",
                b.need
                    .iter()
                    .map(|l| format!("{} {} ({})", l.item, Bytes(l.bytes), l.source))
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
            "check the store sizes, hicache-size and mcsup.preflight.headroom_gib",
        ));
    }
    overflow
}

/// What the node needs against what is available.
fn check_budget(b: &Budget, sizes: Option<&StoreSizes>, report: &mut Report) {
    match b.available_total {
        None => report.push(Check::warn(
            G,
            "budget",
            "cannot tell how much memory is available (no /proc/meminfo)",
            "run the preflight on the node itself",
        )),
        Some(avail) if b.need_total <= avail => report.push(Check::ok(
            G,
            "budget",
            format!(
                "need {} of {} available ({} spare)",
                Bytes(b.need_total),
                Bytes(avail),
                Bytes(avail - b.need_total)
            ),
        )),
        Some(avail) => {
            let short = b.need_total - avail;
            let fix = match sizes {
                Some(s) if s.segment > short => format!(
                    "lower this role's MOONCAKE_GLOBAL_SEGMENT_SIZE by at least {} (to at most {}), or reduce HiCache / headroom",
                    Bytes(short),
                    Bytes(s.segment - short)
                ),
                _ => "reduce the store segment, HiCache (hicache-size) or the headroom, or request more memory (--mem)".to_string(),
            };
            report.push(Check::fail(
                G,
                "budget",
                format!(
                    "need {} but only {} is available: short by {}",
                    Bytes(b.need_total),
                    Bytes(avail),
                    Bytes(short)
                ),
                fix,
            ));
        }
    }
}

/// A hugepage-backed segment fits in the free hugepages.
fn check_hugepages(s: &StoreSizes, facts: &MemoryFacts, report: &mut Report) {
    match &facts.hugepages {
        Some(h) => {
            let free = h
                .free
                .saturating_sub(h.reserved)
                .saturating_mul(h.page_size);
            if free >= s.segment {
                report.push(Check::ok(
                    G,
                    "hugepages",
                    format!(
                        "{} free in {} pages for a {} segment",
                        Bytes(free),
                        Bytes(h.page_size),
                        Bytes(s.segment)
                    ),
                ));
            } else {
                report.push(Check::fail(
                        G,
                        "hugepages",
                        format!("MC_STORE_USE_HUGEPAGE is set but only {} of hugepages are free (free - reserved) for a {} segment", Bytes(free), Bytes(s.segment)),
                        "reserve more hugepages (vm.nr_hugepages) or unset MC_STORE_USE_HUGEPAGE",
                    ));
            }
        }
        None => report.push(Check::fail(
            G,
            "hugepages",
            "MC_STORE_USE_HUGEPAGE is set but the node has no hugepages",
            "reserve hugepages (vm.nr_hugepages) or unset MC_STORE_USE_HUGEPAGE",
        )),
    }
}

/// RLIMIT_MEMLOCK: RDMA registers the segment and local buffer on every NIC.
pub fn check_memlock(
    sizes: Option<&StoreSizes>,
    protocol: &str,
    nics: usize,
    facts: &MemoryFacts,
    report: &mut Report,
) {
    const L: &str = "limits";
    let text = match facts.memlock {
        None if !facts.read.limits => "not read".to_string(),
        None => "unknown".to_string(),
        Some(None) => "unlimited".to_string(),
        Some(Some(v)) => Bytes(v).to_string(),
    };
    if facts.read.limits {
        report.facts.memlock = Some(text.clone());
    }
    if protocol != "rdma" {
        report.push(Check::skip(
            L,
            "memlock",
            format!("RLIMIT_MEMLOCK {text}; only RDMA pins memory"),
        ));
        return;
    }
    let Some(s) = sizes else {
        report.push(Check::skip(
            L,
            "memlock",
            format!("RLIMIT_MEMLOCK {text}; no store on this node"),
        ));
        return;
    };
    let need = s
        .segment
        .saturating_add(s.local_buffer)
        .saturating_mul(nics.max(1) as u64);
    match facts.memlock {
        Some(None) => report.push(Check::ok(L, "memlock", "RLIMIT_MEMLOCK is unlimited")),
        _ if facts.cap_ipc_lock => report.push(Check::ok(L, "memlock", format!("RLIMIT_MEMLOCK {text}, but CAP_IPC_LOCK is effective"))),
        Some(Some(v)) if v >= need => report.push(Check::ok(L, "memlock", format!("RLIMIT_MEMLOCK {text} >= {} needed", Bytes(need)))),
        Some(Some(_)) => report.push(Check::fail(
            L,
            "memlock",
            format!(
                "RLIMIT_MEMLOCK is {text}, but RDMA must pin {} ((segment + local buffer) x {} NIC{}): registration will fail",
                Bytes(need),
                nics.max(1),
                if nics == 1 { "" } else { "s" }
            ),
            "raise it for jobs: PropagateResourceLimitsExcept=MEMLOCK in slurm.conf (Slurm copies the login node's 8 MiB otherwise), LimitMEMLOCK=infinity for slurmd, or `ulimit -l unlimited` in standalone.preamble",
        )),
        None => report.push(Check::warn(L, "memlock", "cannot read RLIMIT_MEMLOCK (/proc/self/limits)", "run the preflight inside the job step")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn slurm_allocation_forms() {
        let env = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            slurm_allocation(&env(&[("SLURM_MEM_PER_NODE", "1024")]))
                .unwrap()
                .unwrap()
                .0,
            1 << 30
        );
        assert_eq!(
            slurm_allocation(&env(&[
                ("SLURM_MEM_PER_CPU", "500"),
                ("SLURM_CPUS_ON_NODE", "4")
            ]))
            .unwrap()
            .unwrap()
            .0,
            2000 << 20
        );
        assert!(slurm_allocation(&env(&[("SLURM_MEM_PER_CPU", "500")]))
            .unwrap()
            .is_none());
        // Too large to be real: an error naming the variable, never a wrapped size.
        for bad in [
            &[("SLURM_MEM_PER_NODE", "17592186044416")][..],
            &[("SLURM_MEM_PER_NODE", "99999999999999999999999")][..],
            &[
                ("SLURM_MEM_PER_CPU", "9223372036854775807"),
                ("SLURM_CPUS_ON_NODE", "4"),
            ][..],
        ] {
            let e = slurm_allocation(&env(bad)).unwrap_err();
            assert!(e.contains(bad[0].0), "{e}");
        }
    }

    #[test]
    fn budget_takes_the_smallest_limit() {
        let facts = MemoryFacts {
            mem_available: Some(500 * GIB),
            cgroup: Some(CgroupMemory {
                version: 2,
                path: "x".into(),
                limit: 300 * GIB,
                usage: 20 * GIB,
            }),
            slurm: Some((400 * GIB, "s".into())),
            ..Default::default()
        };
        let sizes = StoreSizes {
            segment: 100 * GIB,
            segment_source: String::new(),
            local_buffer: 0,
            local_buffer_source: String::new(),
            hugepages: false,
        };
        let b = budget(Some(&sizes), &[], 10 * GIB, &facts);
        assert_eq!(b.need_total, 110 * GIB);
        assert_eq!(b.available_total, Some(280 * GIB));
    }

    #[test]
    fn hugepage_stores_are_budgeted_from_free_hugepages() {
        let sizes = StoreSizes {
            segment: 4 * GIB,
            segment_source: String::new(),
            local_buffer: 0,
            local_buffer_source: String::new(),
            hugepages: true,
        };
        let plan_for = |facts: &MemoryFacts| {
            let mut r = Report::default();
            let plan: Plan = serde_json::from_value(serde_json::json!({
                "node": {"name": "n", "ip": "127.0.0.1", "node_id": 0, "infra_node": "n", "infra_ip": "127.0.0.1",
                         "runs_master": false, "job_id": null, "mode": "local"},
                "roles": [], "gates": [], "processes": [], "files": [],
                "shutdown": {"deadline_ms": 1000, "drain_signal": "SIGUSR1", "exit_when_workers_done": true},
                "log_dir": "/tmp", "ignored_sections": [], "warnings": []
            }))
            .unwrap();
            check(&plan, Some(&sizes), facts, &mut r);
            r
        };
        let mut facts = MemoryFacts {
            mem_available: Some(64 * GIB),
            ..Default::default()
        };
        // 2 MiB pages: 2048 free, 100 reserved -> 3.8 GiB, short of the 4 GiB segment.
        facts.hugepages = Some(Hugepages {
            page_size: 2 << 20,
            free: 2048,
            reserved: 100,
        });
        let r = plan_for(&facts);
        let hp = r.checks.iter().find(|c| c.name == "hugepages").unwrap();
        assert_eq!(hp.status, super::super::Status::Fail, "{hp:?}");
        // The segment is not counted against DRAM when it lives in hugepages.
        assert_eq!(r.budget.as_ref().unwrap().need[0].bytes, 0);
        facts.hugepages = Some(Hugepages {
            page_size: 1 << 30,
            free: 8,
            reserved: 2,
        });
        let r = plan_for(&facts);
        assert_eq!(
            r.checks
                .iter()
                .find(|c| c.name == "hugepages")
                .unwrap()
                .status,
            super::super::Status::Ok
        );
        facts.hugepages = None;
        let r = plan_for(&facts);
        assert_eq!(
            r.checks
                .iter()
                .find(|c| c.name == "hugepages")
                .unwrap()
                .status,
            super::super::Status::Fail
        );
    }
}
