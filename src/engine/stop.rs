//! How each engine stops: what it does after its stop signal, how long that may take, and the
//! environment srtctl 2.0 sets so that it stops cleanly. Pure.
//!
//! | engine (recognised in the argv) | after SIGTERM | budget mcsup counts | source |
//! |---|---|---|---|
//! | SGLang server (`sglang.launch_server`, `sglang serve`) | drains in-flight requests with no timeout, polling every 5 s; then, if `SGLANG_PYSPY_DUMP_BEFORE_CRASH` or `SGLANG_CUDA_COREDUMP_BEFORE_CRASH` is on (both are by default), sleeps 5 s, dumps, and for the coredump waits `SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS` (60) | one 5 s poll, plus 5 s and the coredump wait when dumps are on | `python/sglang/srt/environ.py`, `managers/tokenizer_manager.py` (`dump_requests_before_crash`) |
//! | vLLM server (`vllm serve`, `vllm.entrypoints.openai.api_server`) | aborts in-flight requests, or drains them for up to `--shutdown-timeout N` s | N (0 when unset) | vllm-project/vllm #34730 |
//! | Dynamo worker (`dynamo.sglang`, `dynamo.vllm`, `dynamo.mocker`, `dynamo.trtllm`) | unregisters, waits `DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS` (5), drains; newer releases bound the whole stop by `DYN_WORKER_SHUTDOWN_TOTAL_TIMEOUT_SECS` (legacy `DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT`), asking for a supervisor grace of at least that + 5 s | the total when the recipe sets one, else the grace period; SGLang's dump wait on top for `dynamo.sglang` | ai-dynamo/dynamo `docs/fault-tolerance/graceful-shutdown.md`, `dynamo/common/utils/graceful_shutdown.py` (1.6.1) |
//!
//! srt-slurm 2.0 sets `SGLANG_CUDA_COREDUMP_BEFORE_CRASH=0` and `SGLANG_PYSPY_DUMP_BEFORE_CRASH=0`
//! for its SGLang workers (`src/srtctl/cli/mixins/worker_stage.py`): without them a stopping
//! SGLang worker waits 65 s for dumps and a 10 s grace SIGKILLs it. mcsup sets them as defaults on
//! the workers it derives; the recipe's environment overrides them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::{duration_ms, flag_value, show_secs as show};

/// What a supervisor's grace must leave beyond an engine's own stop budget (Dynamo's rule: "the
/// supervisor's grace ≥ total + 5 s").
pub const MARGIN: Duration = Duration::from_secs(5);

/// SGLang's `sigterm_watchdog` checks for remaining requests this often.
const SGLANG_DRAIN_POLL: Duration = Duration::from_secs(5);
/// SGLang sleeps this long before its crash dumps "to let GPU activity settle".
const SGLANG_DUMP_SETTLE: Duration = Duration::from_secs(5);
/// `SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS`'s default.
const SGLANG_COREDUMP_WAIT: f64 = 60.0;
/// Dynamo's `DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS` default.
const DYNAMO_GRACE_PERIOD: f64 = 5.0;

const SRTCTL_2_0: &str =
    "mcsup, as srt-slurm 2.0 (worker_stage.py): SGLang otherwise waits 65 s for crash dumps when stopped";

/// The two SGLang switches srtctl 2.0 turns off.
pub const SGLANG_DUMP_SWITCHES: [&str; 2] = [
    "SGLANG_CUDA_COREDUMP_BEFORE_CRASH",
    "SGLANG_PYSPY_DUMP_BEFORE_CRASH",
];

/// The engines whose stop mcsup knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopEngine {
    SglangServer,
    VllmServer,
    /// A Dynamo worker module; `sglang` when it runs SGLang in-process.
    Dynamo {
        sglang: bool,
    },
}

impl StopEngine {
    /// The engine a worker's argv runs (a profiler or `numactl` prefix is skipped over): the
    /// registry's engines say which of their modules (`python -m <module>`, or `<name> serve`,
    /// seen as `<name>.serve`) stop how.
    pub fn recognise(argv: &[String]) -> Option<Self> {
        argv.iter().enumerate().find_map(|(i, a)| {
            let next = argv.get(i + 1).map(String::as_str);
            let module = match (a.rsplit('/').next().unwrap_or(a), next) {
                ("-m", Some(m)) => m.to_string(),
                (program, Some("serve")) => format!("{program}.serve"),
                _ => return None,
            };
            super::ENGINES.iter().find_map(|k| k.stops_as(&module))
        })
    }

