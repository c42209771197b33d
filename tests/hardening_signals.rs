//! Hardening against signals and a stuck stderr (issue 12, items 3 and 4): the real `mcsup run
//! --plan-file`, real signals, the `mcsup-testchild` helper. Every catchable signal whose default
//! action would end mcsup must either start the ordered teardown or be ignored (the table is in
//! `src/supervisor/signals.rs`); a file-size limit must not kill mcsup; a stderr nobody reads
//! must not freeze the loop. Each test bounds every wait and ends by proving nothing is left.

use crate::common;

use std::os::fd::{AsFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use mcsup::plan::*;
use nix::sys::signal::Signal;

const T: Duration = Duration::from_secs(15);

/// master <- worker, each ready once it prints `up` (after installing its signal handlers); the
/// worker also starts a setsid grandchild, which only an orderly teardown (the subreaper's
/// sweep) takes down: if mcsup dies of the signal, PDEATHSIG kills its children but not that one.
fn pair(env: &TestEnv) -> Plan {
    let master = env.up("master", ProcessKind::Master, &[]);
    let mut worker = env.up(
        "worker",
        ProcessKind::Worker,
        &["--grandchild", "setsid", "--grandchild-quiet"],
    );
    dep(&mut worker, "master");
    env.plan(vec![master, worker])
}

fn send(m: &Mcsup, sig: i32) {
    // SAFETY: kill with a valid pid and signal number.
    let rc = unsafe { libc::kill(m.pid(), sig) };
    assert_eq!(rc, 0, "kill({}, {sig})", m.pid());
}

/// Start the pair, wait until it is up, send `sig` to mcsup, and assert the ordered teardown:
/// exit 0, the reason names the signal, the worker stopped before the master was asked to, the
/// status file says `stopped`, nothing left.
fn assert_stop_request(sig: Signal, drain: Signal) {
    let env = TestEnv::new();
    let mut plan = pair(&env);
    plan.shutdown.drain_signal = SignalName(drain);
    let mut m = env.start(&plan);
    m.wait_event("worker", "ready", T);
    m.signal(sig);
    let code = m.wait_exit(T);
    let evs = m.events();
    assert_eq!(
        code,
        0,
        "{sig}: exit code; events {:#?}\nstderr:\n{}",
        names(&evs),
        m.stderr()
    );
    let detail = Mcsup::find(&evs, "mcsup", "shutdown-requested").raw["detail"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(detail.contains(sig.as_str()), "{sig}: reason `{detail}`");
    assert!(
        Mcsup::index_of(&evs, "worker", "stopped") < Mcsup::index_of(&evs, "master", "stopping"),
        "{sig}: teardown order {:#?}",
        names(&evs)
    );
    Mcsup::find(&evs, "master", "stopped");
    Mcsup::find(&evs, "mcsup", "finished");
    let status = m.status().expect("status file");
    assert_eq!(status["phase"], "stopped", "{sig}: {status}");
    assert_eq!(status["exit_code"], 0, "{sig}: {status}");
    env.assert_no_leftovers();
}

#[test]
fn sigquit_is_an_ordered_stop_request() {
    assert_stop_request(Signal::SIGQUIT, Signal::SIGUSR1);
}

#[test]
fn sigusr2_is_an_ordered_stop_request_when_it_is_not_the_drain_signal() {
    assert_stop_request(Signal::SIGUSR2, Signal::SIGUSR1);
}

#[test]
fn sigusr1_is_an_ordered_stop_request_when_sigusr2_drains() {
    assert_stop_request(Signal::SIGUSR1, Signal::SIGUSR2);
}

#[test]
fn sigalrm_is_an_ordered_stop_request() {
    assert_stop_request(Signal::SIGALRM, Signal::SIGUSR1);
}

#[test]
fn sigpwr_is_an_ordered_stop_request() {
    assert_stop_request(Signal::SIGPWR, Signal::SIGUSR1);
}

#[test]
fn sighup_is_an_ordered_stop_request() {
    assert_stop_request(Signal::SIGHUP, Signal::SIGUSR1);
}

#[test]
fn every_other_terminating_signal_is_an_ordered_stop_request() {
    for sig in [
        Signal::SIGVTALRM,
        Signal::SIGPROF,
        Signal::SIGIO,
        Signal::SIGSTKFLT,
        Signal::SIGXCPU,
        Signal::SIGSYS,
    ] {
        assert_stop_request(sig, Signal::SIGUSR1);
    }
}

#[test]
fn realtime_signals_are_ignored_and_reported() {
    let env = TestEnv::new();
    let mut m = env.start(&pair(&env));
    m.wait_event("worker", "ready", T);
    let rt = libc::SIGRTMIN() + 2;
    send(&m, rt);
    let ev = m.wait_event("mcsup", "signal-ignored", T);
    let detail = ev.raw["detail"].as_str().unwrap_or("").to_string();
    assert!(detail.contains("SIGRTMIN+2"), "detail `{detail}`");
    assert!(
        m.child.try_wait().unwrap().is_none(),
        "mcsup still runs after SIGRTMIN+2"
    );
    assert!(
        !m.events().iter().any(|e| e.event == "shutdown-requested"),
        "an ignored signal starts no teardown"
    );
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    Mcsup::find(&m.events(), "worker", "stopped");
    env.assert_no_leftovers();
}

/// Every thread of a running mcsup but the loop's blocks the signals the loop handles, so a
/// process-directed signal is always taken by the loop's thread (a writer thread with the
/// default action used to end mcsup while the loop's thread held them in a preflight helper).
#[test]
fn only_the_loops_thread_takes_the_signals_it_handles() {
    let env = TestEnv::new();
    let mut m = env.start(&pair(&env));
    m.wait_event("worker", "ready", T);
    let pid = m.pid();
    let bit = |sig: Signal| 1u64 << (sig as i32 - 1);
    let handled = [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGUSR1,
        Signal::SIGUSR2,
    ]
    .iter()
    .fold(0u64, |m, &s| m | bit(s));
    let mut others = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let tid: i32 = task.file_name().to_string_lossy().parse().unwrap();
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
                .unwrap()
        };
        let (blocked, name) = (
            field("SigBlk:"),
            status.lines().next().unwrap_or("").to_string(),
        );
        if tid == pid {
            assert_eq!(
                blocked & handled,
                0,
                "the loop's thread blocks some: {blocked:x}"
            );
        } else {
            others += 1;
            assert_eq!(
                blocked & handled,
                handled,
                "{name} (tid {tid}) takes some: {blocked:x}"
            );
        }
    }
    assert!(others >= 1, "no writer thread to check (stderr, console)");
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

/// A fault signal, sent from outside (`kill -ABRT`, as the adversarial run did): mcsup cannot
/// trust its own state, so it does not tear down in order, but before it dies of the signal it
/// SIGKILLs every process group it started: the worker's grandchild, in the worker's group, no
/// longer outlives it (PDEATHSIG reaches only mcsup's direct children).
#[test]
fn a_fault_signal_kills_every_group_before_mcsup_dies_of_it() {
    // No core files from the deaths this test causes.
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0).unwrap();
    for sig in [
        Signal::SIGABRT,
        Signal::SIGTRAP,
        Signal::SIGILL,
        Signal::SIGFPE,
    ] {
        let env = TestEnv::new();
        let master = env.up("master", ProcessKind::Master, &[]);
        let pids = env.path("grandchildren");
        let mut worker = env.up(
            "worker",
            ProcessKind::Worker,
            &[
                "--grandchild",
                "plain",
                "--grandchild",
                "plain",
                "--grandchild-ignore-term",
                "--grandchild-quiet",
                "--grandchild-pid-file",
                pids.to_str().unwrap(),
            ],
        );
        dep(&mut worker, "master");
        let mut m = env.start(&env.plan(vec![master, worker]));
        m.wait_event("worker", "ready", T);
        let grandchildren = wait_for("two grandchildren", T, || {
            let p = read_pids(&pids);
            (p.len() == 2).then_some(p)
        });
        m.signal(sig);
        let code = m.wait_exit(T);
        assert_eq!(code, 128 + sig as i32, "{sig}: {}", m.stderr());
        assert!(
            m.stderr()
                .contains(&format!("mcsup: {sig}: killing every process group")),
            "{sig}: {}",
            m.stderr()
        );
        for g in grandchildren {
            wait_for("the grandchild to be gone", T, || {
                is_zombie_or_gone(g).then_some(())
            });
        }
        env.assert_no_leftovers();
    }
}

