//! `<node>.prom`, read by a real Prometheus text-format parser (the `prometheus-client` package's
//! `text_string_to_metric_families`, installed in the venv by scripts/setup.sh) while the node
//! runs and after its teardown.

use crate::common;

use common::view::parse_prom;
use common::*;
use mcsup::plan::*;
use nix::sys::signal::Signal;

const T: std::time::Duration = std::time::Duration::from_secs(15);

fn key(name: &str, process: &str, kind: &str) -> (String, String) {
    (
        name.to_string(),
        format!("kind={kind},node=n1,process={process}"),
    )
}

#[test]
fn the_metrics_file_parses_and_follows_the_node() {
    let env = TestEnv::new();
    let port = free_port();
    // The master listens after 300 ms: its readiness probe fails a few times first.
    let mut master = env.proc(
        "master",
        ProcessKind::Master,
        &["--listen", &port.to_string(), "--listen-after", "300"],
    );
    master.readiness = readiness(
        vec![ProbeSpec::Tcp {
            host: "127.0.0.1".into(),
            port,
        }],
        10_000,
    );
    let mut worker = env.proc("worker", ProcessKind::Worker, &[]);
    dep(&mut worker, "master");
    let mut m = env.start(&env.plan(vec![master, worker]));
    m.wait_event("worker", "ready", T);
    let prom = env.log_dir().join("n1.prom");
    let running = wait_for("the metrics with the worker ready", T, || {
        let p = parse_prom(&prom);
        (p.get(&key("mcsup_process_ready", "worker", "worker")) == Some(&1.0)).then_some(p)
    });
    assert_eq!(running[&key("mcsup_process_up", "master", "master")], 1.0);
    assert_eq!(
        running[&key("mcsup_process_ready", "master", "master")],
        1.0
    );
    assert_eq!(
        running[&key("mcsup_process_restarts_total", "worker", "worker")],
        0.0
    );
    let ready_s = running[&key("mcsup_process_ready_seconds", "master", "master")];
    assert!((0.3..10.0).contains(&ready_s), "{ready_s}");
    assert!(running[&key("mcsup_process_probe_failures_total", "master", "master")] >= 1.0);
    assert_eq!(
        running[&(
            "mcsup_phase".to_string(),
            "node=n1,phase=running".to_string()
        )],
        1.0
    );
    // The file's age, as a scraper checks it: written just now, and how often it is.
    let node = |name: &str| (name.to_string(), "node=n1".to_string());
    assert_eq!(running[&node("mcsup_heartbeat_seconds")], 5.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let age = now - running[&node("mcsup_status_updated_timestamp_seconds")];
    assert!((0.0..15.0).contains(&age), "{age} s old");

    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    let done = parse_prom(&prom);
    assert_eq!(done[&key("mcsup_process_up", "master", "master")], 0.0);
    assert_eq!(
        done[&key("mcsup_process_last_exit_code", "worker", "worker")],
        143.0
    );
    let teardown = done[&("mcsup_teardown_seconds".to_string(), "node=n1".to_string())];
    assert!(teardown > 0.0 && teardown < 10.0, "{teardown}");
    env.assert_no_leftovers();
}

#[test]
fn a_gate_has_its_own_series() {
    let env = TestEnv::new();
    let port = free_port();
    let mut worker = env.proc("worker", ProcessKind::Worker, &[]);
    dep(&mut worker, "master@n0");
    let mut plan = env.plan(vec![worker]);
    plan.gates.push(GateSpec {
        name: "master@n0".into(),
        readiness: readiness(
            vec![ProbeSpec::Tcp {
                host: "127.0.0.1".into(),
                port,
            }],
            20_000,
        )
        .unwrap(),
    });
    let mut m = env.start(&plan);
    let prom = env.log_dir().join("n1.prom");
    let gate = |name: &str| (name.to_string(), "gate=master@n0,node=n1".to_string());
    // Closed port: the gate is not ready and its failed attempts are counted.
    let waiting = wait_for("the gate's failed probes in the metrics", T, || {
        let p = parse_prom(&prom);
        (p.get(&gate("mcsup_gate_probe_failures_total")) >= Some(&1.0)).then_some(p)
    });
    assert_eq!(waiting[&gate("mcsup_gate_ready")], 0.0);
    assert!(!waiting.contains_key(&gate("mcsup_gate_ready_seconds")));
    // Gates are not processes.
    assert!(!waiting
        .keys()
        .any(|(_, l)| l.contains("master@n0") && l.contains("process=")));

    let _listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind");
    m.wait_event("worker", "ready", T);
    let open = wait_for("the gate ready in the metrics", T, || {
        let p = parse_prom(&prom);
        (p.get(&gate("mcsup_gate_ready")) == Some(&1.0)).then_some(p)
    });
    let ready_s = open[&gate("mcsup_gate_ready_seconds")];
    assert!((0.0..10.0).contains(&ready_s) && ready_s > 0.0, "{ready_s}");
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());
    env.assert_no_leftovers();
}
