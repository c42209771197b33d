//! The job's servable moment and what its frontend sees afterwards.
//!
//! A frontend whose readiness is a servable probe (the job's public endpoint: nginx, or the only
//! frontend) makes the job servable when it becomes ready: the frontend listed every expected
//! worker and a one-token completion through it answered. From then on the frontend's health
//! answer is read every `frontend_watch` (the plan's periods, 2 s by default): a worker it no
//! longer lists is an event
//! (`workers-lost`), not a teardown, and so is its return (`workers-back`); the status file
//! carries the current count. A servable attempt during which a process here printed a KV
//! transfer failure (the failure catalogue's signatures) fails, whatever its completion said.
//! The watcher ([`Servable`]) and the pure parts ([`judge`],
//! [`describe`]) apart from the reads ([`watch`], [`attempt`]).

use std::time::Duration;

pub use crate::engine::frontend::describe;
use crate::engine::frontend::{Expected, Seen};
use crate::plan::{Plan, ProbeSpec, ServableProbe};
use crate::runfiles::{ServableState, ServableStatus, StatusFile};

use super::benchmark::KV_TRANSFER_FAILURES;
use super::{probe_done, Answer, Effect, Input, Now, Task, TaskKey, Watcher};
use crate::supervisor::machine::{RecordKind, WatchRequest};
use crate::supervisor::probes;

/// The servable watcher: the job's endpoint once servable, and what its frontend lists.
#[derive(Default)]
pub struct Servable {
    /// The job's endpoint once servable.
    servable: Option<ServableStatus>,
    /// What the last servable attempt saw (for the `servable` record).
    last_seen: Option<Seen>,
    /// Whether the frontend's reads go on (not once the teardown began).
    watching: bool,
    /// A servable attempt runs: a KV transfer failure printed meanwhile fails it.
    probing: bool,
    /// The first KV transfer failure printed here during the running attempt.
    kv_failure: Option<String>,
}

impl Watcher for Servable {
    fn on(&mut self, plan: &Plan, input: &Input<'_>, now: Now<'_>) -> Vec<Effect> {
        match input {
            Input::Probe {
                attempt,
                probe: ProbeSpec::Servable(p),
                timeout,
                ..
            } => {
                self.probing = true;
                self.kv_failure = None;
                vec![Effect::Run {
                    key: None,
                    task: Task::ServableProbe {
                        attempt: *attempt,
                        probe: p.clone(),
                        timeout: *timeout,
                    },
                }]
            }
            Input::Answer(Answer::Found { proc, found, .. })
                if self.probing
                    && self.kv_failure.is_none()
                    && KV_TRANSFER_FAILURES.contains(&found.signature.id) =>
            {
                let unit = plan.processes.get(*proc).map_or("?", |p| p.name.as_str());
                self.kv_failure = Some(format!(
                    "the completion generated, but a KV transfer failed meanwhile ({} in {unit}'s \
                     output: {})",
                    found.signature.id, found.line
                ));
                Vec::new()
            }
            Input::Answer(Answer::Servable { attempt, result }) => {
                self.probing = false;
                let result = match (result, self.kv_failure.take()) {
                    (Ok(_), Some(why)) => Err(why),
                    (r, _) => r.clone(),
                };
                if let Ok(seen) = result {
                    self.last_seen = Some(seen);
                }
                vec![probe_done(*attempt, result.map(|_| ()))]
            }
            Input::Asked(WatchRequest::Servable { proc }) => self.servable(plan, *proc, now),
            Input::Answer(Answer::Seen(read)) => self.seen(read, now),
            Input::Stopping if self.watching => {
                self.watching = false;
                vec![Effect::Stop(TaskKey::FrontendWatch)]
            }
            _ => Vec::new(),
        }
    }

    fn status(&self, status: &mut StatusFile) {
        status.servable = self.servable.clone();
    }
}