/// A real-time signal that comes before the loop listens (here while mcsup waits to read its
/// plan from a FIFO) is held from the start of `main`, then reported once the loop reads it: it
/// neither kills mcsup (the default action) nor starts a teardown.
#[test]
fn a_realtime_signal_before_the_loop_listens_is_held_then_reported() {
    let env = TestEnv::new();
    let fifo = env.path("plan.fifo");
    nix::unistd::mkfifo(
        &fifo,
        nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
    )
    .unwrap();
    let mut cmd = Command::new(MCSUP);
    cmd.arg("run").arg("--plan-file").arg(&fifo);
    let mut m = env.launch(cmd, env.stdout_file());
    let rt = libc::SIGRTMIN() + 5;
    // mcsup is in `main`, past the block, once its mask shows the signal (it then waits for a
    // writer on the FIFO).
    let pid = m.pid();
    wait_for("mcsup to block the real-time signals", T, || {
        let blocked = u64::from_str_radix(&proc_status_field(pid, "SigBlk")?, 16).ok()?;
        (blocked & (1u64 << (rt - 1)) != 0).then_some(())
    });
    send(&m, rt);
    std::fs::write(&fifo, serde_json::to_string(&pair(&env)).unwrap()).unwrap();
    let ev = m.wait_event("mcsup", "signal-ignored", T);
    let detail = ev.raw["detail"].as_str().unwrap_or("").to_string();
    assert!(detail.contains("SIGRTMIN+5"), "detail `{detail}`");
    m.wait_event("worker", "ready", T);
    assert!(
        !m.events().iter().any(|e| e.event == "shutdown-requested"),
        "a held real-time signal starts no teardown"
    );
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

/// `sh -c 'ulimit -f 64; exec mcsup run --plan-file P'`: writes past 32 KiB (dash counts
/// 512-byte blocks) fail; with the default SIGXFSZ action the first one would kill mcsup.
fn start_under_file_limit(env: &TestEnv, plan: &Plan, blocks: u32) -> Mcsup {
    start_under_ulimit(env, plan, &format!("-f {blocks}"))
}

/// `sh -c 'ulimit <limit>; exec mcsup run --plan-file P'`.
fn start_under_ulimit(env: &TestEnv, plan: &Plan, limit: &str) -> Mcsup {
    let plan_path = env.path("plan.json");
    std::fs::write(&plan_path, serde_json::to_string_pretty(plan).unwrap()).unwrap();
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit {limit}; exec \"$0\" \"$@\""))
        .arg(MCSUP)
        .arg("run")
        .arg("--plan-file")
        .arg(&plan_path)
        .env("MCSUP_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(env.path("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(env.path("mcsup.stderr")).unwrap())
        .spawn()
        .expect("spawn sh");
    Mcsup::new(env, &env.node, child, env.dir.path().to_path_buf())
}

