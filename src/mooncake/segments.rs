//! Is a store registered with the master as planned? Read from the master's admin server and
//! judged here.
//!
//! The master lists every mounted segment at `GET /get_segments_detail` (JSON: `segment_name`,
//! `client_id`, `size_bytes`, `protocol`, `status`; `master_admin_service.cpp`, checked against the
//! pinned `mooncake-transfer-engine-non-cuda` 0.3.13.post1 on loopback). A store's segment name is
//! its `MOONCAKE_LOCAL_HOSTNAME`, with a port appended when the name has none (a random one from
//! `MC_STORE_CLIENT_MIN_PORT`..`MAX`), so two stores of one node share the host part. What tells
//! them apart is the client id each store prints at start (`client_service.cpp`:
//! `client_id=<hi>-<lo>`), which the master lists with every segment of that client. A store may
//! mount its memory as several segments (`real_client.cpp`: "Mounting segment: N bytes, M of
//! T"): its registered size is the sum over its client's segments. Pure.

use serde::Deserialize;

use super::size::Bytes;

/// The master's admin route that lists the segments with their sizes.
pub const SEGMENTS_DETAIL_PATH: &str = "/get_segments_detail";

/// One segment as the master lists it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Segment {
    pub segment_name: String,
    #[serde(default)]
    pub client_id: String,
    pub size_bytes: u64,
    #[serde(default)]
    pub protocol: String,
    #[serde(default)]
    pub status: String,
}

#[derive(Deserialize)]
struct Detail {
    segments: Vec<Segment>,
}

/// Parse `/get_segments_detail`.
pub fn parse_detail(body: &str) -> Result<Vec<Segment>, String> {
    serde_json::from_str::<Detail>(body)
        .map(|d| d.segments)
        .map_err(|e| format!("{SEGMENTS_DETAIL_PATH} is not the master's segment list: {e}"))
}

/// The client id in one line of a store's output (`... client_service.cpp:423]
/// client_id=17459384478044347803-10773048445166344109`; older releases print it from
/// `client.cpp`).
pub fn client_id_in(line: &[u8]) -> Option<String> {
    const MARK: &[u8] = b"] client_id=";
    let at = line.windows(MARK.len()).position(|w| w == MARK)? + MARK.len();
    let id: Vec<u8> = line[at..]
        .iter()
        .copied()
        .take_while(|b| b.is_ascii_digit() || *b == b'-')
        .collect();
    (!id.is_empty()).then(|| String::from_utf8_lossy(&id).into_owned())
}

/// What the plan says a store registers, and what its own output said so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    /// `MOONCAKE_LOCAL_HOSTNAME` (`host` or `host:port`).
    pub hostname: String,
    /// The planned segment (`None` when the size comes from a `MOONCAKE_CONFIG_PATH` file mcsup
    /// does not read).
    pub size: Option<u64>,
    /// The planned protocol (`MOONCAKE_PROTOCOL`, Mooncake's default `tcp`).
    pub protocol: String,
    /// The client id the store printed, once it has.
    pub client_id: Option<String>,
    /// The store's transfer engine found no RDMA device ("Found 0 HCAs"): with protocol `rdma`
    /// it falls back to TCP silently, while the master still lists the segment as `rdma`.
    pub found_no_hca: bool,
}

/// The answer of one look at the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Registered as planned: what to say in the `ready` event.
    Registered(String),
    /// Not (fully) listed yet: look again.
    NotYet(String),
    /// Listed, but not as planned: readiness fails with this.
    Mismatch(String),
}

/// The host of a Mooncake name (`[v6]:port`, `host:port`, `host`): what a segment name and a
/// `MOONCAKE_LOCAL_HOSTNAME` share when one has a port and the other not.
pub fn host_part(name: &str) -> &str {
    if let Some(rest) = name.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match name.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => name,
    }
}

/// Does the segment name belong to a store registered as `hostname`?
fn named_as(segment: &str, hostname: &str) -> bool {
    if host_part(hostname) != hostname {
        segment == hostname // the port was given: the name is exact
    } else {
        host_part(segment) == hostname
    }
}

/// Judge the master's list against what this store should have registered. Before the store
/// printed its client id, its segment is looked for by name; another store of the same host
/// (a second store on the node, or another "node" on the same machine) may hold that name, so a
/// mismatch found that way is only "not yet" (the readiness timeout reports it), never final.
pub fn judge(e: &Expected, segments: &[Segment]) -> Verdict {
    match judge_listed(e, segments) {
        Verdict::Mismatch(m) if e.client_id.is_none() => Verdict::NotYet(m),
        v => v,
    }
}

