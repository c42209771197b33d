//! Creating children: the only place that does. Supervised processes and exec probes are forked
//! and exec'd, and a spawn returns as soon as the child exists: whether its exec worked comes
//! back later through a handshake pipe ([`Exec`]), so an exec that hangs (the program on a file
//! system that stopped answering) never holds the supervising thread.
//!
//! Every child gets its own process group (so signals reach its whole tree, and Ctrl-C at the
//! terminal reaches only mcsup), `/dev/null` stdin, stdout+stderr on one pipe (so the log keeps
//! their relative order), every inherited fd >= 3 closed at exec, the stop signals reset to
//! SIG_DFL, the drain signal set to SIG_IGN, PR_SET_PDEATHSIG=SIGKILL, and the default scheduler
//! slice (mcsup's own thread asks for a short one: [`prefer_short_slice`]).
//!
//! It must not wait for children: the runtime's reaper owns every `wait()` (one owner, or the
//! subreaper loop steals statuses). Nothing here keeps a `Child` handle alive.
//!
//! Why not `std::process::Command`: it makes the same promises with `process_group(0)` and one
//! `pre_exec` (the test module `vs_command` spells that version out and checks, on every run,
//! that a child started here looks the same from `/proc`, fails with the same errno and dies
//! with its creating thread the same way), but its `spawn` returns only once the child has
//! exec'd or failed to: a hung exec would freeze the supervising thread with it, signals and the
//! ordered teardown included (it did, with `clone(CLONE_VFORK)` here before). And when the exec
//! fails, Command reaps the child itself, which races the runtime's one reaper (and panics when
//! it loses). Speed is not the reason: a spawn is well under a millisecond either way.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::fcntl::OFlag;
use nix::sys::signal::Signal;

use crate::plan::{ProcessSpec, SlurmStep};

use super::machine::Pid;

/// A freshly spawned child.
pub struct Spawned {
    /// Its pid, which is also its process-group id.
    pub pid: Pid,
    /// Read end of the pipe carrying its stdout and stderr.
    pub output: OwnedFd,
    /// Whether it exec'd, once it has (or could not).
    pub exec: Exec,
}

/// Signals whose inherited SIG_IGN must not survive into a child (nohup, `cmd &`), so that the
/// stop signals work. Handlers are reset by exec anyway; ignores are not.
const RESET_TO_DEFAULT: [Signal; 7] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGCONT,
];

/// The argv actually exec'd: the program itself, or `sh -c '<preamble>; exec "$@"' sh <argv...>`
/// so the signals reach the real program, not a shell.
pub fn effective_argv(spec: &ProcessSpec) -> Vec<String> {
    match &spec.preamble {
        Some(pre) if !pre.trim().is_empty() => {
            let mut v = vec![
                "sh".to_string(),
                "-c".to_string(),
                format!("{pre}\nexec \"$@\""),
                "sh".to_string(),
            ];
            v.extend(spec.argv.iter().cloned());
            v
        }
        _ => spec.argv.clone(),
    }
}

/// Spawn a supervised process: returns once it is forked (its group exists), before its exec;
/// `Spawned::exec` says how the exec went. What the child runs between fork and exec is
/// [`child_main`]: raw system calls only, with every signal blocked. (`posix_spawn` cannot set
/// PR_SET_PDEATHSIG nor ignore the drain signal.)
pub fn spawn_process(spec: &ProcessSpec, drain: Signal) -> io::Result<Spawned> {
    let argv = effective_argv(spec);
    let prog = argv.first().ok_or_else(|| io::Error::other("empty argv"))?;
    // The child's environment: mcsup's, then the plan's.
    let mut overrides = Overrides::new();
    if spec.env_value("PYTHONUNBUFFERED").is_none() {
        // Python block-buffers a pipe; the ready line would arrive late or never.
        overrides.insert("PYTHONUNBUFFERED".into(), "1".into());
    }
    for v in &spec.env {
        overrides.insert((&v.name).into(), (&v.value).into());
    }
    let exec = if spec.slurm_step.is_some() {
        ExecImage::without(
            prog,
            &argv,
            &overrides,
            spec.cwd.as_deref(),
            SlurmStep::drops,
        )?
    } else {
        ExecImage::new(prog, &argv, &overrides, spec.cwd.as_deref())?
    };
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let (pid, exec) = exec.spawn(
        dev_null()?,
        write.as_raw_fd(),
        drain as libc::c_int,
        spec.stop.signal.0 as libc::c_int,
    )?;
    // Our copies of the child's stdio close here: the reader sees EOF when the child's go.
    drop(write);
    Ok(Spawned {
        pid,
        output: read,
        exec,
    })
}

