//! RDMA device discovery through libibverbs (the `ibverbs` feature, via `rdma-sys`).
//!
//! Responsibility: list devices, open each, query the device (`phys_port_cnt`, `max_mr_size`),
//! each port (state, active MTU, GID table length, link layer) and each GID, then close and free
//! everything (RAII wrappers, so an early return cannot leak a context). This shows what a verbs
//! program such as Mooncake will see, including what sysfs cannot tell: the active MTU, and
//! whether `ibv_open_device` is allowed in this cgroup or container.
//! Must not: create protection domains, queue pairs or memory registrations (it only queries),
//! or treat "no RDMA on this machine" as an error.
//!
//! libibverbs is loaded when the first scan runs (`dlopen("libibverbs.so.1")`), not linked: a
//! node without rdma-core still runs mcsup (the scan then says libibverbs is missing), and a
//! TCP job never maps libibverbs and its libnl dependencies (about 0.6 MiB of mcsup's resident
//! set, and their relocation at every start). rdma-sys provides the types; the nine functions are
//! resolved by name, with the signatures rdma-sys's bindings declare.
//!
//! GID types are not read here: `rdma-sys` does not bind `_ibv_query_gid_ex`, and the type is
//! in sysfs, which is where NCCL, UCX and `show_gids` read it too. Join the two views by device
//! name and GID index.

use std::ffi::CStr;
use std::io;
use std::os::raw::{c_char, c_int};
use std::sync::OnceLock;

use rdma_sys as sys;

use crate::error::VerbsError;
use crate::gid::Gid;
use crate::types::{Guid, IbMtu, LinkLayer, PhysState, PortState};

/// `IBV_LINK_LAYER_*` from `<infiniband/verbs.h>`: an anonymous enum there, so rdma-sys's
/// bindgen run does not emit it.
const IBV_LINK_LAYER_UNSPECIFIED: u8 = 0;
const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// What libibverbs reports.
#[derive(Debug)]
pub enum VerbsScan {
    /// `ibv_get_device_list` returned NULL with ENOSYS: no RDMA subsystem (no
    /// `sys/class/infiniband_verbs/abi_version`).
    NoSubsystem,
    /// The list is empty: the subsystem is there but no device (or no provider library for it).
    NoDevices,
    /// Devices in libibverbs' order.
    Devices(Vec<VerbsDevice>),
}

impl VerbsScan {
    /// The devices (empty for the two "no devices" answers).
    pub fn devices(&self) -> &[VerbsDevice] {
        match self {
            VerbsScan::Devices(d) => d,
            VerbsScan::NoSubsystem | VerbsScan::NoDevices => &[],
        }
    }
}

/// One device as libibverbs lists it.
#[derive(Debug)]
pub struct VerbsDevice {
    /// Kernel device name (`mlx5_0`).
    pub name: String,
    /// `ibv_get_device_guid`.
    pub node_guid: Guid,
    /// The queries, or why opening/querying the device failed (EPERM here typically means the
    /// uverbs node is denied to this cgroup or container).
    pub info: Result<VerbsDeviceInfo, VerbsError>,
}

/// `ibv_query_device` results and the ports.
#[derive(Debug)]
pub struct VerbsDeviceInfo {
    /// Firmware version.
    pub fw_ver: String,
    /// Number of physical ports.
    pub phys_port_cnt: u8,
    /// Largest memory region the device can register, in bytes.
    pub max_mr_size: u64,
    /// Ports 1..=`phys_port_cnt`, each queried separately.
    pub ports: Vec<Result<VerbsPort, VerbsError>>,
}

/// `ibv_query_port` results and the populated GIDs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerbsPort {
    /// Port number (1-based).
    pub number: u8,
    /// Logical state.
    pub state: PortState,
    /// Physical state.
    pub phys_state: PhysState,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Active MTU (`None` for a value outside `IBV_MTU_*`, as on a port that is down).
    pub active_mtu: Option<IbMtu>,
    /// Largest MTU the port supports.
    pub max_mtu: Option<IbMtu>,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Subnet manager LID.
    pub sm_lid: u16,
    /// Non-zero GIDs, by index. `ibv_query_gid` succeeds with a zero GID for an empty slot;
    /// those and failing indices are left out.
    pub gids: Vec<VerbsGid>,
}

