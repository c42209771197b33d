//! Leak test through the runtime API: 200 full start/stop cycles of `run_blocking` in this very
//! process (spawn, readiness, workers-done teardown with a real stop signal, orphan sweep), then
//! no leaked fds, no zombies, no processes left.

use crate::common;

use common::*;
use mcsup::plan::*;
use mcsup::supervisor::{run_blocking, RunOptions};

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Our children that are zombies (nobody reaped them).
fn zombie_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.first() == Some(&"Z") && f.get(1).and_then(|p| p.parse::<i32>().ok()) == Some(me) {
            out.push(pid);
        }
    }
    out
}

#[test]
fn two_hundred_start_stop_cycles_leak_nothing() {
    // Quiet: 200 runs of event logs are noise here (the events file still gets them).
    let _ = tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
    let env = TestEnv::new();
    let mut store = env.proc("store", ProcessKind::Store, &[]);
    store.stop.signal = SignalName::SIGINT;
    let mut worker = env.proc(
        "worker",
        ProcessKind::Worker,
        &["--print", "hello", "--exit-after", "0"],
    );
    worker.critical = false;
    worker.depends_on.push(DependencySpec {
        target: "store".into(),
        condition: DependencyCondition::Started,
    });
    let plan = env.plan(vec![store, worker]);
    let opts = RunOptions { console: false };

    let first = run_blocking(plan.clone(), opts.clone()).expect("run");
    assert_eq!(first.exit_code, 0, "{}", first.reason);
    let fds = fd_count();
    for i in 1..200 {
        let out = run_blocking(plan.clone(), opts.clone()).expect("run");
        // A failing cycle shows its own events (a `killing` event says what the kernel showed
        // of the process) and the store's log.
        let tail = |name: &str| {
            let text = std::fs::read_to_string(env.log_dir().join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        };
        assert_eq!(
            out.exit_code,
            0,
            "cycle {i}: {}\nevents:\n{}\nstore log:\n{}",
            out.reason,
            tail("n1.events.jsonl"),
            tail("n1.store.log")
        );
    }
    assert!(fd_count() <= fds, "fds leaked: {} -> {}", fds, fd_count());
    assert!(
        zombie_children().is_empty(),
        "zombies: {:?}",
        zombie_children()
    );
    env.assert_no_leftovers();
    // The log rotation stayed bounded.
    let logs = std::fs::read_dir(env.log_dir()).unwrap().count();
    assert!(logs <= 2 * 6 + 6 + 2, "{logs} files in the log dir");
}

#[test]
fn the_test_child_never_loses_an_early_stop_signal() {
    // The tests above stop the test child with a signal a few milliseconds after its start. It
    // blocks its signals while it installs its handlers: signal-hook-registry drops a signal that
    // arrives between its sigaction and the publication of the action (6 of 1,500 children sent
    // SIGINT 0.3-1.5 ms after the start lived on without the block). A sweep over that window.
    let mut survivors = Vec::new();
    for i in 0..300u64 {
        let mut child = std::process::Command::new(TESTCHILD)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the test child");
        std::thread::sleep(std::time::Duration::from_micros(300 + (i * 37) % 1200));
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                use std::os::unix::process::ExitStatusExt;
                assert_eq!(status.signal(), Some(libc::SIGINT), "run {i}: {status:?}");
                break;
            }
            if std::time::Instant::now() > end {
                survivors.push(i);
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    assert!(
        survivors.is_empty(),
        "alive 10 s after SIGINT: runs {survivors:?}"
    );
}
