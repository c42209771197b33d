//! Mooncake as it really runs, with the real master and store service from the pinned wheel on
//! 127.0.0.1: a store is ready only when the master holds its segment at the planned size, and
//! Mooncake's own failure lines in a worker's output become events with their fix. Every test
//! checks that nothing it started is left (by a tag every child inherits).

use crate::common;

use std::time::Duration;

use common::recipe::{Ports, RecipeOpts};
use common::view::parse_prom;
use common::{names, wait_for, TestEnv, MCSUP};
use nix::sys::signal::Signal;

#[test]
fn a_store_that_registers_less_than_planned_fails_readiness_with_both_sizes() {
    let env = TestEnv::new();
    let ports = Ports::new();
    let recipe = env.path("job.yaml");
    // A wrapper that starts the real store service with 16 MiB where the plan gives it 32 MiB.
    RecipeOpts {
        store_command:
            "[env, MOONCAKE_GLOBAL_SEGMENT_SIZE=16mb, python, -m, mooncake.mooncake_store_service]",
        store_restart: "{policy: never}",
        ..RecipeOpts::new(&ports)
    }
    .write(&recipe, &env.log_dir());
    let mut m = common::start_recipe(
        &env,
        "n",
        &[],
        &recipe,
        &["--role", "prefill", "--node", "n1"],
    );
    let code = m.wait_exit(Duration::from_secs(90));
    assert_ne!(code, 0, "the job must fail");
    let evs = m.events();
    let failed = evs
        .iter()
        .find(|e| e.process == "store" && e.event == "failed")
        .unwrap_or_else(|| panic!("no store failure in {:?}", names(&evs)));
    let d = failed.raw["detail"].as_str().unwrap_or("");
    eprintln!("store failed: {d}");
    assert!(
        d.contains("readiness failed: the master holds 16 MiB for segment 127.0.0.1:")
            && d.contains("(16777216 bytes) but the plan gives this store 32 MiB (33554432 bytes)"),
        "{d}"
    );
    assert!(d.contains("ulimit -l") && d.contains("a wrapper"), "{d}");
    // At once, not after the readiness timeout (60 s), and no worker was started on top of it.
    let t = |e: &str| {
        evs.iter()
            .find(|x| x.process == "store" && x.event == e)
            .and_then(|x| x.raw["t_ms"].as_f64())
            .unwrap()
    };
    let took = t("failed") - t("spawned");
    eprintln!("spawn to failed readiness: {took:.0} ms");
    assert!(took < 30_000.0, "{took} ms");
    assert!(
        !evs.iter()
            .any(|e| e.process == "worker" && e.event == "spawned"),
        "{:?}",
        names(&evs)
    );
}

#[test]
fn a_worker_printing_mooncakes_rnic_inactive_line_gets_a_diagnosis_event_with_its_fix() {
    let env = TestEnv::new();
    let ports = Ports::new();
    let recipe = env.path("job.yaml");
    let line = "E1203 12:00:00.000000 4242 worker_pool.cpp:245] Too many errors found in local RNIC mlx5_3, mark it inactive";
    let args = format!(", --print-line, \"{line}\"");
    RecipeOpts {
        worker_args: &args,
        ..RecipeOpts::new(&ports)
    }
    .write(&recipe, &env.log_dir());
    let mut m = common::start_recipe(&env, "n", &[], &recipe, &["--role", "agg", "--node", "n1"]);
    let ev = m.wait_event("worker", "diagnosis", Duration::from_secs(90));
    let d = ev.raw["detail"].as_str().unwrap_or("").to_string();
    eprintln!("diagnosis: {d}");
    assert!(d.starts_with("rnic-inactive ("), "{d}");
    assert_eq!(ev.raw["diagnosis"]["signature"], "rnic-inactive");
    assert_eq!(ev.raw["diagnosis"]["line"], line);
    assert!(d.contains(line), "{d}");
    assert!(d.contains("| fix: check the NIC's link"), "{d}");
    assert!(d.contains("sgl-project/sglang #10560"), "{d}");
    // The store registered as planned, and said so in its ready event.
    let ready = m
        .events()
        .into_iter()
        .find(|e| e.process == "store" && e.event == "ready")
        .expect("store ready");
    let said = ready.raw["detail"].as_str().unwrap_or("");
    assert!(
        said.starts_with("registered with the master as 127.0.0.1:")
            && said.contains(": 64 MiB over tcp (client "),
        "{said}"
    );
    // The master's node checked the job's capacity against the stores' planned segments...
    let cap = m.wait_event("master", "capacity", Duration::from_secs(30));
    let cap = cap.raw["detail"].as_str().unwrap_or("").to_string();
    assert_eq!(
        cap,
        "Mooncake: 1 store(s) on 1 node(s), 64 MiB of 64 MiB registered"
    );
    // ...copied the master's series into its .prom, as a real Prometheus parser reads it...
    let prom = env.log_dir().join("n1.prom");
    let series = wait_for(
        "the master's series in n1.prom",
        Duration::from_secs(30),
        || {
            let p = parse_prom(&prom);
            p.contains_key(&(
                "mooncake_master_total_capacity_bytes".to_string(),
                "node=n1".to_string(),
            ))
            .then_some(p)
        },
    );
    let get =
        |name: &str, labels: &str| series.get(&(name.to_string(), labels.to_string())).copied();
    assert_eq!(
        get("mooncake_master_total_capacity_bytes", "node=n1"),
        Some((64u64 << 20) as f64)
    );
    assert_eq!(
        get("mcsup_store_segment_planned_bytes", "node=n1,process=store"),
        Some((64u64 << 20) as f64)
    );
    assert!(get("mooncake_master_active_clients", "node=n1").unwrap() >= 1.0);
    assert!(get("mooncake_master_key_count", "node=n1").is_some());
    assert!(series
        .keys()
        .any(|(n, l)| n == "mooncake_segment_total_capacity_bytes"
            && l.starts_with("node=n1,segment=127.0.0.1:")));
    // ...and `status --job` says it in a line.
    let out = std::process::Command::new(MCSUP)
        .args(["status", "--job", "--log-dir"])
        .arg(env.log_dir())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Mooncake: 1 store(s) on 1 node(s), 64 MiB of 64 MiB registered; "),
        "{text}"
    );
    // The master's periodic report stays whole in its log file; the console shows a short
    // summary instead of the ~2.5 KB line.
    let master_log = env.log_dir().join("n1.master.log");
    wait_for(
        "a report in the master's log",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(&master_log)
                .unwrap_or_default()
                .contains("Master Admin Metrics: ")
                .then_some(())
        },
    );
    let console = wait_for(
        "the summary on the console",
        Duration::from_secs(10),
        || {
            let c = m.stdout();
            c.contains("master | Mooncake master: memory ").then_some(c)
        },
    );
    assert!(!console.contains("Master Admin Metrics"), "{console}");
    // A diagnosis is an event, not a failure: the job runs on.
    m.signal(Signal::SIGTERM);
    let code = m.wait_exit(Duration::from_secs(60));
    assert_eq!(
        code,
        0,
        "events: {:#?}\nstderr: {}",
        m.events()
            .iter()
            .map(|e| e.raw.to_string())
            .collect::<Vec<_>>(),
        m.stderr()
    );
    let diagnoses = m.events().iter().filter(|e| e.event == "diagnosis").count();
    assert_eq!(diagnoses, 1, "one line, one event");
}
