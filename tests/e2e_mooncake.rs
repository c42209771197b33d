//! End to end with the real Mooncake (PyPI `mooncake-transfer-engine-non-cuda`, installed into
//! `.venv` by scripts/setup.sh): the real `mooncake_master`, the real store service and the
//! synthetic zero-segment workers, all on 127.0.0.1 with this test's own ports, run by the real
//! `mcsup` binary from a recipe. Every test checks that nothing it started is left (by a tag every
//! child inherits).

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::recipe::{metric, metrics, Ports, RecipeOpts};
use common::{
    assert_no_diagnosis, cmdline, environ, is_zombie_or_gone, names, proc_status_field, wait_for,
    Ev, Mcsup, TestEnv,
};
use nix::sys::signal::Signal;

const MIB: u64 = 1 << 20;

/// Start `mcsup run` on a recipe for one node.
fn start(env: &TestEnv, name: &str, recipe: &Path, args: &[&str]) -> Mcsup {
    common::start_recipe(env, name, &[], recipe, args)
}

fn log_of(env: &TestEnv, node: &str, process: &str) -> String {
    std::fs::read_to_string(env.log_dir().join(format!("{node}.{process}.log"))).unwrap_or_default()
}

/// Assert the teardown went workers, then store, then master, each fully stopped before the next
/// was signalled.
fn assert_ordered_teardown(evs: &[Ev], workers: &[&str]) {
    let stopping = |p: &str| Mcsup::index_of(evs, p, "stopping");
    let stopped = |p: &str| Mcsup::index_of(evs, p, "stopped");
    for w in workers {
        assert!(
            stopped(w) < stopping("store"),
            "{w} must be stopped before the store is signalled: {:#?}",
            names(evs)
        );
    }
    assert!(
        stopped("store") < stopping("master"),
        "store before master: {:#?}",
        names(evs)
    );
}

#[test]
fn one_node_ordered_start_capacity_and_sigterm_teardown() {
    let env = TestEnv::new();
    let ports = Ports::new();
    let recipe = env.path("job.yaml");
    RecipeOpts::new(&ports).write(&recipe, &env.log_dir());
    let mut m = start(&env, "n", &recipe, &["--role", "agg", "--node", "n1"]);

    m.wait_event("master", "ready", Duration::from_secs(60));
    m.wait_event("store", "ready", Duration::from_secs(60));
    let w = m.wait_event("worker", "ready", Duration::from_secs(60));
    let evs = m.events();
    // Ordered start: each spawned only after the previous one was ready.
    assert!(
        Mcsup::index_of(&evs, "master", "ready") < Mcsup::index_of(&evs, "store", "spawned"),
        "{:#?}",
        names(&evs)
    );
    assert!(
        Mcsup::index_of(&evs, "store", "ready") < Mcsup::index_of(&evs, "worker", "spawned"),
        "{:#?}",
        names(&evs)
    );

    // The worker owns no DRAM: its segment is 0, and the master counts exactly the store's 64 MiB.
    let wpid = w.pid.expect("worker pid");
    assert!(environ(wpid).contains(&"MOONCAKE_GLOBAL_SEGMENT_SIZE=0".to_string()));
    let text = wait_for(
        "the worker's keys in the master",
        Duration::from_secs(30),
        || {
            let t = metrics(ports.metrics);
            (metric(&t, "master_key_count").unwrap_or(0) > 0).then_some(t)
        },
    );
    assert_eq!(
        metric(&text, "master_total_capacity_bytes"),
        Some(64 * MIB),
        "{text}"
    );
    wait_for(
        "a worker REPORT with round trips",
        Duration::from_secs(30),
        || {
            let log = log_of(&env, "n1", "worker");
            (log.contains("REPORT") && log.contains("errors=0")).then_some(())
        },
    );

    m.signal(Signal::SIGTERM);
    let code = m.wait_exit(Duration::from_secs(40));
    let evs = m.events();
    assert_eq!(code, 0, "clean requested shutdown; stderr:\n{}", m.stderr());
    assert_ordered_teardown(&evs, &["worker"]);
    let t = |p: &str, e: &str| Mcsup::find(&evs, p, e).t_ms;
    eprintln!(
        "teardown: worker {:.0}->{:.0} ms, store {:.0}->{:.0} ms, master {:.0}->{:.0} ms",
        t("worker", "stopping"),
        t("worker", "stopped"),
        t("store", "stopping"),
        t("store", "stopped"),
        t("master", "stopping"),
        t("master", "stopped")
    );
    // The store got SIGINT (its default stop signal) and logged its own shutdown.
    assert!(
        log_of(&env, "n1", "store").contains("Received signal 2"),
        "{}",
        log_of(&env, "n1", "store")
    );
    assert_no_diagnosis(&env.log_dir());
    env.assert_no_leftovers();
}

