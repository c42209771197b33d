//! RDMA checks: devices named in `MOONCAKE_DEVICE` exist, their port is ACTIVE, the GID index
//! Mooncake will use is populated and RoCE v2, the uverbs device opens, MTUs agree.
//!
//! Device facts come from the `mcsup-rdma` crate (sysfs under the sysroot; libibverbs as well on
//! the live node), Mooncake's GID choice from [`crate::mooncake::gid`]. This module only turns
//! them into verdicts with fixes.

use mcsup_rdma::{
    CharDeviceError, Device, GidType, LinkLayer, PortState, RdmaPresence, SysfsReader,
};

use super::report::{Check, Report};
use super::system::Sysroot;
use crate::mooncake::gid::{
    evaluate_gid_index, parse_gid_index, select_gid, select_gid_legacy, DegradedReason,
    GidAssessment, GidIndexSetting, GidParseNote, GidRank, LegacyGidRule, SelectionOutcome,
};
use crate::plan::{Plan, ProcessKind, ProcessSpec};

const G: &str = "rdma";

/// Variable lookup: the process's resolved env first, then mcsup's inherited environment.
fn lookup<'a>(
    spec: Option<&'a ProcessSpec>,
    inherited: &'a [(String, String)],
    name: &str,
) -> Option<(&'a str, &'static str)> {
    if let Some(v) = spec.and_then(|s| s.env_value(name)) {
        return Some((v, "recipe"));
    }
    inherited
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| (v.as_str(), "inherited environment"))
}

/// What `MOONCAKE_DEVICE` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceRequest {
    /// Empty or `auto-discovery`: Mooncake picks HCAs itself.
    Auto,
    /// Explicit names (a comma list, or the values of SGLang's JSON `{tp_rank: dev}` map).
    Named(Vec<String>),
}

/// Parse `MOONCAKE_DEVICE`: `""`, `auto-discovery`, `mlx5_0,mlx5_1`, or JSON `{"0": "mlx5_0"}`.
pub fn parse_device_list(value: &str) -> DeviceRequest {
    let v = value.trim();
    if v.is_empty() || v.eq_ignore_ascii_case("auto-discovery") {
        return DeviceRequest::Auto;
    }
    if v.starts_with('{') {
        if let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(v) {
            let mut names: Vec<String> = Vec::new();
            for dev in m.values() {
                let list = match dev {
                    serde_json::Value::String(s) => {
                        s.split(',').map(|x| x.trim().to_string()).collect()
                    }
                    serde_json::Value::Array(a) => a
                        .iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect(),
                    _ => Vec::new(),
                };
                for n in list {
                    if !n.is_empty() && !names.contains(&n) {
                        names.push(n);
                    }
                }
            }
            return DeviceRequest::Named(names);
        }
    }
    let mut names: Vec<String> = Vec::new();
    for n in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if !names.contains(&n.to_string()) {
            names.push(n.to_string());
        }
    }
    DeviceRequest::Named(names)
}

fn closest<'a>(name: &str, present: &'a [String]) -> Option<&'a str> {
    crate::domain::suggest(name, present.iter().map(String::as_str))
}

fn rank_text(rank: &GidRank) -> String {
    match rank {
        GidRank::Routable { netdev } => format!("routable, netdev {netdev}"),
        GidRank::RoutableNoNetdev => "routable, no netdev".into(),
        GidRank::PrivateIpv4 { addr } => format!("private IPv4 {addr}"),
        GidRank::Degraded { reason } => format!(
            "degraded ({})",
            match reason {
                DegradedReason::VirtualNetdev { netdev } => format!("virtual netdev {netdev}"),
                DegradedReason::LinkLocal => "IPv6 link-local".into(),
            }
        ),
    }
}

/// The variables Mooncake reads, as the store (or the first worker) will see them.
struct McEnv<'a> {
    spec: Option<&'a ProcessSpec>,
    inherited: &'a [(String, String)],
}

impl<'a> McEnv<'a> {
    fn get(&self, name: &str) -> Option<(&'a str, &'static str)> {
        lookup(self.spec, self.inherited, name)
    }
}

/// `MC_GID_INDEX` (or NCCL's) as Mooncake reads it: an explicit index with its text and source,
/// or automatic choice (and why, when a value says so).
struct GidConfig {
    explicit: Option<(u32, String)>,
    auto_because: Option<String>,
}

