//! What mcsup does with every signal, signals as events for the runtime loop, and the backstop
//! for a second SIGINT/SIGTERM.
//!
//! A signal whose default action ends mcsup must never do so while it supervises: the children's
//! own groups, setsid'd grandchildren and the status file ("starting") would be left behind. So
//! every catchable signal whose default action is "terminate" or "core" is either a **stop
//! request** (the ordered teardown SIGTERM starts, exit code 0 when it ends cleanly; see
//! [`super::RunOutcome`]) or **ignored**, deliberately; only synchronous fault signals keep their
//! default:
//!
//! | signal | default | mcsup | why |
//! |---|---|---|---|
//! | SIGTERM, SIGINT | terminate | stop request | the stop signals; a second one ≥ [`ESCALATION_MIN_GAP`] later SIGKILLs every group (loop and backstop) |
//! | SIGHUP | terminate | stop request | the terminal or the session went away (ssh, `srun --pty`) |
//! | SIGQUIT | core | stop request | Ctrl-\\ at the terminal; `scancel -s QUIT`: a person wants mcsup gone, not a core |
//! | SIGUSR1, SIGUSR2 | terminate | the drain signal, or a stop request | the configured drain signal (default SIGUSR1) drains; the other one is a stop request |
//! | SIGALRM, SIGVTALRM, SIGPROF | terminate | stop request | mcsup arms no timers and links no profiler: only a sender (`timeout -s ALRM`) can mean them |
//! | SIGPWR | terminate | stop request | init's power-failure warning: the node is going down |
//! | SIGXCPU | core | stop request | the CPU-time soft limit: the hard limit's SIGKILL follows, so tear down while we can |
//! | SIGIO (= SIGPOLL), SIGSTKFLT | terminate | stop request | mcsup sets no O_ASYNC fd and has no coprocessor stack: only a sender can mean them |
//! | SIGSYS | core | stop request | `kill -SYS`, or a seccomp filter that traps (the trapped call does not run): tear down in order rather than die |
//! | SIGXFSZ | core | ignored (counted) | a write over `ulimit -f` (Slurm propagates it) then fails with EFBIG and is reported instead of killing the node |
//! | SIGPIPE | terminate | ignored | set by the Rust runtime: writes to a closed pipe fail with EPIPE |
//! | SIGRTMIN..SIGRTMAX | terminate | ignored (reported) | application-defined and mcsup defines none: a stray one neither kills the node nor starts a teardown nobody meant; blocked from the start of `main` and read from a signalfd |
//! | SIGTRAP, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV | core | every group SIGKILLed, then the default | synchronous faults, or sent (`kill -ABRT`; a debugger's trap, which ptrace sees first): continuing would hide a bug or run on broken state, but the groups' members would outlive mcsup (PDEATHSIG reaches only its direct children); setsid'd descendants are left to Slurm's step cgroup, and the status file's heartbeat goes stale |
//! | signals 32, 33 | terminate | default | reserved by glibc for its threads; nobody else may send them |
//! | SIGKILL, SIGSTOP | terminate, stop | (cannot be caught) | children still get PDEATHSIG's SIGKILL |
//! | SIGTSTP, SIGTTIN, SIGTTOU | stop | default | they pause mcsup, they do not end it; SIGCONT resumes supervision |
//! | SIGCHLD, SIGCONT, SIGURG, SIGWINCH | ignore | SIGCHLD → the reaper; others default | nothing to do |
//!
//! "Ignored" is a handler that does nothing (or counts), or a blocked signal read from a
//! signalfd (the real-time ones), never SIG_IGN: an ignored disposition survives `exec` into the
//! children, a handler does not, and the child side of spawn empties the signal mask, so the
//! children keep their defaults.
//!
//! Before `mcsup run` listens (while it reads the recipe and runs the preflight) nothing of the
//! plan is running, but a preflight helper may be: `run` holds the stop signals from its start
//! ([`hold_stop_signals`]), a helper's wait sees one pending and kills the helper's group, and
//! `run` then ends without starting anything. Every thread but the loop's blocks the signals
//! the loop handles ([`spawn_thread`], [`block_supervised_signals`]), so none lands in a thread
//! whose default action would end mcsup. Other subcommands keep the default action, with three
//! exceptions installed first thing in `main` for every subcommand: SIGUSR1/SIGUSR2 are held (blocked)
//! until the loop listens, because Slurm's early drain warning may come that soon (a held
//! non-drain one then starts the teardown at once); the real-time signals are blocked for good
//! (the loop reads them, and reports one that came before); SIGXFSZ is counted from the start.
//!
//! [`SignalEvents`] turns the table into a stream for the runtime loop ([`SignalEvent`]);
//! SIGCHLD is handled by the runtime's reaper. The backstop is a signal-hook handler that, on a
//! second SIGINT/SIGTERM at least [`ESCALATION_MIN_GAP`] after the first, SIGKILLs every
//! registered process group straight from the handler, so a force-kill works even if the loop is
//! stuck. Handlers here must stay async-signal-safe: atomics, `clock_gettime`, `kill` only.
//! This module decides nothing about processes: the machine turns a stop request into a teardown.

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

