//! The result gate: a benchmark that exits 0 must have measured something. When the machine
//! asks (`WatchRequest::Judge`), the result files the client wrote into the log directory
//! during its run are read off the loop and judged ([`judge`]): sa-bench's
//! `results_*.json` (srtctl's `benchmark_serving.py --save-result`) and AIPerf's
//! `profile_export_aiperf.json`. No completed request, no generated token, or more failed
//! requests than `benchmark.max_failed_requests` is `benchmark-invalid`, and so is a KV transfer
//! failure any process here printed while the client ran ([`KV_TRANSFER_FAILURES`], from the
//! failure catalogue) (upstream srt-slurm #429: every KV transfer failed and sa-bench reported
//! `Total generated tokens: 0` as a success; #423: a successful sweep after its client failed). The verdict goes to the machine
//! (`Event::Judged`) and into the status file and the metrics.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::{Answer, Effect, Input, Now, Task, Watcher};
use crate::plan::Plan;
use crate::runfiles::{BenchmarkNumbers, BenchmarkStatus, StatusFile};
use crate::supervisor::machine::{Event, WatchRequest};

/// The files a judge reads: at most this many, this deep below the log directory, this large.
const MAX_FILES: usize = 256;
const MAX_DEPTH: usize = 4;
const MAX_BYTES: u64 = 64 << 20;

/// The catalogue's signatures of a KV transfer that failed (`crate::engine::signatures`,
/// `crate::mooncake::signatures`): seen in any process's output while a benchmark runs, its
/// result does not stand.
pub const KV_TRANSFER_FAILURES: &[&str] = &[
    "sglang-kv-transfer-failed",
    "memory-registration",
    "mkey-exhausted",
    "qp-transition-failed",
];

/// The benchmark watcher: when each terminal process started, and its judged result.
#[derive(Default)]
pub struct Benchmark {
    started_ms: HashMap<usize, u64>,
    /// The first KV transfer failure seen while a benchmark ran: the process and the line.
    kv_failure: Option<String>,
    /// Benchmarks whose verdict is pending (started, not judged).
    running: usize,
    result: Option<BenchmarkStatus>,
}

impl Watcher for Benchmark {
    fn on(&mut self, plan: &Plan, input: &Input<'_>, now: Now<'_>) -> Vec<Effect> {
        match input {
            Input::Spawned { proc, .. } if judged(plan, *proc) => {
                self.started_ms.insert(*proc, now.wall_ms());
                self.running += 1;
                Vec::new()
            }
            Input::Answer(Answer::Found { proc, found, .. })
                if self.running > 0
                    && self.kv_failure.is_none()
                    && KV_TRANSFER_FAILURES.contains(&found.signature.id) =>
            {
                let unit = plan.processes.get(*proc).map_or("?", |p| p.name.as_str());
                self.kv_failure = Some(format!(
                    "a KV transfer failed while the benchmark ran ({} in {unit}'s output: {})",
                    found.signature.id, found.line
                ));
                Vec::new()
            }
            Input::Asked(WatchRequest::Judge { proc }) => {
                let Some((kind, max_failed)) = plan
                    .processes
                    .get(*proc)
                    .and_then(|p| p.terminal.clone())
                    .and_then(|t| Some((t.benchmark?, t.max_failed_requests)))
                else {
                    return Vec::new();
                };
                vec![Effect::Run {
                    key: None,
                    task: Task::Judge {
                        proc: *proc,
                        dir: plan.log_dir.clone(),
                        since_ms: self.started_ms.get(proc).copied().unwrap_or(0),
                        kind,
                        max_failed,
                    },
                }]
            }
            Input::Answer(Answer::Judged { proc, status }) => {
                self.running = self.running.saturating_sub(1);
                let mut status = status.clone();
                if let (true, Some(why)) = (status.valid, &self.kv_failure) {
                    status.valid = false;
                    status.said = why.clone();
                }
                self.result = Some(status.clone());
                let verdict = if status.valid {
                    Ok(status.said.clone())
                } else {
                    Err(status.said.clone())
                };
                vec![
                    Effect::StatusChanged,
                    Effect::Feed(Event::Judged {
                        proc: *proc,
                        verdict,
                    }),
                ]
            }
            _ => Vec::new(),
        }
    }

    fn status(&self, status: &mut StatusFile) {
        status.benchmark = self.result.clone();
    }
}

