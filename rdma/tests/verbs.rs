//! Calls the real libibverbs reader on this machine.
//!
//! Build machines and CI have no RDMA hardware: the answer must be a clean "no devices", not an
//! error. On a machine that does have devices, the scan just has to succeed.
#![cfg(feature = "ibverbs")]

use mcsup_rdma::verbs::{scan, VerbsScan};

#[test]
fn real_verbs_scan_is_clean() {
    let result = scan().expect("ibv_get_device_list must not fail on a machine without RDMA");
    let has_rdma_class = std::path::Path::new("/sys/class/infiniband_verbs/abi_version").exists();
    match &result {
        VerbsScan::NoSubsystem => assert!(!has_rdma_class, "ENOSYS although abi_version exists"),
        VerbsScan::NoDevices => {}
        VerbsScan::Devices(devices) => {
            for d in devices {
                assert!(!d.name.is_empty());
                if let Ok(info) = &d.info {
                    assert_eq!(info.ports.len(), usize::from(info.phys_port_cnt));
                }
            }
        }
    }
    eprintln!("verbs scan on this machine: {result:?}");
    // libibverbs is loaded by the scan (not linked): it is mapped now.
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    assert!(
        maps.contains("libibverbs.so"),
        "libibverbs not loaded by the scan"
    );
}

#[test]
fn real_verbs_scan_twice() {
    // libibverbs caches its initialisation; a second call must answer the same way.
    let first = scan().expect("first");
    let second = scan().expect("second");
    assert_eq!(first.devices().len(), second.devices().len());
}
