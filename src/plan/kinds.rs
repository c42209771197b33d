//! The service kinds of srt-slurm 2.0 and their defaults (NVIDIA/srt-slurm
//! `src/srtctl/services/registry.py` @009a4fa3 and the kinds' modules, e.g.
//! `services/mooncake_master.py` @2166ef58): default argv, start phase,
//! criticality, placement, readiness, options, and which kinds mcsup does not run, with why.
//!
//! Data only. Where mcsup must differ from srtctl (a data directory inside srtctl's private
//! container `/tmp` becomes a per-job scratch directory here), the difference is named.

use std::collections::BTreeMap;

use crate::recipe::{PlacementNode, ServiceType, StartPhase};

/// How a service tells it is ready: the vocabulary of the kinds' defaults below and of a
/// recipe's `readiness:` (the model re-exports it as `model::Readiness`).
#[derive(Debug, Clone, PartialEq)]
pub enum Readiness {
    None,
    Tcp {
        port: u16,
    },
    Http {
        port: u16,
        path: String,
        status: u16,
    },
    Log {
        pattern: String,
    },
    File {
        path: String,
    },
    /// The master: its RPC, metadata and metrics ports (mcsup's managed ports).
    MasterPorts,
}

/// A kind's defaults.
#[derive(Debug, Clone)]
pub struct KindDefaults {
    /// Default argv (empty: the recipe must give `command`).
    pub command: &'static [&'static str],
    /// The kind builds its own argv (the master), so `command` replaces all of it.
    pub builds_command: bool,
    pub start: StartPhase,
    pub critical: bool,
    pub placement: PlacementNode,
    pub per_worker: bool,
    pub readiness: Readiness,
    /// Ports the kind listens on when the recipe gives no probe (for port-clash checks).
    pub readiness_ports: &'static [u16],
    pub readiness_timeout_s: f64,
    pub option_keys: &'static [&'static str],
    pub supports_external: bool,
    pub supports_dedicated: bool,
    /// Why mcsup does not run this kind, if it does not.
    pub not_run: Option<&'static str>,
    /// The signal that stops it cleanly, when not SIGTERM.
    pub stop_signal: Option<crate::domain::SignalName>,
}

/// etcd's and NATS's client ports (srtctl `ports.py`).
pub const ETCD_PORT: u16 = 2379;
pub const NATS_PORT: u16 = 4222;

/// The client port of a discovery service kind: etcd's, or NATS's.
pub fn client_port(kind: ServiceType) -> u16 {
    if kind == ServiceType::Etcd {
        ETCD_PORT
    } else {
        NATS_PORT
    }
}

const BASE: KindDefaults = KindDefaults {
    command: &[],
    builds_command: false,
    start: StartPhase::AfterFrontend,
    critical: false,
    placement: PlacementNode::Head,
    per_worker: false,
    readiness: Readiness::None,
    readiness_ports: &[],
    readiness_timeout_s: 120.0,
    option_keys: &[],
    supports_external: false,
    supports_dedicated: false,
    not_run: None,
    stop_signal: None,
};

