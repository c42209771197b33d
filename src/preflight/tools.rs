//! Live checks of this machine: managed ports are free, executables and Python modules exist,
//! and the installed `mooncake_master` accepts the recipe's flags (version skew such as
//! `--nof_eviction_high_watermark_ratio` on masters before v0.3.11).
//!
//! The helpers it runs (`--help`, `python -c`) are bounded in time and output and cannot
//! outlive the check or mcsup: see `run_bounded`. It reports; it never decides.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{killpg, SigSet, SigmaskHow, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::report::{Check, Report};
use crate::plan::{Plan, ProcessKind, ProcessSpec};

/// Ports this node's processes will listen on, each once with the first process that names it:
/// the workers' planned ports, and every port a process's readiness or liveness probe checks on
/// this node (nothing of the job runs yet, so each must be free). Probes of other nodes (gates,
/// a remote master) are not this node's.
pub fn listening_ports(plan: &Plan) -> Vec<(String, u16)> {
    let here = |host: &str| crate::plan::host_is_here(host, &plan.node.ip, &plan.node.name);
    let mut out: Vec<(String, u16)> = Vec::new();
    for p in &plan.processes {
        for port in p.ports_here(&here) {
            if !out.iter().any(|(_, q)| *q == port) {
                out.push((p.name.clone(), port));
            }
        }
    }
    out
}

/// Bind test on each port (the master binds 0.0.0.0); a port in use names who holds it.
pub fn check_ports(plan: &Plan, report: &mut Report) {
    let mut ports = listening_ports(plan);
    // The control port is bound where the coordinator binds it (`domain::bind_control_port`): a
    // listener on another address of the same port is no clash (the adversarial re-run's false
    // positive).
    let mut control_at: Option<(String, u16)> = None;
    // The coordinator's own control port, when the recipe fixes one (round 4's L5: taken by
    // another user, the preflight passed and mcsup then failed to start with exit code 3).
    if let Some(c) = plan
        .control
        .as_ref()
        .filter(|c| c.coordinator == plan.node.name && c.port != 0)
    {
        if !ports.iter().any(|(_, p)| *p == c.port) {
            ports.push((
                "mcsup's control connection (mcsup.control_port)".into(),
                c.port,
            ));
            control_at = Some((c.address.clone(), c.port));
        }
    }
    for (name, port) in ports {
        let label = format!("{name} port {port}");
        let bound = match &control_at {
            Some((address, p)) if *p == port => crate::domain::bind_control_port(address, port),
            _ => std::net::TcpListener::bind(("0.0.0.0", port)),
        };
        match bound {
            Ok(_) => report.push(Check::ok("ports", &label, "free")),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                let holder = port_holder(port)
                    .map(|h| format!(" by {h}"))
                    .unwrap_or_else(|| " (its holder is not visible to this user)".into());
                report.push(Check::fail(
                    "ports",
                    &label,
                    format!("port {port} is already in use on this node{holder}"),
                    format!("stop it (a leftover of an earlier job, or another job on this node), or move {name} to another port; `ss -ltnp 'sport = :{port}'` shows the listener"),
                ))
            }
            Err(e) => report.push(Check::warn(
                "ports",
                &label,
                format!("cannot bind port {port}: {e}"),
                "check for a firewall or a privileged port",
            )),
        }
    }
}

