//! Engines that stop the way they really do, under mcsup's stop profiles.
//!
//! The worker is the SGLang server mcsup derives from a v1 recipe (`python3 -m
//! sglang.launch_server --port P ...`), run by a stand-in with SGLang's SIGTERM contract
//! (tests/py/sglang_stop_contract.py) that reads the crash-dump switches with SGLang's own
//! `sglang/srt/environ.py` (the release scripts/setup.sh downloads). Under mcsup's defaults
//! (srt-slurm 2.0's switches off) it stops within its 10 s grace; with a coredump forced on it
//! would take 70 s, the plan says so before anything starts, and mcsup SIGKILLs it at its grace.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::recipe::venv_bin;
use common::{free_port, start_recipe, Mcsup, TestEnv};
use nix::sys::signal::Signal;

/// A package directory where `sglang.launch_server` is the stand-in and `sglang.srt.environ`
/// is SGLang's own.
fn fake_sglang(env: &TestEnv) -> PathBuf {
    let real = venv_bin().join("../client-sources/sglang/sglang/srt/environ.py");
    common::require(
        real.exists(),
        &real.display().to_string(),
        "run scripts/setup.sh (it downloads SGLang's release sources)",
    );
    let pkg = env.path("pkg");
    std::fs::create_dir_all(pkg.join("sglang/srt")).unwrap();
    std::fs::write(pkg.join("sglang/__init__.py"), "").unwrap();
    std::fs::write(pkg.join("sglang/srt/__init__.py"), "").unwrap();
    std::fs::copy(&real, pkg.join("sglang/srt/environ.py")).unwrap();
    let contract = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/sglang_stop_contract.py");
    std::fs::copy(contract, pkg.join("sglang/launch_server.py")).unwrap();
    pkg
}

fn recipe(env: &TestEnv, port: u16, extra_env: &str) -> PathBuf {
    let pkg = fake_sglang(env);
    let path = env.path("recipe.yaml");
    std::fs::write(
        &path,
        format!(
            r#"name: stop-contract
model: {{path: /models/x}}
backend:
  type: sglang
  sglang_config:
    agg:
      port: {port}
      tp-size: 1
environment:
  PYTHONPATH: {pkg}
{extra_env}mcsup:
  preflight:
    headroom_gib: 1
  log_dir: {log}
"#,
            pkg = pkg.display(),
            log = env.log_dir().display(),
        ),
    )
    .unwrap();
    path
}

fn plan_warnings(recipe: &Path) -> Vec<String> {
    let mut args: Vec<&std::ffi::OsStr> = [
        "plan", "--json", "--role", "agg", "--node", "n1", "--recipe",
    ]
    .iter()
    .map(|a| a.as_ref())
    .collect();
    args.push(recipe.as_os_str());
    let out = common::mcsup_ok(args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

/// Start the node, wait for the worker, ask mcsup to stop; the worker's log and mcsup's exit code.
fn run_and_stop(env: &TestEnv, recipe: &Path) -> (Mcsup, String, i32) {
    let mut m = start_recipe(env, "n", &[], recipe, &["--role", "agg", "--node", "n1"]);
    m.wait_event("sglang-aggregated", "ready", Duration::from_secs(30));
    m.signal(Signal::SIGTERM);
    let code = m.wait_exit(Duration::from_secs(40));
    let log = std::fs::read_to_string(env.log_dir().join("n1.sglang-aggregated.log")).unwrap();
    (m, log, code)
}

fn t_ms(m: &Mcsup, event: &str) -> f64 {
    Mcsup::find(&m.events(), "sglang-aggregated", event).t_ms
}

#[test]
fn sglang_stops_within_its_grace_with_srtctls_dump_switches() {
    let env = TestEnv::new();
    let r = recipe(&env, free_port(), "");
    let warnings = plan_warnings(&r);
    assert!(
        !warnings.iter().any(|w| w.contains("stop grace")),
        "{warnings:#?}"
    );
    let (m, log, code) = run_and_stop(&env, &r);
    assert_eq!(code, 0, "{}", m.stderr());
    // SGLang's own environ.py read mcsup's "0" as off.
    assert!(
        log.contains("crash dumps: pyspy=False coredump=False"),
        "{log}"
    );
    let evs = m.events();
    assert!(
        !evs.iter().any(|e| e.event == "killing"),
        "no SIGKILL: {:?}",
        common::names(&evs)
    );
    // One 5 s drain poll, well inside the 10 s grace.
    let took = t_ms(&m, "stopped") - t_ms(&m, "stopping");
    assert!(
        (4_500.0..9_500.0).contains(&took),
        "stopped after {took} ms"
    );
    env.assert_no_leftovers();
}

#[test]
fn a_forced_coredump_is_warned_before_start_and_sigkilled_at_the_grace() {
    let env = TestEnv::new();
    let r = recipe(
        &env,
        free_port(),
        "  SGLANG_CUDA_COREDUMP_BEFORE_CRASH: \"1\"\n",
    );
    let warnings = plan_warnings(&r);
    let w = warnings
        .iter()
        .find(|w| w.contains("SGLang may take 70 s to stop"))
        .unwrap_or_else(|| panic!("{warnings:#?}"));
    assert!(w.starts_with("sglang-aggregated: "), "{w}");
    assert!(w.contains("the stop grace is 10 s"), "{w}");
    assert!(w.contains("set SGLANG_CUDA_COREDUMP_BEFORE_CRASH=0"), "{w}");
    let (m, log, _) = run_and_stop(&env, &r);
    assert!(log.contains("coredump=True"), "{log}");
    assert!(
        // (The 60 s wait would start at 10 s, when the grace ends: racing the SIGKILL.)
        log.contains("Sleeping 5 seconds before crash diagnostics"),
        "{log}"
    );
    let killing = t_ms(&m, "killing") - t_ms(&m, "stopping");
    assert!(
        (9_500.0..12_000.0).contains(&killing),
        "SIGKILL {killing} ms after SIGTERM"
    );
    let finished = Mcsup::find(&m.events(), "mcsup", "finished");
    assert!(
        finished.raw["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("SIGKILLed 1 process(es) that did not stop in time: sglang-aggregated"),
        "{:?}",
        finished.raw
    );
    env.assert_no_leftovers();
}