#[test]
fn two_nodes_on_loopback_share_one_master() {
    let env = TestEnv::new();
    let ports = Ports::new();
    let addrs = "{n1: 127.0.0.1, n2: 127.0.0.1}";
    // Same master ports, one store port per "node" (they share this machine).
    let r1 = env.path("n1.yaml");
    let r2 = env.path("n2.yaml");
    let o1 = RecipeOpts {
        node_addresses: addrs,
        worker_args: r#", --key-prefix, "p/", --read-prefix, "d/""#,
        ..RecipeOpts::new(&ports)
    };
    o1.write(&r1, &env.log_dir());
    let o2 = RecipeOpts {
        node_addresses: addrs,
        worker_args: r#", --key-prefix, "d/", --read-prefix, "p/""#,
        ..RecipeOpts::new(&ports)
    };
    o2.write(&r2, &env.log_dir());
    let list = ["--nodelist", "n[1-2]"];
    let mut n1 = start(
        &env,
        "n1",
        &r1,
        &[&["--role", "prefill", "--node", "n1"][..], &list[..]].concat(),
    );
    let mut n2 = start(
        &env,
        "n2",
        &r2,
        &[&["--role", "decode", "--node", "n2"][..], &list[..]].concat(),
    );

    // n2 runs no master: it waits on the remote one (a gate), then starts its store.
    n2.wait_event("master@n1", "ready", Duration::from_secs(60));
    assert!(n2.pid_of("master").is_none());
    n1.wait_event("worker", "ready", Duration::from_secs(60));
    n2.wait_event("worker", "ready", Duration::from_secs(60));
    let text = wait_for(
        "both stores registered (32 + 48 MiB)",
        Duration::from_secs(30),
        || {
            let t = metrics(ports.metrics);
            (metric(&t, "master_total_capacity_bytes") == Some(80 * MIB)).then_some(t)
        },
    );
    assert_eq!(metric(&text, "master_total_capacity_bytes"), Some(80 * MIB));
    // Each worker reads the other node's keys.
    for (node, _) in [("n1", "prefill"), ("n2", "decode")] {
        wait_for(
            &format!("{node}'s worker reading the peer's keys"),
            Duration::from_secs(30),
            || {
                let log = log_of(&env, node, "worker");
                log.lines()
                    .filter(|l| l.contains("REPORT"))
                    .any(|l| {
                        l.split_whitespace()
                            .any(|w| w.strip_prefix("peer_get_ops=").is_some_and(|n| n != "0"))
                    })
                    .then_some(())
            },
        );
    }

    n2.signal(Signal::SIGTERM);
    assert_eq!(n2.wait_exit(Duration::from_secs(40)), 0, "{}", n2.stderr());
    n1.signal(Signal::SIGTERM);
    assert_eq!(n1.wait_exit(Duration::from_secs(40)), 0, "{}", n1.stderr());
    assert_ordered_teardown(&n1.events(), &["worker"]);
    assert_no_diagnosis(&env.log_dir());
    env.assert_no_leftovers();
}

#[test]
fn store_killed_restarts_then_out_of_restarts_tears_down() {
    let env = TestEnv::new();
    let ports = Ports::new();
    let recipe = env.path("job.yaml");
    let opts = RecipeOpts {
        store_restart: "{policy: on-failure, max_restarts: 1, window_seconds: 300, backoff_initial_seconds: 0.2}",
        ..RecipeOpts::new(&ports)
    };
    opts.write(&recipe, &env.log_dir());
    let mut m = start(&env, "n", &recipe, &["--role", "agg", "--node", "n1"]);
    m.wait_event("worker", "ready", Duration::from_secs(60));
    let first = m.pid_of("store").expect("store pid");

    // SIGKILL the store: the on-failure policy restarts it and it becomes ready again.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), Signal::SIGKILL).unwrap();
    let second = wait_for("the store restarted", Duration::from_secs(60), || {
        let evs = m.events();
        let ready = evs
            .iter()
            .filter(|e| e.process == "store" && e.event == "ready")
            .count();
        m.pid_of("store").filter(|p| *p != first && ready >= 2)
    });
    assert!(
        m.events()
            .iter()
            .any(|e| e.process == "store" && e.event == "restarting"),
        "{:#?}",
        names(&m.events())
    );
    assert!(
        m.child.try_wait().unwrap().is_none(),
        "mcsup keeps running after one restart"
    );

    // Again: out of restarts, the critical store fails and the node tears down in order.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(second), Signal::SIGKILL).unwrap();
    let code = m.wait_exit(Duration::from_secs(60));
    assert_eq!(
        code,
        128 + 9,
        "the failing critical store's signal death; stderr:\n{}",
        m.stderr()
    );
    let evs = m.events();
    assert!(
        evs.iter()
            .any(|e| e.process == "store" && e.event == "failed"),
        "{:#?}",
        names(&evs)
    );
    let worker_stopped = Mcsup::index_of(&evs, "worker", "stopped");
    assert!(
        worker_stopped < Mcsup::index_of(&evs, "master", "stopping"),
        "{:#?}",
        names(&evs)
    );
    env.assert_no_leftovers();
}