/// Who listens on TCP `port` here: `pid 123 (python3 -m http.server), user alice, Slurm job 42`.
/// From /proc/net/tcp{,6} (the socket's inode and owner) and the process whose descriptors hold
/// that socket; `None` when no listener is found. Another user's process may be hidden
/// (`hidepid`): then only the socket's owner is named.
pub fn port_holder(port: u16) -> Option<String> {
    let mut sockets = procfs::net::tcp().unwrap_or_default();
    sockets.extend(procfs::net::tcp6().unwrap_or_default());
    let socket = sockets
        .into_iter()
        .find(|s| s.state == procfs::net::TcpState::Listen && s.local_address.port() == port)?;
    let owner = owner_of(socket.uid);
    let needle = procfs::process::FDTarget::Socket(socket.inode);
    let process = procfs::process::all_processes().ok()?.flatten().find(|p| {
        p.fd()
            .map(|fds| fds.flatten().any(|fd| fd.target == needle))
            .unwrap_or(false)
    });
    let Some(p) = process else {
        return Some(format!("a socket of {owner} (inode {})", socket.inode));
    };
    Some(process_summary(&p))
}

/// The account name of `uid`, when it has one here.
pub fn account_name(uid: u32) -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// `user alice`, or `uid 60001` for a uid without an account here.
fn owner_of(uid: u32) -> String {
    account_name(uid).map_or(format!("uid {uid}"), |n| format!("user {n}"))
}

/// `pid 123 (python3 -m x), user alice, Slurm job 42` (the job from its cgroup, when it says).
pub fn process_summary(p: &procfs::process::Process) -> String {
    let owner = p.uid().map_or("an unknown user".to_string(), owner_of);
    let command = p
        .cmdline()
        .ok()
        .filter(|c| !c.is_empty())
        .map(|c| c.join(" "))
        .or_else(|| p.stat().ok().map(|s| s.comm))
        .unwrap_or_default();
    let command = crate::domain::signature::for_terminal(&command);
    let command: String = command.chars().take(120).collect();
    let job = std::fs::read_to_string(format!("/proc/{}/cgroup", p.pid))
        .ok()
        .and_then(|c| {
            let at = c.find("/job_")? + 5;
            let digits: String = c[at..].chars().take_while(char::is_ascii_digit).collect();
            (!digits.is_empty()).then(|| format!(", Slurm job {digits}"))
        })
        .unwrap_or_default();
    format!("pid {} ({command}), {owner}{job}", p.pid)
}

/// A listening port inside the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, minus
/// `ip_local_reserved_ports`) can be taken, before the process binds it, as the source port of
/// any outgoing connection on the node (a worker's, a store's, an exporter's), and the service
/// then fails to start with "address in use". Warned, with the two fixes. Nothing is said when the
/// range cannot be read.
pub fn check_ephemeral_ports(plan: &Plan, root: &super::system::Sysroot, report: &mut Report) {
    let ports = listening_ports(plan);
    if ports.is_empty() {
        return; // Nothing to place: no sysctl to read.
    }
    let Some((lo, hi)) = root
        .read("/proc/sys/net/ipv4/ip_local_port_range")
        .and_then(|t| parse_port_range(&t))
    else {
        return;
    };
    let reserved = root
        .read("/proc/sys/net/ipv4/ip_local_reserved_ports")
        .unwrap_or_default();
    for (name, port) in ports {
        if port < lo || port > hi || port_listed(&reserved, port) {
            continue;
        }
        report.push(Check::warn(
            "ports",
            &format!("{name} port {port} range"),
            format!(
                "port {port} is in the kernel's ephemeral port range {lo}-{hi}: an outgoing connection on this node can take it before {name} binds it"
            ),
            format!(
                "use a port below {lo}, or reserve it (sysctl -w net.ipv4.ip_local_reserved_ports={port})"
            ),
        ));
    }
}

/// `ip_local_port_range`: two numbers separated by blanks.
fn parse_port_range(text: &str) -> Option<(u16, u16)> {
    let mut it = text.split_whitespace().map(str::parse::<u16>);
    match (it.next(), it.next()) {
        (Some(Ok(lo)), Some(Ok(hi))) if lo <= hi => Some((lo, hi)),
        _ => None,
    }
}

