//! The log directory under a hostile or careless neighbour (issue 12, item 5): the real `mcsup
//! run --plan-file` and `mcsup status`, real files, real signals. A second mcsup on the same
//! directory and node, the directory deleted while running, a symlink or FIFO planted where
//! mcsup writes, loose permissions, names that climb out of the directory, and a full disk (a
//! real 256 KiB tmpfs mounted inside `unshare --mount`).
//!
//! Every wait is bounded; every process test ends by proving nothing of it is left.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use mcsup::plan::*;
use nix::sys::signal::Signal;
use serde_json::Value;

const T: Duration = Duration::from_secs(15);

/// Start `mcsup run --plan-file` on `plan`, with its plan, stdout and stderr in `<env>/<name>/`
/// (so several instances of one test keep their output apart), optionally under `umask`.
fn launch(env: &TestEnv, plan: &Plan, name: &str, umask: Option<u32>) -> Mcsup {
    let dir = env.path(name);
    std::fs::create_dir_all(&dir).unwrap();
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, serde_json::to_string_pretty(plan).unwrap()).unwrap();
    let mut cmd = Command::new(MCSUP);
    cmd.arg("run")
        .arg("--plan-file")
        .arg(&plan_path)
        .env("MCSUP_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("mcsup.stderr")).unwrap());
    if let Some(mask) = umask {
        // SAFETY: umask is async-signal-safe and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                libc::umask(mask as libc::mode_t);
                Ok(())
            });
        }
    }
    mcsup_handle(env, &plan.node.name, cmd.spawn().expect("spawn mcsup"), dir)
}

fn mcsup_handle(env: &TestEnv, node: &str, child: std::process::Child, dir: PathBuf) -> Mcsup {
    Mcsup::new(env, node, child, dir)
}

/// A worker that prints a line and exits 0 at once (the node then finishes on its own).
fn quick_plan(env: &TestEnv) -> Plan {
    let mut w = env.proc(
        "w",
        ProcessKind::Worker,
        &["--print", "secret-output", "--exit-after", "0"],
    );
    w.critical = false;
    env.plan(vec![w])
}

/// A worker printing `lines` lines of 100 bytes at once, ready when it has printed them all (the
/// ready line is matched even when the log file cannot take it).
fn chatty(env: &TestEnv, lines: u32) -> ProcessSpec {
    let mut p = env.proc(
        "chatty",
        ProcessKind::Worker,
        &[
            "--lines",
            &lines.to_string(),
            "--line-len",
            "100",
            "--ready-line",
            "printed-all",
        ],
    );
    p.readiness = ready_on_line("^printed-all$", 10_000);
    p
}

