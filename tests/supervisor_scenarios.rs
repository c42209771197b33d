//! End-to-end supervisor scenarios: the real `mcsup run --plan-file`, real children (the
//! `mcsup-testchild` helper), real signals. Each test synchronises on the events file (never on
//! fixed sleeps), bounds every wait, and proves at the end that no process it started is left.

use crate::common;

use std::time::Duration;

use common::*;
use mcsup::plan::*;
use nix::sys::signal::Signal;

const T: Duration = Duration::from_secs(15);

fn tcp(port: u16) -> ProbeSpec {
    ProbeSpec::Tcp {
        host: "127.0.0.1".into(),
        port,
    }
}

/// master <- store <- worker, each logging its signals, each ready once it prints `up` (which
/// the test child does only after installing its signal handlers: a signal sent after `ready`
/// is always logged).
fn chain(env: &TestEnv) -> Plan {
    let log = |n: &str| env.path(&format!("{n}.signals")).display().to_string();
    let up = |env: &TestEnv, name: &str, kind| {
        let mut p = env.proc(
            name,
            kind,
            &["--signal-log", &log(name), "--ready-line", "up"],
        );
        p.readiness = ready_on_line("^up$", 10_000);
        p
    };
    let master = up(env, "master", ProcessKind::Master);
    let mut store = up(env, "store", ProcessKind::Store);
    store.stop.signal = SignalName::SIGINT;
    dep(&mut store, "master");
    let mut worker = up(env, "worker", ProcessKind::Worker);
    dep(&mut worker, "store");
    env.plan(vec![master, store, worker])
}

fn signal_log(env: &TestEnv, name: &str) -> Vec<String> {
    std::fs::read_to_string(env.path(&format!("{name}.signals")))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn ordered_start_with_every_probe_kind_then_ordered_teardown() {
    let env = TestEnv::new();
    let (p_tcp, p_http) = (free_port(), free_port());
    let touch = env.path("w2.ready").display().to_string();
    let exec_flag = env.path("w3.ready").display().to_string();
    let mut master = env.proc(
        "master",
        ProcessKind::Master,
        &["--listen", &p_tcp.to_string(), "--listen-after", "30"],
    );
    master.readiness = readiness(vec![tcp(p_tcp)], 10_000);
    let mut store = env.proc(
        "store",
        ProcessKind::Store,
        &[
            "--listen",
            &p_http.to_string(),
            "--listen-after",
            "30",
            "--http",
            "store is healthy",
        ],
    );
    store.stop.signal = SignalName::SIGINT;
    store.readiness = readiness(
        vec![ProbeSpec::Http {
            host: "127.0.0.1".into(),
            port: p_http,
            path: "/health".into(),
            status: 200,
            body_contains: Some("healthy".into()),
        }],
        10_000,
    );
    dep(&mut store, "master");
    let mut w1 = env.proc(
        "w1",
        ProcessKind::Worker,
        &[
            "--ready-after",
            "30",
            "--ready-line",
            "server READY on port",
        ],
    );
    w1.readiness = ready_on_line("READY on port", 10_000);
    dep(&mut w1, "store");
    let mut w2 = env.proc(
        "w2",
        ProcessKind::Worker,
        &["--touch", &touch, "--touch-after", "30"],
    );
    w2.readiness = readiness(
        vec![ProbeSpec::File {
            path: touch.clone().into(),
        }],
        10_000,
    );
    dep(&mut w2, "w1");
    let mut w3 = env.proc(
        "w3",
        ProcessKind::Worker,
        &["--touch", &exec_flag, "--touch-after", "30"],
    );
    w3.readiness = readiness(
        vec![ProbeSpec::Exec {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                format!("test -f {exec_flag}"),
            ],
        }],
        10_000,
    );
    dep(&mut w3, "w2");
    let plan = env.plan(vec![master, store, w1, w2, w3]);
    let mut m = env.start(&plan);
    m.wait_event("w3", "ready", T);
    let evs = m.events();
    let order = ["master", "store", "w1", "w2", "w3"];
    for pair in order.windows(2) {
        let ready = Mcsup::index_of(&evs, pair[0], "ready");
        let next_spawn = Mcsup::index_of(&evs, pair[1], "spawned");
        assert!(
            ready < next_spawn,
            "{} must be ready before {} spawns",
            pair[0],
            pair[1]
        );
    }
    // The status file is replaced right after the events are appended.
    wait_for("phase running", T, || {
        (m.status()?["phase"] == "running").then_some(())
    });
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let evs = m.events();
    // Workers (tier 0) stop in reverse dependency order, then the store, then the master.
    let stopped = |n: &str| Mcsup::index_of(&evs, n, "stopped");
    let stopping = |n: &str| Mcsup::index_of(&evs, n, "stopping");
    assert!(stopped("w3") < stopping("w2"));
    assert!(stopped("w2") < stopping("w1"));
    assert!(stopped("w1") < stopping("store"));
    assert!(stopped("store") < stopping("master"));
    let status = m.status().expect("status file");
    assert_eq!(status["phase"], "stopped");
    assert_eq!(status["exit_code"], 0);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&m.status_path)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    env.assert_no_leftovers();
}

#[test]
fn readiness_timeout_fails_with_code_5() {
    let env = TestEnv::new();
    let mut master = env.proc("master", ProcessKind::Master, &[]);
    master.readiness = readiness(vec![tcp(free_port())], 300);
    let mut m = env.start(&env.plan(vec![master]));
    assert_eq!(m.wait_exit(T), 5);
    let evs = m.events();
    let failed = Mcsup::find(&evs, "master", "failed");
    assert!(
        failed.raw["detail"]
            .as_str()
            .unwrap_or("")
            .contains("readiness timed out"),
        "{:?}",
        failed.raw
    );
    assert!(failed.t_ms >= 300.0);
    env.assert_no_leftovers();
}

#[test]
fn death_during_readiness_fails_at_once_with_its_exit_code() {
    let env = TestEnv::new();
    let mut master = env.proc(
        "master",
        ProcessKind::Master,
        &["--exit-after", "50", "--code", "17"],
    );
    master.readiness = readiness(vec![tcp(free_port())], 60_000);
    let mut m = env.start(&env.plan(vec![master]));
    assert_eq!(m.wait_exit(T), 17);
    assert!(
        m.started.elapsed() < Duration::from_secs(5),
        "did not wait for the readiness timeout"
    );
    env.assert_no_leftovers();
}