pub use crate::domain::{is_stop_signal, stop_pending, stop_set, STOP_SIGNALS};

/// Writes that went over the file size limit (each one raises SIGXFSZ and fails with EFBIG).
static FILE_SIZE_EXCEEDED: AtomicU64 = AtomicU64::new(0);
static XFSZ_INSTALL: Once = Once::new();

/// Count SIGXFSZ instead of dying of it: call first thing in `main`. A handler, not SIG_IGN, so
/// the children (exec resets handlers, not ignores) keep the default action.
pub fn survive_file_size_limit() {
    XFSZ_INSTALL.call_once(|| {
        // SAFETY: the handler only increments an atomic.
        let _ = unsafe {
            signal_hook::low_level::register(libc::SIGXFSZ, || {
                FILE_SIZE_EXCEEDED.fetch_add(1, Ordering::Relaxed);
            })
        };
    });
}

/// Writes that failed so far because they went over the file size limit (`ulimit -f`).
pub fn file_size_exceeded() -> u64 {
    FILE_SIZE_EXCEEDED.load(Ordering::Relaxed)
}

/// Signals a drain is usually sent with. Slurm may deliver the early warning before mcsup has
/// installed its handlers (while it reads the recipe or runs the preflight); their default
/// action would kill mcsup (exit 138) instead of draining it. The one that is not the drain
/// signal is a stop request: held all the same, it starts the teardown once the loop listens.
const EARLY_SIGNALS: [Signal; 2] = [Signal::SIGUSR1, Signal::SIGUSR2];

fn early_set() -> nix::sys::signal::SigSet {
    let mut set = nix::sys::signal::SigSet::empty();
    for s in EARLY_SIGNALS {
        set.add(s);
    }
    set
}

/// The real-time signals, SIGRTMIN..=SIGRTMAX (glibc keeps the two below SIGRTMIN for itself).
fn realtime_set() -> nix::sys::signal::SigSet {
    let mut raw = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set; sigaddset with a valid signal number.
    unsafe {
        libc::sigemptyset(raw.as_mut_ptr());
        for signo in libc::SIGRTMIN()..=libc::SIGRTMAX() {
            libc::sigaddset(raw.as_mut_ptr(), signo);
        }
        nix::sys::signal::SigSet::from_sigset_t_unchecked(raw.assume_init())
    }
}

/// Block SIGUSR1/SIGUSR2 and the real-time signals on the calling thread: call first thing in
/// `main`, before any thread exists, so every thread inherits the block. A signal that arrives
/// meanwhile stays pending.
pub fn hold_early_signals() {
    // (Not `SigSet::extend`: it goes through nix's `Signal`, which names no real-time signal.)
    let mut set = realtime_set();
    for s in EARLY_SIGNALS {
        set.add(s);
    }
    let _ = set.thread_block();
}

/// Unblock SIGUSR1/SIGUSR2 (and the stop signals `mcsup run` held through its preflight:
/// [`hold_stop_signals`]) once the runtime listens: a pending drain or stop request is then
/// delivered to the handler. The real-time signals stay blocked for good: [`SignalEvents`] reads
/// them (a drain signal is never one of them: the plan's is a named signal). Children are
/// unaffected either way: the child side of spawn resets the signal mask.
pub fn release_early_signals() {
    let mut set = early_set();
    set.extend(&stop_set());
    let _ = set.thread_unblock();
}

/// The signals the runtime loop handles: the stop requests, the drain signals, the real-time
/// ones. Only the thread that runs the loop (the one `main` runs on) ever takes them; every
/// other thread blocks them, so a signal never lands where nothing handles it (a writer thread
/// with the default action would end mcsup while the loop's thread holds them).
fn supervised_set() -> nix::sys::signal::SigSet {
    let mut set = realtime_set();
    set.extend(&stop_set());
    set.extend(&early_set());
    set
}

