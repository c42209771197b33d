//! Where mcsup runs: the node's name and address, the job's node list, the infra node.
//!
//! [`NodeInputs`] gathers what the user and Slurm said (flags, `SLURM_*` variables) as plain
//! values; [`resolve`] turns them into a [`NodeContext`] using an injectable name resolver, so
//! the logic is testable without DNS. Only [`NodeInputs::from_env`] and [`lookup_all`] touch the
//! system.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::domain::Diagnostic;

/// Whether the master runs on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MasterMode {
    /// On the infra node (the first node of the job's node list) only.
    #[default]
    Auto,
    /// On this node, whatever the node list says.
    On,
    /// Never on this node (the master runs elsewhere).
    Off,
}

/// Raw inputs, before resolution.
#[derive(Debug, Clone, Default)]
pub struct NodeInputs {
    /// `--node`, else `SLURMD_NODENAME`.
    pub node: Option<String>,
    /// `--nodelist`, else `SLURM_JOB_NODELIST` (hostlist syntax).
    pub nodelist: Option<String>,
    /// `SLURM_NODEID`.
    pub node_id: Option<String>,
    /// `SLURM_JOB_ID`.
    pub job_id: Option<String>,
    /// `--node-ip`: this node's address, overriding resolution.
    pub node_ip: Option<String>,
    /// `--master-addr`: the infra node's address, overriding resolution.
    pub master_addr: Option<String>,
    pub master: MasterMode,
    /// This machine's host name (used outside Slurm).
    pub hostname: String,
    /// Directory relative paths are resolved against.
    pub cwd: PathBuf,
    /// The machine's temporary directory (`TMPDIR`, else `/tmp`); empty means `/tmp`.
    pub tmp_dir: PathBuf,
}

impl NodeInputs {
    /// Fill the Slurm-provided fields from the process environment (flags take precedence and are
    /// set by the caller before or after).
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        NodeInputs {
            node: var("SLURMD_NODENAME"),
            nodelist: var("SLURM_JOB_NODELIST"),
            node_id: var("SLURM_NODEID"),
            job_id: var("SLURM_JOB_ID"),
            hostname: nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "localhost".into()),
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            tmp_dir: std::env::temp_dir(),
            ..Default::default()
        }
    }
}

/// The resolved node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeContext {
    pub name: String,
    pub ip: String,
    pub node_id: u32,
    pub nodelist: Vec<String>,
    pub infra_node: String,
    pub infra_ip: String,
    pub runs_master: bool,
    pub job_id: Option<String>,
    /// Inside a Slurm job (or given a node list) rather than a single local machine.
    pub slurm: bool,
    pub cwd: PathBuf,
    /// The address of every node of `nodelist`, in order (resolved like this node's; a name that
    /// does not resolve stands for itself).
    pub node_ips: Vec<String>,
    /// This job's scratch directory on this node (`<tmp>/mcsup-<job>-<node>`): data directories
    /// of etcd and NATS, which srtctl keeps in its container's private `/tmp`.
    pub scratch_dir: PathBuf,
    /// Things worth telling the user (e.g. a name that did not resolve).
    pub warnings: Vec<String>,
}

/// Why the node could not be resolved. Rendered as a [`Diagnostic`] (the option or recipe key,
/// what is wrong, the fix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeError {
    BadNodelist {
        list: String,
        reason: String,
    },
    TooManyNodes {
        list: String,
        count: u128,
    },
    NotInList {
        node: String,
        list: String,
    },
    /// `what` is the option or recipe key that gave `value`.
    BadAddress {
        what: String,
        value: String,
    },
    BadName {
        name: String,
    },
}

/// A comma-separated node list as an error shows it: whole up to 8 nodes, else the first 4,
/// the last 2 and the count (round 4's D19: 4,096 nodes printed twice made a 47 kB message).
fn abbreviated(list: &str) -> String {
    let nodes: Vec<&str> = list.split(',').collect();
    if nodes.len() <= 8 {
        return list.to_string();
    }
    format!(
        "{},…,{}: {} nodes",
        nodes[..4].join(","),
        nodes[nodes.len() - 2..].join(","),
        nodes.len()
    )
}