/// The defaults of `kind`.
pub fn defaults(kind: ServiceType) -> KindDefaults {
    match kind {
        ServiceType::Generic => BASE,
        ServiceType::Etcd => KindDefaults {
            command: &["/configs/etcd"],
            start: StartPhase::Infra,
            critical: true,
            placement: PlacementNode::Infra,
            readiness: Readiness::Tcp { port: ETCD_PORT },
            readiness_ports: &[ETCD_PORT],
            readiness_timeout_s: 300.0,
            supports_external: true,
            supports_dedicated: true,
            ..BASE
        },
        ServiceType::Nats => KindDefaults {
            command: &["/configs/nats-server"],
            start: StartPhase::Infra,
            critical: true,
            placement: PlacementNode::Infra,
            readiness: Readiness::Tcp { port: NATS_PORT },
            readiness_ports: &[NATS_PORT],
            readiness_timeout_s: 300.0,
            option_keys: &["max_payload_mb"],
            // nats-server exits 0 on SIGINT, 1 on SIGTERM (2.9.10, measured).
            stop_signal: Some(crate::domain::SignalName::SIGINT),
            supports_external: true,
            supports_dedicated: true,
            ..BASE
        },
        ServiceType::MooncakeMaster => KindDefaults {
            command: &["mooncake_master"],
            builds_command: true,
            start: StartPhase::BeforeWorkers,
            critical: true,
            placement: PlacementNode::Infra,
            readiness: Readiness::MasterPorts,
            readiness_ports: &[8700, 8701, 8702],
            option_keys: &[
                "store_config",
                "device_names_by_gpu",
                "eviction_ratio",
                "master_timeout_s",
                "store_role",
            ],
            supports_external: true,
            supports_dedicated: true,
            ..BASE
        },
        ServiceType::MooncakeStore => KindDefaults {
            command: &["python", "-m", "mooncake.mooncake_store_service"],
            start: StartPhase::BeforeWorkers,
            critical: true,
            ..BASE
        },
        ServiceType::DcgmExporter => KindDefaults {
            command: &["dcgm-exporter"],
            builds_command: true,
            placement: PlacementNode::Workers,
            option_keys: &["port", "collect_interval_ms", "kind"],
            ..BASE
        },
        ServiceType::NodeExporter => KindDefaults {
            command: &["/bin/node_exporter"],
            builds_command: true,
            placement: PlacementNode::Workers,
            option_keys: &["port", "collect_interval_ms"],
            ..BASE
        },
        ServiceType::ProcessExporter => KindDefaults {
            command: &["/configs/process-exporter"],
            builds_command: true,
            placement: PlacementNode::All,
            option_keys: &["port", "binary"],
            ..BASE
        },
        ServiceType::LmcacheServer => KindDefaults {
            command: &["lmcache", "server", "--host", "0.0.0.0", "--port", "8750", "--http-host", "0.0.0.0", "--http-port", "8751"],
            start: StartPhase::BeforeWorkers,
            critical: true,
            placement: PlacementNode::Workers,
            readiness: Readiness::Http {
                port: 8751,
                path: "/healthcheck".into(),
                status: 200,
            },
            readiness_ports: &[8750, 8751],
            ..BASE
        },
        ServiceType::MooncakeDonor => KindDefaults {
            builds_command: true,
            start: StartPhase::BeforeWorkers,
            critical: true,
            placement: PlacementNode::Decode,
            option_keys: &["size", "protocol"],
            not_run: Some("a TRT-LLM Mooncake donor (trtllm-serve mooncake_donor): mcsup runs Mooncake's own store service, not TRT-LLM's"),
            ..BASE
        },
        ServiceType::Ray => KindDefaults {
            builds_command: true,
            start: StartPhase::BeforeWorkers,
            critical: true,
            placement: PlacementNode::Workers,
            option_keys: &["port", "dashboard_port", "num_gpus"],
            not_run: Some("a Ray cluster needs srtctl's head/worker start-up and fleet check across nodes"),
            ..BASE
        },
        ServiceType::Gms => KindDefaults {
            builds_command: true,
            start: StartPhase::BeforeWorkers,
            critical: true,
            placement: PlacementNode::Workers,
            per_worker: true,
            not_run: Some("GPU memory service instances attach to srtctl's GPU workers, one per GPU"),
            ..BASE
        },
        ServiceType::KvEvents => KindDefaults {
            builds_command: true,
            critical: true,
            option_keys: &["binary_path", "storage_subdir", "subdir", "flush_interval_s", "format"],
            not_run: Some("the kv-events recorder listens to srtctl's frontend and engines"),
            ..BASE
        },
        ServiceType::LlmDSidecar => KindDefaults {
            builds_command: true,
            start: StartPhase::BeforeWorkers,
            critical: true,
            placement: PlacementNode::Decode,
            per_worker: true,
            not_run: Some("the llm-d sidecar proxies srtctl's llm-d workers"),
            ..BASE
        },
    }
}

/// The port an exporter kind's default command listens on: its `options.port`, else srtctl's
/// default (dcgm-exporter 9401, node_exporter 9101, process-exporter 9256).
pub fn listen_port(
    kind: ServiceType,
    options: &BTreeMap<String, serde_yaml::Value>,
) -> Option<u16> {
    let default = match kind {
        ServiceType::DcgmExporter => 9401,
        ServiceType::NodeExporter => 9101,
        ServiceType::ProcessExporter => 9256,
        _ => return None,
    };
    let port = options.get("port").and_then(|v| v.as_u64());
    Some(port.and_then(|p| u16::try_from(p).ok()).unwrap_or(default))
}

