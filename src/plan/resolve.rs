//! `plan()`: the pure function from (recipe, roles, node) to this node's [`Plan`].
//!
//! Order and layering follow srt-slurm (shared/reference/srt-slurm.md):
//! - master (infra node only) → store (one per node, co-located identical placements merged) →
//!   workers; the store waits for the master (or, on other nodes, a gate on the remote master),
//!   workers wait for the store (or the master when there is no store).
//! - Store env, later wins: `MOONCAKE_LOCAL_HOSTNAME=<node ip>` < `standalone.env` < placement env
//!   < forced `MOONCAKE_MASTER` / `MOONCAKE_TE_META_DATA_SERVER`.
//! - Worker env, later wins: `MOONCAKE_LOCAL_HOSTNAME=<node ip>` (a default the user may override)
//!   < `backend.<role>_environment` < top-level `environment` < the worker's own `env` <
//!   `mooncake_kv_store.env` < forced `MOONCAKE_MASTER` / `MOONCAKE_TE_META_DATA_SERVER`
//!   (vLLM also `MOONCAKE_CONFIG_PATH`).
//!
//! No I/O happens here: the node's identity and paths arrive in [`NodeContext`].

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::env::EnvBuilder;
use super::spec::*;
use crate::node::NodeContext;
use crate::recipe::*;
use crate::size;

/// Default master ports (srt-slurm's).
pub const DEFAULT_RPC_PORT: u16 = 8700;
pub const DEFAULT_METADATA_PORT: u16 = 8701;
pub const DEFAULT_METRICS_PORT: u16 = 8702;

/// The tunables `master_args` replaces.
pub const DEFAULT_MASTER_TUNABLES: [&str; 3] = [
    "--eviction_high_watermark_ratio=0.9",
    "--default_kv_lease_ttl=10000",
    "--rpc_thread_num=16",
];

/// Mooncake's store-service segment default when the variable is unset (3.125 GiB).
pub const MOONCAKE_DEFAULT_SEGMENT: u64 = 3_355_443_200;
/// Mooncake allocates segments in 16 MiB chunks and rejects smaller ones.
pub const MIN_STORE_SEGMENT: u64 = 16 << 20;

/// A recipe that is syntactically fine but cannot be planned for this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PlanError {
    /// Dotted key path in the recipe (or a CLI flag such as `--role`).
    pub key_path: String,
    pub message: String,
    pub fix: String,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}\n  fix: {}",
            self.key_path, self.message, self.fix
        )
    }
}

fn err(
    key_path: impl Into<String>,
    message: impl Into<String>,
    fix: impl Into<String>,
) -> PlanError {
    PlanError {
        key_path: key_path.into(),
        message: message.into(),
        fix: fix.into(),
    }
}

/// Values for the literal placeholders `{node}`, `{node_ip}`, ...
#[derive(Debug, Clone)]
struct Placeholders {
    pairs: Vec<(&'static str, String)>,
}

impl Placeholders {
    fn new(ctx: &NodeContext, rpc: u16, meta: u16) -> Self {
        Placeholders {
            pairs: vec![
                ("{node}", ctx.name.clone()),
                ("{node_ip}", ctx.ip.clone()),
                ("{node_id}", ctx.node_id.to_string()),
                ("{infra_node}", ctx.infra_node.clone()),
                ("{infra_ip}", ctx.infra_ip.clone()),
                ("{master_port}", rpc.to_string()),
                ("{metadata_port}", meta.to_string()),
                (
                    "{job_id}",
                    ctx.job_id.clone().unwrap_or_else(|| "local".into()),
                ),
            ],
        }
    }

    fn with(&self, role: &str, index: u32) -> Self {
        let mut p = self.clone();
        p.pairs.push(("{role}", role.to_string()));
        p.pairs.push(("{index}", index.to_string()));
        p
    }

    /// Literal replacement (not format!): JSON braces in values survive.
    fn apply(&self, s: &str) -> String {
        let mut out = s.to_string();
        for (k, v) in &self.pairs {
            if out.contains(k) {
                out = out.replace(k, v);
            }
        }
        out
    }

    fn apply_all(&self, words: &[String]) -> Vec<String> {
        words.iter().map(|w| self.apply(w)).collect()
    }
}

/// Parse `--role` text: `prefill`, `decode`, `agg`/`aggregated`, or a comma list.
pub fn parse_roles(text: &str) -> Result<Vec<Role>, PlanError> {
    let mut roles = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let role: Role = part.parse().map_err(|e: String| {
            err(
                "--role",
                e,
                "use e.g. --role decode or --role prefill,decode",
            )
        })?;
        if !roles.contains(&role) {
            roles.push(role);
        }
    }
    if roles.is_empty() {
        return Err(err(
            "--role",
            "no role given",
            "use e.g. --role decode (or set MCSUP_ROLE)",
        ));
    }
    Ok(roles)
}