    fn runs_sglang(self) -> bool {
        matches!(self, Self::SglangServer | Self::Dynamo { sglang: true })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::SglangServer => "SGLang",
            Self::VllmServer => "vLLM",
            Self::Dynamo { sglang: true } => "Dynamo (SGLang)",
            Self::Dynamo { sglang: false } => "Dynamo",
        }
    }
}

/// The environment defaults a derived worker running `argv` gets for a clean stop, with their
/// source (empty for an engine that needs none).
pub fn env_defaults(argv: &[String]) -> Vec<(&'static str, &'static str, &'static str)> {
    match StopEngine::recognise(argv) {
        Some(e) if e.runs_sglang() => SGLANG_DUMP_SWITCHES
            .iter()
            .map(|k| (*k, "0", SRTCTL_2_0))
            .collect(),
        _ => Vec::new(),
    }
}

/// How long an engine may take to exit after its stop signal, and why; a worker's
/// `stop.budget` in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopBudget {
    /// [`StopEngine::name`]: `SGLang`, `vLLM`, `Dynamo`, `Dynamo (SGLang)`.
    pub engine: String,
    /// The sum of `parts`.
    #[serde(with = "duration_ms", rename = "total_ms")]
    pub total: Duration,
    /// Each part of the budget with where it comes from (`5 s: SGLang's drain poll`).
    pub parts: Vec<String>,
    /// What the budget does not bound (SGLang's drain of in-flight requests has no timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unbounded: Option<String>,
    /// The setting that shortens it (`SGLANG_CUDA_COREDUMP_BEFORE_CRASH=0`, `--shutdown-timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl StopBudget {
    /// The budget of a worker running `argv` with the variables `env` gives it.
    pub fn of(argv: &[String], env: &dyn Fn(&str) -> Option<String>) -> Option<Self> {
        let engine = StopEngine::recognise(argv)?;
        let mut b = StopBudget {
            engine: engine.name().to_string(),
            total: Duration::ZERO,
            parts: Vec::new(),
            unbounded: None,
            fix: None,
        };
        match engine {
            StopEngine::SglangServer => {
                b.add(SGLANG_DRAIN_POLL, "SGLang's drain poll".into());
                b.unbounded = Some(
                    "SGLang drains in-flight requests with no timeout; mcsup stops the frontends first"
                        .into(),
                );
            }
            StopEngine::VllmServer => match flag_value(argv, "shutdown-timeout") {
                Some(v) => match v.parse::<f64>() {
                    Ok(s) if s.is_finite() && s >= 0.0 => {
                        b.add(secs(s), format!("vLLM --shutdown-timeout {v}"));
                        b.fix = Some("--shutdown-timeout".into());
                    }
                    _ => {
                        b.unbounded = Some(format!(
                            "vLLM --shutdown-timeout {v} is not a number of seconds"
                        ))
                    }
                },
                None => {
                    b.unbounded = Some(
                        "vLLM aborts in-flight requests on SIGTERM (no --shutdown-timeout)".into(),
                    )
                }
            },
            StopEngine::Dynamo { .. } => {
                let set = |k: &str| env(k).filter(|v| !v.trim().is_empty());
                let total = set("DYN_WORKER_SHUTDOWN_TOTAL_TIMEOUT_SECS")
                    .map(|v| ("DYN_WORKER_SHUTDOWN_TOTAL_TIMEOUT_SECS", v))
                    .or_else(|| {
                        set("DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT")
                            .map(|v| ("DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT", v))
                    });
                match total {
                    Some((k, v)) => match v.trim().parse::<f64>() {
                        Ok(s) if s.is_finite() && s >= 0.0 => {
                            b.add(secs(s), format!("Dynamo's {k}={}", v.trim()));
                            b.fix = Some(k.into());
                        }
                        _ => b.unbounded = Some(format!("{k}={v} is not a number of seconds")),
                    },
                    None => {
                        let (s, from) = match set("DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS") {
                            Some(v) => (
                                v.trim()
                                    .parse::<f64>()
                                    .ok()
                                    .filter(|s| s.is_finite())
                                    .map_or(DYNAMO_GRACE_PERIOD, |s| s.max(0.0)),
                                format!("DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS={}", v.trim()),
                            ),
                            None => (
                                DYNAMO_GRACE_PERIOD,
                                "DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS default".into(),
                            ),
                        };
                        b.add(secs(s), format!("Dynamo's discovery grace ({from})"));
                        b.unbounded = Some(
                            "Dynamo drains in-flight requests after its grace; set DYN_WORKER_SHUTDOWN_TOTAL_TIMEOUT_SECS to bound the whole stop"
                                .into(),
                        );
                    }
                }
            }
        }
        if engine.runs_sglang() {
            b.sglang_dumps(env);
        }
        Some(b)
    }

    /// `SGLang may take 70 s to stop`.
    pub fn engine_line(&self) -> String {
        format!("{} may take {} to stop", self.engine, show(self.total))
    }

    fn add(&mut self, d: Duration, why: String) {
        self.total += d;
        self.parts.push(format!("{}: {why}", show(d)));
    }

    /// SGLang's crash dumps on stop, read as SGLang's `EnvBool`/`EnvFloat` read them (an
    /// unparsable value falls back to the default, on).
    fn sglang_dumps(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        let on: Vec<(&str, String)> = SGLANG_DUMP_SWITCHES
            .iter()
            .filter_map(|k| {
                let v = env(k);
                sglang_bool(v.as_deref(), true).then(|| (*k, v.unwrap_or_else(|| "unset".into())))
            })
            .collect();
        if on.is_empty() {
            return;
        }
        let said = |k: &str| {
            on.iter()
                .find(|(n, _)| *n == k)
                .map(|(n, v)| format!("{n}={v}"))
        };
        let switches: Vec<String> = on.iter().map(|(n, v)| format!("{n}={v}")).collect();
        self.add(
            SGLANG_DUMP_SETTLE,
            format!(
                "SGLang's pause before crash dumps ({})",
                switches.join(", ")
            ),
        );
        if let Some(c) = said("SGLANG_CUDA_COREDUMP_BEFORE_CRASH") {
            let wait = env("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS")
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite())
                .unwrap_or(SGLANG_COREDUMP_WAIT);
            if wait > 0.0 {
                self.add(
                    secs(wait),
                    format!("SGLang's CUDA coredump wait ({c}, SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS)"),
                );
            }
        }
        self.fix = Some(
            on.iter()
                .map(|(n, _)| format!("{n}=0"))
                .collect::<Vec<_>>()
                .join(" and "),
        );
    }
}