/// A long-running worker, ready once spawned.
fn long_plan(env: &TestEnv) -> Plan {
    let w = env.proc("w", ProcessKind::Worker, &["--print", "hello"]);
    env.plan(vec![w])
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn private_log_dir(env: &TestEnv) -> PathBuf {
    let d = env.log_dir();
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

fn mkfifo(p: &Path) {
    nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
}

/// Wait for mcsup to exit, sending SIGTERM once if it is still there after `before_term`:
/// an mcsup stuck in open() must fail the test, not stall it.
fn exit_code_within(m: &mut Mcsup, before_term: Duration) -> i32 {
    let end = Instant::now() + before_term;
    while Instant::now() < end {
        if let Ok(Some(_)) = m.child.try_wait() {
            return m.wait_exit(T);
        }
        std::thread::sleep(ms(10));
    }
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(m.pid()), Signal::SIGTERM);
    m.wait_exit(ms(5000))
}

#[test]
fn second_mcsup_on_the_same_log_dir_and_node_exits_3_naming_the_holder() {
    let env = TestEnv::new();
    let plan = long_plan(&env);
    let mut a = launch(&env, &plan, "a", None);
    a.wait_event("w", "ready", T);
    let log = env.log_dir().join("n1.w.log");
    let w_pid = wait_for("w's pid in the events file", T, || a.pid_of("w"));
    // The status file follows the events file within 25 ms (STATUS_DELAY).
    wait_for("the first mcsup's status file", T, || a.status());

    let mut b = launch(&env, &plan, "b", None);
    let code = exit_code_within(&mut b, ms(5000));
    let err = b.stderr();
    assert_eq!(
        code, 3,
        "second mcsup should refuse the locked directory: {err}"
    );
    assert!(
        err.contains(&a.pid().to_string()) && err.contains("n1.lock"),
        "the error names the holder's pid and the lock file: {err}"
    );
    // The first run's files are untouched: no rotation, status still the first mcsup's.
    assert!(
        !env.log_dir().join("n1.w.log.1").exists(),
        "live log rotated"
    );
    assert!(
        !env.log_dir().join("n1.events.jsonl.1").exists(),
        "live events rotated"
    );
    assert!(std::fs::read_to_string(&log).unwrap().contains("hello"));
    let st = a.status().expect("status");
    assert_eq!(st["mcsup_pid"].as_i64(), Some(a.pid() as i64), "{st}");
    assert_eq!(a.pid_of("w"), Some(w_pid));

    a.signal(Signal::SIGTERM);
    assert_eq!(a.wait_exit(T), 0, "{}", a.stderr());
    env.assert_no_leftovers();

    // Once the holder is gone, the directory is free again.
    let mut c = launch(&env, &quick_plan(&env), "c", None);
    assert_eq!(c.wait_exit(T), 0, "{}", c.stderr());
    env.assert_no_leftovers();
}

#[test]
fn deleted_log_dir_is_recreated_on_restart_and_healthy_workers_keep_running() {
    let env = TestEnv::new();
    let healthy = env.proc("healthy", ProcessKind::Worker, &[]);
    let mut flaky = env.proc(
        "flaky",
        ProcessKind::Worker,
        &["--print", "flaky up", "--exit-after", "300", "--code", "1"],
    );
    flaky.restart.policy = RestartPolicy::OnFailure;
    flaky.restart.max_restarts = 1000;
    let plan = env.plan(vec![healthy, flaky]);
    let mut m = launch(&env, &plan, "run", None);
    m.wait_event("healthy", "ready", T);
    m.wait_event("flaky", "spawned", T);
    let healthy_pid = wait_for("healthy's pid in the status file", T, || {
        m.pid_of("healthy")
    });

    // rm -rf while mcsup may be writing into it: retry until it is gone.
    wait_for(
        "the log directory to be removed",
        T,
        || match std::fs::remove_dir_all(env.log_dir()) {
            Ok(()) => Some(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(()),
            Err(_) => None,
        },
    );
    // The next restart recreates it (and a fresh events file records the spawn).
    m.wait_event("flaky", "spawned", T);
    let dir = env.log_dir();
    assert_eq!(mode(&dir), 0o700, "recreated log dir");
    wait_for("the flaky log file", T, || {
        std::fs::read_to_string(dir.join("n1.flaky.log"))
            .ok()
            .filter(|s| s.contains("flaky up"))
    });
    wait_for("a status file again", T, || m.status());
    // Said in the new events file, and the lock taken again in the new directory.
    let ev = m.wait_event("mcsup", "log-dir-recreated", T);
    assert!(
        ev.raw["detail"]
            .as_str()
            .unwrap_or("")
            .contains("recreated"),
        "{:?}",
        ev.raw
    );
    assert!(dir.join("n1.lock").is_file(), "the lock file again");
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(healthy_pid), None).is_ok(),
        "the healthy worker was torn down"
    );
    assert!(m.child.try_wait().unwrap().is_none(), "{}", m.stderr());

    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let st = m.status().expect("final status");
    assert_eq!(st["exit_code"].as_i64(), Some(0), "{st}");
    env.assert_no_leftovers();
}

#[test]
fn symlink_planted_at_a_log_file_is_refused_and_never_followed() {
    let env = TestEnv::new();
    let dir = private_log_dir(&env);
    let victim = env.path("victim.txt");
    std::os::unix::fs::symlink(&victim, dir.join("n1.w.log")).unwrap();
    let mut m = launch(&env, &quick_plan(&env), "run", None);
    let code = m.wait_exit(T);
    assert!(
        !victim.exists(),
        "mcsup wrote through the planted symlink into {} (exit {code}): {:?}",
        victim.display(),
        std::fs::read_to_string(&victim)
    );
    let err = m.stderr();
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("n1.w.log") && err.contains("symbolic link"),
        "a clear error: {err}"
    );
    env.assert_no_leftovers();
}

#[test]
fn symlink_planted_at_the_status_temp_file_is_never_followed() {
    let env = TestEnv::new();
    let dir = private_log_dir(&env);
    let victim = env.path("victim.json");
    // The temp name the status writer used to use: predictable.
    std::os::unix::fs::symlink(&victim, dir.join("n1.status.json.tmp")).unwrap();
    let mut m = launch(&env, &quick_plan(&env), "run", None);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    assert!(
        !victim.exists(),
        "the status was written through the planted symlink into {}",
        victim.display()
    );
    let st = std::fs::symlink_metadata(dir.join("n1.status.json")).unwrap();
    assert!(
        st.file_type().is_file(),
        "status file is {:?}",
        st.file_type()
    );
    assert_eq!(st.permissions().mode() & 0o777, 0o600);
    assert!(m.status().is_some());
    // No temp file is left behind.
    let temps: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp") && n != "n1.status.json.tmp")
        .collect();
    assert!(temps.is_empty(), "{temps:?}");
    env.assert_no_leftovers();
}

