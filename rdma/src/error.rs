//! Error types at this crate's boundary.
//!
//! Responsibility: one typed enum per fallible operation, each naming the path or device it
//! concerns. Must not: carry presentation (wording for users belongs to the caller) or be used
//! for "no RDMA here", which is a normal answer, not an error.

use std::io;
use std::path::PathBuf;

/// Scanning sysfs failed as a whole.
///
/// Only the listing of `sys/class/infiniband` itself can fail a scan: a missing directory is
/// "no RDMA subsystem", and every per-device, per-port or per-GID file that cannot be read is
/// recorded as "no value" instead.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// `sys/class/infiniband` exists (or may exist) but could not be listed.
    #[error("cannot list RDMA devices in {path}: {source}")]
    ListDevices {
        /// The directory that was listed.
        path: PathBuf,
        /// The underlying error (EACCES, ENOTDIR, ...).
        #[source]
        source: io::Error,
    },
}

/// Opening a character device (`/dev/infiniband/uverbsN`) for read and write failed.
#[derive(Debug, thiserror::Error)]
pub enum CharDeviceError {
    /// The device node does not exist (not created, or not bind-mounted into the container).
    #[error("{path} does not exist")]
    NotFound {
        /// The device node.
        path: PathBuf,
    },
    /// `open` was refused with EACCES or EPERM (file mode, a Slurm/cgroup device controller,
    /// or a container's device policy).
    #[error("opening {path} for read/write was refused: {source}")]
    PermissionDenied {
        /// The device node.
        path: PathBuf,
        /// The underlying error; `raw_os_error()` tells EACCES from EPERM.
        #[source]
        source: io::Error,
    },
    /// Any other failure (ENXIO when no driver is bound, ...).
    #[error("cannot open {path} for read/write: {source}")]
    Other {
        /// The device node.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl CharDeviceError {
    /// Classifies the error `open(path)` returned.
    pub fn from_open_error(path: PathBuf, source: io::Error) -> CharDeviceError {
        match source.raw_os_error() {
            Some(libc::ENOENT) => CharDeviceError::NotFound { path },
            Some(libc::EACCES) | Some(libc::EPERM) => {
                CharDeviceError::PermissionDenied { path, source }
            }
            _ => match source.kind() {
                io::ErrorKind::NotFound => CharDeviceError::NotFound { path },
                io::ErrorKind::PermissionDenied => {
                    CharDeviceError::PermissionDenied { path, source }
                }
                _ => CharDeviceError::Other { path, source },
            },
        }
    }
}

/// Writing a fixture tree failed.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    /// Creating a directory or writing a file failed.
    #[error("cannot write fixture file {path}: {source}")]
    Io {
        /// The file or directory being created.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The description is inconsistent (e.g. a GID index beyond the table length).
    #[error("invalid fixture: {0}")]
    Invalid(String),
}

/// A libibverbs call failed.
///
/// "No RDMA devices" (NULL list with ENOSYS, or an empty list) is not an error: see
/// `verbs::VerbsScan`.
#[cfg(feature = "ibverbs")]
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// libibverbs (`libibverbs.so.1`, Debian's `libibverbs1`) could not be loaded, or lacks a
    /// function the scan needs.
    #[error("{error} (install rdma-core: libibverbs1 and ibverbs-providers)")]
    Load {
        /// What the dynamic loader said.
        error: String,
    },
    /// `ibv_get_device_list` returned NULL with an errno other than ENOSYS.
    #[error("ibv_get_device_list failed: {source}")]
    DeviceList {
        /// The errno it left.
        #[source]
        source: io::Error,
    },
    /// `ibv_open_device` returned NULL (EPERM/EACCES when the uverbs node is denied).
    #[error("ibv_open_device({device}) failed: {source}")]
    Open {
        /// The device name.
        device: String,
        /// The errno it left.
        #[source]
        source: io::Error,
    },
    /// `ibv_query_device` failed.
    #[error("ibv_query_device({device}) failed: {source}")]
    QueryDevice {
        /// The device name.
        device: String,
        /// The error code it returned.
        #[source]
        source: io::Error,
    },
    /// `ibv_query_port` failed.
    #[error("ibv_query_port({device}, port {port}) failed: {source}")]
    QueryPort {
        /// The device name.
        device: String,
        /// The port number (1-based).
        port: u8,
        /// The error code it returned.
        #[source]
        source: io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_open_errors() {
        let p = PathBuf::from("/dev/infiniband/uverbs0");
        let e = |errno| io::Error::from_raw_os_error(errno);
        assert!(matches!(
            CharDeviceError::from_open_error(p.clone(), e(libc::ENOENT)),
            CharDeviceError::NotFound { .. }
        ));
        assert!(matches!(
            CharDeviceError::from_open_error(p.clone(), e(libc::EPERM)),
            CharDeviceError::PermissionDenied { .. }
        ));
        assert!(matches!(
            CharDeviceError::from_open_error(p.clone(), e(libc::EACCES)),
            CharDeviceError::PermissionDenied { .. }
        ));
        assert!(matches!(
            CharDeviceError::from_open_error(p.clone(), e(libc::ENXIO)),
            CharDeviceError::Other { .. }
        ));
        let msg = CharDeviceError::from_open_error(p, e(libc::EPERM)).to_string();
        assert!(msg.contains("/dev/infiniband/uverbs0"), "{msg}");
    }
}
