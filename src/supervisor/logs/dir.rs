//! The log directory's safety: file names, private files opened without following links or
//! blocking on FIFOs, rotation, and the per-node lock (see the module doc of [`super`]).

use std::collections::BTreeMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{
    DirBuilderExt, FileExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt,
};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::plan::Plan;

use crate::supervisor::SupervisorError;

/// Rotated logs kept per process (`.1` .. `.N`).
pub const KEEP_ROTATED: u32 = 5;

/// `<log_dir>/<node>.<process>.log`
pub fn log_path(dir: &Path, node: &str, process: &str) -> PathBuf {
    dir.join(format!("{node}.{process}.log"))
}

/// `<log_dir>/<node>.lock`
pub fn lock_path(dir: &Path, node: &str) -> PathBuf {
    dir.join(format!("{node}.lock"))
}

/// Longest node or process name: `<node>.<process>.log.N` must fit in a file name (255 bytes).
const MAX_NAME: usize = 100;

/// A node or process name must be usable as (part of) a file name in the log directory: letters,
/// digits, `-`, `_`, `.`, not `.` or `..`, at most [`MAX_NAME`] bytes. `what` is `node` or
/// `process`; the error says what is wrong and what would be right.
pub fn check_name(what: &str, name: &str) -> Result<(), String> {
    let problem = if name.is_empty() {
        Some("it is empty")
    } else if what == "process" && name == "mcsup" {
        Some("it is mcsup's own: its events and its log lines name mcsup itself so")
    } else if what == "process" && name.contains('.') {
        Some("it contains `.`: `n1` + `a.w` and `n1.a` + `w` would share one log file")
    } else if name == "." || name == ".." {
        Some("it is `.` or `..`")
    } else if name.len() > MAX_NAME {
        Some("it is longer than 100 bytes")
    } else if name.contains('/') {
        Some("it contains `/`")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        Some("it contains a character other than letters, digits, '-', '_' and '.'")
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(p) => Err(format!(
            "{what} name `{name}` cannot name files in the log directory ({p}): use letters, digits, '-', '_' or '.' (not `.` or `..`); it names <log_dir>/<node>.<process>.log"
        )),
    }
}

/// How [`open_private`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::supervisor) enum OpenMode {
    /// Append, creating it (0600) if missing.
    Append,
    /// Append to a new file (0600); it must not exist yet.
    AppendNew,
    /// Create it (0600); it must not exist yet.
    CreateNew,
    /// Read and write, creating it (0600) if missing (the lock file).
    ReadWrite,
    /// Read an existing file.
    Read,
}

fn describe(ft: std::fs::FileType) -> &'static str {
    if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else {
        "not a regular file"
    }
}

fn not_regular(ft: std::fs::FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "is {}, not a regular file: mcsup does not write through it (remove it; only its owner should be able to write in the log directory)",
            describe(ft)
        ),
    )
}

/// A file mcsup writes must be its own: one another user created first (in a shared, sticky
/// log directory) would hand that user everything written into it.
fn not_someone_elses(owner: u32) -> io::Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    if owner == me {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "is owned by uid {owner}, not by this user (uid {me}): another user created it before mcsup did, and could read everything mcsup would write into it, so mcsup does not (its owner can remove it; or use a log_dir only you can write)"
        ),
    ))
}

/// Open `path` without following a symlink at its last component and without blocking on a FIFO
/// (`O_NOFOLLOW | O_NONBLOCK`), created 0600, and refuse anything but a regular file. `O_NONBLOCK`
/// is cleared again: for a regular file it changes nothing, but the file is handed on.
pub(in crate::supervisor) fn open_private(path: &Path, mode: OpenMode) -> io::Result<File> {
    let mut o = OpenOptions::new();
    match mode {
        OpenMode::Append => o.append(true).create(true),
        OpenMode::AppendNew => o.append(true).create_new(true),
        OpenMode::CreateNew => o.write(true).create_new(true),
        OpenMode::ReadWrite => o.read(true).write(true).create(true),
        OpenMode::Read => o.read(true),
    };
    o.mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    let f = match o.open(path) {
        Ok(f) => f,
        // ELOOP: a symlink (O_NOFOLLOW); ENXIO: a FIFO without a reader or a socket
        // (O_NONBLOCK); EISDIR: a directory. Say what is there rather than quoting errno.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ELOOP | libc::ENXIO | libc::EISDIR)
            ) =>
        {
            return Err(match std::fs::symlink_metadata(path) {
                Ok(m) if !m.file_type().is_file() => not_regular(m.file_type()),
                _ => e,
            })
        }
        Err(e) => return Err(e),
    };
    let meta = f.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_regular(meta.file_type()));
    }
    if mode != OpenMode::Read {
        not_someone_elses(meta.uid())?;
    }
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with integer arguments.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    // A file an older mcsup (or a looser umask) left readable by others becomes private.
    if mode != OpenMode::Read && meta.mode() & 0o077 != 0 {
        // SAFETY: fchmod on a descriptor we own.
        unsafe { libc::fchmod(fd, 0o600) };
    }
    Ok(f)
}