/// Whether `port` is in an `ip_local_reserved_ports` list (`8700,9000-9010`).
fn port_listed(list: &str, port: u16) -> bool {
    list.trim().split(',').any(|item| {
        let item = item.trim();
        match item.split_once('-') {
            Some((a, b)) => match (a.trim().parse::<u16>(), b.trim().parse::<u16>()) {
                (Ok(a), Ok(b)) => (a..=b).contains(&port),
                _ => false,
            },
            None => item.parse::<u16>() == Ok(port),
        }
    })
}

#[cfg(test)]
mod ephemeral_tests {
    use super::*;

    #[test]
    fn ranges_and_reserved_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_port_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_port_range("1024 65000"), Some((1024, 65000)));
        assert_eq!(parse_port_range("60999 32768"), None);
        assert_eq!(parse_port_range("garbage"), None);
        assert!(port_listed("8700,9000-9010\n", 8700));
        assert!(port_listed("8700,9000-9010", 9005));
        assert!(!port_listed("8700,9000-9010", 8800));
        assert!(!port_listed("\n", 8800));
    }

    /// Round 4's N26: without PATH the preflight looks where the spawn looks (execvp's
    /// /bin:/usr/bin), not nowhere.
    #[test]
    fn without_path_a_program_is_looked_for_where_the_spawn_looks() {
        assert_eq!(
            find_program("sh", None, None),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(find_program("sh", Some("/nonexistent"), None), None);
        assert_eq!(find_program("no-such-program-mcsup", None, None), None);
    }
}

/// Find a program the way exec would (`PATH` search for bare names).
pub fn find_program(name: &str, path_var: Option<&str>, cwd: Option<&Path>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if name.contains('/') {
        let p = match cwd {
            Some(c) if !Path::new(name).is_absolute() => c.join(name),
            _ => PathBuf::from(name),
        };
        return is_exec(&p).then_some(p);
    }
    // Without PATH, where the spawn looks too (execvp's default; round 4's N26: the preflight
    // said "not found" of a program the spawn then ran).
    path_var
        .unwrap_or("/bin:/usr/bin")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| is_exec(p))
}

fn python_module(spec: &ProcessSpec) -> Option<&str> {
    let prog = Path::new(spec.argv.first()?).file_name()?.to_str()?;
    if !prog.starts_with("python") {
        return None;
    }
    match spec.argv.get(1).map(String::as_str) {
        Some("-m") => spec.argv.get(2).map(String::as_str),
        _ => None,
    }
}

/// What a helper printed (stdout, then stderr) and how it ended.
#[derive(Debug)]
pub(crate) struct HelperOutput {
    pub(crate) success: bool,
    pub(crate) text: String,
    /// Output beyond [`MAX_CAPTURE`] was read and dropped.
    pub(crate) truncated: bool,
}

/// Output kept from a helper, per stream. A large binary's gflags `--help` is ~100 KiB; the rest
/// is still read (and dropped) so the helper never blocks on a full pipe.
const MAX_CAPTURE: usize = 4 << 20;
/// How often exit (and a pending stop signal) is checked while output is awaited. A pidfd would
/// make exit an event, but needs Linux 5.3, and RHEL 8 nodes run 4.18.
const TICK: Duration = Duration::from_millis(20);
/// After the helper exits, how long its output may still take to arrive: a grandchild it left
/// behind can hold the pipes open forever (it is killed with the group).
const EXIT_GRACE: Duration = Duration::from_millis(200);
/// A helper in its own process group. Dropping it SIGKILLs the group, then reaps the leader: on
/// every way out of [`run_bounded`] (answer, timeout, error, stop signal), nothing it started
/// outlives the call.
struct HelperGroup(std::process::Child);

