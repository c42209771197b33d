//! RDMA device discovery through sysfs, rooted at a configurable directory.
//!
//! Responsibility: read `<root>/sys/class/infiniband`, `<root>/sys/class/infiniband_verbs` and
//! `<root>/dev/infiniband` into plain values ([`SysfsScan`], [`Device`], [`Port`],
//! [`GidEntry`]), tolerating exactly what the kernel does: optional files that fail (EINVAL for
//! empty GID slots and for the netdev of native IB GIDs), are missing or are empty become "no
//! value", never an error. All file access goes through [`SysfsSource`], so tests can inject
//! errors.
//! Must not: judge the values (that is the caller's job), open device nodes (that is
//! `uverbs`), or know anything about Mooncake recipes or environment variables.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::SysfsError;
use crate::gid::{Gid, GidType};
use crate::types::{parse_lid, parse_numa_node, Guid, LinkLayer, NodeType, PhysState, PortState};

/// Files larger than this are not sysfs attributes (those fit in a page); reading stops there so
/// a wrong root cannot make the scan slurp a huge file.
const MAX_ATTR_BYTES: usize = 64 * 1024;

/// The seam through which the reader touches the file system.
///
/// [`RealFs`] is the real one; tests substitute an implementation that fails chosen paths with
/// EINVAL to reproduce what the kernel does for empty GID slots. `Sync` because devices are
/// read in parallel.
pub trait SysfsSource: Sync {
    /// Reads a whole (small) file as UTF-8.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Names of the entries of a directory, in any order.
    fn list(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Whether `path` exists (following symlinks).
    fn exists(&self, path: &Path) -> bool;
}

/// The real file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealFs;

impl SysfsSource for RealFs {
    fn read(&self, path: &Path) -> io::Result<String> {
        let mut file = File::open(path)?;
        let mut buf = [0u8; 512];
        let mut out = Vec::new();
        loop {
            let n = file.read(&mut buf)?;
            out.extend_from_slice(&buf[..n]);
            // A short read means end of file for both sysfs attributes (the whole value comes in
            // the first read) and regular fixture files; stopping here saves one read syscall
            // per file, which matters at 3 files × 256 GIDs × ports × NICs.
            if n < buf.len() {
                break;
            }
            if out.len() > MAX_ATTR_BYTES {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "file too large for a sysfs attribute",
                ));
            }
        }
        String::from_utf8(out).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    fn list(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            // Kernel names here are ASCII; a non-UTF-8 name cannot be a device we know how to
            // address anyway, so it is skipped rather than failing the listing.
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
}

/// Whether this host has RDMA at all, as sysfs tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RdmaPresence {
    /// No `sys/class/infiniband` directory: the RDMA core module is not loaded.
    NoSubsystem,
    /// The directory exists but is empty: module loaded, no HCA (or none visible here).
    NoDevices,
    /// At least one device.
    Devices,
}

/// The result of a sysfs scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SysfsScan {
    /// Whether `sys/class/infiniband` exists.
    pub subsystem_present: bool,
    /// Devices, sorted by name.
    pub devices: Vec<Device>,
    /// `sys/class/infiniband_verbs/abi_version`, when readable.
    pub verbs_abi_version: Option<u32>,
    /// Whether `dev/infiniband/rdma_cm` exists.
    pub rdma_cm_present: bool,
}

impl SysfsScan {
    /// Distinguishes "no RDMA subsystem" from "module loaded, no HCA" from "devices".
    pub fn presence(&self) -> RdmaPresence {
        match (self.subsystem_present, self.devices.is_empty()) {
            (false, _) => RdmaPresence::NoSubsystem,
            (true, true) => RdmaPresence::NoDevices,
            (true, false) => RdmaPresence::Devices,
        }
    }

    /// The device with this name.
    pub fn device(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|d| d.name == name)
    }
}

