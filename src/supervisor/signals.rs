//! Signals as events, plus the backstop for a second SIGINT/SIGTERM.
//!
//! [`SignalEvents`] turns SIGTERM, SIGINT, SIGHUP and the drain signal into a stream for the
//! runtime loop; SIGCHLD is handled by the runtime's reaper. The backstop is a signal-hook
//! handler that, on a second SIGINT/SIGTERM at least [`ESCALATION_MIN_GAP`] after the first,
//! SIGKILLs every registered process group straight from the handler, so a force-kill works even
//! if the loop is stuck. It must stay async-signal-safe: atomics, `clock_gettime`, `kill` only.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Once;

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, Signal as TokioSignal, SignalKind};

use super::machine::{Pid, ESCALATION_MIN_GAP};

/// Process groups the backstop kills. A fixed array of atomics: the handler cannot allocate or
/// lock. 0 = free slot.
const SLOTS: usize = 1024;
static GROUPS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];
/// CLOCK_MONOTONIC nanoseconds of the first SIGINT/SIGTERM (0 = none yet).
static FIRST_STOP_NS: AtomicU64 = AtomicU64::new(0);
static BACKSTOP_FIRED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

/// Signals a drain is usually sent with. Slurm may deliver the early warning before mcsup has
/// installed its handlers (while it reads the recipe or runs the preflight); their default
/// action would kill mcsup (exit 138) instead of draining it.
const EARLY_SIGNALS: [Signal; 2] = [Signal::SIGUSR1, Signal::SIGUSR2];

fn early_set() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for s in EARLY_SIGNALS {
        set.add(s);
    }
    set
}

/// Block SIGUSR1/SIGUSR2 on the calling thread: call first thing in `main`, before any thread
/// exists, so every thread inherits the block. A signal that arrives meanwhile stays pending.
pub fn hold_early_signals() {
    let _ = early_set().thread_block();
}

/// Unblock them once the runtime listens (a pending drain is then delivered to the handler).
/// Children are unaffected either way: the child side of spawn resets the signal mask.
pub fn release_early_signals() {
    let _ = early_set().thread_unblock();
}

/// Record a live process group for the backstop.
pub fn register_group(pgid: Pid) {
    for slot in &GROUPS {
        if slot
            .compare_exchange(0, pgid, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return;
        }
    }
    // Table full: the loop's own escalation still covers this group.
}

/// Forget a group once it is empty (its id may be reused afterwards).
pub fn unregister_group(pgid: Pid) {
    for slot in &GROUPS {
        if slot
            .compare_exchange(pgid, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return;
        }
    }
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime is async-signal-safe and writes only to `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn backstop_handler() {
    let now = monotonic_ns().max(1);
    let first = FIRST_STOP_NS.load(Ordering::Acquire);
    if first == 0 {
        let _ = FIRST_STOP_NS.compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire);
        return;
    }
    if now.saturating_sub(first) < ESCALATION_MIN_GAP.as_nanos() as u64 {
        return;
    }
    BACKSTOP_FIRED.store(true, Ordering::Release);
    for slot in &GROUPS {
        let pgid = slot.load(Ordering::Acquire);
        if pgid > 1 {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

/// Install the backstop once per process (idempotent). A drain signal that is SIGINT or SIGTERM
/// does not count towards escalation (the machine ignores it the same way).
pub fn install_backstop(drain: Signal) -> std::io::Result<()> {
    let mut result = Ok(());
    INSTALL.call_once(|| {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            if sig == drain as i32 {
                continue;
            }
            // SAFETY: the handler only touches atomics and calls clock_gettime and kill.
            if let Err(e) = unsafe { signal_hook::low_level::register(sig, backstop_handler) } {
                result = Err(e);
            }
        }
    });
    result
}

/// Whether the backstop has force-killed the groups.
pub fn backstop_fired() -> bool {
    BACKSTOP_FIRED.load(Ordering::Acquire)
}

/// The signals that drive the machine, as one stream.
pub struct SignalEvents {
    streams: Vec<(Signal, TokioSignal)>,
}

impl SignalEvents {
    /// Listen for SIGTERM, SIGINT, SIGHUP and `drain`.
    pub fn new(drain: Signal) -> std::io::Result<Self> {
        let mut sigs = vec![Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP];
        if !sigs.contains(&drain) {
            sigs.push(drain);
        }
        let mut streams = Vec::new();
        for s in sigs {
            streams.push((s, signal(SignalKind::from_raw(s as i32))?));
        }
        Ok(SignalEvents { streams })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> Signal {
        std::future::poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if let std::task::Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    return std::task::Poll::Ready(*sig);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}
