//! RDMA device discovery for mcsup: sysfs and libibverbs.
//!
//! Responsibility: everything this project knows about RDMA devices. [`SysfsReader`] reads
//! devices, ports and GID tables from a sysroot (the live `/` or a fixture tree); `verbs`
//! (feature `ibverbs`, on by default) asks libibverbs the same questions plus what only it
//! knows (active MTU, whether the device opens); [`gid`] decodes GIDs; [`uverbs`] checks that a
//! device node opens; `fixture` writes fake sysroots for tests and benchmarks.
//! Must not: know about Mooncake (which GID index a program picks is that program's policy, and
//! lives with the caller), recipes, roles, environment variables or how to word a report:
//! callers pass values in and render the values that come out. "No RDMA on this machine" is
//! always a normal answer, never an error.
//!
//! Built with `--no-default-features`, the crate is sysfs only and needs neither libibverbs nor
//! libclang.

#![deny(missing_docs)]

pub mod error;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixture;
pub mod gid;
pub mod sysfs;
pub mod types;
pub mod uverbs;
#[cfg(feature = "ibverbs")]
pub mod verbs;

#[cfg(feature = "ibverbs")]
pub use error::VerbsError;
pub use error::{CharDeviceError, FixtureError, SysfsError};
pub use gid::{Gid, GidType};
pub use sysfs::{
    Device, GidEntry, Netdev, Port, RdmaPresence, RealFs, SysfsReader, SysfsScan, SysfsSource,
    UverbsDevice,
};
pub use types::{Guid, IbMtu, LinkLayer, NodeType, PhysState, PortState};
pub use uverbs::check_char_device;
