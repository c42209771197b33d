//! The job-wide srtctl settings the worker layout reads, typed as srtctl's schema loads them
//! (`core/schema.py` at c88ef731: `InfraConfig`, `FrontendConfig.dedicated_node`,
//! `BenchmarkConfig`, `DynamoConfig`, `HealthCheckConfig`, `setup_script`). A value of the wrong
//! type is an error naming its key, not a silent default. srt-slurm 2.0's spellings of the
//! dedicated nodes (`placement.node: dedicated`) are read as well. Pure.

use std::collections::BTreeMap;
use std::time::Duration;

use super::reader::Reader;
use crate::domain::{plan_err, PlanError};
use crate::recipe::Recipe;

/// `dynamo.request_plane` values srtctl accepts (`DynamoConfig._VALID_REQUEST_PLANES`).
const REQUEST_PLANES: &[&str] = &["nats", "tcp", "http"];
/// `dynamo.event_plane` values srtctl accepts (`DynamoConfig._VALID_EVENT_PLANES`).
const EVENT_PLANES: &[&str] = &["nats", "zmq"];

/// `health_check.fatal_log_markers` (default true) and `extra_fatal_log_patterns` (srtctl's
/// `HealthCheckConfig`): the patterns, each checked to compile. srtctl matches them with
/// Python's `re.search` on each line; mcsup with Rust's `regex`, which has no look-around and
/// no backreferences: a pattern that needs them is refused here, not silently never matched.
fn fatal_log_patterns(health: &Reader) -> Result<Vec<String>, PlanError> {
    let on = health.boolean("fatal_log_markers")?.unwrap_or(true);
    let extra = match health.raw("extra_fatal_log_patterns") {
        None => Vec::new(),
        Some(serde_yaml::Value::Sequence(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let key = format!("health_check.extra_fatal_log_patterns[{i}]");
                let serde_yaml::Value::String(p) = v else {
                    return Err(plan_err(
                        key,
                        "is not a string",
                        "write each pattern as a quoted string: - \"CUDA error: out of memory\"",
                    ));
                };
                regex::Regex::new(p).map_err(|e| {
                    let e = e.to_string();
                    let why = e.lines().last().unwrap_or("").trim().to_string();
                    plan_err(
                        key,
                        format!("`{p}` is not a regular expression mcsup can match: {why}"),
                        "write it without look-around ((?=…), (?!…)) and backreferences (\\1), which Rust's regex lacks; a plain substring works as is",
                    )
                })?;
                Ok(p.clone())
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(health.bad(
                "extra_fatal_log_patterns",
                v,
                "a list of patterns",
                "[\"CUDA error: out of memory\"]",
            ))
        }
    };
    Ok(if on { extra } else { Vec::new() })
}

/// What srtctl's layout and worker launch read outside the engine's own section.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSettings {
    /// `frontend.type` (default `dynamo`).
    pub frontend_type: super::frontend::FrontendType,
    /// `infra.etcd_nats_dedicated_node`.
    pub dedicated_infra_node: bool,
    /// `frontend.dedicated_node`.
    pub dedicated_frontend_node: bool,
    /// `benchmark.client_dedicated_node`.
    pub dedicated_client_node: bool,
    /// `benchmark.colocate_with_frontend` (default true).
    pub client_with_frontend: bool,
    /// `model.path` (default `model`): an `hf:` id or a path/alias srtctl mounts at `/model`.
    pub model_path: String,
    /// `setup_script`.
    pub setup_script: Option<String>,
    /// `dynamo.request_plane` (default `tcp`).
    pub request_plane: String,
    /// `dynamo.event_plane`.
    pub event_plane: Option<String>,
    /// `health_check.max_attempts` (default 180).
    pub health_max_attempts: u64,
    /// `health_check.interval_seconds` (default 10).
    pub health_interval_seconds: u64,
    /// The log lines that fail a worker while its process lives on: srtctl's
    /// `_fatal_log_patterns` (the engine's own, none for SGLang, vLLM and the mocker, then
    /// `health_check.extra_fatal_log_patterns`), empty with `health_check.fatal_log_markers:
    /// false`. Each compiles as a regular expression.
    pub fatal_log_patterns: Vec<String>,
}

