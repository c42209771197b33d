//! mcsup's own log (tracing) on stderr, through [`StderrQueue`]: a bounded queue and a writer
//! thread, so a stderr nobody reads (a suspended srun) costs dropped, counted lines, never a
//! blocked event loop.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::logs::QueueBudget;
use super::LogFormat;

/// Install a tracing subscriber on stderr (through `StderrQueue`) unless the caller already has
/// one.
pub fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    if tracing::dispatcher::has_been_set() {
        return;
    }
    let filter = EnvFilter::try_from_env("MCSUP_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal as _;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| QueuedStderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Human => b.with_target(false).try_init(),
        LogFormat::Json => b.json().try_init(),
    };
}

/// Bytes of mcsup's own log that may wait for stderr before lines are dropped: hundreds of lines,
/// on top of the 64 KiB a pipe holds. A reader that falls this far behind is not reading, and
/// old lines are worth less than a loop that keeps running (and a bounded RSS).
const STDERR_QUEUE_BYTES: usize = 64 * 1024;
const STDERR_QUEUE_BATCHES: usize = 1024;

/// mcsup's own stderr, never waited for (the same [`QueueBudget`] as the children's console):
/// callers offer whole lines to a bounded queue and a writer thread does the blocking writes.
/// What does not fit is dropped and counted; the count goes into the final events record and
/// the last log line. fd 2 itself stays blocking: it is one open file description shared with
/// srun or the shell, and O_NONBLOCK there would change it for them too.
struct StderrQueue {
    /// `None`: the writer thread could not start; lines are then written directly.
    tx: Option<SyncSender<Vec<u8>>>,
    budget: QueueBudget,
    failed: AtomicU64,
}

static STDERR_QUEUE: OnceLock<StderrQueue> = OnceLock::new();

fn stderr_queue() -> &'static StderrQueue {
    STDERR_QUEUE.get_or_init(|| {
        let (tx, rx) = sync_channel::<Vec<u8>>(STDERR_QUEUE_BATCHES);
        let spawned = super::signals::spawn_thread(
            std::thread::Builder::new().name("mcsup-stderr".into()),
            move || stderr_thread(rx),
        );
        StderrQueue {
            tx: spawned.ok().map(|_| tx),
            budget: QueueBudget::new(STDERR_QUEUE_BYTES),
            failed: AtomicU64::new(0),
        }
    })
}

fn line_count(bytes: &[u8]) -> u64 {
    (bytes.iter().filter(|&&b| b == b'\n').count() as u64).max(1)
}

fn stderr_thread(rx: Receiver<Vec<u8>>) {
    while let Ok(batch) = rx.recv() {
        let q = stderr_queue();
        // Unbuffered and blocking: this thread is the only one that may wait for the reader.
        if std::io::stderr().lock().write_all(&batch).is_err() {
            q.failed.fetch_add(line_count(&batch), Ordering::Relaxed);
        }
        q.budget.written(batch.len());
    }
}

/// Offer bytes (whole lines) to mcsup's stderr; never blocks while the writer thread runs.
pub fn stderr_write(bytes: &[u8]) {
    let q = stderr_queue();
    let Some(tx) = &q.tx else {
        let _ = std::io::stderr().lock().write_all(bytes);
        return;
    };
    q.budget.offer(tx, bytes.to_vec(), line_count(bytes));
}

/// Lines of mcsup's own log lost so far: (dropped because stderr was full, failed to write).
pub fn stderr_lost() -> (u64, u64) {
    match STDERR_QUEUE.get() {
        Some(q) => (q.budget.dropped(), q.failed.load(Ordering::Relaxed)),
        None => (0, 0),
    }
}

/// Give the writer thread up to `within` to write what is queued (call before exiting); a
/// stderr nobody reads is left behind, the process exit ends the thread.
pub fn flush_stderr(within: Duration) {
    let Some(q) = STDERR_QUEUE.get() else { return };
    let end = Instant::now() + within;
    while q.budget.queued() > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The tracing writer: the formatter hands each event over in one `write_all`.
struct QueuedStderr;

impl Write for QueuedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        stderr_write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