fn policy_defaults(kind: ProcessKind) -> (StopSpec, RestartSpec) {
    let stop = match kind {
        ProcessKind::Worker => StopSpec {
            signal: SignalName::SIGTERM,
            grace: Duration::from_secs(10),
        },
        // Older store services handle only SIGINT (KeyboardInterrupt).
        ProcessKind::Store => StopSpec {
            signal: SignalName::SIGINT,
            grace: Duration::from_secs(5),
        },
        ProcessKind::Master => StopSpec {
            signal: SignalName::SIGTERM,
            grace: Duration::from_secs(5),
        },
    };
    let restart = RestartSpec {
        policy: match kind {
            // A restarted store re-registers its segment; a restarted master loses all metadata
            // and an inference worker restart needs its peers: fail fast by default.
            ProcessKind::Store => RestartPolicy::OnFailure,
            _ => RestartPolicy::Never,
        },
        success_codes: vec![0],
        backoff_initial: Duration::from_secs(1),
        backoff_factor: 2.0,
        backoff_max: Duration::from_secs(30),
        reset_after: Duration::from_secs(60),
        max_restarts: 3,
        window: Duration::from_secs(600),
    };
    (stop, restart)
}

fn apply_stop(mut base: StopSpec, cfg: Option<&StopConfig>) -> StopSpec {
    if let Some(c) = cfg {
        if let Some(s) = c.signal {
            base.signal = s.0;
        }
        if let Some(g) = c.grace_seconds {
            base.grace = g.duration();
        }
    }
    base
}

fn apply_restart(
    mut base: RestartSpec,
    cfg: Option<&RestartConfig>,
    key: &str,
) -> Result<RestartSpec, PlanError> {
    let Some(c) = cfg else { return Ok(base) };
    if let Some(p) = c.policy {
        base.policy = match p {
            RestartPolicyName::Never => RestartPolicy::Never,
            RestartPolicyName::OnFailure => RestartPolicy::OnFailure,
            RestartPolicyName::Always => RestartPolicy::Always,
        };
    }
    if let Some(codes) = &c.success_codes {
        if let Some(bad) = codes.iter().find(|c| !(0..=255).contains(*c)) {
            return Err(err(
                format!("{key}.success_codes"),
                format!("exit code {bad} is out of range"),
                "exit codes are 0..=255",
            ));
        }
        base.success_codes = codes.clone();
    }
    if let Some(s) = c.backoff_initial_seconds {
        base.backoff_initial = s.duration();
    }
    if let Some(f) = c.backoff_factor {
        if !(1.0..=100.0).contains(&f) {
            return Err(err(
                format!("{key}.backoff_factor"),
                format!("{f} is out of range"),
                "use a factor from 1.0 (fixed delay) to 100",
            ));
        }
        base.backoff_factor = f;
    }
    if let Some(s) = c.backoff_max_seconds {
        base.backoff_max = s.duration();
    }
    if base.backoff_max < base.backoff_initial {
        return Err(err(
            format!("{key}.backoff_max_seconds"),
            "the backoff cap is below the initial backoff",
            "make backoff_max_seconds at least backoff_initial_seconds",
        ));
    }
    if let Some(s) = c.reset_after_seconds {
        base.reset_after = s.duration();
    }
    if let Some(n) = c.max_restarts {
        base.max_restarts = n;
    }
    if let Some(w) = c.window_seconds {
        base.window = w.duration();
    }
    Ok(base)
}

/// "Start after `target` is healthy", when there is a target.
fn healthy(target: Option<&str>) -> Vec<DependencySpec> {
    target
        .map(|t| DependencySpec {
            target: t.to_string(),
            condition: DependencyCondition::Healthy,
        })
        .into_iter()
        .collect()
}

fn tcp(host: &str, port: u16) -> ProbeSpec {
    ProbeSpec::Tcp {
        host: host.to_string(),
        port,
    }
}

fn readiness(probes: Vec<ProbeSpec>, timeout: Duration) -> ReadinessSpec {
    ReadinessSpec {
        probes,
        initial_delay: Duration::ZERO,
        // Start fast (an instantly-ready service is seen in milliseconds), back off to 1 s.
        interval: Duration::from_millis(10),
        max_interval: Duration::from_secs(1),
        attempt_timeout: Duration::from_secs(2),
        timeout,
    }
}