/// One populated GID slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbsGid {
    /// Table index.
    pub index: u32,
    /// The GID.
    pub gid: Gid,
}

/// The libibverbs functions the scan calls, resolved from the loaded library.
struct Verbs {
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut sys::ibv_device,
    free_device_list: unsafe extern "C" fn(*mut *mut sys::ibv_device),
    get_device_name: unsafe extern "C" fn(*mut sys::ibv_device) -> *const c_char,
    get_device_guid: unsafe extern "C" fn(*mut sys::ibv_device) -> sys::__be64,
    open_device: unsafe extern "C" fn(*mut sys::ibv_device) -> *mut sys::ibv_context,
    close_device: unsafe extern "C" fn(*mut sys::ibv_context) -> c_int,
    query_device: unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_device_attr) -> c_int,
    /// The exported `ibv_query_port` (the compat path of the header's inline).
    query_port:
        unsafe extern "C" fn(*mut sys::ibv_context, u8, *mut sys::_compat_ibv_port_attr) -> c_int,
    query_gid: unsafe extern "C" fn(*mut sys::ibv_context, u8, c_int, *mut sys::ibv_gid) -> c_int,
    /// Keeps the library mapped for as long as the pointers above are used (the process).
    _lib: libloading::Library,
}

/// The soname Debian's and every distribution's rdma-core installs (`libibverbs1`).
const LIBIBVERBS: &str = "libibverbs.so.1";

impl Verbs {
    /// Loaded once per process; an error says what is missing.
    fn get() -> Result<&'static Verbs, VerbsError> {
        static VERBS: OnceLock<Result<Verbs, String>> = OnceLock::new();
        VERBS
            .get_or_init(|| Verbs::load(LIBIBVERBS))
            .as_ref()
            .map_err(|e| VerbsError::Load { error: e.clone() })
    }

    fn load(soname: &str) -> Result<Verbs, String> {
        // SAFETY: loading libibverbs runs its constructors, which only set up its own state
        // (provider list, environment); it has no requirements on the caller.
        let lib = unsafe { libloading::Library::new(soname) }
            .map_err(|e| format!("cannot load {soname}: {e}"))?;
        /// Resolve one symbol as the function type the field declares.
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is libibverbs' public function of that name, whose C
                // signature is the one rdma-sys's bindings declare and the field's type spells.
                *unsafe { lib.get($name) }
                    .map_err(|e| format!("{soname}: {}: {e}", String::from_utf8_lossy($name)))?
            };
        }
        Ok(Verbs {
            get_device_list: sym!(b"ibv_get_device_list\0"),
            free_device_list: sym!(b"ibv_free_device_list\0"),
            get_device_name: sym!(b"ibv_get_device_name\0"),
            get_device_guid: sym!(b"ibv_get_device_guid\0"),
            open_device: sym!(b"ibv_open_device\0"),
            close_device: sym!(b"ibv_close_device\0"),
            query_device: sym!(b"ibv_query_device\0"),
            query_port: sym!(b"ibv_query_port\0"),
            query_gid: sym!(b"ibv_query_gid\0"),
            _lib: lib,
        })
    }

    /// What the header's inline `ibv_query_port` does: the context's extended `query_port` when
    /// the provider has one (it fills the whole `ibv_port_attr`), else the exported compat call.
    ///
    /// # Safety
    /// `ctx` is an open context; `attr` a valid, writable `ibv_port_attr`.
    unsafe fn query_port(
        &self,
        ctx: *mut sys::ibv_context,
        port: u8,
        attr: *mut sys::ibv_port_attr,
    ) -> c_int {
        // SAFETY: (the header's `verbs_get_ctx`/`verbs_get_ctx_op`) an extended context has
        // `abi_compat == -1` and embeds the `ibv_context` as the `context` member of a
        // `verbs_context`, whose `sz` says how many of its leading bytes the provider filled.
        unsafe {
            if (*ctx).abi_compat as usize == u32::MAX as usize {
                let vc = ctx
                    .cast::<u8>()
                    .sub(std::mem::offset_of!(sys::verbs_context, context))
                    .cast::<sys::verbs_context>();
                let needed = std::mem::size_of::<sys::verbs_context>()
                    - std::mem::offset_of!(sys::verbs_context, query_port);
                if (*vc).sz >= needed {
                    if let Some(f) = (*vc).query_port {
                        return f(ctx, port, attr, std::mem::size_of::<sys::ibv_port_attr>());
                    }
                }
            }
            (self.query_port)(ctx, port, attr.cast())
        }
    }
}

