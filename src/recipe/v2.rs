//! srt-slurm 2.0's recipe sections: `schema`, `engine`, `roles` and the typed `services:` list.
//!
//! Syntax and per-entry rules only, with srtctl's own messages where it has them (source:
//! NVIDIA/srt-slurm `src/srtctl/services/config.py` @17c4ece9). Rules that need the
//! whole recipe (unique names, one master, port clashes on a node) live in the planner's
//! normalisation step. The key set is the union of the 2.0 snapshots; which keys mcsup runs,
//! records or ignores is decided there too.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::lenient::visit_lenient;
use super::store::MooncakeKvStore;
use super::values::*;

/// `engine:` — a type name (`engine: sglang`) or a mapping with `type` and engine-wide knobs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Engine {
    /// `sglang`, `vllm`, `trtllm`, `mocker`, ... as written: the engine registry
    /// (`crate::engine::ENGINES`) decides what it names.
    pub r#type: Option<String>,
    /// `engine.mooncake_kv_store`: the same block as v1's `backend.mooncake_kv_store`.
    pub mooncake_kv_store: Option<MooncakeKvStore>,
    /// Engine-wide keys mcsup does not interpret (listed as ignored).
    pub ignored: Vec<String>,
}

const ENGINE_KEYS: &[&str] = &["type", "mooncake_kv_store"];

impl<'de> Deserialize<'de> for Engine {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Engine;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "an engine type string (engine: sglang) or a mapping (engine: {type: sglang})",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Engine, E> {
                Ok(Engine {
                    r#type: Some(v.to_string()),
                    ..Engine::default()
                })
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, _seq: A) -> Result<Engine, A::Error> {
                Err(de::Error::custom(format!(
                    "engine must be a type string or a mapping, found a list{FIX_MARKER}write `engine: sglang` or `engine: {{type: sglang}}`"
                )))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Engine, A::Error> {
                let mut e = Engine::default();
                let mut ignored = Vec::new();
                visit_lenient(
                    &mut map,
                    ENGINE_KEYS,
                    "engine.",
                    &mut ignored,
                    |key, map| {
                        match key {
                            "type" => e.r#type = Some(map.next_value::<String>()?),
                            _ => e.mooncake_kv_store = map.next_value()?,
                        }
                        Ok(())
                    },
                )?;
                e.ignored = ignored;
                Ok(e)
            }
        }
        d.deserialize_any(V)
    }
}

/// `roles:` — per engine role (`prefill`, `decode`, `agg`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Roles {
    #[serde(default)]
    pub prefill: Option<RoleConfig>,
    #[serde(default)]
    pub decode: Option<RoleConfig>,
    #[serde(default, alias = "aggregated")]
    pub agg: Option<RoleConfig>,
}

impl Roles {
    pub fn for_role(&self, role: crate::domain::Role) -> Option<&RoleConfig> {
        use crate::domain::Role;
        match role {
            Role::Prefill => self.prefill.as_ref(),
            Role::Decode => self.decode.as_ref(),
            Role::Aggregated => self.agg.as_ref(),
        }
    }
}

/// One role (`core/roles.py`): mcsup runs `env` and `args` (the engine's flags) and honours
/// `critical`; the topology keys (`nodes`, `workers`, `gpus`) and the rest are recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleConfig {
    #[serde(default)]
    pub nodes: Option<serde_yaml::Value>,
    #[serde(default)]
    pub workers: Option<serde_yaml::Value>,
    #[serde(default)]
    pub gpus: Option<serde_yaml::Value>,
    #[serde(default)]
    pub env: EnvMap,
    /// The engine's flags for this role (v1 `backend.<engine>_config.<role>`). Kept as YAML:
    /// SGLang/vLLM flags must be scalars (checked when planning), TRT-LLM's take mappings.
    #[serde(default)]
    pub args: Option<serde_yaml::Value>,
    #[serde(default)]
    pub extra_args: Option<serde_yaml::Value>,
    #[serde(default)]
    pub engine: Option<serde_yaml::Value>,
    #[serde(default)]
    pub kv_events: Option<serde_yaml::Value>,
    #[serde(default)]
    pub sidecar: Option<serde_yaml::Value>,
    #[serde(default)]
    pub critical: Option<bool>,
    #[serde(default)]
    pub container: Option<String>,
    #[serde(default)]
    pub mooncake_store_config: Option<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    pub restart: Option<serde_yaml::Value>,
    #[serde(default)]
    pub srun_options: Option<serde_yaml::Value>,
}