/// One RDMA device (`sys/class/infiniband/<name>`). Every attribute is `None` when its file is
/// missing, unreadable, empty or not understood.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Device {
    /// Kernel name (`mlx5_0`; udev may rename it `rocep153s0`, bonding gives `mlx5_bond_0`).
    pub name: String,
    /// `node_type`.
    pub node_type: Option<NodeType>,
    /// `node_guid`.
    pub node_guid: Option<Guid>,
    /// `fw_ver`.
    pub fw_ver: Option<String>,
    /// `hca_type`.
    pub hca_type: Option<String>,
    /// `board_id`.
    pub board_id: Option<String>,
    /// `device/numa_node`; `None` when the kernel says -1 (unknown, common on VMs).
    pub numa_node: Option<u32>,
    /// Network interfaces of the PCI function (`device/net/*`), sorted by name.
    pub netdevs: Vec<Netdev>,
    /// The verbs character device, from `sys/class/infiniband_verbs/uverbsN/ibdev`.
    pub uverbs: Option<UverbsDevice>,
    /// Ports, sorted by number.
    pub ports: Vec<Port>,
}

impl Device {
    /// The port with this number.
    pub fn port(&self, number: u32) -> Option<&Port> {
        self.ports.iter().find(|p| p.number == number)
    }
}

/// A network interface under `device/net/`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Netdev {
    /// Interface name (`ens1f0np0`).
    pub name: String,
    /// `device/net/<name>/mtu`, when readable.
    pub mtu: Option<u32>,
}

/// The verbs character device of an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UverbsDevice {
    /// `uverbsN`.
    pub name: String,
    /// `<root>/dev/infiniband/uverbsN`.
    pub char_device: PathBuf,
    /// Whether that node exists (a container may lack it even when sysfs shows the device).
    pub char_device_present: bool,
}

impl UverbsDevice {
    /// Opens the node for read and write, as libibverbs does (see
    /// [`crate::uverbs::check_char_device`]).
    pub fn check_open(&self) -> Result<(), crate::error::CharDeviceError> {
        crate::uverbs::check_char_device(&self.char_device)
    }
}

/// One port of a device (`ports/N`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Port {
    /// Port number (1-based).
    pub number: u32,
    /// `state`.
    pub state: Option<PortState>,
    /// `phys_state`.
    pub phys_state: Option<PhysState>,
    /// `link_layer`.
    pub link_layer: Option<LinkLayer>,
    /// `rate` as printed (`100 Gb/sec (4X EDR)`). On RoCE it is a lane mapping, so never infer
    /// the link layer from it.
    pub rate: Option<String>,
    /// `lid` (`0x0` on RoCE).
    pub lid: Option<u32>,
    /// `sm_lid`.
    pub sm_lid: Option<u32>,
    /// Every slot of the GID table, empty ones included, sorted by index. sysfs has a file per
    /// index up to the table length, so `gids.len()` is the table length.
    pub gids: Vec<GidEntry>,
}

impl Port {
    /// The slot at this index.
    pub fn gid(&self, index: u32) -> Option<&GidEntry> {
        self.gids.iter().find(|g| g.index == index)
    }

    /// Slots holding a non-zero GID.
    pub fn populated_gids(&self) -> impl Iterator<Item = &GidEntry> {
        self.gids.iter().filter(|g| !g.gid.is_zero())
    }

    /// Number of slots (the GID table length).
    pub fn gid_table_len(&self) -> usize {
        self.gids.len()
    }

    /// True when `link_layer` is InfiniBand.
    pub fn is_infiniband(&self) -> bool {
        self.link_layer == Some(LinkLayer::InfiniBand)
    }
}

/// One slot of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GidEntry {
    /// Index in the table (what `MC_GID_INDEX` / `NCCL_IB_GID_INDEX` name).
    pub index: u32,
    /// The GID; all zeros for an empty slot (and for an unreadable or malformed `gids/I`, which
    /// no consumer could use either).
    pub gid: Gid,
    /// `gid_attrs/types/I`; `None` for an empty slot (the kernel fails the read with EINVAL).
    pub gid_type: Option<GidType>,
    /// `gid_attrs/ndevs/I`; `None` for an empty slot and for native IB GIDs (EINVAL).
    pub netdev: Option<String>,
}

impl GidEntry {
    /// True when the slot holds a non-zero GID.
    pub fn is_populated(&self) -> bool {
        !self.gid.is_zero()
    }
}

