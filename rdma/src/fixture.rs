//! Builder of fake sysroots shaped like the kernel's RDMA sysfs, for tests and benchmarks.
//!
//! Responsibility: write `sys/class/infiniband/<dev>/...`, `sys/class/infiniband_verbs/...` and
//! `dev/infiniband/...` under a directory the caller owns (usually a temp dir), with the exact
//! file formats of the kernel and a trailing newline on every sysfs file. A file the kernel
//! fails with EINVAL (the type and netdev of an empty GID slot, the netdev of a native IB GID)
//! is omitted, which the reader treats the same way. Character devices are empty regular files.
//! Must not: be used on a live root (it writes files), or know anything about Mooncake.
//!
//! ```
//! use std::net::Ipv4Addr;
//! use mcsup_rdma::fixture::{FixtureBuilder, FixtureDevice, FixturePort};
//! use mcsup_rdma::SysfsReader;
//!
//! let dir = std::env::temp_dir().join(format!("mcsup-rdma-doc-{}", std::process::id()));
//! FixtureBuilder::new()
//!     .device(
//!         FixtureDevice::new("mlx5_0")
//!             .netdev("ens1f0np0", 1500)
//!             .uverbs(0)
//!             .port(FixturePort::roce_ipv4(
//!                 1,
//!                 "ens1f0np0",
//!                 [0x0c, 0x42, 0xa1, 0x1d, 0xd1, 0x2a],
//!                 Ipv4Addr::new(192, 168, 1, 10),
//!             )),
//!     )
//!     .write(&dir)
//!     .unwrap();
//! let scan = SysfsReader::new(&dir).scan().unwrap();
//! assert_eq!(scan.devices[0].ports[0].populated_gids().count(), 4);
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::Path;

use crate::error::FixtureError;
use crate::gid::{Gid, GidType};
use crate::types::{Guid, LinkLayer, NodeType, PhysState, PortState};

/// A whole sysroot: subsystem presence, verbs class, device nodes and devices.
#[derive(Debug, Clone)]
pub struct FixtureBuilder {
    subsystem: bool,
    verbs_abi_version: Option<u32>,
    rdma_cm: bool,
    devices: Vec<FixtureDevice>,
}

impl Default for FixtureBuilder {
    fn default() -> Self {
        FixtureBuilder::new()
    }
}

impl FixtureBuilder {
    /// RDMA core loaded (`sys/class/infiniband/` exists, ABI version 6, `dev/infiniband/rdma_cm`)
    /// and no devices yet: written as is, this is the "module loaded, no HCA" host.
    pub fn new() -> Self {
        FixtureBuilder {
            subsystem: true,
            verbs_abi_version: Some(6),
            rdma_cm: true,
            devices: Vec::new(),
        }
    }

    /// A host without any RDMA subsystem: writing it creates only the root directory.
    pub fn no_rdma() -> Self {
        FixtureBuilder {
            subsystem: false,
            verbs_abi_version: None,
            rdma_cm: false,
            devices: Vec::new(),
        }
    }

    /// Adds a device.
    pub fn device(mut self, device: FixtureDevice) -> Self {
        self.devices.push(device);
        self
    }

    /// Sets or removes `sys/class/infiniband_verbs/abi_version`.
    pub fn verbs_abi_version(mut self, version: Option<u32>) -> Self {
        self.verbs_abi_version = version;
        self
    }

    /// Creates `dev/infiniband/rdma_cm` or not.
    pub fn rdma_cm(mut self, present: bool) -> Self {
        self.rdma_cm = present;
        self
    }