/// A service kind (`services[].type`), as registered in srtctl 2.0.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum ServiceType {
    #[default]
    Generic,
    Etcd,
    Nats,
    MooncakeMaster,
    MooncakeStore,
    MooncakeDonor,
    DcgmExporter,
    NodeExporter,
    ProcessExporter,
    LmcacheServer,
    Ray,
    Gms,
    KvEvents,
    LlmDSidecar,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::Generic => "generic",
            ServiceType::Etcd => "etcd",
            ServiceType::Nats => "nats",
            ServiceType::MooncakeMaster => "mooncake-master",
            ServiceType::MooncakeStore => "mooncake-store",
            ServiceType::MooncakeDonor => "mooncake-donor",
            ServiceType::DcgmExporter => "dcgm-exporter",
            ServiceType::NodeExporter => "node-exporter",
            ServiceType::ProcessExporter => "process-exporter",
            ServiceType::LmcacheServer => "lmcache-server",
            ServiceType::Ray => "ray",
            ServiceType::Gms => "gms",
            ServiceType::KvEvents => "kv-events",
            ServiceType::LlmDSidecar => "llm-d-sidecar",
        }
    }
}

impl fmt::Display for ServiceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `placement.node`: which nodes of the job run the service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementNode {
    Head,
    Infra,
    Dedicated,
    Prefill,
    Decode,
    #[serde(alias = "aggregated")]
    Agg,
    Workers,
    Compute,
    All,
}

impl PlacementNode {
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementNode::Head => "head",
            PlacementNode::Infra => "infra",
            PlacementNode::Dedicated => "dedicated",
            PlacementNode::Prefill => "prefill",
            PlacementNode::Decode => "decode",
            PlacementNode::Agg => "agg",
            PlacementNode::Workers => "workers",
            PlacementNode::Compute => "compute",
            PlacementNode::All => "all",
        }
    }
}

impl fmt::Display for PlacementNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `placement.per`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    Node,
    Worker,
}

/// `placement:`. Written without `node`, srtctl's dataclass default is `head` (not the kind's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServicePlacement {
    #[serde(default)]
    pub node: Option<PlacementNode>,
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default)]
    pub per: Option<Per>,
}

/// `start:` phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartPhase {
    Infra,
    BeforeWorkers,
    WithWorkers,
    AfterFrontend,
}

impl StartPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            StartPhase::Infra => "infra",
            StartPhase::BeforeWorkers => "before_workers",
            StartPhase::WithWorkers => "with_workers",
            StartPhase::AfterFrontend => "after_frontend",
        }
    }
}

impl fmt::Display for StartPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `readiness.tcp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpReadiness {
    pub port: Port,
}

/// `readiness.http` (`GET http://<node>:<port><path>`, exact status; defaults `/health`, 200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpReadiness {
    pub port: Port,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub status: Option<u16>,
}

/// `readiness.log`: a regex searched in the service's own output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogReadiness {
    pub pattern: Pattern,
}

/// `readiness.file`: a non-empty regular file (relative paths under the log directory).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileReadiness {
    pub path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReadiness {
    #[serde(default)]
    port: Option<Port>,
    #[serde(default)]
    tcp: Option<TcpReadiness>,
    #[serde(default)]
    http: Option<HttpReadiness>,
    #[serde(default)]
    log: Option<LogReadiness>,
    #[serde(default)]
    file: Option<FileReadiness>,
    #[serde(default)]
    timeout_seconds: Option<PositiveSeconds>,
    #[serde(default)]
    interval_seconds: Option<PositiveSeconds>,
}

/// The one probe a service's readiness names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceProbe {
    Tcp(TcpReadiness),
    Http(HttpReadiness),
    Log(LogReadiness),
    File(FileReadiness),
}

/// `readiness:` — exactly one probe (`port` is shorthand for `tcp.port`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceReadiness {
    pub probe: ServiceProbe,
    /// Default 120 s (per instance).
    pub timeout_seconds: Option<PositiveSeconds>,
    /// Default 2 s.
    pub interval_seconds: Option<PositiveSeconds>,
}

impl<'de> Deserialize<'de> for ServiceReadiness {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawReadiness::deserialize(d)?;
        if raw.port.is_some() && raw.tcp.is_some() {
            return Err(de::Error::custom(at_key(
                "tcp",
                "services[].readiness: give either port (shorthand) or tcp, not both",
                "keep `port: N` or `tcp: {port: N}`",
            )));
        }
        let mut named: Vec<&str> = Vec::new();
        let mut probe = None;
        if let Some(p) = raw.port {
            named.push("port");
            probe = Some(ServiceProbe::Tcp(TcpReadiness { port: p }));
        }
        if let Some(t) = raw.tcp {
            named.push("tcp");
            probe = Some(ServiceProbe::Tcp(t));
        }
        if let Some(h) = raw.http {
            if let Some(p) = &h.path {
                if !p.starts_with('/') {
                    return Err(de::Error::custom(at_key(
                        "http.path",
                        "readiness.http.path must start with '/'",
                        "write e.g. path: /health",
                    )));
                }
            }
            if let Some(s) = h.status {
                if !(100..=599).contains(&s) {
                    return Err(de::Error::custom(at_key(
                        "http.status",
                        "readiness.http.status must be an HTTP status code",
                        "use a code from 100 to 599, e.g. 200",
                    )));
                }
            }
            named.push("http");
            probe = Some(ServiceProbe::Http(h));
        }
        if let Some(l) = raw.log {
            named.push("log");
            probe = Some(ServiceProbe::Log(l));
        }
        if let Some(f) = raw.file {
            if f.path.trim().is_empty() {
                return Err(de::Error::custom(at_key(
                    "file.path",
                    "readiness.file.path must not be empty",
                    "name the file the service writes when ready",
                )));
            }
            named.push("file");
            probe = Some(ServiceProbe::File(f));
        }
        match (named.len(), probe) {
            (1, Some(probe)) => Ok(ServiceReadiness {
                probe,
                timeout_seconds: raw.timeout_seconds,
                interval_seconds: raw.interval_seconds,
            }),
            _ => Err(de::Error::custom(format!(
                "services[].readiness needs exactly one probe: port, tcp, http, log, or file; got {}{FIX_MARKER}keep one probe (or remove readiness to use the type's default)",
                if named.is_empty() { "none".to_string() } else { named.join(", ") }
            ))),
        }
    }
}