/// `<path>.<16 random hex digits>.tmp`, next to `path`: unpredictable, so nobody can plant
/// anything there in advance (it is created `O_EXCL` anyway).
pub(in crate::supervisor) fn temp_path(path: &Path) -> PathBuf {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), libc::GRND_NONBLOCK) };
    if n != b.len() as isize {
        // No entropy yet (early boot): still unique, and O_EXCL keeps it safe.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let x = t ^ ((std::process::id() as u64) << 32) ^ COUNTER.fetch_add(1, Ordering::Relaxed);
        b = x.to_le_bytes();
    }
    let mut s = path.as_os_str().to_owned();
    s.push(".");
    for byte in b {
        s.push(format!("{byte:02x}"));
    }
    s.push(".tmp");
    PathBuf::from(s)
}

/// `path` as [`rotate`] keeps it `n` rotations ago: `<path>.<n>`, or `path` itself for 0.
pub fn rotated_path(path: &Path, n: usize) -> PathBuf {
    if n == 0 {
        return path.to_path_buf();
    }
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// Keep the previous log as `.1`, `.1` as `.2`, ... up to `keep`; the oldest is removed. Only a
/// regular file is rotated: anything else at `path` is refused (renames and removals act on the
/// names themselves, so the numbered ones never lead anywhere).
pub fn rotate(path: &Path, keep: u32) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => return Err(not_regular(m.file_type())),
        Ok(m) if m.len() > 0 => {}
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    let numbered = |n: u32| rotated_path(path, n as usize);
    if keep == 0 {
        return std::fs::remove_file(path);
    }
    let _ = std::fs::remove_file(numbered(keep));
    for n in (1..keep).rev() {
        let from = numbered(n);
        if std::fs::symlink_metadata(&from).is_ok() {
            std::fs::rename(&from, numbered(n + 1)).map_err(|e| whose(e, &numbered(n + 1)))?;
        }
    }
    std::fs::rename(path, numbered(1)).map_err(|e| whose(e, &numbered(1)))
}

/// A rename refused over `dest`: when another user owns what is there (planted in a shared
/// sticky directory after mcsup started: the re-run of round 4's L3), the error names them.
fn whose(e: io::Error, dest: &Path) -> io::Error {
    use std::os::unix::fs::MetadataExt;
    let me = nix::unistd::geteuid().as_raw();
    match std::fs::symlink_metadata(dest) {
        Ok(m) if m.uid() != me && matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
            io::Error::new(
                e.kind(),
                format!(
                    "{e}: {} is owned by uid {}, not by this user (uid {me}): another user put it there; use a log directory only you can write",
                    dest.display(),
                    m.uid()
                ),
            )
        }
        _ => e,
    }
}

enum LockError {
    /// Another open file holds it; the pid it wrote, if it could be read.
    Held(Option<u32>),
    Io(io::Error),
}

/// `flock` `<dir>/<node>.lock` (exclusive, non-blocking) and write our pid into it. The lock goes
/// with the descriptor: released when the run ends or mcsup dies, never left stale.
fn take_lock(dir: &Path, node: &str) -> Result<File, LockError> {
    let path = lock_path(dir, node);
    let f = open_private(&path, OpenMode::ReadWrite).map_err(LockError::Io)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(LockError::Io(e));
        }
        // The holder writes its pid right after locking: give it a moment.
        let mut pid = None;
        for _ in 0..20 {
            let mut buf = [0u8; 32];
            let n = f.read_at(&mut buf, 0).unwrap_or(0);
            pid = std::str::from_utf8(&buf[..n])
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            if pid.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        return Err(LockError::Held(pid));
    }
    let pid = format!("{}\n", std::process::id());
    f.set_len(0)
        .and_then(|()| f.write_all_at(pid.as_bytes(), 0))
        .map_err(LockError::Io)?;
    Ok(f)
}