    /// Writes the tree under `root` (created if missing; existing files are overwritten, other
    /// files are left alone).
    pub fn write(&self, root: &Path) -> Result<(), FixtureError> {
        self.validate()?;
        mkdir(root)?;
        if self.subsystem || !self.devices.is_empty() {
            mkdir(&root.join("sys/class/infiniband"))?;
        }
        let verbs_dir = root.join("sys/class/infiniband_verbs");
        if let Some(v) = self.verbs_abi_version {
            sysfs_file(&verbs_dir.join("abi_version"), &v.to_string())?;
        }
        let dev_dir = root.join("dev/infiniband");
        if self.rdma_cm {
            empty_file(&dev_dir.join("rdma_cm"))?;
        }
        for device in &self.devices {
            device.write(root)?;
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), FixtureError> {
        let mut names = HashSet::new();
        let mut uverbs = HashSet::new();
        for d in &self.devices {
            if !names.insert(d.name.as_str()) {
                return Err(invalid(format!("device {} appears twice", d.name)));
            }
            if let Some(u) = d.uverbs {
                if !uverbs.insert(u) {
                    return Err(invalid(format!("uverbs{u} is given to two devices")));
                }
            }
            d.validate()?;
        }
        Ok(())
    }
}

/// One device under `sys/class/infiniband/<name>`.
#[derive(Debug, Clone)]
pub struct FixtureDevice {
    name: String,
    node_type: NodeType,
    node_guid: Guid,
    fw_ver: String,
    hca_type: String,
    board_id: String,
    numa_node: i32,
    netdevs: Vec<(String, u32)>,
    uverbs: Option<u32>,
    uverbs_char_device: bool,
    ports: Vec<FixturePort>,
}

impl FixtureDevice {
    /// A ConnectX-6 Dx-like CA (`fw_ver` 22.32.2004, `hca_type` MT4125) on NUMA node 0, with no
    /// netdev, no uverbs device and no port yet.
    pub fn new(name: impl Into<String>) -> Self {
        FixtureDevice {
            name: name.into(),
            node_type: NodeType::Ca,
            node_guid: Guid(0x0c42_a103_001d_d12a),
            fw_ver: "22.32.2004".into(),
            hca_type: "MT4125".into(),
            board_id: "MT_0000000436".into(),
            numa_node: 0,
            netdevs: Vec::new(),
            uverbs: None,
            uverbs_char_device: true,
            ports: Vec::new(),
        }
    }

    /// `node_type`.
    pub fn node_type(mut self, node_type: NodeType) -> Self {
        self.node_type = node_type;
        self
    }

    /// `node_guid`.
    pub fn node_guid(mut self, guid: Guid) -> Self {
        self.node_guid = guid;
        self
    }

    /// `fw_ver`.
    pub fn fw_ver(mut self, fw_ver: impl Into<String>) -> Self {
        self.fw_ver = fw_ver.into();
        self
    }

    /// `hca_type`.
    pub fn hca_type(mut self, hca_type: impl Into<String>) -> Self {
        self.hca_type = hca_type.into();
        self
    }

    /// `board_id`.
    pub fn board_id(mut self, board_id: impl Into<String>) -> Self {
        self.board_id = board_id.into();
        self
    }

    /// `device/numa_node` (-1 = unknown).
    pub fn numa_node(mut self, node: i32) -> Self {
        self.numa_node = node;
        self
    }

    /// Adds `device/net/<name>/` with its `mtu`.
    pub fn netdev(mut self, name: impl Into<String>, mtu: u32) -> Self {
        self.netdevs.push((name.into(), mtu));
        self
    }

    /// Maps `uverbs<index>` to this device and creates `dev/infiniband/uverbs<index>`.
    pub fn uverbs(mut self, index: u32) -> Self {
        self.uverbs = Some(index);
        self
    }

    /// Keeps the `uverbsN` sysfs entry but leaves out the `/dev` node (a container that did not
    /// get the device).
    pub fn without_char_device(mut self) -> Self {
        self.uverbs_char_device = false;
        self
    }

    /// Adds a port.
    pub fn port(mut self, port: FixturePort) -> Self {
        self.ports.push(port);
        self
    }

    fn validate(&self) -> Result<(), FixtureError> {
        check_name("device", &self.name)?;
        for (nd, _) in &self.netdevs {
            check_name("netdev", nd)?;
        }
        let mut numbers = HashSet::new();
        for p in &self.ports {
            if !numbers.insert(p.number) {
                return Err(invalid(format!(
                    "{}: port {} appears twice",
                    self.name, p.number
                )));
            }
            p.validate(&self.name)?;
        }
        Ok(())
    }