/// Reads RDMA devices from a sysroot.
#[derive(Debug, Clone)]
pub struct SysfsReader<S = RealFs> {
    root: PathBuf,
    source: S,
}

impl SysfsReader<RealFs> {
    /// A reader of the real file system under `root` (`/` for the live system, or a fixture
    /// directory laid out like it).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SysfsReader {
            root: root.into(),
            source: RealFs,
        }
    }

    /// A reader of the live system (root `/`).
    pub fn live() -> Self {
        SysfsReader::new("/")
    }
}

impl<S: SysfsSource> SysfsReader<S> {
    /// A reader going through `source` (tests inject failures this way).
    pub fn with_source(root: impl Into<PathBuf>, source: S) -> Self {
        SysfsReader {
            root: root.into(),
            source,
        }
    }

    /// The sysroot.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/sys/class/infiniband`.
    pub fn class_dir(&self) -> PathBuf {
        self.root.join("sys/class/infiniband")
    }

    /// `<root>/sys/class/infiniband_verbs`.
    pub fn verbs_class_dir(&self) -> PathBuf {
        self.root.join("sys/class/infiniband_verbs")
    }

    /// `<root>/dev/infiniband`.
    pub fn dev_dir(&self) -> PathBuf {
        self.root.join("dev/infiniband")
    }

