//! Shared helpers for the supervisor's process tests: a plan builder, a handle on a running
//! `mcsup run --plan-file`, the events file, and the /proc walk that proves nothing is left.
//!
//! Every test gets its own temp dir and a unique `MCSUP_TEST_TAG` that all its children (and
//! their descendants) inherit, so leftovers are found by tag, never by name. Waits poll files
//! with a timeout; a hung mcsup is SIGKILLed and the test fails instead of stalling.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod recipe;
pub mod view;

use mcsup::plan::*;
use serde_json::Value;

/// `p` starts only once `target` is ready (a `healthy` dependency, as the planner writes).
pub fn dep(p: &mut ProcessSpec, target: &str) {
    p.depends_on.push(DependencySpec {
        target: target.into(),
        condition: DependencyCondition::Healthy,
    });
}

pub const TESTCHILD: &str = env!("CARGO_BIN_EXE_mcsup-testchild");
pub const MCSUP: &str = env!("CARGO_BIN_EXE_mcsup");

/// A prerequisite from outside the repository (the Mooncake venv, Slurm, etcd/NATS). When it is
/// absent, the full suite (`scripts/test.sh`, which sets `MCSUP_TESTS_REQUIRE_ALL=1`) and CI
/// (`CI` set) fail the test with `fix`; a developer's plain `cargo nextest run` (one process per
/// test) prints why and ends the test without running it, so the inner loop works on a bare
/// machine. Under `cargo test` (many tests per process) it always fails: ending the process there
/// would end its other tests too.
pub fn require(present: bool, what: &str, fix: &str) {
    if present {
        return;
    }
    let required = std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false")
        || std::env::var_os("MCSUP_TESTS_REQUIRE_ALL").is_some_and(|v| v == "1");
    let own_process = std::env::var("NEXTEST_EXECUTION_MODE").as_deref() == Ok("process-per-test");
    if required || !own_process {
        panic!("{what} is missing: {fix}");
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    eprintln!("SKIPPED {test}: {what} is missing ({fix}); set CI=1 to make this a failure");
    std::process::exit(0);
}

/// This machine can run the local Slurm cluster (scripts/slurm/cluster.sh: root, the Debian
/// packages); else [`require`] skips or fails the test.
pub fn require_slurm() {
    let root = nix::unistd::Uid::effective().is_root();
    let installed = [
        "/usr/sbin/slurmctld",
        "/usr/sbin/slurmd",
        "/usr/sbin/munged",
    ]
    .iter()
    .all(|p| Path::new(p).exists());
    require(
        root && installed,
        "a local Slurm (root and the slurmctld, slurmd, munge packages)",
        "run scripts/test.sh as root (it installs them)",
    );
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Readiness with the given probes, polled fast (5 ms, backing off to 50 ms) for `timeout_ms`.
pub fn readiness(probes: Vec<ProbeSpec>, timeout_ms: u64) -> Option<ReadinessSpec> {
    Some(ReadinessSpec {
        probes,
        initial_delay: ms(0),
        interval: ms(5),
        max_interval: ms(50),
        attempt_timeout: ms(500),
        timeout: ms(timeout_ms),
    })
}

/// Ready once the process prints a line matching `pattern`.
pub fn ready_on_line(pattern: &str, timeout_ms: u64) -> Option<ReadinessSpec> {
    readiness(
        vec![ProbeSpec::LogLine {
            pattern: pattern.into(),
        }],
        timeout_ms,
    )
}

/// A free port on 127.0.0.1 (bind 0, read it, release it).
pub fn free_port() -> u16 {
    use std::os::fd::AsRawFd;
    use std::sync::atomic::{AtomicU32, Ordering};
    // Below the kernel's ephemeral range (ip_local_port_range, 32768-60999 by default): a port
    // taken from that range (bind to port 0) can be grabbed in the meantime as the source port
    // of any outgoing connection of a parallel test (seen: the preflight of a Slurm test found
    // its store port "already in use"). Above Mooncake's own random ports (12300-14300,
    // 15000-17000) and the fixed ports of the tests (17xxx, 18xxx).
    const LO: u32 = 20_000;
    const HI: u32 = 32_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // A lock file per port, held for this test process's life: parallel test processes never
    // hand out the same port.
    static HELD: std::sync::Mutex<Vec<std::fs::File>> = std::sync::Mutex::new(Vec::new());
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
        ^ std::process::id().wrapping_mul(2_654_435_761);
    let _ = NEXT.compare_exchange(0, seed % (HI - LO) + 1, Ordering::SeqCst, Ordering::SeqCst);
    let locks = std::env::temp_dir().join("mcsup-test-ports");
    std::fs::create_dir_all(&locks).expect("port lock dir");
    for _ in 0..(HI - LO) {
        let port = (LO + NEXT.fetch_add(1, Ordering::SeqCst) % (HI - LO)) as u16;
        let Ok(lock) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(locks.join(port.to_string()))
        else {
            continue;
        };
        // SAFETY: flock on an fd this function owns.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            continue;
        }
        let free = std::net::TcpListener::bind(("0.0.0.0", port)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free {
            HELD.lock().unwrap_or_else(|e| e.into_inner()).push(lock);
            return port;
        }
    }
    panic!("no free port in {LO}..{HI}");
}

/// `mcsup ARGS`, which must succeed: its stdout.
pub fn mcsup_ok<I, S>(args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let out = Command::new(MCSUP).args(args).output().expect("run mcsup");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One test's world: temp dir, tag, node name.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub tag: String,
    pub node: String,
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let dir = tempfile::tempdir().expect("tempdir");
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let tag = format!("t{}-{}", std::process::id(), nanos);
        TestEnv {
            dir,
            tag,
            node: "n1".into(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn log_dir(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    /// A process running the test child with these flags, tagged, with sane test defaults:
    /// critical, restart never, SIGTERM with 2 s grace, ready once spawned.
    pub fn proc(&self, name: &str, kind: ProcessKind, args: &[&str]) -> ProcessSpec {
        let mut argv = vec![TESTCHILD.to_string()];
        argv.extend(args.iter().map(|s| s.to_string()));
        ProcessSpec {
            name: name.into(),
            kind,
            phase: Phase::default_for(kind),
            service: None,
            placement: None,
            listens: Vec::new(),
            roles: vec![],
            argv,
            preamble: None,
            env: vec![EnvVar {
                name: "MCSUP_TEST_TAG".into(),
                value: self.tag.clone(),
                source: "test".into(),
                overrode: vec![],
            }],
            cwd: None,
            depends_on: vec![],
            readiness: None,
            liveness: None,
            restart: RestartSpec {
                policy: RestartPolicy::Never,
                success_codes: vec![0],
                backoff_initial: ms(50),
                backoff_factor: 2.0,
                backoff_max: ms(1000),
                reset_after: ms(60_000),
                max_restarts: 3,
                window: ms(60_000),
                release_wait: ms(5_000),
                unit: None,
            },
            stop: StopSpec {
                signal: SignalName::SIGTERM,
                grace: ms(2000),
                budget: None,
                inflight: None,
            },
            critical: true,
            fatal_log_patterns: Vec::new(),
            slurm_step: None,
            terminal: None,
        }
    }

    /// Place worker `p` on these GPUs of this node (one endpoint of its own).
    pub fn on_gpus(&self, p: &mut ProcessSpec, gpus: &[u32]) {
        p.placement = Some(WorkerPlacement {
            endpoint: format!("{}[0]", p.name),
            nodes: vec![self.node.clone()],
            rank: 0,
            gpus: gpus.to_vec(),
            ports: vec![],
        });
    }

    /// The test child with `extra` flags, ready once it prints `up`.
    pub fn up(&self, name: &str, kind: ProcessKind, extra: &[&str]) -> ProcessSpec {
        let mut args = vec!["--ready-line", "up"];
        args.extend_from_slice(extra);
        let mut p = self.proc(name, kind, &args);
        p.readiness = ready_on_line("^up$", 10_000);
        p
    }

    pub fn plan(&self, processes: Vec<ProcessSpec>) -> Plan {
        Plan {
            node: NodeSummary {
                name: self.node.clone(),
                ip: "127.0.0.1".into(),
                node_id: 0,
                infra_node: self.node.clone(),
                infra_ip: "127.0.0.1".into(),
                runs_master: true,
                job_id: None,
                mode: "local".into(),
            },
            roles: vec![],
            roles_from: None,
            gates: vec![],
            processes,
            services: vec![],
            endpoint: None,
            benchmark: None,
            recipe_schema: String::new(),
            memory: Default::default(),
            redacted: false,
            network: Default::default(),
            notes: Vec::new(),
            files: vec![],
            dirs: vec![],
            scratch_dir: None,
            shutdown: ShutdownSpec {
                deadline: ms(10_000),
                drain_signal: SignalName::SIGUSR1,
                exit_when_workers_done: true,
                holds_ranks_of: Vec::new(),
                // No wait for in-flight requests unless a test asks for one.
                drain: ms(0),
            },
            log_dir: self.log_dir(),
            ignored_sections: vec![],
            warnings: vec![],
            control: None,
            periods: Default::default(),
            canary: Default::default(),
        }
    }

    /// Start `mcsup run --plan-file` on this plan (stdout/stderr to files in the temp dir).
    pub fn start(&self, plan: &Plan) -> Mcsup {
        self.start_with(plan, &[])
    }

    pub fn start_with(&self, plan: &Plan, extra: &[&str]) -> Mcsup {
        self.start_full(plan, extra, self.stdout_file())
    }

    /// Start with mcsup's stdout connected to `stdout` (e.g. a pipe nobody reads).
    pub fn start_full(&self, plan: &Plan, extra: &[&str], stdout: Stdio) -> Mcsup {
        self.launch(self.run_command(plan, extra), stdout)
    }

    /// [`TestEnv::start_with`] with these variables set for mcsup (e.g. [`nvml_stub`]'s).
    pub fn start_with_env(&self, plan: &Plan, extra: &[&str], env: &[(String, String)]) -> Mcsup {
        let mut cmd = self.run_command(plan, extra);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        self.launch(cmd, self.stdout_file())
    }

    /// `mcsup run --plan-file` with `plan` written to the test's directory.
    fn run_command(&self, plan: &Plan, extra: &[&str]) -> Command {
        let plan_path = self.path("plan.json");
        std::fs::write(
            &plan_path,
            serde_json::to_string_pretty(plan).expect("plan to json"),
        )
        .expect("write plan");
        let mut cmd = Command::new(MCSUP);
        cmd.arg("run")
            .arg("--plan-file")
            .arg(&plan_path)
            .args(extra);
        cmd
    }

    /// Spawn `cmd` (an `mcsup run`, possibly behind a wrapper) as the test's mcsup: debug log,
    /// stdin `/dev/null`, stderr to `mcsup.stderr` in the test's directory.
    pub fn launch(&self, mut cmd: Command, stdout: Stdio) -> Mcsup {
        let err = std::fs::File::create(self.path("mcsup.stderr")).expect("stderr file");
        let child = cmd
            .env("MCSUP_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(err)
            .spawn()
            .expect("spawn mcsup");
        Mcsup::new(self, &self.node, child, self.dir.path().to_path_buf())
    }

    /// Stdout to `mcsup.stdout` in the test's directory.
    pub fn stdout_file(&self) -> Stdio {
        Stdio::from(std::fs::File::create(self.path("mcsup.stdout")).expect("stdout file"))
    }

    /// Processes (alive, not zombies) carrying this test's tag.
    pub fn tagged_pids(&self) -> Vec<i32> {
        let needle = format!("MCSUP_TEST_TAG={}", self.tag);
        let mut out = Vec::new();
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return out;
        };
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(env) = std::fs::read(e.path().join("environ")) else {
                continue;
            };
            if env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()) && !is_zombie_or_gone(pid) {
                out.push(pid);
            }
        }
        out
    }

    /// Fail if any process of this test is left (after a short grace for exits in flight);
    /// kills them first so one failing test cannot leak into the next.
    pub fn assert_no_leftovers(&self) {
        let end = Instant::now() + ms(2000);
        loop {
            let left = self.tagged_pids();
            if left.is_empty() {
                return;
            }
            if Instant::now() > end {
                let desc: Vec<String> = left.iter().map(|p| describe(*p)).collect();
                for p in &left {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(*p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                panic!("processes left behind: {desc:?}");
            }
            std::thread::sleep(ms(20));
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        // Never leak processes into other tests, even when an assertion failed.
        for p in self.tagged_pids() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

pub fn describe(pid: i32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmd: Vec<String> = cmd
        .split(|&b| b == 0)
        .map(|s| String::from_utf8_lossy(s).to_string())
        .collect();
    format!("{pid}: {}", cmd.join(" "))
}

/// A process that no longer runs: gone, or a zombie.
pub fn is_zombie_or_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => {
            let state = s
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().next())
                .unwrap_or("");
            state == "Z" || state == "X"
        }
    }
}

/// `/proc/<pid>/status` field (e.g. `SigIgn`, `VmHWM`).
pub fn proc_status_field(pid: i32, field: &str) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

/// Wait for a condition, polling; panics with `what` on timeout.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > end {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(ms(5));
    }
}

/// Pids (one per line) in a file written by the test child.
pub fn read_pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A running mcsup.
pub struct Mcsup {
    pub child: Child,
    pub events_path: PathBuf,
    pub status_path: PathBuf,
    pub dir: PathBuf,
    pub started: Instant,
}

/// One line of the events file.
#[derive(Debug, Clone)]
pub struct Ev {
    pub process: String,
    pub event: String,
    pub t_ms: f64,
    pub pid: Option<i32>,
    pub exit_code: Option<i32>,
    pub raw: Value,
}

impl Mcsup {
    /// A handle on a running `mcsup` for `node`, whose log directory is the test's.
    pub fn new(env: &TestEnv, node: &str, child: Child, dir: PathBuf) -> Mcsup {
        Mcsup {
            child,
            events_path: env.log_dir().join(format!("{node}.events.jsonl")),
            status_path: env.log_dir().join(format!("{node}.status.json")),
            dir,
            started: Instant::now(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).expect("signal mcsup");
    }

    pub fn events(&self) -> Vec<Ev> {
        read_events(&self.events_path)
    }

    /// Wait until `process` has logged `event`; returns that event.
    pub fn wait_event(&mut self, process: &str, event: &str, timeout: Duration) -> Ev {
        let what = format!("{process} {event}");
        let end = Instant::now() + timeout;
        loop {
            if let Some(e) = self
                .events()
                .into_iter()
                .find(|e| e.process == process && e.event == event)
            {
                return e;
            }
            if Instant::now() > end {
                let evs: Vec<String> = self
                    .events()
                    .iter()
                    .map(|e| format!("{} {}", e.process, e.event))
                    .collect();
                self.kill_hard();
                panic!(
                    "timed out waiting for `{what}`; events: {evs:#?}\nstderr: {}",
                    self.stderr()
                );
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                let evs: Vec<String> = self
                    .events()
                    .iter()
                    .map(|e| format!("{} {}", e.process, e.event))
                    .collect();
                if let Some(e) = self
                    .events()
                    .into_iter()
                    .find(|e| e.process == process && e.event == event)
                {
                    return e;
                }
                panic!(
                    "mcsup exited ({st}) before `{what}`; events: {evs:#?}\nstderr: {}",
                    self.stderr()
                );
            }
            std::thread::sleep(ms(5));
        }
    }

    /// Index of the first matching event (for order assertions).
    pub fn index_of(evs: &[Ev], process: &str, event: &str) -> usize {
        evs.iter()
            .position(|e| e.process == process && e.event == event)
            .unwrap_or_else(|| {
                panic!(
                    "no `{process} {event}` in {:#?}",
                    evs.iter()
                        .map(|e| format!("{} {}", e.process, e.event))
                        .collect::<Vec<_>>()
                )
            })
    }

    pub fn find(evs: &[Ev], process: &str, event: &str) -> Ev {
        evs[Self::index_of(evs, process, event)].clone()
    }

    /// Wait for mcsup to exit; returns its exit code. SIGKILLs it and fails on timeout.
    pub fn wait_exit(&mut self, timeout: Duration) -> i32 {
        let end = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) => {
                    use std::os::unix::process::ExitStatusExt;
                    return st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
                }
                Ok(None) => {}
                Err(e) => panic!("wait mcsup: {e}"),
            }
            if Instant::now() > end {
                let evs: Vec<String> = self
                    .events()
                    .iter()
                    .map(|e| format!("{} {}", e.process, e.event))
                    .collect();
                self.kill_hard();
                panic!(
                    "mcsup did not exit within {timeout:?}; events: {evs:#?}\nstderr: {}",
                    self.stderr()
                );
            }
            std::thread::sleep(ms(5));
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("mcsup.stderr")).unwrap_or_default()
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.join("mcsup.stdout")).unwrap_or_default()
    }

    pub fn kill_hard(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The status file as JSON.
    pub fn status(&self) -> Option<Value> {
        serde_json::from_str(&std::fs::read_to_string(&self.status_path).ok()?).ok()
    }

    /// Current pid of a process: its last spawn's, unless that run has ended. From the events
    /// file, which is written as things happen (the status file follows within 25 ms).
    pub fn pid_of(&self, name: &str) -> Option<i32> {
        let mut pid = None;
        for e in self.events().iter().filter(|e| e.process == name) {
            match e.event.as_str() {
                "spawned" => pid = e.pid,
                "exited" | "stopped" | "completed" => pid = None,
                _ => {}
            }
        }
        pid
    }
}

impl Drop for Mcsup {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill_hard();
        }
    }
}

