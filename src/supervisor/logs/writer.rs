//! The run directory's writer: one thread owns every file mcsup writes into the log directory
//! while it supervises (the processes' log files, the events file, the status and metrics
//! files) and does every open, write, rename and rotation there.
//!
//! A log directory on NFS or Lustre can stop answering for minutes, and a thread that writes to
//! it then waits in the kernel, deaf even to signals. Before, those writes came from the runtime
//! loop, so a hung mount stalled probes, restarts and the ordered teardown with it. Now the loop
//! only hands bytes over, never waiting:
//! - log output and event lines go through a queue bounded in bytes ([`QUEUE_BYTES`]); what does
//!   not fit while the directory is stalled is dropped and counted (a process's output as its
//!   `output-lost`, with a marker in its log where the gap is; event lines in the final record).
//!   A writer that is only slower than a process (a busy machine) drops nothing: the process's
//!   reader waits for room and its output waits in the pipe, as a pipe to `cat` would make it
//!   wait; only once one write has waited [`HOLD_WHILE_WRITING`] is output dropped;
//! - the status and metrics files are snapshots: only the newest one waiting is written;
//! - the loop asks how long the current write has been waiting ([`RunWriter::stalled_for`]) and
//!   says so on stderr, which is not in the log directory.
//!
//! Opening a process's log (and rotating the previous one) happens here too: a restart spawns
//! its process at once, and the output waits in the queue for the file. A log that cannot be
//! opened loses that run's output, reported like any other loss.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::console::QueueBudget;
use super::dir::{ensure_dir, open_private, LogDirLock, OpenMode};
use super::file::{open_log, LogFile, LogLoss, LossReport, LossWhen};

/// Bytes of log output and event lines the queue may hold while the directory does not take
/// them; more is dropped and counted.
pub const QUEUE_BYTES: usize = 16 << 20;

/// How long one write may wait before a full queue drops a process's output instead of holding
/// it in its pipe: long enough for a busy machine's writer, short enough that a file system that
/// stopped answering stops no process for long.
pub const HOLD_WHILE_WRITING: Duration = Duration::from_secs(1);

/// What the writer tells the loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum News {
    /// The log directory was removed and made again (its lock taken again).
    LogDirRecreated(PathBuf),
}

/// Where the writer sends [`News`].
pub type NewsReport = Box<dyn Fn(News) + Send>;

/// The status and metrics files as they should be now.
struct Snapshot {
    status: Vec<u8>,
    metrics: Vec<u8>,
}

enum Job {
    Open {
        id: u64,
        path: PathBuf,
        process: String,
        report: LossReport,
    },
    Log {
        id: u64,
        bytes: Vec<u8>,
    },
    Close {
        id: u64,
    },
    Event(Vec<u8>),
    /// Write a whole private file of the run directory (`worker_restarts.json`), replacing it.
    Replace {
        path: PathBuf,
        bytes: Vec<u8>,
    },
    /// Write the newest [`Snapshot`] (if it was not written yet).
    Snapshot,
    /// Answer once everything before it is done.
    Sync(SyncSender<()>),
    /// Close every file, release the log directory's lock, answer, and end the thread.
    Stop(SyncSender<()>),
}

/// State the loop and the writer thread share.
struct Shared {
    /// The newest snapshot not written yet (a newer one replaces it).
    latest: Mutex<Option<Snapshot>>,
    /// When the operation under way began, in ms since `epoch` plus one; 0 when idle.
    busy_since: AtomicU64,
    epoch: Instant,
    /// Event lines dropped because the queue was full.
    events_dropped: AtomicU64,
    /// Writes of the events, status or metrics files that failed (disk full, ...).
    failed: AtomicU64,
}

impl Shared {
    fn begin(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64 + 1;
        self.busy_since.store(ms, Ordering::Release);
    }

    fn end(&self) {
        self.busy_since.store(0, Ordering::Release);
    }
}

