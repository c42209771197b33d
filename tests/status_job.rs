//! `mcsup status --job`: every node's status in a job's (shared) log directory, while the job
//! runs, after one node's mcsup was SIGKILLed, and after the other finished.

use crate::common;

use std::process::{Command, Stdio};

use common::*;
use mcsup::plan::*;
use nix::sys::signal::Signal;

const T: std::time::Duration = std::time::Duration::from_secs(15);

fn listening(env: &TestEnv, name: &str, kind: ProcessKind, after_ms: u64) -> ProcessSpec {
    let port = free_port();
    let mut p = env.proc(
        name,
        kind,
        &[
            "--listen",
            &port.to_string(),
            "--listen-after",
            &after_ms.to_string(),
        ],
    );
    p.readiness = readiness(
        vec![ProbeSpec::Tcp {
            host: "127.0.0.1".into(),
            port,
        }],
        10_000,
    );
    p
}

fn job_status(env: &TestEnv, json: bool) -> String {
    let mut cmd = Command::new(MCSUP);
    cmd.args(["status", "--job", "--log-dir"])
        .arg(env.log_dir());
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_job_table_covers_every_node_running_killed_and_done() {
    let env = TestEnv::new();
    // n1: a master ready after 200 ms and a worker gated on it.
    let master = listening(&env, "master", ProcessKind::Master, 200);
    let mut w1 = env.proc("worker", ProcessKind::Worker, &[]);
    dep(&mut w1, "master");
    let mut n1 = env.start(&env.plan(vec![master, w1]));
    // n2, in the same log directory: a worker ready after 600 ms.
    let mut plan2 = env.plan(vec![listening(&env, "worker", ProcessKind::Worker, 600)]);
    plan2.node.name = "n2".into();
    let dir2 = env.path("n2");
    std::fs::create_dir_all(&dir2).unwrap();
    std::fs::write(
        dir2.join("plan.json"),
        serde_json::to_string(&plan2).unwrap(),
    )
    .unwrap();
    let child = Command::new(MCSUP)
        .args(["run", "--plan-file"])
        .arg(dir2.join("plan.json"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir2.join("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(dir2.join("mcsup.stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut n2 = Mcsup::new(&env, "n2", child, dir2);
    n1.wait_event("worker", "ready", T);
    n2.wait_event("worker", "ready", T);

    // Both running. (The status file follows the events within a loop turn: wait for it.)
    let out = wait_for("both nodes ready in the table", T, || {
        let out = job_status(&env, false);
        (out.matches(" ready ").count() >= 3).then_some(out)
    });
    eprintln!("{out}");
    assert!(out.starts_with("job: 2 node(s): n[1-2]\n"), "{out}");
    for row in ["n1    master", "n1    worker", "n2    worker"] {
        assert!(out.contains(row), "no `{row}` in:\n{out}");
    }
    assert!(
        out.contains(&format!("n1: running (mcsup pid {})", n1.pid())),
        "{out}"
    );
    assert!(
        out.contains(&format!("n2: running (mcsup pid {})", n2.pid())),
        "{out}"
    );
    assert!(out.contains("slowest to ready: n2/worker, "), "{out}");
    assert!(
        out.contains("start-up critical path (ready, after the first mcsup started): n2/worker +"),
        "{out}"
    );

    // A watcher follows the job from here until every node is finished or gone, then exits.
    let mut watcher = KillOnDrop(
        Command::new(MCSUP)
            .args(["status", "--job", "--watch", "0.2", "--log-dir"])
            .arg(env.log_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Its output, read as it comes: the first report must be in before n2 goes.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let seen = seen.clone();
        let mut out = watcher.0.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut out, &mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    wait_for("the watcher's first report", T, || {
        seen.lock().unwrap().contains("n2: running").then_some(())
    });

    // n2's mcsup is SIGKILLed (its children die with it: PDEATHSIG).
    let n2_pid = n2.pid();
    n2.kill_hard();
    let out = job_status(&env, false);
    eprintln!("{out}");
    assert!(
        out.contains(&format!(
            "n2: mcsup (pid {n2_pid}) is gone without finishing"
        )),
        "{out}"
    );
    let json: serde_json::Value = serde_json::from_str(&job_status(&env, true)).unwrap();
    assert_eq!(json["nodes"][0]["node"], "n1");
    assert_eq!(json["nodes"][0]["alive"], true);
    assert_eq!(json["nodes"][1]["alive"], false);
    assert_eq!(json["slowest_to_ready"]["node"], "n2");
    // About 0.6 s: the worker listens 600 ms after its own start, but mcsup counts from when it
    // saw the exec succeed, which on a loaded machine comes after the child started running.
    let slowest = json["slowest_to_ready"]["seconds"].as_f64().unwrap();
    assert!((0.3..5.0).contains(&slowest), "{slowest}");

    // n1 finishes on SIGTERM.
    n1.signal(Signal::SIGTERM);
    assert_eq!(n1.wait_exit(T), 0);
    let out = job_status(&env, false);
    assert!(
        out.contains("n1: done, exit code 0 (received SIGTERM)"),
        "{out}"
    );
    // `status --job DIR` takes the directory as `timeline DIR` does.
    let positional = Command::new(MCSUP)
        .args(["status", "--job"])
        .arg(env.log_dir())
        .output()
        .unwrap();
    let positional = String::from_utf8_lossy(&positional.stdout);
    assert!(
        positional.starts_with("job: 2 node(s): n[1-2]\n")
            && positional.contains("n1: done, exit code 0 (received SIGTERM)"),
        "{positional}"
    );
    // The watcher saw the job running and, at the end, n2 gone and n1 done; then it stopped by
    // itself.
    let watched = wait_for("the watcher to finish", T, || watcher.0.try_wait().unwrap());
    assert_eq!(watched.code(), Some(0), "{watched:?}");
    reader.join().unwrap();
    let text = seen.lock().unwrap().clone();
    let reports: Vec<&str> = text.split("\njob: ").collect();
    assert!(reports.len() >= 2, "{text}");
    assert!(
        reports[0].contains(&format!("n2: running (mcsup pid {n2_pid})")),
        "{text}"
    );
    assert!(
        reports.last().unwrap().contains("n1: done, exit code 0")
            && reports.last().unwrap().contains("n2: mcsup (pid"),
        "{text}"
    );
    assert!(
        !text.contains("\x1b["),
        "no terminal codes into a pipe: {text}"
    );
    env.assert_no_leftovers();
}

/// A helper process, killed and reaped if the test fails before it exits.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// On a terminal, `--watch` redraws in place (cursor home, clear screen, then the report), and it
/// stops by itself once every node is done.
#[test]
fn watch_on_a_terminal_redraws_in_place() {
    let env = TestEnv::new();
    let mut m = env.start(&env.plan(vec![listening(&env, "master", ProcessKind::Master, 0)]));
    m.wait_event("master", "ready", T);
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0);

    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = std::fs::File::from(pty.slave);
    let mut watcher = KillOnDrop(
        Command::new(MCSUP)
            .args(["status", "--job", "--watch", "0.2", "--log-dir"])
            .arg(env.log_dir())
            .stdin(Stdio::null())
            .stdout(slave.try_clone().unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    drop(slave);
    let done = wait_for("the watcher to finish", T, || watcher.0.try_wait().unwrap());
    assert_eq!(done.code(), Some(0), "{done:?}");
    // Everything it wrote is in the pty's buffer; the slave is closed, so read until EIO.
    let mut master = std::fs::File::from(pty.master);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match std::io::Read::read(&mut master, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.starts_with("\x1b[H\x1b[2Jjob: 1 node(s): n1"),
        "{text:?}"
    );
    assert!(text.contains("n1: done, exit code 0"), "{text:?}");
    env.assert_no_leftovers();
}

/// A node whose mcsup runs elsewhere (here: in another PID namespace, as on another host, where
/// its pid means another process or none) is judged by its heartbeat: running while its status
/// file is rewritten (every 5 s even when nothing changes), gone once the file is three periods
/// old (plus 2 s) after that mcsup was killed with its namespace. Its pid (2 in the namespace,
/// a kernel thread here) would have said "running" forever.
#[test]
fn a_node_elsewhere_is_judged_by_its_heartbeat_not_by_its_pid() {
    require(
        nix::unistd::geteuid().is_root(),
        "root (unshare --pid)",
        "run the tests as root (the CI does)",
    );
    let env = TestEnv::new();
    let mut plan = env.plan(vec![env.proc("worker", ProcessKind::Worker, &[])]);
    // A short heartbeat (the product's is 5 s): the file states the one it keeps.
    plan.periods.heartbeat = std::time::Duration::from_secs(1);
    let plan_path = env.path("plan.json");
    std::fs::write(&plan_path, serde_json::to_string(&plan).unwrap()).unwrap();
    // sh is the namespace's pid 1, mcsup its pid 2; killing unshare kills the namespace.
    let script = format!("{MCSUP} run --plan-file {} & wait", plan_path.display());
    let mut ns = KillOnDrop(
        Command::new("unshare")
            .args([
                "--pid",
                "--fork",
                "--mount-proc",
                "--kill-child=SIGKILL",
                "sh",
                "-c",
            ])
            .arg(&script)
            .env("MCSUP_TEST_TAG", &env.tag)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(env.path("mcsup.stderr")).unwrap())
            .spawn()
            .unwrap(),
    );
    // Until mcsup has written its status file, the view has nothing to show.
    let peek = || {
        let out = Command::new(MCSUP)
            .args(["status", "--job"])
            .arg(env.log_dir())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let running = wait_for("the node running, seen from outside", T, || {
        let out = peek();
        out.contains("n1: running (mcsup pid 2)").then_some(out)
    });
    eprintln!("{running}");
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.log_dir().join("n1.status.json")).unwrap())
            .unwrap();
    assert_eq!(status["heartbeat_ms"], 1000);
    assert_ne!(
        status["pid_ns"].as_str().unwrap(),
        std::fs::read_link("/proc/self/ns/pid")
            .unwrap()
            .to_str()
            .unwrap()
    );
    // Still running 4 s on (past three heartbeats), with nothing changed: the heartbeat rewrote
    // the file.
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert!(job_status(&env, false).contains("n1: running (mcsup pid 2)"));
    // The namespace goes, mcsup with it, without a word in its status file.
    ns.0.kill().unwrap();
    ns.0.wait().unwrap();
    let gone = wait_for("the node gone", std::time::Duration::from_secs(30), || {
        let out = job_status(&env, false);
        out.contains("n1: mcsup (pid 2) is gone without finishing: killed?")
            .then_some(out)
    });
    eprintln!("{gone}");
    env.assert_no_leftovers();
}