/// Whether process `proc` is a terminal process with a result gate (a benchmark client).
fn judged(plan: &Plan, proc: usize) -> bool {
    plan.processes
        .get(proc)
        .and_then(|p| p.terminal.as_ref())
        .is_some_and(|t| t.benchmark.is_some())
}

/// Read and judge what the client wrote under `dir` since `since_ms` (blocking: run off the
/// loop).
pub fn read_and_judge(dir: &Path, since_ms: u64, kind: &str, max_failed: u64) -> BenchmarkStatus {
    let files = result_files(dir, since_ms);
    let read: Vec<(String, String)> = files
        .iter()
        .filter_map(|p| {
            let rel = p.strip_prefix(dir).unwrap_or(p).display().to_string();
            let text = std::fs::read_to_string(p).ok()?;
            Some((rel, text))
        })
        .collect();
    judge(kind, &read, max_failed)
}

/// The result files below `dir` modified at or after `since_ms`, sorted: sa-bench's
/// `results_*.json` and AIPerf's `profile_export_aiperf.json`. Bounded in depth, count and
/// size; symbolic links are not followed.
fn result_files(dir: &Path, since_ms: u64) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten().take(4096) {
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            let path = e.path();
            if meta.is_dir() {
                if depth < MAX_DEPTH {
                    todo.push((path, depth + 1));
                }
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            // sa-bench's result, not the `.pytorch.json` copy it may write beside it.
            let wanted = (name.starts_with("results_")
                && name.ends_with(".json")
                && !name.ends_with(".pytorch.json"))
                || name == "profile_export_aiperf.json";
            let fresh = meta
                .modified()
                .ok()
                .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
                .is_some_and(|t| t.as_millis() as u64 + 1000 >= since_ms);
            if wanted && fresh && meta.is_file() && meta.len() <= MAX_BYTES {
                out.push(path);
            }
            if out.len() >= MAX_FILES {
                break;
            }
        }
    }
    out.sort();
    out
}

/// Judge the result files `(name, contents)` of a `kind` benchmark. A type whose runner always
/// writes them (sa-bench) must have; for another (a custom command) no file leaves the exit
/// status as the only verdict, said so.
pub fn judge(kind: &str, files: &[(String, String)], max_failed: u64) -> BenchmarkStatus {
    let mut numbers = Vec::new();
    let mut unreadable = Vec::new();
    for (name, text) in files {
        match numbers_of(name, text) {
            Ok(n) => numbers.push(n),
            Err(why) => unreadable.push(format!("{name}: {why}")),
        }
    }
    let status = |valid: bool, said: String, results: Vec<BenchmarkNumbers>| BenchmarkStatus {
        kind: kind.to_string(),
        valid,
        said,
        results,
    };
    if numbers.is_empty() {
        return match (kind == "sa-bench", unreadable.first()) {
            (_, Some(bad)) => status(false, format!("no readable result: {bad}"), numbers),
            (true, None) => status(
                false,
                "completed requests: none; sa-bench wrote no results_*.json under the log directory (its client failed before a concurrency finished)".into(),
                numbers,
            ),
            (false, None) => status(
                true,
                format!("{kind}: exit 0; it wrote no result file mcsup reads (sa-bench's results_*.json, AIPerf's profile_export_aiperf.json), so its exit status is the verdict"),
                numbers,
            ),
        };
    }
    for n in &numbers {
        let at = match n.concurrency {
            Some(c) => format!("{} (concurrency {c})", n.file),
            None => n.file.clone(),
        };
        let wrong = if n.cancelled {
            Some(format!(
                "the run was cancelled before it finished (was_cancelled in {at})"
            ))
        } else if n.completed == 0 {
            Some(format!("completed requests: 0 in {at}"))
        } else if n.output_tokens == 0 {
            Some(format!(
                "generated tokens: 0 in {at} ({} requests completed with empty answers)",
                n.completed
            ))
        } else if n.failed > max_failed {
            Some(format!(
                "failed requests: {} in {at}, more than benchmark.max_failed_requests ({max_failed})",
                n.failed
            ))
        } else {
            None
        };
        if let Some(w) = wrong {
            return status(false, w, numbers);
        }
    }
    let (completed, tokens, failed) = numbers.iter().fold((0, 0, 0), |(c, t, f), n| {
        (c + n.completed, t + n.output_tokens, f + n.failed)
    });
    let best = numbers
        .iter()
        .filter_map(|n| n.output_throughput)
        .fold(f64::NAN, f64::max);
    let mut said = format!(
        "{kind}: {completed} requests completed, {tokens} tokens generated, {failed} failed, over {} result file(s)",
        numbers.len()
    );
    if best.is_finite() {
        said.push_str(&format!("; best output throughput {best:.1} tok/s"));
    }
    status(true, said, numbers)
}

