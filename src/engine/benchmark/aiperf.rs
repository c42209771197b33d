//! The AIPerf-driven benchmarks (srtctl's `AIPerfBenchmarkRunner`s): `mooncake-router`
//! (`benchmarks/mooncake_router.py`, a Mooncake trace) and `trace-replay`
//! (`benchmarks/trace_replay.py`, a JSONL trace at each concurrency). Both get AIPerf's server
//! metrics URLs and `aiperf_package`, and append `aiperf_args`.

use super::settings::{aiperf_flags, BenchmarkSettings};
use super::{endpoint, script_path, tokenizer, BenchContext, BenchmarkKind};

/// `mooncake-router`.
#[derive(Debug)]
pub struct MooncakeRouter;

/// `trace-replay`.
#[derive(Debug)]
pub struct TraceReplay;

/// `x or default` for a loaded number.
fn or(v: Option<i64>, default: i64) -> i64 {
    v.filter(|n| *n != 0).unwrap_or(default)
}

/// The model name srtctl passes: the served one, else `model.path`.
fn model_name(c: &BenchContext<'_>) -> String {
    if c.served_model_name.is_empty() {
        c.model_path.clone()
    } else {
        c.served_model_name.clone()
    }
}

impl BenchmarkKind for MooncakeRouter {
    fn name(&self) -> &'static str {
        "mooncake-router"
    }

    fn title(&self) -> &'static str {
        "Mooncake Router Benchmark"
    }

    fn script(&self) -> Option<&'static str> {
        Some("mooncake-router/bench.sh")
    }

    fn aiperf(&self) -> bool {
        true
    }

    fn validate(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        let mut errors = Vec::new();
        let workload = b
            .mooncake_workload
            .clone()
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "conversation".into());
        let valid = ["mooncake", "conversation", "synthetic", "toolagent"];
        if !valid.contains(&workload.as_str()) {
            errors.push(format!(
                "benchmark.mooncake_workload must be one of {}, got: {workload}",
                valid.join(", ")
            ));
        }
        let ttft = or(b.ttft_threshold_ms, 2000);
        if ttft <= 0 {
            errors.push(format!(
                "benchmark.ttft_threshold_ms must be positive, got: {ttft}"
            ));
        }
        let itl = or(b.itl_threshold_ms, 25);
        if itl <= 0 {
            errors.push(format!(
                "benchmark.itl_threshold_ms must be positive, got: {itl}"
            ));
        }
        errors
    }

    fn command(&self, b: &BenchmarkSettings, c: &BenchContext<'_>) -> Vec<String> {
        let mut cmd = vec![
            "bash".to_string(),
            script_path(self),
            endpoint(),
            model_name(c),
            b.mooncake_workload
                .clone()
                .filter(|w| !w.is_empty())
                .unwrap_or_else(|| "conversation".into()),
            or(b.ttft_threshold_ms, 2000).to_string(),
            or(b.itl_threshold_ms, 25).to_string(),
            tokenizer(c),
        ];
        cmd.extend(aiperf_flags(&b.aiperf_args));
        cmd
    }
}

impl BenchmarkKind for TraceReplay {
    fn name(&self) -> &'static str {
        "trace-replay"
    }

    fn title(&self) -> &'static str {
        "Trace-Replay-Bench"
    }

    fn script(&self) -> Option<&'static str> {
        Some("trace-replay/bench.sh")
    }

    fn aiperf(&self) -> bool {
        true
    }

    fn drives_profiling(&self) -> bool {
        true
    }

    fn validate(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        let mut errors = Vec::new();
        if b.trace_file.as_deref().is_none_or(str::is_empty) {
            errors.push("benchmark.trace_file is required for trace-replay".into());
        }
        if b.concurrencies.is_none() {
            errors.push("benchmark.concurrencies is required for trace-replay".into());
        }
        errors
    }

    fn command(&self, b: &BenchmarkSettings, c: &BenchContext<'_>) -> Vec<String> {
        let concurrencies = b
            .concurrencies
            .as_ref()
            .filter(|c| c.truthy())
            .map_or_else(String::new, |c| c.joined(","));
        let mut cmd = vec![
            "bash".to_string(),
            script_path(self),
            endpoint(),
            model_name(c),
            b.trace_file.clone().unwrap_or_default(),
            concurrencies,
            or(b.ttft_threshold_ms, 2000).to_string(),
            or(b.itl_threshold_ms, 25).to_string(),
            tokenizer(c),
        ];
        cmd.extend(aiperf_flags(&b.aiperf_args));
        cmd
    }
}