#[test]
fn fifo_planted_at_a_log_or_events_file_is_refused_without_hanging() {
    for planted in ["n1.w.log", "n1.events.jsonl"] {
        let env = TestEnv::new();
        let dir = private_log_dir(&env);
        mkfifo(&dir.join(planted));
        let mut m = launch(&env, &quick_plan(&env), "run", None);
        let code = exit_code_within(&mut m, ms(3000));
        let err = m.stderr();
        assert_eq!(code, 3, "{planted}: {err}");
        assert!(
            err.contains(planted) && err.contains("FIFO"),
            "{planted}: a clear error: {err}"
        );
        env.assert_no_leftovers();
    }
}

#[test]
fn status_command_refuses_a_fifo_instead_of_hanging() {
    let env = TestEnv::new();
    let dir = private_log_dir(&env);
    mkfifo(&dir.join("n1.status.json"));
    let mut child = Command::new(MCSUP)
        .args(["status", "--node", "n1", "--log-dir"])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + ms(5000);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`mcsup status` hangs on a FIFO status file");
        }
        std::thread::sleep(ms(10));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("FIFO"), "{err}");
}

#[test]
fn every_file_is_0600_and_a_created_log_dir_0700() {
    let env = TestEnv::new();
    let mut m = launch(&env, &quick_plan(&env), "run", Some(0o022));
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let dir = env.log_dir();
    assert_eq!(mode(&dir), 0o700, "log dir");
    for f in ["n1.w.log", "n1.events.jsonl", "n1.status.json", "n1.lock"] {
        assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
    }
    env.assert_no_leftovers();
}

#[test]
fn log_dir_writable_by_others_without_sticky_bit_is_refused() {
    let env = TestEnv::new();
    let dir = env.log_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut m = launch(&env, &quick_plan(&env), "open", None);
    let code = m.wait_exit(T);
    let err = m.stderr();
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains(&dir.display().to_string()) && err.contains("chmod 700"),
        "the error names the directory and the fix: {err}"
    );
    assert!(
        !dir.join("n1.w.log").exists(),
        "nothing is written into the refused directory"
    );
    env.assert_no_leftovers();

    // With the sticky bit (like /tmp) others cannot rename or remove mcsup's files: accepted.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let mut m = launch(&env, &quick_plan(&env), "sticky", None);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

#[test]
fn node_and_process_names_that_leave_the_log_dir_are_refused() {
    let env = TestEnv::new();
    let outside = env.path("abs");
    let cases: Vec<(String, String)> = vec![
        ("../escape".into(), "w".into()),
        (outside.display().to_string(), "w".into()),
        ("n1".into(), "../escape".into()),
        ("..".into(), "w".into()),
    ];
    for (node, process) in &cases {
        let mut plan = quick_plan(&env);
        plan.node.name = node.clone();
        plan.processes[0].name = process.clone();
        let mut m = launch(&env, &plan, "run", None);
        let code = m.wait_exit(T);
        let err = m.stderr();
        let stray: Vec<String> = std::fs::read_dir(env.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".log") || n.ends_with(".jsonl") || n.ends_with(".json"))
            .collect();
        assert!(
            stray.is_empty(),
            "node {node:?} / process {process:?}: files written outside the log dir: {stray:?}"
        );
        // 3 from the supervisor; 2 once the plan file's own validation refuses the name first.
        assert!(
            code == 3 || code == 2,
            "node {node:?} / process {process:?}: exit {code}: {err}"
        );
        let bad = if node == "n1" { process } else { node };
        assert!(
            err.contains(&format!("`{bad}`")) && err.contains("letters, digits"),
            "a clear error naming {bad:?}: {err}"
        );
        env.assert_no_leftovers();

        // The supervisor refuses it itself, whatever validated the plan before (or did not).
        let e = mcsup::supervisor::run_blocking(plan.clone(), Default::default())
            .expect_err("a name that leaves the log dir must be refused");
        assert_eq!(e.exit_code(), 3);
        let e = e.to_string();
        assert!(
            e.contains(&format!("`{bad}`")) && e.contains("letters, digits"),
            "{e}"
        );
        env.assert_no_leftovers();
    }

    // `mcsup status --node ../escape` does not read outside the log dir either.
    std::fs::create_dir_all(env.log_dir()).unwrap();
    std::fs::write(env.path("escape.status.json"), "{}").unwrap();
    let out = Command::new(MCSUP)
        .args(["status", "--node", "../escape", "--log-dir"])
        .arg(env.log_dir())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("`../escape`"), "{err}");
    assert!(
        !err.contains("not a mcsup status file"),
        "read outside: {err}"
    );
}

