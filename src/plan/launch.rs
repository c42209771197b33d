//! A worker's argv and environment exactly as srtctl builds them (srt-slurm v1
//! `backends/sglang.py::build_worker_command`, `cli/mixins/worker_stage.py::start_worker`,
//! main @ c88ef731), minus the srun/container wrapping and the container-side preamble.
//!
//! The argv is srtctl's injected flags (module, model, served name, host, ports, disaggregation
//! mode and bootstrap port, multi-node rendezvous, config dump, kv-events, request plane), then
//! every recipe flag sorted by its raw key and rendered as Python's `str()` would (`0.90` →
//! `0.9`, a mapping → its Python repr), without de-duplication: a recipe flag that repeats an
//! injected one comes later and wins, as it does under srtctl. Pure.

use super::topology::{ports, TopoProcess};
use crate::domain::Role;
use crate::recipe::FlagMap;

/// What srtctl reads besides the role's flags.
#[derive(Debug, Clone)]
pub struct LaunchContext {
    /// `sglang.launch_server` (an SGLang router frontend) or `dynamo.sglang` (the default).
    pub dynamo: bool,
    /// `--model-path`: the HF id of an `hf:` model, else `/model` (srtctl's mount point).
    pub model_arg: String,
    pub served_model_name: String,
    /// `dynamo.request_plane` (default `tcp`).
    pub request_plane: String,
    pub event_plane: Option<String>,
    /// Where `--dump-config-to` writes (srtctl's host log directory).
    pub log_dir: String,
    /// Every worker node's name and address, by worker-node index.
    pub node_names: Vec<String>,
    pub node_ips: Vec<String>,
    /// The head node's address (`HEAD_NODE_IP`) and the infra node's name (etcd/NATS host).
    pub head_ip: String,
    pub infra_node: String,
    pub gpus_per_node: u32,
}