impl Drop for HelperGroup {
    fn drop(&mut self) {
        // The leader is reaped only here, after the kill (its exit is observed with WNOWAIT), so
        // its pid, which is the group's id, cannot have been reused by then.
        let _ = killpg(Pid::from_raw(self.0.id() as i32), Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// The stop signals ([`crate::domain::STOP_SIGNALS`]) blocked on this thread until dropped; the previous mask comes back then, and
/// a signal that arrived meanwhile is delivered (after the helper's group is gone).
struct HeldSignals(Option<SigSet>);

impl HeldSignals {
    fn hold() -> Self {
        HeldSignals(
            crate::domain::stop_set()
                .thread_swap_mask(SigmaskHow::SIG_BLOCK)
                .ok(),
        )
    }

    /// A stop signal is waiting to be delivered.
    fn pending() -> bool {
        crate::domain::stop_pending().is_some()
    }
}

impl Drop for HeldSignals {
    fn drop(&mut self) {
        if let Some(old) = self.0 {
            let _ = old.thread_set_mask();
        }
    }
}

/// Output of one stream, bounded.
#[derive(Default)]
struct Capture {
    kept: Vec<u8>,
    dropped: bool,
    open: bool,
}

impl Capture {
    /// Read what is there (the fd polled readable); false at end of file or on error.
    fn read_from(&mut self, mut r: impl std::io::Read) -> bool {
        let mut buf = [0u8; 64 << 10];
        match r.read(&mut buf) {
            Ok(0) => false,
            Ok(n) => {
                let room = MAX_CAPTURE.saturating_sub(self.kept.len()).min(n);
                self.kept.extend_from_slice(&buf[..room]);
                self.dropped |= room < n;
                true
            }
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
            ),
        }
    }
}

/// Run a short helper (`mooncake_master --help`, a `python -c` import check) with a timeout;
/// `None` when it could not start, did not finish in time, or mcsup was told to stop meanwhile.
///
/// The helper runs in its own process group with PR_SET_PDEATHSIG=SIGKILL, its output is drained
/// while it runs (a helper printing more than a pipe holds used to stall until the timeout), and
/// the whole group is killed on the way out (the timeout used to kill only the direct child).
/// Out of reach: a descendant that leaves the group (`setsid`), and, if mcsup itself is
/// SIGKILLed, the helper's own children (PDEATHSIG ends the helper only).
pub(crate) fn run_bounded(
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Option<HelperOutput> {
    use std::os::fd::AsFd as _;
    use std::os::unix::process::CommandExt as _;

    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let parent = nix::unistd::getpid();
    // SAFETY: prctl and getppid are async-signal-safe system calls; nothing else runs between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Dies with mcsup (even of SIGKILL). The parent may have died before the prctl.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::other("mcsup exited"));
            }
            Ok(())
        });
    }
    // Held before the spawn: a SIGTERM from now on finds the group to kill.
    let _held = HeldSignals::hold();
    let mut group = HelperGroup(cmd.spawn().ok()?);
    let pid = Pid::from_raw(group.0.id() as i32);
    let mut stdout = group.0.stdout.take()?;
    let mut stderr = group.0.stderr.take()?;
    let (mut out, mut err) = (Capture::default(), Capture::default());
    out.open = true;
    err.open = true;
    let deadline = Instant::now() + timeout;
    let mut exited: Option<(bool, Instant)> = None;
    loop {
        if HeldSignals::pending() {
            return None;
        }
        if exited.is_none() {
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
            exited = match waitid(Id::Pid(pid), flags) {
                Ok(WaitStatus::StillAlive) => None,
                Ok(WaitStatus::Exited(_, code)) => Some((code == 0, Instant::now())),
                Ok(_) => Some((false, Instant::now())),
                Err(_) => return None,
            };
        }
        let now = Instant::now();
        match exited {
            Some((success, _)) if !out.open && !err.open => {
                let mut text = String::from_utf8_lossy(&out.kept).into_owned();
                text.push_str(&String::from_utf8_lossy(&err.kept));
                return Some(HelperOutput {
                    success,
                    text,
                    truncated: out.dropped || err.dropped,
                });
            }
            Some((_, at)) if now >= at + EXIT_GRACE => {
                // Exited, but something it started still holds a pipe: take what came.
                out.open = false;
                err.open = false;
                continue;
            }
            _ if now >= deadline => return None,
            _ => {}
        }
        let wait = TICK.min(deadline - now);
        let mut fds = Vec::with_capacity(2);
        if out.open {
            fds.push(PollFd::new(stdout.as_fd(), PollFlags::POLLIN));
        }
        if err.open {
            fds.push(PollFd::new(stderr.as_fd(), PollFlags::POLLIN));
        }
        if fds.is_empty() {
            std::thread::sleep(wait);
            continue;
        }
        match poll(&mut fds, PollTimeout::from(wait.as_millis() as u16)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        }
        let ready: Vec<bool> = fds.iter().map(|f| f.any().unwrap_or(false)).collect();
        drop(fds);
        let mut ready = ready.into_iter();
        if out.open && ready.next() == Some(true) {
            out.open = out.read_from(&mut stdout);
        }
        if err.open && ready.next() == Some(true) {
            err.open = err.read_from(&mut stderr);
        }
    }
}