/// Create `dir` (0700, with any missing parents) if it does not exist. The run that owns it
/// notices a recreated directory itself ([`LogDirLock::recreated`]).
pub(in crate::supervisor) fn ensure_dir(dir: &Path) -> io::Result<()> {
    match std::fs::metadata(dir) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            DirBuilder::new().recursive(true).mode(0o700).create(dir)
        }
        Err(e) => Err(e),
    }
}

/// This run's scratch directory (etcd's and NATS's data), private to this user; removed with
/// its contents when dropped (after the teardown).
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Make `path` (0700) or take it over (made 0700) when it is already a directory of this user
    /// that nobody else could write in (an earlier run of the same job on this node). Anything
    /// else is refused, with what is there:
    /// the name is predictable, and a directory another user made first (or a link to one) would
    /// let them read or redirect what etcd and NATS write, and the `rm -rf` of etcd's data
    /// directory.
    pub fn claim(path: &Path) -> Result<ScratchDir, SupervisorError> {
        let refuse = |what: String| {
            SupervisorError::Setup(format!(
                "scratch directory {} {what}: another user may have made it to read or redirect etcd's and NATS's files. Fix: remove it if it is yours, or set TMPDIR to a directory only you can write",
                path.display()
            ))
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            ensure_dir(parent).map_err(|e| SupervisorError::io(parent, e))?;
            let m = std::fs::metadata(parent).map_err(|e| SupervisorError::io(parent, e))?;
            if m.mode() & 0o002 != 0 && m.mode() & 0o1000 == 0 {
                return Err(refuse(format!(
                    "is in {}, which every user can write without the sticky bit (mode {:04o}): anyone could rename it and put another in its place",
                    parent.display(),
                    m.mode() & 0o7777
                )));
            }
        }
        match DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let m =
                    std::fs::symlink_metadata(path).map_err(|e| SupervisorError::io(path, e))?;
                let me = nix::unistd::geteuid().as_raw();
                if !m.file_type().is_dir() {
                    return Err(refuse(format!(
                        "already exists and is {}",
                        describe(m.file_type())
                    )));
                }
                if m.uid() != me {
                    return Err(refuse(format!(
                        "already exists and belongs to uid {}, not to this user (uid {me})",
                        m.uid()
                    )));
                }
                if m.mode() & 0o022 != 0 {
                    return Err(refuse(format!(
                        "already exists with mode {:04o}: other users could have put files in it",
                        m.mode() & 0o7777
                    )));
                }
                // Ours, and nobody else could write in it (an earlier run's, or an older
                // mcsup's, whose shell made it 0755).
            }
            Err(e) => return Err(SupervisorError::io(path, e)),
        }
        // 0700 whatever the umask took away from a new one or an older run gave an old one.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| SupervisorError::io(path, e))?;
        Ok(ScratchDir {
            path: path.to_path_buf(),
        })
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // Checked at claim: ours, and nobody else could write in it, so nothing in it was planted.
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(dir = %self.path.display(), error = %e, "cannot remove the scratch directory");
        }
    }
}

/// Holds the log directory for one run (see the module doc); dropping it releases the lock. The
/// runtime owns it: nothing else knows which run a directory belongs to.
#[must_use = "the log directory is locked only while this is held"]
pub struct LogDirLock {
    dir: PathBuf,
    node: String,
    /// The directory's (device, inode) when it was claimed or last recreated.
    id: (u64, u64),
    /// Held open for the run: closing it releases the flock. The file stays when the run ends
    /// (removing it would let a waiting opener lock a name nobody else sees).
    lock: Option<File>,
}

impl LogDirLock {
    /// Whether the directory was removed and created again since it was claimed (or since the last
    /// call that said so): then the lock is taken again on the new directory's lock file.
    pub(in crate::supervisor) fn recreated(&mut self) -> bool {
        let Ok(now) = std::fs::metadata(&self.dir).map(|m| (m.dev(), m.ino())) else {
            return false; // gone now: the next file opened there recreates it
        };
        if self.id == now {
            return false;
        }
        self.id = now;
        self.relock();
        true
    }

