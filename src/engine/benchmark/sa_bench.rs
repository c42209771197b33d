//! SA-Bench (srtctl's `benchmarks/sa_bench.py`): throughput and latency at each concurrency,
//! its results as `/logs/sa-bench_isl_<ISL>_osl_<OSL>/results_concurrency_<c>_gpus_<n>*.json`.

use super::settings::BenchmarkSettings;
use super::{endpoint, script_path, tokenizer, BenchContext, BenchmarkKind};
use crate::engine::flags::python_float;

/// `sa-bench`.
#[derive(Debug)]
pub struct SaBench;

impl BenchmarkKind for SaBench {
    fn name(&self) -> &'static str {
        "sa-bench"
    }

    fn title(&self) -> &'static str {
        "SA-Bench"
    }

    fn script(&self) -> Option<&'static str> {
        Some("sa-bench/bench.sh")
    }

    fn drives_profiling(&self) -> bool {
        true
    }

    fn validate(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        let mut errors = Vec::new();
        let custom = b.dataset_name.as_deref() == Some("custom");
        if !custom {
            if b.isl.is_none() {
                errors.push(
                    "benchmark.isl is required for sa-bench (when dataset_name is not 'custom')"
                        .into(),
                );
            }
            if b.osl.is_none() {
                errors.push(
                    "benchmark.osl is required for sa-bench (when dataset_name is not 'custom')"
                        .into(),
                );
            }
        }
        if b.concurrencies.is_none() {
            errors.push("benchmark.concurrencies is required for sa-bench".into());
        }
        if custom && b.dataset_path.as_deref().is_none_or(str::is_empty) {
            errors.push("benchmark.dataset_path is required when dataset_name='custom'".into());
        }
        errors
    }

    /// 19 positional settings after the endpoint, as srtctl's `build_command` orders them.
    fn command(&self, b: &BenchmarkSettings, c: &BenchContext<'_>) -> Vec<String> {
        let (total, prefill, decode) = if c.disaggregated {
            let p = c.sizes.prefill.workers * c.sizes.prefill.gpus_per_worker;
            let d = c.sizes.decode.workers * c.sizes.decode.gpus_per_worker;
            (p + d, p, d)
        } else {
            (c.agg_nodes * c.sizes.gpus_per_node, 0, 0)
        };
        let concurrencies = b
            .concurrencies
            .as_ref()
            .filter(|c| c.truthy())
            .map_or_else(String::new, |c| c.joined("x"));
        let req_rate = b
            .req_rate
            .as_ref()
            .filter(|r| r.truthy())
            .map_or_else(|| "inf".to_string(), |r| r.text());
        let or_zero = |v: Option<i64>| v.filter(|n| *n != 0).unwrap_or(0).to_string();
        vec![
            "bash".to_string(),
            script_path(self),
            endpoint(),
            or_zero(b.isl),
            or_zero(b.osl),
            concurrencies,
            req_rate,
            tokenizer(c),
            c.served_model_name.clone(),
            c.disaggregated.to_string(),
            total.to_string(),
            prefill.to_string(),
            decode.to_string(),
            b.random_range_ratio
                .map_or_else(|| "0.8".to_string(), python_float),
            b.num_prompts_mult
                .map_or_else(|| "10".to_string(), |n| n.to_string()),
            b.num_warmup_mult
                .map_or_else(|| "2".to_string(), |n| n.to_string()),
            b.custom_tokenizer.clone().unwrap_or_default(),
            b.use_chat_template.to_string(),
            b.dataset_name
                .clone()
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| "random".into()),
            b.dataset_path.clone().unwrap_or_default(),
            b.reuse_http_connections.to_string(),
        ]
    }
}
