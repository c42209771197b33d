//! Children's output and the log directory: per-process log files (rotated on restart), line
//! splitting, the console mux, log-line readiness matching, and the directory's safety.
//!
//! One reader task per spawned child drains its pipe as fast as the pipe delivers, writes every
//! line to the file, and offers lines to the console without ever waiting for it: the console is
//! a separate thread behind a bounded queue, and what does not fit is counted as dropped (a slow
//! terminal must never block a child, process-compose #57). Lines are capped at [`MAX_LINE`]
//! (longer ones are split and marked) so a 1 MB line without a newline keeps memory bounded, and
//! the last partial line is written at EOF (process-compose #237). A write to the file that fails
//! (`ENOSPC`, `EFBIG`) loses that output: it is counted per process, warned about, recorded as an
//! `output-lost` event and in the status file, and marked in the log once writes work again.
//!
//! The log directory is shared ground (a retried step, two nodes that resolve to one name, a
//! careless or hostile neighbour), so [`claim_log_dir`], called once at start-up, makes it safe:
//! - node and process names must be plain file-name components ([`check_name`]): they name files;
//! - the directory is created 0700, and refused when others may write in it without the sticky
//!   bit (they could swap mcsup's files);
//! - `<node>.lock` is `flock`ed for the whole run: a second mcsup on the same directory and node
//!   exits with **code 3** (supervisor setup error), naming the holder's pid, instead of
//!   rotating the first one's live files and overwriting its status;
//! - every file is opened with `O_NOFOLLOW | O_NONBLOCK`, created 0600, and refused unless it is
//!   a regular file (a planted symlink is never followed, a planted FIFO cannot hang `open()`);
//!   temp files are created `O_EXCL` under an unpredictable name;
//! - a directory deleted while mcsup runs is recreated (0700, and the lock taken again) the next
//!   time a file in it must be opened, so a restart does not fail for want of it.
//!
//! This module must not decide anything about processes: it reports log-line matches and losses
//! and stops.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use regex::bytes::Regex;

use crate::plan::Plan;

use super::status::{self, Clock, OutputLost, StatusFile};
use super::SupervisorError;

/// Longest line kept whole; longer lines are split into pieces of this size.
pub const MAX_LINE: usize = 64 * 1024;
/// Appended to each piece of a split line.
pub const SPLIT_MARKER: &[u8] = b" [mcsup: line longer than 64 KiB, split]";
/// Rotated logs kept per process (`.1` .. `.N`).
pub const KEEP_ROTATED: u32 = 5;
/// Bytes the console queue may hold before lines are dropped.
const CONSOLE_QUEUE_BYTES: usize = 4 << 20;
const CONSOLE_QUEUE_BATCHES: usize = 1024;

/// Splits a byte stream into lines of at most `cap` bytes (without the newline).
#[derive(Debug)]
pub struct LineSplitter {
    buf: Vec<u8>,
    cap: usize,
}

