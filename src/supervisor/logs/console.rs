//! The console mirror: a writer thread behind a bounded queue that never makes a child wait
//! (what does not fit is dropped and counted).

use std::io::{self, BufWriter, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes the console queue may hold before lines are dropped.
const CONSOLE_QUEUE_BYTES: usize = 4 << 20;
const CONSOLE_QUEUE_BATCHES: usize = 1024;

/// The byte budget of a queue to a writer thread that must never be waited for (the children's
/// console, mcsup's own stderr): offers that do not fit, or find the channel full, are dropped
/// and their lines counted; the writer gives bytes back as it writes them. Clones share counts.
#[derive(Clone)]
pub(in crate::supervisor) struct QueueBudget {
    limit: usize,
    queued: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
}

impl QueueBudget {
    pub(in crate::supervisor) fn new(limit: usize) -> QueueBudget {
        QueueBudget {
            limit,
            queued: Arc::new(AtomicUsize::new(0)),
            dropped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Hand `batch` (`lines` lines) to `tx` if it fits; otherwise drop and count it. Never blocks.
    pub(in crate::supervisor) fn offer(
        &self,
        tx: &SyncSender<Vec<u8>>,
        batch: Vec<u8>,
        lines: u64,
    ) {
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

    /// Take room for `len` bytes if the budget has it (the caller counts what it drops).
    pub(in crate::supervisor) fn try_take(&self, len: usize) -> bool {
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                (q + len <= self.limit).then_some(q + len)
            })
            .is_ok()
    }

    /// Whether `len` more bytes fit now.
    pub(in crate::supervisor) fn has_room(&self, len: usize) -> bool {
        self.queued.load(Ordering::Acquire) + len <= self.limit
    }

    /// The writer thread wrote (or gave up on) `len` bytes.
    pub(in crate::supervisor) fn written(&self, len: usize) {
        self.queued.fetch_sub(len, Ordering::AcqRel);
    }

    /// Bytes offered and not written yet.
    pub(in crate::supervisor) fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    /// Lines dropped so far.
    pub(in crate::supervisor) fn dropped(&self) -> u64 {
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
        let thread = crate::supervisor::signals::spawn_thread(
            std::thread::Builder::new().name("mcsup-console".into()),
            move || console_thread(rx, b),
        )?;
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

/// After a batch arrives, the console thread lets more gather for this long before writing: a
/// busy child's output then wakes it about a thousand times a second, not once per pipe read
/// (20,000 times a second for 100-byte lines), and is written in a few large writes. A line
/// reaches the terminal at most this much later; an idle console still never wakes.
const CONSOLE_GATHER: Duration = Duration::from_millis(1);

fn console_thread(rx: Receiver<Vec<u8>>, budget: QueueBudget) {
    let stdout = io::stdout();
    let mut out = BufWriter::with_capacity(64 * 1024, stdout.lock());
    while let Ok(batch) = rx.recv() {
        std::thread::sleep(CONSOLE_GATHER);
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
    pub(super) fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Offer a batch of `lines` lines; drop (and count) it if the queue is full.
    pub(super) fn offer(&self, batch: Vec<u8>, lines: u64) {
        if let Some(tx) = &self.tx {
            self.budget.offer(tx, batch, lines);
        }
    }
}