/// srtctl's kv-events config for a mode, when enabled (`backend.kv_events_config` in v1,
/// `roles.<role>.kv_events` in 2.0): `true`, or a mapping merged over the defaults.
pub fn kv_events_for(
    cfg: Option<&serde_yaml::Value>,
    mode: Role,
    vllm: bool,
) -> Option<Vec<(String, serde_json::Value)>> {
    let defaults = || {
        let mut d = vec![
            ("publisher".to_string(), serde_json::Value::from("zmq")),
            ("topic".to_string(), serde_json::Value::from("kv-events")),
        ];
        if vllm {
            d.push((
                "enable_kv_cache_events".into(),
                serde_json::Value::Bool(true),
            ));
        }
        d
    };
    let cfg = cfg?;
    match cfg {
        serde_yaml::Value::Bool(true) => {
            matches!(mode, Role::Prefill | Role::Decode).then(defaults)
        }
        serde_yaml::Value::Mapping(m) => {
            let key = if mode == Role::Aggregated {
                "aggregated"
            } else {
                mode.as_str()
            };
            match m.get(key)? {
                serde_yaml::Value::Bool(true) => Some(defaults()),
                serde_yaml::Value::Mapping(inner) => {
                    let mut out = defaults();
                    for (k, v) in inner {
                        let k = k.as_str()?.to_string();
                        let v = serde_json::to_value(v).ok()?;
                        match out.iter_mut().find(|(x, _)| *x == k) {
                            Some(slot) => slot.1 = v,
                            None => out.push((k, v)),
                        }
                    }
                    Some(out)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// The SGLang worker argv for `p` (srtctl's `build_worker_command`).
pub fn sglang_argv(
    c: &LaunchContext,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
    kv_events: Option<Vec<(String, serde_json::Value)>>,
) -> Vec<String> {
    let module = if c.dynamo {
        "dynamo.sglang"
    } else {
        "sglang.launch_server"
    };
    let mut argv: Vec<String> = [
        "python3",
        "-m",
        module,
        "--model-path",
        &c.model_arg,
        "--served-model-name",
        &c.served_model_name,
        "--host",
        "0.0.0.0",
    ]
    .map(String::from)
    .to_vec();
    argv.extend(["--port".into(), p.http_port.to_string()]);
    let nccl = ports::NCCL + (p.sys_port - ports::DYN_SYSTEM);
    argv.extend(["--nccl-port".into(), nccl.to_string()]);
    if p.mode != Role::Aggregated {
        argv.extend(["--disaggregation-mode".into(), p.mode.as_str().into()]);
        if let (Role::Prefill, Some(b)) = (p.mode, p.bootstrap_port) {
            argv.extend(["--disaggregation-bootstrap-port".into(), b.to_string()]);
        }
    }
    if p.endpoint_nodes.len() > 1 {
        let leader_ip = &c.node_ips[p.endpoint_nodes[0]];
        argv.extend([
            "--dist-init-addr".into(),
            format!("{leader_ip}:{}", ports::DIST_INIT),
            "--nnodes".into(),
            p.endpoint_nodes.len().to_string(),
            "--node-rank".into(),
            p.node_rank.to_string(),
        ]);
    }
    if c.dynamo {
        argv.extend([
            "--dump-config-to".into(),
            format!("{}/{}_config.json", c.log_dir, c.node_names[p.node]),
        ]);
    }
    if let Some(kv) = kv_events {
        argv.extend(kv_events_args(kv, p.kv_events_port));
    }
    if c.dynamo {
        argv.extend(["--request-plane".into(), c.request_plane.clone()]);
    }
    if let Some(f) = flags {
        argv.extend(config_to_cli_args(
            f,
            &[
                "model-path",
                "model_path",
                "served-model-name",
                "served_model_name",
                "nccl-port",
                "nccl_port",
            ],
        ));
    }
    argv
}

/// How srtctl runs vLLM for a mode (`backend.connector`, `dp_launch_mode`, ...).
#[derive(Debug, Clone)]
pub struct VllmMode {
    /// `backend.connector` (default `nixl`), overridden by the mode's `connector` flag.
    pub connector: Option<String>,
    /// `dp_launch_mode: per_node` (the default) or `per_gpu`.
    pub per_node: bool,
    /// `backend.set_cuda_visible_devices` (default false: `--device-ids` instead).
    pub set_cvd: bool,
    /// `frontend.type: vllm`: `vllm serve` on an aggregated worker.
    pub direct: bool,
    /// TP x PP, and whether the mode sets data-parallel-size.
    pub replica: u32,
    pub dp: bool,
}

fn has(flags: Option<&FlagMap>, names: &[&str]) -> bool {
    flags.is_some_and(|f| f.0.iter().any(|(k, _)| names.contains(&k.as_str())))
}

fn flag_value(flags: Option<&FlagMap>, names: &[&str]) -> Option<String> {
    flags?
        .0
        .iter()
        .find(|(k, _)| names.contains(&k.as_str()))
        .map(|(_, v)| python_str(v))
}

/// srtctl's `_connector_to_kv_transfer_config`.
fn kv_transfer_config(connector: &str) -> String {
    let preset: Option<&[(&str, &str)]> = match connector.to_ascii_lowercase().as_str() {
        "nixl" => Some(&[("kv_connector", "NixlConnector"), ("kv_role", "kv_both")]),
        "lmcache" => Some(&[
            ("kv_connector", "LMCacheConnectorV1"),
            ("kv_role", "kv_both"),
        ]),
        "kvbm" => Some(&[
            ("kv_connector", "DynamoConnector"),
            (
                "kv_connector_module_path",
                "kvbm.vllm_integration.connector",
            ),
            ("kv_role", "kv_both"),
        ]),
        _ => None,
    };
    match preset {
        Some(p) => python_json_dumps(
            &p.iter()
                .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
                .collect::<Vec<_>>(),
        ),
        None => connector.to_string(),
    }
}

/// The vLLM worker argv for `p` (srtctl's `VLLMProtocol.build_worker_command`).
pub fn vllm_argv(
    c: &LaunchContext,
    v: &VllmMode,
    p: &TopoProcess,
    flags: Option<&FlagMap>,
    kv_events: Option<Vec<(String, serde_json::Value)>>,
) -> Vec<String> {
    let multi = p.endpoint_nodes.len() > 1;
    let leader_ip = c.node_ips[p.endpoint_nodes[0]].clone();
    let rank_in_endpoint = p
        .endpoint_nodes
        .iter()
        .position(|n| *n == p.node)
        .unwrap_or(0);
    let device_ids = || {
        [
            "--device-ids".to_string(),
            p.gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(","),
        ]
    };
    let mut skip: Vec<&str> = vec!["connector"];
    if v.direct {
        let mut argv = vec!["vllm".to_string(), "serve".into(), c.model_arg.clone()];
        skip.extend([
            "headless",
            "host",
            "port",
            "master-addr",
            "nnodes",
            "node-rank",
        ]);
        if rank_in_endpoint == 0 {
            argv.extend([
                "--host".into(),
                "0.0.0.0".into(),
                "--port".into(),
                "8000".into(),
            ]);
        }
        if multi {
            argv.extend([
                "--master-addr".into(),
                leader_ip,
                "--nnodes".into(),
                p.endpoint_nodes.len().to_string(),
                "--node-rank".into(),
                rank_in_endpoint.to_string(),
            ]);
            if rank_in_endpoint > 0 {
                argv.push("--headless".into());
                skip.push("api-server-count");
            }
        }
        if !v.set_cvd {
            argv.extend(device_ids());
        }
        let mut f = flags.cloned().unwrap_or_default();
        if !has(Some(&f), &["served-model-name"]) {
            f.0.push((
                "served-model-name".into(),
                serde_yaml::Value::from(c.served_model_name.clone()),
            ));
        }
        argv.extend(config_to_cli_args(&f, &skip));
        return argv;
    }
    let mut argv: Vec<String> = [
        "python3",
        "-m",
        "dynamo.vllm",
        "--model",
        &c.model_arg,
        "--served-model-name",
        &c.served_model_name,
    ]
    .map(String::from)
    .to_vec();
    if p.mode != Role::Aggregated {
        argv.extend(["--disaggregation-mode".into(), p.mode.as_str().into()]);
    }
    let connector = flag_value(flags, &["connector"]).or_else(|| v.connector.clone());
    if let Some(conn) = connector.filter(|c| !matches!(c.as_str(), "null" | "none" | "")) {
        argv.extend(["--kv-transfer-config".into(), kv_transfer_config(&conn)]);
    }
    if !v.set_cvd {
        argv.extend(device_ids());
    }
    if v.dp && v.per_node {
        let rpc = p
            .dp_rpc_port
            .map(|r| r.to_string())
            .or_else(|| flag_value(flags, &["data-parallel-rpc-port", "data_parallel_rpc_port"]))
            .unwrap_or_else(|| ports::DP_RPC.to_string());
        skip.extend([
            "data-parallel-rpc-port",
            "data_parallel_rpc_port",
            "data-parallel-size-local",
            "data_parallel_size_local",
            "data-parallel-start-rank",
            "data_parallel_start_rank",
            "data-parallel-hybrid-lb",
            "data_parallel_hybrid_lb",
            "headless",
        ]);
        let local = p.gpus.len() as u32;
        if v.replica > local {
            argv.extend([
                "--master-addr".into(),
                leader_ip.clone(),
                "--nnodes".into(),
                p.endpoint_nodes.len().to_string(),
                "--node-rank".into(),
                rank_in_endpoint.to_string(),
                "--data-parallel-address".into(),
                leader_ip,
                "--data-parallel-rpc-port".into(),
                rpc,
            ]);
            if rank_in_endpoint > 0 {
                argv.push("--headless".into());
            }
        } else {
            argv.extend([
                "--data-parallel-size-local".into(),
                (local / v.replica.max(1)).to_string(),
                "--data-parallel-start-rank".into(),
                p.node_rank.to_string(),
                "--data-parallel-address".into(),
                leader_ip,
                "--data-parallel-rpc-port".into(),
                rpc,
                "--data-parallel-hybrid-lb".into(),
            ]);
        }
    } else if v.dp {
        let rpc = p
            .dp_rpc_port
            .map(|r| r.to_string())
            .or_else(|| flag_value(flags, &["data-parallel-rpc-port", "data_parallel_rpc_port"]))
            .unwrap_or_else(|| ports::DP_RPC.to_string());
        skip.extend(["data-parallel-rpc-port", "data_parallel_rpc_port"]);
        argv.extend([
            "--data-parallel-rank".into(),
            p.node_rank.to_string(),
            "--data-parallel-address".into(),
            leader_ip,
            "--data-parallel-rpc-port".into(),
            rpc,
        ]);
    } else if multi {
        argv.extend([
            "--master-addr".into(),
            leader_ip,
            "--nnodes".into(),
            p.endpoint_nodes.len().to_string(),
            "--node-rank".into(),
            rank_in_endpoint.to_string(),
        ]);
        if rank_in_endpoint > 0 {
            argv.push("--headless".into());
        }
    }
    argv.extend(["--request-plane".into(), c.request_plane.clone()]);
    argv.extend([
        "--dump-config-to".into(),
        format!("{}/{}_config.json", c.log_dir, c.node_names[p.node]),
    ]);
    if let Some(kv) = kv_events {
        argv.extend(kv_events_args(kv, p.kv_events_port));
    }
    if let Some(f) = flags {
        argv.extend(config_to_cli_args(f, &skip));
    }
    argv
}

/// Environment variables in the order a launcher sets them.
pub type EnvPairs = Vec<(String, String)>;

/// vLLM's per-process variables (`get_process_environment`), set after `CUDA_VISIBLE_DEVICES`;
/// `VLLM_PORT` is unset for a worker over several nodes.
pub fn vllm_process_env(c: &LaunchContext, p: &TopoProcess) -> EnvPairs {
    let mut env = vec![
        (
            "DYN_VLLM_KV_EVENT_PORT".to_string(),
            p.kv_events_port.to_string(),
        ),
        (
            "VLLM_NIXL_SIDE_CHANNEL_PORT".into(),
            p.nixl_port.to_string(),
        ),
        (
            "VLLM_NIXL_SIDE_CHANNEL_HOST".into(),
            c.node_ips[p.node].clone(),
        ),
    ];
    if p.endpoint_nodes.len() == 1 {
        let index = u32::from(p.sys_port.saturating_sub(ports::DYN_SYSTEM));
        env.push(("VLLM_PORT".into(), (20000 + index * 50).to_string()));
    }
    env
}

/// The environment srtctl sets on the worker before the role env (`start_worker`), in its
/// order: base, `DYN_LOG`, then (after the role env and `environment:`) the partial-node
/// `CUDA_VISIBLE_DEVICES`. Returned as (before role env, after `environment:`).
pub fn sglang_env(c: &LaunchContext, p: &TopoProcess) -> (EnvPairs, EnvPairs) {
    let mut base = vec![
        ("HEAD_NODE_IP".to_string(), c.head_ip.clone()),
        (
            "ETCD_ENDPOINTS".into(),
            format!("http://{}:{}", c.infra_node, ports::ETCD),
        ),
        (
            "NATS_SERVER".into(),
            format!("nats://{}:{}", c.infra_node, ports::NATS),
        ),
        ("DYN_SYSTEM_PORT".into(), p.sys_port.to_string()),
        ("DYN_REQUEST_PLANE".into(), c.request_plane.clone()),
        ("DYN_SKIP_SGLANG_LOG_FORMATTING".into(), "1".into()),
    ];
    if let Some(e) = &c.event_plane {
        base.push(("DYN_EVENT_PLANE".into(), e.clone()));
    }
    base.push((
        "DYN_LOG".into(),
        "info,dynamo_runtime::pipeline::network::ingress::push_handler=warn".into(),
    ));
    let mut after = Vec::new();
    if (p.gpus.len() as u32) < c.gpus_per_node {
        after.push(("CUDA_VISIBLE_DEVICES".into(), p.cuda_visible_devices()));
    }
    (base, after)
}

/// srtctl's `_config_to_cli_args`: keys sorted by their raw text, `_` → `-`, `true` a bare flag,
/// `false`/null dropped, a list spread after one flag (an empty one leaves the bare flag), other
/// values as Python's `str()`. Keys in `skip` are left out.
pub fn config_to_cli_args(flags: &FlagMap, skip: &[&str]) -> Vec<String> {
    let mut items: Vec<&(String, serde_yaml::Value)> = flags
        .0
        .iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    render_flags(items.into_iter().map(|(k, v)| (k, v)), python_str)
}

/// `--kv-events-config <json>` as srtctl writes it for both engines: the recipe's settings with
/// `endpoint` replaced by this process's own ZMQ port.
fn kv_events_args(mut kv: Vec<(String, serde_json::Value)>, port: u16) -> [String; 2] {
    kv.retain(|(k, _)| k != "endpoint");
    kv.push(("endpoint".into(), format!("tcp://*:{port}").into()));
    ["--kv-events-config".into(), python_json_dumps(&kv)]
}

/// The CLI shape srtctl and mcsup both give a flag map: `_` → `-`, `true` a bare flag,
/// `false`/null dropped, a list spread after one flag, other values through `value` (which
/// differs: Python's `str()` for srtctl-derived argv, the plain scalar for mcsup's own).
pub fn render_flags<'a>(
    items: impl IntoIterator<Item = (&'a String, &'a serde_yaml::Value)>,
    value: fn(&serde_yaml::Value) -> String,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in items {
        let flag = format!("--{}", k.replace('_', "-"));
        match v {
            serde_yaml::Value::Bool(true) => out.push(flag),
            serde_yaml::Value::Bool(false) | serde_yaml::Value::Null => {}
            serde_yaml::Value::Sequence(items) => {
                out.push(flag);
                out.extend(items.iter().map(value));
            }
            other => {
                out.push(flag);
                out.push(value(other));
            }
        }
    }
    out
}

/// Python's `str()` of a value PyYAML would have produced.
pub fn python_str(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::String(s) => s.clone(),
        other => python_repr(other),
    }
}

fn python_repr(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::Null => "None".into(),
        serde_yaml::Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        serde_yaml::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => python_float(f),
            _ => n.to_string(),
        },
        serde_yaml::Value::String(s) => python_str_repr(s),
        serde_yaml::Value::Sequence(items) => {
            format!(
                "[{}]",
                items.iter().map(python_repr).collect::<Vec<_>>().join(", ")
            )
        }
        serde_yaml::Value::Mapping(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", python_repr(k), python_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        serde_yaml::Value::Tagged(t) => python_repr(&t.value),
    }
}

/// `repr(float)`: the shortest round-trip digits, in exponent form below 1e-4 or from 1e16.
pub fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        let e = format!("{f:e}");
        let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let s = format!("{f}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

fn python_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::new();
    out.push(quote);
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `json.dumps` with Python's default separators (`", "` and `": "`).
fn python_json_dumps(items: &[(String, serde_json::Value)]) -> String {
    fn value(v: &serde_json::Value) -> String {
        match v {
            serde_json::Value::Object(m) => format!(
                "{{{}}}",
                m.iter()
                    .map(|(k, v)| format!("{}: {}", serde_json::Value::from(k.as_str()), value(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            serde_json::Value::Array(a) => {
                format!("[{}]", a.iter().map(value).collect::<Vec<_>>().join(", "))
            }
            other => other.to_string(),
        }
    }
    format!(
        "{{{}}}",
        items
            .iter()
            .map(|(k, v)| format!("{}: {}", serde_json::Value::from(k.as_str()), value(v)))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_str_of_yaml_values() {
        let y = |t: &str| python_str(&serde_yaml::from_str::<serde_yaml::Value>(t).unwrap());
        assert_eq!(y("0.90"), "0.9");
        assert_eq!(y("5.0"), "5.0");
        assert_eq!(y("0.00001"), "1e-05");
        assert_eq!(y("1.5e+20"), "1.5e+20");
        assert_eq!(y("131072"), "131072");
        assert_eq!(y("abc"), "abc");
        assert_eq!(
            y("{method: mtp, n: 1, f: 0.5, on: true}"),
            "{'method': 'mtp', 'n': 1, 'f': 0.5, 'on': True}"
        );
        assert_eq!(y("[1, a]"), "[1, 'a']");
        assert_eq!(y("{q: \"it's\"}"), "{'q': \"it's\"}");
    }

    #[test]
    fn flags_sorted_by_raw_key_like_srtctl() {
        let f: FlagMap = serde_yaml::from_str(
            "tp-size: 8\nmem-fraction-static: 0.90\ntrust-remote-code: true\nskip: false\nnone: null\nmodel-path: /x\ncuda_graph_bs: [1, 2]\ncontext-length: 4096\n",
        )
        .unwrap();
        assert_eq!(
            config_to_cli_args(&f, &["model-path"]),
            [
                "--context-length",
                "4096",
                "--cuda-graph-bs",
                "1",
                "2",
                "--mem-fraction-static",
                "0.9",
                "--tp-size",
                "8",
                "--trust-remote-code"
            ]
        );
    }

    #[test]
    fn kv_events_configs() {
        let t: serde_yaml::Value = serde_yaml::from_str("true").unwrap();
        assert!(kv_events_for(Some(&t), Role::Prefill, false).is_some());
        assert!(kv_events_for(Some(&t), Role::Aggregated, false).is_none());
        let m: serde_yaml::Value = serde_yaml::from_str("{aggregated: {topic: x}}").unwrap();
        let kv = kv_events_for(Some(&m), Role::Aggregated, false).unwrap();
        assert_eq!(
            python_json_dumps(&kv),
            r#"{"publisher": "zmq", "topic": "x"}"#
        );
    }
}