impl LineSplitter {
    /// A splitter keeping lines of at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        LineSplitter {
            buf: Vec::new(),
            cap: cap.max(1),
        }
    }

    /// Feed bytes; `emit(line, split)` is called for each complete line or full piece (`split`
    /// = the line goes on in the next piece).
    pub fn push(&mut self, mut data: &[u8], emit: &mut dyn FnMut(&[u8], bool)) {
        while !data.is_empty() {
            let nl = data.iter().position(|&b| b == b'\n');
            let (mut chunk, complete) = match nl {
                Some(p) => (&data[..p], true),
                None => (data, false),
            };
            data = match nl {
                Some(p) => &data[p + 1..],
                None => &[],
            };
            while chunk.len() > self.cap - self.buf.len() {
                let room = self.cap - self.buf.len();
                if self.buf.is_empty() {
                    emit(&chunk[..room], true);
                } else {
                    self.buf.extend_from_slice(&chunk[..room]);
                    let piece = std::mem::take(&mut self.buf);
                    emit(&piece, true);
                    self.buf = piece;
                    self.buf.clear();
                }
                chunk = &chunk[room..];
            }
            if complete {
                if self.buf.is_empty() {
                    emit(chunk, false);
                } else {
                    self.buf.extend_from_slice(chunk);
                    let line = std::mem::take(&mut self.buf);
                    emit(&line, false);
                    self.buf = line;
                    self.buf.clear();
                }
            } else {
                self.buf.extend_from_slice(chunk);
            }
        }
    }

    /// End of stream: the last line without a newline is still a line.
    pub fn finish(&mut self, emit: &mut dyn FnMut(&[u8], bool)) {
        if !self.buf.is_empty() {
            let line = std::mem::take(&mut self.buf);
            emit(&line, false);
        }
    }

    /// Bytes currently buffered (bounded by the cap).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

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
pub(super) enum OpenMode {
    /// Append, creating it (0600) if missing.
    Append,
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

/// Open `path` without following a symlink at its last component and without blocking on a FIFO
/// (`O_NOFOLLOW | O_NONBLOCK`), created 0600, and refuse anything but a regular file. `O_NONBLOCK`
/// is cleared again: for a regular file it changes nothing, but the file is handed on.
pub(super) fn open_private(path: &Path, mode: OpenMode) -> io::Result<File> {
    let mut o = OpenOptions::new();
    match mode {
        OpenMode::Append => o.append(true).create(true),
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

/// Read a whole regular file (at most `max` bytes) the [`open_private`] way: a FIFO or a symlink
/// planted there is refused instead of hanging or being followed.
pub(super) fn read_private(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let f = open_private(path, OpenMode::Read)?;
    let mut buf = Vec::new();
    f.take(max.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is larger than {max} bytes: not a file mcsup wrote"),
        ));
    }
    Ok(buf)
}

/// `<path>.<16 random hex digits>.tmp`, next to `path`: unpredictable, so nobody can plant
/// anything there in advance (it is created `O_EXCL` anyway).
pub(super) fn temp_path(path: &Path) -> PathBuf {
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
    let numbered = |n: u32| {
        let mut s = path.as_os_str().to_owned();
        s.push(format!(".{n}"));
        PathBuf::from(s)
    };
    if keep == 0 {
        return std::fs::remove_file(path);
    }
    let _ = std::fs::remove_file(numbered(keep));
    for n in (1..keep).rev() {
        let from = numbered(n);
        if std::fs::symlink_metadata(&from).is_ok() {
            std::fs::rename(&from, numbered(n + 1))?;
        }
    }
    std::fs::rename(path, numbered(1))
}

/// The log directory of one run: its lock, the output each process lost, the last status written
/// (so a loss can be reported at once). Shared by the readers and the status writer of the run.
pub(super) struct RunDir {
    pub(super) dir: PathBuf,
    pub(super) node: String,
    pub(super) clock: Clock,
    lock: Mutex<Option<File>>,
    losses: Mutex<BTreeMap<String, OutputLost>>,
    pub(super) last_status: Mutex<Option<StatusFile>>,
}

/// The runs of this process (one, unless a library user runs several at once). A registry and not
/// a parameter so that the readers and the status writer reach their run's directory state from
/// the paths they already have.
static RUNS: Mutex<Vec<Arc<RunDir>>> = Mutex::new(Vec::new());

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The run that owns `<dir>` for `node`.
pub(super) fn run_for(dir: &Path, node: &str) -> Option<Arc<RunDir>> {
    locked(&RUNS)
        .iter()
        .find(|r| r.dir == dir && r.node == node)
        .cloned()
}

/// The run and process a `<dir>/<node>.<process>.log` path belongs to.
fn run_for_log(path: &Path) -> Option<(Arc<RunDir>, String)> {
    let dir = path.parent()?;
    let file = path.file_name()?.to_str()?;
    let runs = locked(&RUNS);
    runs.iter()
        .filter(|r| r.dir == dir)
        .filter_map(|r| {
            let process = file
                .strip_prefix(r.node.as_str())?
                .strip_prefix('.')?
                .strip_suffix(".log")?;
            Some((r.node.len(), r.clone(), process.to_string()))
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, r, p)| (r, p))
}

impl RunDir {
    /// Count `bytes` (`lines` lines) a process could not write to its log file.
    fn add_loss(&self, process: &str, bytes: u64, lines: u64, error: &str) {
        let mut l = locked(&self.losses);
        let e = l.entry(process.to_string()).or_default();
        e.bytes += bytes;
        e.lines += lines;
        e.error = error.to_string();
    }

