//! Children's output and the log directory: per-process log files (rotated on restart), line
//! splitting, the console mux, log-line readiness matching, and the directory's safety.
//!
//! One reader task per spawned child drains its pipe as fast as the pipe delivers, hands every
//! line to the file's queue ([`writer`]: one thread does every write into the log directory, so
//! a hung mount never stalls the loop), and offers lines to the console without ever waiting for
//! it: the console is
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
//!
//! Layout: this file holds the reader task ([`pump`]); [`lines`] splits a stream into bounded
//! lines, [`file`] is a process's log file and its loss accounting, [`console`] the console
//! writer thread and its bounded queue, and [`dir`] the log directory (names, private files,
//! rotation, the per-node lock), [`writer`] the thread that owns the run directory's files (the
//! logs, the events, the status and metrics snapshots) behind a queue bounded in bytes. The
//! runtime decides what the events and status say: a log file or its queue reports what it lost
//! through a callback ([`LossReport`]), and the writer tells the runtime of a recreated directory
//! ([`News`]).

use std::cell::RefCell;
use std::io;

use regex::bytes::Regex;

mod console;
mod dir;
mod file;
mod lines;
mod writer;

pub use console::*;
pub use dir::*;
pub use file::*;
pub use lines::*;
pub use writer::*;

/// Longest line kept whole; longer lines are split into pieces of this size.
pub const MAX_LINE: usize = 64 * 1024;
/// Appended to each piece of a split line.
pub const SPLIT_MARKER: &[u8] = b" [mcsup: line longer than 64 KiB, split]";

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
    /// Sees the lines that hold one of its needles (Mooncake's failure lines), without taking
    /// the reader off its fast path.
    pub watch: Option<Watch>,
    /// What the console shows of a line (the file always gets it whole): the master's periodic
    /// report as a one-line summary.
    pub console_filter: Option<ConsoleFilter>,
    /// The process's fatal log patterns, checked on every line.
    pub fatal: Option<FatalWatch>,
}

/// Gets the pattern a line matched, and the line.
pub type OnFatal = Box<dyn FnOnce(&str, &[u8]) + Send>;

/// The lines that fail a process while it may still run (srt-slurm's fatal log markers): each
/// line is matched against the patterns; the first match is reported, once.
pub struct FatalWatch {
    set: regex::bytes::RegexSet,
    patterns: Vec<String>,
    /// Gets the pattern and the line.
    on_match: Option<OnFatal>,
}

impl FatalWatch {
    /// `None` when there is no pattern; an error when one does not compile.
    pub fn new(patterns: &[String], on_match: OnFatal) -> Result<Option<Self>, regex::Error> {
        if patterns.is_empty() {
            return Ok(None);
        }
        Ok(Some(FatalWatch {
            set: regex::bytes::RegexSet::new(patterns)?,
            patterns: patterns.to_vec(),
            on_match: Some(on_match),
        }))
    }

    /// Check `data`, whole lines separated by newlines.
    pub fn scan(&mut self, data: &[u8]) {
        if self.on_match.is_none() {
            return;
        }
        for line in data.split(|b| *b == b'\n') {
            if let Some(i) = self.set.matches(line).iter().next() {
                if let Some(f) = self.on_match.take() {
                    f(&self.patterns[i], line);
                }
                return;
            }
        }
    }
}

/// What the console shows for one line of a child's output.
pub enum ConsoleLine {
    AsIs,
    Instead(String),
    Skip,
}

/// Decides [`ConsoleLine`] per line.
pub type ConsoleFilter = Box<dyn FnMut(&[u8]) -> ConsoleLine + Send>;

/// What a [`Watch`] does with the lines it finds.
pub trait LineWatcher: Send {
    /// A line holding a needle, with up to [`CONTEXT_BEFORE`] lines printed before it (oldest
    /// first). Returns whether it wants the lines that follow ([`LineWatcher::follow`]).
    fn hit(&mut self, line: &[u8], before: &[&[u8]]) -> bool;
    /// The next line after a hit that asked for it; returns whether it wants the next one too.
    fn follow(&mut self, line: &[u8]) -> bool;
    /// The output ended.
    fn finish(&mut self);
}

