//! Dynamo's frontend (srtctl's `frontends/dynamo.py`): `python3 -m dynamo.frontend` on each
//! frontend node, finding the workers through etcd/NATS as they register.

use super::{FrontendJob, FrontendKind, FrontendLaunch, FrontendSettings, Seen};
use crate::engine::layout::ports;
use crate::engine::stop::MetricSum;

/// `frontend.type: dynamo` (srtctl's default).
#[derive(Debug)]
pub struct Dynamo;

impl FrontendKind for Dynamo {
    fn name(&self) -> &'static str {
        "dynamo"
    }

    fn health_path(&self) -> &'static str {
        "/health"
    }

    /// srtctl's `check_dynamo_health`: the `generate` endpoints, per component (a TRT-LLM or
    /// aggregated worker registers as `tensorrt_llm` or `backend`).
    fn parse_health(&self, v: &serde_json::Value) -> Result<Seen, String> {
        let list = v
            .get("instances")
            .and_then(|i| i.as_array())
            .ok_or("no `instances` list")?;
        let mut seen = Seen {
            prefill: 0,
            decode: 0,
        };
        for i in list {
            if i.get("endpoint").and_then(|e| e.as_str()) != Some("generate") {
                continue;
            }
            match i.get("component").and_then(|c| c.as_str()) {
                Some("prefill") => seen.prefill += 1,
                Some("decode" | "tensorrt_llm" | "backend") => seen.decode += 1,
                _ => {}
            }
        }
        Ok(seen)
    }

    fn port_flag(&self) -> Option<&'static str> {
        Some("http-port")
    }

    /// `python3 -m dynamo.frontend --http-port=P` and `frontend.args`; discovery and planes,
    /// then the spans' and the recipe's environment.
    fn launch(
        &self,
        s: &FrontendSettings,
        idx: usize,
        port: u16,
        job: &FrontendJob<'_>,
    ) -> Option<FrontendLaunch> {
        let mut argv: Vec<String> = ["python3", "-m", "dynamo.frontend"]
            .map(String::from)
            .to_vec();
        argv.push(format!("--http-port={port}"));
        argv.extend(s.args_list());
        Some(FrontendLaunch {
            name: format!("frontend_{idx}"),
            argv,
            env: env(job),
        })
    }

    fn discovers_workers(&self) -> bool {
        true
    }

    fn inflight_gauge(&self, port: u16) -> Option<MetricSum> {
        Some(MetricSum::of_dynamo_frontend(port))
    }
}

/// srtctl's Dynamo frontend env: discovery and planes, then the spans' and the recipe's.
fn env(job: &FrontendJob<'_>) -> Vec<(String, String, &'static str)> {
    let mut env = vec![
        (
            "ETCD_ENDPOINTS".to_string(),
            format!("http://{}:{}", job.infra_node, ports::ETCD),
            "srtctl",
        ),
        (
            "NATS_SERVER".to_string(),
            format!("nats://{}:{}", job.infra_node, ports::NATS),
            "srtctl",
        ),
        (
            "DYN_REQUEST_PLANE".to_string(),
            job.request_plane.to_string(),
            "srtctl",
        ),
        (
            "DYN_SKIP_SGLANG_LOG_FORMATTING".to_string(),
            "1".into(),
            "srtctl",
        ),
    ];
    if let Some(e) = job.event_plane {
        env.push(("DYN_EVENT_PLANE".into(), e.to_string(), "srtctl"));
    }
    env.extend(
        job.observability
            .otel_env("frontend")
            .into_iter()
            .map(|(k, v)| (k, v, "observability")),
    );
    env.extend(
        job.environment
            .iter()
            .map(|(k, v)| (k.clone(), v.clone(), "environment")),
    );
    env
}
