//! `mcsup timeline`: the HTML it writes is loaded in a real headless Chromium (the Debian
//! package), its DOM checked (every process has its bars, the teardown tiers in order, the
//! failure marked) and a screenshot taken, for a real two-node run with a store crash and for a
//! 32-node x 12-process job.

use crate::common;

use common::view::*;
use common::*;
use mcsup::plan::*;
use nix::sys::signal::Signal;

const T: std::time::Duration = std::time::Duration::from_secs(15);
#[test]
fn a_real_run_draws_every_process_the_tiers_in_order_and_the_crash() {
    let env = TestEnv::new();
    let master = env.proc("master", ProcessKind::Master, &[]);
    let mut store = env.proc("store", ProcessKind::Store, &[]);
    store.restart.policy = RestartPolicy::OnFailure;
    dep(&mut store, "master");
    let mut worker = env.proc("worker", ProcessKind::Worker, &[]);
    dep(&mut worker, "store");
    let mut m = env.start(&env.plan(vec![master, store, worker]));
    m.wait_event("worker", "ready", T);
    // The store crashes and is restarted.
    let store_pid = m.pid_of("store").unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(store_pid), Signal::SIGKILL).unwrap();
    wait_for("the store restarted", T, || {
        m.pid_of("store").filter(|p| *p != store_pid)
    });
    wait_for("the restarted store ready", T, || {
        let readies = m
            .events()
            .iter()
            .filter(|e| e.process == "store" && e.event == "ready")
            .count();
        (readies >= 2).then_some(())
    });
    m.signal(Signal::SIGTERM);
    assert_eq!(m.wait_exit(T), 0, "{}", m.stderr());

    let page = env.path("timeline.html");
    timeline(&env.log_dir(), &page);
    let dom = chromium(&["--dump-dom"], &page);
    for p in ["master", "store", "worker"] {
        assert!(
            dom.contains(&format!(r#"data-node="n1" data-process="{p}""#)),
            "no row for {p}"
        );
        assert!(
            bar_from(&dom, "n1", p, "ready").is_some(),
            "no ready bar for {p}"
        );
    }
    // Teardown tiers, in the picture too: the worker stops first, the master last.
    let stop = |p| {
        bar_from(&dom, "n1", p, "stopping").unwrap_or_else(|| panic!("no stopping bar for {p}"))
    };
    assert!(stop("worker") <= stop("store") && stop("store") <= stop("master"));
    // The crash: a red bar (exit by SIGKILL) and a restart mark, with the reason on hover.
    assert!(dom.contains(r#"data-phase="failed""#), "no failed bar");
    assert!(dom.contains(r#"data-mark="restart""#), "no restart mark");
    assert!(dom.contains("restarting: "), "no restart reason");
    assert!(
        dom.contains("store down: exited, exit code 137 (SIGKILL)"),
        "no reason on the failed bar"
    );
    assert!(dom.contains(r#"class="shutdown""#), "no shutdown line");
    let shot = env.path("timeline.png");
    screenshot(&page, &shot, (1450, 220), Some("MCSUP_KEEP_TIMELINE"));
    env.assert_no_leftovers();
}

#[test]
fn thirty_two_nodes_of_twelve_processes_each_get_their_rows() {
    let env = TestEnv::new();
    let dir = env.log_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for n in 0..32 {
        let node = format!("gpu-{n:02}");
        let mut lines = String::new();
        let ev = |t: u64, p: &str, e: &str, detail: &str| {
            serde_json::to_string(&mcsup::supervisor::EventRecord {
                ts_ms: 1_000_000 + t,
                t_ms: t as f64,
                node: node.clone(),
                process: p.into(),
                event: e.into(),
                pid: Some(100),
                exit_code: None,
                signal: None,
                detail: (!detail.is_empty()).then(|| detail.to_string()),
                diagnosis: None,
            })
            .unwrap()
                + "\n"
        };
        for k in 0..12u64 {
            let p = format!("p{k}");
            lines += &ev(k * 50, &p, "spawned", "");
            lines += &ev(k * 50 + 400 + n * 10, &p, "ready", "");
            lines += &ev(60_000 + (12 - k) * 300, &p, "stopping", "SIGTERM");
            lines += &ev(60_200 + (12 - k) * 300, &p, "stopped", "");
        }
        lines += &ev(60_000, "mcsup", "shutdown-requested", "SIGTERM");
        std::fs::write(dir.join(format!("{node}.events.jsonl")), lines).unwrap();
    }
    let page = env.path("timeline.html");
    timeline(&dir, &page);
    let dom = chromium(&["--dump-dom"], &page);
    assert_eq!(dom.matches(r#"<g class="process""#).count(), 32 * 12);
    assert_eq!(dom.matches(r#"data-phase="ready""#).count(), 32 * 12);
    assert_eq!(dom.matches(r#"class="shutdown""#).count(), 32);
    assert!(dom.contains("32 node(s), 384 process(es)"));
    let shot = env.path("timeline.png");
    screenshot(&page, &shot, (1450, 8000), Some("MCSUP_KEEP_TIMELINE_BIG"));
}
