//! Recipes for tests that run the real Mooncake (master, store service, synthetic workers) on
//! 127.0.0.1 with the test's own ports, and small helpers to query the master.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::free_port;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's bin directory; the suite is run by scripts/test.sh, which installs it.
pub fn venv_bin() -> PathBuf {
    let venv = std::env::var_os("MCSUP_VENV").map_or_else(|| repo().join(".venv"), PathBuf::from);
    let bin = venv.join("bin");
    super::require(
        bin.join("mooncake_master").exists(),
        &format!("{}/mooncake_master", bin.display()),
        "run scripts/setup.sh (scripts/test.sh does)",
    );
    bin
}

/// Ports for one "node": Mooncake itself picks random ports in 12300-14300 and 15000-17000, and
/// the kernel's ephemeral range starts at 32768, so free_port() never lands in Mooncake's ranges.
pub struct Ports {
    pub rpc: u16,
    pub meta: u16,
    pub metrics: u16,
    /// `mcsup.control_port`: every node of a job of several nodes dials it.
    pub control: u16,
}

impl Ports {
    pub fn new() -> Ports {
        Ports {
            rpc: free_port(),
            meta: free_port(),
            metrics: free_port(),
            control: free_port(),
        }
    }
}

/// A recipe for this test: real master, a standalone store per role, synthetic workers.
pub struct RecipeOpts<'a> {
    pub ports: &'a Ports,
    pub store_port: u16,
    /// The store's client HTTP port (its `/health`, the store's liveness).
    pub client_http_port: u16,
    /// The standalone store's command (YAML list).
    pub store_command: &'a str,
    pub prefill_segment: &'a str,
    pub decode_segment: &'a str,
    pub agg_segment: &'a str,
    pub master_args: Option<&'a str>,
    pub master_extra_args: &'a str,
    /// Worker extra args per role (YAML list items, already quoted).
    pub worker_args: &'a str,
    pub workers: u32,
    pub store_restart: &'a str,
    /// `mcsup.master.restart`, when set.
    pub master_restart: Option<&'a str>,
    pub node_addresses: &'a str,
    pub deadline_seconds: u32,
    /// `mcsup.store.register_at_once`, when set.
    pub register_at_once: Option<u32>,
}

impl<'a> RecipeOpts<'a> {
    pub fn new(ports: &'a Ports) -> Self {
        RecipeOpts {
            ports,
            store_port: free_port(),
            client_http_port: free_port(),
            store_command: "[python, -m, mooncake.mooncake_store_service]",
            prefill_segment: "32mb",
            decode_segment: "48mb",
            agg_segment: "64mb",
            master_args: None,
            master_extra_args: "[]",
            worker_args: "",
            workers: 1,
            store_restart: "{policy: on-failure, max_restarts: 3, window_seconds: 60, backoff_initial_seconds: 0.2}",
            master_restart: None,
            node_addresses: "{}",
            deadline_seconds: 25,
            register_at_once: None,
        }
    }

    pub fn write(&self, path: &Path, log_dir: &Path) {
        let master_args = match self.master_args {
            Some(a) => format!("    master_args: {a}\n"),
            None => String::new(),
        };
        let worker = |role: &str| {
            format!(
                r#"    {role}:
      - name: worker
        count: {count}
        command: [python, {worker}]
        args: [--name, "{{node}}-{{role}}-{{index}}", --block-size, "65536", --blocks, "16", --interval, "0.05", --report-every, "1"{extra}]
        readiness: {{log_line: "READY", timeout_seconds: 60}}
        stop: {{grace_seconds: 10}}
"#,
                count = self.workers,
                worker = repo().join("workers/synthetic_worker.py").display(),
                extra = self.worker_args,
            )
        };
        let text = format!(
            r#"name: e2e
backend:
  type: sglang
  prefill_environment: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "0", MOONCAKE_LOCAL_BUFFER_SIZE: "16mb"}}
  decode_environment: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "0", MOONCAKE_LOCAL_BUFFER_SIZE: "16mb"}}
  aggregated_environment: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "0", MOONCAKE_LOCAL_BUFFER_SIZE: "16mb"}}
  mooncake_kv_store:
    env: {{MOONCAKE_PROTOCOL: tcp}}
{master_args}    master_extra_args: {extra}
    standalone:
      command: {store_command}
      args: [--port, "{sp}", --max-wait-time, "30"]
      env: {{MOONCAKE_PROTOCOL: tcp, MOONCAKE_LOCAL_BUFFER_SIZE: "16mb"}}
      placements:
        prefill: {{env: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "{ps}"}}}}
        decode: {{env: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "{ds}"}}}}
        aggregated: {{env: {{MOONCAKE_GLOBAL_SEGMENT_SIZE: "{as_}"}}}}
      health_check: {{port: {sp}, timeout_seconds: 60}}
