//! The Mooncake master as this node sees it: its view read every `master_look` (the plan's
//! periods, 5 s by default) once it
//! is ready (the status and metrics files, and the job's capacity against the stores' planned
//! segments), and, after a restarted master is ready again, whether this node's stores
//! registered with it again and that the cache it held is gone.
//!
//! Mooncake stores ping the master every second and remount their segments when a restarted
//! master answers `NEED_REMOUNT` (since 0.3.6.post1); only the cached keys are lost
//! (kvcache-ai/Mooncake v0.3.12.post1: `mooncake-store/src/client_service.cpp`
//! `StorageHeartbeatThreadMain`, `master_service.cpp` `Ping`). The supervisor keeps the workers running through a
//! master restart; this module is how it verifies the recovery instead of assuming it: it polls
//! the master's HTTP metrics server (`/get_all_segments`, `/metrics`) until every store of this
//! node is listed again and the master's capacity covers their segments, within a bound. The
//! outcome is an event (`remounted` or `remount_late`), never a teardown: stores that are slow to
//! remount are still supervised by their own readiness and restart policy.
//!
//! What the master must show, and how its answers are read, is Mooncake knowledge
//! (`crate::mooncake::remount`); here are the watcher ([`Mooncake`]), the plan's side
//! ([`target`]), the memory of each master ([`MasterWatch`]) and the async reads ([`look`],
//! [`verify`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::mooncake::remount::{self, describe, judge, reported_keys, Look, Target};
use crate::plan::{Plan, ProbeSpec, ProcessKind};
use crate::runfiles::{MooncakeView, StatusFile};

use super::{Answer, Effect, Hooks, Input, Now, Report, Task, TaskKey, Watcher};
use crate::supervisor::logs::{self, LineTap};
use crate::supervisor::machine::{RecordKind, WatchRequest};

/// The Mooncake watcher: the master's restarts, its last view and the capacity said.
#[derive(Default)]
pub struct Mooncake {
    masters: MasterWatch,
    /// The master's view (on its node).
    view: Option<MooncakeView>,
    /// Whether the looks at the master run.
    looking: bool,
    /// Whether a read of the job's status files is under way.
    reading_job: bool,
    /// The last capacity verdict said (whole), and how many looks in a row were short.
    capacity_said: Option<bool>,
    short_looks: u32,
}

impl Watcher for Mooncake {
    fn on(&mut self, plan: &Plan, input: &Input<'_>, now: Now<'_>) -> Vec<Effect> {
        match input {
            Input::Asked(WatchRequest::Master { proc }) => self.master_ready(plan, *proc),
            Input::Answer(Answer::Remount { master, ok, detail }) => {
                let kind = if *ok {
                    RecordKind::Remounted
                } else {
                    RecordKind::RemountLate
                };
                vec![Effect::note(master, kind, detail)]
            }
            Input::Answer(Answer::MasterView(look)) => self.master_view(plan, look, now),
            Input::Answer(Answer::JobStores { stores, capacity }) => {
                self.reading_job = false;
                self.job_stores(plan, stores, *capacity)
            }
            _ => Vec::new(),
        }
    }

    fn hooks(
        &mut self,
        plan: &Plan,
        proc: usize,
        _generation: u64,
        _report: &Report,
        _taken: &Hooks,
    ) -> Hooks {
        if plan.processes[proc].kind != ProcessKind::Master {
            return Hooks::default();
        }
        Hooks {
            tap: Some(self.masters.tap(proc)),
            console: Some(master_console()),
            watch: None,
        }
    }

    fn status(&self, status: &mut StatusFile) {
        status.mooncake = self.view.clone();
    }
}

impl Mooncake {
    /// The master `proc` is ready: its view is read from now on; ready again after a restart,
    /// this node's stores must register with it again.
    fn master_ready(&mut self, plan: &Plan, proc: usize) -> Vec<Effect> {
        let mut out = Vec::new();
        if !self.looking {
            if let Some(port) = remount::master_metrics_port(&plan.processes[proc].argv) {
                self.looking = true;
                out.push(Effect::Run {
                    key: Some(TaskKey::MasterLooks),
                    task: Task::MasterLooks {
                        port,
                        every: plan.periods.master_look,
                    },
                });
            }
        }
        if let Some(target) = self.masters.on_ready(plan, proc) {
            out.push(Effect::Run {
                key: None,
                task: Task::Remount {
                    master: plan.processes[proc].name.clone(),
                    target,
                },
            });
        }
        out
    }

