//! The job's endpoint: srtctl's frontend stage (`cli/mixins/frontend_stage.py`,
//! `frontends/{dynamo,sglang,vllm,trtllm_serve}.py`, `templates/nginx.conf.j2`, srt-slurm main
//! @ c88ef731), one module per frontend behind one seam: a [`FrontendKind`] in the registry
//! [`FRONTENDS`] says how its process is launched, how its health answer is read and what it
//! needs of the workers; [`FrontendType`] names one wherever a plan or a status file does.
//!
//! | `frontend.type` | module | processes | what says the job is servable |
//! |---|---|---|---|
//! | `dynamo` (default) | [`dynamo`] | `python3 -m dynamo.frontend --http-port=P` + `frontend.args` | `GET /health`: `instances` with endpoint `generate`, per component |
//! | `sglang` (2.0: `sglang-router`) | [`sglang_router`] | `python -m sglang_router.launch_router` with the workers' URLs | `GET /workers`: `stats` |
//! | `vllm` | [`vllm`] | none: the one aggregated `vllm serve` worker owns the public port | `GET /v1/models` lists a model |
//! | `trtllm_serve` | [`trtllm_serve`] | planned by the TRT-LLM engine: its endpoints' `trtllm-serve`, and a disaggregated job's orchestrator | its `/health` |
//!
//! Placement ([`layout`]): one frontend on the head node (port 8000), or, when the job has two
//! or more worker nodes and `enable_multiple_frontends` (srtctl's default), nginx on the head node
//! (port 8000) in front of up to `num_additional_frontends + 1` frontends (port 8180) on the other
//! worker nodes. The expected worker counts are srtctl's `_get_health_expectations`
//! (`cli/mixins/benchmark_stage.py`). Adding a frontend: a module with a unit struct implementing
//! [`FrontendKind`] and one line in [`FRONTENDS`]. Pure.

pub mod dynamo;
pub mod sglang_router;
pub mod trtllm_serve;
pub mod vllm;

use serde::{Deserialize, Serialize};

use super::flags::python_str;
use super::reader::Reader;
use crate::domain::{plan_err, PlanError, Role};
use crate::recipe::Recipe;

/// srtctl's `FRONTEND_PUBLIC_PORT` and `FRONTEND_INTERNAL_PORT` (`ports.py`).
pub const PUBLIC_PORT: u16 = 8000;
pub const INTERNAL_PORT: u16 = 8180;

/// The frontend keys mcsup reads (`frontend.*`, v1 and 2.0). Not `nginx_container`: mcsup runs
/// the nginx on `PATH`.
pub const RECIPE_KEYS: &[&str] = &[
    "type",
    "enable_multiple_frontends",
    "num_additional_frontends",
    "nginx_raise_ulimit",
    "nginx_session_affinity",
    "nginx_session_affinity_header",
    "nginx_keepalive_timeout",
    "args",
    "env",
    "orchestrator_placement",
    "dedicated_node",
];

/// The frontends mcsup knows, in srtctl's order: one line each.
pub static FRONTENDS: &[&dyn FrontendKind] = &[
    &dynamo::Dynamo,
    &sglang_router::SglangRouter,
    &vllm::VllmServe,
    &trtllm_serve::TrtllmServe,
];