/// Variables set over mcsup's own environment for one child, by name.
type Overrides = std::collections::BTreeMap<OsString, OsString>;

/// One `NAME=value` of a child's environment: mcsup's own (borrowed from [`inherited`]) or set
/// for this child.
type EnvEntry = std::borrow::Cow<'static, CStr>;

/// mcsup's own environment, read once: sorted by name, one entry per name (the last, as
/// `std::env::vars_os` into a map keeps), each with its `NAME=value` C string. mcsup never
/// changes its environment, so one snapshot serves every child of the run. Building it for each
/// spawn (reading `environ`, a sorted map, a C string per variable) was most of a spawn's time in
/// user space, and grows with the hundred-odd variables Slurm sets.
fn inherited() -> &'static [(OsString, CString)] {
    static SNAPSHOT: std::sync::OnceLock<Vec<(OsString, CString)>> = std::sync::OnceLock::new();
    SNAPSHOT.get_or_init(|| {
        let vars: std::collections::BTreeMap<OsString, OsString> = std::env::vars_os().collect();
        vars.into_iter()
            // A name or value from `environ` holds no NUL (each is a C string).
            .filter_map(|(k, v)| {
                let line = CString::new(env_line(&k, &v)).ok()?;
                Some((k, line))
            })
            .collect()
    })
}

fn env_line(name: &OsStr, value: &OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let mut kv = Vec::with_capacity(name.len() + 1 + value.len());
    kv.extend_from_slice(name.as_bytes());
    kv.push(b'=');
    kv.extend_from_slice(value.as_bytes());
    kv
}

/// A child's environment: `inherited` (sorted by name) with `overrides` set over it, sorted by
/// name. The inherited entries are borrowed, not copied.
fn merge_env(
    inherited: &'static [(OsString, CString)],
    overrides: &Overrides,
    drop: fn(&str) -> bool,
) -> Result<Vec<EnvEntry>, std::ffi::NulError> {
    let mut out = Vec::with_capacity(inherited.len() + overrides.len());
    let mut own = overrides.iter().peekable();
    for (name, line) in inherited
        .iter()
        .filter(|(name, _)| !name.to_str().is_some_and(drop))
    {
        while let Some((k, v)) = own.next_if(|(k, _)| *k < name) {
            out.push(EnvEntry::Owned(CString::new(env_line(k, v))?));
        }
        match own.next_if(|(k, _)| *k == name) {
            Some((k, v)) => out.push(EnvEntry::Owned(CString::new(env_line(k, v))?)),
            None => out.push(EnvEntry::Borrowed(line.as_c_str())),
        }
    }
    for (k, v) in own {
        out.push(EnvEntry::Owned(CString::new(env_line(k, v))?));
    }
    Ok(out)
}

/// Everything the child needs between fork and exec, prepared by the parent (the child of a
/// multi-threaded process must not allocate: another thread may have held the heap's lock).
struct ExecImage {
    /// Where to exec, in order: the program itself when it names a path, else each `PATH`
    /// directory of the child's environment joined with it (what `execvp` tries).
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<EnvEntry>,
    cwd: Option<CString>,
}

impl ExecImage {
    fn new(
        prog: &str,
        argv: &[String],
        overrides: &Overrides,
        cwd: Option<&std::path::Path>,
    ) -> io::Result<Self> {
        Self::without(prog, argv, overrides, cwd, |_| false)
    }