#[test]
fn crash_restarts_with_backoff_then_the_limit_tears_down_in_order() {
    let env = TestEnv::new();
    let master = env.proc("master", ProcessKind::Master, &[]);
    let mut store = env.proc(
        "store",
        ProcessKind::Store,
        &["--print", "store run", "--exit-after", "20", "--code", "3"],
    );
    store.restart.policy = RestartPolicy::OnFailure;
    store.restart.max_restarts = 2;
    store.restart.backoff_initial = ms(100);
    dep(&mut store, "master");
    let mut m = env.start(&env.plan(vec![master, store]));
    assert_eq!(m.wait_exit(T), 3);
    let evs = m.events();
    let c = counts(&evs);
    assert_eq!(
        c[&("store".into(), "spawned".into())],
        3,
        "first start + 2 restarts"
    );
    assert_eq!(c[&("store".into(), "restarting".into())], 2);
    // Backoff: 100 ms, then 200 ms between an exit and the next spawn.
    let store_evs: Vec<&Ev> = evs.iter().filter(|e| e.process == "store").collect();
    let mut gaps = Vec::new();
    for w in store_evs.windows(2) {
        if w[0].event == "restarting" {
            let next = store_evs
                .iter()
                .find(|e| e.event == "spawned" && e.t_ms > w[0].t_ms)
                .unwrap();
            gaps.push(next.t_ms - w[0].t_ms);
        }
    }
    assert!(gaps[0] >= 95.0 && gaps[1] >= 195.0, "gaps {gaps:?}");
    assert!(Mcsup::index_of(&evs, "store", "failed") < Mcsup::index_of(&evs, "master", "stopping"));
    // Each restart rotated the store's log: the previous runs are kept as .1 and .2.
    for f in ["n1.store.log", "n1.store.log.1", "n1.store.log.2"] {
        assert!(env.log_dir().join(f).exists(), "{f}");
    }
    env.assert_no_leftovers();
}

#[test]
fn critical_exit_zero_unasked_is_a_failure() {
    let env = TestEnv::new();
    let master = env.proc("master", ProcessKind::Master, &["--exit-after", "50"]);
    let mut store = env.proc("store", ProcessKind::Store, &[]);
    dep(&mut store, "master");
    let mut m = env.start(&env.plan(vec![master, store]));
    assert_eq!(m.wait_exit(T), 4);
    env.assert_no_leftovers();
}

#[test]
fn teardown_order_timing_and_stop_signals() {
    let env = TestEnv::new();
    let mut m = env.start(&chain(&env));
    m.wait_event("worker", "ready", T);
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let evs = m.events();
    let t = |n: &str, e: &str| Mcsup::find(&evs, n, e).t_ms;
    assert!(t("worker", "stopped") <= t("store", "stopping"));
    assert!(t("store", "stopped") <= t("master", "stopping"));
    let teardown = t("mcsup", "finished") - t("mcsup", "shutdown-requested");
    assert!(
        teardown < 2000.0,
        "an instantly-stopping chain tore down in {teardown} ms"
    );
    let without_cont = |name: &str| -> Vec<String> {
        signal_log(&env, name)
            .into_iter()
            .filter(|s| s != "SIGCONT")
            .collect()
    };
    assert_eq!(
        without_cont("worker"),
        ["SIGTERM"],
        "the worker got its stop signal once"
    );
    // The store's stop signal is SIGINT. Stop signals go out with SIGCONT, whose handler may run
    // (and log) first, so SIGCONT is left out of both comparisons.
    assert_eq!(
        without_cont("store"),
        ["SIGINT"],
        "the store got SIGINT, once, and no SIGTERM"
    );
    env.assert_no_leftovers();
}

#[test]
fn child_ignoring_sigterm_is_killed_at_its_grace() {
    let env = TestEnv::new();
    let mut plan = chain(&env);
    plan.processes[2].argv.push("--ignore-term".into());
    plan.processes[2].stop.grace = ms(300);
    // As a Mooncake client over RDMA would be.
    plan.processes[2].env.push(mcsup::plan::EnvVar {
        name: "MOONCAKE_PROTOCOL".into(),
        value: "rdma".into(),
        source: "test".into(),
        overrode: Vec::new(),
    });
    // (No RDMA device here: the preflight would refuse the protocol.)
    let mut m = env.start_with(&plan, &["--skip-preflight"]);
    m.wait_event("worker", "ready", T);
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 124, "teardown needed SIGKILL");
    let evs = m.events();
    let grace =
        Mcsup::find(&evs, "worker", "killing").t_ms - Mcsup::find(&evs, "worker", "stopping").t_ms;
    assert!(
        (290.0..1500.0).contains(&grace),
        "killed {grace} ms after the stop signal"
    );
    assert_eq!(Mcsup::find(&evs, "worker", "exited").exit_code, Some(137));
    // The kill says why the process did not stop: what the kernel showed of it at that moment
    // (its state, and that it had caught SIGTERM: the test child catches it and carries on).
    let killing = Mcsup::find(&evs, "worker", "killing");
    let detail = killing.raw["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with("grace expired; it was ") && detail.ends_with("; SIGTERM: caught"),
        "{detail}"
    );
    // The final record names every SIGKILL, and warns for an RDMA client.
    let finished = Mcsup::find(&evs, "mcsup", "finished");
    let detail = finished.raw["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("SIGKILLed 1 process(es) that did not stop in time: worker; warning: worker had RDMA memory registered"),
        "{detail}"
    );
    let sigs = signal_log(&env, "worker");
    assert!(
        sigs.contains(&"SIGTERM".to_string()) && sigs.contains(&"SIGCONT".to_string()),
        "{sigs:?}"
    );
    env.assert_no_leftovers();
}

#[test]
fn group_member_surviving_its_leader_is_killed_before_the_next_tier() {
    // process-compose #520: the leader exits on SIGTERM, a member of its group ignores it.
    let env = TestEnv::new();
    let gpids = env.path("gc.pids").display().to_string();
    let mut plan = chain(&env);
    let w = &mut plan.processes[2];
    w.argv.extend(
        [
            "--grandchild",
            "plain",
            "--grandchild-ignore-term",
            "--grandchild-pid-file",
            &gpids,
        ]
        .map(String::from),
    );
    w.stop.grace = ms(400);
    let mut m = env.start(&plan);
    m.wait_event("worker", "ready", T);
    let gc = wait_for("grandchild pid", T, || {
        read_pids(std::path::Path::new(&gpids)).first().copied()
    });
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 124);
    let evs = m.events();
    let leader_exit = Mcsup::find(&evs, "worker", "exited").t_ms;
    let stopped = Mcsup::find(&evs, "worker", "stopped").t_ms;
    assert!(
        stopped - leader_exit >= 200.0,
        "the tier waited for the group, not the leader"
    );
    assert!(
        Mcsup::index_of(&evs, "worker", "killing") < Mcsup::index_of(&evs, "store", "stopping")
    );
    assert!(is_zombie_or_gone(gc));
    env.assert_no_leftovers();
}

