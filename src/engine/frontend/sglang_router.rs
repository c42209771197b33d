//! SGLang's router (srtctl's `frontends/sglang.py`): `python -m sglang_router.launch_router`
//! given the workers' leader URLs, which run SGLang's own server.

use super::{FrontendJob, FrontendKind, FrontendLaunch, FrontendSettings, Leader, Seen};
use crate::domain::Role;

/// `frontend.type: sglang` (2.0: `sglang-router`).
#[derive(Debug)]
pub struct SglangRouter;

impl FrontendKind for SglangRouter {
    fn name(&self) -> &'static str {
        "sglang-router"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["sglang"]
    }

    fn health_path(&self) -> &'static str {
        "/workers"
    }

    /// srtctl's `check_sglang_router_health`. The workers list says which are healthy;
    /// `stats` counts every registered worker, a dead one included (sglang-router 0.3.2,
    /// measured: 2 decode in `stats` with one SIGKILLed and `is_healthy: false`).
    fn parse_health(&self, v: &serde_json::Value) -> Result<Seen, String> {
        if let Some(list) = v.get("workers").and_then(|w| w.as_array()) {
            let mut seen = Seen {
                prefill: 0,
                decode: 0,
            };
            for w in list {
                if w.get("is_healthy").and_then(|h| h.as_bool()) == Some(false) {
                    continue;
                }
                match w.get("worker_type").and_then(|t| t.as_str()) {
                    Some("prefill") => seen.prefill += 1,
                    Some("decode" | "regular") => seen.decode += 1,
                    _ => {}
                }
            }
            return Ok(seen);
        }
        let stats = v.get("stats").ok_or("no `stats`")?;
        let n = |k: &str| stats.get(k).and_then(|x| x.as_u64()).unwrap_or(0) as u32;
        Ok(Seen {
            prefill: n("prefill_count"),
            decode: n("decode_count") + n("regular_count"),
        })
    }

    fn port_flag(&self) -> Option<&'static str> {
        Some("port")
    }

    fn launch(
        &self,
        s: &FrontendSettings,
        idx: usize,
        port: u16,
        job: &FrontendJob<'_>,
    ) -> Option<FrontendLaunch> {
        Some(FrontendLaunch {
            name: format!("sglang_router_{idx}"),
            argv: argv(s, port, job),
            env: Vec::new(),
        })
    }

    fn dynamo_workers(&self) -> bool {
        false
    }

    fn talks_to_engine_servers(&self) -> bool {
        true
    }
}

/// SGLang's router with the workers' leader URLs (prefill with its bootstrap port), then
/// `frontend.args`.
fn argv(s: &FrontendSettings, port: u16, job: &FrontendJob<'_>) -> Vec<String> {
    let mut argv: Vec<String> = ["python", "-m", "sglang_router.launch_router"]
        .map(String::from)
        .to_vec();
    let scheme = |l: &Leader| if l.grpc { "grpc://" } else { "http://" };
    if job.disaggregated {
        argv.push("--pd-disaggregation".into());
        for l in job.leaders.iter().filter(|l| l.mode == Role::Prefill) {
            argv.push("--prefill".into());
            argv.push(format!("{}{}:{}", scheme(l), l.ip, l.http_port));
            if let Some(b) = l.bootstrap_port {
                argv.push(b.to_string());
            }
        }
        for l in job.leaders.iter().filter(|l| l.mode == Role::Decode) {
            argv.push("--decode".into());
            argv.push(format!("{}{}:{}", scheme(l), l.ip, l.http_port));
        }
    } else {
        argv.push("--worker-urls".into());
        for l in job.leaders.iter().filter(|l| l.mode == Role::Aggregated) {
            argv.push(format!("{}{}:{}", scheme(l), l.ip, l.http_port));
        }
    }
    argv.extend(
        [
            "--host".to_string(),
            "0.0.0.0".into(),
            "--port".into(),
            port.to_string(),
        ]
        .into_iter()
        .chain(s.args_list()),
    );
    argv
}