    fn write(&self, root: &Path) -> Result<(), FixtureError> {
        let dir = root.join("sys/class/infiniband").join(&self.name);
        sysfs_file(&dir.join("node_type"), &self.node_type.to_string())?;
        sysfs_file(&dir.join("node_guid"), &self.node_guid.to_string())?;
        sysfs_file(&dir.join("fw_ver"), &self.fw_ver)?;
        sysfs_file(&dir.join("hca_type"), &self.hca_type)?;
        sysfs_file(&dir.join("board_id"), &self.board_id)?;
        sysfs_file(&dir.join("device/numa_node"), &self.numa_node.to_string())?;
        for (nd, mtu) in &self.netdevs {
            sysfs_file(
                &dir.join("device/net").join(nd).join("mtu"),
                &mtu.to_string(),
            )?;
        }
        if let Some(u) = self.uverbs {
            let entry = format!("uverbs{u}");
            sysfs_file(
                &root
                    .join("sys/class/infiniband_verbs")
                    .join(&entry)
                    .join("ibdev"),
                &self.name,
            )?;
            if self.uverbs_char_device {
                empty_file(&root.join("dev/infiniband").join(&entry))?;
            }
        }
        for p in &self.ports {
            p.write(&dir.join("ports").join(p.number.to_string()))?;
        }
        Ok(())
    }
}

/// One GID slot to populate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixtureGid {
    /// Table index.
    pub index: u32,
    /// The GID (must not be zero: unlisted slots are written as zero).
    pub gid: Gid,
    /// Its type (`Ib` and `RoceV1` both write `IB/RoCE v1`, as the kernel does).
    pub gid_type: GidType,
    /// Its netdev; `None` leaves `ndevs/I` out (what the kernel's EINVAL looks like here).
    pub netdev: Option<String>,
}

/// One port under `ports/<number>`.
#[derive(Debug, Clone)]
pub struct FixturePort {
    number: u32,
    state: PortState,
    phys_state: PhysState,
    link_layer: LinkLayer,
    rate: String,
    lid: u32,
    sm_lid: u32,
    gid_table_len: u32,
    gids: Vec<FixtureGid>,
}

impl FixturePort {
    /// An ACTIVE/LinkUp RoCE port at 100 Gb/s with LIDs 0 and a 16-slot, empty GID table.
    pub fn ethernet(number: u32) -> Self {
        FixturePort {
            number,
            state: PortState::Active,
            phys_state: PhysState::LinkUp,
            link_layer: LinkLayer::Ethernet,
            rate: "100 Gb/sec (4X EDR)".into(),
            lid: 0,
            sm_lid: 0,
            gid_table_len: 16,
            gids: Vec::new(),
        }
    }

    /// An ACTIVE/LinkUp HDR InfiniBand port (LID 0x1a, SM LID 0x1) with an 8-slot, empty GID
    /// table.
    pub fn infiniband(number: u32) -> Self {
        FixturePort {
            number,
            state: PortState::Active,
            phys_state: PhysState::LinkUp,
            link_layer: LinkLayer::InfiniBand,
            rate: "200 Gb/sec (4X HDR)".into(),
            lid: 0x1a,
            sm_lid: 0x1,
            gid_table_len: 8,
            gids: Vec::new(),
        }
    }

    /// The usual RoCE table of a netdev with one IPv4 address (fixture A's shape): the
    /// link-local GID from the MAC as v1 and v2 at indices 0 and 1, then the IPv4-mapped GID as
    /// v1 and v2 at 2 and 3.
    pub fn roce_ipv4(number: u32, netdev: &str, mac: [u8; 6], ipv4: Ipv4Addr) -> Self {
        FixturePort::ethernet(number)
            .roce_pair(link_local_from_mac(mac), Some(netdev))
            .roce_pair(Gid::from(ipv4), Some(netdev))
    }

    /// Logical and physical state.
    pub fn state(mut self, state: PortState, phys_state: PhysState) -> Self {
        self.state = state;
        self.phys_state = phys_state;
        self
    }

    /// Link layer.
    pub fn link_layer(mut self, link_layer: LinkLayer) -> Self {
        self.link_layer = link_layer;
        self
    }

    /// `rate` text.
    pub fn rate(mut self, rate: impl Into<String>) -> Self {
        self.rate = rate.into();
        self
    }

