//! Can this process open a verbs character device?
//!
//! Responsibility: open `/dev/infiniband/uverbsN` (or any device node) for read and write and
//! classify the outcome. It uses `open`, not `access`: a Slurm cgroup device controller or a
//! container's device policy refuses at `open` time with EPERM while `access` still says yes.
//! Must not: keep the file open, issue ioctls, or decide what a failure means for a workload.

use std::fs::OpenOptions;
use std::path::Path;

use crate::error::CharDeviceError;

/// Opens `path` for read and write, as libibverbs does, and closes it at once.
///
/// Opening a uverbs node only allocates a kernel file context that the close frees; it touches
/// no hardware state.
pub fn check_char_device(path: &Path) -> Result<(), CharDeviceError> {
    match OpenOptions::new().read(true).write(true).open(path) {
        Ok(_file) => Ok(()),
        Err(e) => Err(CharDeviceError::from_open_error(path.to_path_buf(), e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_a_writable_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let node = dir.path().join("uverbs0");
        std::fs::write(&node, "").expect("write");
        check_char_device(&node).expect("opens");
    }

    #[test]
    fn missing_node_is_not_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = check_char_device(&dir.path().join("uverbs9")).expect_err("missing");
        assert!(matches!(err, CharDeviceError::NotFound { .. }), "{err:?}");
    }

    #[test]
    fn directory_is_other() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = check_char_device(dir.path()).expect_err("EISDIR");
        assert!(matches!(err, CharDeviceError::Other { .. }), "{err:?}");
    }
}