fn judge_listed(e: &Expected, segments: &[Segment]) -> Verdict {
    let mine: Vec<&Segment> = match &e.client_id {
        Some(id) => segments.iter().filter(|s| &s.client_id == id).collect(),
        None => segments
            .iter()
            .filter(|s| named_as(&s.segment_name, &e.hostname))
            .collect(),
    };
    let whose = match &e.client_id {
        Some(id) => format!("client {id}"),
        None => format!("{} (its client id not printed yet)", e.hostname),
    };
    if mine.is_empty() {
        let listed: Vec<&str> = segments.iter().map(|s| s.segment_name.as_str()).collect();
        return Verdict::NotYet(format!(
            "the master lists no segment of {whose} yet ({} listed{}{})",
            listed.len(),
            if listed.is_empty() { "" } else { ": " },
            listed.join(", ")
        ));
    }
    let names: Vec<&str> = mine.iter().map(|s| s.segment_name.as_str()).collect();
    let names = names.join(", ");
    if let Some(bad) = mine
        .iter()
        .find(|s| !s.status.is_empty() && s.status != "OK")
    {
        return Verdict::NotYet(format!(
            "segment {} is {} at the master, not OK",
            bad.segment_name, bad.status
        ));
    }
    let held: u64 = mine
        .iter()
        .map(|s| s.size_bytes)
        .fold(0, u64::saturating_add);
    if e.client_id.is_some() {
        if let Some(other) = mine
            .iter()
            .find(|s| !named_as(&s.segment_name, &e.hostname))
        {
            return Verdict::Mismatch(format!(
                "the store registered segment {} but the plan names it {} (MOONCAKE_LOCAL_HOSTNAME): peers would look for the wrong name; a wrapper or MOONCAKE_CONFIG_PATH file overrides local_hostname",
                other.segment_name, e.hostname
            ));
        }
    }
    if let Some(planned) = e.size {
        if held < planned {
            return Verdict::Mismatch(format!(
                "the master holds {} for segment {names} ({held} bytes) but the plan gives this store {} ({planned} bytes): the store was started with a smaller MOONCAKE_GLOBAL_SEGMENT_SIZE (a wrapper, or a MOONCAKE_CONFIG_PATH file), or it registered less memory than asked: the locked-memory limit (ulimit -l, see `mcsup preflight`), the NIC's max_mr_size (MC_MAX_MR_SIZE), or hugepages (MC_STORE_USE_HUGEPAGE, /proc/sys/vm/nr_hugepages)",
                Bytes(held),
                Bytes(planned)
            ));
        }
        if held > planned {
            return Verdict::Mismatch(format!(
                "the master holds {} for segment {names} ({held} bytes), more than the plan's {} ({planned} bytes): the store was started with another MOONCAKE_GLOBAL_SEGMENT_SIZE (a wrapper, or a MOONCAKE_CONFIG_PATH file), and the node's memory budget no longer holds",
                Bytes(held),
                Bytes(planned)
            ));
        }
    }
    let protocols: Vec<&str> = mine.iter().map(|s| s.protocol.as_str()).collect();
    if let Some(p) = protocols
        .iter()
        .find(|p| !p.is_empty() && !p.eq_ignore_ascii_case(&e.protocol))
    {
        return Verdict::Mismatch(format!(
            "segment {names} is registered over {p}, the plan says {} (MOONCAKE_PROTOCOL): a wrapper or MOONCAKE_CONFIG_PATH file sets another protocol",
            e.protocol
        ));
    }
    if e.found_no_hca && e.protocol.eq_ignore_ascii_case("rdma") {
        return Verdict::Mismatch(format!(
            "segment {names} is listed as rdma, but the store's transfer engine found 0 HCAs and serves it over TCP (Mooncake falls back silently): check MOONCAKE_DEVICE names the node's HCAs, that /dev/infiniband is visible in the container, and `mcsup preflight`; set MOONCAKE_PROTOCOL=tcp if TCP is intended"
        ));
    }
    Verdict::Registered(format!(
        "registered with the master as {names}: {} over {}{}",
        Bytes(held),
        protocols.first().copied().unwrap_or(e.protocol.as_str()),
        e.client_id
            .as_ref()
            .map(|id| format!(" (client {id})"))
            .unwrap_or_default()
    ))
}