fn probe_list(
    p: &Placeholders,
    tcp_cfg: Option<&TcpProbeConfig>,
    http: Option<&HttpProbeConfig>,
    exec: Option<&Command>,
    file: Option<&String>,
    cwd: &std::path::Path,
) -> Vec<ProbeSpec> {
    let mut probes = Vec::new();
    if let Some(t) = tcp_cfg {
        probes.push(tcp(
            &p.apply(t.host.as_deref().unwrap_or("127.0.0.1")),
            t.port.0,
        ));
    }
    if let Some(h) = http {
        probes.push(ProbeSpec::Http {
            host: p.apply(h.host.as_deref().unwrap_or("127.0.0.1")),
            port: h.port.0,
            path: p.apply(h.path.as_deref().unwrap_or("/")),
            status: h.status.unwrap_or(200),
            body_contains: h.body_contains.clone(),
        });
    }
    if let Some(e) = exec {
        probes.push(ProbeSpec::Exec {
            argv: p.apply_all(&e.0),
        });
    }
    if let Some(f) = file {
        probes.push(ProbeSpec::File {
            path: cwd.join(p.apply(f)),
        });
    }
    probes
}

fn role_env(backend: &Backend, role: Role) -> &EnvMap {
    match role {
        Role::Prefill => &backend.prefill_environment,
        Role::Decode => &backend.decode_environment,
        Role::Aggregated => &backend.aggregated_environment,
    }
}