/// Block [`supervised_set`] in the calling thread: for threads mcsup does not spawn itself
/// (tokio's blocking pool: `on_thread_start`).
pub fn block_supervised_signals() {
    let _ = supervised_set().thread_block();
}

/// Spawn a thread that never takes the signals the loop handles: they are blocked around the
/// spawn, so the new thread starts with them blocked (no window before it could block them
/// itself). Every thread mcsup spawns goes through here.
pub fn spawn_thread<F, T>(
    builder: std::thread::Builder,
    f: F,
) -> std::io::Result<std::thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    use nix::sys::signal::SigmaskHow;
    let old = supervised_set().thread_swap_mask(SigmaskHow::SIG_BLOCK);
    let spawned = builder.spawn(f);
    if let Ok(old) = old {
        let _ = old.thread_set_mask();
    }
    spawned
}

/// Hold the stop signals in the calling thread (the one that will run the loop) from the start
/// of `mcsup run` until the loop listens (`release_early_signals`): a SIGTERM during the
/// preflight then waits instead of killing mcsup with a helper still running; the preflight's
/// helpers see it pending and stop ([`stop_pending`]), and `run` ends without starting anything.
pub fn hold_stop_signals() {
    let _ = stop_set().thread_block();
}

/// Synchronous fault signals: mcsup does not go on after one (its state may be broken), but
/// before it dies its children's process groups go too ([`fatal_handler`]).
const FATAL_SIGNALS: [(libc::c_int, &str); 6] = [
    (
        libc::SIGABRT,
        "mcsup: SIGABRT: killing every process group it started, then exiting\n",
    ),
    (
        libc::SIGTRAP,
        "mcsup: SIGTRAP: killing every process group it started, then exiting\n",
    ),
    (
        libc::SIGILL,
        "mcsup: SIGILL: killing every process group it started, then exiting\n",
    ),
    (
        libc::SIGFPE,
        "mcsup: SIGFPE: killing every process group it started, then exiting\n",
    ),
    (
        libc::SIGBUS,
        "mcsup: SIGBUS: killing every process group it started, then exiting\n",
    ),
    (
        libc::SIGSEGV,
        "mcsup: SIGSEGV: killing every process group it started, then exiting\n",
    ),
];

/// A fault signal, sent (`kill -ABRT`) or real: SIGKILL every registered process group (their
/// members would otherwise outlive mcsup: PDEATHSIG reaches only the direct children), say so on
/// stderr, and die of the same signal. Installed with SA_RESETHAND | SA_NODEFER, so the `raise`
/// meets the default action; a real fault that returns re-executes and meets it too.
/// Async-signal-safe: atomics, `kill`, `write`, `raise`.
extern "C" fn fatal_handler(signo: libc::c_int) {
    kill_every_group();
    if let Some((_, msg)) = FATAL_SIGNALS.iter().find(|(s, _)| *s == signo) {
        // SAFETY: write(2) of a static buffer is async-signal-safe.
        unsafe { libc::write(libc::STDERR_FILENO, msg.as_ptr().cast(), msg.len()) };
    }
    // SAFETY: raise is async-signal-safe; the disposition is already the default.
    unsafe { libc::raise(signo) };
}

/// Install [`fatal_handler`] for the fault signals (on the alternate stack the Rust runtime
/// sets up, so a stack overflow still reaches it). Called with the backstop: from the moment
/// there can be groups to kill.
fn install_fatal_handlers() -> std::io::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet};
    let action = SigAction::new(
        SigHandler::Handler(fatal_handler),
        SaFlags::SA_RESETHAND | SaFlags::SA_NODEFER | SaFlags::SA_ONSTACK,
        SigSet::empty(),
    );
    for (signo, _) in FATAL_SIGNALS {
        let sig = Signal::try_from(signo).map_err(std::io::Error::from)?;
        // SAFETY: the handler is async-signal-safe (see fatal_handler).
        unsafe { sigaction(sig, &action) }.map_err(std::io::Error::from)?;
    }
    Ok(())
}