/// Parse an events file (`<node>.events.jsonl`); missing or partial lines are skipped.
/// The events of an events file. Every complete line must be a
/// [`mcsup::supervisor::EventRecord`] (the public type of the file); only a half-written last
/// line is skipped.
/// A healthy run raises no diagnosis: no event of any `*.events.jsonl` in `log_dir` is a match
/// of the failure catalogue (its false-positive corpus is every healthy end-to-end run).
pub fn assert_no_diagnosis(log_dir: &Path) {
    let mut found = Vec::new();
    for e in std::fs::read_dir(log_dir).unwrap().flatten() {
        let p = e.path();
        if p.to_string_lossy().ends_with(".events.jsonl") {
            found.extend(
                read_events(&p)
                    .into_iter()
                    .filter(|e| e.raw["diagnosis"].is_object())
                    .map(|e| e.raw.to_string()),
            );
        }
    }
    assert!(
        found.is_empty(),
        "a healthy run raised diagnoses:\n{}",
        found.join("\n")
    );
}

pub fn read_events(path: &Path) -> Vec<Ev> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| {
            let r: mcsup::supervisor::EventRecord = serde_json::from_value(v.clone())
                .unwrap_or_else(|e| panic!("{}: not an EventRecord ({e}): {v}", path.display()));
            assert_ne!(
                r.event,
                mcsup::runfiles::EventKind::Other,
                "{}: an event name mcsup's own EventKind does not know: {v}",
                path.display()
            );
            Ev {
                process: r.process,
                event: r.event.to_string(),
                t_ms: r.t_ms,
                pid: r.pid,
                exit_code: r.exit_code,
                raw: v,
            }
        })
        .collect()
}