/// Run the RDMA checks. Returns how many NICs Mooncake will register memory on (for memlock).
pub fn check(
    plan: &Plan,
    root: &Sysroot,
    inherited: &[(String, String)],
    live_verbs: bool,
    legacy: Option<(&str, LegacyGidRule)>,
    report: &mut Report,
) -> usize {
    let store = plan.processes.iter().find(|p| p.kind == ProcessKind::Store);
    let first_worker = plan
        .processes
        .iter()
        .find(|p| p.kind == ProcessKind::Worker);
    let env = McEnv {
        spec: store.or(first_worker),
        inherited,
    };
    let Some(scan) = scan_devices(root, live_verbs, report) else {
        return 0;
    };
    let present: Vec<String> = scan.devices.iter().map(|d| d.name.clone()).collect();
    report.facts.devices_present = Some(present.clone());
    let selected = select_devices(&scan, &present, &env, report);
    check_worker_devices(plan, &scan, &present, report);
    let port_no: u32 = match env.get("MC_IB_PORT") {
        Some((v, _)) => v.trim().parse().unwrap_or(1),
        None => 1,
    };
    let gid = gid_config(&env, report);
    check_gid_across(plan, inherited, report);
    let mut mtus: Vec<(String, String)> = Vec::new();
    let mut chosen_indices: Vec<(String, u32)> = Vec::new();
    for d in &selected {
        let Some(port) = check_port(d, port_no, report) else {
            continue;
        };
        let ethernet = matches!(port.link_layer, Some(LinkLayer::Ethernet));
        let chosen = match &gid.explicit {
            Some((idx, src)) => check_gid_explicit(d, port, *idx, src, legacy, report),
            None => check_gid_auto(
                d,
                port,
                port_no,
                gid.auto_because.as_deref(),
                legacy,
                report,
            ),
        };
        chosen_indices.extend(chosen.map(|i| (d.name.clone(), i)));
        check_uverbs(d, report);
        if ethernet {
            if let Some(mtu) = d
                .netdevs
                .iter()
                .find_map(|n| n.mtu)
                .and_then(mcsup_rdma::IbMtu::for_roce_netdev_mtu)
            {
                mtus.push((d.name.clone(), mtu.to_string()));
            }
        }
    }
    check_mtus(&mtus, &env, report);
    report.facts.gid_index = Some(chosen_indices);
    report.facts.devices = Some(selected.iter().map(|d| d.name.clone()).collect());
    selected.len()
}

/// The devices in sysfs (with libibverbs' view first on a live node); `None` (with the failure
/// said) when there are none to check.
fn scan_devices(
    root: &Sysroot,
    live_verbs: bool,
    report: &mut Report,
) -> Option<mcsup_rdma::SysfsScan> {
    let scan = match SysfsReader::new(root.path("/")).scan() {
        Ok(s) => s,
        Err(e) => {
            report.push(Check::fail(
                G,
                "devices",
                format!("cannot read RDMA devices from sysfs: {e}"),
                "check that /sys is mounted and readable",
            ));
            return None;
        }
    };
    if live_verbs {
        verbs_summary(report);
    }
    match scan.presence() {
        RdmaPresence::NoSubsystem => {
            report.push(Check::fail(
                G,
                "devices",
                "no RDMA devices: the RDMA subsystem is absent (no /sys/class/infiniband), but MOONCAKE_PROTOCOL is rdma",
                "run on a node with RDMA NICs and their drivers (mlx5_ib), or set MOONCAKE_PROTOCOL: tcp",
            ));
            None
        }
        RdmaPresence::NoDevices => {
            report.push(Check::fail(
                G,
                "devices",
                "no RDMA devices: the RDMA module is loaded but no HCA is visible (/sys/class/infiniband is empty)",
                "check that the NICs are passed into this container/job and their driver is bound, or set MOONCAKE_PROTOCOL: tcp",
            ));
            None
        }
        RdmaPresence::Devices => Some(scan),
    }
}