/// Owns the array from `ibv_get_device_list`.
struct DeviceList {
    verbs: &'static Verbs,
    list: *mut *mut sys::ibv_device,
    len: usize,
}

impl DeviceList {
    /// `Ok(None)` for NULL with ENOSYS (no subsystem).
    fn get() -> Result<Option<DeviceList>, VerbsError> {
        let verbs = Verbs::get()?;
        let mut num: c_int = 0;
        // SAFETY: `num` is a valid out-pointer for the call's duration; the function has no
        // other preconditions.
        let list = unsafe { (verbs.get_device_list)(&mut num) };
        if list.is_null() {
            // Read errno before anything else can overwrite it.
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENOSYS) => Ok(None),
                _ => Err(VerbsError::DeviceList { source: err }),
            };
        }
        Ok(Some(DeviceList {
            verbs,
            list,
            len: usize::try_from(num).unwrap_or(0),
        }))
    }

    fn devices(&self) -> &[*mut sys::ibv_device] {
        // SAFETY: `list` is non-null and points to `len` device pointers (plus a NULL
        // terminator), valid until `ibv_free_device_list` runs in `drop`, which the borrow of
        // `self` prevents while the slice lives.
        unsafe { std::slice::from_raw_parts(self.list, self.len) }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: `list` came from `ibv_get_device_list`, is non-null, and is freed once.
        unsafe { (self.verbs.free_device_list)(self.list) }
    }
}

/// Owns a context from `ibv_open_device`.
struct Context(&'static Verbs, *mut sys::ibv_context);

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the pointer came from a successful `ibv_open_device` and is closed once. A
        // failing close leaves nothing for us to do.
        unsafe {
            (self.0.close_device)(self.1);
        }
    }
}

/// libibverbs calls return an errno value (newer) or -1 with errno set (older).
fn verbs_error(ret: c_int) -> io::Error {
    if ret > 0 {
        io::Error::from_raw_os_error(ret)
    } else {
        io::Error::last_os_error()
    }
}

/// Queries every device libibverbs lists.
///
/// On a machine without RDMA this returns `Ok(VerbsScan::NoSubsystem)` or
/// `Ok(VerbsScan::NoDevices)`, never an error. A device that cannot be opened or queried is
/// listed with its error; only a failing device list is an error of the whole scan.
pub fn scan() -> Result<VerbsScan, VerbsError> {
    let Some(list) = DeviceList::get()? else {
        return Ok(VerbsScan::NoSubsystem);
    };
    if list.devices().is_empty() {
        return Ok(VerbsScan::NoDevices);
    }
    let devices = list
        .devices()
        .iter()
        .filter(|d| !d.is_null())
        .map(|&dev| query_device(list.verbs, dev))
        .collect();
    Ok(VerbsScan::Devices(devices))
}

