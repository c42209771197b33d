//! The stall watchdog's dump: when a process stops answering (its liveness failed), the machine
//! asks (`WatchRequest::Dump`) and, before it stops the process, every process of its group is
//! dumped into `<log_dir>/<node>.<process>.stacks-<n>.txt`: each thread's state and kernel wait
//! channel (`/proc/<pid>/task/<tid>/stat`, `wchan`, and `stack` where the kernel lets us read
//! it), and for a Python process its Python stacks from `py-spy dump --nonblocking` when py-spy
//! is on the PATH (PyPI `py-spy`; it reads the frozen process's memory without stopping it). The
//! `stack-dump` event names the file and the top frames; `mcsup why` shows them with the
//! failure.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Answer, Effect, Input, Now, Task, Watcher};
use crate::plan::Plan;
use crate::runfiles::StatusFile;
use crate::supervisor::machine::{Event, RecordKind, WatchRequest};

/// At most this many processes of a group, threads of a process, bytes of py-spy's answer.
const MAX_PROCS: usize = 64;
const MAX_THREADS: usize = 512;
const MAX_PYSPY_BYTES: u64 = 1 << 20;
/// py-spy's bound per process.
const PYSPY_WITHIN: Duration = Duration::from_secs(10);

/// The stacks watcher: dumps asked for, numbered per process.
#[derive(Default)]
pub struct Stacks {
    dumps: std::collections::HashMap<usize, u32>,
}

impl Watcher for Stacks {
    fn on(&mut self, plan: &Plan, input: &Input<'_>, now: Now<'_>) -> Vec<Effect> {
        let _ = now;
        match input {
            Input::Asked(WatchRequest::Dump { proc, pgid }) => {
                let Some(p) = plan.processes.get(*proc) else {
                    return vec![Effect::Feed(Event::Dumped { proc: *proc })];
                };
                let n = self.dumps.entry(*proc).or_default();
                *n += 1;
                vec![Effect::Run {
                    key: None,
                    task: Task::Dump {
                        proc: *proc,
                        pgid: *pgid,
                        file: plan
                            .log_dir
                            .join(format!("{}.{}.stacks-{n}.txt", plan.node.name, p.name)),
                    },
                }]
            }
            Input::Answer(Answer::Dumped { proc, said }) => {
                let unit = plan
                    .processes
                    .get(*proc)
                    .map_or_else(|| "?".to_string(), |p| p.name.clone());
                vec![
                    Effect::note(unit, RecordKind::StackDump, said.clone()),
                    Effect::Feed(Event::Dumped { proc: *proc }),
                ]
            }
            _ => Vec::new(),
        }
    }

    fn status(&self, _status: &mut StatusFile) {}
}

/// Dump every process of group `pgid` into `file`; what the event says (the file and the top
/// frames, or why there is none). Blocking: run off the loop.
pub fn dump(pgid: i32, file: &Path) -> String {
    let pids = group(pgid);
    let pyspy = pyspy();
    let mut text = format!(
        "# stacks of process group {pgid}, written by mcsup when it stopped answering ({} process(es))\n",
        pids.len()
    );
    let mut top = String::new();
    for pid in &pids {
        let (threads, first) = kernel_view(*pid);
        text.push_str(&threads);
        if let (Some(py), true) = (&pyspy, is_python(*pid)) {
            let (out, frames) = pyspy_dump(py, *pid);
            text.push_str(&out);
            if top.is_empty() && !frames.is_empty() {
                top = format!("pid {pid}: {}", frames.join(" < "));
            }
        }
        if top.is_empty() {
            top = first;
        }
    }
    if pyspy.is_none() {
        text.push_str("# py-spy is not on the PATH: no Python stacks (pip install py-spy)\n");
    }
    match crate::supervisor::status::write_private_atomic(file, text.as_bytes()) {
        Ok(()) => format!("{}: {top}", file.display()),
        Err(e) => format!(
            "could not write the stacks to {}: {e}; {top}",
            file.display()
        ),
    }
}

/// The processes of group `pgid`, leader first.
fn group(pgid: i32) -> Vec<i32> {
    let mut out: Vec<i32> = vec![pgid];
    if let Ok(all) = procfs::process::all_processes() {
        for p in all.flatten() {
            if out.len() >= MAX_PROCS {
                break;
            }
            if let Ok(stat) = p.stat() {
                if stat.pgrp == pgid && stat.pid != pgid {
                    out.push(stat.pid);
                }
            }
        }
    }
    out
}

