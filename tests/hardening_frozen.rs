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
