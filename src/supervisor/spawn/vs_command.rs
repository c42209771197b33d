//! The spawn path against `std::process::Command`, promise by promise: the same child started
//! both ways (Command with the module header's promises spelled as `process_group(0)` and one
//! `pre_exec`) must look the same from `/proc` (process group, signal dispositions and mask, open
//! fds and where stdio goes, environment, cwd, the program found on PATH), fail with the same
//! errno, and die the same way when the thread that created it exits (PR_SET_PDEATHSIG).

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};

use super::*;
use crate::plan::{EnvVar, ProcessKind, SignalName};

/// The drain signal of these tests (mcsup's default).
const DRAIN: Signal = Signal::SIGUSR1;

fn spec(argv: &[&str], env: &[(&str, &str)], cwd: Option<&Path>) -> ProcessSpec {
    let mut p = crate::supervisor::machine::tests::proc("diff", ProcessKind::Worker);
    p.argv = argv.iter().map(|s| s.to_string()).collect();
    p.env = env
        .iter()
        .map(|(k, v)| EnvVar {
            name: k.to_string(),
            value: v.to_string(),
            source: "test".to_string(),
            overrode: vec![],
        })
        .collect();
    p.cwd = cwd.map(Path::to_path_buf);
    p.stop.signal = SignalName::SIGTERM;
    p
}

/// [`spawn_process`] as a caller that waits for the exec sees it: the child once it has exec'd,
/// else the errno of the step that failed (that child reaped here, as Command reaps its own).
fn ours_spawn(s: &ProcessSpec) -> std::io::Result<(Pid, OwnedFd)> {
    let c = spawn_process(s, DRAIN)?;
    match c.exec.wait() {
        Ok(()) => Ok((c.pid, c.output)),
        Err(e) => {
            waitpid(nix::unistd::Pid::from_raw(c.pid), None).unwrap();
            Err(e)
        }
    }
}

/// What the module header promises, with std's Command: own process group, stdin /dev/null,
/// stdout and stderr on one pipe, the stop signals and SIGPIPE at their default, the drain
/// signal ignored, PR_SET_PDEATHSIG=SIGKILL, every other fd closed at exec.
fn command_spawn(s: &ProcessSpec) -> std::io::Result<(Pid, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(std::io::Error::from)?;
    let mut c = Command::new(&s.argv[0]);
    c.args(&s.argv[1..])
        .stdin(Stdio::null())
        .stdout(write.try_clone()?)
        .stderr(write)
        .process_group(0);
    if s.env_value("PYTHONUNBUFFERED").is_none() {
        c.env("PYTHONUNBUFFERED", "1");
    }
    for v in &s.env {
        c.env(&v.name, &v.value);
    }
    if let Some(d) = &s.cwd {
        c.current_dir(d);
    }
    let (drain, stop) = (DRAIN as libc::c_int, s.stop.signal.0 as libc::c_int);
    // SAFETY: only async-signal-safe calls (sigaction, prctl, close_range) between fork and exec.
    unsafe {
        c.pre_exec(move || {
            let mut act: libc::sigaction = std::mem::zeroed();
            for sig in RESET_TO_DEFAULT
                .iter()
                .map(|s| *s as libc::c_int)
                .chain([libc::SIGPIPE, stop])
            {
                act.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
            if drain != stop {
                act.sa_sigaction = libc::SIG_IGN;
                libc::sigaction(drain, &act, std::ptr::null_mut());
            }
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            libc::syscall(
                libc::SYS_close_range,
                3u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            );
            Ok(())
        });
    }
    let child = c.spawn()?;
    Ok((child.id() as Pid, read))
}

/// A running child as `/proc` shows it, with what differs between two children by nature (pids,
/// pipe inodes) replaced by what they mean.
#[derive(Debug, PartialEq)]
struct Seen {
    own_group: bool,
    exe: PathBuf,
    cwd: PathBuf,
    /// `SigIgn`, `SigBlk`, `SigCgt` of /proc/<pid>/status.
    signals: BTreeMap<String, String>,
    /// Open fds and what each is: `/dev/null`, `pipe`, or the path.
    fds: BTreeMap<i32, String>,
    stdout_is_stderr: bool,
    env: Vec<String>,
}

/// Wait until `sleep` at `pid` is in its sleep: right after exec the dynamic loader still holds
/// the libraries it maps open (a transient fd 3), in either child.
fn settled(pid: Pid) {
    let asleep = [libc::SYS_nanosleep, libc::SYS_clock_nanosleep].map(|n| n.to_string());
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
        if asleep
            .iter()
            .any(|n| now.split_whitespace().next() == Some(n.as_str()))
        {
            return;
        }
        assert!(std::time::Instant::now() < end, "{pid} never slept: {now}");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn seen(pid: Pid) -> Seen {
    settled(pid);
    let p = procfs::process::Process::new(pid).unwrap();
    let stat = p.stat().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let signals = status
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| matches!(*k, "SigIgn" | "SigBlk" | "SigCgt"))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect();
    let link = |fd: i32| std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
    let mut fds = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let fd: i32 = e.unwrap().file_name().to_str().unwrap().parse().unwrap();
        let target = link(fd).display().to_string();
        let what = if target.starts_with("pipe:") {
            "pipe".to_string()
        } else {
            target
        };
        fds.insert(fd, what);
    }
    let mut env: Vec<String> = std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap()
        .split(|b| *b == 0)
        .filter(|l| !l.is_empty())
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    env.sort();
    Seen {
        own_group: stat.pgrp == pid,
        exe: p.exe().unwrap(),
        cwd: p.cwd().unwrap(),
        signals,
        fds,
        stdout_is_stderr: link(1) == link(2),
        env,
    }
}

