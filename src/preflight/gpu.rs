//! GPUDirect RDMA on nodes with NVIDIA GPUs: can Mooncake register GPU memory with the HCAs,
//! and which HCA is nearest each GPU.
//!
//! srt-slurm issue #429: on a fresh cluster `nvidia_peermem` was not loaded, every KV transfer
//! between GPUs failed, and the benchmark "succeeded" with 0 tokens. With protocol `rdma` and
//! NVIDIA GPUs on the node (sysfs PCI vendor 0x10de, class 0x03xxxx), the module must be loaded
//! (`/sys/module/nvidia_peermem`). For each GPU the nearest HCA is the one on the same NUMA node
//! with the fewest PCIe hops between the two devices' canonical sysfs paths — the measure
//! Mooncake's CUDA topology uses (`getPciDistance`: candidates on the GPU's NUMA node, preferred
//! at minimum distance). Reads sysfs through the [`Sysroot`] seam only; fixtures make it
//! testable.

use std::path::{Component, Path, PathBuf};

use super::report::{Check, Report};
use super::system::Sysroot;

const G: &str = "gpu";

/// One NVIDIA GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    pub bdf: String,
    pub numa: Option<u32>,
    /// Canonical device path under the sysroot (`/sys/devices/pci0000:17/.../0000:18:00.0`).
    pub path: Option<PathBuf>,
}

/// One HCA's position, for the distance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaPlace {
    pub name: String,
    pub numa: Option<u32>,
    pub path: Option<PathBuf>,
}

fn numa(text: Option<String>) -> Option<u32> {
    text?
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .map(|n| n as u32)
}

/// The device path relative to the sysroot, resolved through symlinks.
fn canonical(root: &Sysroot, abs: &str) -> Option<PathBuf> {
    let real = std::fs::canonicalize(root.path(abs)).ok()?;
    let base = std::fs::canonicalize(root.root()).ok()?;
    real.strip_prefix(&base)
        .ok()
        .map(|p| Path::new("/").join(p))
}

/// NVIDIA GPUs on the PCI bus.
pub fn find_gpus(root: &Sysroot) -> Vec<Gpu> {
    let Ok(entries) = std::fs::read_dir(root.path("/sys/bus/pci/devices")) else {
        return Vec::new();
    };
    let mut gpus: Vec<Gpu> = entries
        .flatten()
        .filter_map(|e| {
            let bdf = e.file_name().to_string_lossy().into_owned();
            let dir = format!("/sys/bus/pci/devices/{bdf}");
            let vendor = root.read(format!("{dir}/vendor"))?;
            let class = root.read(format!("{dir}/class"))?;
            (vendor.trim() == "0x10de" && class.trim().starts_with("0x03")).then(|| Gpu {
                numa: numa(root.read(format!("{dir}/numa_node"))),
                path: canonical(root, &dir),
                bdf,
            })
        })
        .collect();
    gpus.sort_by(|a, b| a.bdf.cmp(&b.bdf));
    gpus
}

/// Where an HCA sits (`sys/class/infiniband/<name>/device`).
pub fn hca_place(root: &Sysroot, name: &str, numa: Option<u32>) -> HcaPlace {
    HcaPlace {
        name: name.to_string(),
        numa,
        path: canonical(root, &format!("/sys/class/infiniband/{name}/device")),
    }
}

/// PCIe hops between two device paths: the components below their common ancestor, both ways.
pub fn pci_distance(a: &Path, b: &Path) -> usize {
    let ca: Vec<Component> = a.components().collect();
    let cb: Vec<Component> = b.components().collect();
    let common = ca.iter().zip(&cb).take_while(|(x, y)| x == y).count();
    (ca.len() - common) + (cb.len() - common)
}