    /// What `process` has lost so far, if anything.
    pub(super) fn loss(&self, process: &str) -> Option<OutputLost> {
        locked(&self.losses).get(process).cloned()
    }

    /// Take the lock again after the directory was recreated (the old lock file went with it).
    fn relock(&self) {
        let mut held = locked(&self.lock);
        match take_lock(&self.dir, &self.node) {
            Ok(f) => *held = Some(f),
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

/// Create `dir` (0700, with any missing parents) if it does not exist; when it is the directory of
/// a run that went missing, say so and take the run's lock again.
pub(super) fn ensure_dir(dir: &Path) -> io::Result<()> {
    match std::fs::metadata(dir) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let runs: Vec<Arc<RunDir>> = locked(&RUNS)
        .iter()
        .filter(|r| r.dir == dir)
        .cloned()
        .collect();
    for run in runs {
        tracing::warn!(dir = %dir.display(), "the log directory was removed while mcsup ran: recreated it (mode 0700)");
        run.relock();
        status::append_event(
            &run,
            "mcsup",
            "log-dir-recreated",
            &format!(
                "{} was removed while mcsup ran; recreated (mode 0700)",
                dir.display()
            ),
        );
    }
    Ok(())
}

/// Holds the log directory for one run (see the module doc); dropping it releases the lock.
#[must_use = "the log directory is locked only while this is held"]
pub struct LogDirLock {
    run: Arc<RunDir>,
}

impl Drop for LogDirLock {
    fn drop(&mut self) {
        locked(&RUNS).retain(|r| !Arc::ptr_eq(r, &self.run));
        // Closing the descriptor releases the flock; the file stays (removing it would let a
        // waiting opener lock a name nobody else sees).
        locked(&self.run.lock).take();
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
        status::events_path(dir, node),
        status::status_path(dir, node),
    ];
    own.extend(plan.processes.iter().map(|p| log_path(dir, node, &p.name)));
    for path in own {
        if let Ok(m) = std::fs::symlink_metadata(&path) {
            if !m.file_type().is_file() {
                return Err(SupervisorError::io(&path, not_regular(m.file_type())));
            }
        }
    }
    let run = Arc::new(RunDir {
        dir: dir.clone(),
        node: node.clone(),
        clock: Clock::new(),
        lock: Mutex::new(Some(lock)),
        losses: Mutex::new(BTreeMap::new()),
        last_status: Mutex::new(None),
    });
    locked(&RUNS).push(run.clone());
    Ok(LogDirLock { run })
}

/// Output not written to the log file (a write error: disk full, file too large).
#[derive(Debug, Clone, Copy, Default)]
struct Lost {
    bytes: u64,
    lines: u64,
}

/// A process's open log file: writes what it can and counts (and reports) what it cannot.
pub struct LogFile {
    file: File,
    path: PathBuf,
    process: String,
    run: Option<Arc<RunDir>>,
    /// Lost since the last successful write: marked in the file once writes work again.
    gap: Lost,
    /// Lost by this run of the process in total.
    lost: Lost,
    error: Option<String>,
    /// Whether the last byte written ended a line (a gap marker then starts on a line of its own).
    at_line_start: bool,
}

/// Open (after rotating) a process's log file, recreating the log directory if it is gone.
pub fn open_log(path: &Path) -> io::Result<LogFile> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        ensure_dir(dir)?;
    }
    rotate(path, KEEP_ROTATED)?;
    let file = open_private(path, OpenMode::Append)?;
    let (run, process) = match run_for_log(path) {
        Some((r, p)) => (Some(r), p),
        None => (
            None,
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
    };
    Ok(LogFile {
        file,
        path: path.to_path_buf(),
        process,
        run,
        gap: Lost::default(),
        lost: Lost::default(),
        error: None,
        at_line_start: true,
    })
}

impl LogFile {
    /// Write `data` (whole lines); what cannot be written is counted, never retried.
    fn write_lines(&mut self, data: &[u8]) {
        let marker = if self.gap.bytes > 0 {
            let mut m = if self.at_line_start {
                String::new()
            } else {
                "\n".to_string()
            };
            m.push_str(&format!(
                "[mcsup: {} bytes ({} lines) of output lost here: {}]\n",
                self.gap.bytes,
                self.gap.lines,
                self.error.as_deref().unwrap_or("write error")
            ));
            m.into_bytes()
        } else {
            Vec::new()
        };
        let joined;
        let buf: &[u8] = if marker.is_empty() {
            data
        } else {
            joined = [marker.as_slice(), data].concat();
            &joined
        };
        let mut done = 0;
        while done < buf.len() {
            match self.file.write(&buf[done..]) {
                Ok(0) => {
                    self.lose(buf, marker.len(), done, io::ErrorKind::WriteZero.into());
                    return;
                }
                Ok(n) => {
                    done += n;
                    self.at_line_start = buf[done - 1] == b'\n';
                    if done >= marker.len() {
                        self.gap = Lost::default();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.lose(buf, marker.len(), done, e);
                    return;
                }
            }
        }
    }

    /// `buf[done..]` was not written (`buf` starts with a `marker_len`-byte gap marker).
    fn lose(&mut self, buf: &[u8], marker_len: usize, done: usize, e: io::Error) {
        let rest = &buf[done.max(marker_len)..];
        let bytes = rest.len() as u64;
        let lines = rest.iter().filter(|&&b| b == b'\n').count() as u64;
        self.gap.bytes += bytes;
        self.gap.lines += lines;
        self.lost.bytes += bytes;
        self.lost.lines += lines;
        let error = e.to_string();
        let first = self.error.is_none();
        self.error = Some(error.clone());
        let Some(run) = self.run.clone() else { return };
        run.add_loss(&self.process, bytes, lines, &error);
        if first {
            tracing::warn!(
                process = %self.process,
                path = %self.path.display(),
                error = %error,
                "output lost: cannot write the log file; what is lost is counted (status file, events)"
            );
            status::append_event(
                &run,
                &self.process,
                "output-lost",
                &format!(
                    "log file {}: {error}: output is being lost (the status file counts it)",
                    self.path.display()
                ),
            );
            status::refresh_status(&run);
        }
    }
}

impl Drop for LogFile {
    /// The end of this run's output: report the total lost, if any.
    fn drop(&mut self) {
        if self.lost.bytes == 0 {
            return;
        }
        let error = self.error.clone().unwrap_or_default();
        tracing::warn!(
            process = %self.process,
            bytes = self.lost.bytes,
            lines = self.lost.lines,
            error = %error,
            "output lost: not written to the log file"
        );
        if let Some(run) = &self.run {
            status::append_event(
                run,
                &self.process,
                "output-lost",
                &format!(
                    "{} bytes ({} lines) of output not written to {}: {error}",
                    self.lost.bytes,
                    self.lost.lines,
                    self.path.display()
                ),
            );
            status::refresh_status(run);
        }
    }
}

/// The byte budget of a queue to a writer thread that must never be waited for (the children's
/// console, mcsup's own stderr): offers that do not fit, or find the channel full, are dropped
/// and their lines counted; the writer gives bytes back as it writes them. Clones share counts.
#[derive(Clone)]
pub(super) struct QueueBudget {
    limit: usize,
    queued: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
}

impl QueueBudget {
    pub(super) fn new(limit: usize) -> QueueBudget {
        QueueBudget {
            limit,
            queued: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Hand `batch` (`lines` lines) to `tx` if it fits; otherwise drop and count it. Never blocks.
    pub(super) fn offer(&self, tx: &SyncSender<Vec<u8>>, batch: Vec<u8>, lines: u64) {
        let len = batch.len();
        if self.queued.load(Ordering::Acquire) + len > self.limit {
            self.dropped.fetch_add(lines, Ordering::Relaxed);
            return;
        }
        self.queued.fetch_add(len, Ordering::AcqRel);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = tx.try_send(batch) {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            self.dropped.fetch_add(lines, Ordering::Relaxed);
        }
    }

    /// The writer thread wrote (or gave up on) `len` bytes.
    pub(super) fn written(&self, len: usize) {
        self.queued.fetch_sub(len, Ordering::AcqRel);
    }

    /// Bytes offered and not written yet.
    pub(super) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Lines dropped so far.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The console writer thread and its bounded queue.
pub struct Console {
    handle: ConsoleHandle,
    thread: Option<JoinHandle<()>>,
}

/// A cheap clone for each reader: offer lines, never wait.
#[derive(Clone)]
pub struct ConsoleHandle {
    tx: Option<SyncSender<Vec<u8>>>,
    budget: QueueBudget,
}

impl Console {
    /// Start the writer thread on mcsup's stdout (or a disabled console).
    pub fn start(enabled: bool) -> io::Result<Console> {
        let budget = QueueBudget::new(CONSOLE_QUEUE_BYTES);
        if !enabled {
            return Ok(Console {
                handle: ConsoleHandle { tx: None, budget },
                thread: None,
            });
        }
        let (tx, rx) = sync_channel::<Vec<u8>>(CONSOLE_QUEUE_BATCHES);
        let b = budget.clone();
        let thread = std::thread::Builder::new()
            .name("mcsup-console".into())
            .spawn(move || console_thread(rx, b))?;
        Ok(Console {
            handle: ConsoleHandle {
                tx: Some(tx),
                budget,
            },
            thread: Some(thread),
        })
    }

    /// A handle for one reader.
    pub fn handle(&self) -> ConsoleHandle {
        self.handle.clone()
    }

    /// Lines dropped so far.
    pub fn dropped(&self) -> u64 {
        self.handle.budget.dropped()
    }

    /// Let the thread write what is queued, waiting at most `within`; a stuck terminal is left
    /// behind (the process exit ends it).
    pub fn finish(mut self, within: Duration) -> u64 {
        self.handle.tx = None;
        let dropped = self.dropped();
        if let Some(t) = self.thread.take() {
            let end = Instant::now() + within;
            while !t.is_finished() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(2));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
        dropped
    }
}

fn console_thread(rx: Receiver<Vec<u8>>, budget: QueueBudget) {
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    while let Ok(batch) = rx.recv() {
        let _ = out.write_all(&batch);
        budget.written(batch.len());
        while let Ok(more) = rx.try_recv() {
            let _ = out.write_all(&more);
            budget.written(more.len());
        }
        let _ = out.flush();
    }
    let _ = out.flush();
}

impl ConsoleHandle {
    fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Offer a batch of `lines` lines; drop (and count) it if the queue is full.
    fn offer(&self, batch: Vec<u8>, lines: u64) {
        if let Some(tx) = &self.tx {
            self.budget.offer(tx, batch, lines);
        }
    }
}

/// What a reader does with each line besides writing it to the file.
pub struct PumpConfig {
    /// Console prefix (`<process> | `).
    pub prefix: String,
    pub console: ConsoleHandle,
    /// Log-line readiness probes still waiting: (probe index, pattern).
    pub matchers: Vec<(usize, Regex)>,
    /// Called once per matcher when a line matches.
    pub on_match: Box<dyn FnMut(usize) + Send>,
    /// Sees every line (the master's key-count reports, see `remount::reported_keys`).
    pub tap: Option<LineTap>,
}

/// A callback that sees every line a reader emits.
pub type LineTap = Box<dyn FnMut(&[u8]) + Send>;

/// Bytes read from a pipe at once (the default pipe capacity).
const READ_CHUNK: usize = 64 * 1024;
// The reader's fast path keeps a chunk's partial last line without checking its length: it must
// fit under the line cap.
const _: () = assert!(READ_CHUNK <= MAX_LINE);

thread_local! {
    // One read buffer and one file-output buffer for all readers of this thread (all of them:
    // the runtime is current-thread). Each is used only between an await and the next, so 16
    // children cost 128 KiB in total instead of 128 KiB each (the RSS target is 6 MiB).
    static READ_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0u8; READ_CHUNK]);
    static FILE_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

enum Step {
    More,
    Again,
    Eof,
}

/// One output line into a buffer: `<prefix><line>` (the console's prefix is `<process> | `, the
/// file's empty), marked when it is a piece of a split line, and its newline.
fn put_line(batch: &mut Vec<u8>, prefix: &str, line: &[u8], split: bool) {
    batch.extend_from_slice(prefix.as_bytes());
    batch.extend_from_slice(line);
    if split {
        batch.extend_from_slice(SPLIT_MARKER);
    }
    batch.push(b'\n');
}

/// Drain one child's output pipe until EOF.
pub async fn pump(rx: tokio::net::unix::pipe::Receiver, mut file: LogFile, mut cfg: PumpConfig) {
    let mut splitter = LineSplitter::new(MAX_LINE);
    let console_on = cfg.console.enabled();
    loop {
        let ready = rx.readable().await.is_ok();
        let step = READ_BUF.with(|rb| {
            FILE_BUF.with(|fb| {
                let mut rb = rb.borrow_mut();
                let mut out = fb.borrow_mut();
                out.clear();
                let n = if ready {
                    match rx.try_read(&mut rb) {
                        Ok(n) => n,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Step::Again,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Step::Again,
                        Err(_) => 0,
                    }
                } else {
                    0
                };
                let mut batch: Vec<u8> = Vec::new();
                let mut lines = 0u64;
                // Fast path, the common case of a busy child: no partial line pending, no log
                // probe or tap waiting for lines, and every line of the chunk within the cap.
                // The complete lines go to the file in one write straight from the read
                // buffer; only the partial last line is kept back (and the console, when on,
                // still gets each line with its prefix).
                let data = &rb[..n];
                let whole = (n > 0
                    && splitter.buffered() == 0
                    && cfg.matchers.is_empty()
                    && cfg.tap.is_none())
                .then(|| memchr::memrchr(b'\n', data))
                .flatten()
                .filter(|&last| {
                    let mut start = 0;
                    memchr::memchr_iter(b'\n', &data[..=last]).all(|nl| {
                        let ok = nl - start <= MAX_LINE;
                        start = nl + 1;
                        ok
                    })
                });
                if let Some(last) = whole {
                    file.write_lines(&data[..=last]);
                    if console_on {
                        for line in data[..last].split(|&b| b == b'\n') {
                            put_line(&mut batch, &cfg.prefix, line, false);
                            lines += 1;
                        }
                        cfg.console.offer(batch, lines);
                    }
                    // The rest has no newline and is shorter than the cap: it is only kept.
                    splitter.push(&data[last + 1..], &mut |_, _| {});
                    return Step::More;
                }
                {
                    let mut emit = |line: &[u8], split: bool| {
                        put_line(&mut out, "", line, split);
                        if console_on {
                            put_line(&mut batch, &cfg.prefix, line, split);
                            lines += 1;
                        }
                        if let Some(tap) = &mut cfg.tap {
                            tap(line);
                        }
                        if !cfg.matchers.is_empty() {
                            let on_match = &mut cfg.on_match;
                            cfg.matchers.retain(|(idx, re)| {
                                if re.is_match(line) {
                                    on_match(*idx);
                                    false
                                } else {
                                    true
                                }
                            });
                        }
                    };
                    if n == 0 {
                        splitter.finish(&mut emit);
                    } else {
                        splitter.push(&rb[..n], &mut emit);
                    }
                }
                if !out.is_empty() {
                    // The file gets everything it can take; a write error (disk full, file too
                    // large) loses only the file copy, and is counted and reported.
                    file.write_lines(&out);
                }
                // Do not keep a huge buffer around after a burst of split lines.
                if out.capacity() > 4 * READ_CHUNK {
                    *out = Vec::new();
                }
                if !batch.is_empty() {
                    cfg.console.offer(batch, lines);
                }
                if n == 0 {
                    Step::Eof
                } else {
                    Step::More
                }
            })
        });
        match step {
            Step::More | Step::Again => {}
            Step::Eof => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(cap: usize, chunks: &[&[u8]]) -> Vec<(Vec<u8>, bool)> {
        let mut s = LineSplitter::new(cap);
        let mut out = Vec::new();
        for c in chunks {
            s.push(c, &mut |l, sp| out.push((l.to_vec(), sp)));
            assert!(s.buffered() <= cap);
        }
        s.finish(&mut |l, sp| out.push((l.to_vec(), sp)));
        out
    }

    #[test]
    fn splits_lines_across_chunks() {
        let out = split_all(100, &[b"ab", b"c\nde", b"f\n\ng"]);
        let lines: Vec<_> = out
            .iter()
            .map(|(l, _)| String::from_utf8_lossy(l).to_string())
            .collect();
        assert_eq!(lines, ["abc", "def", "", "g"]);
        assert!(out.iter().all(|(_, s)| !s));
    }

    #[test]
    fn long_lines_are_split_and_bounded() {
        let big = [b'x'; 25];
        let out = split_all(10, &[&big[..7], &big[7..], b"\nok\n"]);
        let lens: Vec<_> = out.iter().map(|(l, s)| (l.len(), *s)).collect();
        assert_eq!(lens, [(10, true), (10, true), (5, false), (2, false)]);
    }

    #[test]
    fn exact_cap_line_is_not_split() {
        let out = split_all(4, &[b"abcd\n"]);
        assert_eq!(out, [(b"abcd".to_vec(), false)]);
    }

    #[test]
    fn last_partial_line_is_kept() {
        let out = split_all(64, &[b"one\ntwo"]);
        assert_eq!(out.last().map(|(l, _)| l.as_slice()), Some(&b"two"[..]));
    }

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
    fn lost_output_is_counted_and_marked_once_writes_work_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n1.p.log");
        // /dev/full fails every write with ENOSPC.
        let full = OpenOptions::new().write(true).open("/dev/full").unwrap();
        let mut lf = LogFile {
            file: full,
            path: path.clone(),
            process: "p".into(),
            run: None,
            gap: Lost::default(),
            lost: Lost::default(),
            error: None,
            at_line_start: true,
        };
        lf.write_lines(b"one\ntwo\n");
        lf.write_lines(b"three\n");
        assert_eq!((lf.lost.bytes, lf.lost.lines), (14, 3));
        assert!(lf.error.as_deref().unwrap().contains("No space left"));
        lf.file = open_private(&path, OpenMode::Append).unwrap();
        lf.write_lines(b"four\n");
        lf.write_lines(b"five\n");
        assert_eq!(lf.gap.bytes, 0);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "[mcsup: 14 bytes (3 lines) of output lost here: No space left on device (os error 28)]\nfour\nfive\n"
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