/// One frontend process's name, argv and environment (in srtctl's order, each with its layer).
pub struct FrontendLaunch {
    pub name: String,
    pub argv: Vec<String>,
    pub env: Vec<(String, String, &'static str)>,
}

/// A frontend as srtctl runs it: a registry entry ([`FRONTENDS`]).
pub trait FrontendKind: std::fmt::Debug + Sync {
    /// Its `frontend.type` (2.0's spelling, which plans and status files carry).
    fn name(&self) -> &'static str;
    /// Other spellings `frontend.type` accepts (v1's).
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }
    /// The engine that plans its processes itself, when not mcsup's frontend stage
    /// (`trtllm_serve`: the TRT-LLM engine), which is then the only engine it fronts: its
    /// registry name and how people call it.
    fn planned_by_engine(&self) -> Option<(&'static str, &'static str)> {
        None
    }
    /// The path whose answer says which workers it sees.
    fn health_path(&self) -> &'static str;
    /// Count what its health answer lists (srtctl's own check of it). `Err` when the answer is
    /// not what this frontend sends.
    fn parse_health(&self, body: &serde_json::Value) -> Result<Seen, String>;
    /// The `frontend.args` flag that moves its port, if one does (the last one wins).
    fn port_flag(&self) -> Option<&'static str> {
        None
    }
    /// Its process `idx` listening on `port`; `None` when it runs none of its own.
    fn launch(
        &self,
        s: &FrontendSettings,
        idx: usize,
        port: u16,
        job: &FrontendJob<'_>,
    ) -> Option<FrontendLaunch>;
    /// It finds the workers itself as they register (etcd/NATS discovery): it starts with them,
    /// not after them.
    fn discovers_workers(&self) -> bool {
        false
    }
    /// The workers it fronts run Dynamo's modules (`dynamo.sglang`, ...) rather than the
    /// engine's own server.
    fn dynamo_workers(&self) -> bool {
        true
    }
    /// srtctl v1 runs etcd and NATS on the infra node for it (`start_head_infrastructure`).
    fn head_infrastructure(&self) -> bool {
        true
    }
    /// It talks to the engines' own HTTP servers (SGLang's router): SGLang runs
    /// `sglang.launch_server`, not `dynamo.sglang`.
    fn talks_to_engine_servers(&self) -> bool {
        false
    }
    /// The public port is the engine's own server (`vllm serve`): no frontend process, and no
    /// nginx in front of it.
    fn worker_serves(&self) -> bool {
        false
    }
    /// Where its in-flight requests are counted, for a drain.
    fn inflight_gauge(&self, _port: u16) -> Option<super::stop::MetricSum> {
        None
    }
}

/// A frontend kind by name, as plans, status files and probes carry it.
#[derive(Clone, Copy)]
pub struct FrontendType(&'static dyn FrontendKind);

impl FrontendType {
    /// The kind `frontend.type` names (its name or an alias).
    pub fn named(name: &str) -> Option<Self> {
        FRONTENDS
            .iter()
            .copied()
            .find(|k| k.name() == name || k.aliases().contains(&name))
            .map(FrontendType)
    }

    /// srtctl's default, `dynamo`.
    pub fn default_kind() -> Self {
        FrontendType(&dynamo::Dynamo)
    }

    /// Its `frontend.type` spelling (2.0's for the router).
    pub fn as_str(self) -> &'static str {
        self.0.name()
    }

    /// What it is and does.
    pub fn kind(self) -> &'static dyn FrontendKind {
        self.0
    }

    /// The path whose answer says which workers the frontend sees.
    pub fn health_path(self) -> &'static str {
        self.0.health_path()
    }

    /// Every spelling `frontend.type` accepts, for messages.
    pub fn spellings() -> String {
        let mut names: Vec<String> = Vec::new();
        for k in FRONTENDS {
            let mut n = k.name().to_string();
            if let Some(alias) = k.aliases().first() {
                n = format!("{alias} ({n} in 2.0)");
            }
            names.push(n);
        }
        let last = names.pop().unwrap_or_default();
        format!("{} or {last}", names.join(", "))
    }
}

impl PartialEq for FrontendType {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for FrontendType {}

impl std::fmt::Debug for FrontendType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for FrontendType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FrontendType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FrontendType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        FrontendType::named(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown frontend `{name}` (known: {})",
                FrontendType::spellings()
            ))
        })
    }
}

/// `frontend:` with srtctl's defaults (`core/schema.py: FrontendConfig`).
#[derive(Debug, Clone, PartialEq)]
pub struct FrontendSettings {
    pub kind: FrontendType,
    pub enable_multiple: bool,
    pub num_additional: u32,
    pub nginx_raise_ulimit: bool,
    pub nginx_session_affinity: bool,
    pub nginx_session_affinity_header: String,
    pub nginx_keepalive_timeout: String,
    /// `frontend.args`, in order.
    pub args: Vec<(String, serde_yaml::Value)>,
    /// `frontend.env`, in order.
    pub env: Vec<(String, String)>,
}