/// The variables that change where Python finds modules.
const PYTHON_SEARCH_ENV: &[&str] = &[
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONNOUSERSITE",
    "PYTHONUSERBASE",
    "PYTHONSAFEPATH",
];

/// Every process's program exists; `python -m module` modules import (with the process's own
/// Python search variables, e.g. a recipe's `PYTHONPATH`).
/// Each process's working directory, where the plan gives one, is a directory here (the
/// adversarial re-run's D18: `cwd: /nonexistent/dir` passed, then the start failed with
/// "sleep: No such file or directory", blaming the program).
pub fn check_cwds(plan: &Plan, report: &mut Report) {
    for p in &plan.processes {
        let Some(cwd) = &p.cwd else { continue };
        let label = format!("{} working directory", p.name);
        match std::fs::metadata(cwd) {
            Ok(m) if m.is_dir() => {}
            found => report.push(Check::fail(
                "tools",
                &label,
                format!(
                    "{}'s working directory {} {}",
                    p.name,
                    cwd.display(),
                    match found {
                        Ok(_) => "is not a directory".to_string(),
                        Err(e) => format!("cannot be entered: {e}"),
                    }
                ),
                "create it on this node, or fix the process's cwd",
            )),
        }
    }
}

pub fn check_executables(plan: &Plan, path_var: Option<&str>, wait: Duration, report: &mut Report) {
    let mut seen = BTreeSet::new();
    for p in &plan.processes {
        let Some(prog) = p.argv.first() else { continue };
        let label = format!("{} program", p.name);
        // Where the spawn will look: the process's own PATH when the plan sets one.
        let path = p.env_value("PATH").or(path_var);
        let Some(found) = find_program(prog, path, p.cwd.as_deref()) else {
            let fix = match p.kind {
                ProcessKind::Master => "install Mooncake (scripts/setup.sh puts it in .venv/bin) and put it on PATH, or set mcsup.master.command",
                ProcessKind::Store => "install Mooncake's Python package in the interpreter on PATH, or set standalone.command",
                ProcessKind::Service => "install the service's program on this node (srtctl's /configs binaries: set mcsup.configs_dir), or set the service's command",
                ProcessKind::Worker => "fix the worker's command, or put its program on PATH",
                ProcessKind::Frontend => "install the frontend in the interpreter on PATH (Dynamo: ai-dynamo; SGLang router: sglang-router; nginx: the nginx package)",
                ProcessKind::Benchmark => "run the benchmark where its program is (srtctl's scripts: inside the job's container, which `mcsup submit` mounts them into)",
            };
            report.push(Check::fail(
                "tools",
                &label,
                format!("`{prog}` not found (PATH and cwd)"),
                fix,
            ));
            continue;
        };
        if let Some(module) = python_module(p) {
            // Where the process's interpreter looks for modules is its env's, not mcsup's.
            let py_env: Vec<(String, String)> = p
                .env
                .iter()
                .filter(|v| PYTHON_SEARCH_ENV.contains(&v.name.as_str()))
                .map(|v| (v.name.clone(), v.value.clone()))
                .collect();
            if seen.insert((found.clone(), module.to_string(), py_env.clone())) {
                let probe = vec![
                    found.display().to_string(),
                    "-c".to_string(),
                    format!("import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({module:?}) else 3)"),
                ];
                match run_bounded(&probe, &py_env, wait * 2) {
                    Some(HelperOutput { success: true, .. }) => report.push(Check::ok("tools", &label, format!("{} has module {module}", found.display()))),
                    Some(HelperOutput { text: out, .. }) => report.push(Check::fail(
                        "tools",
                        &label,
                        format!("{} cannot find module {module}{}", found.display(), out.lines().last().map_or(String::new(), |l| format!(" ({l})"))),
                        "install the package into that interpreter (for Mooncake: mooncake-transfer-engine), or point the command at the right python",
                    )),
                    None => report.push(Check::warn("tools", &label, format!("could not run {} to check module {module}", found.display()), "check the interpreter")),
                }
            }
        } else {
            report.push(Check::ok("tools", &label, found.display().to_string()));
        }
    }
}