fn query_device(verbs: &'static Verbs, dev: *mut sys::ibv_device) -> VerbsDevice {
    // SAFETY: `dev` is a non-null entry of a live device list; the returned string is owned by
    // libibverbs and copied before the list is freed.
    let name = unsafe {
        let p = (verbs.get_device_name)(dev);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    // SAFETY: as above; the GUID comes back in network byte order.
    let node_guid = Guid(u64::from_be(unsafe { (verbs.get_device_guid)(dev) }));
    let info = open_and_query(verbs, dev, &name);
    VerbsDevice {
        name,
        node_guid,
        info,
    }
}

fn open_and_query(
    verbs: &'static Verbs,
    dev: *mut sys::ibv_device,
    name: &str,
) -> Result<VerbsDeviceInfo, VerbsError> {
    // SAFETY: `dev` is a live entry of the device list.
    let raw = unsafe { (verbs.open_device)(dev) };
    if raw.is_null() {
        return Err(VerbsError::Open {
            device: name.to_owned(),
            source: io::Error::last_os_error(),
        });
    }
    let ctx = Context(verbs, raw);

    // SAFETY: `ibv_device_attr` is plain integers and arrays, for which all-zero is valid.
    let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx.1` is an open context and `attr` a valid, writable struct of the right type.
    let ret = unsafe { (verbs.query_device)(ctx.1, &mut attr) };
    if ret != 0 {
        return Err(VerbsError::QueryDevice {
            device: name.to_owned(),
            source: verbs_error(ret),
        });
    }
    let fw_bytes: Vec<u8> = attr
        .fw_ver
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let ports = (1..=attr.phys_port_cnt)
        .map(|port| query_port(&ctx, name, port))
        .collect();
    Ok(VerbsDeviceInfo {
        fw_ver: String::from_utf8_lossy(&fw_bytes).into_owned(),
        phys_port_cnt: attr.phys_port_cnt,
        max_mr_size: attr.max_mr_size,
        ports,
    })
}

fn query_port(ctx: &Context, name: &str, port: u8) -> Result<VerbsPort, VerbsError> {
    // Start from zeros, as the C inline does: older providers leave fields untouched.
    // SAFETY: `ibv_port_attr` is plain integers, for which all-zero is valid.
    let mut pattr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
    // SAFETY: `ctx.1` is an open context and `pattr` a valid, writable struct of the right type.
    let ret = unsafe { ctx.0.query_port(ctx.1, port, &mut pattr) };
    if ret != 0 {
        return Err(VerbsError::QueryPort {
            device: name.to_owned(),
            port,
            source: verbs_error(ret),
        });
    }
    let gid_tbl_len = u32::try_from(pattr.gid_tbl_len).unwrap_or(0);
    let mut gids = Vec::new();
    for index in 0..gid_tbl_len {
        let Ok(c_index) = c_int::try_from(index) else {
            break;
        };
        let mut gid = sys::ibv_gid { raw: [0; 16] };
        // SAFETY: open context, valid port and index in range, `gid` a writable 16-byte union.
        let ret = unsafe { (ctx.0.query_gid)(ctx.1, port, c_index, &mut gid) };
        if ret != 0 {
            continue;
        }
        // SAFETY: `raw` spans the whole union and any byte pattern is a valid `[u8; 16]`.
        let gid = Gid(unsafe { gid.raw });
        if !gid.is_zero() {
            gids.push(VerbsGid { index, gid });
        }
    }
    Ok(VerbsPort {
        number: port,
        state: PortState::from_code(pattr.state),
        phys_state: PhysState::from_code(u32::from(pattr.phys_state)),
        link_layer: match pattr.link_layer {
            IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            IBV_LINK_LAYER_UNSPECIFIED => LinkLayer::Other("Unspecified".to_owned()),
            other => LinkLayer::Other(other.to_string()),
        },
        active_mtu: IbMtu::from_verbs(pattr.active_mtu),
        max_mtu: IbMtu::from_verbs(pattr.max_mtu),
        gid_tbl_len,
        lid: pattr.lid,
        sm_lid: pattr.sm_lid,
        gids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_error_uses_positive_return_as_errno() {
        assert_eq!(verbs_error(libc::EINVAL).raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn no_devices_views_are_empty() {
        assert!(VerbsScan::NoSubsystem.devices().is_empty());
        assert!(VerbsScan::NoDevices.devices().is_empty());
    }

    #[test]
    fn a_missing_library_is_an_error_that_names_it() {
        let Err(e) = Verbs::load("libibverbs-mcsup-test-absent.so.1") else {
            panic!("loaded a library that does not exist");
        };
        assert!(
            e.starts_with("cannot load libibverbs-mcsup-test-absent.so.1: "),
            "{e}"
        );
        let shown = VerbsError::Load { error: e }.to_string();
        assert!(shown.contains("install rdma-core"), "{shown}");
    }

    #[test]
    fn a_library_without_the_functions_is_an_error_that_names_the_missing_one() {
        // libc loads, but exports no ibv_* function.
        let Err(e) = Verbs::load("libc.so.6") else {
            panic!("libc passed for libibverbs");
        };
        assert!(e.starts_with("libc.so.6: ibv_get_device_list\0: "), "{e}");
    }
}
