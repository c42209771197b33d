//! The fabric variables the engines' transports read, against the devices this node has: NCCL's
//! `NCCL_IB_HCA` and `NCCL_SOCKET_IFNAME`, Gloo's `GLOO_SOCKET_IFNAME`, UCX's `UCX_NET_DEVICES`
//! (NIXL's transport) and NVSHMEM's `NVSHMEM_HCA_LIST`. Each wrong value fails late and far from
//! its cause: UCX opened `rc_gda` on inactive HCAs (NVIDIA/srt-slurm #429), `UCX_NET_DEVICES=all`
//! bound management NICs and NIXL's init failed (ai-dynamo/dynamo #10852), pinning UCX without
//! loopback broke NIXL's self endpoint (sgl-project/sglang #40641), and `NCCL_SOCKET_IFNAME` is a
//! prefix unless it starts with `=` (NVIDIA/nccl #286).
//!
//! Values come from each worker's planned environment, then mcsup's inherited one; devices from
//! sysfs under the sysroot (`/sys/class/infiniband`, `/sys/class/net`). A group that names
//! nothing is silent. Syntax, as the libraries parse it: NCCL's lists take a leading `^`
//! (exclude) or `=` (exact names; otherwise each entry is a prefix) and `name:port` entries;
//! UCX's list is `all` or `rdma_dev:port` / `netdev` entries.

use std::collections::BTreeMap;

use mcsup_rdma::{PortState, SysfsReader, SysfsScan};

use super::report::{Check, Report};
use super::system::Sysroot;
use crate::plan::{Plan, ProcessKind};

const G: &str = "fabric";

/// The variables checked here.
pub const VARIABLES: [&str; 5] = [
    "NCCL_IB_HCA",
    "UCX_NET_DEVICES",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "NVSHMEM_HCA_LIST",
];

/// A network interface of `/sys/class/net`.
struct Iface {
    name: String,
    /// `operstate`: `up`, `down`, `unknown` (loopback and some virtual links say so when up).
    state: String,
}

/// What the node has.
struct Node {
    rdma: SysfsScan,
    ifaces: Vec<Iface>,
}

impl Node {
    fn read(root: &Sysroot) -> Node {
        let rdma = SysfsReader::new(root.path("/"))
            .scan()
            .unwrap_or(SysfsScan {
                subsystem_present: false,
                devices: Vec::new(),
                verbs_abi_version: None,
                rdma_cm_present: false,
            });
        let mut ifaces: Vec<Iface> = std::fs::read_dir(root.path("/sys/class/net"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                if name.starts_with('.') {
                    return None;
                }
                let state = root
                    .read(format!("/sys/class/net/{name}/operstate"))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default();
                Some(Iface { name, state })
            })
            .collect();
        ifaces.sort_by(|a, b| a.name.cmp(&b.name));
        Node { rdma, ifaces }
    }

    fn rdma_names(&self) -> Vec<&str> {
        self.rdma.devices.iter().map(|d| d.name.as_str()).collect()
    }

    /// The interfaces that carry an RDMA device (its netdevs).
    fn is_fabric(&self, iface: &str) -> bool {
        self.rdma
            .devices
            .iter()
            .any(|d| d.netdevs.iter().any(|n| n.name == iface))
    }

    /// Why `dev`'s port `port` (any port when `None`) cannot carry traffic, if it cannot.
    fn port_problem(&self, dev: &str, port: Option<u32>) -> Option<String> {
        let d = self.rdma.devices.iter().find(|d| d.name == dev)?;
        let ports: Vec<_> = match port {
            Some(n) => match d.port(n) {
                Some(p) => vec![p],
                None => {
                    let have: Vec<String> = d.ports.iter().map(|p| p.number.to_string()).collect();
                    return Some(format!(
                        "{dev} has no port {n} (it has {})",
                        have.join(", ")
                    ));
                }
            },
            None => d.ports.iter().collect(),
        };
        if ports
            .iter()
            .any(|p| matches!(p.state, Some(PortState::Active)))
        {
            return None;
        }
        let states: Vec<String> = ports
            .iter()
            .map(|p| {
                format!(
                    "port {} {}",
                    p.number,
                    p.state
                        .map_or("unknown".into(), |s| format!("{s:?}").to_uppercase())
                )
            })
            .collect();
        Some(format!(
            "{dev} is not active ({}): traffic cannot flow there",
            states.join(", ")
        ))
    }

