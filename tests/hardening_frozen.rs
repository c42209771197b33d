//! A log directory that stops answering (issue 29, class 5): the stand-in for a hung NFS or
//! Lustre mount is a FUSE pass-through (`tests/py/freezefs.py`) whose writes wait while a flag
//! file exists. mcsup writes every file of the run directory from one writer thread, so while
//! the directory is frozen, probes, restarts and the ordered teardown go on; what the queue
//! cannot hold is dropped and counted, and stderr (elsewhere) says what is happening.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use mcsup::plan::*;
use nix::sys::signal::Signal;

const T: Duration = Duration::from_secs(15);
/// How long the directory stays frozen: longer than the teardown deadline ([`DEADLINE`]) and
/// the stall warning ([`STALL`]), as the issue asks.
const FROZEN: Duration = Duration::from_secs(8);
/// The plan's teardown deadline and stall warning here (the product's: 25 s and 5 s).
const DEADLINE: Duration = Duration::from_secs(4);
const STALL: Duration = Duration::from_secs(1);

/// The mounted file system; dropping it thaws, unmounts and stops the server, whatever happened.
struct Frozen {
    server: Child,
    mnt: PathBuf,
    flag: PathBuf,
}

impl Frozen {
    fn mount(env: &TestEnv) -> Frozen {
        require(
            nix::unistd::geteuid().is_root()
                && Path::new("/dev/fuse").exists()
                && Path::new("/usr/bin/fusermount3").exists(),
            "root, /dev/fuse and fusermount3 (Debian's fuse3)",
            "run the tests as root with scripts/setup.sh's packages (the CI does)",
        );
        let python = venv_python();
        let (back, mnt) = (env.path("back"), env.path("mnt"));
        for d in [&back, &mnt] {
            std::fs::create_dir(d).unwrap();
        }
        let flag = env.path("FROZEN");
        let mut server = Command::new(&python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/freezefs.py"))
            .args([&back, &mnt, &flag])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(env.path("freezefs.stderr")).unwrap())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(server.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(
            line.trim(),
            "mounted",
            "freezefs: {}",
            std::fs::read_to_string(env.path("freezefs.stderr")).unwrap_or_default()
        );
        Frozen { server, mnt, flag }
    }

    fn freeze(&self) {
        std::fs::write(&self.flag, b"").unwrap();
    }

    fn thaw(&self) {
        let _ = std::fs::remove_file(&self.flag);
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.thaw();
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(&self.mnt)
            .status();
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// Removes the flag file when dropped.
struct Thaw(PathBuf);

impl Drop for Thaw {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The venv's Python (fusepy is installed there by scripts/setup.sh).
fn venv_python() -> PathBuf {
    let venv = std::env::var_os("MCSUP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv"));
    let python = venv.join("bin/python");
    let ok = Command::new(&python)
        .args(["-c", "import fuse"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    require(
        ok,
        &format!("fusepy in {}", venv.display()),
        "run scripts/setup.sh (it installs fusepy and libfuse2)",
    );
    python
}

/// Lines of mcsup's stderr that hold every one of `needles`.
fn lines_with(stderr: &str, needles: &[&str]) -> usize {
    stderr
        .lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .count()
}

fn first_line_with(stderr: &str, needles: &[&str]) -> Option<usize> {
    stderr
        .lines()
        .position(|l| needles.iter().all(|n| l.contains(n)))
}

/// Wait for `process`'s `event` while frozen; on a timeout, thaw first, then fail (mcsup, stuck
/// in the frozen file system, could not even be killed before the thaw).
fn wait_frozen(m: &Mcsup, fs: &Frozen, process: &str, event: &str, timeout: Duration) -> Ev {
    let end = Instant::now() + timeout;
    loop {
        if let Some(e) = m
            .events()
            .into_iter()
            .find(|e| e.process == process && e.event == event)
        {
            return e;
        }
        if Instant::now() > end {
            fs.thaw();
            let evs: Vec<String> = m
                .events()
                .iter()
                .map(|e| format!("{} {}", e.process, e.event))
                .collect();
            panic!("no `{process} {event}` within {timeout:?} while frozen; events: {evs:#?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_frozen_log_directory_stalls_no_probe_restart_or_teardown() {
    let env = TestEnv::new();
    let fs = Frozen::mount(&env);
    let master = env.up("master", ProcessKind::Master, &[]);
    let mut worker = env.up("worker", ProcessKind::Worker, &[]);
    dep(&mut worker, "master");
    // Fails every 300 ms and is restarted each time.
    let mut flaky = env.proc(
        "flaky",
        ProcessKind::Worker,
        &["--print", "flaky up", "--exit-after", "300", "--code", "1"],
    );
    flaky.restart.policy = RestartPolicy::OnFailure;
    flaky.restart.max_restarts = 1000;
    flaky.restart.backoff_max = ms(100);
    flaky.critical = false;
    // Ready (a TCP probe) 3 s after it starts: while the directory is frozen.
    let port = free_port();
    let mut late = env.proc(
        "late",
        ProcessKind::Worker,
        &["--listen", &port.to_string(), "--listen-after", "3000"],
    );
    late.readiness = readiness(
        vec![ProbeSpec::Tcp {
            host: "127.0.0.1".into(),
            port,
        }],
        20_000,
    );
    dep(&mut late, "worker");
    let mut plan = env.plan(vec![master, worker, flaky, late]);
    plan.log_dir = fs.mnt.join("logs");
    plan.shutdown.deadline = DEADLINE;
    plan.periods.log_dir_stall = STALL;
    let mut m = env.start(&plan);
    m.events_path = plan.log_dir.join("n1.events.jsonl");
    // Dropped before `m` (whose drop waits for mcsup) if the test fails while frozen.
    let _thaw = Thaw(fs.flag.clone());
    m.wait_event("worker", "ready", T);
    m.wait_event("late", "spawned", T);

    fs.freeze();
    let frozen_at = Instant::now();
    let stderr_then = m.stderr();
    let restarts_then = lines_with(&stderr_then, &["spawned", "process=flaky"]);
    // Restarts go on, a probe succeeds, and mcsup says the directory is stuck.
    wait_for("restarts, a probe and the stall warning", T, || {
        let e = m.stderr();
        (lines_with(&e, &["spawned", "process=flaky"]) >= restarts_then + 3
            && lines_with(&e, &["ready", "process=late"]) == 1
            && e.contains("the log directory has not taken a write for"))
        .then_some(())
    });
    assert!(
        frozen_at.elapsed() < FROZEN,
        "the checks took the whole freeze"
    );

    // A stop request while it is still frozen: every process is gone within the deadline.
    m.signal(Signal::SIGTERM);
    let asked = Instant::now();
    wait_for("every process to be gone", plan.shutdown.deadline, || {
        env.tagged_pids().is_empty().then_some(())
    });
    let took = asked.elapsed();
    assert!(
        frozen_at.elapsed() < FROZEN,
        "the teardown outlasted the freeze"
    );
    let e = m.stderr();
    // In order: the workers stopped before the master was asked to.
    let worker_stopped = first_line_with(&e, &["stopped", "process=worker"]).expect(&e);
    let master_stopping = first_line_with(&e, &["stopping", "process=master"]).expect(&e);
    assert!(worker_stopped < master_stopping, "teardown order:\n{e}");
    eprintln!(
        "frozen for {:.1} s when SIGTERM came; every process gone {:.2} s later",
        asked.duration_since(frozen_at).as_secs_f64(),
        took.as_secs_f64()
    );

    // Thaw after the full freeze: mcsup finishes, and says what the directory did not take.
    std::thread::sleep(FROZEN.saturating_sub(frozen_at.elapsed()));
    fs.thaw();
    let code = m.wait_exit(T);
    assert_eq!(code, 0, "{}", m.stderr());
    let e = m.stderr();
    assert!(e.contains("mcsup finished"), "{e}");
    env.assert_no_leftovers();
}

/// A restarted program that lives on a file system that stopped answering (round 4's H5): its
/// exec waits in the kernel for as long as the file system does, even through SIGKILL once the
/// request is with the server. mcsup forks and goes on; the exec's outcome comes back later, so
/// the hung spawn holds only that child: a SIGTERM is acted on at once, the other worker is
/// stopped, the hung child is signalled in its tier and given up after the deadline, and mcsup
/// finishes while the file system is still frozen. After the thaw the child is gone too.
#[test]
fn a_program_on_a_frozen_file_system_holds_only_its_own_spawn() {
    let env = TestEnv::new();
    let fs = Frozen::mount(&env);
    // The test child's binary, on the mount (open, which exec does, waits while frozen).
    let prog = fs.mnt.join("mcsup-testchild");
    std::fs::copy(TESTCHILD, &prog).unwrap();
    let mut flaky = env.proc(
        "flaky",
        ProcessKind::Worker,
        &["--exit-after", "300", "--code", "1"],
    );
    flaky.argv[0] = prog.display().to_string();
    flaky.restart.policy = RestartPolicy::OnFailure;
    flaky.restart.max_restarts = 1000;
    flaky.restart.backoff_max = ms(100);
    flaky.critical = false;
    let other = env.up("other", ProcessKind::Worker, &[]);
    let mut plan = env.plan(vec![other, flaky]);
    plan.shutdown.deadline = DEADLINE;
    let mut m = env.start(&plan);
    let _thaw = Thaw(fs.flag.clone());
    m.wait_event("other", "ready", T);
    m.wait_event("flaky", "spawned", T);

    fs.freeze();
    let frozen_at = Instant::now();
    let count = |m: &Mcsup, event: &str| {
        m.events()
            .iter()
            .filter(|e| e.process == "flaky" && e.event == event)
            .count()
    };
    let (spawned_then, restarts_then) = (count(&m, "spawned"), count(&m, "restarting"));
    // Its next exit and restart: the restart's exec now waits on the frozen mount.
    wait_for("flaky's restart after the freeze", T, || {
        (count(&m, "restarting") > restarts_then).then_some(())
    });
    std::thread::sleep(Duration::from_millis(700));
    let spawned_now = count(&m, "spawned");
    assert!(
        spawned_now <= spawned_then + 1,
        "flaky kept exec'ing from the frozen mount ({spawned_then} -> {spawned_now}): not frozen?"
    );

    m.signal(Signal::SIGTERM);
    let asked = Instant::now();
    // Acted on at once: the other worker is stopped (it ends on SIGTERM).
    wait_frozen(&m, &fs, "other", "stopped", Duration::from_secs(2));
    let other_stopped = asked.elapsed();
    let hung = wait_frozen(&m, &fs, "flaky", "stopping", Duration::from_secs(1));
    let hung_pid = hung
        .pid
        .expect("the hung child's pid in its stopping event");
    // The deadline, then the child that SIGKILL cannot reach is given up.
    let code = m.wait_exit(
        DEADLINE + mcsup::supervisor::machine::ABANDON_AFTER_DEADLINE + Duration::from_secs(3),
    );
    let took = asked.elapsed();
    let e = m.stderr();
    assert!(e.contains("mcsup finished"), "{e}");
    assert!(
        count(&m, "abandoned") == 1 || count(&m, "stopped") == 1,
        "the hung child was neither stopped nor given up:\n{e}"
    );
    eprintln!(
        "SIGTERM {:.2} s into the freeze: the other worker stopped {:.2} s later, mcsup finished {:.2} s later with {code}, still frozen",
        asked.duration_since(frozen_at).as_secs_f64(),
        other_stopped.as_secs_f64(),
        took.as_secs_f64()
    );
    // Thawed, the exec's wait ends and the pending SIGKILL takes the child.
    fs.thaw();
    wait_for("the hung child to go once thawed", T, || {
        (!Path::new(&format!("/proc/{hung_pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{hung_pid}/stat"))
                .is_ok_and(|s| s.contains(") Z ")))
        .then_some(())
    });
    env.assert_no_leftovers();
}

/// A node whose coordinator has not come yet reads the job's control secret from the log
/// directory on every try (round 4's M6): when that directory stops answering, the read waits
/// off the loop, so a SIGTERM still stops the node's worker at once and the run finishes while
/// the directory is frozen.
#[test]
fn a_frozen_control_secret_does_not_hold_a_node_waiting_for_its_coordinator() {
    let env = TestEnv::new();
    let fs = Frozen::mount(&env);
    let worker = env.up("worker", ProcessKind::Worker, &[]);
    let mut plan = env.plan(vec![worker]);
    // This node is n2; the coordinator n1 never comes. The secret lives on the mount, naming a
    // port where nothing listens: n2 reads it again on every try (open waits while frozen).
    let secret = fs.mnt.join("control.secret");
    std::fs::write(&secret, format!("{} {}\n", free_port(), "ab".repeat(32))).unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    plan.node.name = "n2".into();
    plan.control = Some(ControlSpec {
        coordinator: "n1".into(),
        address: "127.0.0.1".into(),
        port: 0,
        secret,
        nodes: vec!["n1".into(), "n2".into()],
        silent: mcsup::plan::ControlSpec::SILENT,
        stores_at_once: 0,
    });
    plan.shutdown.deadline = DEADLINE;
    let mut m = env.start(&plan);
    m.events_path = plan.log_dir.join("n2.events.jsonl");
    let _thaw = Thaw(fs.flag.clone());
    m.wait_event("worker", "ready", T);
    // A few tries against the absent secret, then the directory stops answering.
    std::thread::sleep(Duration::from_millis(600));
    fs.freeze();
    let frozen_at = Instant::now();
    std::thread::sleep(Duration::from_millis(600));
    m.signal(Signal::SIGTERM);
    let asked = Instant::now();
    wait_frozen(&m, &fs, "worker", "stopped", Duration::from_secs(2));
    let stopped = asked.elapsed();
    wait_frozen(&m, &fs, "mcsup", "finished", DEADLINE);
    eprintln!(
        "SIGTERM {:.2} s into the freeze: the worker stopped {:.2} s later, the run finished {:.2} s later, still frozen",
        asked.duration_since(frozen_at).as_secs_f64(),
        stopped.as_secs_f64(),
        asked.elapsed().as_secs_f64()
    );
    // The thread whose read waits in the kernel holds the process's exit until the thaw: no
    // process can end while one of its threads is in an uninterruptible wait.
    fs.thaw();
    let code = m.wait_exit(T);
    assert_eq!(code, 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

/// A log directory that is only slow (a busy parallel file system; here the FUSE file system with
/// 0.5 ms added to each write, far slower than a child that prints as fast as it can): nothing is
/// lost. The
/// writer's queue fills, the child's reader waits for room and the output waits in the pipe.
/// Before, a full queue dropped output whether the directory was stuck or only behind, and what
/// was still queued when mcsup ended was left unwritten after 2 s, the events saying so with it:
/// here 15.5 MB of the 30 MB were missing and no event said so.
#[test]
fn a_slow_log_directory_loses_no_output() {
    let env = TestEnv::new();
    let fs = Frozen::mount(&env);
    let lines: u64 = 300_000;
    // Every write of the file system 0.5 ms slower (FUSE hands them over in pieces of a few KiB):
    // a few MB/s against the child's hundreds.
    std::fs::write(format!("{}.slow", fs.flag.display()), "").unwrap();
    let mut chatty = env.proc(
        "chatty",
        ProcessKind::Worker,
        &[
            "--lines",
            &lines.to_string(),
            "--line-len",
            "100",
            "--exit-after",
            "0",
        ],
    );
    chatty.critical = false;
    let mut plan = env.plan(vec![chatty]);
    plan.log_dir = fs.mnt.join("logs");
    let mut m = env.start(&plan);
    m.events_path = plan.log_dir.join("n1.events.jsonl");
    let started = Instant::now();
    assert_eq!(m.wait_exit(Duration::from_secs(120)), 0, "{}", m.stderr());
    // The backing file: the mount's attributes may lag behind the last write.
    let size = std::fs::metadata(env.path("back").join("logs/n1.chatty.log"))
        .unwrap()
        .len();
    eprintln!(
        "{lines} lines of 100 B through a slow log directory in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let lost: Vec<String> = m
        .events()
        .iter()
        .filter(|e| e.event == "output-lost")
        .map(|e| e.raw.to_string())
        .collect();
    assert!(lost.is_empty(), "{lost:#?}");
    assert_eq!(size, lines * 100);
    env.assert_no_leftovers();
}