#[test]
fn file_size_limit_fails_writes_instead_of_killing_mcsup() {
    let env = TestEnv::new();
    // ~400 KB of output: far past the 32 KiB its log file may grow to.
    let mut w = env.proc(
        "worker",
        ProcessKind::Worker,
        &["--lines", "4000", "--ready-line", "all written"],
    );
    w.readiness = ready_on_line("^all written$", 10_000);
    let mut m = start_under_file_limit(&env, &env.plan(vec![w]), 64);
    m.wait_event("worker", "ready", T);
    let ev = m.wait_event("mcsup", "signal-ignored", T);
    let detail = ev.raw["detail"].as_str().unwrap_or("").to_string();
    assert!(
        detail.contains("SIGXFSZ") && detail.contains("EFBIG"),
        "the lost writes are reported: `{detail}`"
    );
    let log = std::fs::metadata(env.log_dir().join("n1.worker.log")).unwrap();
    assert!(
        log.len() <= 64 * 512,
        "the limit applied: {} bytes",
        log.len()
    );
    // The child does not inherit an ignored SIGXFSZ: the limit means for it what it always did.
    let kid = wait_for("worker pid", T, || m.pid_of("worker"));
    let ign = proc_status_field(kid, "SigIgn").expect("SigIgn");
    let mask = u64::from_str_radix(&ign, 16).unwrap();
    assert_eq!(
        mask & (1 << (libc::SIGXFSZ - 1)),
        0,
        "SIGXFSZ not ignored in the child: {ign}"
    );
    // Still supervising: SIGTERM gets the ordered teardown and a clean exit.
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let evs = m.events();
    Mcsup::find(&evs, "worker", "stopped");
    let fin = Mcsup::find(&evs, "mcsup", "finished").raw["detail"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        fin.contains("over the file size limit"),
        "the final record counts the failed writes: `{fin}`"
    );
    env.assert_no_leftovers();
}

