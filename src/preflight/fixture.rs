//! Writes fake `/proc` files (and cgroup files) under a directory, in the kernel's formats, so the
//! preflight can be tested and benchmarked on fixture nodes (`--sysroot`). Combine with
//! `mcsup_rdma::fixture` for `/sys`. Test and benchmark support: it only writes under the root
//! it is given and must never be pointed at `/`.

use std::path::Path;

const GIB_KB: u64 = 1 << 20;

/// How the fake node's /proc looks.
#[derive(Debug, Clone)]
pub struct Proc {
    pub mem_available_gib: u64,
    /// `None` = unlimited.
    pub memlock_bytes: Option<u64>,
    pub cap_ipc_lock: bool,
    pub cgroup: Cgroup,
}

/// The memory cgroup the process is in.
#[derive(Debug, Clone)]
pub enum Cgroup {
    None,
    /// Slurm step under cgroup v2 with `memory.max` on the job (GiB) and usage (GiB).
    V2 {
        max_gib: u64,
        usage_gib: u64,
    },
    /// Slurm under cgroup v1 with `hierarchical_memory_limit`.
    V1 {
        limit_gib: u64,
        usage_gib: u64,
    },
}

impl Default for Proc {
    fn default() -> Self {
        Proc {
            mem_available_gib: 1536,
            memlock_bytes: None,
            cap_ipc_lock: false,
            cgroup: Cgroup::None,
        }
    }
}

fn write(root: &Path, rel: &str, text: &str) -> std::io::Result<()> {
    let p = root.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(p, text)
}