    /// [`ExecImage::new`] without the variables of mcsup's environment that `drop` names.
    fn without(
        prog: &str,
        argv: &[String],
        overrides: &Overrides,
        cwd: Option<&std::path::Path>,
        drop: fn(&str) -> bool,
    ) -> io::Result<Self> {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let nul = |what: &str| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{what} contains a NUL byte"),
            )
        };
        let c = |b: &[u8], what: &str| CString::new(b).map_err(|_| nul(what));
        if prog.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        let inherited = inherited();
        let candidates = if prog.contains('/') {
            vec![c(prog.as_bytes(), "the program")?]
        } else {
            // The child's PATH; execvp's default search path when it has none.
            let path_var = OsStr::new("PATH");
            let path = overrides
                .get(path_var)
                .map(|p| p.as_bytes().to_vec())
                .or_else(|| {
                    let i = inherited
                        .binary_search_by(|(k, _)| k.as_os_str().cmp(path_var))
                        .ok()?;
                    Some(inherited[i].1.as_bytes()[b"PATH=".len()..].to_vec())
                })
                .unwrap_or_else(|| b"/bin:/usr/bin".to_vec());
            path.split(|&b| b == b':')
                .map(|dir| {
                    // An empty entry is the current directory, as for execvp.
                    let mut full = if dir.is_empty() {
                        b".".to_vec()
                    } else {
                        dir.to_vec()
                    };
                    full.push(b'/');
                    full.extend_from_slice(prog.as_bytes());
                    c(&full, "a PATH entry")
                })
                .collect::<io::Result<_>>()?
        };
        let argv = argv
            .iter()
            .map(|a| c(a.as_bytes(), "an argument"))
            .collect::<io::Result<_>>()?;
        let envp =
            merge_env(inherited, overrides, drop).map_err(|_| nul("an environment variable"))?;
        let cwd = cwd
            .map(|d| c(d.as_os_str().as_bytes(), "the working directory"))
            .transpose()?;
        Ok(ExecImage {
            candidates,
            argv,
            envp,
            cwd,
        })
    }

    /// Create the child (its own process group, stdin `stdin`, stdout and stderr `output`) and
    /// return at once, before it has exec'd: its pid, and the read end of the exec handshake
    /// (see [`Exec`]).
    fn spawn(
        &self,
        stdin: RawFd,
        output: RawFd,
        drain: libc::c_int,
        stop: libc::c_int,
    ) -> io::Result<(Pid, Exec)> {
        fn ptrs<S: std::ops::Deref<Target = CStr>>(v: &[S]) -> Vec<*const libc::c_char> {
            v.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        }
        let candidates = ptrs(&self.candidates);
        let argv = ptrs(&self.argv);
        let envp = ptrs(&self.envp);
        let changes = disposition_changes(Dispositions::current(), drain, stop);
        // The child writes its errno here when it cannot exec; the exec closes it (CLOEXEC).
        let (handshake, report) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        let mut args = ChildArgs {
            candidates: candidates.as_ptr(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            cwd: self.cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            stdin,
            output,
            parent: nix::unistd::getpid().as_raw(),
            changes: changes.as_ptr(),
            changes_len: changes.len(),
            reset_slice: SHORT_SLICE_SET.load(std::sync::atomic::Ordering::Relaxed),
            given_nofile: GIVEN_NOFILE.get().copied(),
            report: report.as_raw_fd(),
        };
        // Every signal blocked across the fork: a handler of mcsup's (which writes to mcsup's
        // own wake-up pipe) must never run in the child. The child resets the handlers before
        // unblocking.
        let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain calls on valid sigset_t values.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        // SAFETY: in the child, `child_main` makes only async-signal-safe system calls on its
        // copy of `args` (every pointer in it valid: the child's memory is a copy of ours) and
        // never returns.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: see above.
            unsafe { child_main(std::ptr::addr_of_mut!(args)) }
        }
        let fork_error = io::Error::last_os_error();
        // SAFETY: restores the mask saved above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        if pid < 0 {
            return Err(fork_error);
        }
        // The group exists from here on, whichever of us runs first (the child sets it too): a
        // stop signal sent to it before the child's exec must not miss it.
        let _ = nix::unistd::setpgid(
            nix::unistd::Pid::from_raw(pid),
            nix::unistd::Pid::from_raw(pid),
        );
        drop(report);
        Ok((pid, Exec(handshake)))
    }
}

/// The parent's end of a child's exec handshake: end of file once the child has exec'd (or died
/// before it could say otherwise), else the errno of the step that failed (the child then exits
/// 127). A spawn returns before the exec has happened, so an exec that hangs (a program on a
/// file system that stopped answering) holds only the child, never the caller; the caller reads
/// this when it can ([`Exec::wait`] blocks, the supervisor reads it asynchronously).
#[derive(Debug)]
pub struct Exec(pub OwnedFd);

impl Exec {
    /// What a complete handshake says: `None` (exec'd) or the child's errno.
    pub fn outcome(bytes: &[u8]) -> Option<io::Error> {
        let errno: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
        Some(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)))
    }

    /// Block until the child has exec'd (`Ok`) or failed to (its errno; the child, which then
    /// exits, is left for the caller to reap).
    #[cfg(test)]
    pub fn wait(self) -> io::Result<()> {
        use std::io::Read;
        let mut bytes = Vec::with_capacity(4);
        std::fs::File::from(self.0).read_to_end(&mut bytes)?;
        match Self::outcome(&bytes) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// mcsup's own signal dispositions, one bit per signal number (1..=64): a handler installed, or
/// SIG_IGN. Read once ([`Dispositions::current`]) rather than by every child between fork and
/// exec: 64 `sigaction` queries per spawn, half of the child's system calls. mcsup installs
/// every handler before its first spawn and changes none afterwards; were
/// one installed later, only exec itself would reset it in the child (a signal arriving in the
/// last instant before exec could then run it there).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dispositions {
    pub caught: u64,
    pub ignored: u64,
}

static DISPOSITIONS: std::sync::Mutex<Option<Dispositions>> = std::sync::Mutex::new(None);