/// `frontend.type`: srtctl's default (`dynamo`) when absent.
pub fn frontend_type(recipe: &Recipe) -> Result<FrontendType, PlanError> {
    let r = Reader {
        recipe,
        section: "frontend",
    };
    match r.string("type")? {
        None => Ok(FrontendType::default_kind()),
        Some(name) => FrontendType::named(&name).ok_or_else(|| {
            plan_err(
                "frontend.type",
                format!("unknown frontend type `{name}`"),
                format!("use {}", FrontendType::spellings()),
            )
        }),
    }
}

impl FrontendSettings {
    /// Read `frontend:`. `Ok(None)` for a frontend whose processes its engine plans
    /// (`trtllm_serve`: the TRT-LLM engine, with a disaggregated job's orchestrator).
    pub fn from_recipe(recipe: &Recipe) -> Result<Option<Self>, PlanError> {
        let r = Reader {
            recipe,
            section: "frontend",
        };
        let kind = frontend_type(recipe)?;
        if kind.kind().planned_by_engine().is_some() {
            return Ok(None);
        }
        let placement = r.string("orchestrator_placement")?;
        if placement.as_deref().is_some_and(|p| p != "head") {
            return Err(plan_err(
                "frontend.orchestrator_placement",
                format!(
                    "`{}`: mcsup places the frontend on the head node only",
                    placement.unwrap_or_default()
                ),
                "remove the key (it only moves trtllm_serve's orchestrator)",
            ));
        }
        let num_additional = match r.int("num_additional_frontends")? {
            None => 9,
            Some(n) => u32::try_from(n).map_err(|_| {
                plan_err(
                    "frontend.num_additional_frontends",
                    format!("{n} is not a count"),
                    "write num_additional_frontends: 9 (or fewer)",
                )
            })?,
        };
        let args = match recipe.raw_get(&["frontend", "args"]) {
            None => Vec::new(),
            Some(serde_yaml::Value::Mapping(m)) => {
                m.iter().map(|(k, v)| (python_str(k), v.clone())).collect()
            }
            Some(_) => {
                return Err(plan_err(
                    "frontend.args",
                    "is not a mapping",
                    "write args: {router-mode: kv}",
                ))
            }
        };
        let env = match recipe.raw_get(&["frontend", "env"]) {
            None => Vec::new(),
            Some(serde_yaml::Value::Mapping(m)) => m
                .iter()
                .map(|(k, v)| (python_str(k), python_str(v)))
                .collect(),
            Some(_) => {
                return Err(plan_err(
                    "frontend.env",
                    "is not a mapping",
                    "write env: {DYN_LOG: info}",
                ))
            }
        };
        let nginx_session_affinity_header = r
            .string("nginx_session_affinity_header")?
            .unwrap_or_else(|| "X-Dynamo-Session-ID".into());
        // Both go into nginx.conf as they are (round 4's L1): `"10 min"` or a `;` and a line
        // break would fail `nginx -t` at the job's start, or add directives.
        if nginx_session_affinity_header.is_empty()
            || !nginx_session_affinity_header
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(plan_err(
                "frontend.nginx_session_affinity_header",
                format!("{nginx_session_affinity_header:?} is not an HTTP header name nginx can hash on"),
                "letters, digits and dashes only, e.g. X-Dynamo-Session-ID",
            ));
        }
        let nginx_keepalive_timeout = r
            .string("nginx_keepalive_timeout")?
            .unwrap_or_else(|| "600s".into());
        if !nginx_time(&nginx_keepalive_timeout) {
            return Err(plan_err(
                "frontend.nginx_keepalive_timeout",
                format!("{nginx_keepalive_timeout:?} is not an nginx time"),
                "a number with an optional unit (ms, s, m, h, d), e.g. 600s or 10m",
            ));
        }
        Ok(Some(Self {
            kind,
            enable_multiple: r.boolean("enable_multiple_frontends")?.unwrap_or(true),
            num_additional,
            nginx_raise_ulimit: r.boolean("nginx_raise_ulimit")?.unwrap_or(false),
            nginx_session_affinity: r.boolean("nginx_session_affinity")?.unwrap_or(false),
            nginx_session_affinity_header,
            nginx_keepalive_timeout,
            args,
            env,
        }))
    }

    /// `frontend.args` as srtctl's `get_frontend_args_list`: `true` → `--key`, `false`/null →
    /// nothing, else `--key str(value)`.
    pub fn args_list(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v) in &self.args {
            match v {
                serde_yaml::Value::Bool(true) => out.push(format!("--{k}")),
                serde_yaml::Value::Bool(false) | serde_yaml::Value::Null => {}
                v => {
                    out.push(format!("--{k}"));
                    out.push(python_str(v));
                }
            }
        }
        out
    }

    /// The port the frontend really listens on: srtctl's, unless `frontend.args` sets it again
    /// (the last `--http-port` / `--port` wins in both argument parsers).
    fn listen_port(&self, default: u16) -> Result<u16, PlanError> {
        let Some(key) = self.kind.kind().port_flag() else {
            return Ok(default);
        };
        match self.args.iter().rev().find(|(k, _)| k == key) {
            None => Ok(default),
            Some((_, v)) => python_str(v).parse().map_err(|_| {
                plan_err(
                    format!("frontend.args.{key}"),
                    format!("`{}` is not a port", python_str(v)),
                    format!("write {key}: 8000"),
                )
            }),
        }
    }
}

