//! What a restarted Mooncake master must show before this node's stores count as back, read
//! from its HTTP metrics server, and what its own log says about the keys it held.
//!
//! Mooncake stores ping the master every second and remount their segments when a restarted
//! master answers `NEED_REMOUNT` (since 0.3.6.post1); only the cached keys are lost
//! (kvcache-ai/Mooncake v0.3.12.post1: `mooncake-store/src/client_service.cpp`
//! `StorageHeartbeatThreadMain`, `master_service.cpp` `Ping`). Pure: the supervisor polls the
//! master (`supervisor::watch::mooncake`) and judges each answer here.

use std::time::Duration;

use super::size;

/// The master's metrics port from its argv (`--metrics_port P` or `--metrics_port=P`), or `None`
/// when it has no metrics server to ask (no such flag, or `--enable_metric_reporting=false`).
pub fn master_metrics_port(argv: &[String]) -> Option<u16> {
    let flag = |name: &str| crate::domain::flag_value(argv, name);
    if flag("enable_metric_reporting").is_some_and(|v| v == "false" || v == "0") {
        return None;
    }
    flag("metrics_port")?.parse().ok()
}

/// The segment a store holds, from its `MOONCAKE_GLOBAL_SEGMENT_SIZE` (Mooncake's default when
/// unset or unreadable).
pub fn store_segment_bytes(global_segment_size: Option<&str>) -> u64 {
    global_segment_size
        .and_then(|v| size::parse_mooncake_size(v).ok())
        .unwrap_or(super::DEFAULT_SEGMENT)
}

/// What to look for after a restart of a master.
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
    /// the supervisor; `None` when it never reported one.
    pub keys_before: Option<u64>,
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

/// A one-line summary of the master's periodic report (a ~2.5 KB line every 10 s), for the
/// console: `Mooncake master: memory 32.00 MB / 512.00 MB (6.2%), 128 keys, 1 client(s)`; `None`
/// when the line is not the report.
pub fn report_summary(line: &[u8]) -> Option<String> {
    if !line.starts_with(b"I") {
        return None;
    }
    let text = std::str::from_utf8(line).ok()?;
    let at = text
        .find("Master Admin Metrics: ")
        .or_else(|| text.find("Master Metrics: "))?;
    let body = &text[at..];
    let field = |name: &str| {
        let from = body.find(name)? + name.len();
        let rest = &body[from..];
        Some(rest[..rest.find(" |").unwrap_or(rest.len())].trim())
    };
    let memory = field("Mem Storage: ").unwrap_or("?");
    let keys = reported_keys(line).map_or("?".to_string(), |k| k.to_string());
    let clients = field("| Clients: ").unwrap_or("?");
    Some(format!(
        "Mooncake master: memory {memory}, {keys} key(s), {clients} client(s) (full report every 10 s in the log file)"
    ))
}

/// What the master said at one look.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Look {
    /// `/get_all_segments`: one segment name (`host:port`) per line.
    pub segments: Vec<String>,
    pub capacity: Option<u64>,
    pub keys: Option<u64>,
    /// `master_allocated_bytes` and `master_active_clients`.
    pub allocated: Option<u64>,
    pub clients: Option<u64>,
    /// `segment_total_capacity_bytes{segment="..."}`, per segment.
    pub segment_capacity: Vec<(String, u64)>,
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
            allocated: metric("master_allocated_bytes"),
            clients: metric("master_active_clients"),
            segment_capacity: metrics
                .lines()
                .filter_map(|l| {
                    let rest = l.strip_prefix("segment_total_capacity_bytes{segment=\"")?;
                    let (name, value) = rest.split_once("\"}")?;
                    let v = value.trim().parse::<f64>().ok()?;
                    Some((name.to_string(), v as u64))
                })
                .collect(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_port_comes_from_the_masters_flags() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            master_metrics_port(&argv(&["m", "--metrics_port=8702"])),
            Some(8702)
        );
        assert_eq!(
            master_metrics_port(&argv(&["m", "--metrics_port", "9"])),
            Some(9)
        );
        assert_eq!(
            master_metrics_port(&argv(&["m", "--metrics_portx=1"])),
            None
        );
        let off = argv(&[
            "m",
            "--metrics_port=8702",
            "--enable_metric_reporting=false",
        ]);
        assert_eq!(master_metrics_port(&off), None);
        assert_eq!(store_segment_bytes(Some("64mb")), 64 << 20);
        assert_eq!(store_segment_bytes(None), crate::mooncake::DEFAULT_SEGMENT);
    }

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
    fn the_masters_report_is_summed_up_in_one_short_line() {
        let report = b"I1201 08:49:38.954806 11198 master_admin_service.cpp:301] Master Admin Metrics: role=leader, state=serving, service_ready=true, master={Mem Storage: 32.00 MB / 512.00 MB (6.2%) | NVMe-oF SSD: 0 B / 0 B | SSD Storage: 0 B / 0 B | Keys: 128 (soft-pinned: 0) | Clients: 1 | Eviction: Success/Attempts=0/0, keys=0, size=0 B}";
        assert_eq!(
            report_summary(report).as_deref(),
            Some("Mooncake master: memory 32.00 MB / 512.00 MB (6.2%), 128 key(s), 1 client(s) (full report every 10 s in the log file)")
        );
        assert_eq!(
            report_summary(b"I1201 x] Master service started on port 1"),
            None
        );
        assert_eq!(report_summary(b"W1201 x] Master Admin Metrics: junk"), None);
    }

    #[test]
    fn the_event_says_how_many_keys_were_lost() {
        let look = Look {
            segments: vec!["10.0.0.2:1".into()],
            capacity: Some(64 << 20),
            keys: Some(0),
            ..Look::default()
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
        // The pinned master's own series (0.3.13.post1, measured on loopback).
        let l = Look::parse(
            "127.0.0.1:14243\n",
            "master_allocated_bytes 1048576\nmaster_total_capacity_bytes 67108864\nsegment_allocated_bytes{segment=\"127.0.0.1:14243\"} 0\nsegment_total_capacity_bytes{segment=\"127.0.0.1:14243\"} 67108864\nmaster_key_count 3\nmaster_active_clients 2\n",
        );
        assert_eq!(l.allocated, Some(1 << 20));
        assert_eq!(l.clients, Some(2));
        assert_eq!(
            l.segment_capacity,
            vec![("127.0.0.1:14243".to_string(), 64 << 20)]
        );
    }

    #[test]
    fn judged_back_only_with_this_nodes_segment_and_the_capacity() {
        let back = Look {
            segments: vec!["10.0.0.2:13075".into()],
            capacity: Some(64 << 20),
            keys: Some(0),
            ..Look::default()
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