    /// `lid` and `sm_lid`.
    pub fn lids(mut self, lid: u32, sm_lid: u32) -> Self {
        self.lid = lid;
        self.sm_lid = sm_lid;
        self
    }

    /// Number of slots (a `gids/I` file each; unpopulated ones read all zeros).
    pub fn gid_table_len(mut self, len: u32) -> Self {
        self.gid_table_len = len;
        self
    }

    /// Populates slot `index`.
    pub fn gid(mut self, index: u32, gid: Gid, gid_type: GidType, netdev: Option<&str>) -> Self {
        self.gids.push(FixtureGid {
            index,
            gid,
            gid_type,
            netdev: netdev.map(str::to_owned),
        });
        self
    }

    /// Adds `gid` as RoCE v1 then v2 at the next two free indices, as the kernel does for each
    /// address of the netdev.
    pub fn roce_pair(self, gid: Gid, netdev: Option<&str>) -> Self {
        let next = self.gids.iter().map(|g| g.index + 1).max().unwrap_or(0);
        self.gid(next, gid, GidType::RoceV1, netdev)
            .gid(next + 1, gid, GidType::RoceV2, netdev)
    }

    fn validate(&self, device: &str) -> Result<(), FixtureError> {
        let mut seen = HashSet::new();
        for g in &self.gids {
            if g.index >= self.gid_table_len {
                return Err(invalid(format!(
                    "{device} port {}: GID index {} is beyond the table length {}",
                    self.number, g.index, self.gid_table_len
                )));
            }
            if !seen.insert(g.index) {
                return Err(invalid(format!(
                    "{device} port {}: GID index {} appears twice",
                    self.number, g.index
                )));
            }
            if g.gid.is_zero() {
                return Err(invalid(format!(
                    "{device} port {}: GID index {} is zero (leave the slot out instead)",
                    self.number, g.index
                )));
            }
            if let Some(nd) = &g.netdev {
                check_name("netdev", nd)?;
            }
        }
        Ok(())
    }

    fn write(&self, dir: &Path) -> Result<(), FixtureError> {
        sysfs_file(&dir.join("state"), &self.state.sysfs_string())?;
        sysfs_file(&dir.join("phys_state"), &self.phys_state.sysfs_string())?;
        sysfs_file(&dir.join("link_layer"), self.link_layer.as_str())?;
        sysfs_file(&dir.join("rate"), &self.rate)?;
        sysfs_file(&dir.join("lid"), &format!("{:#x}", self.lid))?;
        sysfs_file(&dir.join("sm_lid"), &format!("{:#x}", self.sm_lid))?;
        let gids_dir = dir.join("gids");
        mkdir(&gids_dir)?;
        for index in 0..self.gid_table_len {
            let gid = self
                .gids
                .iter()
                .find(|g| g.index == index)
                .map_or(Gid::ZERO, |g| g.gid);
            sysfs_file(&gids_dir.join(index.to_string()), &gid.to_string())?;
        }
        let types_dir = dir.join("gid_attrs/types");
        let ndevs_dir = dir.join("gid_attrs/ndevs");
        mkdir(&types_dir)?;
        mkdir(&ndevs_dir)?;
        for g in &self.gids {
            sysfs_file(&types_dir.join(g.index.to_string()), g.gid_type.sysfs_str())?;
            if let Some(nd) = &g.netdev {
                sysfs_file(&ndevs_dir.join(g.index.to_string()), nd)?;
            }
        }
        Ok(())
    }
}

/// The IPv6 link-local GID the kernel derives from a MAC address (modified EUI-64: flip the
/// universal/local bit, insert `ff:fe` in the middle).
pub fn link_local_from_mac(mac: [u8; 6]) -> Gid {
    let mut raw = [0u8; 16];
    raw[0] = 0xfe;
    raw[1] = 0x80;
    raw[8] = mac[0] ^ 0x02;
    raw[9] = mac[1];
    raw[10] = mac[2];
    raw[11] = 0xff;
    raw[12] = 0xfe;
    raw[13] = mac[3];
    raw[14] = mac[4];
    raw[15] = mac[5];
    Gid(raw)
}

fn invalid(msg: String) -> FixtureError {
    FixtureError::Invalid(msg)
}

