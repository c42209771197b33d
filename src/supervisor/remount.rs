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
//! Pure parts ([`target`], [`judge`]) are separate from the one async poller ([`verify`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::mooncake::size;
use crate::plan::{Plan, ProbeSpec, ProcessKind};

use super::logs::LineTap;

/// How long the stores may take to be registered again after the master is ready (they ping it
/// every second; measured 0.3-0.8 s in tests/e2e_master_recovery.rs).
pub const REMOUNT_WITHIN: Duration = Duration::from_secs(30);
/// Between two looks at the master.
const POLL: Duration = Duration::from_millis(250);

/// What to look for after a restart of the master at `plan.processes[master]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Where the master's metrics server answers (its readiness host, `--metrics_port`).
    pub host: String,
    pub metrics_port: u16,
    /// `MOONCAKE_LOCAL_HOSTNAME` of each store on this node: the host part of its segment name.
    pub store_hosts: Vec<String>,
    /// The segments this node's stores hold, summed.
    pub expected_bytes: u64,
    /// The key count the crashed master last reported in its log (see [`reported_keys`]), set by
    /// the runtime; `None` when it never reported one.
    pub keys_before: Option<u64>,
}

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
    let flag = |name: &str| {
        m.argv.iter().enumerate().find_map(|(i, a)| {
            let rest = a.strip_prefix(&format!("--{name}"))?;
            match rest.strip_prefix('=') {
                Some(v) => Some(v.to_string()),
                None if rest.is_empty() => m.argv.get(i + 1).cloned(),
                None => None,
            }
        })
    };
    if flag("enable_metric_reporting").is_some_and(|v| v == "false" || v == "0") {
        return None;
    }
    let metrics_port: u16 = flag("metrics_port")?.parse().ok()?;
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
        .map(|s| {
            s.env_value("MOONCAKE_GLOBAL_SEGMENT_SIZE")
                .and_then(|v| size::parse_mooncake_size(v).ok())
                .unwrap_or(crate::mooncake::DEFAULT_SEGMENT)
        })
        .fold(0u64, u64::saturating_add);
    Some(Target {
        host,
        metrics_port,
        store_hosts,
        expected_bytes,
        keys_before: None,
    })
}

/// The key count in one line of the master's own output, if the line is its periodic metrics
/// report (`--enable_metric_reporting`, every 10 s: `Master Admin Metrics: ... master={Mem
/// Storage: ... | Keys: 128 (soft-pinned: 0) | ...`; older releases `Master Metrics: ...`).
pub fn reported_keys(line: &[u8]) -> Option<u64> {
    const MARK: &[u8] = b"| Keys: ";
    if !line.starts_with(b"I") || line.len() < MARK.len() {
        return None;
    }
    let at = line.windows(MARK.len()).position(|w| w == MARK)? + MARK.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// What the master said at one look.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Look {
    /// `/get_all_segments`: one segment name (`host:port`) per line.
    pub segments: Vec<String>,
    pub capacity: Option<u64>,
    pub keys: Option<u64>,
}

impl Look {
    /// Parse the two answers.
    pub fn parse(segments: &str, metrics: &str) -> Look {
        let metric = |name: &str| {
            metrics.lines().find_map(|l| {
                let mut it = l.split_whitespace();
                (it.next() == Some(name))
                    .then(|| it.next()?.parse::<f64>().ok())
                    .flatten()
                    .map(|v| v as u64)
            })
        };
        Look {
            segments: segments
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect(),
            capacity: metric("master_total_capacity_bytes"),
            keys: metric("master_key_count"),
        }
    }
}

/// Are all of this node's stores back? One segment per store whose host matches (a node's
/// stores share its hostname, so they are counted, not named).
pub fn judge(t: &Target, look: &Look) -> bool {
    let mut hosts = t.store_hosts.clone();
    hosts.sort();
    hosts.dedup();
    let enough = hosts.iter().all(|h| {
        let want = t.store_hosts.iter().filter(|x| *x == h).count();
        let have = look
            .segments
            .iter()
            .filter(|s| s.rsplit_once(':').map_or(s.as_str(), |(host, _)| host) == h)
            .count();
        have >= want
    });
    enough && look.capacity.is_some_and(|c| c >= t.expected_bytes)
}