/// Write `proc/meminfo`, `proc/self/{limits,status,cgroup,mountinfo}` and cgroup files under `r`.
pub fn write_proc(r: &Path, proc_: &Proc) -> std::io::Result<()> {
    let avail = proc_.mem_available_gib * GIB_KB;
    let total = avail + 64 * GIB_KB;
    write(
        r,
        "proc/meminfo",
        &format!(
            "MemTotal:       {total} kB\nMemFree:        {avail} kB\nMemAvailable:   {avail} kB\nBuffers:          123456 kB\nCached:          2345678 kB\nSwapCached:            0 kB\nActive:          3456789 kB\nInactive:        1234567 kB\nActive(anon):    1000000 kB\nInactive(anon):        0 kB\nActive(file):    2456789 kB\nInactive(file):  1234567 kB\nUnevictable:           0 kB\nMlocked:               0 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\nDirty:               100 kB\nWriteback:             0 kB\nAnonPages:       1000000 kB\nMapped:           200000 kB\nShmem:             10000 kB\nKReclaimable:     100000 kB\nSlab:             200000 kB\nSReclaimable:     100000 kB\nSUnreclaim:       100000 kB\nKernelStack:       10000 kB\nPageTables:        20000 kB\nNFS_Unstable:          0 kB\nBounce:                0 kB\nWritebackTmp:          0 kB\nCommitLimit:    {total} kB\nCommitted_AS:    5000000 kB\nVmallocTotal:   34359738367 kB\nVmallocUsed:       50000 kB\nVmallocChunk:          0 kB\nPercpu:             5000 kB\nHardwareCorrupted:     0 kB\nAnonHugePages:         0 kB\nShmemHugePages:        0 kB\nShmemPmdMapped:        0 kB\nFileHugePages:         0 kB\nFilePmdMapped:         0 kB\nHugePages_Total:       0\nHugePages_Free:        0\nHugePages_Rsvd:        0\nHugePages_Surp:        0\nHugepagesize:       2048 kB\nHugetlb:               0 kB\nDirectMap4k:      200000 kB\nDirectMap2M:     8000000 kB\nDirectMap1G:    {total} kB\n"
        ),
    )?;
    let memlock = proc_
        .memlock_bytes
        .map_or("unlimited".to_string(), |b| b.to_string());
    write(
        r,
        "proc/self/limits",
        &format!(
            "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax file size             unlimited            unlimited            bytes     \nMax data size             unlimited            unlimited            bytes     \nMax stack size            8388608              unlimited            bytes     \nMax core file size        0                    unlimited            bytes     \nMax resident set          unlimited            unlimited            bytes     \nMax processes             96365                96365                processes \nMax open files            20000                20000                files     \nMax locked memory         {memlock:<20} {memlock:<20} bytes     \nMax address space         unlimited            unlimited            bytes     \nMax file locks            unlimited            unlimited            locks     \nMax pending signals       96365                96365                signals   \nMax msgqueue size         819200               819200               bytes     \nMax nice priority         0                    0                    \nMax realtime priority     0                    0                    \nMax realtime timeout      unlimited            unlimited            us        \n"
        ),
    )?;
    let capeff = if proc_.cap_ipc_lock {
        "0000000000004000"
    } else {
        "0000000000000000"
    };
    write(
        r,
        "proc/self/status",
        &format!(
            "Name:\tmcsup\nUmask:\t0022\nState:\tR (running)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t4200\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\nFDSize:\t64\nGroups:\t1000\nNStgid:\t4242\nNSpid:\t4242\nNSpgid:\t4242\nNSsid:\t4200\nVmPeak:\t   10000 kB\nVmSize:\t   10000 kB\nVmLck:\t       0 kB\nVmPin:\t       0 kB\nVmHWM:\t    3000 kB\nVmRSS:\t    3000 kB\nRssAnon:\t    1000 kB\nRssFile:\t    2000 kB\nRssShmem:\t       0 kB\nVmData:\t    2000 kB\nVmStk:\t     132 kB\nVmExe:\t    1000 kB\nVmLib:\t    2000 kB\nVmPTE:\t      60 kB\nVmSwap:\t       0 kB\nHugetlbPages:\t       0 kB\nCoreDumping:\t0\nTHP_enabled:\t1\nThreads:\t1\nSigQ:\t0/96365\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\nCapInh:\t0000000000000000\nCapPrm:\t{capeff}\nCapEff:\t{capeff}\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\nSpeculation_Store_Bypass:\tthread vulnerable\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\nMems_allowed:\t1\nMems_allowed_list:\t0\nvoluntary_ctxt_switches:\t1\nnonvoluntary_ctxt_switches:\t1\n"
        ),
    )?;
    match &proc_.cgroup {
        Cgroup::None => {
            write(r, "proc/self/cgroup", "0::/\n")?;
            write(
                r,
                "proc/self/mountinfo",
                "25 1 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n",
            )?;
        }
        Cgroup::V2 { max_gib, usage_gib } => {
            write(
                r,
                "proc/self/cgroup",
                "0::/system.slice/slurmstepd.scope/job_1392969/step_0/user/task_0\n",
            )?;
            write(r, "proc/self/mountinfo", "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n")?;
            let job = "sys/fs/cgroup/system.slice/slurmstepd.scope/job_1392969";
            write(
                r,
                &format!("{job}/memory.max"),
                &format!("{}\n", max_gib << 30),
            )?;
            write(r, &format!("{job}/memory.high"), "max\n")?;
            write(
                r,
                &format!("{job}/memory.current"),
                &format!("{}\n", usage_gib << 30),
            )?;
            write(r, &format!("{job}/step_0/memory.max"), "max\n")?;
            write(
                r,
                &format!("{job}/step_0/memory.current"),
                &format!("{}\n", usage_gib << 30),
            )?;
            write(r, &format!("{job}/step_0/user/task_0/memory.max"), "max\n")?;
        }
        Cgroup::V1 {
            limit_gib,
            usage_gib,
        } => {
            write(r, "proc/self/cgroup", "12:memory:/slurm/uid_1000/job_77/step_0/task_0\n11:cpu,cpuacct:/slurm/uid_1000/job_77/step_0/task_0\n0::/\n")?;
            write(r, "proc/self/mountinfo", "40 30 0:35 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,memory\n")?;
            let task = "sys/fs/cgroup/memory/slurm/uid_1000/job_77/step_0/task_0";
            write(
                r,
                &format!("{task}/memory.limit_in_bytes"),
                "9223372036854771712\n",
            )?;
            write(
                r,
                &format!("{task}/memory.usage_in_bytes"),
                &format!("{}\n", usage_gib << 30),
            )?;
            write(
                r,
                &format!("{task}/memory.stat"),
                &format!("cache 0\nrss {}\nhierarchical_memory_limit {}\nhierarchical_memsw_limit 9223372036854771712\n", usage_gib << 30, limit_gib << 30),
            )?;
        }
    }
    Ok(())
}