/// Some series of a Prometheus page, summed: where an engine says how many requests it is
/// serving (its in-flight gauges, [`MetricSum::of_worker`]: read during a drain, before the
/// process's stop signal, since some engines stop answering `/metrics` once signalled), or how
/// many it has served (a decode worker's request counter, [`MetricSum::served_by_dynamo_worker`]:
/// read around the servable probe's completion).
///
/// | engine | gauges | where |
/// |---|---|---|
/// | Dynamo worker | `dynamo_component_inflight_requests` | `DYN_SYSTEM_PORT` |
/// | Dynamo frontend | `dynamo_frontend_inflight_requests` | its HTTP port |
/// | vLLM server | `vllm:num_requests_running`, `vllm:num_requests_waiting` | its port |
/// | SGLang server (with `--enable-metrics`) | `sglang:num_running_reqs`, `sglang:num_queue_reqs` | its port |
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricSum {
    /// `http://127.0.0.1:<port>/metrics`.
    pub url: String,
    /// The gauges whose values are added up.
    pub metrics: Vec<String>,
    /// Only the series with this label (`name="value"`, exactly as exposed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl MetricSum {
    /// The gauge of a worker running `argv` whose server (or Dynamo system server) listens on
    /// `port`; `None` for an engine mcsup does not know or one that publishes no metrics.
    pub fn of_worker(argv: &[String], port: u16) -> Option<Self> {
        let metrics: &[&str] = match StopEngine::recognise(argv)? {
            StopEngine::Dynamo { .. } => &["dynamo_component_inflight_requests"],
            StopEngine::VllmServer => &["vllm:num_requests_running", "vllm:num_requests_waiting"],
            StopEngine::SglangServer => {
                if !argv.iter().any(|a| a == "--enable-metrics") {
                    return None;
                }
                &["sglang:num_running_reqs", "sglang:num_queue_reqs"]
            }
        };
        Some(Self::at(port, metrics))
    }

    /// A Dynamo frontend's gauge on its HTTP port.
    pub fn of_dynamo_frontend(port: u16) -> Self {
        Self::at(port, &["dynamo_frontend_inflight_requests"])
    }

    /// A Dynamo worker's count of the requests its `generate` endpoint was given
    /// (`dynamo_component_requests_total`; ai-dynamo 1.6.1, on its system port, at `host`).
    pub fn served_by_dynamo_worker(host: &str, port: u16) -> Self {
        MetricSum {
            url: format!("http://{host}:{port}/metrics"),
            metrics: vec!["dynamo_component_requests_total".into()],
            label: Some("dynamo_endpoint=\"generate\"".into()),
        }
    }

    /// A Dynamo worker's progress: the response bytes its `generate` endpoint has sent
    /// (`dynamo_component_response_bytes_total`; ai-dynamo 1.6.1, on its system port here).
    pub fn progress_of_dynamo_worker(port: u16) -> Self {
        MetricSum {
            label: Some("dynamo_endpoint=\"generate\"".into()),
            ..Self::at(port, &["dynamo_component_response_bytes_total"])
        }
    }

    fn at(port: u16, metrics: &[&str]) -> Self {
        MetricSum {
            url: format!("http://127.0.0.1:{port}/metrics"),
            metrics: metrics.iter().map(|m| m.to_string()).collect(),
            label: None,
        }
    }

    /// The sum of the gauges in a Prometheus text exposition; `Err` when none of them is
    /// there (the engine has not published it yet, or this is not its metrics page).
    pub fn read(&self, text: &str) -> Result<u64, String> {
        let mut sum = 0.0f64;
        let mut seen = false;
        for line in text.lines() {
            let line = line.trim_start();
            if line.starts_with('#') {
                continue;
            }
            let name_end = line.find(['{', ' ', '\t']).unwrap_or(line.len());
            if !self.metrics.iter().any(|m| m == &line[..name_end]) {
                continue;
            }
            // The value follows the labels (which may hold spaces inside quotes).
            let (labels, rest) = match line[name_end..].strip_prefix('{') {
                Some(labels) => match labels.rfind('}') {
                    Some(close) => (&labels[..close], &labels[close + 1..]),
                    None => continue,
                },
                None => ("", &line[name_end..]),
            };
            if let Some(want) = &self.label {
                if !labels.split(',').any(|l| l.trim() == want) {
                    continue;
                }
            }
            let Some(value) = rest.split_whitespace().next() else {
                continue;
            };
            match value.parse::<f64>() {
                Ok(v) if v.is_finite() => {
                    sum += v.max(0.0);
                    seen = true;
                }
                _ => {
                    return Err(format!(
                        "{}: value {value:?} is not a number",
                        &line[..name_end]
                    ))
                }
            }
        }
        if !seen {
            return Err(format!(
                "{} not published at {}",
                self.metrics.join(" or "),
                self.url
            ));
        }
        Ok(sum.round() as u64)
    }
}