impl NodeError {
    /// The error as a [`Diagnostic`].
    pub fn diagnostic(&self) -> Diagnostic {
        let (key, message, fix) = match self {
            NodeError::BadNodelist { list, reason } => (
                "--nodelist",
                format!("cannot parse the node list `{list}`: {reason}"),
                "use Slurm hostlist syntax, e.g. gpu-[01-04],infra1".to_string(),
            ),
            NodeError::TooManyNodes { list, count } => (
                "--nodelist",
                format!("the node list `{list}` names {count} nodes, more than the {MAX_NODES} mcsup plans for (every node's address is resolved)"),
                format!("check --nodelist / SLURM_JOB_NODELIST; a job this large needs its nodes split into groups of at most {MAX_NODES}, each with its own recipe"),
            ),
            NodeError::NotInList { node, list } => (
                "--node",
                format!(
                    "node `{node}` is not in the job's node list ({})",
                    abbreviated(list)
                ),
                "pass --node with one of the job's nodes (or check --nodelist / SLURM_JOB_NODELIST)"
                    .to_string(),
            ),
            NodeError::BadAddress { what, value } => (
                what.as_str(),
                format!("`{value}` is not an IP address"),
                "pass a numeric address such as 10.0.0.5".to_string(),
            ),
            NodeError::BadName { name } => (
                "--node",
                format!("node name `{name}` is not usable: it names this node's files in the log directory"),
                "pass --node with a host name (letters, digits, '-', '_', '.'; not `.` or `..`)".to_string(),
            ),
        };
        Diagnostic::new(key, message, fix)
    }
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.diagnostic().fmt(f)
    }
}

impl std::error::Error for NodeError {}

/// Resolves a host name to an address; `None` when it does not resolve.
pub type Resolver<'a> = &'a dyn Fn(&str) -> Option<IpAddr>;

/// Resolves many host names at once: one [`Answer`] per name, in order.
pub type Lookup<'a> = &'a dyn Fn(&[String]) -> Vec<Answer>;

/// What the resolver said of one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Its addresses (the system resolver's order).
    Found(Vec<IpAddr>),
    /// The resolver answered that it does not resolve, and why.
    Failed(String),
    /// No answer within the budget, or a stop request came first.
    NoAnswer,
}

impl Answer {
    /// The address mcsup uses: the first IPv4 one, else the first.
    pub fn address(&self) -> Option<IpAddr> {
        match self {
            Answer::Found(a) => a.iter().find(|a| a.is_ipv4()).or(a.first()).copied(),
            _ => None,
        }
    }
}

/// At most this many lookups run at once (a node list of thousands behind a resolver that takes
/// seconds per name: round 4's N28 measured 64 nodes in 10 s one by one).
pub const PARALLEL_LOOKUPS: usize = 32;

/// How long `plan` and `run` wait for the whole node list's addresses; a name without an answer
/// by then stands for itself, and the warnings say which.
pub const LOOKUP_BUDGET: Duration = Duration::from_secs(10);

/// Resolve `names` with the system resolver: at most [`PARALLEL_LOOKUPS`] at once, every answer
/// within `budget`, and no longer once `stop()` says so (asked every 50 ms). A lookup still
/// running then finishes on its own thread, unread: `getaddrinfo` cannot be cancelled.
pub fn lookup_all(names: &[String], budget: Duration, stop: &dyn Fn() -> bool) -> Vec<Answer> {
    lookup_with(names, Arc::new(system_lookup), budget, stop)
}

fn system_lookup(name: &str) -> Answer {
    match (name, 0).to_socket_addrs() {
        Ok(a) => Answer::Found(a.map(|a| a.ip()).collect()),
        Err(e) => Answer::Failed(e.to_string()),
    }
}