    fn iface_up(&self, name: &str) -> Option<bool> {
        self.ifaces
            .iter()
            .find(|i| i.name == name)
            .map(|i| matches!(i.state.as_str(), "up" | "unknown"))
    }
}

/// NCCL's list syntax: `^a,b` excludes, `=a,b` names exactly, `a,b` are prefixes; each entry is
/// `name` or `name:port`.
struct NcclList {
    exclude: bool,
    exact: bool,
    entries: Vec<(String, Option<u32>)>,
}

fn parse_nccl_list(value: &str) -> Result<NcclList, String> {
    let v = value.trim();
    let (exclude, v) = match v.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let (exact, v) = match v.strip_prefix('=') {
        Some(rest) => (true, rest),
        None => (false, v),
    };
    let mut entries = Vec::new();
    for e in v.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, port) = match e.split_once(':') {
            Some((n, p)) => (
                n,
                Some(
                    p.parse::<u32>()
                        .map_err(|_| format!("`{e}`: the port after `:` is not a number"))?,
                ),
            ),
            None => (e, None),
        };
        entries.push((name.to_string(), port));
    }
    if entries.is_empty() {
        return Err("it names nothing".into());
    }
    Ok(NcclList {
        exclude,
        exact,
        entries,
    })
}

impl NcclList {
    fn matches(&self, entry: &str, candidate: &str) -> bool {
        if self.exact {
            candidate == entry
        } else {
            candidate.starts_with(entry)
        }
    }

    /// The candidates this list selects.
    fn select<'a>(&self, candidates: &[&'a str]) -> Vec<&'a str> {
        candidates
            .iter()
            .copied()
            .filter(|c| {
                let named = self.entries.iter().any(|(e, _)| self.matches(e, c));
                named != self.exclude
            })
            .collect()
    }
}

/// Where each distinct value of `var` comes from: the workers that plan it, or the inherited
/// environment.
fn values_of(
    plan: &Plan,
    inherited: &[(String, String)],
    var: &str,
) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut any_worker_inherits = false;
    for p in plan
        .processes
        .iter()
        .filter(|p| p.kind == ProcessKind::Worker)
    {
        match p.env_value(var) {
            Some(v) => out.entry(v.to_string()).or_default().push(p.name.clone()),
            None => any_worker_inherits = true,
        }
    }
    let inherits =
        any_worker_inherits || plan.processes.iter().all(|p| p.kind != ProcessKind::Worker);
    if let Some((_, v)) = inherited
        .iter()
        .find(|(k, _)| k == var)
        .filter(|_| inherits)
    {
        out.entry(v.clone())
            .or_default()
            .push("the inherited environment".into());
    }
    out
}

/// Whether NIXL moves KV here (an argv names it): UCX then needs its loopback device.
pub fn uses_nixl(plan: &Plan) -> bool {
    plan.processes.iter().any(|p| {
        p.argv
            .iter()
            .any(|a| a.to_ascii_lowercase().contains("nixl"))
    })
}

/// Check every fabric variable the plan's workers (or mcsup's environment) set.
pub fn check(
    plan: &Plan,
    root: &Sysroot,
    inherited: &[(String, String)],
    live: bool,
    report: &mut Report,
) {
    let set: Vec<(&str, BTreeMap<String, Vec<String>>)> = VARIABLES
        .iter()
        .map(|v| (*v, values_of(plan, inherited, v)))
        .filter(|(_, vals)| !vals.is_empty())
        .collect();
    if set.is_empty() {
        return;
    }
    for (var, values) in &set {
        if let Some(fact) = report.facts.fabric_mut(var) {
            *fact = Some(values.keys().cloned().collect::<Vec<_>>().join(" | "));
        }
    }
    let node = Node::read(root);
    let uses_nixl = uses_nixl(plan);
    for (var, values) in set {
        for (value, users) in values {
            let label = format!("{var}={value}");
            let whose = users.join(", ");
            let verdict = match var {
                "NCCL_IB_HCA" => check_hca_list(&node, &value),
                "NVSHMEM_HCA_LIST" => check_hca_list(&node, &format!("={value}")),
                "UCX_NET_DEVICES" => check_ucx(&node, &value, uses_nixl),
                _ => check_ifname(&node, &value, live.then_some(plan.node.ip.as_str())),
            };
            report.push(match verdict {
                Verdict::Ok(m) => Check::ok(G, &label, format!("{m} (for {whose})")),
                Verdict::Warn(m, fix) => Check::warn(G, &label, format!("{m} (for {whose})"), fix),
                Verdict::Fail(m, fix) => Check::fail(G, &label, format!("{m} (for {whose})"), fix),
            });
        }
    }
}