impl Servable {
    /// Process `proc`, the servable frontend, became ready: the job is servable. Said once per
    /// readiness; what the frontend sees is read from now on.
    fn servable(&mut self, plan: &Plan, proc: usize, now: Now<'_>) -> Vec<Effect> {
        let Some(unit) = plan.processes.get(proc) else {
            return Vec::new();
        };
        let Some(probe) = unit.servable_probe().cloned() else {
            return Vec::new();
        };
        let seen = self.last_seen.unwrap_or(Seen {
            prefill: probe.expected.prefill,
            decode: probe.expected.decode,
        });
        let ts = now.wall_ms();
        let first = self.servable.as_ref().map_or(ts, |s| s.servable_ts_ms);
        let detail = format!(
            "{}: {}, a 1-token completion generated{}; {:.1} s after mcsup started",
            probe.url,
            describe(&probe.expected, &seen),
            if probe.decode_served.is_empty() {
                ""
            } else {
                " and a decode worker served it"
            },
            now.clock.since_start_ms(now.at) / 1000.0
        );
        self.servable = Some(ServableStatus {
            url: probe.url.clone(),
            frontend: unit.name.clone(),
            state: ServableState::Servable,
            servable_ts_ms: first,
            since_ts_ms: ts,
            expected: probe.expected,
            seen,
            error: None,
        });
        self.watching = true;
        vec![
            Effect::note(&unit.name, RecordKind::Servable, detail),
            Effect::Run {
                key: Some(TaskKey::FrontendWatch),
                task: Task::FrontendWatch {
                    probe,
                    every: plan.periods.frontend_watch,
                },
            },
        ]
    }

    /// A later health read: a change of state or count is an event and a new status.
    fn seen(&mut self, read: &Result<Seen, String>, now: Now<'_>) -> Vec<Effect> {
        if !self.watching {
            return Vec::new();
        }
        let Some(cur) = self.servable.clone() else {
            return Vec::new();
        };
        let state = judge(&cur.expected, read);
        let seen = read.as_ref().copied().unwrap_or(Seen {
            prefill: 0,
            decode: 0,
        });
        if state == cur.state && seen == cur.seen {
            return Vec::new();
        }
        // An event when the endpoint loses or regains workers; more than expected (a restarted
        // worker listed before its old registration expires) only updates the status.
        let kind = match (cur.state, state) {
            (ServableState::Servable, ServableState::Servable) => None,
            (_, ServableState::Servable) => Some(RecordKind::WorkersBack),
            _ => Some(RecordKind::WorkersLost),
        };
        let frontend = cur.frontend.clone();
        let detail = match read {
            Ok(_) => format!("{}: {}", cur.url, describe(&cur.expected, &seen)),
            Err(e) => format!("{}: the frontend does not answer: {e}", cur.url),
        };
        self.servable = Some(ServableStatus {
            state,
            seen,
            since_ts_ms: now.wall_ms(),
            error: read.as_ref().err().cloned(),
            ..cur
        });
        let mut out: Vec<Effect> = kind
            .map(|kind| Effect::note(frontend, kind, detail))
            .into_iter()
            .collect();
        // Not a machine change: the status is written now.
        out.push(Effect::StatusNow);
        out
    }
}

/// One attempt of the servable probe.
pub async fn attempt(p: ServableProbe, timeout: Duration) -> Result<Seen, String> {
    probes::servable(p, timeout).await
}

/// One read may take this long.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The state a health read means.
pub fn judge(expected: &Expected, read: &Result<Seen, String>) -> ServableState {
    match read {
        Ok(seen) if seen.covers(expected) => ServableState::Servable,
        Ok(_) => ServableState::Degraded,
        Err(_) => ServableState::Unreachable,
    }
}

/// Read the frontend's health answer every `every` and hand each result to `send`, until it
/// returns false (the receiver is gone) or the task is aborted.
pub async fn watch(
    probe: ServableProbe,
    every: Duration,
    send: impl Fn(Result<Seen, String>) -> bool,
) {
    loop {
        tokio::time::sleep(every).await;
        let read =
            probes::frontend_seen(probe.host.clone(), probe.port, probe.frontend, READ_TIMEOUT)
                .await;
        if !send(read) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_judged_against_the_expected_counts() {
        let e = Expected {
            prefill: 1,
            decode: 2,
        };
        let ok = Ok(Seen {
            prefill: 1,
            decode: 2,
        });
        let less = Ok(Seen {
            prefill: 1,
            decode: 1,
        });
        assert_eq!(judge(&e, &ok), ServableState::Servable);
        assert_eq!(judge(&e, &less), ServableState::Degraded);
        assert_eq!(
            judge(&e, &Err("refused".into())),
            ServableState::Unreachable
        );
        assert_eq!(
            describe(&e, less.as_ref().unwrap()),
            "2/3 workers (1 of 1 prefill, 1 of 2 decode)"
        );
        let agg = Expected {
            prefill: 0,
            decode: 2,
        };
        assert_eq!(
            describe(
                &agg,
                &Seen {
                    prefill: 0,
                    decode: 3
                }
            ),
            "2/2 workers"
        );
    }
}