impl JobSettings {
    pub fn from_recipe(recipe: &Recipe) -> Result<Self, PlanError> {
        let section = |section| Reader { recipe, section };
        let (infra, frontend, bench, model, dynamo, health) = (
            section("infra"),
            section("frontend"),
            section("benchmark"),
            section("model"),
            section("dynamo"),
            section("health_check"),
        );
        let request_plane = dynamo
            .string("request_plane")?
            .unwrap_or_else(|| "tcp".into());
        one_of("dynamo.request_plane", &request_plane, REQUEST_PLANES)?;
        let event_plane = dynamo.string("event_plane")?;
        if let Some(p) = &event_plane {
            one_of("dynamo.event_plane", p, EVENT_PLANES)?;
        }
        let setup_script = match recipe.raw_get(&["setup_script"]) {
            None => None,
            Some(serde_yaml::Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(plan_err(
                    "setup_script",
                    "is not a string",
                    "write setup_script: my-setup.sh",
                ))
            }
        };
        let count = |r: &Reader, key: &str, default: u64| -> Result<u64, PlanError> {
            match r.int(key)? {
                None => Ok(default),
                Some(n) => u64::try_from(n).map_err(|_| {
                    plan_err(
                        format!("{}.{key}", r.section),
                        format!("{n} is negative"),
                        format!("write {key}: {default}"),
                    )
                }),
            }
        };
        // srt-slurm 2.0 says `placement: {node: dedicated}` (frontend, benchmark, and the etcd and
        // nats services) where v1 has booleans (`SrtConfig.infra_dedicated_node`, `PlacementConfig`).
        let dedicated = |section: &str| {
            recipe
                .raw_get(&[section, "placement", "node"])
                .and_then(serde_yaml::Value::as_str)
                == Some("dedicated")
        };
        let infra_service_dedicated = match recipe.raw_get(&["services"]) {
            Some(serde_yaml::Value::Sequence(s)) => s.iter().any(|svc| {
                matches!(
                    svc.get("type").and_then(|t| t.as_str()),
                    Some("etcd" | "nats")
                ) && svc
                    .get("placement")
                    .and_then(|p| p.get("node"))
                    .and_then(|n| n.as_str())
                    == Some("dedicated")
            }),
            _ => false,
        };
        Ok(Self {
            frontend_type: super::frontend::frontend_type(recipe)?,
            dedicated_infra_node: infra.boolean("etcd_nats_dedicated_node")?.unwrap_or(false)
                || infra_service_dedicated,
            dedicated_frontend_node: frontend.boolean("dedicated_node")?.unwrap_or(false)
                || dedicated("frontend"),
            dedicated_client_node: bench.boolean("client_dedicated_node")?.unwrap_or(false)
                || dedicated("benchmark"),
            client_with_frontend: bench.boolean("colocate_with_frontend")?.unwrap_or(true),
            model_path: model.string("path")?.unwrap_or_else(|| "model".into()),
            setup_script,
            request_plane,
            event_plane,
            health_max_attempts: count(&health, "max_attempts", 180)?,
            health_interval_seconds: count(&health, "interval_seconds", 10)?,
            fatal_log_patterns: fatal_log_patterns(&health)?,
        })
    }

    /// Where srtctl puts the job's parts in a node list of `n` nodes: its `Nodes.from_slurm`
    /// (`src/srtctl/core/runtime.py` @c88ef731). Dedicated roles (infra, frontend, client) share
    /// one reserved node when `benchmark.colocate_with_frontend` (the default): the last when the
    /// client is among them, else the first. Otherwise infra and frontend take the first nodes in
    /// that order and the client the last. The workers get the rest, in order.
    pub fn nodes(&self, n: usize) -> Result<JobNodes, PlanError> {
        let dedicated: Vec<&str> = [
            ("infra", self.dedicated_infra_node),
            ("frontend", self.dedicated_frontend_node),
            ("client", self.dedicated_client_node),
        ]
        .into_iter()
        .filter_map(|(r, on)| on.then_some(r))
        .collect();
        if dedicated.is_empty() {
            return Ok(JobNodes {
                workers: 0..n,
                head: 0,
                infra: 0,
                bench: 0,
            });
        }
        let reserved_count = if self.client_with_frontend {
            1
        } else {
            dedicated.len()
        };
        if n <= reserved_count {
            return Err(plan_err(
                "infra",
                format!(
                    "dedicated node(s) for {} need at least {} nodes; the job has {n}",
                    dedicated.join("+"),
                    reserved_count + 1
                ),
                format!("run the job on {} nodes or more", reserved_count + 1),
            ));
        }
        let client = self.dedicated_client_node;
        let mut at: BTreeMap<&str, usize> = BTreeMap::new();
        let workers = if self.client_with_frontend {
            let shared = if client { n - 1 } else { 0 };
            for r in &dedicated {
                at.insert(r, shared);
            }
            if client {
                0..n - 1
            } else {
                1..n
            }
        } else {
            let front: Vec<&str> = dedicated
                .iter()
                .copied()
                .filter(|r| *r != "client")
                .collect();
            for (i, r) in front.iter().enumerate() {
                at.insert(r, i);
            }
            if client {
                at.insert("client", n - 1);
                front.len()..n - 1
            } else {
                front.len()..n
            }
        };
        let head = at.get("frontend").copied().unwrap_or(workers.start);
        Ok(JobNodes {
            head,
            bench: at.get("client").copied().unwrap_or(head),
            infra: at.get("infra").copied().unwrap_or(head),
            workers,
        })
    }