/// Count events by (process, event).
pub fn counts(evs: &[Ev]) -> HashMap<(String, String), usize> {
    let mut m = HashMap::new();
    for e in evs {
        *m.entry((e.process.clone(), e.event.clone())).or_insert(0) += 1;
    }
    m
}

/// A process's argv or environment, from /proc.
fn proc_strings(pid: i32, what: &str) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/{what}"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// A process's argv.
pub fn cmdline(pid: i32) -> Vec<String> {
    proc_strings(pid, "cmdline")
}

/// A process's environment as `NAME=value` strings.
pub fn environ(pid: i32) -> Vec<String> {
    proc_strings(pid, "environ")
}

/// Events as `process event` lines, for assertion messages.
pub fn names(evs: &[Ev]) -> Vec<String> {
    evs.iter()
        .map(|e| format!("{} {}", e.process, e.event))
        .collect()
}

/// Start `mcsup run --recipe RECIPE ARGS` in `<env>/<dir_name>` (its own TMPDIR too), with the
/// venv first on PATH, outside any Slurm job; `wrapper` runs it (e.g. `nsenter --net=...`).
pub fn start_recipe(
    env: &TestEnv,
    dir_name: &str,
    wrapper: &[String],
    recipe: &Path,
    args: &[&str],
) -> Mcsup {
    let dir = env.path(dir_name);
    std::fs::create_dir_all(&dir).unwrap();
    let path = format!(
        "{}:{}",
        recipe::venv_bin().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (program, pre): (&str, &[String]) = match wrapper.split_first() {
        Some((p, rest)) => (p.as_str(), rest),
        None => (MCSUP, &[]),
    };
    let mut cmd = Command::new(program);
    cmd.args(pre);
    if !wrapper.is_empty() {
        cmd.arg(MCSUP);
    }
    let child = cmd
        .arg("run")
        .arg("--recipe")
        .arg(recipe)
        .args(args)
        .env("PATH", path)
        .env("TMPDIR", &dir)
        .env("MCSUP_TEST_TAG", &env.tag)
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_JOB_NODELIST")
        .env_remove("SLURMD_NODENAME")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("mcsup.stderr")).unwrap())
        .spawn()
        .expect("spawn mcsup");
    let node = args
        .windows(2)
        .find(|w| w[0] == "--node")
        .map(|w| w[1].to_string())
        .unwrap_or_else(|| nix::unistd::gethostname().unwrap().into_string().unwrap());
    Mcsup::new(env, &node, child, dir)
}

