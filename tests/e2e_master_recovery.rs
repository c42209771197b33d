//! A master that crashes is restarted, and the cache recovers without touching the workers:
//! `kill -9` of the real `mooncake_master` under `mcsup run` (the master's default restart
//! policy is on-failure) brings the master back, the standalone stores (real Mooncake, 0.3.13)
//! remount their segments by themselves (they ping the master every second and remount when a
//! restarted master answers NEED_REMOUNT), capacity returns to the full segments, and the
//! workers and stores keep running (same pids, no teardown). Only the cached keys are lost.
//! Prints the measured recovery times.

use crate::common;

use std::time::{Duration, Instant};

use common::recipe::{metric, metrics, Ports, RecipeOpts};
use common::{start_recipe, wait_for, Mcsup, TestEnv};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const MIB: u64 = 1 << 20;
const MASTER_RESTART: &str =
    "{policy: on-failure, max_restarts: 3, window_seconds: 600, backoff_initial_seconds: 0.2}";

fn ready_count(m: &Mcsup, process: &str) -> usize {
    m.events()
        .iter()
        .filter(|e| e.process == process && e.event == "ready")
        .count()
}

/// Kill the master hard; return (time until it was ready again, until capacity was `want`).
fn crash_master_and_wait(m: &mut Mcsup, metrics_port: u16, want: u64) -> (Duration, Duration) {
    let before = ready_count(m, "master");
    let pid = m.pid_of("master").expect("master pid");
    let t0 = Instant::now();
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    wait_for(
        "the master restarted and ready",
        Duration::from_secs(60),
        || (ready_count(m, "master") > before).then_some(()),
    );
    let ready = t0.elapsed();
    wait_for(
        "capacity back to the stores' segments",
        Duration::from_secs(60),
        || {
            (metric(&metrics(metrics_port), "master_total_capacity_bytes") == Some(want))
                .then_some(())
        },
    );
    (ready, t0.elapsed())
}

