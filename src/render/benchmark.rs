//! What the job is for, in the views: the benchmark client's state and its judged result (one
//! line in `mcsup status` and `status --job`, an object in `status --job --json`, families in
//! `<node>.prom`). Pure.

use std::fmt::Write as _;

use crate::runfiles::{BenchmarkNumbers, BenchmarkStatus, StatusFile, UnitKind, UnitState};

/// `benchmark: sa-bench VALID: ...` once judged; before, the client's state. None on a node
/// without a client.
pub fn line(s: &StatusFile, now_ms: u64) -> Option<String> {
    if let Some(b) = &s.benchmark {
        return Some(judged(b));
    }
    let u = s.units.iter().find(|u| u.kind == UnitKind::Benchmark)?;
    let since = super::status::ago(now_ms, u.state_since_ts_ms);
    let exit = super::status::exit_text(u.last_exit.as_ref());
    Some(match u.state {
        UnitState::Waiting => format!(
            "benchmark: waiting for the endpoint ({})",
            u.detail.as_deref().unwrap_or("not servable yet")
        ),
        UnitState::Ready | UnitState::Starting | UnitState::Spawning => {
            format!("benchmark: running for {since}")
        }
        UnitState::Failed => {
            format!("benchmark: FAILED ({exit}, {since} ago): the job ends with its exit status")
        }
        UnitState::Exited if u.last_exit.as_ref().is_some_and(|e| e.code == 0) => {
            format!("benchmark: exited 0 {since} ago; its result files are being judged")
        }
        state => format!("benchmark: {state} ({exit})"),
    })
}

/// The verdict and the headline numbers of the best result file.
fn judged(b: &BenchmarkStatus) -> String {
    let mut out = format!(
        "benchmark: {} {}: {}",
        b.kind,
        if b.valid { "VALID" } else { "INVALID" },
        b.said
    );
    if let Some(n) = best(&b.results) {
        let _ = write!(out, " | {}", headline(n));
    }
    out
}

/// The result with the highest output throughput (the last when none says).
fn best(results: &[BenchmarkNumbers]) -> Option<&BenchmarkNumbers> {
    results.iter().max_by(|a, b| {
        let t = |n: &BenchmarkNumbers| n.output_throughput.unwrap_or(f64::MIN);
        t(a).total_cmp(&t(b))
    })
}

/// `concurrency 64: 12.1 req/s, 1540.3 tok/s, p99 ttft 812.0 ms`.
pub fn headline(n: &BenchmarkNumbers) -> String {
    let mut parts = Vec::new();
    if let Some(c) = n.concurrency {
        parts.push(format!("concurrency {c}"));
    }
    if let Some(r) = n.request_throughput {
        parts.push(format!("{r:.1} req/s"));
    }
    if let Some(t) = n.output_throughput {
        parts.push(format!("{t:.1} tok/s"));
    }
    for key in ["p50_ttft_ms", "p99_ttft_ms", "p99_itl_ms"] {
        if let Some((_, v)) = n.latency_ms.iter().find(|(k, _)| k == key) {
            let name = key.trim_end_matches("_ms").replacen('_', " ", 1);
            parts.push(format!("{name} {v:.1} ms"));
        }
    }
    parts.join(", ")
}

/// The benchmark in `status --job --json`: where it runs, its state and its verdict.
pub fn json(node: &str, s: &StatusFile) -> Option<serde_json::Value> {
    let u = s.units.iter().find(|u| u.kind == UnitKind::Benchmark);
    if u.is_none() && s.benchmark.is_none() {
        return None;
    }
    Some(serde_json::json!({
        "node": node,
        "process": u.map(|u| u.name.clone()),
        "state": u.map(|u| u.state),
        "exit_code": u.and_then(|u| u.last_exit.as_ref().map(|e| e.code)),
        "result": s.benchmark,
    }))
}

/// One Prometheus family: name, type, help, samples (labels, value).
pub type Family = (
    &'static str,
    &'static str,
    &'static str,
    Vec<(String, String)>,
);