    /// How long srtctl waits for the workers: `max_attempts` x `interval_seconds`.
    pub fn ready_timeout(&self) -> Duration {
        Duration::from_secs(
            self.health_max_attempts
                .saturating_mul(self.health_interval_seconds),
        )
    }

    /// Whether the workers are Dynamo workers (every frontend but SGLang's router and vLLM's
    /// own server).
    pub fn dynamo_workers(&self) -> bool {
        self.frontend_type.kind().dynamo_workers()
    }

    /// The `--model-path` srtctl passes and the model's base name (its default served name):
    /// an `hf:` id as is, anything else is mounted at `/model`.
    pub fn model_arg(&self) -> (String, String) {
        let raw = self.model_path.as_str();
        match raw.strip_prefix("hf:") {
            Some(id) => (
                id.to_string(),
                id.rsplit('/').next().unwrap_or(id).to_string(),
            ),
            None => (
                "/model".to_string(),
                raw.trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or(raw)
                    .to_string(),
            ),
        }
    }
}

fn one_of(key: &str, value: &str, valid: &[&str]) -> Result<(), PlanError> {
    if valid.contains(&value) {
        return Ok(());
    }
    Err(plan_err(
        key,
        format!("unknown value `{value}`"),
        format!("use one of: {}", valid.join(", ")),
    ))
}