/// The job's stores (as the nodes' status files list them) against the master's
/// `master_total_capacity_bytes`: what `status --job` prints and what the master's node checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capacity {
    pub stores: usize,
    pub ready: usize,
    pub nodes: usize,
    /// The planned segments of every store, summed.
    pub planned: u64,
    pub held: u64,
}

impl Capacity {
    /// From each node's units: (ready, planned segment) of its stores.
    pub fn of(held: u64, nodes: &[Vec<(bool, u64)>]) -> Capacity {
        let stores = nodes.iter().map(Vec::len).sum();
        Capacity {
            stores,
            ready: nodes.iter().flatten().filter(|(r, _)| *r).count(),
            nodes: nodes.iter().filter(|n| !n.is_empty()).count(),
            planned: nodes
                .iter()
                .flatten()
                .map(|(_, b)| *b)
                .fold(0, u64::saturating_add),
            held,
        }
    }

    /// Every store is ready and the master holds exactly their segments.
    pub fn whole(&self) -> bool {
        self.stores > 0 && self.ready == self.stores && self.held == self.planned
    }

    /// `Mooncake: 3 stores, 1.2 TiB of 1.2 TiB`, and what is wrong when it is.
    pub fn text(&self) -> String {
        let mut t = format!(
            "Mooncake: {} store(s) on {} node(s), {} of {} registered",
            self.stores,
            self.nodes,
            Bytes(self.held),
            Bytes(self.planned)
        );
        if self.ready < self.stores {
            t.push_str(&format!(" ({} of {} ready)", self.ready, self.stores));
        } else if self.held < self.planned {
            t.push_str(&format!(
                ": the master holds {} less than the stores' planned segments; each store's ready event says what it registered, `mcsup status` on their nodes says which is missing",
                Bytes(self.planned - self.held)
            ));
        } else if self.held > self.planned {
            t.push_str(&format!(
                ": the master holds {} more than this job's stores plan: another client mounts memory into this master (a worker's embedded store with MOONCAKE_GLOBAL_SEGMENT_SIZE not 0, or another job on the same master ports)",
                Bytes(self.held - self.planned)
            ));
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // What the pinned master answered for two stores on loopback (0.3.13.post1).
    const DETAIL: &str = r#"{"total_segments":2,"segments":[{"segment_name":"127.0.0.1:14098","segment_id":"1-2","client_id":"17459384478044347803-10773048445166344109","base_address":"0x7f","size_bytes":67108864,"size_human":"0.0625 GiB","te_endpoint":"127.0.0.1:14098","protocol":"rdma","status":"OK","allocator_used_bytes":0,"allocator_capacity_bytes":67108864,"allocator_usage_percent":0E0},{"segment_name":"127.0.0.1:14266","client_id":"91703353032910019-16480630686871158182","size_bytes":104857600,"protocol":"tcp","status":"OK"}]}"#;

    fn expected() -> Expected {
        Expected {
            hostname: "127.0.0.1".into(),
            size: Some(100 << 20),
            protocol: "tcp".into(),
            client_id: Some("91703353032910019-16480630686871158182".into()),
            found_no_hca: false,
        }
    }

    #[test]
    fn the_client_id_comes_from_the_stores_first_lines() {
        let line = b"I1203 16:59:28.478454  4321 client_service.cpp:423] client_id=91703353032910019-16480630686871158182";
        assert_eq!(
            client_id_in(line).as_deref(),
            Some("91703353032910019-16480630686871158182")
        );
        let older = b"I0115 11:21:21.386466 3662714 client.cpp:46] client_id=17384060875720772085-9293998721192312501";
        assert!(client_id_in(older).is_some());
        assert_eq!(client_id_in(b"my client_id=5"), None);
        assert_eq!(client_id_in(b"I1 x] client_id="), None);
    }

    #[test]
    fn a_store_is_found_by_its_client_id_among_the_nodes_stores() {
        let segs = parse_detail(DETAIL).unwrap();
        match judge(&expected(), &segs) {
            Verdict::Registered(d) => assert_eq!(
                d,
                "registered with the master as 127.0.0.1:14266: 100 MiB over tcp (client 91703353032910019-16480630686871158182)"
            ),
            v => panic!("{v:?}"),
        }
        // Without the id (not printed yet), by name: here the first store of 127.0.0.1 is
        // 64 MiB over rdma, so the sizes of both add up.
        let by_name = Expected {
            client_id: None,
            size: Some(164 << 20),
            protocol: "rdma".into(),
            ..expected()
        };
        assert!(matches!(judge(&by_name, &segs), Verdict::NotYet(m) if m.contains("over tcp")));
        // Found by name, as planned: registered.
        let one = Expected {
            client_id: None,
            hostname: "127.0.0.1:14266".into(),
            ..expected()
        };
        assert!(matches!(judge(&one, &segs), Verdict::Registered(_)));
    }

    #[test]
    fn a_smaller_segment_fails_with_both_sizes_and_the_likely_causes() {
        let segs = parse_detail(DETAIL).unwrap();
        let e = Expected {
            size: Some(128 << 20),
            ..expected()
        };
        let Verdict::Mismatch(m) = judge(&e, &segs) else {
            panic!()
        };
        assert!(m.contains("holds 100 MiB"), "{m}");
        assert!(m.contains("(104857600 bytes)"), "{m}");
        assert!(
            m.contains("gives this store 128 MiB (134217728 bytes)"),
            "{m}"
        );
        assert!(m.contains("ulimit -l") && m.contains("max_mr_size") && m.contains("hugepages"));
        let more = Expected {
            size: Some(64 << 20),
            ..expected()
        };
        assert!(
            matches!(judge(&more, &segs), Verdict::Mismatch(m) if m.contains("more than the plan's 64 MiB"))
        );
        // A config file's size is not known: registration alone counts.
        let unknown = Expected {
            size: None,
            ..expected()
        };
        assert!(matches!(judge(&unknown, &segs), Verdict::Registered(_)));
    }

    #[test]
    fn not_listed_yet_is_retried_and_says_what_is_listed() {
        let e = Expected {
            client_id: Some("1-2".into()),
            ..expected()
        };
        let segs = parse_detail(DETAIL).unwrap();
        let Verdict::NotYet(d) = judge(&e, &segs) else {
            panic!()
        };
        assert_eq!(
            d,
            "the master lists no segment of client 1-2 yet (2 listed: 127.0.0.1:14098, 127.0.0.1:14266)"
        );
        assert!(matches!(judge(&e, &[]), Verdict::NotYet(d) if d.ends_with("(0 listed)")));
        assert!(parse_detail("Failed to query segment").is_err());
    }

    #[test]
    fn a_wrong_name_or_a_silent_tcp_fallback_is_a_mismatch() {
        let segs = parse_detail(DETAIL).unwrap();
        let renamed = Expected {
            hostname: "10.0.0.2".into(),
            ..expected()
        };
        assert!(
            matches!(judge(&renamed, &segs), Verdict::Mismatch(m) if m.contains("plan names it 10.0.0.2"))
        );
        let fallback = Expected {
            client_id: Some("17459384478044347803-10773048445166344109".into()),
            size: Some(64 << 20),
            protocol: "rdma".into(),
            found_no_hca: true,
            hostname: "127.0.0.1".into(),
        };
        assert!(
            matches!(judge(&fallback, &segs), Verdict::Mismatch(m) if m.contains("found 0 HCAs"))
        );
        // A name with a port is exact.
        assert!(named_as("127.0.0.1:14266", "127.0.0.1:14266"));
        assert!(!named_as("127.0.0.1:14098", "127.0.0.1:14266"));
        assert!(named_as("[fe80::1]:5", "fe80::1"));
    }

    #[test]
    fn the_jobs_capacity_is_the_sum_of_its_stores_planned_segments() {
        let mib = 1u64 << 20;
        let nodes = vec![vec![(true, 32 * mib)], vec![(true, 64 * mib)], vec![]];
        let c = Capacity::of(96 << 20, &nodes);
        assert!(c.whole());
        assert_eq!(
            c.text(),
            "Mooncake: 2 store(s) on 2 node(s), 96 MiB of 96 MiB registered"
        );
        let starting = vec![vec![(true, 32 * mib)], vec![(false, 64 * mib)]];
        let c = Capacity::of(96 << 20, &starting);
        assert!(
            !c.whole() && c.text().ends_with("(1 of 2 ready)"),
            "{}",
            c.text()
        );
        let c = Capacity::of(32 << 20, &nodes);
        assert!(!c.whole());
        assert!(
            c.text().contains(": the master holds 64 MiB less"),
            "{}",
            c.text()
        );
        assert!(Capacity::of(4 << 30, &nodes)
            .text()
            .contains("more than this job's stores plan"));
        assert!(
            !Capacity::of(96 << 20, &[]).whole(),
            "no store: nothing to hold"
        );
    }
}