mcsup:
  master:
    rpc_port: {rpc}
    metadata_port: {meta}
    metrics_port: {metrics}
    timeout_seconds: 60
{master_restart}  store:
    restart: {restart}
    client_http_port: {chp}
{at_once}  workers:
{wp}{wd}{wa}  preflight:
    # A Slurm test job gets 8 CPUs x 500 MiB; the default 10 GiB headroom would not fit.
    headroom_gib: 1
  shutdown:
    deadline_seconds: {deadline}
  log_dir: {log}
  node_addresses: {addrs}
  control_port: {control}
"#,
            extra = self.master_extra_args,
            sp = self.store_port,
            chp = self.client_http_port,
            store_command = self.store_command,
            ps = self.prefill_segment,
            ds = self.decode_segment,
            as_ = self.agg_segment,
            rpc = self.ports.rpc,
            meta = self.ports.meta,
            metrics = self.ports.metrics,
            restart = self.store_restart,
            master_restart = self
                .master_restart
                .map(|r| format!("    restart: {r}\n"))
                .unwrap_or_default(),
            wp = worker("prefill"),
            wd = worker("decode"),
            wa = worker("aggregated"),
            log = log_dir.display(),
            addrs = self.node_addresses,
            deadline = self.deadline_seconds,
            control = self.ports.control,
            at_once = self
                .register_at_once
                .map(|k| format!("    register_at_once: {k}\n"))
                .unwrap_or_default(),
        );
        std::fs::write(path, text).expect("write recipe");
    }
}

/// The master's Prometheus text.
pub fn metrics(port: u16) -> String {
    ureq::get(&format!("http://127.0.0.1:{port}/metrics"))
        .timeout(Duration::from_secs(3))
        .call()
        .ok()
        .and_then(|r| r.into_string().ok())
        .unwrap_or_default()
}

/// One value from Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
}

/// AIPerf's `aiperf` from `<repo>/.venv-aiperf` (scripts/setup.sh), or `MCSUP_AIPERF_VENV`.
pub fn aiperf() -> PathBuf {
    let venv = std::env::var_os("MCSUP_AIPERF_VENV")
        .map_or_else(|| repo().join(".venv-aiperf"), PathBuf::from);
    let bin = venv.join("bin/aiperf");
    super::require(
        bin.exists(),
        &bin.display().to_string(),
        "run scripts/setup.sh (scripts/test.sh does)",
    );
    bin
}

/// The Dynamo venv's bin directory (frontend, mocker, SGLang router) and its tiny model
/// directory; scripts/setup.sh installs both.
pub fn dynamo_venv() -> (PathBuf, PathBuf) {
    let venv = std::env::var_os("MCSUP_DYNAMO_VENV")
        .map_or_else(|| repo().join(".venv-dynamo"), PathBuf::from);
    let model = venv.join("tiny-model");
    super::require(
        venv.join("bin/python3").exists() && model.join("tokenizer.json").exists(),
        &format!("{} with its tiny-model", venv.display()),
        "run scripts/setup.sh (scripts/test.sh does)",
    );
    (venv.join("bin"), model)
}

/// `mcsup run` of `recipe` on this one machine, the Dynamo venv first on the PATH (py-spy too).
pub fn run_local_agg(env: &super::TestEnv, recipe: &Path) -> super::Mcsup {
    let (dynamo, _) = dynamo_venv();
    let path = format!(
        "{}:{}",
        dynamo.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let child = std::process::Command::new(super::MCSUP)
        .args([
            "run",
            "--role",
            "agg",
            "--node",
            "localhost",
            "--nodelist",
            "localhost",
        ])
        .arg("--recipe")
        .arg(recipe)
        .env("PATH", path)
        .env("MCSUP_TEST_TAG", &env.tag)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(env.path("mcsup.stdout")).unwrap())
        .stderr(std::fs::File::create(env.path("mcsup.stderr")).unwrap())
        .spawn()
        .unwrap();
    super::Mcsup::new(env, "localhost", child, env.dir.path().to_path_buf())
}
