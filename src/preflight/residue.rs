//! GPU residue: processes of an earlier job still holding this node's GPUs (DP schedulers that
//! escaped the job's cgroup held ~100 GB per GPU and the next job ran out of memory:
//! sgl-project/sglang #23627), and free memory below what the plan's workers will claim
//! (`--mem-fraction-static`, `--gpu-memory-utilization`: a share of the total, checked by the
//! engines against the free memory at start). srt-slurm 2.0's preflight checks the same
//! (`core/preflight.py`).
//!
//! NVML (`libnvidia-ml.so.1`, from the driver) is loaded when the check runs, not linked, as
//! libibverbs is: a node without the driver still runs mcsup. Without NVML, the holders of
//! `/dev/nvidiaN` are found through `/proc/*/fd` (no memory figures then); without either, the
//! group says why it is skipped. Only the GPUs this node's workers are planned on are checked.

use std::collections::{BTreeMap, BTreeSet};
use std::os::raw::{c_int, c_uint, c_ulonglong};

use super::report::{Check, Report};
use super::system::Sysroot;
use crate::plan::{Plan, ProcessKind};

const G: &str = "gpu residue";

/// One GPU as NVML sees it.
pub struct Gpu {
    pub total: u64,
    pub free: u64,
    /// (pid, bytes).
    pub processes: Vec<(u32, u64)>,
}

impl Gpu {
    /// Memory in use, by anyone (a CUDA context that outlived its process included).
    pub fn used(&self) -> u64 {
        self.total.saturating_sub(self.free)
    }
}

#[repr(C)]
struct NvmlMemory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct NvmlProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// NVML's answer for the GPUs (in NVML's order), or why there is none.
pub fn read_nvml() -> Result<Vec<Gpu>, String> {
    // SAFETY: loading the driver's NVML runs its initialisers, which have no preconditions.
    let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }
        .map_err(|e| format!("libnvidia-ml.so.1 not loaded: {e}"))?;
    type Init = unsafe extern "C" fn() -> c_int;
    type Count = unsafe extern "C" fn(*mut c_uint) -> c_int;
    type Handle = unsafe extern "C" fn(c_uint, *mut usize) -> c_int;
    type Memory = unsafe extern "C" fn(usize, *mut NvmlMemory) -> c_int;
    type Procs = unsafe extern "C" fn(usize, *mut c_uint, *mut NvmlProcessInfo) -> c_int;
    // SAFETY: the symbols have these signatures in nvml.h (handles are pointers, passed as
    // usize); each is used only while `lib` is loaded.
    unsafe {
        macro_rules! get {
            ($t:ty, $name:literal) => {{
                *lib.get::<$t>($name).map_err(|e| {
                    format!(
                        "NVML has no {}: {e}",
                        String::from_utf8_lossy($name).trim_end_matches('\0')
                    )
                })?
            }};
        }
        let init = get!(Init, b"nvmlInit_v2\0");
        let shutdown = get!(Init, b"nvmlShutdown\0");
        let count = get!(Count, b"nvmlDeviceGetCount_v2\0");
        let handle = get!(Handle, b"nvmlDeviceGetHandleByIndex_v2\0");
        let memory = get!(Memory, b"nvmlDeviceGetMemoryInfo\0");
        let procs = get!(Procs, b"nvmlDeviceGetComputeRunningProcesses_v3\0");
        let rc = init();
        if rc != 0 {
            return Err(format!("nvmlInit failed (NVML error {rc})"));
        }
        let mut n: c_uint = 0;
        let mut out = Vec::new();
        if count(&mut n) == 0 {
            for i in 0..n {
                let mut h: usize = 0;
                let mut mem = NvmlMemory {
                    total: 0,
                    free: 0,
                    used: 0,
                };
                if handle(i, &mut h) != 0 || memory(h, &mut mem) != 0 {
                    continue;
                }
                let mut room: c_uint = 64;
                let mut infos = vec![
                    NvmlProcessInfo {
                        pid: 0,
                        used_gpu_memory: 0,
                        gpu_instance_id: 0,
                        compute_instance_id: 0,
                    };
                    room as usize
                ];
                let processes = if procs(h, &mut room, infos.as_mut_ptr()) == 0 {
                    infos.truncate(room as usize);
                    infos.iter().map(|p| (p.pid, p.used_gpu_memory)).collect()
                } else {
                    Vec::new()
                };
                out.push(Gpu {
                    total: mem.total,
                    free: mem.free,
                    processes,
                });
            }
        }
        shutdown();
        Ok(out)
    }
}

/// Without NVML: which processes hold `/dev/nvidiaN`, by N.
fn holders_from_proc() -> BTreeMap<u32, BTreeSet<i32>> {
    let mut out: BTreeMap<u32, BTreeSet<i32>> = BTreeMap::new();
    let Ok(all) = procfs::process::all_processes() else {
        return out;
    };
    for p in all.flatten() {
        let Ok(fds) = p.fd() else { continue };
        for fd in fds.flatten() {
            if let procfs::process::FDTarget::Path(path) = &fd.target {
                let n = path
                    .to_str()
                    .and_then(|s| s.strip_prefix("/dev/nvidia"))
                    .and_then(|n| n.parse::<u32>().ok());
                if let Some(n) = n {
                    out.entry(n).or_default().insert(p.pid);
                }
            }
        }
    }
    out
}