#[test]
fn setsid_and_double_forked_grandchildren_are_killed_by_the_subreaper() {
    let env = TestEnv::new();
    let gpids = env.path("gc.pids").display().to_string();
    let mut plan = chain(&env);
    plan.processes[2].argv.extend(
        [
            "--grandchild",
            "setsid",
            "--grandchild",
            "double-fork",
            "--grandchild-quiet",
            "--grandchild-pid-file",
            &gpids,
        ]
        .map(String::from),
    );
    let mut m = env.start(&plan);
    m.wait_event("worker", "ready", T);
    let gcs = wait_for("two grandchildren", T, || {
        let p = read_pids(std::path::Path::new(&gpids));
        (p.len() == 2).then_some(p)
    });
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let evs = m.events();
    assert!(
        evs.iter().any(|e| e.event == "orphan-killed"),
        "orphans were swept"
    );
    // Each one told once, however many rounds it took to die.
    let killed: Vec<_> = evs
        .iter()
        .filter(|e| e.event == "orphan-killed")
        .map(|e| e.raw["pid"].as_i64())
        .collect();
    let distinct: std::collections::HashSet<_> = killed.iter().collect();
    assert_eq!(distinct.len(), killed.len(), "{killed:?}");
    for g in gcs {
        assert!(is_zombie_or_gone(g), "grandchild {g} survived");
    }
    env.assert_no_leftovers();
}

#[test]
fn grandchild_holding_stdout_does_not_hang_teardown() {
    // process-compose #258: an escaped grandchild keeps the output pipe open.
    let env = TestEnv::new();
    let mut plan = chain(&env);
    plan.processes[2]
        .argv
        .extend(["--grandchild", "setsid"].map(String::from));
    let mut m = env.start(&plan);
    m.wait_event("worker", "ready", T);
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(Duration::from_secs(8)), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

#[test]
fn sigkill_of_mcsup_takes_its_children_down() {
    let env = TestEnv::new();
    let mut m = env.start(&chain(&env));
    m.wait_event("worker", "ready", T);
    let kids: Vec<i32> = ["master", "store", "worker"]
        .iter()
        .map(|n| wait_for("pid", T, || m.pid_of(n)))
        .collect();
    m.signal(Signal::SIGKILL);
    let _ = m.wait_exit(T);
    wait_for("children to die by PDEATHSIG", T, || {
        kids.iter().all(|&k| is_zombie_or_gone(k)).then_some(())
    });
    env.assert_no_leftovers();
}

#[test]
fn double_sigint_escalates_to_immediate_kill() {
    let env = TestEnv::new();
    let mut plan = chain(&env);
    for p in &mut plan.processes {
        p.argv
            .extend(["--ignore", "TERM", "--ignore", "INT"].map(String::from));
        p.stop.grace = ms(20_000);
    }
    plan.shutdown.deadline = ms(60_000);
    let mut m = env.start(&plan);
    m.wait_event("worker", "ready", T);
    m.signal(Signal::SIGINT);
    m.wait_event("worker", "stopping", T);
    // A person's second Ctrl-C: slower than the escalation gap (Slurm's TERM,CONT,TERM burst is
    // faster, and must not escalate).
    std::thread::sleep(ms(150));
    m.signal(Signal::SIGINT);
    assert_eq!(m.wait_exit(Duration::from_secs(5)), 124);
    let evs = m.events();
    assert!(evs.iter().any(|e| e.event == "escalated"));
    env.assert_no_leftovers();
}

#[test]
fn sigterm_during_startup_stops_cleanly() {
    let env = TestEnv::new();
    let mut plan = chain(&env);
    plan.processes[0].readiness = readiness(vec![tcp(free_port())], 60_000);
    let mut m = env.start(&plan);
    m.wait_event("master", "spawned", T);
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let evs = m.events();
    assert!(!evs
        .iter()
        .any(|e| e.process == "store" && e.event == "spawned"));
    env.assert_no_leftovers();
}

#[test]
fn drain_signal_reaches_only_mcsup_and_starts_the_teardown() {
    let env = TestEnv::new();
    let mut m = env.start(&chain(&env));
    m.wait_event("worker", "ready", T);
    let kids: Vec<i32> = ["master", "store", "worker"]
        .iter()
        .map(|n| wait_for("pid", T, || m.pid_of(n)))
        .collect();
    for &k in &kids {
        let ign = proc_status_field(k, "SigIgn").expect("SigIgn");
        let mask = u64::from_str_radix(&ign, 16).expect("hex mask");
        assert_ne!(
            mask & (1 << (libc::SIGUSR1 - 1)),
            0,
            "SIGUSR1 ignored in child {k}: {ign}"
        );
        assert_eq!(
            mask & (1 << (libc::SIGTERM - 1)),
            0,
            "SIGTERM not ignored in child {k}"
        );
    }
    // Slurm signals the whole step: every child and mcsup.
    for &k in &kids {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(k), Signal::SIGUSR1);
    }
    m.signal(Signal::SIGUSR1);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    for n in ["master", "store", "worker"] {
        assert!(
            !signal_log(&env, n).contains(&"SIGUSR1".to_string()),
            "{n} saw the drain signal"
        );
    }
    let evs = m.events();
    assert!(
        Mcsup::find(&evs, "mcsup", "shutdown-requested").raw["detail"]
            .as_str()
            .unwrap()
            .contains("SIGUSR1")
    );
    env.assert_no_leftovers();
}

#[test]
fn a_1mb_line_without_newline_keeps_memory_bounded() {
    // process-compose #57. A 64 MiB line (64 times the 1 MB of the issue) makes "bounded"
    // measurable: buffering it would put the peak RSS far above the limit.
    let env = TestEnv::new();
    let mut w = env.proc(
        "worker",
        ProcessKind::Worker,
        &[
            "--long-line",
            "67108864",
            "--print",
            "",
            "--ready-line",
            "after the long line",
        ],
    );
    w.readiness = ready_on_line("^after the long line$", 20_000);
    let mut plan = env.plan(vec![w]);
    plan.processes[0]
        .argv
        .extend(["--ready-after", "0"].map(String::from));
    let mut m = env.start(&plan);
    m.wait_event("worker", "ready", Duration::from_secs(30));
    let hwm_kb: u64 = proc_status_field(m.pid(), "VmHWM")
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .expect("VmHWM");
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0);
    // The bound: the log writer's queue (16 MiB, when the disk is slower than the child, as on a
    // loaded machine) and the console's (4 MiB), plus mcsup itself; 24 MiB left it no room
    // (24.6 MiB seen with the whole suite running beside it).
    assert!(
        hwm_kb < 28 * 1024,
        "mcsup peak RSS {hwm_kb} kB while a 64 MiB line went through"
    );
    let log = std::fs::read(env.log_dir().join("n1.worker.log")).unwrap();
    let pieces = log
        .split(|&b| b == b'\n')
        .filter(|l| l.ends_with(b"split]"))
        .count();
    assert_eq!(pieces, 1024, "64 MiB in 64 KiB pieces, each marked");
    assert!(log.len() > 64 << 20, "the file got everything");
    env.assert_no_leftovers();
}

