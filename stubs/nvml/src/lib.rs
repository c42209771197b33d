//! Test helper: the few NVML calls mcsup's preflight makes, answered from a JSON file named by
//! `MCSUP_NVML_STUB_STATE` (read at every call, so a test can change the GPUs' state while
//! mcsup runs). Built by the workspace as `libmcsup_nvml_stub.so`; tests copy it to a directory
//! as `libnvidia-ml.so.1` and put that directory on `LD_LIBRARY_PATH`. Not part of the product.
//!
//! ```json
//! {"gpus": [{"total": 85899345920, "used": 1073741824,
//!            "processes": [{"pid": 1234, "used": 42949672960}]}]}
//! ```
//! A missing or unreadable file answers `NVML_ERROR_UNINITIALIZED` (1) to every call.

use std::os::raw::{c_int, c_uint, c_ulonglong};

const SUCCESS: c_int = 0;
const UNINITIALIZED: c_int = 1;
const INVALID_ARGUMENT: c_int = 2;
const INSUFFICIENT_SIZE: c_int = 7;

/// `nvmlMemory_t`.
#[repr(C)]
pub struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlProcessInfo_t` (v2 and v3 share this layout).
#[repr(C)]
pub struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

fn state() -> Option<serde_json::Value> {
    let path = std::env::var_os("MCSUP_NVML_STUB_STATE")?;
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn gpu(index: usize) -> Option<serde_json::Value> {
    state()?.get("gpus")?.get(index).cloned()
}

fn u64_of(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

/// A device handle is its index plus one (never null).
fn index_of(handle: usize) -> Option<usize> {
    handle.checked_sub(1)
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> c_int {
    if state().is_some() {
        SUCCESS
    } else {
        UNINITIALIZED
    }
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> c_int {
    SUCCESS
}

/// # Safety
/// `count` is a valid pointer (NVML's contract).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> c_int {
    let Some(s) = state() else {
        return UNINITIALIZED;
    };
    if count.is_null() {
        return INVALID_ARGUMENT;
    }
    let n = s.get("gpus").and_then(|g| g.as_array()).map_or(0, Vec::len);
    *count = n as c_uint;
    SUCCESS
}

/// # Safety
/// `device` is a valid pointer (NVML's contract).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut usize) -> c_int {
    if device.is_null() || gpu(index as usize).is_none() {
        return INVALID_ARGUMENT;
    }
    *device = index as usize + 1;
    SUCCESS
}

/// # Safety
/// `memory` is a valid pointer (NVML's contract).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: usize, memory: *mut Memory) -> c_int {
    let Some(g) = index_of(device).and_then(gpu) else {
        return INVALID_ARGUMENT;
    };
    if memory.is_null() {
        return INVALID_ARGUMENT;
    }
    let (total, used) = (u64_of(&g, "total"), u64_of(&g, "used"));
    *memory = Memory {
        total,
        free: total.saturating_sub(used),
        used,
    };
    SUCCESS
}

/// # Safety
/// `count` is valid; `infos` holds `*count` entries (NVML's contract).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: usize,
    count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> c_int {
    let Some(g) = index_of(device).and_then(gpu) else {
        return INVALID_ARGUMENT;
    };
    if count.is_null() {
        return INVALID_ARGUMENT;
    }
    let procs: Vec<serde_json::Value> = g
        .get("processes")
        .and_then(|p| p.as_array())
        .cloned()
        .unwrap_or_default();
    let room = *count as usize;
    *count = procs.len() as c_uint;
    if room < procs.len() || (infos.is_null() && !procs.is_empty()) {
        return INSUFFICIENT_SIZE;
    }
    for (i, p) in procs.iter().enumerate() {
        *infos.add(i) = ProcessInfo {
            pid: u64_of(p, "pid") as c_uint,
            used_gpu_memory: u64_of(p, "used"),
            gpu_instance_id: u32::MAX,
            compute_instance_id: u32::MAX,
        };
    }
    SUCCESS
}
