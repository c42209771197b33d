//! The canary: once the job is servable, a 1-token completion through its public endpoint every
//! `canary.period` (the plan's, 30 s by default) must generate a token (the servable probe's last
//! step, `probes::completion`). `canary.threshold` failures in a row are `canary-failed` (an
//! event, `DEGRADED` in the job view, `mcsup_canary_ok 0`); the next success is `canary-ok`.
//! With `on_failure: drain` a failed canary also ends the job (`Event::EndpointFailed`, exit
//! code 6). A frontend that lists every worker can still answer nothing (a hung engine, a decode
//! side whose KV transfers fail): the health read of the servable watcher cannot see that.

use std::time::Duration;

use super::{Answer, Effect, Input, Now, Task, TaskKey, Watcher};
use crate::plan::Plan;
use crate::recipe::CanaryAction;
use crate::runfiles::{CanaryStatus, StatusFile};
use crate::supervisor::machine::{Event, RecordKind, WatchRequest};
use crate::supervisor::probes;

/// The canary watcher: the endpoint's canary once servable.
#[derive(Default)]
pub struct Canary {
    status: Option<CanaryStatus>,
    /// The frontend the canary goes through (for the events).
    frontend: String,
    running: bool,
}

impl Watcher for Canary {
    fn on(&mut self, plan: &Plan, input: &Input<'_>, now: Now<'_>) -> Vec<Effect> {
        match input {
            Input::Asked(WatchRequest::Servable { proc }) => self.start(plan, *proc, now),
            Input::Answer(Answer::Canary(result)) => self.answer(plan, result, now),
            Input::Stopping if self.running => {
                self.running = false;
                vec![Effect::Stop(TaskKey::Canary)]
            }
            _ => Vec::new(),
        }
    }

    fn status(&self, status: &mut StatusFile) {
        status.canary = self.status.clone();
    }
}

impl Canary {
    /// The job is servable through process `proc`: the canary starts (once).
    fn start(&mut self, plan: &Plan, proc: usize, now: Now<'_>) -> Vec<Effect> {
        let Some(unit) = plan.processes.get(proc) else {
            return Vec::new();
        };
        let Some(probe) = unit.servable_probe().cloned() else {
            return Vec::new();
        };
        if !plan.canary.enabled || self.running {
            return Vec::new();
        }
        self.running = true;
        self.frontend = unit.name.clone();
        self.status.get_or_insert(CanaryStatus {
            url: probe.url.clone(),
            ok: true,
            since_ts_ms: now.wall_ms(),
            ..CanaryStatus::default()
        });
        vec![Effect::Run {
            key: Some(TaskKey::Canary),
            task: Task::Canary {
                probe,
                every: plan.canary.period,
                timeout: plan.canary.timeout,
            },
        }]
    }

    /// One canary request's result.
    fn answer(&mut self, plan: &Plan, result: &Result<(), String>, now: Now<'_>) -> Vec<Effect> {
        if !self.running {
            return Vec::new();
        }
        let Some(s) = self.status.as_mut() else {
            return Vec::new();
        };
        s.requests_total += 1;
        let c = &plan.canary;
        match result {
            Ok(()) => {
                let was = s.failures_in_a_row;
                s.failures_in_a_row = 0;
                if s.ok {
                    return Vec::new();
                }
                s.ok = true;
                s.since_ts_ms = now.wall_ms();
                let detail = format!(
                    "{}: a 1-token completion generated again, after {was} failed",
                    s.url
                );
                vec![
                    Effect::note(&self.frontend, RecordKind::CanaryOk, detail),
                    Effect::StatusNow,
                ]
            }
            Err(e) => {
                s.failures_total += 1;
                s.failures_in_a_row += 1;
                s.error = Some(e.clone());
                if !s.ok || s.failures_in_a_row < c.threshold {
                    return vec![Effect::StatusChanged];
                }
                s.ok = false;
                s.since_ts_ms = now.wall_ms();
                let detail = format!(
                    "{}: {} 1-token completions in a row failed (one every {}): {e}",
                    s.url,
                    s.failures_in_a_row,
                    crate::domain::show_secs(c.period)
                );
                let mut out = vec![
                    Effect::note(&self.frontend, RecordKind::CanaryFailed, detail.clone()),
                    Effect::StatusNow,
                ];
                if c.on_failure == CanaryAction::Drain {
                    out.push(Effect::Feed(Event::EndpointFailed {
                        detail: format!("the endpoint's canary failed ({detail})"),
                    }));
                }
                out
            }
        }
    }
}

/// Send a canary request through `probe`'s frontend every `every` and hand each result to
/// `send`, until it returns false (the receiver is gone) or the task is aborted.
pub async fn run(
    probe: crate::plan::ServableProbe,
    every: Duration,
    timeout: Duration,
    send: impl Fn(Result<(), String>) -> bool,
) {
    loop {
        tokio::time::sleep(every).await;
        if !send(probes::completion(probe.clone(), timeout).await) {
            return;
        }
    }
}