/// Resolve the plan for this node.
pub fn plan(recipe: &Recipe, roles: &[Role], ctx: &NodeContext) -> Result<Plan, PlanError> {
    if roles.is_empty() {
        return Err(err("--role", "no role given", "use e.g. --role decode"));
    }
    let default_backend = Backend::default();
    let backend = recipe.backend.as_ref().unwrap_or(&default_backend);
    let default_mcsup = McsupSection::default();
    let mc = recipe.mcsup.as_ref().unwrap_or(&default_mcsup);
    let mk = backend.mooncake_kv_store.as_ref();
    let mut warnings: Vec<String> = ctx.warnings.clone();
    let mut ignored: Vec<String> = recipe.ignored.clone();
    ignored.extend(backend.ignored.iter().cloned());

    if backend.r#type == BackendType::Trtllm && mc.workers == WorkersConfig::default() {
        warnings.push("backend.type trtllm: mcsup derives no worker command for TRT-LLM; list workers under mcsup.workers".into());
    }
    if let (Some(_), Some(sg), BackendType::Sglang) = (mk, &backend.sglang_config, backend.r#type) {
        let disagg = sg.prefill.is_some() || sg.decode.is_some();
        let uses_mooncake = [&sg.prefill, &sg.decode].iter().any(|f| {
            f.as_ref()
                .and_then(|f| f.get("disaggregation-transfer-backend"))
                .and_then(|v| v.as_str())
                .is_some_and(|v| v.eq_ignore_ascii_case("mooncake"))
        });
        if disagg && !uses_mooncake {
            return Err(err(
                "backend.sglang_config",
                "mooncake_kv_store is set for a disaggregated SGLang recipe, but neither prefill nor decode uses the Mooncake transfer backend",
                "add `disaggregation-transfer-backend: mooncake` to backend.sglang_config.prefill (and decode)",
            ));
        }
    }

    // Ports.
    let rpc = mc.master.rpc_port.map_or(DEFAULT_RPC_PORT, |p| p.0);
    let meta = mc
        .master
        .metadata_port
        .map_or(DEFAULT_METADATA_PORT, |p| p.0);
    let metrics = mc.master.metrics_port.map_or(DEFAULT_METRICS_PORT, |p| p.0);
    if rpc == meta || rpc == metrics || meta == metrics {
        return Err(err(
            "mcsup.master",
            format!(
                "the master's ports must differ (rpc {rpc}, metadata {meta}, metrics {metrics})"
            ),
            "give rpc_port, metadata_port and metrics_port three different values",
        ));
    }
    let ph = Placeholders::new(ctx, rpc, meta);
    let master_addr = format!("{}:{rpc}", ctx.infra_ip);
    let metadata_url = format!("http://{}:{meta}/metadata", ctx.infra_ip);
    let master_timeout = mc
        .master
        .timeout_seconds
        .map_or(Duration::from_secs(120), |s| s.duration());

    let log_dir = {
        let raw = mc
            .log_dir
            .clone()
            .unwrap_or_else(|| "mcsup-logs/{job_id}".into());
        let p = PathBuf::from(ph.apply(&raw));
        if p.is_absolute() {
            p
        } else {
            ctx.cwd.join(p)
        }
    };

    let mut processes: Vec<ProcessSpec> = Vec::new();
    let mut gates: Vec<GateSpec> = Vec::new();
    let mut files: Vec<FileSpec> = Vec::new();

    // ---------------- master ----------------
    // What the store and workers wait on for the master: a local process or a remote gate.
    let mut master_dep: Option<String> = None;
    if let Some(mk) = mk {
        if let Some(c) = &mk.container {
            ignored.push(format!(
                "backend.mooncake_kv_store.container ({c}: mcsup runs inside the job's container)"
            ));
        }
        if ctx.runs_master {
            let (stop, restart) = policy_defaults(ProcessKind::Master);
            let mut argv = mc
                .master
                .command
                .as_ref()
                .map_or_else(|| vec!["mooncake_master".to_string()], |c| c.0.clone());
            argv.extend([
                format!("--rpc_port={rpc}"),
                "--enable_http_metadata_server=true".into(),
                format!("--http_metadata_server_port={meta}"),
                "--enable_metric_reporting=true".into(),
                format!("--metrics_port={metrics}"),
            ]);
            match &mk.master_args {
                Some(a) => argv.extend(ph.apply_all(&a.0)),
                None => argv.extend(DEFAULT_MASTER_TUNABLES.iter().map(|s| s.to_string())),
            }
            argv.extend(ph.apply_all(&mk.master_extra_args.0));
            let argv = ph.apply_all(&argv);
            let mut env = EnvBuilder::new();
            env.layer(
                mc.master.env.iter().map(|(k, v)| (k, ph.apply(v))),
                "mcsup.master.env",
            );
            processes.push(ProcessSpec {
                name: "master".into(),
                kind: ProcessKind::Master,
                roles: Vec::new(),
                argv,
                preamble: None,
                env: env.build(),
                cwd: None,
                depends_on: Vec::new(),
                readiness: Some(readiness(
                    vec![
                        tcp("127.0.0.1", rpc),
                        tcp("127.0.0.1", meta),
                        tcp("127.0.0.1", metrics),
                    ],
                    master_timeout,
                )),
                liveness: None,
                restart: apply_restart(
                    restart,
                    mc.master.restart.as_ref(),
                    "mcsup.master.restart",
                )?,
                stop: apply_stop(stop, mc.master.stop.as_ref()),
                critical: true,
            });
            master_dep = Some("master".into());
        } else {
            let name = format!("master@{}", ctx.infra_node);
            gates.push(GateSpec {
                name: name.clone(),
                readiness: ReadinessSpec {
                    // A remote master: no exit event to wait on, so poll, gently.
                    interval: Duration::from_millis(100),
                    ..readiness(
                        vec![tcp(&ctx.infra_ip, rpc), tcp(&ctx.infra_ip, meta)],
                        master_timeout,
                    )
                },
            });
            master_dep = Some(name);
        }
    } else if !mc
        .workers
        .prefill
        .iter()
        .chain(&mc.workers.decode)
        .chain(&mc.workers.aggregated)
        .all(|w| w.is_empty())
        && backend.mooncake_kv_store.is_none()
    {
        warnings.push("backend.mooncake_kv_store is not set: no Mooncake master or store is managed; only workers run".into());
    }

    // ---------------- store ----------------
    let mut store_name: Option<String> = None;
    let standalone = mk.and_then(|m| m.standalone.as_ref()).filter(|s| s.enabled);
    if let (Some(sa), Some(_)) = (standalone, mk) {
        let placed: Vec<(Role, &Placement)> = roles
            .iter()
            .filter_map(|r| {
                sa.placements
                    .for_role(*r)
                    .filter(|p| p.enabled)
                    .map(|p| (*r, p))
            })
            .collect();
        if placed.len() > 1 {
            let (r0, p0) = placed[0];
            for (r, p) in &placed[1..] {
                let mut differing = Vec::new();
                let keys: BTreeSet<&str> =
                    p0.env.iter().chain(p.env.iter()).map(|(k, _)| k).collect();
                for k in keys {
                    if p0.env.get(k) != p.env.get(k) {
                        differing.push(format!("env.{k}"));
                    }
                }
                if p0.args != p.args {
                    differing.push("args".into());
                }
                if !differing.is_empty() {
                    return Err(err(
                        "backend.mooncake_kv_store.standalone.placements",
                        format!(
                            "Mooncake standalone placements for co-located roles on node {} conflict: {r0}, {r} (differing: {})",
                            ctx.name,
                            differing.join(", ")
                        ),
                        "use identical placement env/args for co-located roles, or disable one placement (enabled: false)",
                    ));
                }
            }
        }
        if let Some((_, placement)) = placed.first() {
            let store_roles: Vec<Role> = placed.iter().map(|(r, _)| *r).collect();
            let role_label = store_roles
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join("_");
            let sp = ph.with(&role_label, 0);
            let mut argv = sa.command.0.clone();
            argv.extend(sa.args.0.iter().cloned());
            argv.extend(placement.args.0.iter().cloned());
            let argv = sp.apply_all(&argv);
            let mut env = EnvBuilder::new();
            set_local_defaults(&mut env, ctx);
            env.layer(
                sa.env.iter().map(|(k, v)| (k, sp.apply(v))),
                "standalone.env",
            );
            env.layer(
                placement.env.iter().map(|(k, v)| (k, sp.apply(v))),
                &format!("placements.{}.env", store_roles[0]),
            );
            env.set("MOONCAKE_MASTER", master_addr.clone(), "forced");
            env.set(
                "MOONCAKE_TE_META_DATA_SERVER",
                metadata_url.clone(),
                "forced",
            );
            match env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE").map(|v| v.value.clone()) {
                None => warnings.push(format!(
                    "store on {}: MOONCAKE_GLOBAL_SEGMENT_SIZE is not set, so Mooncake uses its default of {} — set it in standalone.placements.<role>.env",
                    ctx.name,
                    size::Bytes(MOONCAKE_DEFAULT_SEGMENT)
                )),
                Some(v) if !v.contains('{') => {
                    if let Ok(n) = size::parse_mooncake_size(&v) {
                        if n < MIN_STORE_SEGMENT {
                            return Err(err(
                                format!("backend.mooncake_kv_store.standalone.placements.{}.env.MOONCAKE_GLOBAL_SEGMENT_SIZE", store_roles[0]),
                                format!("the store's segment {v} ({}) is below Mooncake's minimum of 16 MiB", size::Bytes(n)),
                                "give the store at least \"16mb\" (segments are allocated in 16 MiB chunks)",
                            ));
                        }
                    }
                }
                Some(_) => {}
            }
            let (stop, restart) = policy_defaults(ProcessKind::Store);
            let readiness = sa.health_check.map(|h| {
                readiness(
                    vec![tcp("127.0.0.1", h.port.0)],
                    h.timeout_seconds.duration(),
                )
            });
            if readiness.is_none() {
                warnings.push("standalone.health_check is null: workers start as soon as the store is spawned, before its segment is mounted".into());
            }
            let liveness = match &mc.store.liveness {
                Some(l) => Some(liveness_spec(&sp, l, "mcsup.store.liveness", &ctx.cwd)?),
                None => None,
            };
            for (key, what) in [
                ("cpus_per_task", sa.cpus_per_task.is_some()),
                ("cpu_bind", sa.cpu_bind.is_some()),
                ("srun_options", !sa.srun_options.is_empty()),
            ] {
                if what {
                    ignored.push(format!("backend.mooncake_kv_store.standalone.{key} (an srun launch option: mcsup runs inside the step)"));
                }
            }
            processes.push(ProcessSpec {
                name: "store".into(),
                kind: ProcessKind::Store,
                roles: store_roles.clone(),
                argv,
                preamble: sa.preamble.as_ref().map(|p| sp.apply(p)),
                env: env.build(),
                cwd: None,
                depends_on: healthy(master_dep.as_deref()),
                readiness,
                liveness,
                restart: apply_restart(restart, mc.store.restart.as_ref(), "mcsup.store.restart")?,
                stop: apply_stop(stop, mc.store.stop.as_ref()),
                critical: sa.critical,
            });
            store_name = Some("store".into());
        }
    }

    // ---------------- workers ----------------
    let worker_dep = store_name.clone().or(master_dep.clone());
    let vllm_config_path = log_dir.join("mooncake_store_config.json");
    if let (Some(mk), BackendType::Vllm) = (mk, backend.r#type) {
        let mut cfg = mk.store_config.clone().unwrap_or_default();
        if let Some(v) = cfg.get("global_segment_size") {
            let nonzero = match v {
                serde_json::Value::Number(n) => n.as_u64() != Some(0),
                serde_json::Value::String(s) => {
                    size::parse_mooncake_size(s).is_ok_and(|n| n != 0)
                        || size::parse_mooncake_size(s).is_err()
                }
                _ => true,
            };
            if nonzero && store_name.is_some() {
                warnings.push(format!(
                    "backend.mooncake_kv_store.store_config.global_segment_size is {v}, but a standalone store serves this node: each vLLM rank would contribute DRAM too — set it to 0 and mode: standalone-store"
                ));
            }
        }
        cfg.insert(
            "master_server_address".into(),
            serde_json::Value::String(master_addr.clone()),
        );
        cfg.insert(
            "metadata_server".into(),
            serde_json::Value::String(metadata_url.clone()),
        );
        let contents = serde_json::to_string_pretty(&cfg).unwrap_or_else(|_| "{}".into());
        files.push(FileSpec {
            path: vllm_config_path.clone(),
            contents: contents + "\n",
            purpose:
                "vLLM MooncakeStoreConnector config (MOONCAKE_CONFIG_PATH); master address forced"
                    .into(),
        });
    }

    let mut names: BTreeSet<String> = processes.iter().map(|p| p.name.clone()).collect();
    for &role in roles {
        let configured = mc.workers.for_role(role);
        let entries: Vec<(String, WorkerConfig)> = match configured {
            Some(list) => list
                .iter()
                .enumerate()
                .map(|(i, w)| (format!("mcsup.workers.{role}[{i}]"), w.clone()))
                .collect(),
            None => match derived_worker(backend, role) {
                Some(w) => vec![(
                    format!("backend.{}_config.{role}", backend_flag_section(backend)),
                    w,
                )],
                None => {
                    warnings.push(format!(
                        "role {role} has no worker on this node: add mcsup.workers.{role} (or backend.sglang_config.{role})"
                    ));
                    Vec::new()
                }
            },
        };
        for (key, w) in entries {
            if w.count == 0 {
                return Err(err(
                    format!("{key}.count"),
                    "count is 0",
                    "use count: 1 or more, or remove the worker",
                ));
            }
            if w.name.trim().is_empty()
                || !w
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                return Err(err(
                    format!("{key}.name"),
                    format!("`{}` is not a usable process name", w.name),
                    "use letters, digits, '-', '_' or '.' (it names log files)",
                ));
            }
            for index in 0..w.count {
                let name = if w.count > 1 {
                    format!("{}-{index}", w.name)
                } else {
                    w.name.clone()
                };
                if !names.insert(name.clone()) {
                    return Err(err(
                        format!("{key}.name"),
                        format!("duplicate process name `{name}` on this node"),
                        "give each worker (and role) a distinct name",
                    ));
                }
                let wp = ph.with(role.as_str(), index);
                let mut argv = w.command.0.clone();
                argv.extend(w.args.0.iter().cloned());
                let argv = wp.apply_all(&argv);
                let mut env = EnvBuilder::new();
                if mk.is_some() {
                    set_local_defaults(&mut env, ctx);
                }
                let role_env_name = format!("backend.{role}_environment");
                env.layer(
                    role_env(backend, role)
                        .iter()
                        .map(|(k, v)| (k, wp.apply(v))),
                    &role_env_name,
                );
                env.layer(
                    recipe.environment.iter().map(|(k, v)| (k, wp.apply(v))),
                    "environment",
                );
                env.layer(
                    w.env.iter().map(|(k, v)| (k, wp.apply(v))),
                    &format!("{key}.env"),
                );
                if let Some(mk) = mk {
                    for (k, v) in mk.env.iter() {
                        let v = wp.apply(v);
                        if let Some(prev) = role_env(backend, role).get(k) {
                            if wp.apply(prev) != v {
                                warnings.push(format!(
                                    "{name}: backend.mooncake_kv_store.env.{k}=\"{v}\" silently overrides {role_env_name}.{k}=\"{prev}\" (srt-slurm layering) — remove one of them"
                                ));
                            }
                        }
                        env.set(k, v, "mooncake_kv_store.env");
                    }
                    env.set("MOONCAKE_MASTER", master_addr.clone(), "forced");
                    env.set(
                        "MOONCAKE_TE_META_DATA_SERVER",
                        metadata_url.clone(),
                        "forced",
                    );
                    if backend.r#type == BackendType::Vllm {
                        env.set(
                            "MOONCAKE_CONFIG_PATH",
                            vllm_config_path.display().to_string(),
                            "forced",
                        );
                    }
                    if store_name.is_some() && backend.r#type != BackendType::Vllm {
                        check_worker_segment(
                            &name,
                            env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE")
                                .map(|v| v.value.as_str()),
                            &mut warnings,
                        );
                    }
                }
                if mk.is_some() && backend.r#type == BackendType::Sglang {
                    if let Some(v) = env.get("MOONCAKE_GLOBAL_SEGMENT_SIZE") {
                        if !size::sglang_accepts(&v.value) && !v.value.contains('{') {
                            warnings.push(format!(
                                "{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE=\"{}\" is valid for Mooncake but SGLang's parser rejects it (it takes an integer followed by gb, or plain bytes)",
                                v.value
                            ));
                        }
                    }
                }
                let (stop, restart) = policy_defaults(ProcessKind::Worker);
                let stop = apply_stop(
                    apply_stop(stop, mc.worker_defaults.stop.as_ref()),
                    w.stop.as_ref(),
                );
                let restart = apply_restart(
                    restart,
                    mc.worker_defaults.restart.as_ref(),
                    "mcsup.worker_defaults.restart",
                )?;
                let restart =
                    apply_restart(restart, w.restart.as_ref(), &format!("{key}.restart"))?;
                let readiness = match &w.readiness {
                    Some(r) => {
                        let mut probes = probe_list(
                            &wp,
                            r.tcp.as_ref(),
                            r.http.as_ref(),
                            r.exec.as_ref(),
                            r.file.as_ref(),
                            &ctx.cwd,
                        );
                        if let Some(pat) = &r.log_line {
                            probes.push(ProbeSpec::LogLine {
                                pattern: pat.0.clone(),
                            });
                        }
                        if probes.is_empty() {
                            return Err(err(
                                format!("{key}.readiness"),
                                "readiness names no probe",
                                "add one of tcp, http, exec, log_line, file (or remove readiness)",
                            ));
                        }
                        let mut spec = readiness(
                            probes,
                            r.timeout_seconds
                                .map_or(Duration::from_secs(600), |s| s.duration()),
                        );
                        if let Some(d) = r.initial_delay_seconds {
                            spec.initial_delay = d.duration();
                        }
                        if let Some(i) = r.interval_seconds {
                            spec.interval = i.duration();
                            spec.max_interval = spec.max_interval.max(i.duration());
                        }
                        Some(spec)
                    }
                    None => None,
                };
                let liveness = match &w.liveness {
                    Some(l) => Some(liveness_spec(&wp, l, &format!("{key}.liveness"), &ctx.cwd)?),
                    None => None,
                };
                processes.push(ProcessSpec {
                    name,
                    kind: ProcessKind::Worker,
                    roles: vec![role],
                    argv,
                    preamble: w.preamble.as_ref().map(|p| wp.apply(p)),
                    env: env.build(),
                    cwd: w.cwd.as_ref().map(|c| ctx.cwd.join(wp.apply(c))),
                    depends_on: healthy(worker_dep.as_deref()),
                    readiness,
                    liveness,
                    restart,
                    stop,
                    critical: w.critical,
                });
            }
        }
    }

    let shutdown = ShutdownSpec {
        deadline: mc
            .shutdown
            .deadline_seconds
            .map_or(Duration::from_secs(25), |s| s.duration()),
        drain_signal: mc
            .shutdown
            .drain_signal
            .map_or(SignalName::SIGUSR1, |s| s.0),
        exit_when_workers_done: mc.shutdown.exit_when_workers_done.unwrap_or(true),
    };
    if let Some(p) = processes
        .iter()
        .find(|p| p.stop.signal == shutdown.drain_signal)
    {
        return Err(err(
            "mcsup.shutdown.drain_signal",
            format!("{} is both the drain signal and {}'s stop signal; children ignore the drain signal, so it could never stop them", shutdown.drain_signal, p.name),
            "pick different signals (the drain signal defaults to SIGUSR1)",
        ));
    }
    if processes.is_empty() && gates.is_empty() {
        warnings.push("nothing to run on this node: no master, store or worker was planned".into());
    }

    Ok(Plan {
        node: NodeSummary {
            name: ctx.name.clone(),
            ip: ctx.ip.clone(),
            node_id: ctx.node_id,
            infra_node: ctx.infra_node.clone(),
            infra_ip: ctx.infra_ip.clone(),
            runs_master: processes.iter().any(|p| p.kind == ProcessKind::Master),
            job_id: ctx.job_id.clone(),
            mode: if ctx.slurm {
                "slurm".into()
            } else {
                "local".into()
            },
        },
        roles: roles.to_vec(),
        gates,
        processes,
        files,
        shutdown,
        log_dir,
        ignored_sections: ignored,
        warnings,
    })
}

