//! `mcsup.network.per_gpu_hca`: each worker's transports pinned to the HCAs nearest its GPUs.
//! A shared all-HCA setting makes every process register on every NIC (NVIDIA/srt-slurm #445
//! added per-GPU HCA configs for this), `UCX_NET_DEVICES=all` binds management NICs
//! (ai-dynamo/dynamo #10852), and UCX on inactive HCAs lost a job (NVIDIA/srt-slurm #429). The
//! pairing is the preflight's (`gpu::nearest`: same NUMA node, then fewest PCIe hops), over the
//! HCAs with an ACTIVE port only; GPU N is the N-th NVIDIA GPU in PCI bus order, the order
//! NVML and `nvidia-smi` number them in.
//!
//! For each worker placed on GPUs (a value the recipe sets is replaced, and kept in the plan as
//! what the pairing overrode: the shared setting is what this is turned on against):
//! - `UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1` (with `lo` when NIXL runs: its transfers within the
//!   node need UCX's loopback, sgl-project/sglang #40641);
//! - `MOONCAKE_DEVICE=mlx5_0,mlx5_1` (Mooncake's comma list; it prefers the listed HCA nearest
//!   each buffer itself);
//! - `NCCL_IB_HCA==mlx5_0:1,mlx5_1:1` (`=`: exact names, so `mlx5_1` does not also select
//!   `mlx5_10`).
//!
//! Each value's source names the pairing it came from.

use mcsup_rdma::{PortState, SysfsReader};

use super::fabric;
use super::gpu::{self, HcaPlace};
use super::system::Sysroot;
use crate::plan::{EnvOverride, EnvVar, Plan, ProcessKind, PER_GPU_HCA};

/// How the plan's note on each worker's pairing starts.
const NOTE: &str = "per-GPU HCAs for ";

/// One GPU and the HCA port nearest it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pairing {
    pub bdf: String,
    pub gpu_numa: Option<u32>,
    pub hca: String,
    pub port: u32,
    pub hca_numa: Option<u32>,
    pub hops: Option<usize>,
}

impl Pairing {
    /// `GPU 0 (0000:19:00.0) → mlx5_0 port 1 (NUMA 0, 2 PCIe hops)`.
    fn describe(&self, index: usize) -> String {
        let numa = match (self.gpu_numa, self.hca_numa) {
            (Some(g), Some(h)) if g != h => {
                format!("NUMA {h}, across the sockets from the GPU's {g}")
            }
            (_, Some(h)) => format!("NUMA {h}"),
            _ => "NUMA unknown".into(),
        };
        let hops = self
            .hops
            .map_or("PCIe distance unknown".into(), |d| format!("{d} PCIe hops"));
        format!(
            "GPU {index} ({}) → {} port {} ({numa}, {hops})",
            self.bdf, self.hca, self.port
        )
    }
}

/// The node's GPUs (by index) and the HCA port nearest each, or why there is no such table.
pub fn table(root: &Sysroot) -> Result<Vec<Pairing>, String> {
    let gpus = gpu::find_gpus(root);
    if gpus.is_empty() {
        return Err("no NVIDIA GPU on the PCI bus (/sys/bus/pci/devices)".into());
    }
    let scan = SysfsReader::new(root.path("/"))
        .scan()
        .map_err(|e| format!("cannot read the RDMA devices: {e}"))?;
    let usable: Vec<(HcaPlace, u32)> = scan
        .devices
        .iter()
        .filter_map(|d| {
            let port = d
                .ports
                .iter()
                .find(|p| p.state == Some(PortState::Active))?;
            Some((gpu::hca_place(root, &d.name, d.numa_node), port.number))
        })
        .collect();
    if usable.is_empty() {
        let present: Vec<&str> = scan.devices.iter().map(|d| d.name.as_str()).collect();
        return Err(if present.is_empty() {
            "no RDMA device (/sys/class/infiniband)".into()
        } else {
            format!("no HCA has an ACTIVE port ({})", present.join(", "))
        });
    }
    let places: Vec<HcaPlace> = usable.iter().map(|(p, _)| p.clone()).collect();
    Ok(gpus
        .iter()
        .filter_map(|g| {
            let (h, hops) = gpu::nearest(g, &places)?;
            let port = usable.iter().find(|(p, _)| p.name == h.name)?.1;
            Some(Pairing {
                bdf: g.bdf.clone(),
                gpu_numa: g.numa,
                hca: h.name.clone(),
                port,
                hca_numa: h.numa,
                hops,
            })
        })
        .collect())
}

/// Write each worker's variables from `table`: the recipe's values are replaced (and listed as
/// overridden), an earlier pairing's are recomputed (a plan file made on another machine gets
/// this node's); the plan's notes say what was paired and what it replaced.
pub fn apply(plan: &mut Plan, table: &[Pairing]) -> Result<(), String> {
    let nixl = fabric::uses_nixl(plan);
    let mut notes = Vec::new();
    for p in plan
        .processes
        .iter_mut()
        .filter(|p| p.kind == ProcessKind::Worker)
    {
        let gpus = p.gpus().to_vec();
        if gpus.is_empty() {
            continue;
        }
        let mut ports: Vec<(&str, u32)> = Vec::new();
        let mut said = Vec::new();
        for g in &gpus {
            let Some(pair) = table.get(*g as usize) else {
                return Err(format!(
                    "{} is placed on GPU {g}, but this node has {} NVIDIA GPU(s)",
                    p.name,
                    table.len()
                ));
            };
            said.push(pair.describe(*g as usize));
            if !ports.contains(&(pair.hca.as_str(), pair.port)) {
                ports.push((pair.hca.as_str(), pair.port));
            }
        }
        let with_port: Vec<String> = ports.iter().map(|(h, n)| format!("{h}:{n}")).collect();
        let names: Vec<&str> = ports.iter().map(|(h, _)| *h).collect();
        let mut ucx = with_port.clone();
        if nixl {
            ucx.push("lo".into());
        }
        let source = format!("{PER_GPU_HCA}: {}", said.join("; "));
        let mut replaced = Vec::new();
        for (name, value) in [
            ("UCX_NET_DEVICES", ucx.join(",")),
            ("MOONCAKE_DEVICE", names.join(",")),
            ("NCCL_IB_HCA", format!("={}", with_port.join(","))),
        ] {
            match p.env.iter_mut().find(|v| v.name == name) {
                Some(v) if v.source.starts_with(PER_GPU_HCA) => {
                    v.value = value;
                    v.source = source.clone();
                }
                Some(v) => {
                    replaced.push(format!("{name}={} ({})", v.value, v.source));
                    v.overrode.push(EnvOverride {
                        source: std::mem::take(&mut v.source),
                        value: std::mem::replace(&mut v.value, value),
                    });
                    v.source = source.clone();
                }
                None => p.env.push(EnvVar {
                    name: name.into(),
                    value,
                    source: source.clone(),
                    overrode: Vec::new(),
                }),
            }
        }
        let mut note = format!("{NOTE}{}: {}", p.name, said.join("; "));
        if !replaced.is_empty() {
            note.push_str(&format!(
                "; in place of the recipe's {}",
                replaced.join(", ")
            ));
        }
        notes.push(note);
    }
    plan.notes.retain(|n| !n.starts_with(NOTE));
    plan.notes.extend(notes);
    Ok(())
}