#[test]
fn last_line_before_exit_is_kept_in_file_and_console() {
    // process-compose #237.
    let env = TestEnv::new();
    let mut plan = env.plan(vec![env.proc(
        "worker",
        ProcessKind::Worker,
        &[
            "--print",
            "first",
            "--exit-after",
            "20",
            "--final-line",
            "famous last words",
        ],
    )]);
    plan.processes[0].critical = false;
    let mut m = env.start(&plan);
    assert_eq!(
        m.wait_exit(T),
        0,
        "the only worker completed: the node is done"
    );
    let log = std::fs::read_to_string(env.log_dir().join("n1.worker.log")).unwrap();
    assert_eq!(log, "first\nfamous last words\n");
    let out = m.stdout();
    assert!(
        out.contains("worker | famous last words\n"),
        "console: {out:?}"
    );
    env.assert_no_leftovers();
}

#[test]
fn exit_codes_and_signal_deaths_propagate() {
    let env = TestEnv::new();
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["--exit-after", "0", "--code", "1"], 1),
        (vec!["--exit-after", "0", "--code", "42"], 42),
        (vec!["--exit-after", "0", "--code", "127"], 127),
        (vec!["--exit-after", "0", "--code", "255"], 255),
        (vec!["--die-after", "0", "--die-signal", "KILL"], 137),
        (vec!["--die-after", "0", "--die-signal", "SEGV"], 139),
        (vec!["--die-after", "0", "--die-signal", "TERM"], 143),
    ];
    for (args, want) in cases {
        let mut m = env.start(&env.plan(vec![env.proc("master", ProcessKind::Master, &args)]));
        assert_eq!(m.wait_exit(T), want, "{args:?}: {}", m.stderr());
    }
    // A program that does not exist: the preflight (which `run --plan-file` runs too) refuses
    // to start, naming it; past the preflight, the spawn fails with exit 7.
    let mut p = env.proc("master", ProcessKind::Master, &[]);
    let missing = env.path("no-such-program").display().to_string();
    p.argv = vec![missing.clone()];
    let plan = env.plan(vec![p]);
    let mut m = env.start(&plan);
    assert_eq!(m.wait_exit(T), 1);
    let err = m.stderr();
    assert!(err.contains("preflight") && err.contains(&missing), "{err}");
    let mut m = env.start_with(&plan, &["--skip-preflight"]);
    assert_eq!(m.wait_exit(T), 7);
    env.assert_no_leftovers();
}

#[test]
fn orphans_are_reaped_while_running() {
    let env = TestEnv::new();
    let gpids = env.path("gc.pids").display().to_string();
    let mut plan = chain(&env);
    plan.processes[2].argv.extend(
        [
            "--grandchild",
            "double-fork",
            "--grandchild-quiet",
            "--grandchild-exit-after",
            "50",
            "--grandchild-pid-file",
            &gpids,
        ]
        .map(String::from),
    );
    let mut m = env.start(&plan);
    m.wait_event("worker", "ready", T);
    let gc = wait_for("grandchild pid", T, || {
        read_pids(std::path::Path::new(&gpids)).first().copied()
    });
    // Reaped (not a zombie of mcsup): its /proc entry disappears entirely.
    wait_for("the orphan to be reaped", T, || {
        (!std::path::Path::new(&format!("/proc/{gc}")).exists()).then_some(())
    });
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0);
    env.assert_no_leftovers();
}

#[test]
fn preamble_execs_the_real_program_with_the_spec_env_on_top() {
    let env = TestEnv::new();
    let mut master = env.proc("master", ProcessKind::Master, &[]);
    master.preamble = Some("export FROM_PREAMBLE=yes".into());
    master.env.push(EnvVar {
        name: "PYTHONUNBUFFERED".into(),
        value: "0".into(),
        source: "test".into(),
        overrode: vec![],
    });
    master.argv.extend(["--ready-line", "up"].map(String::from));
    master.readiness = ready_on_line("^up$", 10_000);
    let mut m = env.start(&env.plan(vec![master]));
    m.wait_event("master", "ready", T);
    let pid = wait_for("status pid", T, || m.pid_of("master"));
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert!(
        exe.display().to_string().contains("mcsup-testchild"),
        "sh exec'd the program: {exe:?}"
    );
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let vars: Vec<String> = environ
        .split(|&b| b == 0)
        .map(|s| String::from_utf8_lossy(s).to_string())
        .collect();
    assert!(vars.contains(&"FROM_PREAMBLE=yes".to_string()));
    assert!(
        vars.contains(&"PYTHONUNBUFFERED=0".to_string()),
        "the spec's value wins"
    );
    assert!(
        vars.iter().any(|v| v.starts_with("PATH=")),
        "inherited environment kept"
    );
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    assert!(fds <= 8, "inherited fds closed (testchild has {fds})");
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0);
    env.assert_no_leftovers();
}

#[test]
fn status_command_prints_the_table_and_json() {
    let env = TestEnv::new();
    let mut m = env.start(&chain(&env));
    m.wait_event("worker", "ready", T);
    // The status file follows the events within 25 ms (changes are written together; the
    // first one too): until it exists, `mcsup status` says so and exits 1.
    let text = wait_for("the status with the worker ready", T, || {
        let out = std::process::Command::new(MCSUP)
            .args(["status", "--log-dir"])
            .arg(env.log_dir())
            .output()
            .expect("mcsup status");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("status"), "{text} {err}");
            return None;
        }
        text.lines()
            .any(|l| l.starts_with("worker") && l.contains("ready"))
            .then_some(text)
    });
    assert!(text.contains("phase running"), "{text}");
    let out = std::process::Command::new(MCSUP)
        .args(["status", "--json", "--log-dir"])
        .arg(env.log_dir())
        .output()
        .expect("mcsup status --json");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["units"].as_array().map(Vec::len), Some(3));
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0);
    env.assert_no_leftovers();
}

#[test]
fn liveness_failure_restarts_the_process() {
    let env = TestEnv::new();
    let port = free_port();
    let mut store = env.proc("store", ProcessKind::Store, &[]);
    store.restart.policy = RestartPolicy::OnFailure;
    store.restart.max_restarts = 1;
    store.liveness = Some(LivenessSpec {
        probe: tcp(port),
        period: ms(50),
        attempt_timeout: ms(200),
        failure_threshold: 2,
    });
    let mut m = env.start(&env.plan(vec![store]));
    m.wait_event("store", "liveness-failed", T);
    m.wait_event("store", "restarting", T);
    // Second round exceeds the limit: critical → exit 6.
    assert_eq!(m.wait_exit(T), 6);
    env.assert_no_leftovers();
}

/// The console mirror gets every line once, in order, each with its `<process> | ` prefix: a burst
/// of whole lines goes through the reader's fast path (one file write per chunk).
#[test]
fn the_console_mirrors_each_line_with_its_prefix_in_order() {
    let env = TestEnv::new();
    let mut w = env.proc(
        "w",
        ProcessKind::Worker,
        &["--numbered", "999", "--exit-after", "0"],
    );
    // Non-critical: its exit 0 is "the workers are done".
    w.critical = false;
    let mut m = env.start(&env.plan(vec![w]));
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let console = std::fs::read_to_string(env.path("mcsup.stdout")).unwrap();
    let want: Vec<String> = (0..999)
        .map(|i| format!("w | {i} {}", "n".repeat(i % 37)))
        .collect();
    let got: Vec<&str> = console.lines().collect();
    assert_eq!(got.len(), want.len(), "line count");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "console line {i}");
    }
    let status = m.status().expect("status");
    assert_eq!(status["console_dropped_lines"].as_u64().unwrap_or(0), 0);
    env.assert_no_leftovers();
}