/// The files the writer thread writes, besides the processes' logs.
pub struct RunFiles {
    pub events: PathBuf,
    pub status: PathBuf,
    pub metrics: PathBuf,
}

/// The loop's side of the writer: cheap to clone, never waits.
#[derive(Clone)]
pub struct RunWriter {
    tx: Sender<Job>,
    budget: QueueBudget,
    shared: Arc<Shared>,
    next_id: Arc<AtomicU64>,
}

impl RunWriter {
    /// Start the writer thread. It owns `lock` (the log directory's, taken again if the
    /// directory is recreated) and appends to `files.events` (opened by the caller, so that a
    /// file that cannot be opened stops the start).
    pub fn start(
        lock: LogDirLock,
        events: std::fs::File,
        files: RunFiles,
        news: NewsReport,
    ) -> std::io::Result<RunWriter> {
        let (tx, rx) = channel();
        let shared = Arc::new(Shared {
            latest: Mutex::new(None),
            busy_since: AtomicU64::new(0),
            epoch: Instant::now(),
            events_dropped: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        let budget = QueueBudget::new(QUEUE_BYTES);
        let thread = Thread {
            lock,
            events,
            files,
            news,
            logs: HashMap::new(),
            shared: shared.clone(),
            budget: budget.clone(),
        };
        crate::supervisor::signals::spawn_thread(
            std::thread::Builder::new().name("mcsup-writer".into()),
            move || thread.run(rx),
        )?;
        Ok(RunWriter {
            tx,
            budget,
            shared,
            next_id: Arc::new(AtomicU64::new(1)),
        })
    }

    /// A process's log file, opened (after rotating the previous one) by the writer.
    pub fn open_log(&self, path: PathBuf, process: &str, report: LossReport) -> LogSink {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.send(Job::Open {
            id,
            path: path.clone(),
            process: process.to_string(),
            report: report.clone(),
        });
        LogSink {
            id,
            writer: self.clone(),
            path,
            process: process.to_string(),
            report,
            gap: (0, 0),
            lost: (0, 0),
        }
    }

    /// Queue one event line; dropped and counted when the queue is full.
    pub fn event(&self, line: Vec<u8>) {
        let len = line.len();
        if !self.offer(Job::Event(line), len) {
            self.shared.events_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A whole file of the run directory, written 0600 through a temp file renamed over it.
    pub fn replace(&self, path: PathBuf, bytes: Vec<u8>) {
        let len = bytes.len();
        if !self.offer(Job::Replace { path, bytes }, len) {
            self.shared.failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The status and metrics files as they are now: written as soon as the writer can, unless
    /// a newer snapshot comes first.
    pub fn snapshot(&self, status: Vec<u8>, metrics: Vec<u8>) {
        let was_waiting = {
            let mut latest = self.shared.latest.lock().unwrap_or_else(|e| e.into_inner());
            latest.replace(Snapshot { status, metrics }).is_some()
        };
        if !was_waiting {
            let _ = self.tx.send(Job::Snapshot);
        }
    }

    /// Whether a process's reader may take `len` more bytes of its output now: the queue has
    /// room for them, or the writer has waited [`HOLD_WHILE_WRITING`] on one operation (what
    /// does not fit is then dropped and counted). Otherwise the reader waits and the output
    /// stays in the pipe.
    pub fn takes(&self, len: usize) -> bool {
        self.budget.has_room(len) || self.stalled_for() >= HOLD_WHILE_WRITING
    }

    /// Bytes of output and event lines queued and not written yet.
    pub fn queued(&self) -> usize {
        self.budget.queued()
    }

    /// How long the writer has been waiting on one operation (zero when idle).
    pub fn stalled_for(&self) -> Duration {
        match self.shared.busy_since.load(Ordering::Acquire) {
            0 => Duration::ZERO,
            since => {
                let now = self.shared.epoch.elapsed().as_millis() as u64 + 1;
                Duration::from_millis(now.saturating_sub(since))
            }
        }
    }

    /// Event lines dropped so far because the directory did not take them.
    pub fn events_dropped(&self) -> u64 {
        self.shared.events_dropped.load(Ordering::Relaxed)
    }

    /// Writes of the events, status or metrics files that failed so far.
    pub fn failed_writes(&self) -> u64 {
        self.shared.failed.load(Ordering::Relaxed)
    }

    /// Wait at most `within` for everything queued so far to be written; false when the
    /// directory did not take it in time (the thread is then left to finish, or to die with the
    /// process).
    pub fn sync(&self, within: Duration) -> bool {
        self.ask(Job::Sync, within)
    }

    /// Write what is queued, close every file and release the log directory's lock (the next
    /// run in this process may claim it), waiting at most `within`; false when the directory did
    /// not take it in time (the thread is then left to finish, or to die with the process).
    pub fn stop(&self, within: Duration) -> bool {
        self.ask(Job::Stop, within)
    }

    /// Send the job `make` builds around an answer channel; whether the answer came within
    /// `within`.
    fn ask(&self, make: fn(SyncSender<()>) -> Job, within: Duration) -> bool {
        let (tx, rx) = sync_channel(1);
        self.tx.send(make(tx)).is_ok() && rx.recv_timeout(within).is_ok()
    }

    /// Hand `job` (`len` bytes) over if the queue has room for it.
    fn offer(&self, job: Job, len: usize) -> bool {
        if !self.budget.try_take(len) {
            return false;
        }
        if self.tx.send(job).is_err() {
            self.budget.written(len);
            return false;
        }
        true
    }
}

/// The error a dropped piece of output is reported with.
const QUEUE_FULL: &str =
    "the log directory did not take writes (a hung file system?) and the queue was full";

/// A process's log, as its reader hands it output: queued for the writer, never waiting. What
/// the queue cannot take is counted, reported, and marked in the file where it is missing.
pub struct LogSink {
    id: u64,
    writer: RunWriter,
    path: PathBuf,
    process: String,
    report: LossReport,
    /// (bytes, lines) dropped since the last piece queued, and in total.
    gap: (u64, u64),
    lost: (u64, u64),
}

impl LogSink {
    /// Whether `len` more bytes can be taken from the process now ([`RunWriter::takes`]).
    pub(super) fn takes(&self, len: usize) -> bool {
        self.writer.takes(len)
    }

    /// Queue `data` (whole lines) for the file.
    pub(super) fn write_lines(&mut self, data: &[u8]) {
        let mut bytes = Vec::with_capacity(data.len() + 96);
        if self.gap.0 > 0 {
            bytes.extend_from_slice(
                format!(
                    "[mcsup: {} bytes ({} lines) of output lost here: {QUEUE_FULL}]\n",
                    self.gap.0, self.gap.1
                )
                .as_bytes(),
            );
        }
        bytes.extend_from_slice(data);
        let len = bytes.len();
        if self.writer.offer(Job::Log { id: self.id, bytes }, len) {
            self.gap = (0, 0);
            return;
        }
        let lines = data.iter().filter(|&&b| b == b'\n').count() as u64;
        let first = self.lost.0 == 0;
        self.gap.0 += data.len() as u64;
        self.gap.1 += lines;
        self.lost.0 += data.len() as u64;
        self.lost.1 += lines;
        (self.report)(LogLoss {
            process: self.process.clone(),
            path: self.path.clone(),
            bytes: data.len() as u64,
            lines,
            error: QUEUE_FULL.into(),
            when: if first {
                LossWhen::First
            } else {
                LossWhen::Again
            },
        });
    }
}

impl Drop for LogSink {
    /// The end of the output: the file is closed once what was queued is written, and the total
    /// the queue dropped is reported.
    fn drop(&mut self) {
        let _ = self.writer.tx.send(Job::Close { id: self.id });
        if self.lost.0 > 0 {
            (self.report)(LogLoss {
                process: self.process.clone(),
                path: self.path.clone(),
                bytes: self.lost.0,
                lines: self.lost.1,
                error: QUEUE_FULL.into(),
                when: LossWhen::End,
            });
        }
    }
}

/// The writer thread's state.
struct Thread {
    lock: LogDirLock,
    events: std::fs::File,
    files: RunFiles,
    news: NewsReport,
    /// Open log files by sink id, and those that could not be opened.
    logs: HashMap<u64, Sink>,
    shared: Arc<Shared>,
    budget: QueueBudget,
}

/// Where a process's output goes: its log file, or nowhere (counted).
enum Sink {
    Open(LogFile),
    Unopened(Unopened),
}

/// A log file that could not be opened: this run's output is lost, and counted like a failed
/// write's (the re-run of round 4's L3: every restarted life's output was lost and the status
/// said 0 bytes).
struct Unopened {
    process: String,
    path: PathBuf,
    error: String,
    report: LossReport,
    bytes: u64,
    lines: u64,
}

impl Unopened {
    fn lose(&mut self, data: &[u8]) {
        let (bytes, lines) = (
            data.len() as u64,
            data.iter().filter(|&&b| b == b'\n').count() as u64,
        );
        self.bytes += bytes;
        self.lines += lines;
        (self.report)(LogLoss {
            process: self.process.clone(),
            path: self.path.clone(),
            bytes,
            lines,
            error: self.error.clone(),
            when: LossWhen::Again,
        });
    }
}

impl Drop for Unopened {
    /// The end of this run's output: the total lost.
    fn drop(&mut self) {
        if self.bytes > 0 {
            (self.report)(LogLoss {
                process: self.process.clone(),
                path: self.path.clone(),
                bytes: self.bytes,
                lines: self.lines,
                error: self.error.clone(),
                when: LossWhen::End,
            });
        }
    }
}

impl Thread {
    fn run(mut self, rx: Receiver<Job>) {
        while let Ok(job) = rx.recv() {
            if let Job::Stop(done) = job {
                drop(self);
                let _ = done.send(());
                return;
            }
            self.shared.begin();
            self.handle(job);
            self.shared.end();
        }
    }

    fn handle(&mut self, job: Job) {
        match job {
            Job::Open {
                id,
                path,
                process,
                report,
            } => {
                let sink = match open_log(&path, &process, Some(report.clone())) {
                    Ok(f) => Sink::Open(f),
                    Err(e) => {
                        tracing::warn!(process = %process, path = %path.display(), error = %e, "cannot open the log file: this run's output is lost");
                        let error = format!("cannot open the log file: {e}");
                        report(LogLoss {
                            process: process.clone(),
                            path: path.clone(),
                            bytes: 0,
                            lines: 0,
                            error: error.clone(),
                            when: LossWhen::First,
                        });
                        Sink::Unopened(Unopened {
                            process,
                            path,
                            error,
                            report,
                            bytes: 0,
                            lines: 0,
                        })
                    }
                };
                self.logs.insert(id, sink);
            }
            Job::Log { id, bytes } => {
                match self.logs.get_mut(&id) {
                    Some(Sink::Open(f)) => f.write_lines(&bytes),
                    Some(Sink::Unopened(u)) => u.lose(&bytes),
                    None => {}
                }
                self.budget.written(bytes.len());
            }
            Job::Close { id } => {
                self.logs.remove(&id);
            }
            Job::Event(line) => {
                self.append_event(&line);
                self.budget.written(line.len());
            }
            Job::Snapshot => {
                let snap = self
                    .shared
                    .latest
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                if let Some(s) = snap {
                    self.write_snapshot(s);
                }
            }
            Job::Replace { path, bytes } => {
                if let Err(e) = crate::supervisor::status::write_private_atomic(&path, &bytes) {
                    self.shared.failed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "cannot write {}", path.display());
                }
            }
            Job::Sync(done) => {
                let _ = done.send(());
            }
            Job::Stop(_) => {} // handled by `run`
        }
    }

    /// Append one line to the events file, recreating it if it was deleted (`rm -rf` of the log
    /// directory).
    fn append_event(&mut self, line: &[u8]) {
        use std::io::Write as _;
        use std::os::unix::fs::MetadataExt as _;
        if self
            .events
            .metadata()
            .map(|m| m.nlink() == 0)
            .unwrap_or(false)
        {
            let reopened = self
                .files
                .events
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map_or(Ok(()), ensure_dir)
                .and_then(|()| open_private(&self.files.events, OpenMode::Append));
            match reopened {
                Ok(f) => self.events = f,
                Err(e) => {
                    tracing::warn!(path = %self.files.events.display(), error = %e, "cannot recreate the events file")
                }
            }
        }
        if let Err(e) = self.events.write_all(line) {
            self.shared.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(path = %self.files.events.display(), error = %e, "cannot append to the events file");
        }
    }

    fn write_snapshot(&mut self, s: Snapshot) {
        if let Err(e) = crate::supervisor::status::write_status_bytes(&self.files.status, &s.status)
        {
            self.shared.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "cannot write the status file");
        }
        if self.lock.recreated() {
            (self.news)(News::LogDirRecreated(self.lock.dir().to_path_buf()));
        }
        if let Err(e) =
            crate::supervisor::status::write_private_atomic(&self.files.metrics, &s.metrics)
        {
            self.shared.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "cannot write the metrics file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::sync::mpsc::Receiver;

    /// Node n1's writer in `dir`, its events going to `events` (at `events_path`).
    fn writer_in(dir: &std::path::Path, events: std::fs::File, events_path: PathBuf) -> RunWriter {
        let files = RunFiles {
            events: events_path,
            status: dir.join("n1.status.json"),
            metrics: dir.join("n1.prom"),
        };
        let lock = LogDirLock::for_test(dir, "n1");
        RunWriter::start(lock, events, files, Box::new(|_| {})).unwrap()
    }

    /// A loss report that sends each loss to the receiver.
    fn losses() -> (LossReport, Receiver<LogLoss>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        (
            Arc::new(move |l| {
                let _ = tx.lock().unwrap().send(l);
            }),
            rx,
        )
    }

    /// A writer whose events "file" is a FIFO nobody reads yet: once its 64 KiB are full, the
    /// writer thread waits in `write`, as it would on a hung mount.
    fn stalled() -> (
        tempfile::TempDir,
        RunWriter,
        std::fs::File,
        Receiver<LogLoss>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("n1.events.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Read and write: opening it does not wait for the other side.
        let events = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .unwrap();
        let reader = events.try_clone().unwrap();
        let writer = writer_in(dir.path(), events, fifo);
        let (report, rx) = losses();
        let mut log = writer.open_log(dir.path().join("n1.w.log"), "w", report);
        log.write_lines(b"before\n");
        assert!(writer.sync(Duration::from_secs(5)), "the writer answers");
        // Fill the FIFO, then the queue: the writer is stuck in its write.
        let line = vec![b'e'; 64 << 10];
        for _ in 0..(QUEUE_BYTES / line.len() + 8) {
            writer.event(line.clone());
        }
        drop(log);
        (dir, writer, reader, rx)
    }

    /// The re-run of round 4's L3: a log file that cannot be opened (another user's file where
    /// the rotation goes) loses the run's output, and what is lost is counted: the status said
    /// 0 bytes for four lost lives.
    #[test]
    fn output_of_a_log_that_could_not_be_opened_is_counted() {
        let dir = tempfile::tempdir().unwrap();
        let events_path = dir.path().join("n1.events.jsonl");
        let events = std::fs::File::create(&events_path).unwrap();
        let writer = writer_in(dir.path(), events, events_path);
        let (report, rx) = losses();
        // A directory where the log file goes: it cannot be opened as one.
        let path = dir.path().join("n1.w.log");
        std::fs::create_dir(&path).unwrap();
        let mut log = writer.open_log(path, "w", report);
        log.write_lines(b"one\ntwo\n");
        log.write_lines(b"three\n");
        drop(log);
        assert!(writer.sync(Duration::from_secs(5)));
        let got: Vec<(u64, u64, LossWhen)> = rx
            .try_iter()
            .map(|l| {
                assert!(
                    l.error.starts_with("cannot open the log file"),
                    "{}",
                    l.error
                );
                (l.bytes, l.lines, l.when)
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, 0, LossWhen::First),
                (8, 2, LossWhen::Again),
                (6, 1, LossWhen::Again),
                (14, 3, LossWhen::End)
            ]
        );
    }

    /// A full queue holds a process's output back (its reader waits, the output stays in its
    /// pipe) while the writer's current write is younger than HOLD_WHILE_WRITING: a writer that
    /// is only behind loses nothing. Past that, the directory counts as stuck and output is
    /// taken, to be dropped and counted. Once the writer catches up, room is back.
    #[test]
    fn a_writer_behind_holds_output_back_and_a_stuck_one_drops_it() {
        let (dir, writer, mut reader, _losses) = stalled();
        let log = writer.open_log(dir.path().join("n1.x.log"), "x", Arc::new(|_| {}));
        assert!(writer.stalled_for() < HOLD_WHILE_WRITING);
        assert!(!log.takes(64 << 10), "behind: hold the output in the pipe");
        while writer.stalled_for() < HOLD_WHILE_WRITING {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(log.takes(64 << 10), "stuck: take it, to drop and count it");
        let drain = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            while reader.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        assert!(writer.sync(Duration::from_secs(10)), "caught up");
        assert!(log.takes(64 << 10));
        drop(log);
        drop(writer);
        drop(dir);
        drop(drain);
    }

    #[test]
    fn a_stuck_directory_costs_counted_drops_never_a_wait() {
        let (dir, writer, mut reader, losses) = stalled();
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(50));
        assert!(writer.stalled_for() >= Duration::from_millis(40));
        assert!(
            writer.events_dropped() > 0,
            "the queue holds at most its budget"
        );
        // A log's output is dropped and reported, and nothing here waited.
        let mut log = writer.open_log(dir.path().join("n1.x.log"), "x", Arc::new(|_| {}));
        let report_start = Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let mut y = writer.open_log(
            dir.path().join("n1.y.log"),
            "y",
            Arc::new(move |l| {
                let _ = tx.lock().unwrap().send(l);
            }),
        );
        for _ in 0..4 {
            y.write_lines(&vec![b'y'; 8 << 20]);
            log.write_lines(b"x\n");
        }
        assert!(report_start.elapsed() < Duration::from_secs(1));
        let first = rx.try_recv().expect("a loss report");
        assert_eq!(first.when, LossWhen::First);
        assert!(
            first.error.contains("did not take writes"),
            "{}",
            first.error
        );
        assert!(!writer.sync(Duration::from_millis(100)), "stuck: no answer");
        assert!(start.elapsed() < Duration::from_secs(2));
        // Unstick it: everything queued is written, and y's next output follows a mark of
        // what it lost.
        let drain = std::thread::spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            while reader.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        assert!(writer.sync(Duration::from_secs(20)), "the writer goes on");
        y.write_lines(b"after\n");
        drop(y);
        assert!(writer.sync(Duration::from_secs(5)));
        let y_log = std::fs::read_to_string(dir.path().join("n1.y.log")).unwrap();
        assert_eq!(
            y_log,
            format!(
                "[mcsup: {} bytes (0 lines) of output lost here: {QUEUE_FULL}]\nafter\n",
                4 * (8 << 20)
            )
        );
        let end = rx.try_iter().find(|l| l.when == LossWhen::End);
        assert!(end.is_some_and(|l| l.bytes == 4 * (8 << 20)));
        let w_log = std::fs::read_to_string(dir.path().join("n1.w.log")).unwrap();
        assert_eq!(w_log, "before\n");
        assert!(losses.try_recv().is_err(), "w lost nothing");
        drop(writer);
        drop(drain);
    }
}