/// The kind's default argv; `configs_dir` stands for srtctl's `/configs` mount.
pub fn default_argv(
    kind: ServiceType,
    options: &BTreeMap<String, serde_yaml::Value>,
    configs_dir: &str,
) -> Vec<String> {
    let d = defaults(kind);
    let binary = options.get("binary").and_then(|b| b.as_str());
    let mut argv: Vec<String> = match (kind, binary) {
        (ServiceType::ProcessExporter, Some(b)) => vec![b.to_string()],
        _ => d.command.iter().map(|w| w.to_string()).collect(),
    };
    argv = argv
        .into_iter()
        .map(
            |w| match w.strip_prefix("/configs/").or(w.strip_prefix("configs/")) {
                Some(rest) => format!("{}/{rest}", configs_dir.trim_end_matches('/')),
                None => w.clone(),
            },
        )
        .collect();
    let opt_u64 = |k: &str| options.get(k).and_then(|v| v.as_u64());
    let port = listen_port(kind, options).unwrap_or_default();
    match kind {
        // srtctl: `--data-dir /tmp/etcd` inside its private container /tmp; here the data
        // directory is this job's scratch directory on the node.
        ServiceType::Etcd => argv.extend(
            [
                "--data-dir",
                "{scratch_dir}/etcd",
                "--listen-client-urls",
                "http://0.0.0.0:2379",
                "--advertise-client-urls",
                "http://{node_ip}:2379",
            ]
            .map(String::from),
        ),
        ServiceType::Nats => {
            if options.contains_key("max_payload_mb") {
                argv.extend(["-c".to_string(), "{scratch_dir}/nats.conf".to_string()]);
            } else {
                argv.extend(["-js", "-sd", "{scratch_dir}/nats"].map(String::from));
            }
        }
        ServiceType::DcgmExporter => argv.extend([
            format!(
                "--collect-interval={}",
                opt_u64("collect_interval_ms").unwrap_or(1000)
            ),
            "--address".into(),
            format!(":{port}"),
        ]),
        ServiceType::NodeExporter => argv.extend([
            format!("--web.listen-address=:{port}"),
            "--collector.disable-defaults".into(),
            "--collector.cpu".into(),
            "--collector.infiniband".into(),
            "--collector.meminfo".into(),
            "--collector.processes".into(),
            "--collector.stat".into(),
            "--collector.vmstat".into(),
            "--collector.pressure".into(),
            "--collector.meminfo_numa".into(),
            "--collector.vmstat.fields=^(oom_kill|pgpg|pswp|pgsteal|pg.*fault).*".into(),
        ]),
        ServiceType::ProcessExporter => argv.extend([
            "-config.path".into(),
            "{log_dir}/process-exporter.yml".into(),
            format!("-web.listen-address=:{port}"),
            "-threads=true".into(),
            "-children=false".into(),
            "-recheck=false".into(),
        ]),
        _ => {}
    }
    argv
}

/// The kind's preamble (srtctl's kind preamble, with mcsup's scratch directory).
pub fn kind_preamble(
    kind: ServiceType,
    options: &BTreeMap<String, serde_yaml::Value>,
) -> Option<String> {
    match kind {
        ServiceType::Etcd => Some("rm -rf {scratch_dir}/etcd && mkdir -p {scratch_dir}/etcd".into()),
        ServiceType::Nats => match options.get("max_payload_mb").and_then(|v| v.as_u64()) {
            Some(mb) => Some(format!(
                "mkdir -p {{scratch_dir}}/nats && printf 'max_payload: {}\\njetstream {{\\n  store_dir: \"{{scratch_dir}}/nats\"\\n}}\\n' > {{scratch_dir}}/nats.conf",
                mb.saturating_mul(1 << 20)
            )),
            None => Some("mkdir -p {scratch_dir}/nats".into()),
        },
        _ => None,
    }
}

/// The process-exporter config mcsup writes for a process-exporter it runs (srtctl's `prepare`
/// writes one too): every process, grouped by command name.
pub const PROCESS_EXPORTER_CONFIG: &str =
    "process_names:\n  - name: \"{{.Comm}}\"\n    cmdline:\n      - '.+'\n";