/// Where nginx and the frontends run (srtctl's `FrontendTopology`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontendLayout {
    pub nginx: Option<String>,
    pub frontends: Vec<String>,
    pub frontend_port: u16,
    pub public_port: u16,
}

/// srtctl's `_compute_frontend_topology`: `worker_nodes` are the job's worker nodes in order,
/// `head` the head node (the first worker node, or a dedicated frontend node).
pub fn layout(s: &FrontendSettings, worker_nodes: &[String], head: &str) -> FrontendLayout {
    if worker_nodes.len() <= 1 || !s.enable_multiple {
        return FrontendLayout {
            nginx: None,
            frontends: vec![head.to_string()],
            frontend_port: PUBLIC_PORT,
            public_port: PUBLIC_PORT,
        };
    }
    let others: Vec<String> = worker_nodes
        .iter()
        .filter(|n| n.as_str() != head)
        .cloned()
        .collect();
    let n = (s.num_additional as usize + 1).min(others.len());
    FrontendLayout {
        nginx: Some(head.to_string()),
        frontends: others[..n].to_vec(),
        frontend_port: INTERNAL_PORT,
        public_port: PUBLIC_PORT,
    }
}

/// A worker leader the SGLang router is given (srtctl: `is_leader` processes, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub mode: Role,
    pub ip: String,
    pub http_port: u16,
    pub bootstrap_port: Option<u16>,
    /// `grpc-mode` in the mode's SGLang flags: the router speaks gRPC to it.
    pub grpc: bool,
}

/// What the frontends need from the job.
#[derive(Debug, Clone)]
pub struct FrontendJob<'a> {
    /// The infra node's name (etcd and NATS: srtctl uses the name, not the address).
    pub infra_node: &'a str,
    pub request_plane: &'a str,
    pub event_plane: Option<&'a str>,
    /// The recipe's `environment:` as written: srtctl does not expand `{node}` for frontends.
    pub environment: Vec<(String, String)>,
    /// Every node's name and address (`get_hostname_ip`).
    pub ips: &'a [(String, String)],
    /// The worker leaders, in srtctl's process order.
    pub leaders: Vec<Leader>,
    /// The job has prefill/decode workers (not aggregated ones).
    pub disaggregated: bool,
    /// Where the nginx configuration goes.
    pub log_dir: &'a str,
    /// `observability:`: OTEL env on Dynamo frontends, the `enabled` knob's `frontend.env`.
    pub observability: &'a super::observability::Observability,
}