/// One `metrics:` endpoint (recorded: scraping is srtctl's tachometer's job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsEndpoint {
    pub port: Port,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub nodes: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// `metrics:` — one mapping or a list of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Metrics(pub Vec<MetricsEndpoint>);

impl<'de> Deserialize<'de> for Metrics {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // One mapping or a list: read a value first, then parse the shape it has (an untagged
        // enum would hide the inner error).
        let v = serde_yaml::Value::deserialize(d)?;
        let is_list = v.is_sequence();
        let list = match &v {
            serde_yaml::Value::Null => Vec::new(),
            serde_yaml::Value::Sequence(_) => {
                Vec::<MetricsEndpoint>::deserialize(v).map_err(de::Error::custom)?
            }
            _ => vec![MetricsEndpoint::deserialize(v).map_err(de::Error::custom)?],
        };
        let one = !is_list;
        for (i, m) in list.iter().enumerate() {
            let at = |k: &str| {
                if one {
                    k.to_string()
                } else {
                    format!("[{i}].{k}")
                }
            };
            if let Some(p) = &m.path {
                if !p.starts_with('/') {
                    return Err(de::Error::custom(at_key(
                        at("path"),
                        "metrics.path must start with '/'",
                        "write e.g. path: /metrics",
                    )));
                }
            }
            if let Some(n) = &m.nodes {
                if n != "all" && n != "first" {
                    return Err(de::Error::custom(at_key(
                        at("nodes"),
                        format!("metrics.nodes must be all or first; got {n:?}"),
                        "write nodes: all or nodes: first",
                    )));
                }
            }
            if m.name.as_deref().is_some_and(|n| n.trim().is_empty()) {
                return Err(de::Error::custom(at_key(
                    at("name"),
                    "metrics.name must not be empty",
                    "name the endpoint or drop `name`",
                )));
            }
        }
        if list.len() > 1 {
            let mut names: Vec<&str> = list.iter().filter_map(|m| m.name.as_deref()).collect();
            names.sort_unstable();
            names.dedup();
            if names.len() != list.len() {
                return Err(de::Error::custom(format!(
                    "metrics declares {} endpoints; give each a distinct name (it becomes the endpoint's name in the parquet){FIX_MARKER}add `name:` to each endpoint",
                    list.len()
                )));
            }
        }
        Ok(Metrics(list))
    }
}

/// `source:` — a git checkout srtctl builds the service from (mcsup does not build).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub git: String,
    pub rev: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub sha: Option<String>,
}

fn yes() -> bool {
    true
}

/// One `services:` entry (`ServiceConfig`, the union of the 2.0 snapshots' keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    pub name: String,
    #[serde(default, rename = "type")]
    pub kind: ServiceType,
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub external: Option<String>,
    /// Checked for emptiness in normalisation, with srtctl's message.
    #[serde(default)]
    pub command: Option<Words>,
    #[serde(default)]
    pub args: Words,
    #[serde(default)]
    pub container: Option<String>,
    #[serde(default)]
    pub env: EnvMap,
    #[serde(default)]
    pub options: BTreeMap<String, serde_yaml::Value>,
    #[serde(default)]
    pub placement: Option<ServicePlacement>,
    #[serde(default)]
    pub nodes: Option<i64>,
    #[serde(default)]
    pub start: Option<StartPhase>,
    #[serde(default, deserialize_with = "nullable")]
    pub readiness: Option<ServiceReadiness>,
    #[serde(default = "yes")]
    pub inherit_discovery_env: bool,
    #[serde(default)]
    pub critical: Option<bool>,
    #[serde(default)]
    pub terminal: bool,
    #[serde(default)]
    pub metrics: Metrics,
    #[serde(default)]
    pub preamble: Option<String>,
    #[serde(default)]
    pub cpus_per_task: Option<i64>,
    #[serde(default)]
    pub cpu_bind: Option<String>,
    #[serde(default)]
    pub srun_options: BTreeMap<String, serde_yaml::Value>,
    #[serde(default)]
    pub source: Option<SourceConfig>,
    #[serde(default)]
    pub build_command: Option<Words>,
    #[serde(default)]
    pub build_timeout_seconds: Option<i64>,
}