#[test]
fn master_args_empty_means_no_tunables_and_a_rejected_flag_is_reported() {
    let env = TestEnv::new();
    let ports = Ports::new();
    let recipe = env.path("job.yaml");
    RecipeOpts {
        master_args: Some("[]"),
        ..RecipeOpts::new(&ports)
    }
    .write(&recipe, &env.log_dir());
    let mut m = start(&env, "a", &recipe, &["--role", "agg", "--node", "n1"]);
    let ev = m.wait_event("master", "ready", Duration::from_secs(60));
    let argv = cmdline(ev.pid.expect("master pid"));
    let flags: Vec<&str> = argv.iter().skip(1).map(String::as_str).collect();
    assert_eq!(
        flags,
        vec![
            format!("--rpc_port={}", ports.rpc).as_str(),
            "--enable_http_metadata_server=true",
            format!("--http_metadata_server_port={}", ports.meta).as_str(),
            "--enable_metric_reporting=true",
            format!("--metrics_port={}", ports.metrics).as_str(),
            // What a supervisor that restarts stores owes them (the real master accepts both).
            "--enable_metadata_cleanup_on_timeout=true",
            "--client_ttl=10",
        ],
        "only the managed ports and the cleanup flags, no tunables: {argv:?}"
    );
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(Duration::from_secs(40)), 0);

    // A flag the installed master rejects: the preflight refuses before anything starts...
    let ports = Ports::new();
    let bad = env.path("bad.yaml");
    RecipeOpts {
        master_extra_args: "[--bogus_flag=1]",
        ..RecipeOpts::new(&ports)
    }
    .write(&bad, &env.log_dir());
    let mut m = start(&env, "b", &bad, &["--role", "agg", "--node", "n2"]);
    assert_eq!(m.wait_exit(Duration::from_secs(30)), 1);
    let err = m.stderr();
    assert!(
        err.contains("does not know --bogus_flag") && err.contains("nothing was started"),
        "{err}"
    );
    // Nothing started: the node's one event is its refusal, which names the flag.
    let evs = m.events();
    assert!(
        evs.len() == 1
            && evs[0].event == "refused"
            && evs[0].raw["detail"]
                .as_str()
                .is_some_and(|d| d.contains("--bogus_flag")),
        "{evs:?}"
    );

    // ...and with --skip-preflight mcsup reports the master's own error and exits non-zero.
    let mut m = start(
        &env,
        "c",
        &bad,
        &["--role", "agg", "--node", "n3", "--skip-preflight"],
    );
    let code = m.wait_exit(Duration::from_secs(60));
    assert_ne!(code, 0);
    let out = m.stdout() + &log_of(&env, "n3", "master");
    assert!(
        out.contains("unknown command line flag 'bogus_flag'"),
        "{out}"
    );
    let evs = m.events();
    assert!(
        evs.iter()
            .all(|e| e.process != "store" || e.event != "spawned"),
        "store never starts: {:#?}",
        names(&evs)
    );
    env.assert_no_leftovers();
}

#[test]
fn drain_signal_tears_down_in_order_while_children_ignore_it() {
    let env = TestEnv::new();
    let ports = Ports::new();
    let recipe = env.path("job.yaml");
    RecipeOpts {
        workers: 2,
        ..RecipeOpts::new(&ports)
    }
    .write(&recipe, &env.log_dir());
    let mut m = start(&env, "n", &recipe, &["--role", "agg", "--node", "n1"]);
    m.wait_event("worker-0", "ready", Duration::from_secs(60));
    m.wait_event("worker-1", "ready", Duration::from_secs(60));
    let pids: Vec<i32> = ["master", "store", "worker-0", "worker-1"]
        .iter()
        .map(|p| m.pid_of(p).expect(p))
        .collect();
    // SIGUSR1 (signal 10) is ignored in every child: bit 9 of SigIgn.
    for p in &pids {
        let ign = u64::from_str_radix(&proc_status_field(*p, "SigIgn").unwrap(), 16).unwrap();
        assert_ne!(
            ign & (1 << 9),
            0,
            "pid {p} must ignore SIGUSR1 (SigIgn {ign:x})"
        );
    }
    // Slurm may deliver the drain signal to the whole step: send it to every process.
    for p in pids.iter().chain(std::iter::once(&m.pid())) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*p), Signal::SIGUSR1);
    }
    let code = m.wait_exit(Duration::from_secs(40));
    assert_eq!(code, 0, "{}", m.stderr());
    let evs = m.events();
    assert_ordered_teardown(&evs, &["worker-0", "worker-1"]);
    // The workers were still running when the teardown reached them: they stopped on SIGTERM
    // (exit 0 from their handler), not on the drain signal.
    for w in ["worker-0", "worker-1"] {
        assert!(
            log_of(&env, "n1", w).contains("stopped (signal SIGTERM)"),
            "{}",
            log_of(&env, "n1", w)
        );
    }
    for p in pids {
        assert!(is_zombie_or_gone(p));
    }
    env.assert_no_leftovers();
}
