//! The preflight's only window on the system: files under a root directory (`/` for the live
//! node, a fixture tree in tests, a captured node with `--sysroot`).

use std::path::{Path, PathBuf};

/// A root directory under which `/proc`, `/sys` and `/dev` are read.
#[derive(Debug, Clone)]
pub struct Sysroot {
    root: PathBuf,
}

impl Sysroot {
    pub fn new(root: &Path) -> Self {
        Sysroot {
            root: root.to_path_buf(),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Map an absolute system path (`/proc/meminfo`) into the root.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        self.root.join(abs.strip_prefix("/").unwrap_or(abs))
    }

    /// Read a small text file; `None` when absent or unreadable.
    pub fn read(&self, abs: impl AsRef<Path>) -> Option<String> {
        std::fs::read_to_string(self.path(abs)).ok()
    }

    /// Read a file holding one number (or `max`): `Some(None)` for `max`.
    pub fn read_limit(&self, abs: impl AsRef<Path>) -> Option<Option<u64>> {
        let t = self.read(abs)?;
        let t = t.trim();
        if t == "max" {
            return Some(None);
        }
        t.parse().ok().map(Some)
    }

    /// Parse a procfs file with the procfs crate's parser.
    pub fn procfs<T: procfs::FromRead>(&self, abs: &str) -> Option<T> {
        T::from_file(self.path(abs)).ok()
    }
}
