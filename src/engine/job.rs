//! The job-wide srtctl settings the worker layout reads, typed as srtctl's schema loads them
//! (`core/schema.py` at c88ef731: `InfraConfig`, `FrontendConfig.dedicated_node`,
//! `BenchmarkConfig`, `DynamoConfig`, `HealthCheckConfig`, `setup_script`). A value of the wrong
//! type is an error naming its key, not a silent default. Pure.

use std::time::Duration;

use super::reader::Reader;
use crate::domain::{plan_err, PlanError};
use crate::recipe::Recipe;

/// `dynamo.request_plane` values srtctl accepts (`DynamoConfig._VALID_REQUEST_PLANES`).
const REQUEST_PLANES: &[&str] = &["nats", "tcp", "http"];
/// `dynamo.event_plane` values srtctl accepts (`DynamoConfig._VALID_EVENT_PLANES`).
const EVENT_PLANES: &[&str] = &["nats", "zmq"];

/// What srtctl's layout and worker launch read outside the engine's own section.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSettings {
    /// `frontend.type`, as written (default `dynamo`).
    pub frontend_type: String,
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
        Ok(Self {
            frontend_type: frontend.string("type")?.unwrap_or_else(|| "dynamo".into()),
            dedicated_infra_node: infra.boolean("etcd_nats_dedicated_node")?.unwrap_or(false),
            dedicated_frontend_node: frontend.boolean("dedicated_node")?.unwrap_or(false),
            dedicated_client_node: bench.boolean("client_dedicated_node")?.unwrap_or(false),
            client_with_frontend: bench.boolean("colocate_with_frontend")?.unwrap_or(true),
            model_path: model.string("path")?.unwrap_or_else(|| "model".into()),
            setup_script,
            request_plane,
            event_plane,
            health_max_attempts: count(&health, "max_attempts", 180)?,
            health_interval_seconds: count(&health, "interval_seconds", 10)?,
        })
    }

    /// srtctl's `Nodes.from_slurm`: a dedicated infra or frontend node is the first of the
    /// job's node list.
    pub fn front_node(&self) -> bool {
        self.dedicated_infra_node || self.dedicated_frontend_node
    }

    /// A dedicated benchmark client is the last node, unless it shares the dedicated frontend's.
    pub fn back_node(&self) -> bool {
        self.dedicated_client_node && !(self.front_node() && self.client_with_frontend)
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
        !matches!(
            self.frontend_type.as_str(),
            "sglang" | "sglang-router" | "vllm"
        )
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
        assert_eq!(s.frontend_type, "dynamo");
        assert_eq!(s.ready_timeout(), Duration::from_secs(1800));
        assert_eq!(s.request_plane, "tcp");
        assert!(!s.front_node() && !s.back_node());
        assert_eq!(s.model_arg(), ("/model".into(), "model".into()));
    }

    #[test]
    fn dedicated_nodes_follow_srtctls_node_split() {
        let s = read(
            "infra: {etcd_nats_dedicated_node: yes}\nbenchmark: {client_dedicated_node: true}\n",
        )
        .unwrap();
        assert!(s.front_node());
        assert!(!s.back_node(), "the client shares the dedicated front node");
        let s = read("benchmark: {client_dedicated_node: true, colocate_with_frontend: false}\ninfra: {etcd_nats_dedicated_node: true}\n").unwrap();
        assert!(s.front_node() && s.back_node());
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
}