#[test]
fn slow_console_never_blocks_a_child_and_drops_are_counted() {
    let env = TestEnv::new();
    let mut w = env.proc(
        "worker",
        ProcessKind::Worker,
        &["--lines", "200000", "--ready-line", "all written"],
    );
    w.readiness = ready_on_line("^all written$", 20_000);
    // mcsup's stdout is a pipe nobody reads: the console stalls after 64 KiB.
    let (_keep_reader, writer) = std::io::pipe().expect("pipe");
    let mut m = env.start_full(&env.plan(vec![w]), &[], std::process::Stdio::from(writer));
    m.wait_event("worker", "ready", Duration::from_secs(30));
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let log = std::fs::read(env.log_dir().join("n1.worker.log")).unwrap();
    assert_eq!(
        log.iter().filter(|&&b| b == b'\n').count(),
        200_001,
        "the file got every line"
    );
    let status = m.status().expect("status");
    let dropped = status["console_dropped_lines"].as_u64().unwrap_or(0);
    assert!(dropped > 0, "drops are counted: {status}");
    env.assert_no_leftovers();
}

#[test]
fn gate_on_a_remote_port_holds_dependents_until_it_opens() {
    let env = TestEnv::new();
    let port = free_port();
    let mut plan = chain(&env);
    plan.processes.remove(0);
    plan.processes[0].depends_on = vec![DependencySpec {
        target: "remote-master".into(),
        condition: DependencyCondition::Healthy,
    }];
    plan.gates.push(GateSpec {
        name: "remote-master".into(),
        readiness: readiness(vec![tcp(port)], 20_000).unwrap(),
    });
    let mut m = env.start(&plan);
    wait_for("gate probing", T, || {
        let s = m.status()?;
        (s["units"][0]["state"] == "probing").then_some(())
    });
    assert!(
        !m.events().iter().any(|e| e.event == "spawned"),
        "nothing starts before the gate"
    );
    let _listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind");
    m.wait_event("remote-master", "ready", T);
    m.wait_event("worker", "ready", T);
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

#[test]
fn linuxproc_style_sigterm_to_every_process_is_not_a_failure() {
    // Under Slurm proctrack/linuxproc, scancel's SIGTERM reaches the children at the same moment
    // as mcsup: they exit on their own during the teardown, are never restarted, and the run
    // still ends cleanly. The race of the children's deaths against mcsup's own copy of the
    // signal (held back by the machine for SIGNAL_DEATH_SETTLE) is tested deterministically in
    // the machine (`a_step_wide_sigterm_reaching_the_children_first_is_a_clean_shutdown`); here
    // mcsup's copy goes first, so the real processes show the rest without a timing bet.
    let env = TestEnv::new();
    let mut plan = chain(&env);
    for p in &mut plan.processes {
        p.restart.policy = RestartPolicy::Always;
    }
    let mut m = env.start(&plan);
    m.wait_event("worker", "ready", T);
    let kids: Vec<i32> = ["master", "store", "worker"]
        .iter()
        .map(|n| wait_for("pid", T, || m.pid_of(n)))
        .collect();
    m.signal(Signal::SIGTERM);
    for &k in &kids {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(k), Signal::SIGTERM);
    }
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let evs = m.events();
    assert!(
        !evs.iter()
            .any(|e| e.event == "restarting" || e.event == "failed"),
        "{:?}",
        evs.iter().map(|e| e.raw.to_string()).collect::<Vec<_>>()
    );
    for n in ["master", "store", "worker"] {
        assert_eq!(
            evs.iter()
                .filter(|e| e.process == n && e.event == "spawned")
                .count(),
            1
        );
    }
    env.assert_no_leftovers();
}

#[test]
fn plan_files_are_written_0600_before_any_process_starts() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    // A plan file may only write into its own log directory.
    let cfg = env.log_dir().join("mooncake_store_config.json");
    // The worker's file probe passes at once only if the file was written before it started.
    let mut w = env.proc("w", ProcessKind::Worker, &["--exit-after", "50"]);
    // Non-critical: its exit 0 is "the workers are done" (a critical one would be a failure).
    w.critical = false;
    w.readiness = readiness(vec![ProbeSpec::File { path: cfg.clone() }], 5_000);
    let mut plan = env.plan(vec![w]);
    plan.files.push(FileSpec {
        path: cfg.clone(),
        contents: "{\"master_server_address\": \"127.0.0.1:1\"}\n".into(),
        purpose: "test".into(),
    });
    let mut m = env.start(&plan);
    assert_eq!(m.wait_exit(ms(20_000)), 0, "{}", m.stderr());
    assert_eq!(
        std::fs::read_to_string(&cfg).unwrap(),
        "{\"master_server_address\": \"127.0.0.1:1\"}\n"
    );
    let mode = std::fs::metadata(&cfg).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "config files may hold secrets");
    let evs = m.events();
    assert!(Mcsup::index_of(&evs, "w", "spawned") < Mcsup::index_of(&evs, "w", "ready"));
    env.assert_no_leftovers();
}

#[test]
fn drain_signal_arriving_before_handlers_is_held_not_fatal() {
    // Slurm's early warning can land while mcsup is still starting up (reading the recipe,
    // running the preflight). From main's first line on it must mean "drain", never the default
    // action (death by SIGUSR1, exit 138). Deterministic: the recipe is a FIFO, so mcsup blocks
    // reading it, before any handler exists; the signal is sent then, the recipe written after.
    let env = TestEnv::new();
    let fifo = env.path("recipe.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let recipe = format!(
        "mcsup:\n  workers:\n    decode:\n      - name: w\n        command: [{TESTCHILD}, --sleep]\n        env: {{MCSUP_TEST_TAG: \"{}\"}}\n  log_dir: {}\n",
        env.tag,
        env.log_dir().display()
    );
    let mut child = std::process::Command::new(MCSUP)
        .args(["run", "--role", "decode", "--node", "n1", "--recipe"])
        .arg(&fifo)
        // Tagged too, so a failing run cannot leak an mcsup blocked on the FIFO.
        .env("MCSUP_TEST_TAG", &env.tag)
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_JOB_NODELIST")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(env.path("mcsup.stderr")).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    wait_for(
        "mcsup blocked on the recipe with SIGUSR1 held",
        ms(10_000),
        || {
            let mask = u64::from_str_radix(&proc_status_field(pid, "SigBlk")?, 16).ok()?;
            let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
            (mask & (1 << 9) != 0 && !wchan.is_empty() && wchan != "0").then_some(())
        },
    );
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGUSR1).unwrap();
    std::fs::write(&fifo, recipe).unwrap();
    let status = wait_for("mcsup to exit", ms(20_000), || child.try_wait().unwrap());
    let stderr = std::fs::read_to_string(env.path("mcsup.stderr")).unwrap_or_default();
    assert_eq!(status.code(), Some(0), "{status:?}; stderr:\n{stderr}");
    assert!(stderr.contains("SIGUSR1"), "the drain was seen: {stderr}");
    env.assert_no_leftovers();
}

