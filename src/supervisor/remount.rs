//! After a restarted Mooncake master is ready again: check that this node's stores registered
//! with it again, and say that the cache it held is gone.
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
//! (`crate::mooncake::remount`); here are the plan's side ([`target`]), the runtime's memory of
//! each master ([`MasterWatch`]) and the one async poller ([`verify`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::mooncake::remount::{self, describe, judge, reported_keys, Look, Target};
use crate::plan::{Plan, ProbeSpec, ProcessKind};

use super::logs::LineTap;

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
    let get = |path: &'static str| super::probes::http_body(host.clone(), port, path, timeout);
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