/// SGLang's `EnvBool`: `true/1/yes/y` and `false/0/no/n`, any case; unset or anything else is
/// the default.
fn sglang_bool(v: Option<&str>, default: bool) -> bool {
    match v.map(str::to_ascii_lowercase).as_deref() {
        Some("true" | "1" | "yes" | "y") => true,
        Some("false" | "0" | "no" | "n") => false,
        _ => default,
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn budget(cmd: &str, env: &[(&str, &str)]) -> StopBudget {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        StopBudget::of(&argv(cmd), &|k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
        .unwrap()
    }

    #[test]
    fn engines_are_recognised_behind_prefixes() {
        let r = |s: &str| StopEngine::recognise(&argv(s));
        assert_eq!(
            r("python3 -m sglang.launch_server --port 1"),
            Some(StopEngine::SglangServer)
        );
        assert_eq!(
            r("nsys profile -o /x python3 -m dynamo.sglang --model-path m"),
            Some(StopEngine::Dynamo { sglang: true })
        );
        assert_eq!(
            r("/usr/bin/vllm serve m --port 8000"),
            Some(StopEngine::VllmServer)
        );
        assert_eq!(
            r("numactl -m 0,1 python3 -m dynamo.vllm"),
            Some(StopEngine::Dynamo { sglang: false })
        );
        assert_eq!(r("python3 -m dynamo.frontend"), None);
        assert_eq!(r("sleep 100"), None);
    }

    #[test]
    fn sglang_with_srtctls_switches_off_needs_one_drain_poll() {
        let b = budget(
            "python3 -m sglang.launch_server",
            &[
                ("SGLANG_CUDA_COREDUMP_BEFORE_CRASH", "0"),
                ("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "False"),
            ],
        );
        assert_eq!(b.total, Duration::from_secs(5));
        assert!(b.unbounded.unwrap().contains("no timeout"));
    }

    #[test]
    fn sglang_defaults_wait_for_dumps() {
        let b = budget("python3 -m sglang.launch_server", &[]);
        assert_eq!(b.total, Duration::from_secs(70), "{b:?}");
        assert_eq!(
            b.fix.as_deref(),
            Some("SGLANG_CUDA_COREDUMP_BEFORE_CRASH=0 and SGLANG_PYSPY_DUMP_BEFORE_CRASH=0")
        );
        // py-spy only: the settle pause, no coredump wait; an unparsable value is SGLang's default.
        let b = budget(
            "python3 -m sglang.launch_server",
            &[
                ("SGLANG_CUDA_COREDUMP_BEFORE_CRASH", "no"),
                ("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "maybe"),
            ],
        );
        assert_eq!(b.total, Duration::from_secs(10));
        let b = budget(
            "python3 -m sglang.launch_server",
            &[
                ("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "0"),
                ("SGLANG_CUDA_COREDUMP_BEFORE_CRASH_WAIT_SECS", "12.5"),
            ],
        );
        assert_eq!(b.total, Duration::from_millis(22_500));
        assert!(
            b.parts[2].starts_with("12.5 s: SGLang's CUDA coredump wait"),
            "{:?}",
            b.parts
        );
    }

    #[test]
    fn vllm_drains_for_its_shutdown_timeout() {
        assert_eq!(
            budget("vllm serve m --shutdown-timeout 30", &[]).total,
            Duration::from_secs(30)
        );
        assert_eq!(
            budget("vllm serve m --shutdown-timeout=7", &[]).total,
            Duration::from_secs(7)
        );
        let b = budget("vllm serve m", &[]);
        assert_eq!(b.total, Duration::ZERO);
        assert!(b.unbounded.unwrap().contains("aborts in-flight"));
    }

    #[test]
    fn dynamo_reads_the_canonical_total_then_the_legacy_one_then_its_grace() {
        let d = "python3 -m dynamo.vllm";
        let b = budget(
            d,
            &[
                ("DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT", "100"),
                ("DYN_WORKER_SHUTDOWN_TOTAL_TIMEOUT_SECS", "30"),
            ],
        );
        assert_eq!(b.total, Duration::from_secs(30));
        let b = budget(
            d,
            &[
                ("DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT", " 30 "),
                ("DYN_WORKER_SHUTDOWN_TOTAL_TIMEOUT_SECS", " "),
            ],
        );
        assert_eq!(b.total, Duration::from_secs(30));
        assert_eq!(
            b.fix.as_deref(),
            Some("DYN_WORKER_GRACEFUL_SHUTDOWN_TIMEOUT")
        );
        assert_eq!(budget(d, &[]).total, Duration::from_secs(5));
        assert_eq!(
            budget(d, &[("DYN_GRACEFUL_SHUTDOWN_GRACE_PERIOD_SECS", "0")]).total,
            Duration::ZERO
        );
        // dynamo.sglang adds SGLang's dumps unless they are off.
        let b = budget(
            "python3 -m dynamo.sglang",
            &[("DYN_WORKER_SHUTDOWN_TOTAL_TIMEOUT_SECS", "20")],
        );
        assert_eq!(b.total, Duration::from_secs(85));
        let off = [
            ("SGLANG_CUDA_COREDUMP_BEFORE_CRASH", "0"),
            ("SGLANG_PYSPY_DUMP_BEFORE_CRASH", "0"),
        ];
        assert_eq!(
            budget("python3 -m dynamo.sglang", &off).total,
            Duration::from_secs(5)
        );
    }

    #[test]
    fn only_sglang_workers_get_the_dump_switches() {
        assert_eq!(
            env_defaults(&argv("python3 -m sglang.launch_server")).len(),
            2
        );
        assert_eq!(env_defaults(&argv("python3 -m dynamo.sglang")).len(), 2);
        assert!(env_defaults(&argv("python3 -m dynamo.vllm")).is_empty());
        assert!(env_defaults(&argv("my-server")).is_empty());
    }

    #[test]
    fn inflight_gauges_per_engine() {
        let g = |cmd: &str| MetricSum::of_worker(&argv(cmd), 7500).map(|g| g.metrics);
        assert_eq!(
            g("python3 -m dynamo.mocker --model-path m"),
            Some(vec!["dynamo_component_inflight_requests".to_string()])
        );
        assert_eq!(g("vllm serve m").unwrap().len(), 2);
        // SGLang publishes metrics only when asked to.
        assert_eq!(g("python3 -m sglang.launch_server --port 1"), None);
        assert_eq!(
            g("python3 -m sglang.launch_server --enable-metrics").unwrap()[0],
            "sglang:num_running_reqs"
        );
        assert_eq!(g("my-server"), None);
        assert_eq!(
            MetricSum::of_dynamo_frontend(8000).url,
            "http://127.0.0.1:8000/metrics"
        );
    }

    #[test]
    fn inflight_gauges_are_summed_over_series_and_names() {
        let g = MetricSum::of_worker(&argv("vllm serve m"), 1).unwrap();
        let page = "# HELP vllm:num_requests_running Number of requests\n\
            # TYPE vllm:num_requests_running gauge\n\
            vllm:num_requests_running{engine=\"0\",model_name=\"a b}\"} 3.0\n\
            vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 2\n\
            vllm:num_requests_running_total 99\n\
            vllm:num_requests_waiting 1 1700000000000\n";
        assert_eq!(g.read(page), Ok(6));
        let err = g.read("other_metric 1\n").unwrap_err();
        assert!(
            err.contains("not published at http://127.0.0.1:1/metrics"),
            "{err}"
        );
        assert!(g.read("vllm:num_requests_waiting NaN\n").is_err());
        let d = MetricSum::of_dynamo_frontend(1);
        assert_eq!(
            d.read("dynamo_frontend_inflight_requests{model=\"x\"} 0\n"),
            Ok(0)
        );
    }

    #[test]
    fn a_decode_workers_served_requests_are_its_generate_endpoints() {
        // ai-dynamo 1.6.1's mocker decode worker after one completion (its system port's page).
        let page = "dynamo_component_requests_total{dynamo_component=\"backend\",dynamo_endpoint=\"generate\",dynamo_namespace=\"dynamo\",worker_id=\"694d\"} 1\n\
            dynamo_component_requests_total{dynamo_component=\"backend\",dynamo_endpoint=\"worker_kv_query_source_4b\",dynamo_namespace=\"dynamo\",worker_id=\"694d\"} 7\n\
            dynamo_component_inflight_requests{dynamo_component=\"backend\",dynamo_endpoint=\"generate\"} 0\n";
        let c = MetricSum::served_by_dynamo_worker("10.0.0.2", 7501);
        assert_eq!(c.url, "http://10.0.0.2:7501/metrics");
        assert_eq!(c.read(page), Ok(1));
        // Before its first request the series may not exist yet: an error, not a zero.
        assert!(c
            .read("dynamo_component_requests_total{dynamo_endpoint=\"other\"} 3\n")
            .is_err());
    }
}
