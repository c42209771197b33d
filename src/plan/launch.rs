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
) -> Option<Vec<(String, serde_json::Value)>> {
    let defaults = || {
        vec![
            ("publisher".to_string(), serde_json::Value::from("zmq")),
            ("topic".to_string(), serde_json::Value::from("kv-events")),
        ]
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
    if let Some(mut kv) = kv_events {
        kv.retain(|(k, _)| k != "endpoint");
        kv.push((
            "endpoint".into(),
            format!("tcp://*:{}", p.kv_events_port).into(),
        ));
        argv.extend(["--kv-events-config".into(), python_json_dumps(&kv)]);
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

/// The environment srtctl sets on the worker before the role env (`start_worker`), in its
/// order: base, `DYN_LOG`, then (after the role env and `environment:`) the partial-node
/// `CUDA_VISIBLE_DEVICES`. Returned as (before role env, after `environment:`).
pub fn sglang_env(
    c: &LaunchContext,
    p: &TopoProcess,
) -> (Vec<(String, String)>, Vec<(String, String)>) {
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
    let mut out = Vec::new();
    for (k, v) in items {
        let flag = format!("--{}", k.replace('_', "-"));
        match v {
            serde_yaml::Value::Bool(true) => out.push(flag),
            serde_yaml::Value::Bool(false) | serde_yaml::Value::Null => {}
            serde_yaml::Value::Sequence(items) => {
                out.push(flag);
                out.extend(items.iter().map(python_str));
            }
            other => {
                out.push(flag);
                out.push(python_str(other));
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
        assert!(kv_events_for(Some(&t), Role::Prefill).is_some());
        assert!(kv_events_for(Some(&t), Role::Aggregated).is_none());
        let m: serde_yaml::Value = serde_yaml::from_str("{aggregated: {topic: x}}").unwrap();
        let kv = kv_events_for(Some(&m), Role::Aggregated).unwrap();
        assert_eq!(
            python_json_dumps(&kv),
            r#"{"publisher": "zmq", "topic": "x"}"#
        );
    }
}