/// Defaults every Mooncake client on the node gets (the user may override them): the address it
/// advertises, and the address its transfer engine binds. Without `MC_TCP_BIND_ADDRESS` Mooncake
/// advertises the first non-loopback interface for its RPC and TCP data even when
/// `MOONCAKE_LOCAL_HOSTNAME` is 127.0.0.1 (observed with 0.3.13.post1), so traffic meant for one
/// interface leaves through another.
fn set_local_defaults(env: &mut EnvBuilder, ctx: &NodeContext) {
    env.set("MOONCAKE_LOCAL_HOSTNAME", ctx.ip.clone(), "default");
    if ctx.ip.parse::<std::net::IpAddr>().is_ok() {
        env.set("MC_TCP_BIND_ADDRESS", ctx.ip.clone(), "default");
    }
}

fn liveness_spec(
    p: &Placeholders,
    l: &LivenessConfig,
    key: &str,
    cwd: &std::path::Path,
) -> Result<LivenessSpec, PlanError> {
    let mut probes = probe_list(
        p,
        l.tcp.as_ref(),
        l.http.as_ref(),
        l.exec.as_ref(),
        l.file.as_ref(),
        cwd,
    );
    if probes.len() != 1 {
        return Err(err(
            key,
            format!("liveness needs exactly one probe, found {}", probes.len()),
            "keep one of tcp, http, exec, file",
        ));
    }
    Ok(LivenessSpec {
        probe: probes.remove(0),
        period: l
            .period_seconds
            .map_or(Duration::from_secs(10), |s| s.duration()),
        attempt_timeout: l
            .timeout_seconds
            .map_or(Duration::from_secs(2), |s| s.duration()),
        failure_threshold: l.failure_threshold.unwrap_or(3).max(1),
    })
}