    /// A look at the master: kept for the status and metrics files, and the job's capacity
    /// checked against the stores' planned segments (each node's status file lists its stores).
    fn master_view(
        &mut self,
        plan: &Plan,
        look: &Result<Look, String>,
        now: Now<'_>,
    ) -> Vec<Effect> {
        let ts_ms = now.wall_ms();
        let view = match look {
            Ok(l) => MooncakeView {
                ts_ms,
                capacity_bytes: l.capacity.unwrap_or(0),
                allocated_bytes: l.allocated.unwrap_or(0),
                keys: l.keys.unwrap_or(0),
                clients: l.clients.unwrap_or(0),
                segments: l.segments.len() as u64,
                segment_capacity: l.segment_capacity.clone(),
                error: None,
            },
            Err(e) => MooncakeView {
                ts_ms,
                error: Some(e.clone()),
                ..self.view.clone().unwrap_or_default()
            },
        };
        let (fresh, capacity) = (view.error.is_none(), view.capacity_bytes);
        self.view = Some(view);
        let mut out = vec![Effect::StatusChanged];
        // Skipped while the last read has not come back (a slow file system).
        if fresh && !self.reading_job {
            self.reading_job = true;
            out.push(Effect::Run {
                key: None,
                task: Task::JobStores {
                    dir: plan.log_dir.clone(),
                    capacity,
                },
            });
        }
        out
    }

    /// The job's stores (from every node's status file) against the master's capacity.
    fn job_stores(
        &mut self,
        plan: &Plan,
        stores: &[Vec<(bool, u64)>],
        capacity: u64,
    ) -> Vec<Effect> {
        let c = crate::mooncake::segments::Capacity::of(capacity, stores);
        if c.ready < c.stores || c.stores == 0 {
            return Vec::new(); // said once every store is ready
        }
        let whole = c.whole();
        self.short_looks = if whole { 0 } else { self.short_looks + 1 };
        // A short look is said when it lasts (two looks: a master restart's remount takes
        // about a second), a whole one at once; each only when it changes.
        if (whole || self.short_looks >= 2) && self.capacity_said != Some(whole) {
            self.capacity_said = Some(whole);
            let unit = plan
                .processes
                .iter()
                .find(|p| p.kind == ProcessKind::Master)
                .map_or("mcsup".to_string(), |p| p.name.clone());
            return vec![Effect::note(unit, RecordKind::Capacity, c.text())];
        }
        Vec::new()
    }
}

/// The master's console: its periodic report (a ~2.5 KB line every 10 s) as a one-line summary,
/// shown only when it changed; everything else as it is. The log file keeps every report whole.
fn master_console() -> logs::ConsoleFilter {
    let mut last: Option<String> = None;
    Box::new(move |line| match remount::report_summary(line) {
        None => logs::ConsoleLine::AsIs,
        Some(s) if last.as_ref() == Some(&s) => logs::ConsoleLine::Skip,
        Some(s) => {
            last = Some(s.clone());
            logs::ConsoleLine::Instead(s)
        }
    })
}

/// Look at the master every `every`, handing each look to `send` until it returns false.
pub async fn looks(port: u16, every: Duration, send: impl Fn(Result<Look, String>) -> bool) {
    loop {
        let look = look("127.0.0.1".into(), port, Duration::from_secs(2)).await;
        if !send(look) {
            return;
        }
        tokio::time::sleep(every).await;
    }
}

/// How long the stores may take to be registered again after the master is ready (they ping it
/// every second; measured 0.3-0.8 s in tests/e2e_master_recovery.rs).
pub const REMOUNT_WITHIN: Duration = Duration::from_secs(30);
/// Between two looks at the master.
const POLL: Duration = Duration::from_millis(250);

/// What the runtime remembers of each master process of the plan (by index), across restarts:
/// how often it became ready (from the second time on it was restarted, and the remount is
/// verified) and the key count each incarnation last reported in its log.
#[derive(Default)]
pub struct MasterWatch {
    ready: HashMap<usize, u32>,
    /// The current incarnation's count ([`NO_KEYS`] until it reports one).
    keys: HashMap<usize, Arc<AtomicU64>>,
    /// What the previous incarnation last reported.
    keys_before: HashMap<usize, u64>,
}

/// "No key count reported yet" in [`MasterWatch`].
const NO_KEYS: u64 = u64::MAX;