impl FrontendJob<'_> {
    /// A node's address (the name itself when the job does not list it).
    pub fn ip_of(&self, node: &str) -> String {
        self.ips
            .iter()
            .find(|(name, _)| name == node)
            .map_or_else(|| node.to_string(), |(_, ip)| ip.clone())
    }
}

/// What a frontend process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FrontendRole {
    Nginx,
    Frontend,
}

/// One process of the frontend stage.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontendProcess {
    pub node: String,
    /// srtctl's name: `nginx`, `frontend_<i>`, `sglang_router_<i>`.
    pub name: String,
    pub role: FrontendRole,
    pub argv: Vec<String>,
    /// Shell run before it (nginx's `ulimit -n`), if any.
    pub preamble: Option<String>,
    /// In srtctl's order, each with its layer (`srtctl`, `environment`, `frontend.env`).
    pub env: Vec<(String, String, &'static str)>,
    /// The port it listens on.
    pub port: u16,
    /// It is the job's public endpoint (nginx, or the only frontend).
    pub public: bool,
}

/// The whole frontend stage of the job, on every node.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontendStage {
    pub layout: FrontendLayout,
    pub processes: Vec<FrontendProcess>,
    /// `nginx.conf` when nginx runs: its path and text.
    pub nginx_conf: Option<(String, String)>,
}

/// srtctl's frontend processes for the job (none for `vllm`: the worker serves).
pub fn stage(
    s: &FrontendSettings,
    layout: FrontendLayout,
    job: &FrontendJob<'_>,
) -> Result<FrontendStage, PlanError> {
    let port = s.listen_port(layout.frontend_port)?;
    let mut processes = Vec::new();
    let mut nginx_conf = None;
    if s.kind.kind().worker_serves() {
        if layout.nginx.is_some() {
            return Err(plan_err(
                "frontend.enable_multiple_frontends",
                "frontend.type vllm binds vllm serve directly to the public port, and cannot sit behind nginx",
                "set frontend.enable_multiple_frontends: false",
            ));
        }
        return Ok(FrontendStage {
            layout,
            processes,
            nginx_conf,
        });
    }
    if let Some(node) = &layout.nginx {
        let conf = format!("{}/nginx.conf", job.log_dir.trim_end_matches('/'));
        let hosts: Vec<String> = layout.frontends.iter().map(|n| job.ip_of(n)).collect();
        nginx_conf = Some((
            conf.clone(),
            nginx_config(s, &hosts, port, layout.public_port),
        ));
        processes.push(nginx_process(s, node, conf, layout.public_port, job));
    }
    let public = layout.nginx.is_none();
    for (idx, node) in layout.frontends.iter().enumerate() {
        let Some(FrontendLaunch {
            name,
            argv,
            mut env,
        }) = s.kind.kind().launch(s, idx, layout.frontend_port, job)
        else {
            continue;
        };
        env.extend(
            s.env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone(), "frontend.env")),
        );
        env.extend(
            job.observability
                .frontend_defaults(&s.env, job.log_dir)
                .into_iter()
                .map(|(k, v)| (k, v, "observability.enabled")),
        );
        processes.push(FrontendProcess {
            node: node.clone(),
            name,
            role: FrontendRole::Frontend,
            argv,
            preamble: None,
            env,
            port,
            public,
        });
    }
    Ok(FrontendStage {
        layout,
        processes,
        nginx_conf,
    })
}