#[test]
fn a_flood_of_output_reaches_the_file_whole_in_order_and_cut_at_the_cap() {
    // 50 000 numbered lines of varying length as fast as the child can write them, every
    // 1000th over the 64 KiB cap: the file has every line, in order, long ones split into
    // 64 KiB pieces that each carry the marker; the console mirror keeps their order.
    const MARKER: &[u8] = b" [mcsup: line longer than 64 KiB, split]";
    let n = 50_000;
    let env = TestEnv::new();
    let mut w = env.proc(
        "worker",
        ProcessKind::Worker,
        &["--numbered", &n.to_string(), "--exit-after", "0"],
    );
    w.critical = false;
    let mut m = env.start(&env.plan(vec![w]));
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let log = std::fs::read(env.log_dir().join("n1.worker.log")).unwrap();
    assert_eq!(log.last(), Some(&b'\n'));
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut cur = Vec::new();
    for piece in log[..log.len() - 1].split(|&b| b == b'\n') {
        match piece.strip_suffix(MARKER) {
            Some(p) => {
                assert_eq!(p.len(), 64 * 1024, "a split piece is exactly the cap");
                cur.extend_from_slice(p);
            }
            None => {
                cur.extend_from_slice(piece);
                lines.push(std::mem::take(&mut cur));
            }
        }
    }
    assert_eq!(lines.len(), n);
    for (i, line) in lines.iter().enumerate() {
        let pad = if i % 1000 == 999 { 70_000 } else { i % 37 };
        let want = format!("{i} {}", "n".repeat(pad));
        assert!(line == want.as_bytes(), "line {i} differs");
    }
    // The console may drop under back-pressure (and counts it), but never reorders.
    let mut last = None;
    for l in m.stdout().lines() {
        if let Some(rest) = l.strip_prefix("worker | ") {
            if let Some(i) = rest.split(' ').next().and_then(|x| x.parse::<usize>().ok()) {
                assert!(last.is_none_or(|p| i >= p), "console out of order at {i}");
                last = Some(i);
            }
        }
    }
    assert_eq!(last, Some(n - 1), "the console saw the last line");
    env.assert_no_leftovers();
}

/// libibverbs is loaded by the RDMA preflight when a plan uses RDMA, never linked: a TCP node's
/// mcsup does not map it (nor its libnl dependencies).
#[test]
fn a_tcp_node_does_not_map_libibverbs() {
    let env = TestEnv::new();
    let mut m = env.start(&chain(&env));
    m.wait_event("worker", "ready", T);
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", m.pid())).unwrap();
    assert!(!maps.contains("libibverbs"), "{maps}");
    assert!(!maps.contains("libnl"), "{maps}");
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0);
    env.assert_no_leftovers();
}