/// The devices Mooncake will use: the store's `MOONCAKE_DEVICE`, or every HCA on
/// auto-discovery (which must have an ACTIVE port, else Mooncake falls back to TCP).
fn select_devices<'s>(
    scan: &'s mcsup_rdma::SysfsScan,
    present: &[String],
    env: &McEnv,
    report: &mut Report,
) -> Vec<&'s Device> {
    let request = env
        .get("MOONCAKE_DEVICE")
        .map_or(DeviceRequest::Auto, |(v, _)| parse_device_list(v));
    let mut selected: Vec<&Device> = Vec::new();
    match &request {
        DeviceRequest::Auto => {
            let forced = env
                .get("MC_FORCE_HCA")
                .is_some_and(|(v, _)| !matches!(v.trim(), "" | "0" | "false"));
            selected = scan.devices.iter().collect();
            let usable = scan
                .devices
                .iter()
                .filter(|d| d.ports.iter().any(|p| p.state == Some(PortState::Active)))
                .count();
            if usable == 0 {
                report.push(Check::fail(
                    G,
                    "devices",
                    format!("MOONCAKE_DEVICE asks for auto-discovery, but none of {} has an ACTIVE port: Mooncake would silently fall back to TCP", present.join(", ")),
                    if forced { "bring a port up (see the port checks)".to_string() } else { "bring a port up, and set MC_FORCE_HCA=1 to make Mooncake fail instead of falling back to TCP".to_string() },
                ));
            } else {
                report.push(Check::ok(
                    G,
                    "devices",
                    format!(
                        "auto-discovery: {usable} of {} HCAs have an ACTIVE port ({})",
                        present.len(),
                        present.join(", ")
                    ),
                ));
            }
        }
        DeviceRequest::Named(names) => {
            let mut missing = Vec::new();
            for n in names {
                match scan.device(n) {
                    Some(d) => selected.push(d),
                    None => missing.push(n.clone()),
                }
            }
            for n in &missing {
                let hint = match closest(n, present) {
                    Some(c) => format!("did you mean `{c}`? Present: {}", present.join(", ")),
                    None => format!("present devices: {}", present.join(", ")),
                };
                report.push(Check::fail(
                    G,
                    &format!("device {n}"),
                    format!("MOONCAKE_DEVICE names `{n}`, which does not exist on this node; Mooncake would silently drop it (\"Found 0 HCAs\")"),
                    hint,
                ));
            }
            if missing.is_empty() && !names.is_empty() {
                report.push(Check::ok(
                    G,
                    "devices",
                    format!("MOONCAKE_DEVICE {} all present", names.join(",")),
                ));
            }
        }
    }
    selected
}

/// Workers may name devices too (SGLang's JSON map per TP rank): each must exist.
fn check_worker_devices(
    plan: &Plan,
    scan: &mcsup_rdma::SysfsScan,
    present: &[String],
    report: &mut Report,
) {
    for w in plan
        .processes
        .iter()
        .filter(|p| p.kind == ProcessKind::Worker)
    {
        if let Some(v) = w.env_value("MOONCAKE_DEVICE") {
            if let DeviceRequest::Named(names) = parse_device_list(v) {
                for n in names.iter().filter(|n| scan.device(n).is_none()) {
                    let hint = closest(n, present).map_or_else(
                        || format!("present devices: {}", present.join(", ")),
                        |c| format!("did you mean `{c}`?"),
                    );
                    report.push(Check::fail(
                        G,
                        &format!("{} device {n}", w.name),
                        format!(
                            "{}'s MOONCAKE_DEVICE names `{n}`, which does not exist",
                            w.name
                        ),
                        hint,
                    ));
                }
            }
        }
    }
}

/// The node's Mooncake clients (its store, and each worker's transfer engine) that would choose
/// GIDs by different indices: each reads `MC_GID_INDEX`, else `NCCL_IB_GID_INDEX`. The store's
/// `MC_GID_INDEX=3` beside a worker's `NCCL_IB_GID_INDEX=2` (the adversarial re-run's GID case)
/// passed: the worker's transfer engine falls back to 2.
fn check_gid_across(plan: &Plan, inherited: &[(String, String)], report: &mut Report) {
    let mut seen: Vec<(&str, String, String)> = Vec::new();
    for p in plan
        .processes
        .iter()
        .filter(|p| matches!(p.kind, ProcessKind::Store | ProcessKind::Worker))
    {
        let setting = lookup(Some(p), inherited, "MC_GID_INDEX")
            .map(|(v, src)| (v, format!("MC_GID_INDEX, {src}")))
            .or_else(|| {
                lookup(Some(p), inherited, "NCCL_IB_GID_INDEX").map(|(v, src)| {
                    (
                        v,
                        format!("NCCL_IB_GID_INDEX, which Mooncake falls back to, {src}"),
                    )
                })
            });
        if let Some((v, src)) = setting {
            seen.push((&p.name, v.trim().to_string(), src));
        }
    }
    let Some((first, value, src)) = seen.first() else {
        return;
    };
    if let Some((other, v2, src2)) = seen.iter().find(|(_, v, _)| v != value) {
        report.push(Check::warn(
            G,
            "gid index across processes",
            format!(
                "{first} reads GID index {value} ({src}) and {other} reads {v2} ({src2}): this node's Mooncake clients would choose different GIDs of one NIC"
            ),
            "give every process the same MC_GID_INDEX (the one `mcsup preflight` shows as usable): in standalone.env and in the workers' environment",
        ));
    }
}