impl MasterWatch {
    /// A new incarnation of the master at `master` is spawned: a fresh key counter, fed by the
    /// returned tap on its output. What the previous incarnation last reported is kept for the
    /// remount event ("the cache from before the crash is lost").
    pub fn tap(&mut self, master: usize) -> LineTap {
        let keys = Arc::new(AtomicU64::new(NO_KEYS));
        if let Some(prev) = self.keys.insert(master, keys.clone()) {
            match prev.load(Ordering::Relaxed) {
                NO_KEYS => self.keys_before.remove(&master),
                n => self.keys_before.insert(master, n),
            };
        }
        Box::new(move |line| {
            if let Some(n) = reported_keys(line) {
                keys.store(n, Ordering::Relaxed);
            }
        })
    }

    /// The master at `master` is ready: the first time is its start; from the second time on it
    /// was restarted, and this is what to verify (`None` when there is nothing to ask, see
    /// [`target`]).
    pub fn on_ready(&mut self, plan: &Plan, master: usize) -> Option<Target> {
        let n = self.ready.entry(master).or_insert(0);
        *n += 1;
        if *n < 2 {
            return None;
        }
        let mut t = target(plan, master)?;
        t.keys_before = self.keys_before.get(&master).copied();
        Some(t)
    }
}

/// The target for the master at `master`, or `None` when this node runs no store, or the master
/// has no metrics server to ask (`--enable_metric_reporting=false` or no `--metrics_port`).
pub fn target(plan: &Plan, master: usize) -> Option<Target> {
    let m = plan.processes.get(master)?;
    let metrics_port = remount::master_metrics_port(&m.argv)?;
    let host = m
        .readiness
        .iter()
        .flat_map(|r| r.probes.iter())
        .find_map(|p| match p {
            ProbeSpec::Tcp { host, .. } => Some(host.clone()),
            _ => None,
        })
        .unwrap_or_else(|| "127.0.0.1".into());
    let stores: Vec<_> = plan
        .processes
        .iter()
        .filter(|p| p.kind == ProcessKind::Store)
        .collect();
    if stores.is_empty() {
        return None;
    }
    let store_hosts = stores
        .iter()
        .map(|s| {
            s.env_value("MOONCAKE_LOCAL_HOSTNAME")
                .unwrap_or("localhost")
                .to_string()
        })
        .collect();
    let expected_bytes = stores
        .iter()
        .map(|s| remount::store_segment_bytes(s.env_value("MOONCAKE_GLOBAL_SEGMENT_SIZE")))
        .fold(0u64, u64::saturating_add);
    Some(Target {
        host,
        metrics_port,
        store_hosts,
        expected_bytes,
        keys_before: None,
    })
}

/// One look at the master's admin server: `/get_all_segments` and `/metrics` (for the remount
/// check and for the master's view in the status and metrics files).
pub async fn look(host: String, port: u16, timeout: Duration) -> Result<Look, String> {
    let get = |path: &'static str| {
        crate::supervisor::probes::http_body(host.clone(), port, path, timeout)
    };
    let segments = get("/get_all_segments").await?;
    let metrics = get("/metrics").await?;
    Ok(Look::parse(&segments, &metrics))
}

/// Poll the master until [`judge`] is satisfied or `within` passes: `(registered, detail)`.
pub async fn verify(t: Target, within: Duration) -> (bool, String) {
    let start = Instant::now();
    let mut last = Look::default();
    loop {
        if let Ok(l) = look(t.host.clone(), t.metrics_port, POLL * 4).await {
            last = l;
            if judge(&t, &last) {
                return (true, describe(&t, &last, start.elapsed(), true));
            }
        }
        if start.elapsed() >= within {
            return (false, describe(&t, &last, start.elapsed(), false));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_master_incarnation_counts_its_own_keys() {
        let mut w = MasterWatch::default();
        let report = |n: u64| {
            format!("I1201 x] Master Admin Metrics: master={{ | Keys: {n} (soft-pinned: 0)")
        };
        let mut first = w.tap(0);
        first(report(5).as_bytes());
        first(b"W1201 a warning | Keys: 9");
        first(report(7).as_bytes());
        assert_eq!(
            w.keys_before.get(&0),
            None,
            "the first incarnation is still running"
        );
        // A restart: what the crashed one last reported is kept, the new one starts from none.
        let mut second = w.tap(0);
        assert_eq!(w.keys_before.get(&0), Some(&7));
        first(report(99).as_bytes()); // a late line of the old one's reader counts nothing
        assert_eq!(w.keys[&0].load(Ordering::Relaxed), NO_KEYS);
        // A second restart before the new one ever reported: nothing to say about its cache.
        let _third = w.tap(0);
        assert_eq!(w.keys_before.get(&0), None);
        second(report(3).as_bytes());
        // Another master is counted apart.
        let _other = w.tap(1);
        assert_eq!(w.keys_before.get(&1), None);
    }
}