/// The seed's memory-ownership rule: with a standalone store on the node, a worker must not
/// contribute a global segment of its own.
fn check_worker_segment(name: &str, value: Option<&str>, warnings: &mut Vec<String>) {
    match value {
        None => warnings.push(format!(
            "{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE is not set, so the worker's embedded Mooncake client contributes its default segment (4gb in SGLang) besides the standalone store — set MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\" in backend.<role>_environment"
        )),
        Some(v) if v.contains('{') => {}
        Some(v) => match size::parse_mooncake_size(v) {
            Ok(0) => {}
            Ok(n) => warnings.push(format!(
                "{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE=\"{v}\" ({}) while a standalone store serves this node: the worker would contribute DRAM twice — set it to \"0\"",
                size::Bytes(n)
            )),
            Err(e) => warnings.push(format!("{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE=\"{v}\" is invalid ({e})")),
        },
    }
}

fn backend_flag_section(b: &Backend) -> &'static str {
    match b.r#type {
        BackendType::Vllm => "vllm",
        _ => "sglang",
    }
}

/// Flags → argv the way srt-slurm maps them: keys become `--kebab-case`, `true` a bare flag,
/// `false`/null are dropped, lists repeat their items after one flag.
pub fn flags_to_args(flags: &FlagMap) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in &flags.0 {
        let flag = format!("--{}", k.replace('_', "-"));
        match v {
            serde_yaml::Value::Bool(true) => out.push(flag),
            serde_yaml::Value::Bool(false) | serde_yaml::Value::Null => {}
            serde_yaml::Value::Sequence(items) => {
                out.push(flag);
                out.extend(items.iter().map(scalar_to_string));
            }
            other => {
                out.push(flag);
                out.push(scalar_to_string(other));
            }
        }
    }
    out
}