/// [`lookup_all`] with any resolver (tests give one that hangs or counts).
pub fn lookup_with(
    names: &[String],
    lookup: Arc<dyn Fn(&str) -> Answer + Send + Sync>,
    budget: Duration,
    stop: &dyn Fn() -> bool,
) -> Vec<Answer> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::{self, RecvTimeoutError};
    let deadline = Instant::now() + budget;
    let mut answers = vec![Answer::NoAnswer; names.len()];
    let queue: VecDeque<(usize, String)> = names.iter().cloned().enumerate().collect();
    let queue = Arc::new(Mutex::new(queue));
    let quit = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    for _ in 0..PARALLEL_LOOKUPS.min(names.len()) {
        let (queue, quit, tx, lookup) = (queue.clone(), quit.clone(), tx.clone(), lookup.clone());
        let worker = move || {
            while !quit.load(Ordering::Relaxed) {
                let next = queue.lock().ok().and_then(|mut q| q.pop_front());
                let Some((i, name)) = next else { break };
                if tx.send((i, lookup(&name))).is_err() {
                    break;
                }
            }
        };
        // Fewer threads than asked (a thread limit) only means fewer lookups at once; none at
        // all, every name without an answer.
        if std::thread::Builder::new()
            .name("mcsup-lookup".into())
            .spawn(worker)
            .is_err()
        {
            break;
        }
    }
    drop(tx);
    let mut left = names.len();
    while left > 0 && !stop() {
        let Some(wait) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        match rx.recv_timeout(wait.min(Duration::from_millis(50))) {
            Ok((i, a)) => {
                answers[i] = a;
                left -= 1;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    quit.store(true, Ordering::Relaxed);
    answers
}

/// The largest job mcsup plans for (every node's address is resolved).
pub const MAX_NODES: usize = 4096;

/// Expand a Slurm hostlist expression.
pub fn expand_nodelist(list: &str) -> Result<Vec<String>, NodeError> {
    let bad = |reason: String| NodeError::BadNodelist {
        list: list.to_string(),
        reason,
    };
    if list.trim().is_empty() {
        return Err(bad("it is empty".into()));
    }
    // Count before expanding: `n[1-10000000]` would build ten million names (19 s, 2 GB) only
    // to be refused.
    let too_many = |count: u128| NodeError::TooManyNodes {
        list: list.to_string(),
        count,
    };
    if let Some(n) = nodelist_size(list.trim()).filter(|n| *n > MAX_NODES as u128) {
        return Err(too_many(n));
    }
    if let Some(blank) = list.trim().chars().find(|c| c.is_whitespace()) {
        return Err(bad(format!(
            "it holds a blank ({blank:?}): Slurm's node names have none, and dropping it would name another node (fix: remove it, or separate nodes with `,`)"
        )));
    }
    if let Some(range) = reversed_range(list) {
        return Err(bad(format!(
            "the range `{range}` counts down: Slurm refuses it (write it low-high)"
        )));
    }
    let nodes = hostlist_parser::parse(list.trim()).map_err(|e| bad(e.to_string()))?;
    if nodes.is_empty() {
        return Err(bad("it names no node".into()));
    }
    if nodes.len() > MAX_NODES {
        return Err(too_many(nodes.len() as u128));
    }
    // The parser drops a name it has seen: look for one part by part.
    let mut seen = std::collections::HashSet::new();
    for part in top_level_parts(list.trim()) {
        let names = hostlist_parser::parse(part).map_err(|e| bad(e.to_string()))?;
        // `n[1,1]`: the parser keeps one; the bracket counted two.
        if nodelist_size(part).is_some_and(|n| n != names.len() as u128) {
            return Err(bad(format!(
                "`{part}` names a node more than once: a job's node list names each node once (which of its places would be the node's rank?)"
            )));
        }
        if let Some(twice) = names.into_iter().find(|n| !seen.insert(n.clone())) {
            return Err(bad(format!(
                "`{twice}` is in it more than once: a job's node list names each node once (which of its places would be the node's rank?)"
            )));
        }
    }
    Ok(nodes)
}

/// The comma-separated parts of a hostlist outside brackets (`n[1-2],m3` -> `n[1-2]`, `m3`).
fn top_level_parts(list: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut from) = (Vec::new(), 0usize, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&list[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[from..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// The first `lo-hi` inside brackets of a hostlist whose `hi` is below its `lo` (`n[5-1]`).
fn reversed_range(list: &str) -> Option<&str> {
    let mut rest = list;
    while let Some(open) = rest.find('[') {
        let inside = &rest[open + 1..];
        let close = inside.find(']')?;
        for part in inside[..close].split(',') {
            if let Some((lo, hi)) = part.trim().split_once('-') {
                if let (Ok(lo), Ok(hi)) = (lo.parse::<u128>(), hi.parse::<u128>()) {
                    if hi < lo {
                        return Some(part.trim());
                    }
                }
            }
        }
        rest = &inside[close + 1..];
    }
    None
}

/// Node names in the order people count them: `n2` before `n10` (by the number a name ends in,
/// after its prefix), then by the name itself.
pub fn node_order(a: &str, b: &str) -> std::cmp::Ordering {
    fn key(name: &str) -> (&str, Option<u128>, &str) {
        let (prefix, digits) = split_number(name);
        (prefix, digits.parse().ok(), name)
    }
    key(a).cmp(&key(b))
}

/// A node name as its prefix and the digits it ends in (`gpu-07` -> `gpu-`, `07`; none: `""`).
fn split_number(name: &str) -> (&str, &str) {
    let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
    name.split_at(name.len() - digits)
}

/// Node names as one Slurm hostlist expression, for people: `gpu-[01-04,07],infra1`. Names that
/// end in digits are folded into ranges by prefix and digit count (in the order each prefix first
/// appears, numbers sorted, repeats once); other names stay as they are. Names that contain
/// hostlist syntax are quoted as they are (the reader sees them, the parser is not promised).
pub fn compress_nodelist<S: AsRef<str>>(names: &[S]) -> String {
    // A name as (prefix, its number's digits, the number), when it ends in one.
    fn split(name: &str) -> Option<(&str, &str, u64)> {
        let (prefix, tail) = split_number(name);
        if tail.is_empty() || tail.len() > 18 || prefix.contains(['[', ']', ',']) {
            return None;
        }
        Some((prefix, tail, tail.parse().ok()?))
    }
    // The zero-padded widths each prefix uses (`gpu-01`): `gpu-10` joins `gpu-[01-09]`.
    let padded: std::collections::HashSet<(&str, usize)> = names
        .iter()
        .filter_map(|n| split(n.as_ref()))
        .filter(|(_, tail, _)| tail.len() > 1 && tail.starts_with('0'))
        .map(|(prefix, tail, _)| (prefix, tail.len()))
        .collect();
    // (prefix, padded width or 0) -> numbers, in first-appearance order.
    let mut groups: Vec<((&str, usize), Vec<u64>)> = Vec::new();
    let mut index: std::collections::HashMap<(&str, usize), usize> = Default::default();
    let mut out: Vec<String> = Vec::new();
    // Where each group goes among the plain names.
    let mut slots: Vec<Option<usize>> = Vec::new();
    for name in names {
        let name = name.as_ref();
        match split(name) {
            Some((prefix, tail, n)) => {
                let width = if padded.contains(&(prefix, tail.len())) {
                    tail.len()
                } else {
                    0
                };
                let key = (prefix, width);
                let k = *index.entry(key).or_insert_with(|| {
                    groups.push((key, Vec::new()));
                    slots.push(Some(groups.len() - 1));
                    out.push(String::new());
                    groups.len() - 1
                });
                groups[k].1.push(n);
            }
            None => {
                slots.push(None);
                out.push(name.to_string());
            }
        }
    }
    for (slot, text) in slots.iter().zip(out.iter_mut()) {
        let Some(k) = slot else { continue };
        let ((prefix, width), numbers) = &mut groups[*k];
        numbers.sort_unstable();
        numbers.dedup();
        if numbers.len() == 1 {
            *text = format!("{prefix}{:0width$}", numbers[0], width = *width);
            continue;
        }
        let mut ranges: Vec<String> = Vec::new();
        let mut i = 0;
        while i < numbers.len() {
            let mut j = i;
            while j + 1 < numbers.len() && numbers[j + 1] == numbers[j] + 1 {
                j += 1;
            }
            ranges.push(if i == j {
                format!("{:0w$}", numbers[i], w = *width)
            } else {
                format!("{:0w$}-{:0w$}", numbers[i], numbers[j], w = *width)
            });
            i = j + 1;
        }
        *text = format!("{prefix}[{}]", ranges.join(","));
    }
    out.join(",")
}

/// How many names a hostlist expands to, from its ranges alone (`a[1-4,7]-b[1-2],c` is
/// 5 x 2 + 1), repeats included; saturating. `None` for text this does not recognise: the parser
/// reports it.
fn nodelist_size(list: &str) -> Option<u128> {
    fn number(s: &str) -> Option<u64> {
        let s = s.trim();
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    }
    let mut total: u128 = 0;
    let mut term: u128 = 1;
    let mut rest = list;
    loop {
        let Some(i) = rest.find(['[', ',', ']']) else {
            return Some(total.saturating_add(term));
        };
        match rest.as_bytes()[i] {
            b'[' => {
                let inner = &rest[i + 1..];
                let end = inner.find(']')?;
                let mut size: u128 = 0;
                for item in inner[..end].split(',') {
                    let n = match item.split_once('-') {
                        Some((a, b)) => u128::from(number(a)?.abs_diff(number(b)?)) + 1,
                        None => number(item).map(|_| 1)?,
                    };
                    size = size.saturating_add(n);
                }
                term = term.saturating_mul(size);
                rest = &inner[end + 1..];
            }
            b',' => {
                total = total.saturating_add(term);
                term = 1;
                rest = &rest[i + 1..];
            }
            _ => return None,
        }
    }
}

/// Turn inputs into a [`NodeContext`], one name at a time through `resolver`. `addresses` is the
/// recipe's `mcsup.node_addresses`.
pub fn resolve(
    inputs: &NodeInputs,
    addresses: &BTreeMap<String, String>,
    resolver: Resolver<'_>,
) -> Result<NodeContext, NodeError> {
    resolve_with(inputs, addresses, &|names| {
        names
            .iter()
            .map(|n| resolver(n).map_or(Answer::Failed(String::new()), |a| Answer::Found(vec![a])))
            .collect()
    })
}

/// [`resolve`] with every name the node list needs looked up in one call (the system's
/// [`lookup_all`]: concurrent and bounded).
pub fn resolve_with(
    inputs: &NodeInputs,
    addresses: &BTreeMap<String, String>,
    lookup: Lookup<'_>,
) -> Result<NodeContext, NodeError> {
    let mut warnings = Vec::new();
    let slurm = inputs.nodelist.is_some() || inputs.job_id.is_some();
    let name = inputs
        .node
        .clone()
        .unwrap_or_else(|| inputs.hostname.clone());
    // The node name names files (`<log_dir>/<node>.status.json`): a path component only.
    let usable = |n: &str| {
        !n.is_empty()
            && n != "."
            && n != ".."
            && n.len() <= 255
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    if !usable(&name) {
        return Err(NodeError::BadName { name });
    }
    let nodelist = match &inputs.nodelist {
        Some(l) => expand_nodelist(l)?,
        None => vec![name.clone()],
    };
    let position = nodelist.iter().position(|n| *n == name);
    if inputs.nodelist.is_some() && position.is_none() {
        return Err(NodeError::NotInList {
            node: name,
            list: nodelist.join(","),
        });
    }
    // The position in the JOB's node list, not SLURM_NODEID: inside a one-node step
    // (`srun -N1 -w n2`) SLURM_NODEID is relative to the step and is 0 on every node.
    let node_id = position
        .filter(|_| inputs.nodelist.is_some())
        .map(|p| p as u32)
        .or_else(|| {
            inputs
                .node_id
                .as_deref()
                .and_then(|s| s.trim().parse().ok())
        })
        .unwrap_or(0);
    let infra_node = nodelist.first().cloned().unwrap_or_else(|| name.clone());
    let runs_master = match inputs.master {
        MasterMode::Auto => infra_node == name,
        MasterMode::On => true,
        MasterMode::Off => false,
    };

    let parse_ip = |what: &str, v: &str| {
        v.trim()
            .parse::<IpAddr>()
            .map(|a| a.to_string())
            .map_err(|_| NodeError::BadAddress {
                what: what.into(),
                value: v.into(),
            })
    };
    let answers = if slurm {
        look_up(
            &nodelist,
            &[(&name, &inputs.node_ip), (&infra_node, &inputs.master_addr)],
            addresses,
            lookup,
            &mut warnings,
        )
    } else {
        BTreeMap::new()
    };
    let address_of = |node: &str, warnings: &mut Vec<String>| -> Result<String, NodeError> {
        if let Some(a) = addresses.get(node) {
            return parse_ip(&format!("mcsup.node_addresses.{node}"), a);
        }
        if !slurm {
            // Local mode: everything talks over loopback.
            return Ok("127.0.0.1".into());
        }
        match answers.get(node).and_then(Answer::address) {
            Some(ip) => Ok(ip.to_string()),
            None => {
                warnings.push(format!(
                    "node `{node}` does not resolve to an address{}; using the name itself. Set mcsup.node_addresses.{node} (or --node-ip / --master-addr)",
                    match answers.get(node) {
                        Some(Answer::NoAnswer) => " (no answer from the resolver in time)",
                        _ => "",
                    }
                ));
                Ok(node.to_string())
            }
        }
    };
    let ip = match &inputs.node_ip {
        Some(v) => parse_ip("--node-ip", v)?,
        None => address_of(&name, &mut warnings)?,
    };
    let infra_ip = match &inputs.master_addr {
        Some(v) => parse_ip("--master-addr", v)?,
        None if infra_node == name => ip.clone(),
        None => address_of(&infra_node, &mut warnings)?,
    };
    let node_ips = nodelist
        .iter()
        .map(|n| {
            if *n == name {
                Ok(ip.clone())
            } else if *n == infra_node {
                Ok(infra_ip.clone())
            } else {
                address_of(n, &mut Vec::new())
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(NodeContext {
        node_ips,
        ip,
        node_id,
        nodelist,
        infra_node,
        infra_ip,
        runs_master,
        job_id: inputs.job_id.clone(),
        slurm,
        cwd: inputs.cwd.clone(),
        scratch_dir: scratch_dir(inputs, &name),
        name,
        warnings,
    })
}

/// This job's scratch directory on the node: `<tmp>/mcsup-<job>-<node>`.
fn scratch_dir(inputs: &NodeInputs, name: &str) -> PathBuf {
    let tmp = if inputs.tmp_dir.as_os_str().is_empty() {
        PathBuf::from("/tmp")
    } else {
        inputs.tmp_dir.clone()
    };
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    tmp.join(format!(
        "mcsup-{}-{}",
        safe(inputs.job_id.as_deref().unwrap_or("local")),
        safe(name)
    ))
}

/// Every node name's answer, looked up at once: the node list but the names `addresses` or an
/// override (`(name, --node-ip)`, `(infra node, --master-addr)`) gives. Names other than the
/// overridable ones without an answer in time are one warning.
fn look_up<'n>(
    nodelist: &'n [String],
    overridable: &[(&str, &Option<String>)],
    addresses: &BTreeMap<String, String>,
    lookup: Lookup<'_>,
    warnings: &mut Vec<String>,
) -> BTreeMap<&'n str, Answer> {
    let given = |n: &str| {
        addresses.contains_key(n)
            || overridable
                .iter()
                .any(|(name, v)| *name == n && v.is_some())
    };
    let wanted: Vec<String> = nodelist.iter().filter(|n| !given(n)).cloned().collect();
    let answers: BTreeMap<&str, Answer> = nodelist
        .iter()
        .filter(|n| !given(n))
        .map(String::as_str)
        .zip(lookup(&wanted))
        .collect();
    let silent: Vec<&str> = answers
        .iter()
        .filter(|(n, a)| **a == Answer::NoAnswer && !overridable.iter().any(|(o, _)| o == *n))
        .map(|(n, _)| *n)
        .collect();
    if !silent.is_empty() {
        warnings.push(format!(
            "{} of the job's {} node names had no answer from the resolver in time ({}); each stands for itself. Set mcsup.node_addresses for them, or make them resolve faster (/etc/hosts)",
            silent.len(),
            nodelist.len(),
            compress_nodelist(&silent)
        ));
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_missing_from_a_long_list_names_the_list_once_and_short() {
        let list = (1..=4096)
            .map(|i| format!("n{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let d = NodeError::NotInList {
            node: "zz".into(),
            list,
        }
        .diagnostic()
        .to_string();
        assert!(d.contains("(n1,n2,n3,n4,…,n4095,n4096: 4096 nodes)"), "{d}");
        assert!(d.len() < 300, "{} bytes: {d}", d.len());
        assert_eq!(abbreviated("a,b,c"), "a,b,c");
    }

    #[test]
    fn node_names_fold_into_a_hostlist_slurm_expands_back() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for (given, folded) in [
            (names(&["n1", "n2", "n3", "n5"]), "n[1-3,5]"),
            (names(&["n9", "n10", "n11"]), "n[9-11]"),
            (
                names(&["gpu-01", "gpu-02", "gpu-10", "infra"]),
                "gpu-[01-02,10],infra",
            ),
            (names(&["b7", "a1", "b8", "a2", "a2"]), "b[7-8],a[1-2]"),
            (names(&["only3"]), "only3"),
            (names(&["x0", "x00", "x01"]), "x0,x[00-01]"),
        ] {
            let got = compress_nodelist(&given);
            assert_eq!(got, folded);
            let mut want = given.clone();
            want.dedup();
            let mut back = expand_nodelist(&got).unwrap();
            back.sort();
            want.sort();
            want.dedup();
            assert_eq!(back, want, "{got}");
        }
        let mut names = names(&["n10", "gpu", "n2", "m1", "n1", "n01"]);
        names.sort_by(|a, b| node_order(a, b));
        assert_eq!(names, ["gpu", "m1", "n01", "n1", "n2", "n10"]);
        let many: Vec<String> = (1..=128).map(|i| format!("n{i}")).collect();
        assert_eq!(compress_nodelist(&many), "n[1-128]");
    }

    fn inputs() -> NodeInputs {
        NodeInputs {
            hostname: "box".into(),
            cwd: "/w".into(),
            ..Default::default()
        }
    }
    fn no_dns(_: &str) -> Option<IpAddr> {
        None
    }
    fn fake_dns(n: &str) -> Option<IpAddr> {
        match n {
            "gpu-01" => Some("10.0.0.1".parse().unwrap()),
            "gpu-02" => Some("10.0.0.2".parse().unwrap()),
            _ => None,
        }
    }

    #[test]
    fn local_mode_is_loopback_and_runs_master() {
        let c = resolve(&inputs(), &BTreeMap::new(), &no_dns).unwrap();
        assert_eq!(
            (c.name.as_str(), c.ip.as_str(), c.infra_ip.as_str()),
            ("box", "127.0.0.1", "127.0.0.1")
        );
        assert!(c.runs_master && !c.slurm);
    }

    #[test]
    fn slurm_nodelist_picks_first_as_infra() {
        let mut i = inputs();
        i.node = Some("gpu-02".into());
        i.nodelist = Some("gpu-[01-02]".into());
        i.job_id = Some("77".into());
        let c = resolve(&i, &BTreeMap::new(), &fake_dns).unwrap();
        assert_eq!(c.infra_node, "gpu-01");
        assert_eq!(c.infra_ip, "10.0.0.1");
        assert_eq!(c.ip, "10.0.0.2");
        assert_eq!(c.node_id, 1);
        assert!(!c.runs_master);
        // Inside a one-node step SLURM_NODEID is 0 everywhere: the job list position wins.
        i.node_id = Some("0".into());
        assert_eq!(resolve(&i, &BTreeMap::new(), &fake_dns).unwrap().node_id, 1);
    }

    /// A range that counts down and a node named twice are refused, as Slurm would.
    #[test]
    fn reversed_ranges_and_repeated_nodes_are_refused() {
        for (list, says) in [
            ("n[5-1]", "the range `5-1` counts down"),
            ("gpu-[01-04,9-7]", "the range `9-7` counts down"),
            ("n1,n1", "`n1` is in it more than once"),
            ("n[1-3],n2", "`n2` is in it more than once"),
            ("n[1,1]", "`n[1,1]` names a node more than once"),
            ("n[1-3,2]", "`n[1-3,2]` names a node more than once"),
            ("n[1, 2]", "it holds a blank"),
            ("n 1,n2", "it holds a blank"),
        ] {
            let e = expand_nodelist(list).unwrap_err().to_string();
            assert!(e.contains(says), "{list}: {e}");
        }
        assert_eq!(expand_nodelist("n[1-2],m[01-02]").unwrap().len(), 4);
        assert_eq!(expand_nodelist("n[7-7]").unwrap(), ["n7"]);
    }

    #[test]
    fn addresses_override_and_master_flags() {
        let mut i = inputs();
        i.node = Some("n2".into());
        i.nodelist = Some("n[1-2]".into());
        i.master = MasterMode::On;
        let mut a = BTreeMap::new();
        a.insert("n1".to_string(), "127.0.0.1".to_string());
        a.insert("n2".to_string(), "127.0.0.2".to_string());
        let c = resolve(&i, &a, &no_dns).unwrap();
        assert_eq!(
            (c.ip.as_str(), c.infra_ip.as_str()),
            ("127.0.0.2", "127.0.0.1")
        );
        assert!(c.runs_master);
    }

    #[test]
    fn nodelist_sizes_are_counted_without_expanding() {
        assert_eq!(nodelist_size("gpu-[01-04],infra1"), Some(5));
        assert_eq!(nodelist_size("a[1-4,7]-b[1-2],c"), Some(11));
        assert_eq!(nodelist_size("n[7-5]"), Some(3));
        assert_eq!(nodelist_size("n[1-1000][1-1000]"), Some(1_000_000));
        assert_eq!(nodelist_size("n[x]"), None);
        assert_eq!(nodelist_size("n[1-"), None);
        assert!(nodelist_size("n[0-18446744073709551615][1-99999999]").unwrap() > 1 << 64);
        for list in [
            "gpu-[01-04],infra1",
            "a[1-4,7]-b[1-2],c",
            "n[7-5]",
            "x, y ,z",
        ] {
            assert_eq!(
                nodelist_size(list),
                Some(hostlist_parser::parse(list).unwrap().len() as u128),
                "{list}"
            );
        }
        assert!(matches!(
            expand_nodelist("n[1-10000000]"),
            Err(NodeError::TooManyNodes {
                count: 10_000_000,
                ..
            })
        ));
    }

    #[test]
    fn unresolvable_names_warn_and_bad_inputs_fail() {
        let mut i = inputs();
        i.node = Some("x2".into());
        i.nodelist = Some("x[1-2]".into());
        let c = resolve(&i, &BTreeMap::new(), &no_dns).unwrap();
        assert_eq!(c.infra_ip, "x1");
        assert_eq!(c.warnings.len(), 2);

        i.node = Some("zz".into());
        assert!(matches!(
            resolve(&i, &BTreeMap::new(), &no_dns),
            Err(NodeError::NotInList { .. })
        ));
        i.node = Some("x1".into());
        i.nodelist = Some("x[1-".into());
        assert!(matches!(
            resolve(&i, &BTreeMap::new(), &no_dns),
            Err(NodeError::BadNodelist { .. })
        ));
        i.nodelist = None;
        i.master_addr = Some("not-an-ip".into());
        assert!(matches!(
            resolve(&i, &BTreeMap::new(), &no_dns),
            Err(NodeError::BadAddress { .. })
        ));
    }

    /// A resolver for the lookup tests: `hang-*` names never answer (until the test ends),
    /// `gpu-N` is 10.0.0.N, anything else does not resolve.
    fn test_lookup(
        hang: std::sync::mpsc::Receiver<()>,
        calls: Arc<std::sync::atomic::AtomicUsize>,
    ) -> Arc<dyn Fn(&str) -> Answer + Send + Sync> {
        let hang = Mutex::new(hang);
        Arc::new(move |name: &str| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if name.starts_with("hang-") {
                let _ = hang.lock().map(|r| r.recv());
                return Answer::NoAnswer;
            }
            match name.strip_prefix("gpu-").and_then(|n| n.parse::<u8>().ok()) {
                Some(i) => Answer::Found(vec![IpAddr::from([10, 0, 0, i])]),
                None => Answer::Failed("Name or service not known".into()),
            }
        })
    }

    #[test]
    fn lookups_run_side_by_side_up_to_the_bound() {
        // Each lookup waits until PARALLEL_LOOKUPS of them are in flight: one at a time (round
        // 4's N28), the first would wait for ever and the budget would end with no answers.
        let barrier = Arc::new(std::sync::Barrier::new(PARALLEL_LOOKUPS));
        let names: Vec<String> = (1..=2 * PARALLEL_LOOKUPS)
            .map(|i| format!("gpu-{i}"))
            .collect();
        let wait = barrier.clone();
        let lookup: Arc<dyn Fn(&str) -> Answer + Send + Sync> = Arc::new(move |name: &str| {
            wait.wait();
            Answer::Found(vec![IpAddr::from([10, 0, 0, name[4..].parse().unwrap()])])
        });
        let answers = lookup_with(&names, lookup, Duration::from_secs(120), &|| false);
        for (i, a) in answers.iter().enumerate() {
            assert_eq!(
                a.address(),
                Some(IpAddr::from([10, 0, 0, i as u8 + 1])),
                "{a:?}"
            );
        }
    }

    #[test]
    fn a_resolver_that_hangs_costs_the_budget_once_and_its_names_stand_for_themselves() {
        let (_keep, hang) = std::sync::mpsc::channel();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let lookup = test_lookup(hang, calls.clone());
        // 100 names that hang: one at a time this never ends; here it ends with the budget.
        let mut i = inputs();
        i.node = Some("gpu-1".into());
        i.nodelist = Some("gpu-[1-2],hang-[1-100]".into());
        let lookup = |names: &[String]| {
            lookup_with(names, lookup.clone(), Duration::from_millis(300), &|| false)
        };
        let c = resolve_with(&i, &BTreeMap::new(), &lookup).unwrap();
        assert_eq!(c.ip, "10.0.0.1");
        assert_eq!(c.node_ips[1], "10.0.0.2");
        assert_eq!(c.node_ips[2], "hang-1");
        assert_eq!(c.node_ips.len(), 102);
        // At most PARALLEL_LOOKUPS of them were ever started: the others were never asked.
        assert!(calls.load(std::sync::atomic::Ordering::SeqCst) <= PARALLEL_LOOKUPS + 2);
        assert_eq!(
            c.warnings,
            ["100 of the job's 102 node names had no answer from the resolver in time (hang-[1-100]); each stands for itself. Set mcsup.node_addresses for them, or make them resolve faster (/etc/hosts)"]
        );
        // The infra node's own name without an answer is named on its own.
        i.node = Some("gpu-2".into());
        i.nodelist = Some("hang-1,gpu-2".into());
        let c = resolve_with(&i, &BTreeMap::new(), &lookup).unwrap();
        assert_eq!(c.infra_ip, "hang-1");
        assert_eq!(
            c.warnings,
            ["node `hang-1` does not resolve to an address (no answer from the resolver in time); using the name itself. Set mcsup.node_addresses.hang-1 (or --node-ip / --master-addr)"]
        );
    }

    #[test]
    fn a_stop_request_ends_the_wait_for_answers() {
        let (_keep, hang) = std::sync::mpsc::channel();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let lookup = test_lookup(hang, calls.clone());
        let names: Vec<String> = vec!["gpu-1".into(), "hang-1".into()];
        // A budget of an hour: only the stop request can end this call.
        let stop = || calls.load(std::sync::atomic::Ordering::SeqCst) == 2;
        let answers = lookup_with(&names, lookup, Duration::from_secs(3600), &stop);
        assert_eq!(answers[1], Answer::NoAnswer);
    }
}