/// Where [`register_group`] starts looking for a free slot: after the last one it took, so a
/// start of n processes is not a scan of every taken slot for each (O(n²)).
static NEXT_SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Record a live process group for the backstop.
pub fn register_group(pgid: Pid) {
    let start = NEXT_SLOT.load(Ordering::Relaxed) % SLOTS;
    for i in (start..SLOTS).chain(0..start) {
        if GROUPS[i]
            .compare_exchange(0, pgid, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            NEXT_SLOT.store(i + 1, Ordering::Relaxed);
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
    kill_every_group();
}

/// SIGKILL every registered process group. Async-signal-safe: atomics and `kill`.
fn kill_every_group() {
    for slot in &GROUPS {
        let pgid = slot.load(Ordering::Acquire);
        if pgid > 1 {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

/// Install the backstop once per process (idempotent), and the fault signals' handler. A drain
/// signal that is SIGINT or SIGTERM does not count towards escalation (the machine ignores it
/// the same way).
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
        if let Err(e) = install_fatal_handlers() {
            result = Err(e);
        }
    });
    result
}

/// Whether the backstop has force-killed the groups.
pub fn backstop_fired() -> bool {
    BACKSTOP_FIRED.load(Ordering::Acquire)
}

/// A signal received while supervising, as the module table classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalEvent {
    /// A stop request or the drain signal: the machine starts the teardown.
    Stop(Signal),
    /// An ignored signal worth reporting (SIGXFSZ, a real-time signal), by number.
    Ignored(i32),
}

/// `SIGXFSZ`, `SIGRTMIN+3`, ... for any signal number.
pub fn signal_name(signo: i32) -> String {
    if let Ok(s) = Signal::try_from(signo) {
        return s.as_str().to_string();
    }
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    if (min..=max).contains(&signo) {
        format!("SIGRTMIN+{}", signo - min)
    } else {
        format!("signal {signo}")
    }
}

/// Where the supervisor hears signals from: the process's own (`SignalEvents`) or, to drive a
/// run in-process, a channel of [`SignalEvent`]s (a closed channel never yields).
pub trait SignalSource {
    /// The next signal event.
    fn recv(&mut self) -> impl std::future::Future<Output = SignalEvent>;
}

impl SignalSource for SignalEvents {
    async fn recv(&mut self) -> SignalEvent {
        SignalEvents::recv(self).await
    }
}

impl SignalSource for tokio::sync::mpsc::UnboundedReceiver<SignalEvent> {
    async fn recv(&mut self) -> SignalEvent {
        match tokio::sync::mpsc::UnboundedReceiver::recv(self).await {
            Some(ev) => ev,
            None => std::future::pending().await,
        }
    }
}

/// The signals mcsup listens to while it supervises, as one stream.
pub struct SignalEvents {
    streams: Vec<(SignalEvent, TokioSignal)>,
    /// The real-time signals, blocked since `main` ([`hold_early_signals`]) and read here: one
    /// descriptor rather than a handler per signal (31 registrations took about 0.1 ms of every
    /// start, the registry copying its table on each).
    realtime: tokio::io::unix::AsyncFd<nix::sys::signalfd::SignalFd>,
}

impl SignalEvents {
    /// Listen for every stop request, `drain`, SIGXFSZ and the real-time signals. Listening
    /// replaces the default action (for the ignored ones too) for the rest of the process's life.
    /// The real-time signals must be blocked in every thread ([`hold_early_signals`], first thing
    /// in `main`); they are blocked here in the calling thread too.
    pub fn new(drain: Signal) -> std::io::Result<Self> {
        let mut events: Vec<SignalEvent> =
            STOP_SIGNALS.iter().map(|&s| SignalEvent::Stop(s)).collect();
        if !is_stop_signal(drain as i32) {
            events.push(SignalEvent::Stop(drain));
        }
        if drain as i32 != libc::SIGXFSZ {
            events.push(SignalEvent::Ignored(libc::SIGXFSZ));
        }
        let rt = realtime_set();
        rt.thread_block()?;
        use nix::sys::signalfd::{SfdFlags, SignalFd};
        let fd = SignalFd::with_flags(&rt, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        // SAFETY: the SignalFd owns its descriptor, open and the same for as long as it lives,
        // and the AsyncFd owns the SignalFd.
        let realtime = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        }?;
        let mut streams = Vec::with_capacity(events.len());
        for ev in events {
            let signo = match ev {
                SignalEvent::Stop(s) => s as i32,
                SignalEvent::Ignored(n) => n,
            };
            streams.push((ev, signal(SignalKind::from_raw(signo))?));
        }
        Ok(SignalEvents { streams, realtime })
    }

    /// The next signal received.
    pub async fn recv(&mut self) -> SignalEvent {
        use std::task::Poll;
        std::future::poll_fn(|cx| {
            for (ev, stream) in &mut self.streams {
                if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    return Poll::Ready(*ev);
                }
            }
            // Until the descriptor has nothing left to read (or fails: it then stays silent).
            while let Poll::Ready(Ok(mut ready)) = self.realtime.poll_read_ready(cx) {
                match ready.get_inner().read_signal() {
                    Ok(Some(info)) => {
                        return Poll::Ready(SignalEvent::Ignored(info.ssi_signo as i32))
                    }
                    Ok(None) => ready.clear_ready(),
                    Err(_) => return Poll::Pending,
                }
            }
            Poll::Pending
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Default action "terminate" or "core" (signal(7)), catchable, not reserved by glibc.
    const KILLS_BY_DEFAULT: [i32; 26] = [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGILL,
        libc::SIGTRAP,
        libc::SIGABRT,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGUSR1,
        libc::SIGSEGV,
        libc::SIGUSR2,
        libc::SIGPIPE,
        libc::SIGALRM,
        libc::SIGTERM,
        libc::SIGSTKFLT,
        libc::SIGXCPU,
        libc::SIGXFSZ,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGIO,
        libc::SIGPWR,
        libc::SIGSYS,
        // Stand-ins for the real-time range, which is listened to as a whole.
        34,
        35,
        50,
        64,
    ];

    /// Left at their default on purpose (module table): synchronous faults.
    const FAULTS: [i32; 6] = [
        libc::SIGTRAP,
        libc::SIGABRT,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGSEGV,
    ];

    #[test]
    fn every_signal_that_would_kill_mcsup_is_a_stop_request_or_ignored() {
        let rt = libc::SIGRTMIN()..=libc::SIGRTMAX();
        for signo in KILLS_BY_DEFAULT {
            let handled = is_stop_signal(signo)
                || signo == libc::SIGXFSZ
                || signo == libc::SIGPIPE
                || rt.contains(&signo)
                || FAULTS.contains(&signo);
            assert!(handled, "{} has no entry", signal_name(signo));
        }
        for s in STOP_SIGNALS {
            assert!(!FAULTS.contains(&(s as i32)), "{s} is a fault signal");
        }
    }

    #[test]
    fn groups_are_registered_once_each_and_slots_are_reused() {
        // Group ids no real process has (above pid_max); no other test of this crate registers
        // groups, so the table is this test's.
        let count = |id: Pid| {
            GROUPS
                .iter()
                .filter(|s| s.load(Ordering::Acquire) == id)
                .count()
        };
        let ids = |from: Pid, n: usize| (0..n as Pid).map(move |i| from + i);
        for id in ids(2_000_000_000, 40) {
            register_group(id);
        }
        assert!(ids(2_000_000_000, 40).all(|id| count(id) == 1));
        for id in ids(2_000_000_000, 40) {
            unregister_group(id);
        }
        assert!(GROUPS.iter().all(|s| s.load(Ordering::Acquire) == 0));
        // Fill the whole table: every slot is found, from wherever the cursor starts.
        for id in ids(2_000_001_000, SLOTS) {
            register_group(id);
        }
        assert!(ids(2_000_001_000, SLOTS).all(|id| count(id) == 1));
        // The one free slot is just behind the cursor: the search wraps around to it.
        let cursor = NEXT_SLOT.load(Ordering::Relaxed) % SLOTS;
        let behind = (cursor + SLOTS - 1) % SLOTS;
        unregister_group(GROUPS[behind].load(Ordering::Acquire));
        register_group(2_000_999_999);
        assert_eq!(GROUPS[behind].load(Ordering::Acquire), 2_000_999_999);
        // A full table takes no more (the loop's own escalation covers such a group).
        register_group(2_001_000_000);
        assert_eq!(count(2_001_000_000), 0);
        for s in &GROUPS {
            s.store(0, Ordering::Release);
        }
    }

    #[test]
    fn names_cover_the_real_time_range() {
        assert_eq!(signal_name(libc::SIGXFSZ), "SIGXFSZ");
        assert_eq!(signal_name(libc::SIGRTMIN() + 2), "SIGRTMIN+2");
        assert_eq!(signal_name(0), "signal 0");
    }
}