    /// The lock of `dir` for `node`, without `claim_log_dir`'s checks (a unit test's own
    /// directory).
    #[cfg(test)]
    pub(in crate::supervisor) fn for_test(dir: &Path, node: &str) -> LogDirLock {
        let id = std::fs::metadata(dir)
            .map(|m| (m.dev(), m.ino()))
            .expect("the test's directory");
        LogDirLock {
            dir: dir.to_path_buf(),
            node: node.to_string(),
            id,
            lock: take_lock(dir, node).ok(),
        }
    }

    /// The directory this lock is for.
    pub(in crate::supervisor) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Take the lock again after the directory was recreated (the old lock file went with it).
    fn relock(&mut self) {
        match take_lock(&self.dir, &self.node) {
            Ok(f) => self.lock = Some(f),
            Err(LockError::Held(pid)) => tracing::warn!(
                lock = %lock_path(&self.dir, &self.node).display(),
                holder = %pid.map(|p| p.to_string()).unwrap_or_else(|| "unknown".into()),
                "another mcsup took the log directory's lock while it was gone: both now write here"
            ),
            Err(LockError::Io(e)) => tracing::warn!(
                lock = %lock_path(&self.dir, &self.node).display(),
                error = %e,
                "cannot take the log directory's lock again"
            ),
        }
    }
}