/// The benchmark client's script is where srtctl's container has it (`/srtctl-benchmarks`,
/// `/srtctl-runtime`): a client whose script is missing would fail only once the job is
/// servable, after the models loaded.
pub fn check_benchmark_scripts(plan: &Plan, report: &mut Report) {
    use crate::engine::benchmark::{RUNTIME_MOUNT, SCRIPTS_MOUNT};
    for p in plan
        .processes
        .iter()
        .filter(|p| p.kind == ProcessKind::Benchmark)
    {
        let Some(script) = p.argv.iter().skip(1).find(|a| {
            [SCRIPTS_MOUNT, RUNTIME_MOUNT]
                .iter()
                .any(|m| a.starts_with(&format!("{m}/")))
        }) else {
            continue;
        };
        let label = format!("{} script", p.name);
        if p.argv.first().is_some_and(|a| a == "srun") {
            // In the step's container, which srtctl's mounts give it: not visible from here.
            continue;
        }
        if Path::new(script).is_file() {
            report.push(Check::ok("tools", &label, script.clone()));
        } else {
            report.push(Check::fail(
                "tools",
                &label,
                format!("{script} is not a file: srtctl's benchmark scripts are not mounted here"),
                format!(
                    "run inside the job's container with srt-slurm's src/srtctl/benchmarks/scripts at {SCRIPTS_MOUNT} and src/srtctl/runtime_scripts at {RUNTIME_MOUNT} (`mcsup submit` mounts them when srtslurm.yaml names srtctl_root), or set benchmark.type: manual"
                ),
            ));
        }
    }
}

/// Flag names a gflags `--help` lists (`    -name (...)`), plus `no<name>` forms.
pub fn gflags_names(help: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in help.lines() {
        let Some(rest) = line.strip_prefix("    -") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() && rest[name.len()..].starts_with(' ') {
            names.insert(format!("no{name}"));
            names.insert(name);
        }
    }
    names
}