/// Lines of context a hit gets from before it.
pub const CONTEXT_BEFORE: usize = 3;
/// The bytes of earlier output a watch keeps for the context of a hit at the start of a chunk.
const TAIL_KEPT: usize = 2048;

/// Lines with known text in them, found as output arrives: a multi-needle search over each
/// chunk of whole lines, so a busy child's output is still written in one piece; only a hit
/// costs a look at its line (and at the few lines before it, from the chunk or from the last
/// [`TAIL_KEPT`] bytes of the chunks before). After a hit that asks for them, the following
/// lines go to the watcher one by one until it has enough.
pub struct Watch {
    finder: aho_corasick::AhoCorasick,
    watcher: Box<dyn LineWatcher>,
    /// The end of the output scanned so far (whole lines, each ending in a newline).
    tail: Vec<u8>,
    following: bool,
}

impl Watch {
    /// `finder` holds the needles (built once and shared: cloning it is cheap).
    pub fn new(finder: aho_corasick::AhoCorasick, watcher: Box<dyn LineWatcher>) -> Self {
        Watch {
            finder,
            watcher,
            tail: Vec::new(),
            following: false,
        }
    }

    /// Look through `data`: whole lines separated by newlines (the last may lack its newline).
    pub fn scan(&mut self, data: &[u8]) {
        let mut pos = 0;
        while pos < data.len() {
            let end = if self.following {
                let end = line_end(data, pos);
                self.following = self.watcher.follow(&data[pos..end]);
                end
            } else {
                let Some(m) = self.finder.find(&data[pos..]) else {
                    break;
                };
                let at = pos + m.start();
                let start = memchr::memrchr(b'\n', &data[..at]).map_or(0, |i| i + 1);
                let end = line_end(data, at);
                let before = lines_before(&self.tail, &data[..start]);
                self.following = self.watcher.hit(&data[start..end], &before);
                end
            };
            pos = end + 1;
        }
        self.keep_tail(data);
    }

    /// The output ended.
    pub fn finish(&mut self) {
        self.watcher.finish();
    }

    /// Keep the last whole lines of the output, at most [`TAIL_KEPT`] bytes.
    fn keep_tail(&mut self, data: &[u8]) {
        if data.len() > TAIL_KEPT {
            // Only the end of a long chunk, from its first whole line.
            let end = &data[data.len() - TAIL_KEPT..];
            self.tail.clear();
            if let Some(i) = memchr::memchr(b'\n', end) {
                self.tail.extend_from_slice(&end[i + 1..]);
            }
        } else {
            self.tail.extend_from_slice(data);
        }
        if !self.tail.is_empty() && self.tail.last() != Some(&b'\n') {
            self.tail.push(b'\n');
        }
        if self.tail.len() > TAIL_KEPT {
            let cut = self.tail.len() - TAIL_KEPT;
            let cut =
                memchr::memchr(b'\n', &self.tail[cut..]).map_or(self.tail.len(), |i| cut + i + 1);
            self.tail.drain(..cut);
        }
    }
}

/// Where the line holding `at` ends in `data` (its newline, or the end of `data`).
fn line_end(data: &[u8], at: usize) -> usize {
    memchr::memchr(b'\n', &data[at..]).map_or(data.len(), |i| at + i)
}

/// Up to [`CONTEXT_BEFORE`] lines before a hit, oldest first: the end of `chunk` (whole lines
/// ending in a newline, or empty), then the end of `tail` (earlier output, the same).
fn lines_before<'a>(tail: &'a [u8], chunk: &'a [u8]) -> Vec<&'a [u8]> {
    let mut out: Vec<&[u8]> = Vec::with_capacity(CONTEXT_BEFORE);
    for text in [chunk, tail] {
        // `text` ends in a newline (or is empty): its lines, from the last.
        let mut end = text.len().saturating_sub(1);
        while out.len() < CONTEXT_BEFORE && !text.is_empty() {
            let start = memchr::memrchr(b'\n', &text[..end]).map_or(0, |i| i + 1);
            out.push(&text[start..end]);
            if start == 0 {
                break;
            }
            end = start - 1;
        }
    }
    out.reverse();
    out
}