/// One file's numbers: sa-bench's result (its `completed`, `total_output_tokens`,
/// `errors`/`num_prompts`, throughputs and `p*_ms` percentiles) or AIPerf's export (its
/// `request_count`, `error_request_count`, `output_token_count`/`total_output_tokens`,
/// throughputs).
fn numbers_of(name: &str, text: &str) -> Result<BenchmarkNumbers, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let concurrency = concurrency_in(name).or_else(|| v.get("max_concurrency")?.as_u64());
    if name.ends_with("profile_export_aiperf.json") {
        return aiperf_numbers(name, &v, concurrency);
    }
    let num = |k: &str| v.get(k).and_then(serde_json::Value::as_f64);
    let completed = num("completed").ok_or("no `completed`")? as u64;
    let output_tokens = num("total_output_tokens").ok_or("no `total_output_tokens`")? as u64;
    let failed = match v.get("errors").and_then(|e| e.as_array()) {
        Some(errors) => errors
            .iter()
            .filter(|e| e.as_str().is_some_and(|s| !s.is_empty()))
            .count() as u64,
        None => num("num_prompts").map_or(0, |n| (n as u64).saturating_sub(completed)),
    };
    let latency_ms = v
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with('p') && k.ends_with("_ms"))
                .filter_map(|(k, x)| Some((k.clone(), x.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    Ok(BenchmarkNumbers {
        file: name.to_string(),
        concurrency,
        completed,
        failed,
        output_tokens,
        request_throughput: num("request_throughput"),
        output_throughput: num("output_throughput"),
        latency_ms,
        cancelled: false,
    })
}

/// AIPerf's `profile_export_aiperf.json`: each metric an object with its statistics (`avg`,
/// `p50`, `p99`, ...) under its tag.
fn aiperf_numbers(
    name: &str,
    v: &serde_json::Value,
    concurrency: Option<u64>,
) -> Result<BenchmarkNumbers, String> {
    // The metrics sit at the top level or under `records` depending on the release.
    let metric = |tag: &str| -> Option<&serde_json::Value> {
        v.get(tag)
            .or_else(|| v.get("records").and_then(|r| r.get(tag)))
    };
    let stat = |tag: &str, s: &str| metric(tag)?.get(s)?.as_f64();
    let count = |tag: &str| -> Option<u64> {
        let m = metric(tag)?;
        m.as_f64()
            .or_else(|| m.get("avg")?.as_f64())
            .map(|f| f.round() as u64)
    };
    // `request_count` counts the successes; `error_request_count` (absent: none) the failures.
    let completed = count("request_count").ok_or("no `request_count`")?;
    // AIPerf counts a stream the server cut with an error event as a success, without output
    // (measured, 0.13.0): fewer output lengths than successes are such requests.
    let cut = metric("output_sequence_length")
        .and_then(|m| m.get("count")?.as_u64())
        .map_or(0, |n| completed.saturating_sub(n));
    let failed = count("error_request_count").unwrap_or(0) + cut;
    let output_tokens = count("total_output_tokens")
        .or_else(|| count("output_sequence_length").map(|avg| avg * completed))
        .ok_or("no `total_output_tokens` nor `output_sequence_length`")?;
    let mut latency_ms = Vec::new();
    for (tag, short) in [
        ("time_to_first_token", "ttft"),
        ("inter_token_latency", "itl"),
        ("request_latency", "e2el"),
    ] {
        for p in ["p50", "p99"] {
            if let Some(x) = stat(tag, p) {
                latency_ms.push((format!("{p}_{short}_ms"), x));
            }
        }
    }
    Ok(BenchmarkNumbers {
        file: name.to_string(),
        concurrency,
        completed,
        failed,
        output_tokens,
        request_throughput: stat("request_throughput", "avg"),
        output_throughput: stat("output_token_throughput", "avg"),
        latency_ms,
        // `--failed-request-threshold` and SIGINT end a run early, with exit status 0.
        cancelled: v.get("was_cancelled").and_then(serde_json::Value::as_bool) == Some(true),
    })
}

/// The concurrency sa-bench writes into a result file's name (`results_concurrency_4_...`).
fn concurrency_in(name: &str) -> Option<u64> {
    let rest = name
        .rsplit('/')
        .next()?
        .strip_prefix("results_concurrency_")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// The wall clock now, in ms (for a test's `since`).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