/// The nearest HCA to `gpu`: same NUMA node first, then the fewest PCIe hops, then the name.
pub fn nearest<'a>(gpu: &Gpu, hcas: &'a [HcaPlace]) -> Option<(&'a HcaPlace, Option<usize>)> {
    let same: Vec<&HcaPlace> = hcas
        .iter()
        .filter(|h| h.numa.is_some() && h.numa == gpu.numa)
        .collect();
    let pool: Vec<&HcaPlace> = if same.is_empty() {
        hcas.iter().collect()
    } else {
        same
    };
    pool.into_iter()
        .map(|h| {
            let d = match (&gpu.path, &h.path) {
                (Some(g), Some(p)) => Some(pci_distance(g, p)),
                _ => None,
            };
            (h, d)
        })
        .min_by(|a, b| {
            a.1.unwrap_or(usize::MAX)
                .cmp(&b.1.unwrap_or(usize::MAX))
                .then(a.0.name.cmp(&b.0.name))
        })
}

/// The GPUDirect checks (only for protocol `rdma`).
pub fn check(root: &Sysroot, hcas: &[HcaPlace], report: &mut Report) {
    let gpus = find_gpus(root);
    if gpus.is_empty() {
        report.push(Check::skip(
            G,
            "gpus",
            "no NVIDIA GPU on this node: GPUDirect RDMA checks skipped",
        ));
        return;
    }
    report.push(Check::ok(
        G,
        "gpus",
        format!(
            "{} NVIDIA GPU(s): {}",
            gpus.len(),
            gpus.iter()
                .map(|g| g.bdf.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ));
    if root.path("/sys/module/nvidia_peermem").is_dir() {
        report.push(Check::ok(
            G,
            "gpudirect",
            "nvidia_peermem is loaded: the HCAs can register GPU memory",
        ));
    } else {
        report.push(Check::fail(
            G,
            "gpudirect",
            "nvidia_peermem is not loaded: Mooncake cannot register GPU memory with the HCAs, so every KV transfer between GPUs fails (srt-slurm #429: the benchmark reported success with 0 tokens)",
            "load it on every node: `modprobe nvidia_peermem` (it ships with the NVIDIA driver), and at boot via /etc/modules-load.d/nvidia-peermem.conf",
        ));
    }
    for gpu in &gpus {
        let name = format!("nearest hca {}", gpu.bdf);
        match nearest(gpu, hcas) {
            None => report.push(Check::warn(
                G,
                &name,
                format!("GPU {} has no HCA to pair with", gpu.bdf),
                "check the RDMA devices above",
            )),
            Some((h, dist)) => {
                let hops = dist.map_or("PCIe distance unknown".to_string(), |d| {
                    format!("{d} PCIe hops")
                });
                let where_ = gpu
                    .numa
                    .map_or("NUMA unknown".to_string(), |n| format!("NUMA {n}"));
                if gpu.numa.is_some() && h.numa != gpu.numa {
                    report.push(Check::warn(
                        G,
                        &name,
                        format!("GPU {} ({where_}) has no HCA on its NUMA node; nearest is {} (NUMA {}, {hops}): transfers cross the socket interconnect", gpu.bdf, h.name, h.numa.map_or("?".into(), |n| n.to_string())),
                        "pin the GPU's workers to an HCA on its socket, or accept the cross-socket bandwidth",
                    ));
                } else {
                    report.push(Check::ok(
                        G,
                        &name,
                        format!(
                            "GPU {} ({where_}): nearest HCA {} ({hops})",
                            gpu.bdf, h.name
                        ),
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcie_hops_between_canonical_paths() {
        let gpu = Path::new("/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:19:00.0");
        let near = Path::new("/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/0000:1a:00.0");
        let far = Path::new("/sys/devices/pci0000:97/0000:97:01.0/0000:98:00.0");
        assert_eq!(pci_distance(gpu, near), 2);
        assert!(pci_distance(gpu, far) > pci_distance(gpu, near));
        let g = Gpu {
            bdf: "0000:19:00.0".into(),
            numa: Some(0),
            path: Some(gpu.into()),
        };
        let hcas = [
            HcaPlace {
                name: "mlx5_1".into(),
                numa: Some(1),
                path: Some(far.into()),
            },
            HcaPlace {
                name: "mlx5_0".into(),
                numa: Some(0),
                path: Some(near.into()),
            },
        ];
        assert_eq!(nearest(&g, &hcas).unwrap().0.name, "mlx5_0");
    }
}