enum Verdict {
    Ok(String),
    Warn(String, String),
    Fail(String, String),
}

fn closest(name: &str, among: &[&str]) -> String {
    match crate::domain::suggest(name, among.iter().copied()) {
        Some(s) => format!("; did you mean `{s}`?"),
        None => String::new(),
    }
}

/// `NCCL_IB_HCA` (and `NVSHMEM_HCA_LIST`, exact names): every named HCA exists and has an
/// active port (the one named, when a port is named); the list selects at least one.
fn check_hca_list(node: &Node, value: &str) -> Verdict {
    let list = match parse_nccl_list(value) {
        Ok(l) => l,
        Err(e) => {
            return Verdict::Fail(
                format!("cannot be read: {e}"),
                "write `mlx5_0,mlx5_1`, `=mlx5_0:1`, or `^mlx5_2` (NCCL's syntax)".into(),
            )
        }
    };
    let present = node.rdma_names();
    let fix_present = format!(
        "name devices this node has ({}), or leave the variable unset",
        if present.is_empty() {
            "none".to_string()
        } else {
            present.join(", ")
        }
    );
    if !list.exclude {
        for (entry, port) in &list.entries {
            let hits: Vec<&str> = present
                .iter()
                .copied()
                .filter(|d| list.matches(entry, d))
                .collect();
            if hits.is_empty() {
                let how = if list.exact {
                    "names"
                } else {
                    "is a prefix of"
                };
                return Verdict::Fail(
                    format!(
                        "`{entry}` {how} no RDMA device here{}",
                        closest(entry, &present)
                    ),
                    fix_present,
                );
            }
            let problems: Vec<String> = hits
                .iter()
                .filter_map(|d| node.port_problem(d, *port))
                .collect();
            if problems.len() == hits.len() {
                return Verdict::Fail(
                    problems.join("; "),
                    "name an active device and port (`cat /sys/class/infiniband/*/ports/*/state`), or bring the link up".into(),
                );
            }
        }
    }
    let selected = list.select(&present);
    if selected.is_empty() {
        return Verdict::Fail("selects no RDMA device here".into(), fix_present);
    }
    let inactive: Vec<String> = selected
        .iter()
        .filter_map(|d| node.port_problem(d, None))
        .collect();
    if !inactive.is_empty() && list.exclude {
        return Verdict::Warn(
            format!("selects inactive devices: {}", inactive.join("; ")),
            "exclude them too (`^a,b`) or name the active ones".into(),
        );
    }
    Verdict::Ok(format!("selects {}", selected.join(", ")))
}

