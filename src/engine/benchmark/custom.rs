//! A command of the recipe's own (srtctl's `benchmarks/custom.py`): `bash -lc
//! <benchmark.command>`, verbatim (no templating), in `benchmark.container_image` when given,
//! with `benchmark.env` set last; the logical workers' endpoints reach it as `SRT_*`.

use super::settings::BenchmarkSettings;
use super::{BenchContext, BenchmarkKind};

/// `custom`.
#[derive(Debug)]
pub struct Custom;

impl BenchmarkKind for Custom {
    fn name(&self) -> &'static str {
        "custom"
    }

    fn title(&self) -> &'static str {
        "Custom"
    }

    fn script(&self) -> Option<&'static str> {
        None
    }

    fn validate(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        if b.command.as_deref().is_some_and(|c| !c.is_empty()) {
            Vec::new()
        } else {
            vec!["benchmark.command is required for benchmark.type=custom".into()]
        }
    }

    fn command(&self, b: &BenchmarkSettings, _c: &BenchContext<'_>) -> Vec<String> {
        vec![
            "bash".to_string(),
            "-lc".into(),
            b.command.clone().unwrap_or_default(),
        ]
    }

    fn environment(&self, b: &BenchmarkSettings) -> Vec<(String, String)> {
        b.env.clone()
    }

    fn image(&self, b: &BenchmarkSettings) -> Option<String> {
        b.container_image.clone().filter(|i| !i.is_empty())
    }
}