impl Dispositions {
    /// Read this process's dispositions now.
    pub fn read() -> Dispositions {
        let mut d = Dispositions::default();
        for sig in 1..=libc::SIGRTMAX().min(64) {
            // SAFETY: `sigaction` is plain data, valid all-zero.
            let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: a query only (no new action); `cur` is a valid out-pointer.
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut cur) } != 0 {
                continue; // SIGKILL/SIGSTOP, or a signal glibc reserves for itself
            }
            let bit = 1u64 << (sig - 1);
            if cur.sa_sigaction == libc::SIG_IGN {
                d.ignored |= bit;
            } else if cur.sa_sigaction != libc::SIG_DFL {
                d.caught |= bit;
            }
        }
        d
    }

    /// The dispositions read at the first spawn (or the last [`Dispositions::refresh`]).
    pub fn current() -> Dispositions {
        let mut d = DISPOSITIONS.lock().unwrap_or_else(|e| e.into_inner());
        *d.get_or_insert_with(Dispositions::read)
    }

    /// Read them again (the runtime does once its handlers are installed, before it spawns).
    pub fn refresh() {
        *DISPOSITIONS.lock().unwrap_or_else(|e| e.into_inner()) = Some(Dispositions::read());
    }
}

/// What a child changes between fork and exec, as (signal, ignore it (else default)): a
/// handler of mcsup's becomes SIG_DFL (it must not run in the child, and exec would reset it
/// anyway); an inherited SIG_IGN stays (nohup), except for the signals that stop a child, SIGPIPE
/// (which mcsup ignores, as the Rust runtime does; std's Command resets it too) and its own stop
/// signal; the drain signal is ignored so that a step-wide signal reaches only mcsup (the stop
/// signal wins if they are the same). Signals already as wanted are left alone. Pure.
pub fn disposition_changes(
    d: Dispositions,
    drain: libc::c_int,
    stop: libc::c_int,
) -> Vec<(libc::c_int, bool)> {
    let mut changes = Vec::new();
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        let bit = 1u64 << (sig - 1);
        let (caught, ignored) = (d.caught & bit != 0, d.ignored & bit != 0);
        let reset = RESET_TO_DEFAULT.iter().any(|s| *s as libc::c_int == sig)
            || sig == libc::SIGPIPE
            || sig == stop;
        let ignore = if sig == drain && sig != stop {
            true
        } else if !ignored || reset {
            false
        } else {
            continue;
        };
        let already = if ignore { ignored } else { !caught && !ignored };
        if !already {
            changes.push((sig, ignore));
        }
    }
    changes
}

/// What the child needs between fork and exec, prepared by the parent (the child has a copy).
#[repr(C)]
struct ChildArgs {
    candidates: *const *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    stdin: RawFd,
    output: RawFd,
    parent: libc::pid_t,
    /// The dispositions to change, in order: (signal, ignore it (else default)). Worked out by
    /// the parent ([`disposition_changes`]) so that the child only sets them.
    changes: *const (libc::c_int, bool),
    changes_len: usize,
    /// Whether to put the scheduler slice back to the default ([`prefer_short_slice`]).
    reset_slice: bool,
    /// Where the child writes the errno of the step that failed (the handshake, CLOEXEC).
    report: RawFd,
    /// The open-files limit mcsup was given, when it raised its own ([`raise_open_files`]):
    /// the child gets it back.
    given_nofile: Option<(libc::rlim_t, libc::rlim_t)>,
}

