//! The accuracy evaluations (srtctl's `benchmarks/{gsm8k,mmlu,gpqa,lm_eval,longbenchv2}.py`):
//! each a script with its defaults; GSM8K picks its harness by the engine (vLLM's vendored
//! `gsm8k_eval.py`, SGLang's `run_eval` for every other).

use super::settings::BenchmarkSettings;
use super::{endpoint, script_path, BenchContext, BenchmarkKind, PUBLIC_PORT, SCRIPTS_MOUNT};
use crate::engine::flags::python_float;

/// `gsm8k`.
#[derive(Debug)]
pub struct Gsm8k;
/// `mmlu`.
#[derive(Debug)]
pub struct Mmlu;
/// `gpqa`.
#[derive(Debug)]
pub struct Gpqa;
/// `lm-eval`.
#[derive(Debug)]
pub struct LmEval;
/// `longbenchv2`.
#[derive(Debug)]
pub struct LongBenchV2;

/// `str(x or default)`.
fn or(v: Option<i64>, default: i64) -> String {
    v.filter(|n| *n != 0).unwrap_or(default).to_string()
}

/// GSM8K's vLLM harness (srtctl compares the backend's type with `vllm`).
fn vllm_harness(c: &BenchContext<'_>) -> bool {
    c.engine.name() == "vllm"
}

impl BenchmarkKind for Gsm8k {
    fn name(&self) -> &'static str {
        "gsm8k"
    }

    fn title(&self) -> &'static str {
        "GSM8K"
    }

    fn script(&self) -> Option<&'static str> {
        Some("gsm8k/sglang-bench.sh")
    }

    fn validate(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        let mut errors = Vec::new();
        for (key, v) in [
            ("num_examples", b.num_examples),
            ("max_tokens", b.max_tokens),
            ("num_threads", b.num_threads),
            ("repeat", b.repeat),
        ] {
            if v.is_some_and(|n| n <= 0) {
                errors.push(format!("benchmark.{key} must be > 0"));
            }
        }
        if b.num_shots.is_some_and(|n| n < 0) {
            errors.push("benchmark.num_shots must be >= 0".into());
        }
        errors
    }

    fn command(&self, b: &BenchmarkSettings, c: &BenchContext<'_>) -> Vec<String> {
        let shots = b.num_shots.unwrap_or(5).to_string();
        if vllm_harness(c) {
            return vec![
                "bash".to_string(),
                format!("{SCRIPTS_MOUNT}/gsm8k/vllm-bench.sh"),
                "http://localhost".into(),
                PUBLIC_PORT.to_string(),
                c.served_model_name.clone(),
                or(b.num_examples, 1319),
                or(b.max_tokens, 256),
                shots,
                python_float(b.temperature.unwrap_or(0.0)),
                or(b.repeat, 1),
            ];
        }
        vec![
            "bash".to_string(),
            script_path(self),
            endpoint(),
            or(b.num_examples, 1319),
            or(b.max_tokens, 16384),
            or(b.num_threads, 512),
            shots,
            b.temperature.map(python_float).unwrap_or_default(),
            b.top_p.map(python_float).unwrap_or_default(),
            b.top_k.map(|k| k.to_string()).unwrap_or_default(),
        ]
    }
}

/// MMLU's and GPQA's shared shape: examples, max tokens, repeats, threads.
fn run_eval(k: &dyn BenchmarkKind, b: &BenchmarkSettings, defaults: [i64; 4]) -> Vec<String> {
    vec![
        "bash".to_string(),
        script_path(k),
        endpoint(),
        or(b.num_examples, defaults[0]),
        or(b.max_tokens, defaults[1]),
        or(b.repeat, defaults[2]),
        or(b.num_threads, defaults[3]),
    ]
}

impl BenchmarkKind for Mmlu {
    fn name(&self) -> &'static str {
        "mmlu"
    }

    fn title(&self) -> &'static str {
        "MMLU"
    }

    fn script(&self) -> Option<&'static str> {
        Some("mmlu/bench.sh")
    }

    fn validate(&self, _b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        Vec::new()
    }

    fn command(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        run_eval(self, b, [200, 2048, 8, 512])
    }
}

impl BenchmarkKind for Gpqa {
    fn name(&self) -> &'static str {
        "gpqa"
    }

    fn title(&self) -> &'static str {
        "GPQA"
    }

    fn script(&self) -> Option<&'static str> {
        Some("gpqa/bench.sh")
    }

    fn validate(&self, _b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        Vec::new()
    }

    fn command(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        run_eval(self, b, [198, 32768, 8, 128])
    }
}

impl BenchmarkKind for LmEval {
    fn name(&self) -> &'static str {
        "lm-eval"
    }

    fn title(&self) -> &'static str {
        "lm-eval"
    }

    fn script(&self) -> Option<&'static str> {
        Some("lm-eval/bench.sh")
    }

    fn validate(&self, _b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        Vec::new()
    }

    fn command(&self, _b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        vec![
            "bash".to_string(),
            script_path(self),
            endpoint(),
            "/infmax-workspace".into(),
        ]
    }
}

impl BenchmarkKind for LongBenchV2 {
    fn name(&self) -> &'static str {
        "longbenchv2"
    }

    fn title(&self) -> &'static str {
        "LongBench-v2"
    }

    fn script(&self) -> Option<&'static str> {
        Some("longbenchv2/bench.sh")
    }

    fn validate(&self, _b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        Vec::new()
    }

    fn command(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        vec![
            "bash".to_string(),
            script_path(self),
            endpoint(),
            or(b.max_context_length, 128000),
            or(b.num_threads, 16),
            or(b.max_tokens, 16384),
            b.num_examples
                .filter(|n| *n != 0)
                .map(|n| n.to_string())
                .unwrap_or_default(),
            b.categories
                .as_ref()
                .map(|c| c.join(","))
                .unwrap_or_default(),
        ]
    }
}