/// `UCX_NET_DEVICES`: `all` binds every interface (management NICs included); named entries
/// exist, RDMA ones on an active port; pinned devices keep `lo` when NIXL needs its self
/// endpoint.
fn check_ucx(node: &Node, value: &str, uses_nixl: bool) -> Verdict {
    let entries: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if entries.contains(&"all") {
        let other: Vec<&str> = node
            .ifaces
            .iter()
            .map(|i| i.name.as_str())
            .filter(|n| *n != "lo" && !node.is_fabric(n))
            .collect();
        if !other.is_empty() && !node.rdma.devices.is_empty() {
            return Verdict::Warn(
                format!(
                    "`all` also binds {}, which carry no RDMA device: UCX may pick them and NIXL's init fails (ai-dynamo/dynamo #10852)",
                    other.join(", ")
                ),
                format!(
                    "name the fabric devices instead: UCX_NET_DEVICES={}",
                    node.rdma
                        .devices
                        .iter()
                        .map(|d| format!("{}:1", d.name))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            );
        }
        return Verdict::Ok("all".into());
    }
    let rdma = node.rdma_names();
    let ifaces: Vec<&str> = node.ifaces.iter().map(|i| i.name.as_str()).collect();
    for e in &entries {
        match e.split_once(':') {
            Some((dev, port)) => {
                let Ok(port) = port.parse::<u32>() else {
                    return Verdict::Fail(
                        format!("`{e}`: the port after `:` is not a number"),
                        "write `mlx5_0:1`".into(),
                    );
                };
                if !rdma.contains(&dev) {
                    return Verdict::Fail(
                        format!("`{dev}` is no RDMA device here{}", closest(dev, &rdma)),
                        format!("use devices this node has ({})", rdma.join(", ")),
                    );
                }
                if let Some(p) = node.port_problem(dev, Some(port)) {
                    return Verdict::Fail(
                        format!("{p}; UCX opens it anyway and the transfer fails (NVIDIA/srt-slurm #429)"),
                        "leave inactive devices out of UCX_NET_DEVICES".into(),
                    );
                }
            }
            None => match node.iface_up(e) {
                None => {
                    return Verdict::Fail(
                        format!("`{e}` is no network interface here{}", closest(e, &ifaces)),
                        format!("use interfaces this node has ({})", ifaces.join(", ")),
                    )
                }
                Some(false) => {
                    return Verdict::Fail(
                        format!("`{e}` is down"),
                        "bring it up, or leave it out".into(),
                    )
                }
                Some(true) => {}
            },
        }
    }
    if uses_nixl && !entries.contains(&"lo") {
        return Verdict::Warn(
            "the devices are pinned without `lo`: NIXL's transfers within this node need UCX's loopback (sgl-project/sglang #40641)".into(),
            format!("add it: UCX_NET_DEVICES={value},lo"),
        );
    }
    Verdict::Ok(format!("{} present and active", entries.join(", ")))
}

/// The addresses of the live node's interfaces, by interface.
fn live_addresses() -> BTreeMap<String, Vec<std::net::IpAddr>> {
    let mut out: BTreeMap<String, Vec<std::net::IpAddr>> = BTreeMap::new();
    for a in nix::ifaddrs::getifaddrs().into_iter().flatten() {
        let Some(addr) = a.address else { continue };
        let ip = if let Some(v4) = addr.as_sockaddr_in() {
            std::net::IpAddr::V4(v4.ip())
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            std::net::IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        out.entry(a.interface_name).or_default().push(ip);
    }
    out
}

/// `NCCL_SOCKET_IFNAME` / `GLOO_SOCKET_IFNAME`: the interfaces it selects exist and are up, and
/// (on the live node) one of them carries `node_ip`, the address mcsup advertises for this node:
/// the peers connect there.
fn check_ifname(node: &Node, value: &str, node_ip: Option<&str>) -> Verdict {
    let list = match parse_nccl_list(value) {
        Ok(l) => l,
        Err(e) => {
            return Verdict::Fail(
                format!("cannot be read: {e}"),
                "write `eth0`, `=ens1f0np0`, or `^docker,lo`".into(),
            )
        }
    };
    let names: Vec<&str> = node.ifaces.iter().map(|i| i.name.as_str()).collect();
    let selected = list.select(&names);
    if selected.is_empty() {
        let first = &list.entries[0].0;
        let how = if list.exact {
            ""
        } else {
            " (a prefix, NVIDIA/nccl #286)"
        };
        return Verdict::Fail(
            format!(
                "selects no network interface here{how}{}",
                if list.exclude {
                    String::new()
                } else {
                    closest(first, &names)
                }
            ),
            format!("name an interface this node has ({})", names.join(", ")),
        );
    }
    let up: Vec<&str> = selected
        .iter()
        .copied()
        .filter(|n| node.iface_up(n) == Some(true))
        .collect();
    if up.is_empty() {
        return Verdict::Fail(
            format!(
                "selects only interfaces that are down: {}",
                selected.join(", ")
            ),
            "name an interface that is up (`ip link`)".into(),
        );
    }
    if let Some(ip) = node_ip.and_then(|ip| ip.parse::<std::net::IpAddr>().ok()) {
        let addrs = live_addresses();
        if !up
            .iter()
            .any(|n| addrs.get(*n).is_some_and(|a| a.contains(&ip)))
        {
            let carrier = addrs
                .iter()
                .find(|(_, a)| a.contains(&ip))
                .map(|(n, _)| n.clone());
            return Verdict::Warn(
                format!(
                    "selects {}, which does not carry this node's address {ip} (the one mcsup advertises to the other nodes): NCCL or Gloo would listen where the peers do not connect",
                    up.join(", ")
                ),
                match carrier {
                    Some(n) => format!("name the interface that carries {ip}: ={n}"),
                    None => format!("no interface here carries {ip}: check --node-ip / the node's address"),
                },
            );
        }
    }
    if !list.exact && !list.exclude && selected.len() > 1 {
        return Verdict::Warn(
            format!(
                "is a prefix and selects {} interfaces: {}",
                selected.len(),
                selected.join(", ")
            ),
            format!("name one exactly: ={}", up[0]),
        );
    }
    Verdict::Ok(format!("selects {}", selected.join(", ")))
}
