//! Hardening against signals and a stuck stderr (issue 12, items 3 and 4): the real `mcsup run
//! --plan-file`, real signals, the `mcsup-testchild` helper. Every catchable signal whose default
//! action would end mcsup must either start the ordered teardown or be ignored (the table is in
//! `src/supervisor/signals.rs`); a file-size limit must not kill mcsup; a stderr nobody reads
//! must not freeze the loop. Each test bounds every wait and ends by proving nothing is left.

mod common;

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
    let up = |name: &str, kind, extra: &[&str]| {
        let mut args = vec!["--ready-line", "up"];
        args.extend_from_slice(extra);
        let mut p = env.proc(name, kind, &args);
        p.readiness = ready_on_line("^up$", 10_000);
        p
    };
    let master = up("master", ProcessKind::Master, &[]);
    let mut worker = up(
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
    let child = Command::new(MCSUP)
        .arg("run")
        .arg("--plan-file")
        .arg(&fifo)
        .env("MCSUP_LOG", "debug")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(env.path("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(env.path("mcsup.stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut m = Mcsup::new(&env, &env.node, child, env.dir.path().to_path_buf());
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
    let plan_path = env.path("plan.json");
    std::fs::write(&plan_path, serde_json::to_string_pretty(plan).unwrap()).unwrap();
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -f {blocks}; exec \"$0\" \"$@\""))
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