/// A pipe that already holds all but `room` bytes of its capacity, with O_NONBLOCK cleared again
/// (it is one open file description: mcsup must get the blocking pipe a stuck srun gives it).
fn nearly_full_pipe(room: usize) -> (OwnedFd, OwnedFd) {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let (r, w) = nix::unistd::pipe().expect("pipe");
    fcntl(w.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).unwrap();
    let cap = fcntl(w.as_fd(), FcntlArg::F_GETPIPE_SZ).unwrap() as usize;
    let fill = vec![b'#'; cap.saturating_sub(room)];
    let mut done = 0;
    while done < fill.len() {
        match nix::unistd::write(&w, &fill[done..]) {
            Ok(n) => done += n,
            Err(nix::errno::Errno::EAGAIN) => break,
            Err(e) => panic!("fill pipe: {e}"),
        }
    }
    fcntl(w.as_fd(), FcntlArg::F_SETFL(OFlag::empty())).unwrap();
    (r, w)
}

#[test]
fn stalled_stderr_never_blocks_the_loop_and_drops_are_counted() {
    let env = TestEnv::new();
    // Crash loops: every run logs a few lines (spawned, exited, restarting) on mcsup's stderr.
    let crashing = |name: &str| {
        let mut w = env.proc(
            name,
            ProcessKind::Worker,
            &["--print", "crash", "--exit-after", "5", "--code", "1"],
        );
        w.restart.policy = RestartPolicy::OnFailure;
        w.restart.max_restarts = 100_000;
        w.restart.backoff_initial = ms(5);
        w.restart.backoff_max = ms(10);
        w
    };
    let plan = env.plan((0..4).map(|i| crashing(&format!("w{i}"))).collect());
    std::fs::write(
        env.path("plan.json"),
        serde_json::to_string_pretty(&plan).unwrap(),
    )
    .unwrap();
    // Room for mcsup to start and spawn, then the pipe is full and nobody ever reads it.
    let (_reader, writer) = nearly_full_pipe(4096);
    let child = Command::new(MCSUP)
        .arg("run")
        .arg("--plan-file")
        .arg(env.path("plan.json"))
        .env("MCSUP_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(env.path("mcsup.stdout")).unwrap())
        .stderr(Stdio::from(writer))
        .spawn()
        .expect("spawn mcsup");
    let mut m = Mcsup::new(&env, &env.node, child, env.dir.path().to_path_buf());
    // Restarts go on long after the pipe is full (4 KiB is a dozen restarts' worth of lines)
    // and after mcsup's own queue is full too (64 KiB, a few hundred).
    wait_for("the crash loops to keep restarting", T, || {
        let spawned = m.events().iter().filter(|e| e.event == "spawned").count();
        (spawned >= 400).then_some(())
    });
    let t0 = Instant::now();
    m.signal(Signal::SIGTERM);
    let code = m.wait_exit(T);
    let took = t0.elapsed();
    let evs = m.events();
    assert_eq!(code, 0, "events {:#?}", names(&evs));
    assert!(
        took < Duration::from_secs(5),
        "the ordered teardown took {took:?}"
    );
    Mcsup::find(&evs, "mcsup", "shutdown-requested");
    let fin = Mcsup::find(&evs, "mcsup", "finished").raw["detail"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let dropped: u64 = fin
        .split("; ")
        .find_map(|part| part.strip_suffix(" lines of mcsup's own log dropped (stderr was full)"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no dropped-line count in `{fin}`"));
    assert!(dropped > 0, "`{fin}`");
    env.assert_no_leftovers();
}

/// With /proc out of sight (here a mount namespace with an empty tmpfs over it; on a cluster, a
/// `hidepid` mount or a container without /proc), the final sweep for reparented descendants
/// cannot look. It used to find "nothing" and say nothing; now the `sweep-blind` event and the
/// log say what it could not do and the fix. The setsid'd grandchild it could not see is left,
/// as the event says (the test kills it).
#[test]
fn a_sweep_that_cannot_see_says_so() {
    require(
        nix::unistd::geteuid().is_root(),
        "root (unshare --mount)",
        "run the tests as root (the CI does)",
    );
    let env = TestEnv::new();
    let pids = env.path("grandchildren");
    // A shell, not the test child (which finds itself through /proc/self/exe).
    let mut worker = env.proc("worker", ProcessKind::Worker, &[]);
    worker.argv = ["sh", "-c"]
        .map(String::from)
        .into_iter()
        .chain([format!(
            // The sleeper writes its own pid: `$!` would be setsid's if setsid forked.
            "setsid sh -c 'echo $$ > {}.tmp && mv {}.tmp {} && exec sleep 300' </dev/null >/dev/null 2>&1 & while [ ! -s {} ]; do sleep 0.01; done; echo up; exec sleep 300",
            pids.display(), pids.display(), pids.display(), pids.display()
        )])
        .collect();
    worker.readiness = ready_on_line("^up$", 10_000);
    let plan_path = env.path("plan.json");
    std::fs::write(
        &plan_path,
        serde_json::to_string(&env.plan(vec![worker])).unwrap(),
    )
    .unwrap();
    let script = format!(
        "mount -t tmpfs none /proc && exec {MCSUP} run --plan-file {}",
        plan_path.display()
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(&script);
    let mut m = env.launch(cmd, env.stdout_file());
    m.wait_event("worker", "ready", T);
    let grandchild = wait_for("the grandchild", T, || read_pids(&pids).first().copied());
    m.signal(Signal::SIGTERM);
    let code = m.wait_exit(T);
    let evs = m.events();
    let blind = Mcsup::find(&evs, "mcsup", "sweep-blind");
    let detail = blind.raw["detail"].as_str().unwrap_or("").to_string();
    assert!(
        detail.contains("cannot read /proc/self/task") && detail.contains("fix:"),
        "{detail}"
    );
    assert!(
        m.stderr().contains("the orphan sweep could not look"),
        "{}",
        m.stderr()
    );
    assert_eq!(code, 0, "{}", m.stderr());
    // What it said may be left, is.
    assert!(!is_zombie_or_gone(grandchild), "the grandchild went anyway");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(grandchild), Signal::SIGKILL);
    env.assert_no_leftovers();
}

/// Issue 30, item 3: after the teardown every port the plan listened on must be free. One that
/// is still listened on (here by a listener outside mcsup's tree, as an escaped process or
/// another job would be) is named in a `port-held` event; the released one is not.
#[test]
fn a_port_still_held_after_the_teardown_is_named() {
    let env = TestEnv::new();
    let (mine, held) = (free_port(), free_port());
    let mut w = env.proc("w", ProcessKind::Worker, &["--listen", &mine.to_string()]);
    w.readiness = readiness(
        vec![ProbeSpec::Tcp {
            host: "127.0.0.1".into(),
            port: mine,
        }],
        10_000,
    );
    // Ready once the outside listener answers (it is there before mcsup starts).
    let mut other = env.proc("other", ProcessKind::Worker, &[]);
    other.readiness = readiness(
        vec![ProbeSpec::Tcp {
            host: "127.0.0.1".into(),
            port: held,
        }],
        10_000,
    );
    let mut listener = python_listener(&env, held, None);
    let mut m = env.start_with(&env.plan(vec![w, other]), &["--skip-preflight"]);
    m.wait_event("other", "ready", T);
    m.wait_event("w", "ready", T);
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let evs = m.events();
    let held_events: Vec<&Ev> = evs.iter().filter(|e| e.event == "port-held").collect();
    let _ = listener.kill();
    let _ = listener.wait();
    assert_eq!(held_events.len(), 1, "{:#?}", names(&evs));
    let detail = held_events[0].raw["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains(&format!("port {held}"))
            && detail.contains(&format!("pid {}", listener.id()))
            && detail.contains("python3"),
        "{detail}"
    );
    assert_eq!(held_events[0].process, "other");
    env.assert_no_leftovers();
}

/// Issue 30, item 3: after the teardown nothing may be left on the job's GPUs. NVML (the
/// workspace's stand-in) still lists a process on GPU 0 after everything mcsup started is gone
/// (here a process outside mcsup's tree, as an escaped one or another job's would be): a
/// `gpu-held` event names it, with its memory.
#[test]
fn a_process_left_on_the_jobs_gpu_is_named() {
    let env = TestEnv::new();
    let mut stray = Command::new("sleep")
        .arg("60")
        .env("MCSUP_TEST_TAG", &env.tag)
        .spawn()
        .unwrap();
    let (_stub, stub_env) = nvml_stub(&serde_json::json!({"gpus": [{
        "total": 80u64 << 30, "used": 21u64 << 30,
        "processes": [{"pid": stray.id(), "used": 20u64 << 30}]
    }]}));
    let mut w = env.up("w", ProcessKind::Worker, &[]);
    env.on_gpus(&mut w, &[0]);
    let mut m = env.start_with_env(&env.plan(vec![w]), &["--skip-preflight"], &stub_env);
    m.wait_event("w", "ready", T);
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let evs = m.events();
    let _ = stray.kill();
    let _ = stray.wait();
    let held = Mcsup::find(&evs, "mcsup", "gpu-held");
    let detail = held.raw["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains(&format!(
            "GPU 0 still has a process on it after the teardown: pid {} (sleep 60)",
            stray.id()
        )) && detail.contains("holding 20.0 GiB"),
        "{detail}"
    );
    env.assert_no_leftovers();
}

/// Round 4's M7: under a soft open-files limit far below what the plan needs (`ulimit -Sn 64`,
/// 40 workers: each costs mcsup an output pipe, a log file and, while it starts, an exec
/// handshake), mcsup raises its own soft limit to the hard one at start, every worker starts,
/// each keeps the limit it was given, and the teardown finishes. Before, half the spawns failed
/// with EMFILE and the teardown's timer could not be made.
#[test]
fn a_low_soft_open_files_limit_is_raised_for_mcsup_and_kept_for_its_processes() {
    let env = TestEnv::new();
    let mut procs: Vec<ProcessSpec> = (0..40)
        .map(|i| env.up(&format!("w{i}"), ProcessKind::Worker, &[]))
        .collect();
    let mut probe = env.proc("limit", ProcessKind::Worker, &[]);
    probe.argv = vec![
        "sh".into(),
        "-c".into(),
        "echo \"soft=$(ulimit -Sn)\"; exec sleep 600".into(),
    ];
    probe.readiness = ready_on_line("^soft=", 10_000);
    procs.push(probe);
    let mut m = start_under_ulimit(&env, &env.plan(procs), "-Sn 64");
    m.wait_event("limit", "ready", T);
    for i in 0..40 {
        m.wait_event(&format!("w{i}"), "ready", T);
    }
    assert!(
        m.stderr()
            .contains("open files: mcsup's own limit raised from 64 to"),
        "{}",
        m.stderr()
    );
    let log =
        std::fs::read_to_string(env.log_dir().join(format!("{}.limit.log", env.node))).unwrap();
    assert!(
        log.contains("soft=64"),
        "the process keeps the limit it was given: {log}"
    );
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

/// Round 4's N28: a resolver that never answers held `mcsup run` for 10 s per node, with SIGTERM
/// waiting all along (600 nodes: still alive 5 s after it). Here, in a network and mount
/// namespace of the test's own, `/etc/resolv.conf` names a server on 127.0.0.9 that swallows every
/// query: the lookups run side by side within a budget, and a SIGTERM ends the wait at once.
#[test]
fn a_stop_request_is_not_held_behind_a_resolver_that_never_answers() {
    require(
        nix::unistd::geteuid().is_root(),
        "root (unshare --net --mount)",
        "run the tests as root (the CI does)",
    );
    let env = TestEnv::new();
    let (resolv, hosts, pid_file) = (env.path("resolv.conf"), env.path("hosts"), env.path("pid"));
    std::fs::write(
        &resolv,
        "nameserver 127.0.0.9\noptions timeout:5 attempts:2\n",
    )
    .unwrap();
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    let swallow = "import socket, sys\n\
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('127.0.0.9', 53))\n\
        print('bound', flush=True)\n\
        while True: s.recv(4096)\n";
    let recipe = concat!(env!("CARGO_MANIFEST_DIR"), "/recipes/local.yaml");
    let script = format!(
        "set -e; ip link set lo up; mount --bind {resolv} /etc/resolv.conf; mount --bind {hosts} /etc/hosts
        python3 -c \"$SWALLOW\" > {dir}/bound & dns=$!
        until [ -s {dir}/bound ]; do sleep 0.01; done
        set +e; {MCSUP} run --recipe {recipe} --node n1 --nodelist 'n[1-600]' --role agg --log-dir {dir}/logs & echo $! > {pid}
        wait $!; rc=$?; kill $dns; wait $dns; exit $rc",
        resolv = resolv.display(),
        hosts = hosts.display(),
        dir = env.dir.path().display(),
        pid = pid_file.display(),
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["--net", "--mount", "--propagation", "private", "sh", "-c"])
        .arg(&script)
        .env("SWALLOW", swallow)
        .env("MCSUP_TEST_TAG", &env.tag);
    let mut m = env.launch(cmd, env.stdout_file());
    let pid: i32 = wait_for("mcsup's pid", T, || {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    });
    // Well inside the lookups: a tenth of the budget a single name gets.
    std::thread::sleep(Duration::from_millis(500));
    let asked = Instant::now();
    // SAFETY: kill with a valid pid and signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let code = m.wait_exit(Duration::from_secs(60));
    let took = asked.elapsed();
    let stderr = m.stderr();
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("SIGTERM during the plan on n1: stopped before anything started"),
        "{stderr}"
    );
    // Before the lookups' own budget could have ended them: the stop request did.
    assert!(took < mcsup::node::LOOKUP_BUDGET, "{took:?}\n{stderr}");
    env.assert_no_leftovers();
}