/// The child, between fork and exec, every signal blocked: a forked copy of a multi-threaded
/// process, so only system calls; no allocation, no lock, no Rust runtime. Never returns.
///
/// # Safety
/// `a` points to the child's copy of the parent's `ChildArgs`, every pointer in it valid and
/// NUL-terminated as prepared by `ExecImage::spawn`.
unsafe fn child_main(a: *mut ChildArgs) -> ! {
    unsafe {
        let a = &mut *a;
        let fail = |a: &mut ChildArgs| -> ! {
            let mut errno = *libc::__errno_location();
            if errno == 0 {
                errno = libc::EINVAL;
            }
            let bytes = errno.to_ne_bytes();
            // A pipe write of 4 bytes is atomic; nothing more can be done if it fails.
            libc::write(a.report, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(127)
        };
        // Dispositions, as the parent worked them out (see `disposition_changes`).
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        let mut ign: libc::sigaction = std::mem::zeroed();
        ign.sa_sigaction = libc::SIG_IGN;
        for i in 0..a.changes_len {
            let (sig, ignore) = *a.changes.add(i);
            libc::sigaction(sig, if ignore { &ign } else { &dfl }, std::ptr::null_mut());
        }
        if libc::setpgid(0, 0) != 0 {
            fail(a);
        }
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            fail(a);
        }
        // mcsup may have died before the prctl: then PDEATHSIG never fires.
        if libc::getppid() != a.parent {
            *libc::__errno_location() = libc::ESRCH;
            fail(a);
        }
        if libc::dup2(a.stdin, 0) < 0 || libc::dup2(a.output, 1) < 0 || libc::dup2(a.output, 2) < 0
        {
            fail(a);
        }
        // Every other fd closes at exec (fds from srun/PMIx may lack CLOEXEC; a leaked pipe end
        // in a grandchild keeps a log reader from ever seeing EOF).
        close_inherited_fds();
        if !a.cwd.is_null() && libc::chdir(a.cwd) != 0 {
            fail(a);
        }
        // The open-files limit mcsup was given (it raised its own). A failure is ignored: the
        // program would only have more files than it was given.
        if let Some((cur, max)) = a.given_nofile {
            let l = libc::rlimit {
                rlim_cur: cur,
                rlim_max: max,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &l);
        }
        // The default scheduler slice back (mcsup's thread asked for a short one). A failure is
        // ignored: the program would only run with a shorter slice than usual.
        if a.reset_slice {
            set_normal_slice(0);
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // Like execvp: each candidate in turn; EACCES is remembered over a later ENOENT.
        let mut saw_eacces = false;
        let mut c = a.candidates;
        while !(*c).is_null() {
            libc::execve(*c, a.argv, a.envp);
            let e = *libc::__errno_location();
            if e == libc::EACCES {
                saw_eacces = true;
            } else if !matches!(
                e,
                libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT
            ) {
                fail(a);
            }
            c = c.add(1);
        }
        *libc::__errno_location() = if saw_eacces {
            libc::EACCES
        } else {
            libc::ENOENT
        };
        // Signals stay unblocked from here: nothing of mcsup's can run (handlers are reset).
        fail(a)
    }
}

/// Spawn an exec probe (own group so a timeout can kill its whole tree; output discarded), the
/// same way as a supervised process, with mcsup's environment and no stop signal of its own.
pub fn spawn_probe(argv: &[String], drain: Signal) -> io::Result<(Pid, Exec)> {
    let prog = argv
        .first()
        .ok_or_else(|| io::Error::other("empty probe argv"))?;
    let exec = ExecImage::new(prog, argv, &Overrides::new(), None)?;
    let null = dev_null()?;
    // Signal 0 is no signal: nothing beyond the reset list goes back to SIG_DFL.
    exec.spawn(null, null, drain as libc::c_int, 0)
}

/// `/dev/null`, opened read-write once for the whole run (close-on-exec: the child gets it only
/// as the stdio it is dup'ed to), rather than opened and closed for every spawn.
fn dev_null() -> io::Result<RawFd> {
    static NULL: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    if let Some(f) = NULL.get() {
        return Ok(f.as_raw_fd());
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    Ok(NULL.get_or_init(|| f).as_raw_fd())
}

/// Mark every fd >= 3 close-on-exec: fds from srun/PMIx may not be CLOEXEC, and a leaked pipe end
/// in a grandchild keeps a log reader from ever seeing EOF (process-compose #258). CLOEXEC rather
/// than close: until the exec succeeds the child may still need them (an exec that fails leaves
/// the next PATH candidate to try).
///
/// Async-signal-safe: runs in [`child_main`], between fork and exec.
fn close_inherited_fds() {
    // SAFETY: plain syscalls on integers.
    unsafe {
        let r = libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        if r == 0 {
            return;
        }
        // Older kernels (< 5.11): walk up to the fd limit.
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(1 << 16) as libc::c_int
        } else {
            1024
        };
        for fd in 3..max {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
}

/// The open-files limit mcsup was given, once [`raise_open_files`] raised its own.
static GIVEN_NOFILE: std::sync::OnceLock<(libc::rlim_t, libc::rlim_t)> = std::sync::OnceLock::new();

/// Raise mcsup's own soft limit of open files to the hard one: it holds a few descriptors for
/// every process it runs and every node of the job (round 4's M7: 1024 sleepers under `ulimit
/// -Sn 1024` failed half their spawns with EMFILE, then the teardown's own timer). The children
/// get the limit mcsup was given back, so nothing changes for them. The limits before and after,
/// when it changed.
pub fn raise_open_files() -> io::Result<Option<(u64, u64)>> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft >= hard {
        return Ok(None);
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(io::Error::from)?;
    let _ = GIVEN_NOFILE.set((soft, hard));
    Ok(Some((soft, hard)))
}

/// The scheduler slice mcsup's supervising thread asks for (see `prefer_short_slice`): the
/// shortest the kernel accepts for a normal task.
pub const SHORT_SLICE: std::time::Duration = std::time::Duration::from_micros(100);

/// Whether [`prefer_short_slice`] took effect: then every child puts its slice back to the
/// default before exec, so only mcsup's own thread runs with the short one.
static SHORT_SLICE_SET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Set the calling thread's scheduler slice (`sched_runtime`; 0 = the kernel's default) when it
/// runs under the normal policy, keeping its nice value: 1 when set, 0 when the thread is under
/// another policy (left alone), -1 on an error (errno says which).
///
/// # Safety
/// Async-signal-safe (two system calls on a local `sched_attr`): [`child_main`] uses it too.
unsafe fn set_normal_slice(runtime_ns: u64) -> libc::c_long {
    let size = std::mem::size_of::<libc::sched_attr>();
    let mut attr: libc::sched_attr = std::mem::zeroed();
    if libc::syscall(
        libc::SYS_sched_getattr,
        0,
        &mut attr,
        size as libc::c_uint,
        0,
    ) != 0
    {
        return -1;
    }
    if attr.sched_policy != libc::SCHED_OTHER as u32 {
        return 0;
    }
    attr.size = size as u32;
    attr.sched_flags = 0;
    attr.sched_runtime = runtime_ns;
    if libc::syscall(
        libc::SYS_sched_setattr,
        0,
        &attr as *const libc::sched_attr,
        0,
    ) != 0
    {
        return -1;
    }
    1
}

/// Ask the scheduler for a short slice ([`SHORT_SLICE`]) for the calling thread: the one that
/// spawns, reaps and probes. On a kernel with EEVDF custom slices (Linux 6.12+) a task with a
/// shorter slice preempts a busy one when it wakes (`PREEMPT_SHORT`), so a SIGCHLD, a probe's
/// answer or a child's exec no longer waits for a CPU-bound child (or worker) to finish its
/// default slice (0.7 to 3 ms) first. mcsup's thread runs in short bursts, so the shorter slice
/// costs it nothing; on older kernels the request is accepted and changes nothing.
///
/// Only under the normal policy (SCHED_OTHER) at mcsup's current nice value; a batch, idle or
/// real-time mcsup (an administrator's choice) is left alone. Children get the default slice
/// back before exec (see [`child_main`]).
pub fn prefer_short_slice() -> io::Result<bool> {
    // SAFETY: see set_normal_slice.
    match unsafe { set_normal_slice(SHORT_SLICE.as_nanos() as u64) } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(false),
        _ => {
            SHORT_SLICE_SET.store(true, std::sync::atomic::Ordering::Relaxed);
            Ok(true)
        }
    }
}

/// Become a child subreaper: orphaned descendants are reparented to mcsup (to be reaped and
/// killed at teardown) instead of to PID 1.
pub fn become_subreaper() -> io::Result<()> {
    Ok(nix::sys::prctl::set_child_subreaper(true)?)
}

/// `killpg(pgid, sig)`; `Ok(false)` when the group no longer exists (ESRCH = done).
pub fn signal_group(pgid: Pid, sig: Option<Signal>) -> io::Result<bool> {
    if pgid <= 1 {
        // Never signal "every process" (-1) or our own group (0) by accident.
        return Ok(false);
    }
    match nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), sig) {
        Ok(()) => Ok(true),
        Err(nix::errno::Errno::ESRCH) => Ok(false),
        // EPERM: a member changed credentials (setuid program); it still exists.
        Err(nix::errno::Errno::EPERM) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// What the kernel says of a process that has not stopped when it should have (read just before
/// it is killed): its state, where it sleeps, and what became of its stop signal, e.g.
/// `it was S (sleeping) in do_sys_poll; SIGINT: caught, pending`. A process in D state (waiting
/// for a disk or a network file system) cannot act on any signal until the kernel lets it go.
/// `None` when /proc does not show the process, or shows one that is not our child (a group
/// leader already reaped: its pid may belong to someone else by now).
pub fn describe_unstopped(pid: Pid, stop: Option<Signal>) -> Option<String> {
    let proc = procfs::process::Process::new(pid).ok()?;
    let status = proc.status().ok()?;
    if status.ppid != std::process::id() as i32 {
        return None;
    }
    let mut out = format!("it was {}", status.state);
    if let Ok(wchan) = proc.wchan() {
        if !wchan.is_empty() && wchan != "0" {
            out.push_str(&format!(" in {wchan}"));
        }
    }
    if let Some(sig) = stop {
        let bit = 1u64 << (sig as i32 - 1);
        let pending = (status.sigpnd | status.shdpnd) & bit != 0;
        let how = if status.sigign & bit != 0 {
            "ignored"
        } else if status.sigcgt & bit != 0 {
            "caught"
        } else {
            "default action"
        };
        out.push_str(&format!("; {}: {how}", sig.as_str()));
        if status.sigblk & bit != 0 {
            out.push_str(", blocked");
        }
        if pending {
            out.push_str(", pending");
        }
    }
    Some(out)
}

/// Kill one process that is our own unreaped child (safe from pid reuse: an unreaped child's pid
/// cannot be recycled).
pub fn kill_child(pid: Pid) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
}

