//! Children's output: per-process log files (rotated on restart), line splitting, the console mux
//! and log-line readiness matching.
//!
//! One reader task per spawned child drains its pipe as fast as the pipe delivers, writes every
//! line to the file, and offers lines to the console without ever waiting for it: the console is
//! a separate thread behind a bounded queue, and what does not fit is counted as dropped (a slow
//! terminal must never block a child, process-compose #57). Lines are capped at [`MAX_LINE`]
//! (longer ones are split and marked) so a 1 MB line without a newline keeps memory bounded, and
//! the last partial line is written at EOF (process-compose #237).
//!
//! This module must not decide anything about processes: it reports log-line matches and stops.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use regex::bytes::Regex;

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
    #[cfg(test)]
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

/// `<log_dir>/<node>.<process>.log`
pub fn log_path(dir: &Path, node: &str, process: &str) -> PathBuf {
    dir.join(format!("{node}.{process}.log"))
}

/// Keep the previous log as `.1`, `.1` as `.2`, ... up to `keep`; the oldest is removed.
pub fn rotate(path: &Path, keep: u32) -> io::Result<()> {
    match std::fs::metadata(path) {
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
        if from.exists() {
            std::fs::rename(&from, numbered(n + 1))?;
        }
    }
    std::fs::rename(path, numbered(1))
}

/// Open (after rotating) a process's log file.
pub fn open_log(path: &Path) -> io::Result<File> {
    rotate(path, KEEP_ROTATED)?;
    OpenOptions::new().create(true).append(true).open(path)
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
    queued: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
}

impl Console {
    /// Start the writer thread on mcsup's stdout (or a disabled console).
    pub fn start(enabled: bool) -> io::Result<Console> {
        let queued = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicU64::new(0));
        if !enabled {
            return Ok(Console {
                handle: ConsoleHandle {
                    tx: None,
                    queued,
                    dropped,
                },
                thread: None,
            });
        }
        let (tx, rx) = sync_channel::<Vec<u8>>(CONSOLE_QUEUE_BATCHES);
        let q = queued.clone();
        let thread = std::thread::Builder::new()
            .name("mcsup-console".into())
            .spawn(move || console_thread(rx, q))?;
        Ok(Console {
            handle: ConsoleHandle {
                tx: Some(tx),
                queued,
                dropped,
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
        self.handle.dropped.load(Ordering::Relaxed)
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

fn console_thread(rx: Receiver<Vec<u8>>, queued: Arc<AtomicUsize>) {
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    while let Ok(batch) = rx.recv() {
        let _ = out.write_all(&batch);
        queued.fetch_sub(batch.len(), Ordering::AcqRel);
        while let Ok(more) = rx.try_recv() {
            let _ = out.write_all(&more);
            queued.fetch_sub(more.len(), Ordering::AcqRel);
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
        let Some(tx) = &self.tx else { return };
        let len = batch.len();
        if self.queued.load(Ordering::Acquire) + len > CONSOLE_QUEUE_BYTES {
            self.dropped.fetch_add(lines, Ordering::Relaxed);
            return;
        }
        self.queued.fetch_add(len, Ordering::AcqRel);
        match tx.try_send(batch) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.queued.fetch_sub(len, Ordering::AcqRel);
                self.dropped.fetch_add(lines, Ordering::Relaxed);
            }
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
}

/// Bytes read from a pipe at once (the default pipe capacity).
const READ_CHUNK: usize = 64 * 1024;

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

/// Drain one child's output pipe until EOF.
pub async fn pump(rx: tokio::net::unix::pipe::Receiver, mut file: File, mut cfg: PumpConfig) {
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
                {
                    let mut emit = |line: &[u8], split: bool| {
                        out.extend_from_slice(line);
                        if split {
                            out.extend_from_slice(SPLIT_MARKER);
                        }
                        out.push(b'\n');
                        if console_on {
                            batch.extend_from_slice(cfg.prefix.as_bytes());
                            batch.extend_from_slice(line);
                            if split {
                                batch.extend_from_slice(SPLIT_MARKER);
                            }
                            batch.push(b'\n');
                            lines += 1;
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
                    // The file gets everything; a write error (disk full) loses only the file copy.
                    let _ = file.write_all(&out);
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
