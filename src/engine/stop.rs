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
    /// The engine a worker's argv runs (a profiler or `numactl` prefix is skipped over).
    pub fn recognise(argv: &[String]) -> Option<Self> {
        argv.iter().enumerate().find_map(|(i, a)| {
            let next = argv.get(i + 1).map(String::as_str);
            match (a.rsplit('/').next().unwrap_or(a), next) {
                ("-m", Some(m)) => Self::module(m),
                ("sglang", Some("serve")) => Some(Self::SglangServer),
                ("vllm", Some("serve")) => Some(Self::VllmServer),
                _ => None,
            }
        })
    }

    fn module(m: &str) -> Option<Self> {
        Some(match m {
            "sglang.launch_server" => Self::SglangServer,
            "vllm.entrypoints.openai.api_server" => Self::VllmServer,
            "dynamo.sglang" => Self::Dynamo { sglang: true },
            "dynamo.vllm" | "dynamo.mocker" | "dynamo.trtllm" => Self::Dynamo { sglang: false },
            _ => return None,
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
}