/// The NVML stand-in the workspace builds (`stubs/nvml`), as `libnvidia-ml.so.1` in a directory
/// of its own, and a state file for it.
pub fn nvml_stub(state: &serde_json::Value) -> (tempfile::TempDir, Vec<(String, String)>) {
    let built = std::env::current_exe()
        .unwrap()
        .parent()
        .and_then(std::path::Path::parent)
        .unwrap()
        .join("libmcsup_nvml_stub.so");
    require(
        built.exists(),
        &built.display().to_string(),
        "build the workspace (`cargo build --workspace`; scripts/test.sh does)",
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&built, dir.path().join("libnvidia-ml.so.1")).unwrap();
    let state_path = dir.path().join("state.json");
    std::fs::write(&state_path, state.to_string()).unwrap();
    let env = vec![
        (
            "LD_LIBRARY_PATH".to_string(),
            dir.path().display().to_string(),
        ),
        (
            "MCSUP_NVML_STUB_STATE".to_string(),
            state_path.display().to_string(),
        ),
    ];
    (dir, env)
}

/// A Python process listening on 127.0.0.1:`port` (outside mcsup's tree), tagged with `env`'s
/// tag, returned once it listens; as uid `user` (through setpriv) when given.
pub fn python_listener(env: &TestEnv, port: u16, user: Option<u32>) -> Child {
    let mut cmd = match user {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .args(["--clear-groups", "/usr/bin/python3"]);
            c
        }
        None => Command::new("python3"),
    };
    let mut child = cmd
        .args([
            "-c",
            "import socket,sys,time\ns=socket.socket()\ns.bind(('127.0.0.1',int(sys.argv[1])))\ns.listen()\nprint('up',flush=True)\ntime.sleep(60)",
        ])
        .arg(port.to_string())
        .env("MCSUP_TEST_TAG", &env.tag)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("its stdout")),
        &mut line,
    )
    .expect("the listener's first line");
    assert_eq!(line.trim(), "up", "the listener did not start");
    child
}