/// Names become path components: refuse anything that would escape or collapse the tree.
fn check_name(what: &str, name: &str) -> Result<(), FixtureError> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(invalid(format!(
            "{what} name {name:?} is not a single path component"
        )));
    }
    Ok(())
}

fn mkdir(path: &Path) -> Result<(), FixtureError> {
    std::fs::create_dir_all(path).map_err(|source| FixtureError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `content` plus the newline every sysfs attribute ends with.
fn sysfs_file(path: &Path, content: &str) -> Result<(), FixtureError> {
    if let Some(parent) = path.parent() {
        mkdir(parent)?;
    }
    let mut text = String::with_capacity(content.len() + 1);
    text.push_str(content);
    text.push('\n');
    std::fs::write(path, text).map_err(|source| FixtureError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A regular file standing in for a character device.
fn empty_file(path: &Path) -> Result<(), FixtureError> {
    if let Some(parent) = path.parent() {
        mkdir(parent)?;
    }
    std::fs::write(path, b"").map_err(|source| FixtureError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eui64_link_local() {
        let gid = link_local_from_mac([0x0c, 0x42, 0xa1, 0x1d, 0xd1, 0x2a]);
        assert_eq!(gid.to_string(), "fe80:0000:0000:0000:0e42:a1ff:fe1d:d12a");
    }

    #[test]
    fn rejects_inconsistent_descriptions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let gid = Gid::from(Ipv4Addr::new(192, 168, 1, 10));
        let cases = [
            FixtureBuilder::new().device(
                FixtureDevice::new("mlx5_0").port(FixturePort::ethernet(1).gid_table_len(2).gid(
                    2,
                    gid,
                    GidType::RoceV2,
                    None,
                )),
            ),
            FixtureBuilder::new().device(
                FixtureDevice::new("mlx5_0").port(
                    FixturePort::ethernet(1)
                        .gid(1, gid, GidType::RoceV2, None)
                        .gid(1, gid, GidType::RoceV1, None),
                ),
            ),
            FixtureBuilder::new().device(
                FixtureDevice::new("mlx5_0").port(FixturePort::ethernet(1).gid(
                    0,
                    Gid::ZERO,
                    GidType::RoceV2,
                    None,
                )),
            ),
            FixtureBuilder::new().device(FixtureDevice::new("../escape")),
            FixtureBuilder::new().device(FixtureDevice::new("mlx5_0").netdev("a/b", 1500)),
            FixtureBuilder::new()
                .device(FixtureDevice::new("mlx5_0"))
                .device(FixtureDevice::new("mlx5_0")),
            FixtureBuilder::new()
                .device(FixtureDevice::new("mlx5_0").uverbs(0))
                .device(FixtureDevice::new("mlx5_1").uverbs(0)),
            FixtureBuilder::new().device(
                FixtureDevice::new("mlx5_0")
                    .port(FixturePort::ethernet(1))
                    .port(FixturePort::ethernet(1)),
            ),
        ];
        for case in cases {
            let err = case.write(dir.path()).expect_err("invalid");
            assert!(matches!(err, FixtureError::Invalid(_)), "{err}");
        }
    }

    #[test]
    fn every_sysfs_file_ends_with_newline() {
        let dir = tempfile::tempdir().expect("tempdir");
        FixtureBuilder::new()
            .device(
                FixtureDevice::new("mlx5_0")
                    .netdev("ens1f0np0", 1500)
                    .uverbs(0)
                    .port(FixturePort::roce_ipv4(
                        1,
                        "ens1f0np0",
                        [2, 0, 0, 0, 0, 1],
                        Ipv4Addr::new(192, 168, 1, 10),
                    )),
            )
            .write(dir.path())
            .expect("write");
        let mut stack = vec![dir.path().join("sys")];
        let mut files = 0;
        while let Some(p) = stack.pop() {
            for e in std::fs::read_dir(&p).expect("read_dir") {
                let path = e.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let text = std::fs::read_to_string(&path).expect("read");
                    assert!(
                        text.ends_with('\n') && !text.trim().is_empty(),
                        "{}",
                        path.display()
                    );
                    files += 1;
                }
            }
        }
        assert!(files > 16, "{files}");
    }
}