/// The event detail for `look` after `elapsed`.
pub fn describe(t: &Target, look: &Look, elapsed: Duration, ok: bool) -> String {
    let cap = look
        .capacity
        .map_or("unknown".to_string(), |c| size::Bytes(c).to_string());
    let keys = look.keys.map_or("unknown".to_string(), |k| k.to_string());
    let before = t
        .keys_before
        .map_or("no key count reported".to_string(), |k| {
            format!("{k} key(s) at the master's last report")
        });
    if ok {
        format!(
            "this node's {} store(s) registered again after {:.1} s ({} segment(s) listed; capacity {cap}, this node's stores hold {}); the cache from before the crash is lost ({before} before the crash, master_key_count {keys} now); workers kept running",
            t.store_hosts.len(),
            elapsed.as_secs_f64(),
            look.segments.len(),
            size::Bytes(t.expected_bytes)
        )
    } else {
        format!(
            "after {:.0} s the restarted master lists {} segment(s) ({}) and capacity {cap}, short of this node's {} store(s) holding {}: check the stores' logs (they remount on their next ping of the master); master_key_count {keys}",
            elapsed.as_secs_f64(),
            look.segments.len(),
            look.segments.join(", "),
            t.store_hosts.len(),
            size::Bytes(t.expected_bytes)
        )
    }
}

/// Poll the master until [`judge`] is satisfied or `within` passes: `(registered, detail)`.
pub async fn verify(t: Target, within: Duration) -> (bool, String) {
    let start = Instant::now();
    let mut last = Look::default();
    loop {
        let get = |path: &'static str| {
            super::probes::http_body(t.host.clone(), t.metrics_port, path, POLL * 4)
        };
        if let (Ok(segments), Ok(metrics)) = (get("/get_all_segments").await, get("/metrics").await)
        {
            last = Look::parse(&segments, &metrics);
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

    fn t() -> Target {
        Target {
            host: "127.0.0.1".into(),
            metrics_port: 8702,
            store_hosts: vec!["10.0.0.2".into()],
            expected_bytes: 64 << 20,
            keys_before: None,
        }
    }

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

    #[test]
    fn the_masters_periodic_report_gives_its_key_count() {
        let report = b"I1201 08:49:38.954806 11198 master_admin_service.cpp:301] Master Admin Metrics: role=leader, state=serving, service_ready=true, master={Mem Storage: 32.00 MB / 512.00 MB (6.2%) | NVMe-oF SSD: 0 B / 0 B | SSD Storage: 0 B / 0 B | Keys: 128 (soft-pinned: 0) | Clients: 1 | Eviction: Success/Attempts=0/0, keys=0, size=0 B}";
        assert_eq!(reported_keys(report), Some(128));
        let older = b"I0101 00:00:00.000000 1 master_service.cpp:1] Master Metrics: Mem Storage: 0 B / 64.00 MB | Keys: 0 (soft-pinned: 0) | Clients: 1";
        assert_eq!(reported_keys(older), Some(0));
        // A worker printing the words, or a warning line, is not a report.
        assert_eq!(reported_keys(b"W1201 x] | Keys: 5"), None);
        assert_eq!(reported_keys(b"I1201 x] keys=12"), None);
        assert_eq!(reported_keys(b"I1201 x] | Keys: "), None);
    }

    #[test]
    fn the_event_says_how_many_keys_were_lost() {
        let look = Look {
            segments: vec!["10.0.0.2:1".into()],
            capacity: Some(64 << 20),
            keys: Some(0),
        };
        let mut t = t();
        let d = describe(&t, &look, Duration::from_millis(800), true);
        assert!(
            d.contains("(no key count reported before the crash, master_key_count 0 now)"),
            "{d}"
        );
        t.keys_before = Some(128);
        let d = describe(&t, &look, Duration::from_millis(800), true);
        assert!(
            d.contains(
                "(128 key(s) at the master's last report before the crash, master_key_count 0 now)"
            ),
            "{d}"
        );
    }

    #[test]
    fn a_look_parses_the_masters_answers() {
        let l = Look::parse(
            "10.0.0.2:13075\n10.0.0.3:12555\n",
            "# HELP x\nmaster_total_capacity_bytes 134217728\nmaster_key_count 0\n",
        );
        assert_eq!(l.segments, vec!["10.0.0.2:13075", "10.0.0.3:12555"]);
        assert_eq!(l.capacity, Some(128 << 20));
        assert_eq!(l.keys, Some(0));
    }

    #[test]
    fn judged_back_only_with_this_nodes_segment_and_the_capacity() {
        let back = Look {
            segments: vec!["10.0.0.2:13075".into()],
            capacity: Some(64 << 20),
            keys: Some(0),
        };
        assert!(judge(&t(), &back));
        // Another node's store remounted first: not ours.
        let other = Look {
            segments: vec!["10.0.0.3:13075".into()],
            ..back.clone()
        };
        assert!(!judge(&t(), &other));
        // Listed, but the capacity is not there yet.
        let short = Look {
            capacity: Some(0),
            ..back.clone()
        };
        assert!(!judge(&t(), &short));
        assert!(describe(&t(), &short, Duration::from_secs(30), false).contains("short of"));
        assert!(describe(&t(), &back, Duration::from_millis(1500), true).contains("after 1.5 s"));
    }
}