/// Make `plan.log_dir` safe to use for this run and lock it for `plan.node` (see the module doc).
/// Call before anything is written into it; hold the result until the run is over.
///
/// Errors (exit code 3): a node or process name that is not a plain file name; a directory
/// writable by others without the sticky bit; another mcsup holding the lock (its pid named); a
/// symlink, FIFO or other non-regular file where mcsup's own files go.
pub fn claim_log_dir(plan: &Plan) -> Result<LogDirLock, SupervisorError> {
    let dir = &plan.log_dir;
    let node = &plan.node.name;
    check_name("node", node).map_err(SupervisorError::Setup)?;
    for p in &plan.processes {
        check_name("process", &p.name).map_err(SupervisorError::Setup)?;
    }
    if let Err(e) = std::fs::metadata(dir) {
        if e.kind() != io::ErrorKind::NotFound {
            return Err(SupervisorError::io(dir, e));
        }
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| SupervisorError::io(dir, e))?;
    }
    let meta = std::fs::metadata(dir).map_err(|e| SupervisorError::io(dir, e))?;
    if !meta.is_dir() {
        return Err(SupervisorError::Setup(format!(
            "log directory {} is not a directory",
            dir.display()
        )));
    }
    let m = meta.mode();
    let sticky = m & 0o1000 != 0;
    let me = nix::unistd::geteuid().as_raw();
    if m & 0o002 != 0 && meta.uid() != me && meta.uid() != 0 {
        // A sticky bit does not bind the directory's owner: that user can remove or replace
        // every file mcsup makes in it.
        return Err(SupervisorError::Setup(format!(
            "log directory {} belongs to another user (uid {}) and every user can write in it (mode {:04o}): its owner could remove or replace mcsup's logs and status. Fix: use a log_dir of your own (mcsup.log_dir, or --log-dir)",
            dir.display(),
            meta.uid(),
            m & 0o7777
        )));
    }
    if m & 0o002 != 0 && !sticky {
        return Err(SupervisorError::Setup(format!(
            "log directory {} is writable by every user (mode {:04o}) without the sticky bit: anyone could replace or redirect mcsup's logs and status. Fix: chmod 700 {} (or chmod +t if it must be shared)",
            dir.display(),
            m & 0o7777,
            dir.display()
        )));
    }
    if m & 0o020 != 0 && !sticky {
        tracing::warn!(
            dir = %dir.display(),
            mode = %format!("{:04o}", m & 0o7777),
            "the log directory is writable by its group: its members could replace mcsup's files (fix: chmod 700)"
        );
    }
    let lock = match take_lock(dir, node) {
        Ok(f) => f,
        Err(LockError::Held(pid)) => {
            return Err(SupervisorError::Setup(format!(
                "log directory {} is in use for node `{node}` by another mcsup (pid {}, holding {}): two supervisors there would rotate each other's live logs and overwrite each other's status. Stop that one first, or use another log_dir or --node",
                dir.display(),
                pid.map(|p| p.to_string()).unwrap_or_else(|| "unknown".into()),
                lock_path(dir, node).display()
            )))
        }
        Err(LockError::Io(e)) => return Err(SupervisorError::io(&lock_path(dir, node), e)),
    };
    // Refuse a symlink or FIFO planted where this run's files go before anything starts (a later
    // one is refused when the file is opened).
    let mut own = vec![
        crate::runfiles::events_path(dir, node),
        crate::runfiles::status_path(dir, node),
    ];
    for p in &plan.processes {
        let log = log_path(dir, node, &p.name);
        // Its earlier runs' logs too: one another user made first fails the rotation with EPERM
        // at a restart, and that life's output is lost (round 4's L3).
        own.extend((1..=KEEP_ROTATED as usize).map(|n| rotated_path(&log, n)));
        own.push(log);
    }
    // The coordinator's files (round 4's L3: a planted control.secret stopped it with a bare
    // "Operation not permitted").
    if let Some(c) = plan.control.as_ref().filter(|c| c.coordinator == *node) {
        if c.secret.parent() == Some(dir.as_path()) {
            own.push(c.secret.clone());
        }
        own.push(dir.join("worker_restarts.json"));
    }
    // One listing of the directory rather than a stat per file (a file type from the listing is
    // the link's own, as with lstat); a directory that cannot be listed is checked file by file.
    let present: Option<BTreeMap<std::ffi::OsString, std::fs::FileType>> =
        std::fs::read_dir(dir).ok().map(|entries| {
            entries
                .flatten()
                .filter_map(|e| Some((e.file_name(), e.file_type().ok()?)))
                .collect()
        });
    for path in own {
        let there = match &present {
            Some(listed) => path.file_name().is_some_and(|n| listed.contains_key(n)),
            None => true,
        };
        if !there {
            continue;
        }
        // What is there: its own type (not a link's target) and its owner.
        let Ok(m) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !m.file_type().is_file() {
            return Err(SupervisorError::io(&path, not_regular(m.file_type())));
        }
        not_someone_elses(m.uid()).map_err(|e| SupervisorError::io(&path, e))?;
    }
    Ok(LogDirLock {
        dir: dir.clone(),
        node: node.clone(),
        id: (meta.dev(), meta.ino()),
        lock: Some(lock),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_plain_file_name_components() {
        for ok in ["n1", "gpu-01.cluster", "decode_0", "a.b-c_d", "..x", "x.."] {
            assert_eq!(check_name("node", ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "/abs/x",
            "a/b",
            "a b",
            "a\0b",
            "ü",
            &"x".repeat(101),
        ] {
            let e = check_name("process", bad).unwrap_err();
            assert!(e.contains("letters, digits"), "{bad:?}: {e}");
        }
        // mcsup's own name, for a process (a node may be called so).
        let e = check_name("process", "mcsup").unwrap_err();
        assert!(e.contains("it is mcsup's own"), "{e}");
        assert_eq!(check_name("node", "mcsup"), Ok(()));
        // A dot: fine in a node's name (a host name), not in a process's.
        let e = check_name("process", "a.w").unwrap_err();
        assert!(e.contains("share one log file"), "{e}");
        assert!(crate::domain::plain_process_name("decode_0-a"));
        assert!(!crate::domain::plain_process_name("a.w"));
        // The adversarial re-run's D18: a 300-byte name passed `plan` and failed at `run`; a
        // recipe's names leave room for the instance number within the 100 bytes.
        assert!(crate::domain::plain_process_name(&"w".repeat(90)));
        assert!(!crate::domain::plain_process_name(&"w".repeat(91)));
    }

    /// A rename refused over another user's file says whose it is (the re-run of round 4's L3:
    /// "Operation not permitted" named nobody).
    #[test]
    fn a_refused_rename_over_another_users_file_names_them() {
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("n1.w.log.1");
        std::fs::write(&theirs, "planted").unwrap();
        let eperm = || io::Error::from_raw_os_error(libc::EPERM);
        // This user's own file: the error as it was.
        assert_eq!(whose(eperm(), &theirs).to_string(), eperm().to_string());
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(1000)), None).unwrap();
            let e = whose(eperm(), &theirs).to_string();
            assert!(
                e.contains("is owned by uid 1000, not by this user")
                    && e.contains("another user put it there"),
                "{e}"
            );
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "the chown case needs root under CI"
            );
        }
    }

    #[test]
    fn open_private_refuses_what_is_not_a_regular_file_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for (path, what) in [(&link, "symbolic link"), (&fifo, "FIFO")] {
            for mode in [OpenMode::Append, OpenMode::ReadWrite, OpenMode::Read] {
                let e = open_private(path, mode).unwrap_err().to_string();
                assert!(e.contains(what), "{mode:?} {what}: {e}");
            }
            assert!(rotate(path, 3).unwrap_err().to_string().contains(what));
        }
        assert!(!target.exists(), "the symlink was followed");
        let e = open_private(dir.path(), OpenMode::Append).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        // A FIFO with a reader opens without O_NONBLOCK trouble, and is still refused.
        let _reader = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let e = open_private(&fifo, OpenMode::Append).unwrap_err();
        assert!(e.to_string().contains("FIFO"), "{e}");
    }

    /// The scratch directory: made 0700, and removed with its contents after the run; taken over
    /// (made 0700) when it is already this user's and nobody else could write in it; refused when
    /// it is a link, writable by others, or in a directory anyone can rename it in.
    #[test]
    fn the_scratch_directory_is_private_and_goes_with_the_run() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("mcsup-7-n1");
        let s = ScratchDir::claim(&path).unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o7777, 0o700);
        std::fs::create_dir_all(path.join("etcd/member")).unwrap();
        std::fs::write(path.join("nats.conf"), "x").unwrap();
        drop(s);
        assert!(!path.exists(), "made by this run: removed");

        // An earlier run's (an older mcsup's shell made it 0755): made private, then removed.
        std::fs::create_dir(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = ScratchDir::claim(&path).unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o700);
        drop(s);
        assert!(!path.exists());

        std::fs::create_dir(&path).unwrap();
        for mode in [0o777, 0o775, 0o1777] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = ScratchDir::claim(&path).err().unwrap().to_string();
            assert!(
                e.contains(&format!(
                    "already exists with mode {mode:04o}: other users could"
                )),
                "{e}"
            );
        }
        std::fs::remove_dir(&path).unwrap();

        let victim = d.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let e = ScratchDir::claim(&path).err().unwrap().to_string();
        assert!(e.contains("already exists and is a symbolic link"), "{e}");
        assert!(
            e.contains("Fix: remove it if it is yours, or set TMPDIR"),
            "{e}"
        );
        assert!(victim.is_dir());

        let open = d.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = ScratchDir::claim(&open.join("mcsup-7-n1"))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("which every user can write without the sticky bit"),
            "{e}"
        );
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        drop(ScratchDir::claim(&open.join("mcsup-7-n1")).unwrap());
    }

    #[test]
    fn private_files_are_0600_and_blocking() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, "old").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let f = open_private(&p, OpenMode::Append).unwrap();
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        // SAFETY: fcntl F_GETFL on a descriptor we own.
        let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(flags & libc::O_NONBLOCK, 0);
        let n = dir.path().join("new");
        let f = open_private(&n, OpenMode::CreateNew).unwrap();
        assert_eq!(f.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(
            open_private(&n, OpenMode::CreateNew).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
    }

    #[test]
    fn temp_paths_are_unpredictable_siblings() {
        let p = Path::new("/d/n1.status.json");
        let (a, b) = (temp_path(p), temp_path(p));
        assert_ne!(a, b);
        assert_eq!(a.parent(), p.parent());
        let name = a.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("n1.status.json.") && name.ends_with(".tmp") && name.len() == 35,
            "{name}"
        );
    }

    #[test]
    fn rotation_keeps_a_bounded_history() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("n.p.log");
        for i in 0..8 {
            std::fs::write(&p, format!("gen {i}")).unwrap();
            rotate(&p, 3).unwrap();
        }
        assert!(!p.exists());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("n.p.log.1")).unwrap(),
            "gen 7"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("n.p.log.3")).unwrap(),
            "gen 5"
        );
        assert!(!dir.path().join("n.p.log.4").exists());
    }
}