fn scalar_to_string(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::String(s) => s.clone(),
        serde_yaml::Value::Number(n) => n.to_string(),
        serde_yaml::Value::Bool(b) => b.to_string(),
        serde_yaml::Value::Null => String::new(),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// A worker derived from `sglang_config` / `vllm_config` when mcsup.workers names none.
fn derived_worker(backend: &Backend, role: Role) -> Option<WorkerConfig> {
    let (name, mut argv, flags) = match backend.r#type {
        BackendType::Sglang => (
            format!("sglang-{role}"),
            vec![
                "python3".to_string(),
                "-m".into(),
                "sglang.launch_server".into(),
            ],
            backend.sglang_config.as_ref()?.for_role(role)?,
        ),
        BackendType::Vllm => (
            format!("vllm-{role}"),
            vec![
                "python3".to_string(),
                "-m".into(),
                "vllm.entrypoints.openai.api_server".into(),
            ],
            backend.vllm_config.as_ref()?.for_role(role)?,
        ),
        BackendType::Trtllm => return None,
    };
    argv.extend(flags_to_args(flags));
    Some(WorkerConfig {
        name,
        command: Command(argv),
        args: Words::default(),
        env: EnvMap::default(),
        count: 1,
        preamble: None,
        cwd: None,
        readiness: None,
        liveness: None,
        stop: None,
        restart: None,
        critical: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(yaml: &str) -> FlagMap {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn flags_map_to_argv_like_srt_slurm() {
        let f = flags("tp-size: 8\nenable_hierarchical_cache: true\ntrust-remote-code: false\nhicache-size: 60\nserved-model-name: [a, b]\nmem-fraction-static: 0.82\nskip: null\n");
        assert_eq!(
            flags_to_args(&f),
            vec![
                "--tp-size",
                "8",
                "--enable-hierarchical-cache",
                "--hicache-size",
                "60",
                "--served-model-name",
                "a",
                "b",
                "--mem-fraction-static",
                "0.82"
            ]
        );
    }

    #[test]
    fn roles_parse_with_aliases_and_dedupe() {
        assert_eq!(parse_roles("agg").unwrap(), vec![Role::Aggregated]);
        assert_eq!(
            parse_roles("prefill, decode,prefill").unwrap(),
            vec![Role::Prefill, Role::Decode]
        );
        assert!(parse_roles("").is_err());
        assert!(parse_roles("decoder")
            .unwrap_err()
            .to_string()
            .contains("unknown role `decoder`"));
    }
}