/// What a child starts with (spawn.rs, `clone(CLONE_VM | CLONE_VFORK)` then exec): found through
/// the child's PATH, its own process group, /dev/null stdin, stdout and stderr on mcsup's pipe and
/// no other fd, the planned env and cwd, an empty signal mask; the drain signal ignored, SIGPIPE
/// and the stop signals at their default even when mcsup inherited them ignored, and an
/// inherited ignore mcsup does not touch (SIGTTOU here) kept, as across a plain fork and exec.
#[test]
fn a_child_starts_in_a_clean_state() {
    let env = TestEnv::new();
    let mut w = env.proc("w", ProcessKind::Worker, &[]);
    w.argv = vec!["sleep".into(), "30".into()];
    let cwd = env.path("work");
    std::fs::create_dir_all(&cwd).unwrap();
    w.cwd = Some(cwd.clone());
    for (name, value) in [
        ("MCSUP_PLANNED", "yes"),
        ("MCSUP_OVERRIDDEN", "by the plan"),
    ] {
        w.env.push(EnvVar {
            name: name.into(),
            value: value.into(),
            source: "test".into(),
            overrode: vec![],
        });
    }
    let plan = env.plan(vec![w]);
    let plan_path = env.path("plan.json");
    std::fs::write(&plan_path, serde_json::to_string(&plan).unwrap()).unwrap();
    // mcsup itself starts with HUP, PIPE and TTOU ignored (nohup, a shell's trap), and with an
    // fd open without close-on-exec (as srun's or PMIx's can be).
    let child = std::process::Command::new("sh")
        .args([
            "-c",
            "trap '' HUP PIPE TTOU; exec 5</dev/null; exec \"$0\" run --plan-file \"$1\"",
        ])
        .arg(MCSUP)
        .arg(&plan_path)
        .env("MCSUP_TEST_TAG", &env.tag)
        .env("MCSUP_OVERRIDDEN", "inherited")
        .env("MCSUP_INHERITED", "kept")
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(env.path("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(env.path("mcsup.stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut m = Mcsup::new(&env, "n1", child, env.dir.path().to_path_buf());
    m.wait_event("w", "ready", T);
    let pid = wait_for("w's pid", T, || m.pid_of("w"));

    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    assert_eq!(f[1], m.pid().to_string(), "parent: {stat}");
    assert_eq!(f[2], pid.to_string(), "own process group: {stat}");
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/exe")).unwrap(),
        std::path::Path::new("/usr/bin/sleep")
    );
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(), cwd);
    // Starting, `sleep` itself opens and closes files as fd 3 (ld.so.cache, libc, locale
    // files): wait for it to settle. An fd that survived the exec stays open for good.
    let fds_of = || {
        let mut fds: Vec<(String, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| {
                let target = std::fs::read_link(e.path()).unwrap_or_default();
                let name = e.file_name().to_string_lossy().into_owned();
                (name, target.to_string_lossy().into_owned())
            })
            .collect();
        fds.sort();
        fds
    };
    let end = std::time::Instant::now() + T;
    let fds = loop {
        let fds = fds_of();
        if fds.len() <= 3 || std::time::Instant::now() > end {
            break fds;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(
        fds.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["0", "1", "2"],
        "only stdio survives the exec: {fds:?}"
    );
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap(),
        std::path::Path::new("/dev/null")
    );
    let out = std::fs::read_link(format!("/proc/{pid}/fd/1")).unwrap();
    assert!(out.to_string_lossy().starts_with("pipe:"), "{out:?}");
    assert_eq!(
        out,
        std::fs::read_link(format!("/proc/{pid}/fd/2")).unwrap()
    );
    // mcsup's vfork returns as soon as the child's exec has switched its memory; the kernel
    // lays out the new environment a moment later (create_elf_tables), and until then
    // /proc/PID/environ reads empty.
    let environ = wait_for("w's environment", T, || {
        std::fs::read(format!("/proc/{pid}/environ"))
            .ok()
            .filter(|e| !e.is_empty())
    });
    let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
    assert!(vars.contains(&&b"MCSUP_PLANNED=yes"[..]));
    assert!(vars.contains(&&b"PYTHONUNBUFFERED=1"[..]));
    // mcsup's own environment is inherited, under the plan's variables.
    assert!(vars.contains(&&b"MCSUP_INHERITED=kept"[..]));
    let overridden: Vec<&&[u8]> = vars
        .iter()
        .filter(|v| v.starts_with(b"MCSUP_OVERRIDDEN="))
        .collect();
    assert_eq!(overridden, [&&b"MCSUP_OVERRIDDEN=by the plan"[..]]);

    let mask =
        |field: &str| u64::from_str_radix(&proc_status_field(pid, field).unwrap(), 16).unwrap();
    let bit = |sig: i32| 1u64 << (sig - 1);
    assert_eq!(mask("SigBlk"), 0, "no signal blocked");
    let ign = mask("SigIgn");
    assert_ne!(ign & bit(libc::SIGUSR1), 0, "the drain signal is ignored");
    for (sig, name) in [
        (libc::SIGHUP, "SIGHUP"),
        (libc::SIGPIPE, "SIGPIPE"),
        (libc::SIGTERM, "SIGTERM"),
        (libc::SIGINT, "SIGINT"),
    ] {
        assert_eq!(ign & bit(sig), 0, "{name} at its default");
    }
    assert_ne!(ign & bit(libc::SIGTTOU), 0, "an inherited ignore is kept");

    // mcsup's thread runs with a short scheduler slice where the kernel has custom slices
    // (EEVDF, `se.slice` in /proc/PID/sched); the child has the default one back, as this test
    // process has.
    let slice = |path: String| {
        std::fs::read_to_string(path).ok().and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("se.slice"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
    };
    if let (Some(ours), Some(mcsup), Some(child)) = (
        slice("/proc/self/sched".into()),
        slice(format!("/proc/{}/sched", m.pid())),
        slice(format!("/proc/{pid}/sched")),
    ) {
        assert_eq!(
            mcsup,
            mcsup::supervisor::SHORT_SLICE.as_nanos() as u64,
            "mcsup's slice"
        );
        assert_eq!(
            child, ours,
            "the child's slice is the default (mcsup's: {mcsup})"
        );
    }

    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

/// A program that cannot be exec'd fails its spawn with the errno execvp would give.
#[test]
fn a_program_that_cannot_be_executed_fails_the_spawn_naming_why() {
    let env = TestEnv::new();
    let dir = env.path("not-a-program");
    std::fs::create_dir_all(&dir).unwrap();
    for (argv0, why) in [
        (
            env.path("missing").display().to_string(),
            "No such file or directory",
        ),
        (dir.display().to_string(), "Permission denied"),
        (
            "mcsup-no-such-program-on-path".to_string(),
            "No such file or directory",
        ),
    ] {
        let mut p = env.proc("master", ProcessKind::Master, &[]);
        p.argv = vec![argv0.clone()];
        let mut m = env.start_with(&env.plan(vec![p]), &["--skip-preflight"]);
        assert_eq!(m.wait_exit(T), 7, "{argv0}");
        let evs = m.events();
        let failed = Mcsup::find(&evs, "master", "failed").raw.to_string();
        assert!(failed.contains(why), "{argv0}: {failed}");
    }
    env.assert_no_leftovers();
}

/// NVML (the workspace's stub) with one 80 GiB GPU, `used` GiB in use, held by `holder`.
fn one_gpu(used: u64, holder: Option<(u32, u64)>) -> serde_json::Value {
    let processes: Vec<serde_json::Value> = holder
        .map(|(pid, gib)| serde_json::json!({"pid": pid, "used": gib << 30}))
        .into_iter()
        .collect();
    serde_json::json!({"gpus": [{"total": 80u64 << 30, "used": used << 30, "processes": processes}]})
}

/// A worker on GPU 0 (NVML: the workspace's stub, 1 GiB in use) that restarts on failure and
/// waits up to `wait_ms` for the GPU; once it is ready, NVML is made to say `held(its pid)`
/// and it is SIGKILLed. Returns mcsup, the stub's state file and the stub (kept alive).
fn gpu_worker_killed(
    env: &TestEnv,
    wait_ms: u64,
    held: impl FnOnce(i32) -> serde_json::Value,
) -> (Mcsup, std::path::PathBuf, tempfile::TempDir) {
    let (stub, stub_env) = nvml_stub(&one_gpu(1, None));
    let state = stub.path().join("state.json");
    let mut w = env.up("w", ProcessKind::Worker, &[]);
    env.on_gpus(&mut w, &[0]);
    w.restart.policy = RestartPolicy::OnFailure;
    w.restart.release_wait = ms(wait_ms);
    let mut m = env.start_with_env(&env.plan(vec![w]), &["--skip-preflight"], &stub_env);
    let first = m.wait_event("w", "ready", T).pid.expect("a pid");
    std::fs::write(&state, held(first).to_string()).unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), Signal::SIGKILL).unwrap();
    (m, state, stub)
}

/// Issue 30, item 2: a worker's CUDA context outlives it for a while (smg-project/smg #2464).
/// The worker on GPU 0 holds 40 GiB (NVML says so) when it is SIGKILLed, and NVML goes on
/// saying so for 3 s after: its restart waits until the GPU is back to its level before the run
/// (1 GiB), then says how long that took.
#[test]
fn a_restart_on_a_gpu_waits_for_its_memory_to_come_back() {
    let env = TestEnv::new();
    let (mut m, state, _stub) =
        gpu_worker_killed(&env, 30_000, |first| one_gpu(41, Some((first as u32, 40))));
    m.wait_event("w", "restarting", T);
    std::thread::sleep(Duration::from_secs(3));
    std::fs::write(&state, one_gpu(1, None).to_string()).unwrap();
    let second = wait_for("the second run", T, || {
        let evs = m.events();
        let spawned: Vec<&Ev> = evs.iter().filter(|e| e.event == "spawned").collect();
        (spawned.len() == 2).then(|| spawned[1].clone())
    });
    let evs = m.events();
    let exited = Mcsup::find(&evs, "w", "exited");
    let released = Mcsup::find(&evs, "w", "gpu-released");
    let waited = second.t_ms - exited.t_ms;
    assert!(
        waited >= 3000.0,
        "the restart came {waited} ms after the exit"
    );
    let detail = released.raw["detail"].as_str().unwrap_or("");
    let said: f64 = detail
        .strip_prefix("GPU 0 released ")
        .and_then(|d| d.split(" s after").next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{detail}"));
    assert!(
        (3.0..15.0).contains(&said)
            && detail.ends_with(
                "after the previous run exited: its process group is empty; GPU 0 uses 1.0 GiB (1.0 GiB before the run)"
            ),
        "{detail}"
    );
    m.wait_event("w", "ready", T);
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

/// The wait is bounded: a GPU that stays held (here by a process outside the job) is named when
/// `release_wait` runs out, and the worker starts anyway.
#[test]
fn a_gpu_that_stays_held_is_named_and_the_restart_goes_ahead() {
    let env = TestEnv::new();
    let mut stray = std::process::Command::new("sleep")
        .arg("60")
        .env("MCSUP_TEST_TAG", &env.tag)
        .spawn()
        .unwrap();
    let held = one_gpu(31, Some((stray.id(), 30)));
    let (mut m, _state, _stub) = gpu_worker_killed(&env, 1_000, |_| held);
    let late = m.wait_event("w", "gpu-release-late", T);
    m.wait_event("w", "ready", T);
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let _ = stray.kill();
    let _ = stray.wait();
    let detail = late.raw["detail"].as_str().unwrap_or("");
    assert!(
        detail.starts_with("GPU 0 not released 1 s after the previous run exited: GPU 0 uses 31.0 GiB, 1.0 GiB before the run (held pid ")
            && detail.contains(&format!("pid {} (sleep 60)", stray.id()))
            && detail.contains("holding 30.0 GiB")
            && detail.ends_with("starting anyway (the engine may fail its start-up memory check)"),
        "{detail}"
    );
    env.assert_no_leftovers();
}

/// `mcsup run` pairs GPUs with HCAs on the node it runs on, whatever machine made the plan:
/// here, a machine without NVIDIA GPUs, it refuses to start and says why. Nothing starts.
#[test]
fn run_pairs_gpus_with_hcas_where_it_runs_or_starts_nothing() {
    let env = TestEnv::new();
    if std::path::Path::new("/sys/bus/pci/devices").exists()
        && std::fs::read_dir("/sys/bus/pci/devices")
            .unwrap()
            .flatten()
            .any(|d| {
                std::fs::read_to_string(d.path().join("vendor")).is_ok_and(|v| v.trim() == "0x10de")
            })
    {
        panic!("this test needs a machine without NVIDIA GPUs (it checks the refusal)");
    }
    let mut w = env.up("w", ProcessKind::Worker, &[]);
    env.on_gpus(&mut w, &[0]);
    let mut plan = env.plan(vec![w]);
    plan.network.per_gpu_hca = true;
    let mut m = env.start_with(&plan, &["--skip-preflight"]);
    assert_eq!(m.wait_exit(T), 1, "{}", m.stderr());
    let err = m.stderr();
    assert!(
        err.contains(&format!(
            "mcsup.network.per_gpu_hca: cannot pair the GPUs of {} with HCAs: no NVIDIA GPU on the PCI bus",
            env.node
        )),
        "{err}"
    );
    assert!(m.events().is_empty(), "something started");
    env.assert_no_leftovers();
}

/// Issue 50, item 1: servable means tokens. A frontend that lists its worker and answers every
/// completion with text but zero generated tokens (tests/fixtures/zero-token-endpoint) never
/// becomes servable: its readiness times out naming the count, the run fails, and `mcsup why`
/// says so.
#[test]
fn a_frontend_whose_answers_generate_no_token_is_never_servable() {
    let env = TestEnv::new();
    let fe = stand_in_frontend(&env, &[], false);
    let mut m = env.start(&env.plan(vec![fe]));
    assert_eq!(m.wait_exit(T), 5);
    let evs = m.events();
    let failed = Mcsup::find(&evs, "frontend", "failed");
    let detail = failed.raw["detail"].as_str().unwrap_or("").to_string();
    assert!(
        detail.contains("readiness timed out")
            && detail.contains("it answered with 0 generated tokens (usage.completion_tokens: 0)"),
        "{detail}"
    );
    assert!(!evs.iter().any(|e| e.event == "servable"));
    let why = mcsup_ok(["why".as_ref(), env.log_dir().as_os_str()]);
    assert!(
        why.lines()
            .next()
            .unwrap_or("")
            .starts_with("first failure: ")
            && why.contains("0 generated tokens"),
        "{why}"
    );
    env.assert_no_leftovers();
}

/// Issue 50, item 1, disaggregated: the servable completion must move a decode worker's request
/// count. A frontend that answers with a token while the decode worker's `generate` count (its
/// Dynamo system-port page) stays put is never servable, whatever another endpoint's series does;
/// the same frontend whose count moves with each completion becomes servable.
#[test]
fn a_completion_the_decode_side_did_not_serve_is_not_servable() {
    for (counter, servable) in [("fixed", false), ("moves", true)] {
        let env = TestEnv::new();
        let fe = stand_in_frontend(&env, &["1", counter], true);
        let port = match &fe.readiness.as_ref().unwrap().probes[0] {
            ProbeSpec::Servable(p) => p.port,
            _ => unreachable!(),
        };
        let mut m = env.start(&env.plan(vec![fe]));
        if servable {
            m.wait_event("frontend", "ready", T);
            m.signal(Signal::SIGTERM);
            assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
        } else {
            assert_eq!(m.wait_exit(T), 5);
            let failed = Mcsup::find(&m.events(), "frontend", "failed");
            let detail = failed.raw["detail"].as_str().unwrap_or("").to_string();
            assert!(
                detail.contains(
                    "the completion generated, but no decode worker's request counter moved"
                ) && detail.contains(&format!("http://127.0.0.1:{port}/metrics 0")),
                "{detail}"
            );
            let why = mcsup_ok(["why".as_ref(), env.log_dir().as_os_str()]);
            assert!(why.contains("the decode side did not serve it"), "{why}");
        }
        env.assert_no_leftovers();
    }
}

/// The stand-in frontend of tests/fixtures/zero-token-endpoint on a free port, with `args` after
/// its port, behind a servable probe (one decode worker listed; with `decode_served`, the
/// stand-in's own page as the decode worker's request count).
fn stand_in_frontend(env: &TestEnv, args: &[&str], decode_served: bool) -> ProcessSpec {
    let port = free_port();
    let server = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/zero-token-endpoint/server.py");
    let mut fe = env.proc("frontend", ProcessKind::Frontend, &[]);
    fe.argv = [
        "python3".to_string(),
        server.display().to_string(),
        port.to_string(),
    ]
    .into_iter()
    .chain(args.iter().map(|a| a.to_string()))
    .collect();
    let probe = ProbeSpec::Servable(ServableProbe {
        host: "127.0.0.1".into(),
        port,
        frontend: mcsup::engine::frontend::FrontendType::default_kind(),
        expected: mcsup::engine::frontend::Expected {
            prefill: 0,
            decode: 1,
        },
        model: "stand-in".into(),
        url: format!("http://127.0.0.1:{port}"),
        decode_served: decode_served
            .then(|| mcsup::engine::stop::MetricSum::served_by_dynamo_worker("127.0.0.1", port))
            .into_iter()
            .collect(),
    });
    fe.readiness = readiness(vec![probe], 4_000);
    fe
}