/// Where srtctl puts a job's parts, as indexes into its node list ([`JobSettings::nodes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobNodes {
    /// The worker nodes, in order.
    pub workers: std::ops::Range<usize>,
    /// The frontend's (and nginx's) node.
    pub head: usize,
    /// etcd, NATS and the Mooncake master.
    pub infra: usize,
    /// The benchmark client.
    pub bench: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<JobSettings, PlanError> {
        let recipe = crate::recipe::parse_str(std::path::Path::new("r.yaml"), yaml).unwrap();
        JobSettings::from_recipe(&recipe)
    }

    #[test]
    fn defaults_are_srtctls() {
        let s = read("backend: {type: sglang}\n").unwrap();
        assert_eq!(s.frontend_type.as_str(), "dynamo");
        assert_eq!(s.ready_timeout(), Duration::from_secs(1800));
        assert_eq!(s.request_plane, "tcp");
        assert_eq!(s.nodes(2).unwrap().workers, 0..2);
        assert_eq!(s.model_arg(), ("/model".into(), "model".into()));
    }

    #[test]
    fn dedicated_nodes_follow_srtctls_node_split() {
        let nodes = |yaml: &str, n: usize| read(yaml).unwrap().nodes(n);
        let at = |workers: std::ops::Range<usize>, head, infra, bench| JobNodes {
            workers,
            head,
            infra,
            bench,
        };
        // The cases of srtctl's Nodes.from_slurm (c88ef731), on 4 nodes.
        assert_eq!(nodes("{}\n", 4).unwrap(), at(0..4, 0, 0, 0));
        let infra = "infra: {etcd_nats_dedicated_node: yes}\n";
        assert_eq!(nodes(infra, 4).unwrap(), at(1..4, 1, 0, 1));
        let front = "frontend: {dedicated_node: true}\n";
        assert_eq!(nodes(front, 4).unwrap(), at(1..4, 0, 0, 0));
        // With the client, the shared reserved node is the last (never the batch script's first).
        let client = "benchmark: {client_dedicated_node: true}\n";
        assert_eq!(
            nodes(&format!("{infra}{client}"), 4).unwrap(),
            at(0..3, 0, 3, 3)
        );
        assert_eq!(nodes(client, 4).unwrap(), at(0..3, 0, 0, 3));
        // Not colocated: infra then frontend first, the client last.
        let apart = "benchmark: {client_dedicated_node: true, colocate_with_frontend: false}\n";
        assert_eq!(
            nodes(&format!("{infra}{front}{apart}"), 5).unwrap(),
            at(2..4, 1, 0, 4)
        );
        let apart_no_client = "benchmark: {colocate_with_frontend: false}\n";
        assert_eq!(
            nodes(&format!("{infra}{front}{apart_no_client}"), 4).unwrap(),
            at(2..4, 1, 0, 1)
        );
        // Too few nodes for the reserved ones.
        let e = nodes(&format!("{infra}{front}{apart_no_client}"), 2).unwrap_err();
        assert!(e.to_string().contains("at least 3 nodes"), "{e}");
    }

    #[test]
    fn srt_slurm_2_spells_dedicated_nodes_as_placements() {
        let s = read(
            "frontend: {placement: {node: dedicated}}\nbenchmark: {placement: {node: dedicated}}\nservices:\n  - {name: etcd, type: etcd, placement: {node: dedicated}}\n",
        )
        .unwrap();
        assert!(s.dedicated_frontend_node && s.dedicated_client_node && s.dedicated_infra_node);
        let s = read("frontend: {placement: {node: head}}\nservices:\n  - {name: etcd, type: etcd}\n  - {name: x, type: generic, placement: {node: dedicated}}\n").unwrap();
        assert!(!s.dedicated_frontend_node && !s.dedicated_client_node && !s.dedicated_infra_node);
    }

    #[test]
    fn a_wrong_type_names_its_key() {
        for (yaml, key) in [
            (
                "health_check: {max_attempts: many}\n",
                "health_check.max_attempts",
            ),
            (
                "health_check: {interval_seconds: -5}\n",
                "health_check.interval_seconds",
            ),
            (
                "infra: {etcd_nats_dedicated_node: maybe}\n",
                "infra.etcd_nats_dedicated_node",
            ),
            ("dynamo: {request_plane: grpc}\n", "dynamo.request_plane"),
            ("dynamo: {event_plane: tcp}\n", "dynamo.event_plane"),
            ("model: {path: [a]}\n", "model.path"),
            ("setup_script: {a: 1}\n", "setup_script"),
            (
                "health_check: {fatal_log_markers: perhaps}\n",
                "health_check.fatal_log_markers",
            ),
            (
                "health_check: {extra_fatal_log_patterns: oom}\n",
                "health_check.extra_fatal_log_patterns",
            ),
            (
                "health_check: {extra_fatal_log_patterns: [ok, 7]}\n",
                "health_check.extra_fatal_log_patterns[1]",
            ),
        ] {
            let e = read(yaml).unwrap_err().to_string();
            assert!(e.contains(key), "{yaml}: {e}");
        }
    }

    #[test]
    fn hf_ids_pass_through_and_paths_mount_at_model() {
        let s = read("model: {path: \"hf:Qwen/Qwen3-0.6B\"}\n").unwrap();
        assert_eq!(
            s.model_arg(),
            ("Qwen/Qwen3-0.6B".into(), "Qwen3-0.6B".into())
        );
        let s = read("model: {path: /models/dsr1/}\n").unwrap();
        assert_eq!(s.model_arg(), ("/model".into(), "dsr1".into()));
    }

    #[test]
    fn fatal_log_patterns_are_srtctls_and_compile() {
        assert!(read("{}\n").unwrap().fatal_log_patterns.is_empty());
        let two = "health_check: {extra_fatal_log_patterns: [\"CUDA error: out of memory\", \"^Rank\\\\d+ died$\"]}\n";
        assert_eq!(
            read(two).unwrap().fatal_log_patterns,
            ["CUDA error: out of memory", "^Rank\\d+ died$"]
        );
        // The kill switch turns every pattern off, as srtctl's does.
        let off = "health_check:\n  fatal_log_markers: false\n  extra_fatal_log_patterns: [oom]\n";
        assert!(read(off).unwrap().fatal_log_patterns.is_empty());
        // srtctl's own TRT-LLM pattern uses a look-ahead: refused with the key and the fix.
        let e = read("health_check: {extra_fatal_log_patterns: [\"^Rank\\\\d+ Task exit code: (?!0$)\\\\d+$\"]}\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("health_check.extra_fatal_log_patterns[0]"),
            "{e}"
        );
        assert!(e.contains("look-around"), "{e}");
    }
}