    /// Scans every device.
    ///
    /// A missing `sys/class/infiniband` is a normal answer ([`RdmaPresence::NoSubsystem`]); the
    /// only error is failing to list that directory for another reason.
    pub fn scan(&self) -> Result<SysfsScan, SysfsError> {
        let class_dir = self.class_dir();
        let verbs_abi_version = self
            .read_value(&self.verbs_class_dir().join("abi_version"))
            .and_then(|s| s.parse().ok());
        let rdma_cm_present = self.source.exists(&self.dev_dir().join("rdma_cm"));
        let names = match self.source.list(&class_dir) {
            Ok(names) => names,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(SysfsScan {
                    subsystem_present: false,
                    devices: Vec::new(),
                    verbs_abi_version,
                    rdma_cm_present,
                })
            }
            Err(source) => {
                return Err(SysfsError::ListDevices {
                    path: class_dir,
                    source,
                })
            }
        };
        let uverbs = self.uverbs_map();
        let mut names: Vec<String> = names.into_iter().filter(|n| visible(n)).collect();
        names.sort();
        let devices = self.read_devices(&names, &uverbs);
        Ok(SysfsScan {
            subsystem_present: true,
            devices,
            verbs_abi_version,
            rdma_cm_present,
        })
    }

    /// Reads one device by name, or `None` when `sys/class/infiniband/<name>` does not exist.
    pub fn read_device(&self, name: &str) -> Option<Device> {
        if !visible(name) || name.contains('/') || !self.source.exists(&self.class_dir().join(name))
        {
            return None;
        }
        Some(self.read_device_with(name, &self.uverbs_map()))
    }

    /// Reads devices in parallel, keeping the order of `names`.
    ///
    /// Devices are independent and a scan's cost is almost all open/read/close syscalls (a
    /// 256-slot GID table is 256 files per port), so spreading devices over the cores divides
    /// the wall time of a many-NIC scan.
    fn read_devices(&self, names: &[String], uverbs: &HashMap<String, String>) -> Vec<Device> {
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(names.len());
        if workers <= 1 {
            return names
                .iter()
                .map(|n| self.read_device_with(n, uverbs))
                .collect();
        }
        let chunk = names.len().div_ceil(workers);
        std::thread::scope(|scope| {
            let jobs: Vec<_> = names
                .chunks(chunk)
                .map(|part| {
                    let read = move || -> Vec<Device> {
                        part.iter()
                            .map(|n| self.read_device_with(n, uverbs))
                            .collect()
                    };
                    // A thread that cannot be created only costs speed: read that part here.
                    match std::thread::Builder::new().spawn_scoped(scope, read) {
                        Ok(handle) => Err(handle),
                        Err(_) => Ok(read()),
                    }
                })
                .collect();
            jobs.into_iter()
                .flat_map(|job| match job {
                    Ok(done) => done,
                    // Reading never panics; if it somehow did, re-raise it unchanged.
                    Err(handle) => handle
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                })
                .collect()
        })
    }

    /// Maps device names to their `uverbsN` entry.
    fn uverbs_map(&self) -> HashMap<String, String> {
        let dir = self.verbs_class_dir();
        let mut map = HashMap::new();
        for entry in self.source.list(&dir).unwrap_or_default() {
            // The directory also holds the `abi_version` file; only `uverbsN` entries map.
            if !entry.starts_with("uverbs") {
                continue;
            }
            if let Some(ibdev) = self.read_value(&dir.join(&entry).join("ibdev")) {
                map.insert(ibdev, entry);
            }
        }
        map
    }

    fn read_device_with(&self, name: &str, uverbs: &HashMap<String, String>) -> Device {
        let dir = self.class_dir().join(name);
        let mut netdevs: Vec<Netdev> = self
            .list_visible(&dir.join("device/net"))
            .into_iter()
            .map(|nd| {
                let mtu = self
                    .read_value(&dir.join("device/net").join(&nd).join("mtu"))
                    .and_then(|s| s.parse().ok());
                Netdev { name: nd, mtu }
            })
            .collect();
        netdevs.sort_by(|a, b| a.name.cmp(&b.name));

        let mut port_numbers: Vec<(u32, String)> = self
            .list_visible(&dir.join("ports"))
            .into_iter()
            .filter_map(|n| n.parse::<u32>().ok().map(|num| (num, n)))
            .collect();
        port_numbers.sort();
        let ports = port_numbers
            .iter()
            .map(|(number, entry)| self.read_port(*number, &dir.join("ports").join(entry)))
            .collect();

        let uverbs = uverbs.get(name).map(|entry| {
            let char_device = self.dev_dir().join(entry);
            UverbsDevice {
                name: entry.clone(),
                char_device_present: self.source.exists(&char_device),
                char_device,
            }
        });

        Device {
            name: name.to_owned(),
            node_type: self
                .read_value(&dir.join("node_type"))
                .and_then(|s| NodeType::parse_sysfs(&s)),
            node_guid: self
                .read_value(&dir.join("node_guid"))
                .and_then(|s| Guid::parse_sysfs(&s)),
            fw_ver: self.read_value(&dir.join("fw_ver")),
            hca_type: self.read_value(&dir.join("hca_type")),
            board_id: self.read_value(&dir.join("board_id")),
            numa_node: self
                .read_value(&dir.join("device/numa_node"))
                .and_then(|s| parse_numa_node(&s)),
            netdevs,
            uverbs,
            ports,
        }
    }

    fn read_port(&self, number: u32, dir: &Path) -> Port {
        let link_layer = self
            .read_value(&dir.join("link_layer"))
            .and_then(|s| LinkLayer::parse_sysfs(&s));
        let is_ib = link_layer == Some(LinkLayer::InfiniBand);
        let gids_dir = dir.join("gids");
        let types_dir = dir.join("gid_attrs/types");
        let ndevs_dir = dir.join("gid_attrs/ndevs");
        let mut indices: Vec<(u32, String)> = self
            .source
            .list(&gids_dir)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|n| n.parse::<u32>().ok().map(|i| (i, n)))
            .collect();
        indices.sort();
        let gids = indices
            .into_iter()
            .map(|(index, entry)| {
                let gid = self
                    .read_value(&gids_dir.join(&entry))
                    .and_then(|s| Gid::parse_sysfs(&s))
                    .unwrap_or(Gid::ZERO);
                if gid.is_zero() {
                    // The kernel fails types/I and ndevs/I with EINVAL for an empty slot; not
                    // asking saves two opens per empty slot, most of a 256-entry table.
                    return GidEntry {
                        index,
                        gid,
                        gid_type: None,
                        netdev: None,
                    };
                }
                let gid_type = self
                    .read_value(&types_dir.join(&entry))
                    .and_then(|s| GidType::parse_sysfs(&s, is_ib))
                    // A native IB GID has only one possible type; kernels that do not expose
                    // gid_attrs for IB ports still mean it.
                    .or(if is_ib { Some(GidType::Ib) } else { None });
                let netdev = self.read_value(&ndevs_dir.join(&entry));
                GidEntry {
                    index,
                    gid,
                    gid_type,
                    netdev,
                }
            })
            .collect();
        Port {
            number,
            state: self
                .read_value(&dir.join("state"))
                .and_then(|s| PortState::parse_sysfs(&s)),
            phys_state: self
                .read_value(&dir.join("phys_state"))
                .and_then(|s| PhysState::parse_sysfs(&s)),
            link_layer,
            rate: self.read_value(&dir.join("rate")),
            lid: self
                .read_value(&dir.join("lid"))
                .and_then(|s| parse_lid(&s)),
            sm_lid: self
                .read_value(&dir.join("sm_lid"))
                .and_then(|s| parse_lid(&s)),
            gids,
        }
    }

    /// Reads an optional attribute: any error, and empty or whitespace-only content, is `None`.
    fn read_value(&self, path: &Path) -> Option<String> {
        let text = self.source.read(path).ok()?;
        let trimmed = text.trim();
        (!trimmed.is_empty()).then(|| trimmed.to_owned())
    }

    /// Lists a directory that may be missing; hidden entries are dropped.
    fn list_visible(&self, path: &Path) -> Vec<String> {
        let mut names = self.source.list(path).unwrap_or_default();
        names.retain(|n| visible(n));
        names
    }
}