/// A mcsup whose log directory is a 256 KiB tmpfs in a mount namespace of its own, its one
/// worker (chatty) done printing 2 MB into it: the handle, mcsup's pid, the directory the log
/// directory is copied to when mcsup ends, and chatty's log as seen from outside.
fn chatty_on_a_full_disk(env: &TestEnv) -> (Mcsup, i32, PathBuf, PathBuf) {
    common::require(
        nix::unistd::Uid::effective().is_root(),
        "root (for a private mount namespace with a 256 KiB tmpfs)",
        "run it as root, as scripts/test.sh does",
    );
    let log_dir = env.log_dir();
    std::fs::create_dir_all(&log_dir).unwrap();
    let copy = env.path("copy");
    std::fs::create_dir_all(&copy).unwrap();
    // 20 000 lines of 100 bytes: 2 MB into 256 KiB; ready once it has printed them all.
    let chatty = chatty(env, 20_000);
    let plan = env.plan(vec![chatty]);
    let dir = env.path("run");
    std::fs::create_dir_all(&dir).unwrap();
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, serde_json::to_string_pretty(&plan).unwrap()).unwrap();
    // The mount lives only in the namespace: copy the log dir out before it goes away.
    let script = r#"mount -t tmpfs -o size=256k,mode=0700 mcsup-test "$1" || exit 99
"$2" run --plan-file "$3"
rc=$?
cp -a "$1"/. "$4"/
exit $rc"#;
    let child = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(&log_dir)
        .arg(MCSUP)
        .arg(&plan_path)
        .arg(&copy)
        .env("MCSUP_LOG", "info")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("mcsup.stderr")).unwrap())
        .spawn()
        .expect("unshare");
    let m = mcsup_handle(env, "n1", child, dir);
    let sh = m.pid();
    // The shell's child running mcsup (not `mount`, which runs first).
    let mcsup_pid = wait_for("mcsup under the namespace's shell", T, || {
        std::fs::read_to_string(format!("/proc/{sh}/task/{sh}/children"))
            .ok()?
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .find(|&p| cmdline(p).first().map(String::as_str) == Some(MCSUP))
    });
    // mcsup says so at once, on stderr (the disk is full: the events file may not take it).
    let mut m = m;
    wait_for("a warning that output is being lost", T, || {
        if let Ok(Some(st)) = m.child.try_wait() {
            panic!("mcsup exited ({st}): {}", m.stderr());
        }
        let err = m.stderr();
        (err.contains("chatty") && err.contains("output lost")).then_some(())
    });
    wait_for("chatty to have printed everything", T, || {
        m.stderr()
            .lines()
            .any(|l| l.contains(" ready") && l.contains("process=chatty"))
            .then_some(())
    });
    let inside = PathBuf::from(format!("/proc/{mcsup_pid}/root")).join(
        log_dir
            .strip_prefix("/")
            .expect("absolute log dir")
            .join("n1.chatty.log"),
    );
    (m, mcsup_pid, copy, inside)
}

/// A chatty worker on a 256 KiB tmpfs: the writes that fail (ENOSPC) are counted, warned about
/// at once, recorded as an event and in the status file.
#[test]
fn output_lost_on_a_full_disk_is_counted_in_status_and_events() {
    let env = TestEnv::new();
    let (mut m, mcsup_pid, copy, inside) = chatty_on_a_full_disk(&env);
    // Free the disk (as an operator would) so the report itself can be written, then stop.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&inside)
        .and_then(|f| f.set_len(0))
        .unwrap_or_else(|e| panic!("{}: {e}", inside.display()));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(mcsup_pid), Signal::SIGTERM).unwrap();
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());

    let st: Value =
        serde_json::from_str(&std::fs::read_to_string(copy.join("n1.status.json")).unwrap())
            .unwrap();
    let unit = st["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "chatty")
        .expect("chatty in the status")
        .clone();
    let lost = &unit["output_lost"];
    let bytes = lost["bytes"].as_u64().unwrap_or(0);
    let lines = lost["lines"].as_u64().unwrap_or(0);
    assert!(bytes > 1_000_000, "lost bytes in the status: {unit}");
    assert!(
        lines > 10_000 && lines <= 20_000,
        "lost lines in the status: {unit}"
    );
    assert!(
        lost["error"]
            .as_str()
            .unwrap_or("")
            .contains("No space left"),
        "{unit}"
    );
    let evs = read_events(&copy.join("n1.events.jsonl"));
    let ev = evs
        .iter()
        .find(|e| e.process == "chatty" && e.event == "output-lost")
        .unwrap_or_else(|| panic!("no output-lost event: {:#?}", names(&evs)));
    let detail = ev.raw["detail"].as_str().unwrap_or("");
    assert!(detail.contains("No space left"), "{detail}");
    env.assert_no_leftovers();
}