/// nginx on the head node with srtctl's config, run without root.
fn nginx_process(
    s: &FrontendSettings,
    node: &str,
    conf: String,
    public_port: u16,
    job: &FrontendJob<'_>,
) -> FrontendProcess {
    FrontendProcess {
        node: node.to_string(),
        name: "nginx".into(),
        role: FrontendRole::Nginx,
        argv: vec![
            "nginx".into(),
            "-c".into(),
            conf,
            // Not srtctl's (it runs nginx as root in its own container): the error log to
            // stderr (mcsup's log of the process) and the pid file in the log directory, so
            // nginx needs no root and writes nothing outside the job's files.
            "-e".into(),
            "stderr".into(),
            "-g".into(),
            format!(
                "daemon off; pid {}/{node}.nginx.pid;",
                job.log_dir.trim_end_matches('/')
            ),
        ],
        preamble: s
            .nginx_raise_ulimit
            .then(|| "ulimit -n 1048576".to_string()),
        env: Vec::new(),
        port: public_port,
        public: true,
    }
}

/// Whether `t` is a time as nginx reads one in a one-argument directive: numbers, each with an
/// optional unit (`ms`, `s`, `m`, `h`, `d`, `w`, `M`, `y`), written together (`1h30m`; with a
/// space it would be two arguments).
fn nginx_time(t: &str) -> bool {
    let mut rest = t;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        for unit in ["ms", "s", "m", "h", "d", "w", "M", "y"] {
            if let Some(r) = rest.strip_prefix(unit) {
                rest = r;
                break;
            }
        }
    }
    true
}

/// The nginx configuration srtctl's `nginx.conf.j2` renders, directive for directive (the
/// comments are mcsup's): round-robin (or, with session affinity, a consistent hash of the
/// session header) over the frontends, unbuffered, keepalive to the upstreams.
pub fn nginx_config(
    s: &FrontendSettings,
    hosts: &[String],
    backend_port: u16,
    listen_port: u16,
) -> String {
    let mut c = String::from("# nginx in front of the job's frontends, as srtctl configures it.\n");
    c.push_str("worker_processes auto;\n");
    if s.nginx_raise_ulimit {
        c.push_str("worker_rlimit_nofile 1048576;\n");
    }
    c.push_str("\nhttp {\n");
    c.push_str("    # Large request bodies pass (the Dynamo frontend's own limit).\n");
    c.push_str("    client_max_body_size 45m;\n    access_log off;\n");
    if s.nginx_session_affinity {
        let key = format!(
            "$http_{}",
            s.nginx_session_affinity_header
                .to_lowercase()
                .replace('-', "_")
        );
        c.push_str("    # One session, one frontend; requests without the header spread out.\n");
        c.push_str(&format!(
            "    map {key} $frontend_hash_key {{\n        default {key};\n        \"\" $request_id;\n    }}\n"
        ));
    }
    let keepalive = &s.nginx_keepalive_timeout;
    c.push_str(&format!("    keepalive_timeout {keepalive};\n\n"));
    c.push_str("    upstream backend_servers {\n");
    if s.nginx_session_affinity {
        c.push_str("        hash $frontend_hash_key consistent;\n");
    }
    for h in hosts {
        c.push_str(&format!("        server {h}:{backend_port};\n"));
    }
    c.push_str(&format!(
        "        keepalive 512;\n        keepalive_timeout {keepalive};\n    }}\n\n"
    ));
    c.push_str(&format!(
        "    server {{\n        listen {listen_port};\n        location / {{\n            proxy_pass http://backend_servers;\n            proxy_buffering off;\n            proxy_read_timeout 24h;\n            proxy_send_timeout 24h;\n            proxy_http_version 1.1;\n            proxy_set_header Connection \"\";\n        }}\n    }}\n}}\n\n"
    ));
    c.push_str(
        "events {\n    worker_connections 65535;\n    multi_accept on;\n    use epoll;\n}\n",
    );
    c
}

/// How many prefill and decode entries the frontend must list before the job is servable:
/// srtctl's `_get_health_expectations` (aggregated workers count as decode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expected {
    pub prefill: u32,
    pub decode: u32,
}

/// What the frontend's health answer says: the entries it sees, per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub prefill: u32,
    pub decode: u32,
}

impl Seen {
    /// Every expected worker is seen (more is fine, as in srtctl).
    pub fn covers(&self, e: &Expected) -> bool {
        self.prefill >= e.prefill && self.decode >= e.decode
    }
}