/// `MC_GID_INDEX`, or NCCL's index Mooncake falls back to, as Mooncake parses it.
fn gid_config(env: &McEnv, report: &mut Report) -> GidConfig {
    // Both set and different: NCCL's transfers and Mooncake's go through different GIDs (one
    // RoCE v1 and one v2, or two subnets), which works on one fabric and not on another.
    if let (Some((mc, mc_src)), Some((nccl, nccl_src))) =
        (env.get("MC_GID_INDEX"), env.get("NCCL_IB_GID_INDEX"))
    {
        if mc.trim() != nccl.trim() {
            report.push(Check::warn(
                G,
                "gid index agreement",
                format!(
                    "MC_GID_INDEX={} ({mc_src}) and NCCL_IB_GID_INDEX={} ({nccl_src}) differ: Mooncake's KV transfers and NCCL's collectives use different GIDs of the same NIC",
                    mc.trim(),
                    nccl.trim()
                ),
                "give both the same index (the one `mcsup preflight` shows as usable), unless the two fabrics really differ",
            ));
        }
    }
    let gid_setting = match env.get("MC_GID_INDEX") {
        Some((v, src)) => Some((v.trim().to_string(), format!("MC_GID_INDEX ({src})"))),
        None => env.get("NCCL_IB_GID_INDEX").map(|(v, src)| {
            report.push(Check::warn(
                G,
                "gid index source",
                format!("MC_GID_INDEX is unset, so Mooncake silently takes NCCL_IB_GID_INDEX={} from the {src}", v.trim()),
                "set MC_GID_INDEX explicitly in standalone.env (and mooncake_kv_store.env) so NCCL's setting does not pin Mooncake by accident",
            ));
            (v.trim().to_string(), format!("NCCL_IB_GID_INDEX ({src})"))
        }),
    };

    // Mooncake reads the value with atoi and accepts 0..=255; anything else means automatic.
    let mut auto_because: Option<String> = None;
    let explicit: Option<(u32, String)> = match &gid_setting {
        None => None,
        Some((text, src)) => {
            let (setting, note) = parse_gid_index(text);
            match note {
                GidParseNote::Plain => {}
                GidParseNote::ReadAs(n) => report.push(Check::warn(
                    G,
                    "gid index value",
                    format!(
                        "{src} is `{text}`: Mooncake reads it with atoi as {n}{}",
                        if n == 0 { ", which pins GID slot 0; it does not mean automatic choice" } else { "" }
                    ),
                    "write a plain index such as 3, or -1 for Mooncake's automatic choice",
                )),
                GidParseNote::OutOfRange(n) => report.push(Check::warn(
                    G,
                    "gid index value",
                    format!("{src} is `{text}` ({n}), outside 0..255: Mooncake logs a warning and chooses automatically"),
                    "remove it (or write -1) for automatic choice, or give an index in 0..255",
                )),
            }
            match setting {
                GidIndexSetting::Index(i) => Some((i, src.clone())),
                GidIndexSetting::Auto => {
                    auto_because = Some(format!("{src}={text} means automatic"));
                    None
                }
            }
        }
    };

    GidConfig {
        explicit,
        auto_because,
    }
}

