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
    let main_spec = store.or(first_worker);

    let scan = match SysfsReader::new(root.path("/")).scan() {
        Ok(s) => s,
        Err(e) => {
            report.push(Check::fail(
                G,
                "devices",
                format!("cannot read RDMA devices from sysfs: {e}"),
                "check that /sys is mounted and readable",
            ));
            return 0;
        }
    };
    if live_verbs {
        verbs_summary(report);
    }
    let present: Vec<String> = scan.devices.iter().map(|d| d.name.clone()).collect();
    match scan.presence() {
        RdmaPresence::NoSubsystem => {
            report.push(Check::fail(
                G,
                "devices",
                "no RDMA devices: the RDMA subsystem is absent (no /sys/class/infiniband), but MOONCAKE_PROTOCOL is rdma",
                "run on a node with RDMA NICs and their drivers (mlx5_ib), or set MOONCAKE_PROTOCOL: tcp",
            ));
            return 0;
        }
        RdmaPresence::NoDevices => {
            report.push(Check::fail(
                G,
                "devices",
                "no RDMA devices: the RDMA module is loaded but no HCA is visible (/sys/class/infiniband is empty)",
                "check that the NICs are passed into this container/job and their driver is bound, or set MOONCAKE_PROTOCOL: tcp",
            ));
            return 0;
        }
        RdmaPresence::Devices => {}
    }
    report.facts.devices_present = Some(present.clone());

    // Which devices: the store's MOONCAKE_DEVICE; workers' lists are checked for existence too.
    let request = lookup(main_spec, inherited, "MOONCAKE_DEVICE")
        .map_or(DeviceRequest::Auto, |(v, _)| parse_device_list(v));
    let mut selected: Vec<&Device> = Vec::new();
    match &request {
        DeviceRequest::Auto => {
            let forced = lookup(main_spec, inherited, "MC_FORCE_HCA")
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
                let hint = match closest(n, &present) {
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
    // Workers may name devices too (SGLang's JSON map per TP rank).
    for w in plan
        .processes
        .iter()
        .filter(|p| p.kind == ProcessKind::Worker)
    {
        if let Some(v) = w.env_value("MOONCAKE_DEVICE") {
            if let DeviceRequest::Named(names) = parse_device_list(v) {
                for n in names.iter().filter(|n| scan.device(n).is_none()) {
                    let hint = closest(n, &present).map_or_else(
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

    let port_no: u32 = match lookup(main_spec, inherited, "MC_IB_PORT") {
        Some((v, _)) => v.trim().parse().unwrap_or(1),
        None => 1,
    };
    let gid_setting = match lookup(main_spec, inherited, "MC_GID_INDEX") {
        Some((v, src)) => Some((v.trim().to_string(), format!("MC_GID_INDEX ({src})"))),
        None => lookup(main_spec, inherited, "NCCL_IB_GID_INDEX").map(|(v, src)| {
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
    let explicit: Option<(u32, String, String)> = match &gid_setting {
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
                GidIndexSetting::Index(i) => Some((i, text.clone(), src.clone())),
                GidIndexSetting::Auto => {
                    auto_because = Some(format!("{src}={text} means automatic"));
                    None
                }
            }
        }
    };

    let mut mtus: Vec<(String, String)> = Vec::new();
    let mut chosen_indices: Vec<(String, u32)> = Vec::new();
    for d in &selected {
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
            continue;
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
        let ethernet = matches!(port.link_layer, Some(LinkLayer::Ethernet));
        let gname = format!("gid index {}", d.name);
        match &explicit {
            Some((idx, _text, src)) => {
                let idx = *idx;
                {
                    let v = evaluate_gid_index(&port.gids, idx);
                    chosen_indices.push((d.name.clone(), idx));
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
                            let pick = select_gid_legacy(&port.gids, LegacyGidRule::UpTo0_3_7)
                                .unwrap_or(0);
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
                            format!("{src}={idx} on {} is RoCE v2 but IPv6 link-local ({}): it cannot cross a router", d.name, v.gid.map_or(String::new(), |g| g.to_string())),
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
                }
            }
            None => {
                let sel = select_gid(&port.gids);
                match sel.chosen_candidate() {
                    Some(c) => {
                        chosen_indices.push((d.name.clone(), c.index));
                        let others: Vec<String> = sel
                            .candidates
                            .iter()
                            .filter(|o| o.index != c.index && o.gid_type.is_some())
                            .take(6)
                            .map(|o| match (&o.assessment, &o.outcome) {
                                (GidAssessment::Rejected { reason }, _) => format!("{}: {reason:?}", o.index),
                                (GidAssessment::Eligible { rank }, SelectionOutcome::Outranked { .. }) => format!("{}: outranked ({})", o.index, rank_text(rank)),
                                (_, SelectionOutcome::TieLowerIndexWins { .. }) => format!("{}: same rank, higher index", o.index),
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
                            format!("{}: Mooncake will pick {} ({why}){}", auto_because.as_deref().unwrap_or("MC_GID_INDEX unset"), c.index, if others.is_empty() { String::new() } else { format!("; others: {}", others.join("; ")) }),
                        ));
                    }
                    None => report.push(Check::fail(
                        G,
                        &gname,
                        format!("{} and no GID on {} port {port_no} is RoCE v2 or IB: Mooncake cannot pick one", auto_because.as_deref().unwrap_or("MC_GID_INDEX unset"), d.name),
                        "configure an IP on the RoCE netdev (it creates RoCE v2 GIDs), then set MC_GID_INDEX",
                    )),
                }
            }
        }
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
        let mc_mtu = lookup(main_spec, inherited, "MC_MTU").map(|(v, _)| v.to_string());
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
    report.facts.gid_index = Some(chosen_indices);
    report.facts.devices = Some(selected.iter().map(|d| d.name.clone()).collect());
    selected.len()
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