/// Flags in an argv (`--name=value`, `--name value`, `-name`).
pub fn argv_flags(argv: &[String]) -> Vec<String> {
    argv.iter()
        .skip(1)
        .filter_map(|a| a.strip_prefix("--").or_else(|| a.strip_prefix('-')))
        .map(|a| a.split('=').next().unwrap_or(a).to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// The installed master accepts every flag the plan gives it.
pub fn check_master_flags(
    plan: &Plan,
    path_var: Option<&str>,
    wait: Duration,
    report: &mut Report,
) {
    let Some(master) = plan
        .processes
        .iter()
        .find(|p| p.kind == ProcessKind::Master)
    else {
        return;
    };
    let Some(prog) = find_program(&master.argv[0], path_var, None) else {
        return;
    };
    let (help, truncated) =
        match run_bounded(&[prog.display().to_string(), "--help".into()], &[], wait) {
            Some(out) => (out.text, out.truncated),
            None => {
                report.push(Check::warn(
                    "tools",
                    "master flags",
                    format!(
                        "`mooncake_master --help` did not answer in {} s",
                        wait.as_secs_f64()
                    ),
                    "check the installed master",
                ));
                return;
            }
        };
    let known = gflags_names(&help);
    if known.is_empty() {
        report.push(Check::warn(
            "tools",
            "master flags",
            "`mooncake_master --help` listed no flags; cannot check the recipe's",
            "check the installed master",
        ));
        return;
    }
    let unknown: Vec<String> = argv_flags(&master.argv)
        .into_iter()
        .filter(|f| !known.contains(f))
        .collect();
    if unknown.is_empty() {
        report.push(Check::ok(
            "tools",
            "master flags",
            format!(
                "all {} flags known to the installed master",
                argv_flags(&master.argv).len()
            ),
        ));
    } else {
        let hints: Vec<String> = unknown
            .iter()
            .map(|u| {
                let near = crate::domain::suggest(u, known.iter().map(String::as_str))
                    .map(|k| format!(" (did you mean --{k}?)"))
                    .unwrap_or_default();
                format!("--{u}{near}")
            })
            .collect();
        if truncated {
            // The flags may be listed past the cut.
            report.push(Check::warn(
                "tools",
                "master flags",
                format!("`mooncake_master --help` printed more than {} MiB; the part read does not list {}", MAX_CAPTURE >> 20, hints.join(", ")),
                "check the installed master's flags by hand",
            ));
            return;
        }
        report.push(Check::fail(
            "tools",
            "master flags",
            format!("the installed mooncake_master does not know {}: it would exit with \"unknown command line flag\"", hints.join(", ")),
            "remove them from mooncake_kv_store.master_args / master_extra_args, or install a Mooncake that has them (e.g. --nof_eviction_high_watermark_ratio needs v0.3.11+)",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, timeout: Duration) -> Option<HelperOutput> {
        run_bounded(
            &["/bin/sh".into(), "-c".into(), script.into()],
            &[],
            timeout,
        )
    }

    #[test]
    fn helper_output_is_drained_and_capped() {
        let out = sh(
            "head -c 5000000 /dev/zero | tr '\\0' x; echo err >&2",
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(out.success && out.truncated);
        assert_eq!(out.text.len(), MAX_CAPTURE + "err\n".len());
        let out = sh("echo hi; exit 3", Duration::from_secs(10)).unwrap();
        assert_eq!(
            (out.success, out.text.as_str(), out.truncated),
            (false, "hi\n", false)
        );
    }

    #[test]
    fn a_helper_that_exits_leaving_a_pipe_holder_answers() {
        // The background sleep keeps stdout open; the answer comes anyway, and the group kill
        // takes the sleep with it.
        let start = Instant::now();
        let out = sh("echo done; sleep 30 &", Duration::from_secs(10)).unwrap();
        assert_eq!(out.text, "done\n");
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(sh("sleep 30", Duration::from_millis(200)).is_none());
    }

    #[test]
    fn parses_gflags_help() {
        let help = "  Flags from x.cpp:\n    -rpc_port (Port) type: int32 default: 50051\n    -enable_http_metadata_server (b) type: bool\n      default: false\n";
        let n = gflags_names(help);
        assert!(
            n.contains("rpc_port")
                && n.contains("enable_http_metadata_server")
                && !n.contains("nofoo")
        );
        let argv: Vec<String> = ["m", "--rpc_port=1", "-x", "--y", "v"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(argv_flags(&argv), vec!["rpc_port", "x", "y"]);
    }
}