/// A callback that sees every line a reader emits.
pub type LineTap = Box<dyn FnMut(&[u8]) + Send>;

/// Bytes read from a pipe at once (the default pipe capacity).
const READ_CHUNK: usize = 64 * 1024;

/// Room for the marker a log gets where output was lost, beside a read's worth of output.
const GAP_MARKER: usize = 256;

/// How often a reader held back by a full queue looks again.
const HOLD_POLL: std::time::Duration = std::time::Duration::from_millis(1);
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

/// The reader's fast path: the end of the last complete line in `data` and how many lines end
/// there, when every one of them fits the line cap (`None` when there is no newline, or a line
/// is longer than [`MAX_LINE`]).
fn whole_lines(data: &[u8]) -> Option<(usize, usize)> {
    let mut start = 0;
    let mut count = 0;
    for nl in memchr::memchr_iter(b'\n', data) {
        if nl - start > MAX_LINE {
            return None;
        }
        start = nl + 1;
        count += 1;
    }
    (count > 0).then(|| (start - 1, count))
}

/// Drain one child's output pipe until EOF.
pub async fn pump(rx: tokio::net::unix::pipe::Receiver, mut file: LogSink, mut cfg: PumpConfig) {
    let mut splitter = LineSplitter::new(MAX_LINE);
    let console_on = cfg.console.enabled();
    loop {
        // A writer behind (a busy machine, not a stalled directory): the output waits in the
        // pipe rather than being dropped (see `writer::HOLD_WHILE_WRITING`).
        while !file.takes(READ_CHUNK + GAP_MARKER) {
            tokio::time::sleep(HOLD_POLL).await;
        }
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
                    && cfg.tap.is_none()
                    && cfg.console_filter.is_none())
                .then(|| whole_lines(data))
                .flatten();
                if let Some((last, count)) = whole {
                    let complete = &data[..=last];
                    file.write_lines(complete);
                    if let Some(w) = &mut cfg.watch {
                        w.scan(complete);
                    }
                    if let Some(f) = &mut cfg.fatal {
                        f.scan(complete);
                    }
                    if console_on {
                        // Each line with its prefix, in one buffer sized up front: memchr finds
                        // the newlines (a byte-at-a-time split cost more than the file write).
                        batch.reserve_exact(complete.len() + count * cfg.prefix.len());
                        let mut start = 0;
                        for nl in memchr::memchr_iter(b'\n', complete) {
                            put_line(&mut batch, &cfg.prefix, &complete[start..nl], false);
                            start = nl + 1;
                        }
                        cfg.console.offer(batch, count as u64);
                    }
                    // The rest has no newline and is shorter than the cap: it is only kept.
                    splitter.push(&data[last + 1..], &mut |_, _| {});
                    return Step::More;
                }
                {
                    let mut emit = |line: &[u8], split: bool| {
                        put_line(&mut out, "", line, split);
                        if console_on {
                            let shown = match &mut cfg.console_filter {
                                Some(f) => f(line),
                                None => ConsoleLine::AsIs,
                            };
                            match shown {
                                ConsoleLine::AsIs => {
                                    put_line(&mut batch, &cfg.prefix, line, split);
                                    lines += 1;
                                }
                                ConsoleLine::Instead(s) => {
                                    put_line(&mut batch, &cfg.prefix, s.as_bytes(), false);
                                    lines += 1;
                                }
                                ConsoleLine::Skip => {}
                            }
                        }
                        if let Some(tap) = &mut cfg.tap {
                            tap(line);
                        }
                        if let Some(w) = &mut cfg.watch {
                            w.scan(line);
                        }
                        if let Some(f) = &mut cfg.fatal {
                            f.scan(line);
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
                    if let Some(w) = &mut cfg.watch {
                        w.finish();
                    }
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
