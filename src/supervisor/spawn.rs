//! Fork/exec of children: the only place that creates processes.
//!
//! Every child gets its own process group (so signals reach its whole tree, and Ctrl-C at the
//! terminal reaches only mcsup), `/dev/null` stdin, stdout+stderr on one pipe (so the log keeps
//! their relative order), every inherited fd >= 3 closed at exec, the stop signals reset to
//! SIG_DFL, the drain signal set to SIG_IGN, and PR_SET_PDEATHSIG=SIGKILL.
//!
//! It must not wait for children: the runtime's reaper owns every `wait()` (one owner, or the
//! subreaper loop steals statuses). Nothing here keeps a `Child` handle alive.

use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::fcntl::OFlag;
use nix::sys::signal::Signal;

use crate::plan::ProcessSpec;

use super::machine::Pid;

/// A freshly spawned child.
pub struct Spawned {
    /// Its pid, which is also its process-group id.
    pub pid: Pid,
    /// Read end of the pipe carrying its stdout and stderr.
    pub output: OwnedFd,
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

/// Spawn a supervised process.
pub fn spawn_process(spec: &ProcessSpec, drain: Signal) -> io::Result<Spawned> {
    let argv = effective_argv(spec);
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::other("empty argv"))?;
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let write2 = write.try_clone()?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::from(write2));
    if spec.env_value("PYTHONUNBUFFERED").is_none() {
        // Python block-buffers a pipe; the ready line would arrive late or never.
        cmd.env("PYTHONUNBUFFERED", "1");
    }
    for v in &spec.env {
        cmd.env(&v.name, &v.value);
    }
    if let Some(dir) = &spec.cwd {
        cmd.current_dir(dir);
    }
    let stop = spec.stop.signal.0;
    prepare(&mut cmd, drain, Some(stop));
    let child = cmd.spawn()?;
    // `cmd` still holds the pipe's write ends: drop it now, or the reader never sees EOF.
    drop(cmd);
    Ok(Spawned {
        pid: child.id() as Pid,
        output: read,
    })
}

/// Spawn an exec probe (own group so a timeout can kill its whole tree; output discarded).
pub fn spawn_probe(argv: &[String], drain: Signal) -> io::Result<Pid> {
    let (prog, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::other("empty probe argv"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    prepare(&mut cmd, drain, None);
    let child = cmd.spawn()?;
    Ok(child.id() as Pid)
}

fn prepare(cmd: &mut Command, drain: Signal, stop: Option<Signal>) {
    cmd.process_group(0);
    let parent = nix::unistd::getpid().as_raw();
    let drain_no = drain as libc::c_int;
    let stop_no = stop.map(|s| s as libc::c_int);
    // SAFETY: the closure runs between fork and exec in the child and only makes
    // async-signal-safe calls (signal, prctl, getppid, syscall, fcntl, getrlimit), allocating
    // nothing.
    unsafe {
        cmd.pre_exec(move || {
            for s in RESET_TO_DEFAULT {
                libc::signal(s as libc::c_int, libc::SIG_DFL);
            }
            if let Some(s) = stop_no {
                libc::signal(s, libc::SIG_DFL);
            }
            // The drain signal reaches only mcsup even when Slurm signals the whole step. (If it
            // is also this process's stop signal, the stop signal wins.)
            if Some(drain_no) != stop_no {
                libc::signal(drain_no, libc::SIG_IGN);
            }
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // mcsup may have died between fork and prctl: then PDEATHSIG never fires.
            if libc::getppid() != parent {
                return Err(io::Error::other(
                    "mcsup exited while this child was starting",
                ));
            }
            close_inherited_fds();
            Ok(())
        });
    }
}

/// Mark every fd >= 3 close-on-exec: fds from srun/PMIx may not be CLOEXEC, and a leaked pipe end
/// in a grandchild keeps a log reader from ever seeing EOF (process-compose #258). CLOEXEC rather
/// than close, so std's own exec-error pipe still reports a failed exec.
///
/// Async-signal-safe: runs between fork and exec.
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

/// Kill one process that is our own unreaped child (safe from pid reuse: an unreaped child's pid
/// cannot be recycled).
pub fn kill_child(pid: Pid) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
}

/// Our direct children (including reparented orphans), from /proc.
pub fn list_children() -> Vec<Pid> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    // /proc/self/task/*/children lists children per thread (CONFIG_PROC_CHILDREN); reparented
    // orphans attach to the subreaper's thread group leader, but walk all tasks to be safe.
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
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
            return out;
        }
    }
    if let Ok(all) = procfs::process::all_processes() {
        for p in all.flatten() {
            if let Ok(st) = p.stat() {
                if st.ppid == me {
                    out.push(st.pid);
                }
            }
        }
    }
    out
}