/// Round 4's D17: the disk stays full to the end, so neither the status file nor the events
/// take the last words; mcsup's final line on stderr counts what the log directory did not take
/// (it said `log_lines_failed=0` and nothing else), and `mcsup status` points at that stderr.
#[test]
fn a_disk_full_to_the_end_is_counted_on_the_final_line() {
    let env = TestEnv::new();
    let (mut m, mcsup_pid, copy, _) = chatty_on_a_full_disk(&env);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(mcsup_pid), Signal::SIGTERM).unwrap();
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let err = m.stderr();
    let last = err
        .lines()
        .rev()
        .find(|l| l.contains("mcsup finished"))
        .unwrap_or_else(|| panic!("no final line: {err}"));
    let count = |key: &str| -> u64 {
        let at = last
            .find(&format!("{key}="))
            .unwrap_or_else(|| panic!("{key} in {last}"));
        last[at + key.len() + 1..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {last}"))
    };
    assert!(count("run_file_writes_failed") > 0, "{last}");
    // The copy holds what landed: the status file says the job still runs, or is missing.
    let status = std::fs::read_to_string(copy.join("n1.status.json")).unwrap_or_default();
    assert!(
        !status.contains("\"stopped\""),
        "the final status landed on a full disk? {status}"
    );
    env.assert_no_leftovers();
}

/// Under `ulimit -f` (Slurm propagates the submit host's limits) the log file hits EFBIG: the
/// loss is counted, and the status file and events file (both small) carry it while running.
#[test]
fn output_lost_to_a_file_size_limit_is_reported_while_running() {
    let env = TestEnv::new();
    let chatty = chatty(&env, 5000);
    let plan = env.plan(vec![chatty]);
    let dir = env.path("run");
    std::fs::create_dir_all(&dir).unwrap();
    let plan_path = dir.join("plan.json");
    std::fs::write(&plan_path, serde_json::to_string_pretty(&plan).unwrap()).unwrap();
    let mut cmd = Command::new(MCSUP);
    cmd.arg("run")
        .arg("--plan-file")
        .arg(&plan_path)
        .env("MCSUP_LOG", "info")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("mcsup.stderr")).unwrap());
    // SAFETY: setrlimit and signal are async-signal-safe and allocate nothing. SIGXFSZ is
    // ignored here so this test does not depend on mcsup's own signal handling (item 3).
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 128 * 1024,
                rlim_max: 128 * 1024,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut m = mcsup_handle(&env, "n1", cmd.spawn().unwrap(), dir);
    let ev = m.wait_event("chatty", "output-lost", T);
    m.wait_event("chatty", "ready", T);
    let detail = ev.raw["detail"].as_str().unwrap_or("").to_string();
    assert!(detail.contains("File too large"), "{detail}");
    // The status file says so while the worker still runs. (It is rewritten once per wake-up
    // of mcsup's loop, so a copy written before the ready event can still say "starting".)
    let unit = wait_for(
        "output_lost in the status file of the ready worker",
        T,
        || {
            let st = m.status()?;
            let u = st["units"]
                .as_array()?
                .iter()
                .find(|u| u["name"] == "chatty")?
                .clone();
            (u["output_lost"]["bytes"].as_u64().unwrap_or(0) > 0 && u["state"] == "ready")
                .then_some(u)
        },
    );
    let size = std::fs::metadata(env.log_dir().join("n1.chatty.log"))
        .unwrap()
        .len();
    assert!(size <= 128 * 1024, "{size}");
    let lost = unit["output_lost"]["bytes"].as_u64().unwrap();
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    // Written + lost = everything the worker printed.
    let st = m.status().unwrap();
    let u = st["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "chatty")
        .unwrap();
    let lost_final = u["output_lost"]["bytes"].as_u64().unwrap();
    assert!(lost_final >= lost);
    assert_eq!(
        size + lost_final,
        5000 * 100 + "printed-all\n".len() as u64,
        "{u}"
    );
    let human = Command::new(MCSUP)
        .args(["status", "--node", "n1", "--log-dir"])
        .arg(env.log_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("chatty") && text.contains("lost"), "{text}");
    env.assert_no_leftovers();
}