fn stop(pid: Pid) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
    let _ = waitpid(nix::unistd::Pid::from_raw(pid), None);
}

#[test]
fn a_child_looks_the_same_as_one_started_with_command() {
    let dir = tempfile::tempdir().unwrap();
    // A leaked fd without CLOEXEC, as srun or PMIx may hand down: neither child may keep it.
    let leak = std::fs::File::create(dir.path().join("leak")).unwrap();
    nix::fcntl::fcntl(
        &leak,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    Dispositions::refresh();
    // `sleep` by name: both search PATH.
    let s = spec(
        &["sleep", "30"],
        &[("MC_DIFF", "1"), ("PATH", "/usr/bin:/bin")],
        Some(dir.path()),
    );
    let (ours, _ours_out) = ours_spawn(&s).unwrap();
    let (theirs, _out) = command_spawn(&s).unwrap();
    let (a, b) = (seen(ours), seen(theirs));
    stop(ours);
    stop(theirs);
    assert_eq!(a, b, "mcsup's spawn (left) and Command (right) differ");
    // And what both show is what the header promises.
    assert!(a.own_group);
    assert_eq!(a.fds.keys().copied().collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(a.fds[&0], "/dev/null");
    assert!(a.stdout_is_stderr);
    assert_eq!(a.cwd, dir.path().canonicalize().unwrap());
    assert!(a.env.contains(&"MC_DIFF=1".to_string()));
    assert!(a.env.contains(&"PYTHONUNBUFFERED=1".to_string()));
    let ign = u64::from_str_radix(&a.signals["SigIgn"], 16).unwrap();
    assert_ne!(
        ign & (1 << (DRAIN as u32 - 1)),
        0,
        "the drain signal is ignored"
    );
    assert_eq!(
        ign & (1 << (libc::SIGPIPE as u32 - 1)),
        0,
        "SIGPIPE at default"
    );
    assert_eq!(a.signals["SigBlk"], "0000000000000000", "nothing blocked");
    drop(leak);
}

#[test]
fn a_child_that_cannot_start_fails_with_the_same_errno() {
    let dir = tempfile::tempdir().unwrap();
    let not_exec = dir.path().join("not-executable");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    let missing = dir.path().join("missing");
    let cases = [
        (missing.display().to_string(), libc::ENOENT),
        ("mcsup-no-such-program-anywhere".to_string(), libc::ENOENT),
        (not_exec.display().to_string(), libc::EACCES),
    ];
    for (prog, errno) in cases {
        let s = spec(&[&prog], &[], None);
        let ours = ours_spawn(&s).err().map(|e| e.raw_os_error());
        let theirs = command_spawn(&s).err().map(|e| e.raw_os_error());
        assert_eq!(ours, theirs, "{prog}");
        assert_eq!(ours, Some(Some(errno)), "{prog}");
    }
    // A cwd that does not exist: the same error too.
    let s = spec(&["sleep", "1"], &[], Some(&missing));
    let ours = ours_spawn(&s).err().map(|e| e.raw_os_error());
    let theirs = command_spawn(&s).err().map(|e| e.raw_os_error());
    assert_eq!(ours, theirs);
    assert_eq!(ours, Some(Some(libc::ENOENT)));
}

#[test]
fn a_child_dies_with_the_thread_that_created_it() {
    let s = spec(&["sleep", "30"], &[], None);
    for how in ["ours", "command"] {
        let s = s.clone();
        // PR_SET_PDEATHSIG fires when the creating thread exits: a short-lived thread shows it.
        let pid = std::thread::spawn(move || match how {
            "ours" => ours_spawn(&s).map(|c| c.0),
            _ => command_spawn(&s).map(|c| c.0),
        })
        .join()
        .unwrap()
        .unwrap();
        let status = waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        assert!(
            matches!(status, WaitStatus::Signaled(_, Signal::SIGKILL, _)),
            "{how}: {status:?}"
        );
    }
}
