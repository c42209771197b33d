//! SGLang's benchmarks: the router benchmark with prefix caching (srtctl's
//! `benchmarks/router.py`, SGLang's router only) and `sglang.bench_serving`
//! (`benchmarks/sglang_bench.py`).

use super::settings::BenchmarkSettings;
use super::{endpoint, script_path, BenchContext, BenchmarkKind};

/// `router`.
#[derive(Debug)]
pub struct Router;

/// `sglang-bench`.
#[derive(Debug)]
pub struct SglangBench;

/// `str(x or default)`.
fn or(v: Option<i64>, default: i64) -> String {
    v.filter(|n| *n != 0).unwrap_or(default).to_string()
}

impl BenchmarkKind for Router {
    fn name(&self) -> &'static str {
        "router"
    }

    fn title(&self) -> &'static str {
        "Router Benchmark"
    }

    fn script(&self) -> Option<&'static str> {
        Some("router/bench.sh")
    }

    fn validate(&self, _b: &BenchmarkSettings, c: &BenchContext<'_>) -> Vec<String> {
        if c.frontend.kind().talks_to_engine_servers() {
            Vec::new()
        } else {
            vec!["router benchmark requires frontend.type: sglang (benchmark.type router)".into()]
        }
    }

    fn command(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        vec![
            "bash".to_string(),
            script_path(self),
            endpoint(),
            or(b.isl, 14000),
            or(b.osl, 200),
            or(b.num_requests, 200),
            or(b.concurrency, 20),
            b.prefix_ratios
                .clone()
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "0.1 0.3 0.5 0.7 0.9".into()),
        ]
    }
}

impl BenchmarkKind for SglangBench {
    fn name(&self) -> &'static str {
        "sglang-bench"
    }

    fn title(&self) -> &'static str {
        "SGLang-Bench"
    }

    fn script(&self) -> Option<&'static str> {
        Some("sglang-bench/bench.sh")
    }

    fn drives_profiling(&self) -> bool {
        true
    }

    fn validate(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        let mut errors = Vec::new();
        match b.isl {
            None => errors.push("benchmark.isl is required for sglang-bench".into()),
            Some(n) if n <= 0 => {
                errors.push("benchmark.isl must be a positive integer for sglang-bench".into())
            }
            _ => {}
        }
        match b.osl {
            None => errors.push("benchmark.osl is required for sglang-bench".into()),
            Some(n) if n <= 0 => {
                errors.push("benchmark.osl must be a positive integer for sglang-bench".into())
            }
            _ => {}
        }
        match &b.concurrencies {
            None => errors.push("benchmark.concurrencies is required for sglang-bench".into()),
            Some(c) => match c.list() {
                Err(_) => errors.push("benchmark.concurrencies must be a list of ints or an 'x'-separated string for sglang-bench".into()),
                Ok(l) if l.is_empty() => errors.push("benchmark.concurrencies must not be empty for sglang-bench".into()),
                Ok(l) if l.iter().any(|c| *c <= 0) => errors.push("benchmark.concurrencies values must be positive integers for sglang-bench".into()),
                Ok(_) => {}
            },
        }
        match &b.req_rate {
            Some(super::settings::ReqRate::Number(n)) if *n <= 0 => errors.push(
                "benchmark.req_rate must be a positive integer or 'inf' for sglang-bench".into(),
            ),
            Some(super::settings::ReqRate::Text(s)) if matches!(s.trim(), "0" | "0.0") => errors
                .push(
                    "benchmark.req_rate must be a positive number or 'inf' for sglang-bench".into(),
                ),
            _ => {}
        }
        errors
    }

    fn command(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        let text = |v: Option<i64>| v.map_or_else(|| "None".to_string(), |n| n.to_string());
        vec![
            "bash".to_string(),
            script_path(self),
            endpoint(),
            text(b.isl),
            text(b.osl),
            b.concurrencies
                .as_ref()
                .map_or_else(|| "None".to_string(), |c| c.joined("x")),
            b.req_rate
                .as_ref()
                .map_or_else(|| "inf".to_string(), |r| r.text()),
        ]
    }
}