/// The Prometheus families of a judged result: its verdict, and per result file the requests,
/// tokens, throughputs and latency percentiles.
pub fn families(s: &StatusFile, node: &str) -> Vec<Family> {
    let Some(b) = &s.benchmark else {
        return Vec::new();
    };
    let esc = super::status::prom_escape;
    let kind_owned = esc(&b.kind);
    let kind = kind_owned.as_str();
    let per_file = |f: &dyn Fn(&BenchmarkNumbers) -> Option<String>| {
        b.results
            .iter()
            .filter_map(|n| {
                let v = f(n)?;
                let c = n.concurrency.map(|c| c.to_string()).unwrap_or_default();
                Some((
                    format!(
                        "node=\"{node}\",type=\"{kind}\",file=\"{}\",concurrency=\"{c}\"",
                        esc(&n.file)
                    ),
                    v,
                ))
            })
            .collect::<Vec<_>>()
    };
    let latency: Vec<(String, String)> = b
        .results
        .iter()
        .flat_map(|n| {
            let c = n.concurrency.map(|c| c.to_string()).unwrap_or_default();
            n.latency_ms.iter().map(move |(k, v)| {
                (
                    format!(
                        "node=\"{node}\",type=\"{kind}\",file=\"{}\",concurrency=\"{c}\",stat=\"{}\"",
                        esc(&n.file),
                        esc(k.trim_end_matches("_ms"))
                    ),
                    format!("{v}"),
                )
            })
        })
        .collect();
    vec![
        (
            "mcsup_benchmark_valid",
            "gauge",
            "Whether the benchmark's result gate found that it measured something (1) or not (0: benchmark-invalid).",
            vec![(
                format!("node=\"{node}\",type=\"{kind}\""),
                u8::from(b.valid).to_string(),
            )],
        ),
        (
            "mcsup_benchmark_requests_completed",
            "gauge",
            "Requests the benchmark completed, per result file.",
            per_file(&|n| Some(n.completed.to_string())),
        ),
        (
            "mcsup_benchmark_requests_failed",
            "gauge",
            "Requests that failed, per result file.",
            per_file(&|n| Some(n.failed.to_string())),
        ),
        (
            "mcsup_benchmark_output_tokens",
            "gauge",
            "Tokens the endpoint generated, per result file.",
            per_file(&|n| Some(n.output_tokens.to_string())),
        ),
        (
            "mcsup_benchmark_request_throughput",
            "gauge",
            "Requests per second, per result file.",
            per_file(&|n| n.request_throughput.map(|v| format!("{v}"))),
        ),
        (
            "mcsup_benchmark_output_throughput",
            "gauge",
            "Output tokens per second, per result file.",
            per_file(&|n| n.output_throughput.map(|v| format!("{v}"))),
        ),
        (
            "mcsup_benchmark_latency_milliseconds",
            "gauge",
            "Latency statistics the result file reports (stat: p99_ttft, mean_itl, ...), in ms.",
            latency,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::status::status_tests::sample;
    use crate::runfiles::{StatusExit, StatusProcess};

    fn with_client(state: &str, exit: Option<i32>) -> StatusFile {
        let mut s = sample();
        let mut u: StatusProcess = s.units[0].clone();
        u.name = "benchmark".into();
        u.kind = UnitKind::Benchmark;
        u.state = state.into();
        u.state_since_ts_ms = 10_000;
        u.last_exit = exit.map(|code| StatusExit { code, signal: None });
        u.detail = None;
        s.units.push(u);
        s
    }

    fn result(valid: bool) -> BenchmarkStatus {
        BenchmarkStatus {
            kind: "sa-bench".into(),
            valid,
            said: if valid {
                "sa-bench: 80 requests completed".into()
            } else {
                "generated tokens: 0 in results_concurrency_8.json (concurrency 8)".into()
            },
            results: vec![
                BenchmarkNumbers {
                    file: "sa-bench_isl_8_osl_8/results_concurrency_4.json".into(),
                    concurrency: Some(4),
                    completed: 40,
                    failed: 0,
                    output_tokens: 4000,
                    request_throughput: Some(4.0),
                    output_throughput: Some(400.0),
                    latency_ms: vec![("p99_ttft_ms".into(), 30.5)],
                    cancelled: false,
                },
                BenchmarkNumbers {
                    file: "sa-bench_isl_8_osl_8/results_concurrency_8.json".into(),
                    concurrency: Some(8),
                    completed: 40,
                    failed: 1,
                    output_tokens: 4000,
                    request_throughput: Some(7.5),
                    output_throughput: Some(750.25),
                    latency_ms: vec![("p50_ttft_ms".into(), 20.0), ("p99_ttft_ms".into(), 55.0)],
                    cancelled: false,
                },
            ],
        }
    }

    #[test]
    fn the_line_says_the_clients_state_then_its_verdict_and_best_numbers() {
        assert_eq!(line(&sample(), 20_000), None);
        assert_eq!(
            line(&with_client("ready", None), 70_000).unwrap(),
            "benchmark: running for 1m0s"
        );
        assert!(line(&with_client("failed", Some(3)), 20_000)
            .unwrap()
            .starts_with("benchmark: FAILED (3,"));
        assert!(line(&with_client("exited", Some(0)), 20_000)
            .unwrap()
            .contains("being judged"));
        let mut s = with_client("exited", Some(0));
        s.benchmark = Some(result(true));
        assert_eq!(
            line(&s, 20_000).unwrap(),
            "benchmark: sa-bench VALID: sa-bench: 80 requests completed | concurrency 8, 7.5 req/s, 750.2 tok/s, p50 ttft 20.0 ms, p99 ttft 55.0 ms"
        );
        s.benchmark = Some(result(false));
        assert!(line(&s, 20_000)
            .unwrap()
            .starts_with("benchmark: sa-bench INVALID: generated tokens: 0"));
    }

    #[test]
    fn the_result_is_in_the_metrics_per_file() {
        let mut s = with_client("exited", Some(0));
        s.benchmark = Some(result(true));
        let text = crate::render::metrics_text(&s, None);
        for want in [
            "mcsup_benchmark_valid{node=\"n1\",type=\"sa-bench\"} 1",
            "mcsup_benchmark_requests_completed{node=\"n1\",type=\"sa-bench\",file=\"sa-bench_isl_8_osl_8/results_concurrency_8.json\",concurrency=\"8\"} 40",
            "mcsup_benchmark_requests_failed{node=\"n1\",type=\"sa-bench\",file=\"sa-bench_isl_8_osl_8/results_concurrency_8.json\",concurrency=\"8\"} 1",
            "mcsup_benchmark_output_throughput{node=\"n1\",type=\"sa-bench\",file=\"sa-bench_isl_8_osl_8/results_concurrency_4.json\",concurrency=\"4\"} 400",
            "mcsup_benchmark_latency_milliseconds{node=\"n1\",type=\"sa-bench\",file=\"sa-bench_isl_8_osl_8/results_concurrency_8.json\",concurrency=\"8\",stat=\"p99_ttft\"} 55",
            "# TYPE mcsup_benchmark_valid gauge",
        ] {
            assert!(text.contains(want), "{want}\n{text}");
        }
        // Each family once.
        assert_eq!(
            text.matches("# TYPE mcsup_benchmark_output_tokens").count(),
            1
        );
        assert!(
            !crate::render::metrics_text(&with_client("ready", None), None)
                .contains("mcsup_benchmark")
        );
    }
}