/// Each thread's state, wait channel and (where readable) kernel stack; and the first thread's
/// state in a few words.
fn kernel_view(pid: i32) -> (String, String) {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let comm = read_small(&proc_dir.join("comm")).unwrap_or_default();
    let mut out = format!("\n== pid {pid} ({})\n", comm.trim());
    let mut first = String::new();
    let Ok(tasks) = std::fs::read_dir(proc_dir.join("task")) else {
        out.push_str("   (gone)\n");
        return (out, format!("pid {pid} gone"));
    };
    let mut tids: Vec<i32> = tasks
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    for tid in tids.into_iter().take(MAX_THREADS) {
        let t = proc_dir.join(format!("task/{tid}"));
        let stat = read_small(&t.join("stat")).unwrap_or_default();
        // `pid (comm) S ...`: the state follows the last `)`.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        let name = read_small(&t.join("comm")).unwrap_or_default();
        let wchan = read_small(&t.join("wchan")).unwrap_or_default();
        out.push_str(&format!(
            "   thread {tid} ({}) state {state}{}\n",
            name.trim(),
            if wchan.is_empty() || wchan == "0" {
                String::new()
            } else {
                format!(", waiting in {}", wchan.trim())
            }
        ));
        if let Some(stack) = read_small(&t.join("stack")).filter(|s| !s.is_empty()) {
            for l in stack.lines().take(16) {
                out.push_str(&format!("      {l}\n"));
            }
        }
        if first.is_empty() {
            first = format!(
                "pid {pid} ({}) thread state {state}{}",
                comm.trim(),
                if wchan.is_empty() || wchan == "0" {
                    String::new()
                } else {
                    format!(" in {}", wchan.trim())
                }
            );
        }
    }
    (out, first)
}

/// A small /proc file (bounded), if readable.
fn read_small(path: &Path) -> Option<String> {
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(64 << 10)
        .read_to_string(&mut s)
        .ok()?;
    Some(s)
}

/// Whether process `pid` runs a Python interpreter.
fn is_python(pid: i32) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .is_some_and(|n| n.starts_with("python"))
}

/// py-spy on the PATH.
fn pyspy() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("py-spy"))
        .find(|p| p.is_file())
}

/// `py-spy dump --nonblocking --pid PID`, bounded in time and size; its text and the first
/// thread's top frames.
fn pyspy_dump(py: &Path, pid: i32) -> (String, Vec<String>) {
    let child = std::process::Command::new(py)
        .args(["dump", "--nonblocking", "--pid", &pid.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return (format!("   py-spy: {e}\n"), Vec::new()),
    };
    let until = Instant::now() + PYSPY_WITHIN;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut text = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = (&mut o).take(MAX_PYSPY_BYTES).read_to_string(&mut text);
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = (&mut e).take(64 << 10).read_to_string(&mut err);
    }
    let frames = top_frames(&text);
    let mut out = format!("   py-spy dump --nonblocking --pid {pid}:\n");
    for l in text.lines() {
        out.push_str(&format!("   {l}\n"));
    }
    match status {
        None => out.push_str(&format!(
            "   (py-spy gave no answer within {} s)\n",
            PYSPY_WITHIN.as_secs()
        )),
        Some(s) if !s.success() => out.push_str(&format!("   (py-spy {s}: {})\n", err.trim())),
        Some(_) => {}
    }
    (out, frames)
}

/// The top frames of the first thread of a py-spy dump (its indented lines), innermost first.
pub fn top_frames(dump: &str) -> Vec<String> {
    dump.lines()
        .skip_while(|l| !l.starts_with("Thread "))
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .take(3)
        .map(|l| l.trim().to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// py-spy 0.4's dump format: a header, then each thread's frames, innermost first.
    #[test]
    fn the_top_frames_are_the_first_threads_innermost() {
        let dump = "Process 4242: python3 -m dynamo.mocker --model-path /m\nPython v3.11.2 (/usr/bin/python3.11)\n\nThread 4242 (idle): \"MainThread\"\n    select (selectors.py:468)\n    _run_once (asyncio/base_events.py:1898)\n    run_forever (asyncio/base_events.py:608)\n    <module> (dynamo/mocker/__main__.py:7)\nThread 4250 (idle): \"worker\"\n    wait (threading.py:327)\n";
        assert_eq!(
            top_frames(dump),
            [
                "select (selectors.py:468)",
                "_run_once (asyncio/base_events.py:1898)",
                "run_forever (asyncio/base_events.py:608)"
            ]
        );
        assert!(top_frames("nothing").is_empty());
    }

    /// A real process group (this test's own child, stopped): every thread's state is written,
    /// the file is the one asked for, and the event names it.
    #[test]
    fn a_stopped_group_is_dumped_to_the_file_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .unwrap();
        // The kernel shows it stopped once the signal is delivered.
        for _ in 0..100 {
            let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('T'))
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let file = dir.path().join("n1.w.stacks-1.txt");
        let said = dump(pid, &file);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            said.starts_with(&format!(
                "{}: pid {pid} (sleep) thread state T",
                file.display()
            )),
            "{said}"
        );
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(&format!("== pid {pid} (sleep)")), "{text}");
        assert!(
            text.contains(&format!("thread {pid} (sleep) state T")),
            "{text}"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
