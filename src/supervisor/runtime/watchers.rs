//! The loop as dispatch table of the watchers (`supervisor::watch`): the registry (one line per
//! watcher), every input handed to each, and their effects carried out: events written, the
//! machine fed, tasks run off the loop and their answers sent back as `Msg::Watch`.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use tokio::task::JoinHandle;

use super::{Msg, Runtime};
use crate::plan::Plan;
use crate::runfiles::StatusFile;
use crate::supervisor::machine::Event;
use crate::supervisor::watch::{
    benchmark, canary, diagnosis, mooncake, progress, release, servable, stacks, stores, Answer,
    Effect, Hooks, Input, Now, Report, Task, TaskKey, Watcher,
};

/// The watchers of a run, in the order they hear each input (and offer output hooks).
async fn registry(plan: &Plan) -> Vec<Box<dyn Watcher>> {
    vec![
        Box::new(servable::Servable::default()),
        Box::new(mooncake::Mooncake::default()),
        Box::new(stores::Stores::new(plan)),
        Box::new(diagnosis::Diagnosis::default()),
        Box::new(release::Release::read(plan).await),
        Box::new(benchmark::Benchmark::default()),
        Box::new(canary::Canary::default()),
        Box::new(stacks::Stacks::default()),
        Box::new(progress::Progress::default()),
    ]
}

/// The watchers and their running keyed tasks.
pub(super) struct Watchers {
    list: Vec<Box<dyn Watcher>>,
    tasks: HashMap<TaskKey, JoinHandle<()>>,
}

impl Watchers {
    pub(super) async fn new(plan: &Plan) -> Self {
        Watchers {
            list: registry(plan).await,
            tasks: HashMap::new(),
        }
    }

    /// Each watcher's part of the status file.
    pub(super) fn status(&self, status: &mut StatusFile) {
        for w in &self.list {
            w.status(status);
        }
    }
}

impl Runtime {
    /// Hand `input` to every watcher and carry out their effects; the machine events among them
    /// are returned for the caller's queue.
    pub(super) fn watch(&mut self, input: Input<'_>) -> Vec<Event> {
        let now = Now {
            at: Instant::now(),
            clock: &self.clock,
        };
        let effects: Vec<Effect> = self
            .watchers
            .list
            .iter_mut()
            .flat_map(|w| w.on(&self.plan, &input, now))
            .collect();
        let mut feed = Vec::new();
        for effect in effects {
            match effect {
                Effect::Note {
                    unit,
                    kind,
                    detail,
                    diagnosis,
                } => self.note_with(&unit, kind, detail, diagnosis),
                Effect::Feed(ev) => feed.push(ev),
                Effect::Run { key, task } => {
                    let handle = tokio::spawn(run(task, self.reporter()));
                    if let Some(old) = key.and_then(|k| self.watchers.tasks.insert(k, handle)) {
                        old.abort();
                    }
                }
                Effect::Stop(key) => {
                    if let Some(h) = self.watchers.tasks.remove(&key) {
                        h.abort();
                    }
                }
                Effect::StatusChanged => self.status_changed(),
                Effect::StatusNow => {
                    self.status_changed();
                    self.write_status(None);
                }
            }
        }
        feed
    }

    /// [`Runtime::watch`], with the machine fed what the watchers say.
    pub(super) fn watch_and_feed(&mut self, input: Input<'_>) {
        let mut queue = VecDeque::from(self.watch(input));
        while let Some(ev) = queue.pop_front() {
            self.feed(ev);
        }
    }

    /// Where the answers of tasks and line watches go: the loop's channel.
    fn reporter(&self) -> Report {
        let tx = self.tx.clone();
        std::sync::Arc::new(move |answer| {
            let _ = tx.send(Msg::Watch(answer));
        })
    }

    /// The output hooks of process `proc`'s new incarnation, from the watchers in order.
    pub(super) fn hooks(&mut self, proc: usize, generation: u64) -> Hooks {
        let report = self.reporter();
        let mut hooks = Hooks::default();
        for w in &mut self.watchers.list {
            let h = w.hooks(&self.plan, proc, generation, &report, &hooks);
            hooks.tap = hooks.tap.or(h.tap);
            hooks.watch = hooks.watch.or(h.watch);
            hooks.console = hooks.console.or(h.console);
        }
        hooks
    }
}

/// Carry out one task, sending what it finds to `report`.
async fn run(task: Task, report: Report) {
    match task {
        Task::ServableProbe {
            attempt,
            probe,
            timeout,
        } => {
            let result = servable::attempt(probe, timeout).await;
            report(Answer::Servable { attempt, result });
        }
        Task::FrontendWatch { probe, every } => {
            servable::watch(probe, every, |read| {
                report(Answer::Seen(read));
                true
            })
            .await
        }
        Task::Canary {
            probe,
            every,
            timeout,
        } => {
            canary::run(probe, every, timeout, |result| {
                report(Answer::Canary(result));
                true
            })
            .await
        }
        Task::Dump { proc, pgid, file } => {
            let said = tokio::task::spawn_blocking(move || stacks::dump(pgid, &file))
                .await
                .unwrap_or_else(|e| format!("the stack dump failed: {e}"));
            report(Answer::Dumped { proc, said });
        }
        Task::MasterLooks { port, every } => {
            mooncake::looks(port, every, |look| {
                report(Answer::MasterView(look));
                true
            })
            .await
        }
        Task::Remount { master, target } => {
            let (ok, detail) = mooncake::verify(target, mooncake::REMOUNT_WITHIN).await;
            report(Answer::Remount { master, ok, detail });
        }
        Task::JobStores { dir, capacity } => {
            // Off the loop: another node's file is on the same shared file system.
            let read =
                tokio::task::spawn_blocking(move || {
                    match crate::supervisor::status::read_job(&dir) {
                        Ok((nodes, _)) => nodes
                            .iter()
                            .map(|(_, r)| r.status.store_segments())
                            .collect(),
                        Err(_) => Vec::new(),
                    }
                })
                .await;
            report(Answer::JobStores {
                stores: read.unwrap_or_default(),
                capacity,
            });
        }
        Task::Segment {
            attempt,
            probe,
            printed,
            timeout,
        } => {
            let verdict = stores::segment(probe, printed, timeout).await;
            report(Answer::Segment { attempt, verdict });
        }
        Task::EngineAlive {
            attempt,
            proc,
            probe,
            timeout,
        } => {
            let result = progress::attempt(probe, timeout).await;
            report(Answer::EngineAlive {
                attempt,
                proc,
                result,
            });
        }
        Task::StoreHealth {
            attempt,
            proc,
            host,
            port,
            timeout,
        } => {
            let answer = stores::health(host, port, timeout).await;
            report(Answer::Health {
                attempt,
                proc,
                port,
                answer,
            });
        }
        Task::Judge {
            proc,
            dir,
            since_ms,
            kind,
            max_failed,
        } => {
            // Off the loop: the log directory may be a slow shared file system.
            let read = tokio::task::spawn_blocking(move || {
                benchmark::read_and_judge(&dir, since_ms, &kind, max_failed)
            })
            .await;
            if let Ok(status) = read {
                report(Answer::Judged { proc, status });
            }
        }
        Task::GpuRelease {
            attempt,
            pgid,
            gpus,
            baseline,
            within,
        } => {
            let result = release::wait(pgid, gpus, baseline, within).await;
            report(Answer::Released { attempt, result });
        }
    }
}