/// The port Mooncake opens on `d`, and whether it is ACTIVE.
fn check_port<'d>(
    d: &'d Device,
    port_no: u32,
    report: &mut Report,
) -> Option<&'d mcsup_rdma::Port> {
    let Some(port) = d.port(port_no) else {
        report.push(Check::fail(
            G,
            &format!("port {}/{port_no}", d.name),
            format!("{} has no port {port_no}", d.name),
            format!(
                "set MC_IB_PORT to one of: {}",
                d.ports
                    .iter()
                    .map(|p| p.number.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
        return None;
    };
    let pname = format!("port {}/{port_no}", d.name);
    match port.state {
        Some(PortState::Active) => report.push(Check::ok(
            G,
            &pname,
            format!(
                "ACTIVE, {}{}",
                port.link_layer
                    .as_ref()
                    .map_or("?".into(), |l| l.to_string()),
                port.rate
                    .as_ref()
                    .map_or(String::new(), |r| format!(", {r}"))
            ),
        )),
        Some(PortState::Init) => report.push(Check::fail(
            G,
            &pname,
            "port is INIT: the link is up but no subnet manager has configured it",
            "start a subnet manager (opensm) on the fabric or fix the switch's SM",
        )),
        Some(PortState::Down) => report.push(Check::fail(
            G,
            &pname,
            format!(
                "port is DOWN (physical state {})",
                port.phys_state.map_or("?".into(), |p| p.to_string())
            ),
            "check the cable, the switch port and the peer; `ibstat` shows the link",
        )),
        other => report.push(Check::fail(
            G,
            &pname,
            format!(
                "port state is {}",
                other.map_or("unknown".into(), |s| s.to_string())
            ),
            "the port must be ACTIVE",
        )),
    }
    Some(port)
}

/// An explicit GID index on `d`: in the table, populated, RoCE v2 where it matters, and as the
/// installed (older) Mooncake reads it. Returns the index.
fn check_gid_explicit(
    d: &Device,
    port: &mcsup_rdma::Port,
    idx: u32,
    src: &str,
    legacy: Option<(&str, LegacyGidRule)>,
    report: &mut Report,
) -> Option<u32> {
    let ethernet = matches!(port.link_layer, Some(LinkLayer::Ethernet));
    let gname = format!("gid index {}", d.name);
    let v = evaluate_gid_index(&port.gids, idx);
    match legacy {
        // 0.3.8-0.3.9 failed the device when the configured slot had no netdev
        // (mooncake-internals.md §A3); 0.3.10 made it a warning.
        Some((version, LegacyGidRule::V0_3_8))
            if v.in_table && v.populated && v.netdev.is_none() =>
        {
            report.push(Check::fail(
                                G,
                                &format!("{gname} (Mooncake {version})"),
                                format!("the installed Mooncake {version} disables {} when the configured GID ({src}={idx}) has no netdev, as every IB GID has none (0.3.10 made this a warning)", d.name),
                                "upgrade Mooncake to 0.3.10 or later, or configure a GID that has a netdev",
                            ));
        }
        // Up to 0.3.7, index 0 meant "choose automatically".
        Some((version, LegacyGidRule::UpTo0_3_7)) if idx == 0 => {
            let pick = select_gid_legacy(&port.gids, LegacyGidRule::UpTo0_3_7).unwrap_or(0);
            if pick != 0 {
                report.push(Check::warn(
                                    G,
                                    &format!("{gname} (Mooncake {version})"),
                                    format!("the installed Mooncake {version} reads {src}=0 as \"choose automatically\" and picks index {pick} on {}, not 0", d.name),
                                    format!("set MC_GID_INDEX={pick} to say so, or upgrade Mooncake to 0.3.8 or later"),
                                ));
            }
        }
        _ => {}
    }
    if !v.in_table {
        report.push(Check::fail(
            G,
            &gname,
            format!(
                "{src}={idx} is beyond the GID table ({} entries)",
                port.gids.len()
            ),
            auto_hint(port),
        ));
    } else if !v.populated {
        report.push(Check::fail(
                            G,
                            &gname,
                            format!("{src}={idx} is an empty GID slot on {}: Mooncake fails with \"GID is NULL, please check your GID index\"", d.name),
                            auto_hint(port),
                        ));
    } else if ethernet && v.gid_type == Some(GidType::RoceV1) {
        report.push(Check::fail(
                            G,
                            &gname,
                            format!("{src}={idx} on {} is RoCE v1: on a routed fabric QPs fail with \"transport retry counter exceeded\"", d.name),
                            auto_hint(port),
                        ));
    } else if v.link_local && ethernet {
        report.push(Check::warn(
            G,
            &gname,
            format!(
                "{src}={idx} on {} is RoCE v2 but IPv6 link-local ({}): it cannot cross a router",
                d.name,
                v.gid.map_or(String::new(), |g| g.to_string())
            ),
            auto_hint(port),
        ));
    } else if ethernet && v.netdev.is_none() {
        report.push(Check::warn(
            G,
            &gname,
            format!("{src}={idx} on {} has no netdev", d.name),
            auto_hint(port),
        ));
    } else {
        let ip = v.ipv4.map_or(String::new(), |a| format!(", IPv4 {a}"));
        report.push(Check::ok(
            G,
            &gname,
            format!(
                "{src}={idx}: {}{ip}{}",
                v.gid_type.map_or("?".into(), |t| t.to_string()),
                v.netdev
                    .as_ref()
                    .map_or(String::new(), |n| format!(", netdev {n}"))
            ),
        ));
    }
    Some(idx)
}

/// Mooncake's automatic GID choice on `d`, and what an older installed Mooncake picks instead.
/// Returns the index chosen.
fn check_gid_auto(
    d: &Device,
    port: &mcsup_rdma::Port,
    port_no: u32,
    auto_because: Option<&str>,
    legacy: Option<(&str, LegacyGidRule)>,
    report: &mut Report,
) -> Option<u32> {
    let gname = format!("gid index {}", d.name);
    let sel = select_gid(&port.gids);
    let chosen = match sel.chosen_candidate() {
        Some(c) => {
            let others: Vec<String> = sel
                .candidates
                .iter()
                .filter(|o| o.index != c.index && o.gid_type.is_some())
                .take(6)
                .map(|o| match (&o.assessment, &o.outcome) {
                    (GidAssessment::Rejected { reason }, _) => format!("{}: {reason:?}", o.index),
                    (GidAssessment::Eligible { rank }, SelectionOutcome::Outranked { .. }) => {
                        format!("{}: outranked ({})", o.index, rank_text(rank))
                    }
                    (_, SelectionOutcome::TieLowerIndexWins { .. }) => {
                        format!("{}: same rank, higher index", o.index)
                    }
                    _ => format!("{}", o.index),
                })
                .collect();
            if let Some((version, rule)) = legacy {
                let old = select_gid_legacy(&port.gids, rule);
                if old != Some(c.index) {
                    report.push(Check::warn(
                                    G,
                                    &format!("{gname} (Mooncake {version})"),
                                    format!(
                                        "the installed Mooncake {version} ({rule:?} rule) picks {} on {} port {port_no}, not {} as 0.3.12 and later would",
                                        old.map_or("no GID (the device fails to open)".to_string(), |i| format!("index {i}")),
                                        d.name,
                                        c.index
                                    ),
                                    format!("set MC_GID_INDEX={} (the GID 0.3.12+ picks), or upgrade Mooncake to 0.3.12 or later", c.index),
                                ));
                }
            }
            let why = c.assessment.rank().map_or(String::new(), rank_text);
            report.push(Check::ok(
                G,
                &gname,
                format!(
                    "{}: Mooncake will pick {} ({why}){}",
                    auto_because.unwrap_or("MC_GID_INDEX unset"),
                    c.index,
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!("; others: {}", others.join("; "))
                    }
                ),
            ));
            Some(c.index)
        }
        None => {
            report.push(Check::fail(
                        G,
                        &gname,
                        format!("{} and no GID on {} port {port_no} is RoCE v2 or IB: Mooncake cannot pick one", auto_because.unwrap_or("MC_GID_INDEX unset"), d.name),
                        "configure an IP on the RoCE netdev (it creates RoCE v2 GIDs), then set MC_GID_INDEX",
                    ));
            None
        }
    };
    chosen
}

/// The uverbs character device opens.
fn check_uverbs(d: &Device, report: &mut Report) {
    match d.uverbs.as_ref() {
            Some(u) => match u.check_open() {
                Ok(()) => report.push(Check::ok(G, &format!("uverbs {}", d.name), format!("{} opens read/write", u.char_device.display()))),
                Err(CharDeviceError::PermissionDenied { .. }) => report.push(Check::fail(
                    G,
                    &format!("uverbs {}", d.name),
                    format!("{} exists but open() is denied", u.char_device.display()),
                    "allow /dev/infiniband in the job's device cgroup / container (e.g. --device=/dev/infiniband)",
                )),
                Err(e) => report.push(Check::fail(G, &format!("uverbs {}", d.name), format!("{}: {e}", u.char_device.display()), "make /dev/infiniband/uverbs* available to the job")),
            },
            None => report.push(Check::fail(G, &format!("uverbs {}", d.name), format!("{} has no uverbs device", d.name), "load ib_uverbs (modprobe ib_uverbs)")),
        }
}

/// The RoCE MTUs agree across devices, and the path MTU Mooncake's endpoints use.
fn check_mtus(mtus: &[(String, String)], env: &McEnv, report: &mut Report) {
    if mtus.len() > 1 && mtus.iter().any(|(_, m)| *m != mtus[0].1) {
        report.push(Check::warn(
            G,
            "active mtu",
            format!(
                "active MTU differs across devices: {}",
                mtus.iter()
                    .map(|(d, m)| format!("{d}={m}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "give every RoCE netdev the same MTU (Mooncake does not negotiate MTU between peers)",
        ));
    } else if let Some((_, m)) = mtus.first() {
        report.push(Check::ok(G, "active mtu", format!("{m} on every device")));
        report.facts.active_mtu = m.parse().ok();
        let mc_mtu = env.get("MC_MTU").map(|(v, _)| v.to_string());
        let (pmtu, note) = crate::mooncake::path_mtu(m.parse().unwrap_or(4096), mc_mtu.as_deref());
        if let Some(note) = note {
            report.push(Check::warn(
                G,
                "mc_mtu",
                note,
                "set MC_MTU to 512, 1024, 2048 or 4096, or remove it",
            ));
        }
        report.push(Check::ok(
            G,
            "path mtu",
            format!(
                "{pmtu}: min(active {m}, MC_MTU {}, 4096), what Mooncake's RDMA endpoints use",
                mc_mtu.as_deref().unwrap_or("unset")
            ),
        ));
        report.facts.path_mtu = Some(pmtu);
    }
}

fn auto_hint(port: &mcsup_rdma::Port) -> String {
    match select_gid(&port.gids).chosen {
        Some(i) => {
            format!("use MC_GID_INDEX={i} (what Mooncake's auto-selection picks here), or unset it")
        }
        None => "no RoCE v2/IB GID is populated on this port: configure an IP on its netdev".into(),
    }
}

#[cfg(feature = "ibverbs")]
fn verbs_summary(report: &mut Report) {
    match mcsup_rdma::verbs::scan() {
        Ok(mcsup_rdma::verbs::VerbsScan::NoSubsystem) => report.push(Check::ok(
            G,
            "ibverbs",
            "libibverbs: no RDMA subsystem (ibv_get_device_list: ENOSYS)",
        )),
        Ok(mcsup_rdma::verbs::VerbsScan::NoDevices) => {
            report.push(Check::ok(G, "ibverbs", "libibverbs: no RDMA devices"))
        }
        Ok(mcsup_rdma::verbs::VerbsScan::Devices(d)) => report.push(Check::ok(
            G,
            "ibverbs",
            format!(
                "libibverbs sees {}",
                d.iter()
                    .map(|x| x.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        Err(e) => report.push(Check::warn(
            G,
            "ibverbs",
            format!("libibverbs query failed: {e}"),
            "check rdma-core (libibverbs1, ibverbs-providers)",
        )),
    }
}

#[cfg(not(feature = "ibverbs"))]
fn verbs_summary(report: &mut Report) {
    report.push(Check::skip(
        G,
        "ibverbs",
        "built without the ibverbs feature: sysfs only",
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_lists() {
        assert_eq!(parse_device_list(""), DeviceRequest::Auto);
        assert_eq!(parse_device_list("auto-discovery"), DeviceRequest::Auto);
        assert_eq!(
            parse_device_list("mlx5_0, mlx5_1,mlx5_0"),
            DeviceRequest::Named(vec!["mlx5_0".into(), "mlx5_1".into()])
        );
        assert_eq!(
            parse_device_list(r#"{"0": "mlx5_0", "1": "mlx5_1", "2": "mlx5_0"}"#),
            DeviceRequest::Named(vec!["mlx5_0".into(), "mlx5_1".into()])
        );
    }
}