#[test]
fn one_node_master_crash_recovers_without_touching_workers() {
    let env = TestEnv::new();
    let ports = Ports::new();
    let recipe = env.path("job.yaml");
    // The default policy (on-failure), only its first backoff longer: the master stays away
    // for about 4 s, so the store's /health (polled every second) answers 503 for about as long.
    // With the default 1 s the outage is about 2 s, and a loaded machine can poll past it.
    RecipeOpts {
        master_restart: Some("{backoff_initial_seconds: 3}"),
        ..RecipeOpts::new(&ports)
    }
    .write(&recipe, &env.log_dir());
    let mut m = start_recipe(&env, "n", &[], &recipe, &["--role", "agg", "--node", "n1"]);
    m.wait_event("worker", "ready", Duration::from_secs(60));
    wait_for(
        "the worker's keys in the master",
        Duration::from_secs(30),
        || {
            let t = metrics(ports.metrics);
            (metric(&t, "master_key_count").unwrap_or(0) > 0).then_some(())
        },
    );
    // The master reports its key count in its log every 10 s: wait for a report with keys, so
    // the event can say how many were lost.
    let master_log = env.log_dir().join("n1.master.log");
    wait_for(
        "a key count > 0 in the master's periodic report",
        Duration::from_secs(30),
        || {
            let log = std::fs::read_to_string(&master_log).unwrap_or_default();
            log.lines()
                .filter_map(|l| l.split("| Keys: ").nth(1))
                .any(|rest| !rest.starts_with('0'))
                .then_some(())
        },
    );
    let (store, worker) = (m.pid_of("store").unwrap(), m.pid_of("worker").unwrap());

    let (ready, capacity) = crash_master_and_wait(&mut m, ports.metrics, 64 * MIB);
    eprintln!("master crash: ready again after {ready:?}, capacity back after {capacity:?}");
    // mcsup verified the remount itself, and said the cache was lost.
    let ev = m.wait_event("master", "remounted", Duration::from_secs(40));
    let detail = ev.raw["detail"].as_str().unwrap_or("").to_string();
    eprintln!("remounted: {detail}");
    assert!(
        detail.contains("this node's 1 store(s) registered again")
            && detail.contains("this node's stores hold 64 MiB")
            && detail.contains("the cache from before the crash is lost"),
        "{detail}"
    );
    // The store's own /health saw the master go and come back: events, not a restart.
    let gone = m.wait_event("store", "master-unreachable", Duration::from_secs(20));
    let back = m.wait_event("store", "master-reachable", Duration::from_secs(40));
    let gone_detail = gone.raw["detail"].as_str().unwrap_or("").to_string();
    assert!(
        gone_detail.contains("503") && gone_detail.contains("master_unreachable"),
        "{gone_detail}"
    );
    eprintln!(
        "store /health: master unreachable reported, reachable again {} ms later",
        back.raw["ts_ms"].as_u64().unwrap_or(0) - gone.raw["ts_ms"].as_u64().unwrap_or(0)
    );
    // The store's first readiness said what the master holds for it.
    let ready = m
        .events()
        .into_iter()
        .find(|e| e.process == "store" && e.event == "ready")
        .expect("the store's ready event");
    let said = ready.raw["detail"].as_str().unwrap_or("").to_string();
    assert!(
        said.starts_with("registered with the master as 127.0.0.1:")
            && said.contains(": 64 MiB over tcp (client "),
        "{said}"
    );
    let lost: u64 = detail
        .split("lost (")
        .nth(1)
        .and_then(|r| {
            r.split(" key(s) at the master's last report before the crash")
                .next()
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no key count before the crash in: {detail}"));
    assert!(lost > 0, "{detail}");
    // Nothing else moved: same store and worker, no teardown.
    assert_eq!(m.pid_of("store"), Some(store));
    assert_eq!(m.pid_of("worker"), Some(worker));
    let evs = m.events();
    assert!(
        !evs.iter()
            .any(|e| e.process == "mcsup" && e.event == "shutdown-requested"),
        "{evs:?}"
    );
    assert!(!evs
        .iter()
        .any(|e| (e.process == "worker" || e.process == "store") && e.event == "stopping"));
    // The workers go on using the store: their keys come back into the (new) master.
    wait_for(
        "new keys after the restart",
        Duration::from_secs(30),
        || (metric(&metrics(ports.metrics), "master_key_count").unwrap_or(0) > 0).then_some(()),
    );

    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(Duration::from_secs(40)), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}

#[test]
fn two_nodes_the_remote_store_remounts_with_the_restarted_master() {
    let env = TestEnv::new();
    let ports = Ports::new();
    let addrs = "{n1: 127.0.0.1, n2: 127.0.0.1}";
    let (r1, r2) = (env.path("n1.yaml"), env.path("n2.yaml"));
    RecipeOpts {
        node_addresses: addrs,
        master_restart: Some(MASTER_RESTART),
        ..RecipeOpts::new(&ports)
    }
    .write(&r1, &env.log_dir());
    RecipeOpts {
        node_addresses: addrs,
        master_restart: Some(MASTER_RESTART),
        ..RecipeOpts::new(&ports)
    }
    .write(&r2, &env.log_dir());
    let list = ["--nodelist", "n[1-2]"];
    let mut n1 = start_recipe(
        &env,
        "n1",
        &[],
        &r1,
        &[&["--role", "prefill", "--node", "n1"][..], &list[..]].concat(),
    );
    let mut n2 = start_recipe(
        &env,
        "n2",
        &[],
        &r2,
        &[&["--role", "decode", "--node", "n2"][..], &list[..]].concat(),
    );
    n1.wait_event("worker", "ready", Duration::from_secs(60));
    n2.wait_event("worker", "ready", Duration::from_secs(60));
    wait_for("both stores registered", Duration::from_secs(30), || {
        (metric(&metrics(ports.metrics), "master_total_capacity_bytes") == Some(80 * MIB))
            .then_some(())
    });
    let remote_store = n2.pid_of("store").unwrap();

    let (ready, capacity) = crash_master_and_wait(&mut n1, ports.metrics, 80 * MIB);
    eprintln!(
        "master crash, two nodes: ready again after {ready:?}, both stores back after {capacity:?}"
    );
    assert_eq!(
        n2.pid_of("store"),
        Some(remote_store),
        "the remote store was not restarted"
    );
    // n1 (the master's node) verified its own store; n2's store remounted by itself.
    let ev = n1.wait_event("master", "remounted", Duration::from_secs(40));
    let detail = ev.raw["detail"].as_str().unwrap_or("").to_string();
    eprintln!("remounted on n1: {detail}");
    assert!(detail.contains("registered again"), "{detail}");
    assert!(
        n2.events().iter().all(|e| e.event != "stopping"),
        "node 2 was not touched"
    );

    n2.signal(Signal::SIGTERM);
    assert_eq!(n2.wait_exit(Duration::from_secs(40)), 0, "{}", n2.stderr());
    n1.signal(Signal::SIGTERM);
    assert_eq!(n1.wait_exit(Duration::from_secs(40)), 0, "{}", n1.stderr());
    env.assert_no_leftovers();
}