/// The GPUs this node's workers are planned on, with the largest share of memory any of them
/// will claim there (when its flags or engine say).
fn planned(plan: &Plan) -> BTreeMap<u32, Option<(f64, String)>> {
    let mut out: BTreeMap<u32, Option<(f64, String)>> = BTreeMap::new();
    for p in plan
        .processes
        .iter()
        .filter(|p| p.kind == ProcessKind::Worker)
    {
        let Some(w) = &p.placement else { continue };
        let flag = ["mem-fraction-static", "gpu-memory-utilization"]
            .iter()
            .find_map(|f| {
                let v = crate::domain::flag_value(&p.argv, f)?.parse::<f64>().ok()?;
                Some((v, format!("{}'s --{f} {v}", p.name)))
            });
        for g in &w.gpus {
            let e = out.entry(*g).or_default();
            if let Some((v, why)) = &flag {
                if e.as_ref().is_none_or(|(old, _)| v > old) {
                    *e = Some((*v, why.clone()));
                }
            }
        }
    }
    out
}

/// `40.0 GiB`.
pub fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

fn describe(pid: i32) -> String {
    procfs::process::Process::new(pid)
        .map(|p| super::tools::process_summary(&p))
        .unwrap_or_else(|_| format!("pid {pid} (not visible to this user)"))
}

/// Who is on the GPUs this node's plan uses, as `(GPU, description)`: NVML's processes (with
/// their memory), or the holders of `/dev/nvidiaN`; empty when neither can be read. The
/// teardown's check that nothing of the job is left on them.
pub fn holders(plan: &Plan) -> Vec<(u32, String)> {
    let gpus = planned(plan);
    let on = |index: u32, found: Vec<String>| found.into_iter().map(move |h| (index, h));
    match read_nvml() {
        Ok(seen) => gpus
            .keys()
            .flat_map(|i| {
                on(
                    *i,
                    seen.get(*i as usize).map(nvml_holders).unwrap_or_default(),
                )
            })
            .collect(),
        Err(_) => {
            let held = holders_from_proc();
            gpus.keys()
                .flat_map(|i| on(*i, device_holders(&held, *i)))
                .collect()
        }
    }
}

/// The processes NVML lists on `g`, mcsup itself left out: `pid 1 (...) holding 40.0 GiB`.
pub fn nvml_holders(g: &Gpu) -> Vec<String> {
    let me = std::process::id();
    g.processes
        .iter()
        .filter(|(pid, _)| *pid != me)
        .map(|(pid, used)| format!("{} holding {}", describe(*pid as i32), gib(*used)))
        .collect()
}

/// The holders of `/dev/nvidia<index>` (from [`holders_from_proc`]), mcsup itself left out.
fn device_holders(held: &BTreeMap<u32, BTreeSet<i32>>, index: u32) -> Vec<String> {
    let me = std::process::id() as i32;
    held.get(&index)
        .into_iter()
        .flatten()
        .filter(|pid| **pid != me)
        .map(|pid| describe(*pid))
        .collect()
}

/// Check the GPUs this node's plan uses.
pub fn check(plan: &Plan, root: &Sysroot, report: &mut Report) {
    let gpus = planned(plan);
    if gpus.is_empty() {
        return;
    }
    match read_nvml() {
        Ok(seen) => {
            for (index, claim) in &gpus {
                let label = format!("GPU {index}");
                let Some(g) = seen.get(*index as usize) else {
                    report.push(Check::fail(
                        G,
                        &label,
                        format!(
                            "NVML lists {} GPU(s); the plan uses GPU {index}",
                            seen.len()
                        ),
                        "check the node's GPUs (nvidia-smi) against the recipe's gpus_per_node",
                    ));
                    continue;
                };
                let foreign = nvml_holders(g);
                if !foreign.is_empty() {
                    report.push(Check::fail(
                        G,
                        &label,
                        format!(
                            "already in use before this job starts: {}; {} of {} free",
                            foreign.join("; "),
                            gib(g.free),
                            gib(g.total)
                        ),
                        "end it (`kill PID`, or `scancel` its job); a leftover of an earlier job on this node is what it usually is",
                    ));
                    continue;
                }
                if let Some((share, why)) = claim {
                    let wants = (*share * g.total as f64) as u64;
                    if wants > g.free {
                        report.push(Check::fail(
                            G,
                            &label,
                            format!(
                                "{why} claims {} of its {}, but only {} is free",
                                gib(wants),
                                gib(g.total),
                                gib(g.free)
                            ),
                            "free the GPU's memory (what holds it: nvidia-smi), or lower the fraction",
                        ));
                        continue;
                    }
                }
                report.push(Check::ok(
                    G,
                    &label,
                    format!("no process on it; {} of {} free", gib(g.free), gib(g.total)),
                ));
            }
        }
        Err(why) => {
            let devices: Vec<u32> = gpus
                .keys()
                .copied()
                .filter(|i| root.path(format!("/dev/nvidia{i}")).exists())
                .collect();
            if devices.is_empty() {
                report.push(Check::skip(
                    G,
                    "residue",
                    format!("{why}, and no /dev/nvidia*: no GPU to check here"),
                ));
                return;
            }
            let holders = holders_from_proc();
            for index in devices {
                let label = format!("GPU {index}");
                let foreign = device_holders(&holders, index);
                if foreign.is_empty() {
                    report.push(Check::ok(
                        G,
                        &label,
                        format!("no process holds /dev/nvidia{index} ({why}: memory not read)"),
                    ));
                } else {
                    report.push(Check::fail(
                        G,
                        &label,
                        format!("/dev/nvidia{index} is held by {}", foreign.join("; ")),
                        "end it (`kill PID`, or `scancel` its job); a leftover of an earlier job on this node is what it usually is",
                    ));
                }
            }
        }
    }
}
