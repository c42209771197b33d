//! Engine liveness by default: each engine's own signal, probed once the worker is ready, with a
//! period and a threshold that a start-up (readiness comes first) or a long prefill cannot trip.
//! srtctl has none (it reads log markers only); mcsup adds it to the workers it derives, says so
//! in the plan, and `mcsup.engine_liveness.enabled: false` turns it off. Pure.
//!
//! | engine | probe |
//! |---|---|
//! | Dynamo's workers (`dynamo.sglang`, `dynamo.vllm`, `dynamo.trtllm` (its Slurm step's leader rank), `dynamo.mocker`) | `GET /health` on the worker's system port (`DYN_SYSTEM_PORT`): the runtime answers it, and not at all when the process is frozen |
//! | SGLang's server | `GET /health_generate`: one token through the scheduler (its `/health` is answered by the HTTP process even with the scheduler hung) |
//! | vLLM's server | `GET /health` |
//!
//! A Dynamo worker's probe also reads its progress ([`progress`]): with requests in flight, the
//! response bytes its `generate` endpoint sent must grow within [`STALL`] (its runtime answers
//! `/health` while the engine behind it hangs; Dynamo's canary only runs while it is idle).

use std::time::Duration;

use super::stop::StopEngine;

/// The defaults: a probe every 10 s, 5 s each, 6 failures in a row before the worker is
/// stopped (about a minute of silence). SGLang's `/health_generate` waits up to its own
/// `SGLANG_HEALTH_CHECK_TIMEOUT` (20 s, sglang 0.5.23 `http_server.py`) for any answer of the
/// scheduler (a busy server counts as alive) before its 503: 25 s for it.
pub const PERIOD: Duration = Duration::from_secs(10);
pub const TIMEOUT: Duration = Duration::from_secs(5);
pub const GENERATE_TIMEOUT: Duration = Duration::from_secs(25);
pub const THRESHOLD: u32 = 6;
/// Requests in flight and no response byte for this long is a stall: longer than any prefill a
/// sane deployment runs in one step (a long-context batch takes seconds to tens of seconds).
pub const STALL: Duration = Duration::from_secs(120);

/// The in-flight gauge and the progress counter of a worker running `argv` whose system port
/// is `port`, where mcsup knows them (Dynamo's workers).
pub fn progress(
    argv: &[String],
    port: u16,
) -> Option<(super::stop::MetricSum, super::stop::MetricSum)> {
    match StopEngine::recognise(argv)? {
        StopEngine::Dynamo { .. } => Some((
            super::stop::MetricSum::of_worker(argv, port)?,
            super::stop::MetricSum::progress_of_dynamo_worker(port),
        )),
        _ => None,
    }
}

/// What makes the liveness answer follow the engine, before the recipe's env (which wins):
/// Dynamo's own canary health checks (`DYN_HEALTH_CHECK_ENABLED`, off by default outside its
/// Kubernetes operator; ai-dynamo-runtime 1.6.1 logs `health_check_enabled=true` with it), with
/// which an idle worker's engine gets a request every `canary_wait_time` (10 s) and its
/// `/health` turns 503 when it does not answer. Endpoints that register no health-check payload
/// (the mocker's) are not probed by it.
pub fn env_defaults(argv: &[String]) -> Vec<(&'static str, &'static str, &'static str)> {
    match StopEngine::recognise(argv) {
        Some(StopEngine::Dynamo { .. }) => vec![(
            "DYN_HEALTH_CHECK_ENABLED",
            "true",
            "mcsup: Dynamo's canary health checks, so /health (the engine liveness) follows the engine",
        )],
        _ => Vec::new(),
    }
}

/// The path and bound of the engine's liveness answer, given its readiness probe's path; none
/// for a program mcsup does not know as an engine.
pub fn probe_path(argv: &[String], readiness_path: &str) -> Option<(String, Duration)> {
    match StopEngine::recognise(argv)? {
        StopEngine::SglangServer => Some(("/health_generate".into(), GENERATE_TIMEOUT)),
        StopEngine::VllmServer | StopEngine::Dynamo { .. } => {
            Some((readiness_path.to_string(), TIMEOUT))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn dynamos_workers_get_its_canary_health_checks() {
        assert_eq!(
            env_defaults(&argv("python3 -m dynamo.sglang --model-path /m"))[0].0,
            "DYN_HEALTH_CHECK_ENABLED"
        );
        assert!(env_defaults(&argv("python3 -m sglang.launch_server")).is_empty());
    }

    #[test]
    fn each_engine_has_its_own_signal() {
        assert_eq!(
            probe_path(
                &argv("python3 -m sglang.launch_server --port 30000"),
                "/health"
            ),
            Some(("/health_generate".into(), GENERATE_TIMEOUT))
        );
        assert_eq!(
            probe_path(&argv("python3 -m dynamo.mocker --model-path /m"), "/health"),
            Some(("/health".into(), TIMEOUT))
        );
        assert_eq!(
            probe_path(
                &argv("python3 -m vllm.entrypoints.openai.api_server"),
                "/health"
            ),
            Some(("/health".into(), TIMEOUT))
        );
        assert_eq!(probe_path(&argv("/bin/my-server"), "/health"), None);
    }
}
