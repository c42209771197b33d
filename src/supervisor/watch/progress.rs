//! Engine liveness with progress: the stall watchdog's second signal.
//!
//! A Dynamo worker's health answer comes from its runtime, which can keep answering while the
//! engine behind it no longer advances (a hung collective, a deadlocked scheduler): Dynamo's own
//! canary health check only runs while the worker is idle. So an attempt of an
//! [`EngineAliveProbe`] reads the health answer and then the worker's metrics page: with requests
//! in flight, its progress counter (the response bytes it has sent) must have grown within the
//! probe's `stall`; flat for longer, every attempt fails, and the liveness threshold then has the
//! worker's stacks dumped and its restart policy decide, as for any failed liveness. An idle
//! worker, or one whose metrics page does not answer, is judged by its health answer alone.
//!
//! The watcher keeps, per process, the counter's last value and when it last changed (or the
//! worker was last idle); a new incarnation starts afresh.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{probe_done, Answer, Effect, Input, Now, Task, Watcher};
use crate::plan::{EngineAliveProbe, Plan, ProbeSpec};
use crate::supervisor::probes;

/// The progress watcher.
#[derive(Default)]
pub struct Progress {
    /// Per process: its counter's last value, when it last moved (or the worker was idle).
    last: HashMap<usize, (u64, Instant)>,
    /// The probe of each attempt in flight (its stall bound and what to name).
    asked: HashMap<u64, EngineAliveProbe>,
}

impl Watcher for Progress {
    fn on(&mut self, _plan: &Plan, input: &Input<'_>, now: Now<'_>) -> Vec<Effect> {
        match input {
            Input::Spawned { proc, .. } => {
                self.last.remove(proc);
                Vec::new()
            }
            Input::Probe {
                attempt,
                proc,
                probe: ProbeSpec::EngineAlive(p),
                timeout,
            } => match proc {
                Some(proc) => {
                    self.asked.insert(*attempt, p.clone());
                    vec![Effect::Run {
                        key: None,
                        task: Task::EngineAlive {
                            attempt: *attempt,
                            proc: *proc,
                            probe: p.clone(),
                            timeout: *timeout,
                        },
                    }]
                }
                None => vec![probe_done(
                    *attempt,
                    Err("an engine's liveness is not a gate".into()),
                )],
            },
            Input::Answer(Answer::EngineAlive {
                attempt,
                proc,
                result,
            }) => {
                let Some(probe) = self.asked.remove(attempt) else {
                    return Vec::new();
                };
                let verdict = match result {
                    Err(e) => Err(e.clone()),
                    Ok(None) => Ok(()),
                    Ok(Some((inflight, progress))) => {
                        self.judge(*proc, *inflight, *progress, &probe, now.at)
                    }
                };
                vec![probe_done(*attempt, verdict)]
            }
            _ => Vec::new(),
        }
    }
}

impl Progress {
    /// One reading of process `proc`: a stall when requests are in flight and the counter has
    /// not moved for the probe's `stall`.
    fn judge(
        &mut self,
        proc: usize,
        inflight: u64,
        progress: u64,
        probe: &EngineAliveProbe,
        at: Instant,
    ) -> Result<(), String> {
        let since = match self.last.get(&proc) {
            Some((last, since)) if *last == progress && inflight > 0 => *since,
            _ => at,
        };
        self.last.insert(proc, (progress, since));
        let flat = at.saturating_duration_since(since);
        if flat >= probe.stall {
            return Err(stalled(inflight, flat, probe));
        }
        Ok(())
    }
}

/// What a stall is said as.
fn stalled(inflight: u64, flat: Duration, probe: &EngineAliveProbe) -> String {
    format!(
        "{inflight} request(s) in flight and {} has not grown for {:.0} s (its stall bound is {} s; {})",
        probe.progress.metrics.join("+"),
        flat.as_secs_f64(),
        probe.stall.as_secs(),
        probe.progress.url
    )
}

/// One attempt: the health answer (200), then the metrics page (`None` when it does not
/// answer or does not publish both series).
pub async fn attempt(p: EngineAliveProbe, timeout: Duration) -> Result<Option<(u64, u64)>, String> {
    let (host, port, path) = (p.host.clone(), p.port, p.path.clone());
    probes::http(host, port, path, 200, None, timeout).await?;
    // The page the drain reads its gauge from, read the same way.
    let Ok(page) = probes::metrics_page(p.progress.url.clone(), timeout).await else {
        return Ok(None);
    };
    Ok(p.inflight.read(&page).ok().zip(p.progress.read(&page).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stop::MetricSum;

    fn probe(stall: u64) -> EngineAliveProbe {
        EngineAliveProbe {
            host: "127.0.0.1".into(),
            port: 7501,
            path: "/health".into(),
            inflight: MetricSum::of_worker(
                &["python3".into(), "-m".into(), "dynamo.sglang".into()],
                7501,
            )
            .unwrap(),
            progress: MetricSum::progress_of_dynamo_worker(7501),
            stall: Duration::from_secs(stall),
        }
    }

    #[test]
    fn in_flight_and_flat_for_the_stall_bound_is_a_stall() {
        let p = probe(30);
        let mut w = Progress::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Idle and flat: fine however long.
        assert!(w.judge(0, 0, 100, &p, at(0)).is_ok());
        assert!(w.judge(0, 0, 100, &p, at(100)).is_ok());
        // In flight, growing: fine.
        assert!(w.judge(0, 2, 150, &p, at(110)).is_ok());
        assert!(w.judge(0, 2, 150, &p, at(130)).is_ok());
        // In flight, flat since 110 s: a stall at 140 s, said with the numbers.
        let why = w.judge(0, 2, 150, &p, at(140)).unwrap_err();
        assert_eq!(
            why,
            "2 request(s) in flight and dynamo_component_response_bytes_total has not grown for 30 s (its stall bound is 30 s; http://127.0.0.1:7501/metrics)"
        );
        // It grows again: fine; another process is judged on its own.
        assert!(w.judge(0, 2, 151, &p, at(150)).is_ok());
        assert!(w.judge(1, 5, 7, &p, at(150)).is_ok());
        // A new incarnation starts afresh.
        w.last.remove(&0);
        assert!(w.judge(0, 2, 151, &p, at(1000)).is_ok());
    }
}