/// `3/3 workers (1 of 1 prefill, 2 of 2 decode)`; aggregated jobs say `2/2 workers`.
pub fn describe(expected: &Expected, seen: &Seen) -> String {
    let total = |p: u32, d: u32| p + d;
    let head = format!(
        "{}/{} workers",
        seen.prefill.min(expected.prefill) + seen.decode.min(expected.decode),
        total(expected.prefill, expected.decode)
    );
    if expected.prefill == 0 && seen.prefill == 0 {
        return head;
    }
    format!(
        "{head} ({} of {} prefill, {} of {} decode)",
        seen.prefill, expected.prefill, seen.decode, expected.decode
    )
}

/// Count what a frontend's health answer lists (srtctl's own check of it). `Err` when the answer
/// is not what that frontend sends.
pub fn parse_health(kind: FrontendType, body: &str) -> Result<Seen, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("not JSON ({e})"))?;
    kind.kind().parse_health(&v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipe(yaml: &str) -> Recipe {
        crate::recipe::parse_str(std::path::Path::new("r.yaml"), yaml).unwrap()
    }

    fn settings(yaml: &str) -> FrontendSettings {
        FrontendSettings::from_recipe(&recipe(yaml))
            .unwrap()
            .unwrap()
    }

    /// Round 4's L1: values written into nginx.conf as they are must be what nginx parses.
    #[test]
    fn nginx_values_are_checked_before_they_reach_its_config() {
        let good = ["600s", "10m", "1h30m", "0", "500ms", "75", "1d"];
        for ok in good {
            assert!(nginx_time(ok), "{ok:?}");
        }
        for bad in [
            "10 min",
            "10min",
            "1h 30m",
            "",
            "s",
            "600s;\n server {",
            "-1s",
            "1.5s",
        ] {
            assert!(!nginx_time(bad), "{bad:?}");
        }
        // What it takes, nginx takes (where nginx is installed; the CI installs it).
        let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        match nginx {
            Some(nginx) => {
                let d = tempfile::tempdir().unwrap();
                for t in good {
                    let conf = d.path().join("nginx.conf");
                    std::fs::write(
                        &conf,
                        format!("events {{}}\nhttp {{ keepalive_timeout {t}; upstream b {{ server 127.0.0.1:1; keepalive 2; keepalive_timeout {t}; }} }}\n"),
                    )
                    .unwrap();
                    let o = std::process::Command::new(nginx)
                        .args(["-t", "-q", "-p"])
                        .arg(d.path())
                        .arg("-c")
                        .arg(&conf)
                        .output()
                        .unwrap();
                    assert!(
                        o.status.success(),
                        "{t}: {}",
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
            }
            None => assert!(
                std::env::var_os("CI").is_none(),
                "nginx is missing under CI"
            ),
        }
        let err = |yaml: &str| {
            FrontendSettings::from_recipe(&recipe(yaml))
                .unwrap_err()
                .to_string()
        };
        let e = err("frontend: {nginx_keepalive_timeout: 10 min}");
        assert!(
            e.contains("frontend.nginx_keepalive_timeout") && e.contains("is not an nginx time"),
            "{e}"
        );
        let e = err(
            "frontend: {nginx_session_affinity: true, nginx_session_affinity_header: \"X-Id { }\"}",
        );
        assert!(
            e.contains("frontend.nginx_session_affinity_header")
                && e.contains("is not an HTTP header name"),
            "{e}"
        );
        assert_eq!(
            settings("frontend: {nginx_keepalive_timeout: 1h30m}").nginx_keepalive_timeout,
            "1h30m"
        );
    }

    #[test]
    fn args_render_as_srtctl_does() {
        let s = settings(
            "frontend: {args: {router-mode: kv, router-reset-states: true, off: false, none: null, n: 2, f: 1.5}}",
        );
        assert_eq!(
            s.args_list(),
            [
                "--router-mode",
                "kv",
                "--router-reset-states",
                "--n",
                "2",
                "--f",
                "1.5"
            ]
        );
    }

    #[test]
    fn layouts() {
        let nodes: Vec<String> = (0..4).map(|i| format!("n{i}")).collect();
        let s = settings("frontend: {type: dynamo}");
        let l = layout(&s, &nodes, "n0");
        assert_eq!(l.nginx.as_deref(), Some("n0"));
        assert_eq!(l.frontends, ["n1", "n2", "n3"]);
        assert_eq!((l.frontend_port, l.public_port), (8180, 8000));
        let s = settings("frontend: {num_additional_frontends: 0}");
        assert_eq!(layout(&s, &nodes, "n0").frontends, ["n1"]);
        let s = settings("frontend: {enable_multiple_frontends: false}");
        let l = layout(&s, &nodes, "n0");
        assert_eq!((l.nginx, l.frontends), (None, vec!["n0".to_string()]));
        let s = settings("frontend: {type: dynamo}");
        assert_eq!(layout(&s, &nodes[..1], "n0").nginx, None);
    }

    #[test]
    fn bad_settings_name_the_key() {
        for (yaml, key) in [
            ("frontend: {type: haproxy}", "frontend.type"),
            (
                "frontend: {enable_multiple_frontends: maybe}",
                "frontend.enable_multiple_frontends",
            ),
            (
                "frontend: {num_additional_frontends: -1}",
                "frontend.num_additional_frontends",
            ),
            ("frontend: {args: [a]}", "frontend.args"),
            (
                "frontend: {orchestrator_placement: first_decode}",
                "frontend.orchestrator_placement",
            ),
        ] {
            let e = FrontendSettings::from_recipe(&recipe(yaml))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{yaml}: {e}");
        }
        let r = recipe("frontend: {type: trtllm_serve}");
        assert_eq!(FrontendSettings::from_recipe(&r).unwrap(), None);
    }

    #[test]
    fn health_answers_are_counted_as_srtctl_counts_them() {
        let dynamo = r#"{"status":"healthy","instances":[
            {"component":"prefill","endpoint":"generate"},
            {"component":"prefill","endpoint":"clear_kv_blocks"},
            {"component":"backend","endpoint":"generate"},
            {"component":"decode","endpoint":"generate"}]}"#;
        let seen = parse_health(FrontendType::named("dynamo").unwrap(), dynamo).unwrap();
        assert_eq!(
            seen,
            Seen {
                prefill: 1,
                decode: 2
            }
        );
        assert!(seen.covers(&Expected {
            prefill: 1,
            decode: 2
        }));
        assert!(!seen.covers(&Expected {
            prefill: 2,
            decode: 2
        }));
        assert!(parse_health(
            FrontendType::named("dynamo").unwrap(),
            r#"{"status":"unhealthy"}"#
        )
        .is_err());
        // sglang-router 0.3.2's answer after one of two decode workers was SIGKILLed.
        let router = r#"{"workers":[
            {"worker_type":"decode","is_healthy":true},
            {"worker_type":"prefill","is_healthy":true,"bootstrap_port":17701},
            {"worker_type":"decode","is_healthy":false}],
            "stats":{"prefill_count":1,"decode_count":2,"regular_count":0}}"#;
        assert_eq!(
            parse_health(FrontendType::named("sglang-router").unwrap(), router).unwrap(),
            Seen {
                prefill: 1,
                decode: 1
            }
        );
        let stats_only = r#"{"stats":{"prefill_count":1,"decode_count":1,"regular_count":2}}"#;
        assert_eq!(
            parse_health(FrontendType::named("sglang-router").unwrap(), stats_only).unwrap(),
            Seen {
                prefill: 1,
                decode: 3
            }
        );
        assert!(parse_health(FrontendType::named("sglang-router").unwrap(), "oops").is_err());
    }

    #[test]
    fn a_port_in_the_args_is_where_the_frontend_listens() {
        let s = settings("frontend: {args: {http-port: 9123}}");
        assert_eq!(s.listen_port(8000).unwrap(), 9123);
        let s = settings("frontend: {type: sglang, args: {port: x}}");
        assert!(s.listen_port(8000).is_err());
    }
}