/// Why `argv0` could not be started, for the failure record: a limit of mcsup's own (open
/// files, processes, memory: the fork or the pipes failed before the program ran) is said to be
/// mcsup's, with its fix, rather than blamed on the program.
pub fn failure_text(argv0: &str, e: &std::io::Error) -> String {
    let limit = match e.raw_os_error() {
        Some(libc::EMFILE) => Some("mcsup has as many files open as `ulimit -n` allows; fix: raise it (`ulimit -n`, or Slurm's --propagate=NOFILE)"),
        Some(libc::ENFILE) => Some("the node's open-file table is full (fs.file-max); fix: raise it or end what holds the files"),
        Some(libc::EAGAIN) => Some("mcsup's user may run no more processes (`ulimit -u`, RLIMIT_NPROC) or the node's pid space is exhausted; fix: raise the limit"),
        Some(libc::ENOMEM) => Some("the node had no memory for another process; fix: free memory or lower what mcsup starts"),
        _ => None,
    };
    match limit {
        Some(why) => format!(
            "{argv0} was not started: {e}: {why} (a limit of mcsup's, not the program's failure)"
        ),
        None => format!("{argv0}: {e}"),
    }
}

/// Our direct children (including reparented orphans), from /proc; why not when /proc cannot
/// tell (not mounted, or hidden from this user): a sweep that cannot look must say so, not
/// report that nothing was left.
pub fn list_children() -> Result<Vec<Pid>, String> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    // /proc/self/task/*/children lists children per thread (CONFIG_PROC_CHILDREN); reparented
    // orphans attach to the subreaper's thread group leader, but walk all tasks to be safe.
    let tasks = match std::fs::read_dir("/proc/self/task") {
        Ok(tasks) => tasks,
        Err(e) => return Err(format!("cannot read /proc/self/task: {e}")),
    };
    let mut found_any_file = false;
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            found_any_file = true;
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    if found_any_file {
        out.sort_unstable();
        out.dedup();
        return Ok(out);
    }
    let all = procfs::process::all_processes()
        .map_err(|e| format!("no /proc/self/task/*/children and cannot list /proc: {e}"))?;
    for p in all.flatten() {
        if let Ok(st) = p.stat() {
            if st.ppid == me {
                out.push(st.pid);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod vs_command;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_of_mcsups_own_is_not_blamed_on_the_program() {
        for (errno, says) in [
            (libc::EMFILE, "ulimit -n"),
            (libc::EAGAIN, "ulimit -u"),
            (libc::ENFILE, "file-max"),
            (libc::ENOMEM, "no memory"),
        ] {
            let t = failure_text("python3", &std::io::Error::from_raw_os_error(errno));
            assert!(t.contains(says) && t.contains("not the program's"), "{t}");
        }
        let t = failure_text("nope", &std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(t, "nope: No such file or directory (os error 2)");
    }

    #[test]
    fn a_childs_environment_is_mcsups_with_the_plans_set_over_it() {
        let snapshot: &'static [(OsString, CString)] = Box::leak(
            [("HOME", "/root"), ("PATH", "/bin"), ("SLURM_JOB_ID", "7")]
                .iter()
                .map(|(k, v)| (OsString::from(k), CString::new(format!("{k}={v}")).unwrap()))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let mut own = Overrides::new();
        for (k, v) in [
            ("A", "first"),
            ("MC_X", "between"),
            ("PATH", "/opt/bin"),
            ("Z", "last"),
        ] {
            own.insert(k.into(), v.into());
        }
        let env = merge_env(snapshot, &own, |_| false).unwrap();
        let lines: Vec<&str> = env.iter().map(|e| e.to_str().unwrap()).collect();
        assert_eq!(
            lines,
            [
                "A=first",
                "HOME=/root",
                "MC_X=between",
                "PATH=/opt/bin",
                "SLURM_JOB_ID=7",
                "Z=last"
            ]
        );
        // mcsup's own variables are borrowed from the snapshot, the plan's are the child's own.
        assert!(matches!(env[1], EnvEntry::Borrowed(_)));
        assert!(matches!(env[3], EnvEntry::Owned(_)));
        assert_eq!(
            merge_env(snapshot, &Overrides::new(), |_| false)
                .unwrap()
                .len(),
            3
        );
        own.insert("BAD".into(), "a\0b".into());
        assert!(merge_env(snapshot, &own, |_| false).is_err());
        // The process's own snapshot: sorted, one entry per name, `NAME=value`.
        let live = inherited();
        assert!(live.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(live
            .iter()
            .all(|(k, line)| line.to_bytes().starts_with(&env_line(k, OsStr::new("")))));
    }

    /// A Slurm step's srun gets none of mcsup's own step's layout, PMIx or Open MPI variables,
    /// but keeps the job's identity and the cluster's configuration.
    #[test]
    fn a_slurm_steps_srun_leaves_mcsups_step_behind() {
        let snapshot: &'static [(OsString, CString)] = Box::leak(
            [
                ("HOME", "/root"),
                ("OMPI_MCA_x", "1"),
                ("PMIX_RANK", "0"),
                ("PMI_FD", "3"),
                ("SLURM_CONF", "/etc/slurm.conf"),
                ("SLURM_JOB_ID", "7"),
                ("SLURM_NTASKS_PER_NODE", "1"),
                ("SLURM_STEP_ID", "0"),
            ]
            .iter()
            .map(|(k, v)| (OsString::from(k), CString::new(format!("{k}={v}")).unwrap()))
            .collect::<Vec<_>>()
            .into_boxed_slice(),
        );
        let mut own = Overrides::new();
        own.insert("OMPI_MCA_btl".into(), "self,tcp".into());
        let env = merge_env(snapshot, &own, SlurmStep::drops).unwrap();
        let lines: Vec<&str> = env.iter().map(|e| e.to_str().unwrap()).collect();
        assert_eq!(
            lines,
            [
                "HOME=/root",
                "OMPI_MCA_btl=self,tcp",
                "SLURM_CONF=/etc/slurm.conf",
                "SLURM_JOB_ID=7"
            ]
        );
    }

    fn bit(sig: libc::c_int) -> u64 {
        1u64 << (sig - 1)
    }

    #[test]
    fn a_child_resets_handlers_keeps_inherited_ignores_and_ignores_the_drain_signal() {
        let (usr1, term, hup, ttou, pipe, chld, rt) = (
            libc::SIGUSR1,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGTTOU,
            libc::SIGPIPE,
            libc::SIGCHLD,
            libc::SIGRTMIN() + 3,
        );
        // mcsup as it supervises: handlers on TERM, USR1, CHLD and a real-time signal; HUP and
        // TTOU ignored by whoever started it (nohup, a shell's trap); PIPE ignored by Rust.
        let d = Dispositions {
            caught: bit(term) | bit(usr1) | bit(chld) | bit(rt),
            ignored: bit(hup) | bit(ttou) | bit(pipe),
        };
        let changes = disposition_changes(d, usr1, term);
        assert_eq!(
            changes,
            vec![
                (hup, false),  // a stop signal of a child: back to default
                (usr1, true),  // the drain signal: ignored
                (pipe, false), // never inherited ignored
                (term, false), // mcsup's handler, and the child's stop signal
                (chld, false), // mcsup's handler
                (rt, false),   // mcsup's handler
            ]
        );
        assert!(
            !changes.iter().any(|(s, _)| *s == ttou),
            "an inherited ignore is kept"
        );
        // Already as wanted: nothing to do.
        let quiet = Dispositions {
            caught: 0,
            ignored: bit(usr1) | bit(ttou),
        };
        assert_eq!(disposition_changes(quiet, usr1, term), vec![]);
        // The drain signal is the stop signal: the stop signal wins (default).
        assert_eq!(
            disposition_changes(d, term, term)[..2],
            [(hup, false), (usr1, false)]
        );
        // A stop signal inherited ignored is reset; SIGKILL and SIGSTOP are never touched.
        let all = Dispositions {
            caught: 0,
            ignored: u64::MAX,
        };
        let changes = disposition_changes(all, usr1, libc::SIGQUIT);
        assert!(changes.contains(&(libc::SIGQUIT, false)));
        assert!(!changes.contains(&(libc::SIGALRM, false)), "{changes:?}");
        assert!(!changes
            .iter()
            .any(|(s, _)| *s == libc::SIGKILL || *s == libc::SIGSTOP));
    }

    #[test]
    fn the_snapshot_sees_this_process_handlers_and_ignores() {
        let d = Dispositions::read();
        // The Rust runtime ignores SIGPIPE; nothing here catches SIGWINCH.
        assert_ne!(d.ignored & bit(libc::SIGPIPE), 0, "{d:?}");
        assert_eq!((d.caught | d.ignored) & bit(libc::SIGWINCH), 0, "{d:?}");
    }
}