/// The kernel never creates dot-entries in these directories; fixtures do (`.gitkeep`, so git
/// can hold an empty `sys/class/infiniband/`), and they must not look like devices.
fn visible(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    /// An in-memory sysfs: files with content, directories derived from them, and paths that
    /// fail with a chosen errno (the kernel's EINVAL).
    #[derive(Default)]
    struct MemFs {
        files: HashMap<PathBuf, String>,
        failing: HashMap<PathBuf, i32>,
    }

    impl MemFs {
        fn file(mut self, path: &str, content: &str) -> Self {
            self.files.insert(PathBuf::from(path), content.to_owned());
            self
        }
        fn einval(mut self, path: &str) -> Self {
            self.failing.insert(PathBuf::from(path), libc::EINVAL);
            self
        }
        fn all_paths(&self) -> impl Iterator<Item = &PathBuf> {
            self.files.keys().chain(self.failing.keys())
        }
    }

    impl SysfsSource for MemFs {
        fn read(&self, path: &Path) -> io::Result<String> {
            if let Some(errno) = self.failing.get(path) {
                return Err(io::Error::from_raw_os_error(*errno));
            }
            self.files
                .get(path)
                .cloned()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
        fn list(&self, path: &Path) -> io::Result<Vec<String>> {
            let mut names = HashSet::new();
            for p in self.all_paths() {
                if let Ok(rest) = p.strip_prefix(path) {
                    if let Some(first) = rest.components().next() {
                        names.insert(first.as_os_str().to_string_lossy().into_owned());
                    }
                }
            }
            if names.is_empty() {
                Err(io::Error::from(io::ErrorKind::NotFound))
            } else {
                Ok(names.into_iter().collect())
            }
        }
        fn exists(&self, path: &Path) -> bool {
            self.all_paths().any(|p| p.starts_with(path))
        }
    }

    const DEV: &str = "/r/sys/class/infiniband/mlx5_0";

    fn roce_port(fs: MemFs) -> MemFs {
        fs.file(&format!("{DEV}/ports/1/state"), "4: ACTIVE\n")
            .file(&format!("{DEV}/ports/1/link_layer"), "Ethernet\n")
            .file(
                &format!("{DEV}/ports/1/gids/0"),
                "fe80:0000:0000:0000:0e42:a1ff:fe1d:d12a\n",
            )
            .file(&format!("{DEV}/ports/1/gid_attrs/types/0"), "RoCE v2\n")
            .file(&format!("{DEV}/ports/1/gid_attrs/ndevs/0"), "ens1f0np0\n")
            .file(
                &format!("{DEV}/ports/1/gids/1"),
                "0000:0000:0000:0000:0000:0000:0000:0000\n",
            )
    }

    #[test]
    fn einval_on_empty_slot_attrs_is_no_value() {
        let fs = roce_port(MemFs::default())
            .einval(&format!("{DEV}/ports/1/gid_attrs/types/1"))
            .einval(&format!("{DEV}/ports/1/gid_attrs/ndevs/1"));
        let scan = SysfsReader::with_source("/r", fs).scan().expect("scan");
        let port = scan.devices[0].port(1).expect("port 1");
        assert_eq!(port.gids.len(), 2);
        let empty = port.gid(1).expect("slot 1");
        assert!(empty.gid.is_zero());
        assert_eq!(empty.gid_type, None);
        assert_eq!(empty.netdev, None);
        let full = port.gid(0).expect("slot 0");
        assert_eq!(full.gid_type, Some(GidType::RoceV2));
        assert_eq!(full.netdev.as_deref(), Some("ens1f0np0"));
    }

    #[test]
    fn einval_on_populated_slot_attrs_is_no_value() {
        // A non-zero GID whose attribute files fail (the kernel's EINVAL on IB ndevs, or a
        // race with a GID being deleted) keeps the GID and loses only the failing values.
        let fs = MemFs::default()
            .file(&format!("{DEV}/ports/1/link_layer"), "Ethernet\n")
            .file(
                &format!("{DEV}/ports/1/gids/0"),
                "0000:0000:0000:0000:0000:ffff:c0a8:010a\n",
            )
            .einval(&format!("{DEV}/ports/1/gid_attrs/types/0"))
            .einval(&format!("{DEV}/ports/1/gid_attrs/ndevs/0"));
        let scan = SysfsReader::with_source("/r", fs).scan().expect("scan");
        let g = scan.devices[0]
            .port(1)
            .and_then(|p| p.gid(0))
            .expect("slot 0");
        assert!(!g.gid.is_zero());
        assert_eq!(g.gid_type, None);
        assert_eq!(g.netdev, None);
    }

    #[test]
    fn ib_ndev_einval_and_missing_type_infers_ib() {
        let fs = MemFs::default()
            .file(&format!("{DEV}/ports/1/link_layer"), "InfiniBand\n")
            .file(
                &format!("{DEV}/ports/1/gids/0"),
                "fe80:0000:0000:0000:b859:9f03:00d4:5e3a\n",
            )
            .einval(&format!("{DEV}/ports/1/gid_attrs/ndevs/0"));
        let scan = SysfsReader::with_source("/r", fs).scan().expect("scan");
        let g = scan.devices[0]
            .port(1)
            .and_then(|p| p.gid(0))
            .expect("slot 0");
        assert_eq!(g.gid_type, Some(GidType::Ib));
        assert_eq!(g.netdev, None);
    }

    #[test]
    fn einval_everywhere_never_aborts() {
        let fs = roce_port(MemFs::default())
            .einval(&format!("{DEV}/node_type"))
            .einval(&format!("{DEV}/node_guid"))
            .einval(&format!("{DEV}/device/numa_node"))
            .einval(&format!("{DEV}/ports/1/rate"))
            .einval(&format!("{DEV}/ports/1/lid"))
            .einval("/r/sys/class/infiniband_verbs/abi_version");
        let scan = SysfsReader::with_source("/r", fs).scan().expect("scan");
        let d = &scan.devices[0];
        assert_eq!(d.node_type, None);
        assert_eq!(d.node_guid, None);
        assert_eq!(d.numa_node, None);
        assert_eq!(scan.verbs_abi_version, None);
        let p = d.port(1).expect("port");
        assert_eq!(p.rate, None);
        assert_eq!(p.lid, None);
        assert_eq!(p.state, Some(PortState::Active));
    }

    #[test]
    fn malformed_and_empty_content_is_no_value() {
        let fs = MemFs::default()
            .file(&format!("{DEV}/node_type"), "\n")
            .file(&format!("{DEV}/node_guid"), "not a guid\n")
            .file(&format!("{DEV}/fw_ver"), "   \n")
            .file(&format!("{DEV}/device/numa_node"), "-1\n")
            .file(&format!("{DEV}/ports/1/state"), "ACTIVE\n")
            .file(&format!("{DEV}/ports/1/phys_state"), "\u{0}\u{1}")
            .file(&format!("{DEV}/ports/1/link_layer"), "")
            .file(&format!("{DEV}/ports/1/lid"), "0xzz\n")
            .file(&format!("{DEV}/ports/1/gids/0"), "garbage\n")
            .file(
                &format!("{DEV}/ports/1/gids/x"),
                "fe80:0000:0000:0000:0000:0000:0000:0001\n",
            )
            .file(&format!("{DEV}/ports/one/state"), "4: ACTIVE\n");
        let scan = SysfsReader::with_source("/r", fs).scan().expect("scan");
        let d = &scan.devices[0];
        assert_eq!(d.node_type, None);
        assert_eq!(d.node_guid, None);
        assert_eq!(d.fw_ver, None);
        assert_eq!(d.numa_node, None);
        assert_eq!(d.ports.len(), 1, "non-numeric port entries are ignored");
        let p = &d.ports[0];
        assert_eq!(
            (p.state, p.phys_state, p.link_layer.clone(), p.lid),
            (None, None, None, None)
        );
        assert_eq!(p.gids.len(), 1, "non-numeric gid entries are ignored");
        assert!(
            p.gids[0].gid.is_zero(),
            "a malformed gid reads as an empty slot"
        );
    }

    #[test]
    fn listing_error_other_than_not_found_is_an_error() {
        struct Denied;
        impl SysfsSource for Denied {
            fn read(&self, _: &Path) -> io::Result<String> {
                Err(io::Error::from_raw_os_error(libc::EACCES))
            }
            fn list(&self, _: &Path) -> io::Result<Vec<String>> {
                Err(io::Error::from_raw_os_error(libc::EACCES))
            }
            fn exists(&self, _: &Path) -> bool {
                false
            }
        }
        let err = SysfsReader::with_source("/r", Denied)
            .scan()
            .expect_err("EACCES");
        assert!(err.to_string().contains("/r/sys/class/infiniband"), "{err}");
    }

    #[test]
    fn not_found_is_no_subsystem() {
        let scan = SysfsReader::with_source("/r", MemFs::default())
            .scan()
            .expect("scan");
        assert_eq!(scan.presence(), RdmaPresence::NoSubsystem);
        assert!(scan.devices.is_empty());
    }

    #[test]
    fn uverbs_mapping_skips_abi_version() {
        let fs = roce_port(MemFs::default())
            .file("/r/sys/class/infiniband_verbs/abi_version", "6\n")
            .file("/r/sys/class/infiniband_verbs/uverbs3/ibdev", "mlx5_0\n")
            .file("/r/dev/infiniband/uverbs3", "");
        let scan = SysfsReader::with_source("/r", fs).scan().expect("scan");
        assert_eq!(scan.verbs_abi_version, Some(6));
        let u = scan.devices[0].uverbs.as_ref().expect("uverbs");
        assert_eq!(u.name, "uverbs3");
        assert_eq!(u.char_device, PathBuf::from("/r/dev/infiniband/uverbs3"));
        assert!(u.char_device_present);
    }

    #[test]
    fn real_fs_reads_whole_files_of_any_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let exact = dir.path().join("exact");
        let content = "x".repeat(512 * 3);
        std::fs::write(&exact, &content).expect("write");
        assert_eq!(RealFs.read(&exact).expect("read"), content);
        let huge = dir.path().join("huge");
        std::fs::write(&huge, vec![b'a'; MAX_ATTR_BYTES + 4096]).expect("write");
        assert!(RealFs.read(&huge).is_err());
        let binary = dir.path().join("binary");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).expect("write");
        assert!(RealFs.read(&binary).is_err());
    }

    #[test]
    fn read_device_rejects_odd_names() {
        let reader = SysfsReader::with_source("/r", roce_port(MemFs::default()));
        assert!(reader.read_device("mlx5_0").is_some());
        assert!(reader.read_device("mlx5_9").is_none());
        assert!(reader.read_device("").is_none());
        assert!(reader.read_device("../infiniband/mlx5_0").is_none());
        assert!(reader.read_device(".gitkeep").is_none());
    }
}
