//! Mooncake's automatic GID index choice ("auto GID"), and facts about an explicit index.
//!
//! Responsibility: given one port's GID table (as `mcsup_rdma`'s sysfs reader returns it),
//! predict which index the Mooncake transfer engine picks when no index is configured
//! (`MC_GID_INDEX`/`NCCL_IB_GID_INDEX` unset), with a per-index explanation, and describe an
//! explicitly configured index. The rule is Mooncake's (`findBestGidIndex` and
//! `rdma_gid_probe.h`: `classifyAutoGidCandidate`, `rankAutoGidCandidates`, in
//! kvcache-ai/Mooncake `mooncake-transfer-engine/` at v0.3.12.post1, #2269 `4d7c1a19b` and #2741
//! `275e84cf7`), which is also what 0.3.13 ships. This module reproduces
//! that policy rather than inventing one: the point is to tell the user in advance what
//! Mooncake will do. It lives here, not in the `mcsup-rdma` crate, because that crate knows
//! devices and nothing about Mooncake.
//! Must not: do any I/O (no sysfs, no libibverbs, no environment variables, no recipes: the
//! caller reads the table and knows whether an index was configured and where from), or word
//! messages for users (the caller renders the verdicts). Pure functions over values.
//!
//! The rule as implemented: only RoCE v2 and native IB GIDs are eligible (RoCE v1 fails with
//! "transport retry counter exceeded" on routed fabrics) and all-zero slots are skipped.
//! Eligible GIDs rank, best first: routable with a netdev, routable without a netdev, private
//! IPv4 (10/8, 172.16/12, 100.64/10), degraded (netdev named `flannel*`, `cni*`, `calico*`,
//! `vxlan*`, `docker*` or `tunl0`, or an IPv6 link-local address `fe80::/10`). Ties go to the
//! lowest index.
//!
//! Known differences from §A1, kept as they were when this code moved out of `mcsup-rdma`
//! (the move did not change behaviour): §A1 applies the degraded and private flags to RoCE v2
//! only (an IB GID is never demoted; here an `fe80::` IB GID ranks as link-local degraded);
//! §A1 ranks private IPv4 and degraded GIDs *without* a netdev below degraded ones with a netdev
//! (classes 4 and 5; here the netdev does not matter for those tiers); and when no RoCE v2 or IB
//! GID exists, §A1 falls back to the first non-zero GID (class 6, in practice the lowest RoCE v1
//! one) where this returns no choice.

use std::net::Ipv4Addr;

use serde::Serialize;

use mcsup_rdma::{Gid, GidEntry, GidType};

/// Why an eligible GID is degraded.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum DegradedReason {
    /// Its netdev belongs to a container/overlay network (`docker0`, `flannel.1`, ...).
    VirtualNetdev {
        /// The netdev name.
        netdev: String,
    },
    /// The address is IPv6 link-local (`fe80::/10`): it cannot cross a router. Native IB port
    /// GIDs carry the default `fe80::` subnet prefix too, and the rule does not tell them apart.
    LinkLocal,
}

/// Rank of an eligible GID, best first (the declaration order is the ranking).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "rank")]
pub enum GidRank {
    /// Routable, with a netdev: the best choice.
    Routable {
        /// The netdev (`gid_attrs/ndevs/I`).
        netdev: String,
    },
    /// Routable, but the kernel names no netdev (native IB GIDs are here).
    RoutableNoNetdev,
    /// An IPv4-mapped GID in 10/8, 172.16/12 or 100.64/10.
    PrivateIpv4 {
        /// The decoded address.
        addr: Ipv4Addr,
    },
    /// Usable but poor (see the reason).
    Degraded {
        /// Why.
        reason: DegradedReason,
    },
}

impl GidRank {
    /// 0 for the best tier, 3 for degraded: lower wins.
    pub fn tier(&self) -> u8 {
        match self {
            GidRank::Routable { .. } => 0,
            GidRank::RoutableNoNetdev => 1,
            GidRank::PrivateIpv4 { .. } => 2,
            GidRank::Degraded { .. } => 3,
        }
    }
}

/// Why a GID is not eligible at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GidRejection {
    /// The slot is empty (all-zero GID).
    Empty,
    /// The GID's type could not be read.
    UnknownType,
    /// RoCE v1: not routable, so never picked automatically.
    RoceV1,
}

/// How the selection rule judges one GID on its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "assessment")]
pub enum GidAssessment {
    /// Eligible, with its rank.
    Eligible {
        /// The rank.
        rank: GidRank,
    },
    /// Not eligible.
    Rejected {
        /// Why.
        reason: GidRejection,
    },
}

impl GidAssessment {
    /// The rank, when eligible.
    pub fn rank(&self) -> Option<&GidRank> {
        match self {
            GidAssessment::Eligible { rank } => Some(rank),
            GidAssessment::Rejected { .. } => None,
        }
    }
}

/// How one index fared in the automatic selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum SelectionOutcome {
    /// This index is the one picked.
    Chosen,
    /// Eligible, but the chosen index has a better rank.
    Outranked {
        /// The chosen index.
        by: u32,
    },
    /// Eligible with the same rank as the chosen index, which is lower.
    TieLowerIndexWins {
        /// The chosen index.
        by: u32,
    },
    /// Not eligible.
    Rejected,
}

/// One index of the table with the rule's verdict on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GidCandidate {
    /// Table index.
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its type, when known.
    pub gid_type: Option<GidType>,
    /// Its netdev, when any.
    pub netdev: Option<String>,
    /// The verdict on this GID alone.
    pub assessment: GidAssessment,
    /// The verdict relative to the others.
    pub outcome: SelectionOutcome,
}

/// The predicted automatic choice for one port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GidSelection {
    /// The index Mooncake picks, or `None` when no GID is eligible (Mooncake then fails the
    /// device with "No suitable GID found").
    pub chosen: Option<u32>,
    /// Every slot given, in input order (empty slots included, rejected as [`GidRejection::Empty`]).
    pub candidates: Vec<GidCandidate>,
}

impl GidSelection {
    /// The verdict on one index.
    pub fn candidate(&self, index: u32) -> Option<&GidCandidate> {
        self.candidates.iter().find(|c| c.index == index)
    }

    /// The chosen candidate.
    pub fn chosen_candidate(&self) -> Option<&GidCandidate> {
        self.chosen.and_then(|i| self.candidate(i))
    }

    /// Candidates holding a non-zero GID (what is worth showing to a user).
    pub fn populated(&self) -> impl Iterator<Item = &GidCandidate> {
        self.candidates.iter().filter(|c| !c.gid.is_zero())
    }
}

/// Netdev name prefixes of container and overlay networks that the rule degrades.
const VIRTUAL_NETDEV_PREFIXES: [&str; 5] = ["flannel", "cni", "calico", "vxlan", "docker"];

/// True when the rule counts `netdev` as a container/overlay interface.
pub fn is_virtual_netdev(netdev: &str) -> bool {
    netdev == "tunl0"
        || VIRTUAL_NETDEV_PREFIXES
            .iter()
            .any(|p| netdev.starts_with(p))
}

/// True for the private IPv4 ranges the rule ranks below routable ones: 10/8, 172.16/12 and
/// the carrier-grade NAT range 100.64/10. 192.168/16 is deliberately absent: the rule treats it
/// as routable, and this function must match the rule, not RFC 1918.
pub fn is_ranked_private_ipv4(addr: Ipv4Addr) -> bool {
    let o = addr.octets();
    o[0] == 10 || (o[0] == 172 && (o[1] & 0xf0) == 16) || (o[0] == 100 && (o[1] & 0xc0) == 64)
}

/// Judges one GID on its own.
pub fn assess_gid(entry: &GidEntry) -> GidAssessment {
    let rejected = |reason| GidAssessment::Rejected { reason };
    if entry.gid.is_zero() {
        return rejected(GidRejection::Empty);
    }
    match entry.gid_type {
        None => return rejected(GidRejection::UnknownType),
        Some(GidType::RoceV1) => return rejected(GidRejection::RoceV1),
        Some(GidType::RoceV2) | Some(GidType::Ib) => {}
    }
    let rank = if let Some(netdev) = entry.netdev.as_deref().filter(|n| is_virtual_netdev(n)) {
        GidRank::Degraded {
            reason: DegradedReason::VirtualNetdev {
                netdev: netdev.to_owned(),
            },
        }
    } else if entry.gid.is_ipv6_link_local() {
        GidRank::Degraded {
            reason: DegradedReason::LinkLocal,
        }
    } else if let Some(addr) = entry
        .gid
        .ipv4_mapped()
        .filter(|a| is_ranked_private_ipv4(*a))
    {
        GidRank::PrivateIpv4 { addr }
    } else if let Some(netdev) = &entry.netdev {
        GidRank::Routable {
            netdev: netdev.clone(),
        }
    } else {
        GidRank::RoutableNoNetdev
    };
    GidAssessment::Eligible { rank }
}

/// Predicts Mooncake's automatic GID index choice over one port's table.
pub fn select_gid(gids: &[GidEntry]) -> GidSelection {
    let assessed: Vec<(&GidEntry, GidAssessment)> =
        gids.iter().map(|g| (g, assess_gid(g))).collect();
    // Best = lowest tier, then lowest index; input order does not matter.
    let best = assessed
        .iter()
        .filter_map(|(g, a)| a.rank().map(|r| (r.tier(), g.index)))
        .min();
    let chosen = best.map(|(_, index)| index);
    let candidates = assessed
        .into_iter()
        .map(|(g, assessment)| {
            let outcome = match (assessment.rank(), best) {
                (None, _) | (_, None) => SelectionOutcome::Rejected,
                (Some(_), Some((_, by))) if g.index == by => SelectionOutcome::Chosen,
                (Some(r), Some((tier, by))) if r.tier() == tier => {
                    SelectionOutcome::TieLowerIndexWins { by }
                }
                (Some(_), Some((_, by))) => SelectionOutcome::Outranked { by },
            };
            GidCandidate {
                index: g.index,
                gid: g.gid,
                gid_type: g.gid_type,
                netdev: g.netdev.clone(),
                assessment,
                outcome,
            }
        })
        .collect();
    GidSelection { chosen, candidates }
}

/// The automatic GID rules Mooncake shipped before 0.3.12 (`getBestGidIndex` up to 0.3.7; #1077
/// `fe4e67ddb` in 0.3.8; #1597 `34dacaec1` in 0.3.10), for a node that runs such a release: mcsup's main prediction ([`select_gid`]) is the
/// 0.3.12+ rule, and these say where an older release's pick differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegacyGidRule {
    /// ≤ 0.3.7: auto only when the index is 0; the first IPv4-mapped RoCE v2 or IB GID, one
    /// with a netdev first (0.3.7's #947; earlier releases skip that preference); index 0 when
    /// nothing qualifies.
    UpTo0_3_7,
    /// 0.3.8–0.3.9: IPv4-mapped RoCE v2 or IB only; the first with a netdev, else the first
    /// without; an unreadable slot is skipped.
    V0_3_8,
    /// 0.3.10–0.3.11: IPv4 RoCE v2 with a netdev > without > IPv6 RoCE v2 or IB with a netdev
    /// (link-local included) > without; the scan stops at the first slot it cannot read, so an
    /// empty slot (rdma-core reports ENODATA for it) hides every later index.
    V0_3_10,
}

impl LegacyGidRule {
    /// The rule of release `(major, minor, patch)`, `None` for 0.3.12 and later.
    pub fn of(version: (u32, u32, u32)) -> Option<LegacyGidRule> {
        match version {
            v if v >= (0, 3, 12) => None,
            v if v >= (0, 3, 10) => Some(LegacyGidRule::V0_3_10),
            v if v >= (0, 3, 8) => Some(LegacyGidRule::V0_3_8),
            _ => Some(LegacyGidRule::UpTo0_3_7),
        }
    }
}

/// The index `rule` picks on one port's table (`None`: the release finds no GID and the
/// device fails to open).
pub fn select_gid_legacy(gids: &[GidEntry], rule: LegacyGidRule) -> Option<u32> {
    let mut table: Vec<&GidEntry> = gids.iter().collect();
    table.sort_by_key(|g| g.index);
    let ipv4_or_ib = |g: &GidEntry| match g.gid_type {
        Some(GidType::RoceV2) => g.gid.ipv4_mapped().is_some(),
        Some(GidType::Ib) => g.is_populated(),
        _ => false,
    };
    let first = |pred: &dyn Fn(&GidEntry) -> bool, rows: &[&GidEntry]| {
        rows.iter().find(|g| pred(g)).map(|g| g.index)
    };
    match rule {
        LegacyGidRule::UpTo0_3_7 | LegacyGidRule::V0_3_8 => {
            let with_netdev = first(&|g| ipv4_or_ib(g) && g.netdev.is_some(), &table);
            let any = first(&|g| ipv4_or_ib(g), &table);
            let pick = with_netdev.or(any);
            if rule == LegacyGidRule::UpTo0_3_7 {
                Some(pick.unwrap_or(0))
            } else {
                pick
            }
        }
        LegacyGidRule::V0_3_10 => {
            let readable: Vec<&GidEntry> = table
                .iter()
                .take_while(|g| g.gid_type.is_some() && g.is_populated())
                .copied()
                .collect();
            let v4 =
                |g: &GidEntry| g.gid_type == Some(GidType::RoceV2) && g.gid.ipv4_mapped().is_some();
            let v6_or_ib = |g: &GidEntry| match g.gid_type {
                Some(GidType::RoceV2) => g.gid.ipv4_mapped().is_none(),
                Some(GidType::Ib) => true,
                _ => false,
            };
            first(&|g| v4(g) && g.netdev.is_some(), &readable)
                .or_else(|| first(&|g| v4(g), &readable))
                .or_else(|| first(&|g| v6_or_ib(g) && g.netdev.is_some(), &readable))
                .or_else(|| first(&|g| v6_or_ib(g), &readable))
        }
    }
}

/// Facts about an explicitly configured GID index, for the caller to word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExplicitGidVerdict {
    /// The index asked about.
    pub index: u32,
    /// Whether the table has this slot at all (index < table length).
    pub in_table: bool,
    /// Whether the slot holds a non-zero GID. Mooncake refuses an empty one with "GID is NULL".
    pub populated: bool,
    /// The GID, when the slot exists.
    pub gid: Option<Gid>,
    /// Its type, when known.
    pub gid_type: Option<GidType>,
    /// Its netdev, when any.
    pub netdev: Option<String>,
    /// Whether the GID is IPv6 link-local (`fe80::/10`).
    pub link_local: bool,
    /// The IPv4 address of an IPv4-mapped GID.
    pub ipv4: Option<Ipv4Addr>,
    /// What the automatic rule would think of this GID (`None` when the slot does not exist).
    pub assessment: Option<GidAssessment>,
}

/// Describes an explicitly configured index of one port's table.
pub fn evaluate_gid_index(gids: &[GidEntry], index: u32) -> ExplicitGidVerdict {
    match gids.iter().find(|g| g.index == index) {
        None => ExplicitGidVerdict {
            index,
            in_table: false,
            populated: false,
            gid: None,
            gid_type: None,
            netdev: None,
            link_local: false,
            ipv4: None,
            assessment: None,
        },
        Some(g) => ExplicitGidVerdict {
            index,
            in_table: true,
            populated: !g.gid.is_zero(),
            gid: Some(g.gid),
            gid_type: g.gid_type,
            netdev: g.netdev.clone(),
            link_local: g.gid.is_ipv6_link_local(),
            ipv4: g.gid.ipv4_mapped(),
            assessment: Some(assess_gid(g)),
        },
    }
}

/// What Mooncake makes of `MC_GID_INDEX` (or, when that is unset, `NCCL_IB_GID_INDEX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidIndexSetting {
    /// Automatic choice ([`select_gid`]).
    Auto,
    /// This slot of the table.
    Index(u32),
}

/// How a configured value was read, beyond its plain meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GidParseNote {
    /// A plain index in 0..=255, or `-1` (the documented way to force auto).
    Plain,
    /// Not a plain number: `atoi` read this much of it (`auto` and `""` become 0).
    ReadAs(i64),
    /// Outside 0..=255 (other than -1): Mooncake logs a warning and picks automatically.
    OutOfRange(i64),
}

/// Mooncake's parsing (`config.cpp::loadGlobalConfig`): `atoi` of the value, accepted when it is
/// in 0..=255, otherwise the index stays -1 (auto). C's `atoi` skips leading white space, takes
/// an optional sign and the digits that follow, and stops at the first other character; no
/// digits at all gives 0 — so `auto` and the empty string pin index 0, not automatic choice.
pub fn parse_gid_index(value: &str) -> (GidIndexSetting, GidParseNote) {
    let t = value.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, rest) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    // atoi overflows are undefined in C; anything that long is out of range either way.
    let magnitude: i64 = digits
        .parse()
        .unwrap_or(if digits.is_empty() { 0 } else { i64::MAX });
    let n = if neg { -magnitude } else { magnitude };
    // A plain value is exactly an optional sign and digits: what atoi reads is what was meant.
    let body = value.strip_prefix(['+', '-']).unwrap_or(value);
    let plain = !body.is_empty() && body.bytes().all(|b| b.is_ascii_digit());
    let setting = if (0..=255).contains(&n) {
        GidIndexSetting::Index(n as u32)
    } else {
        GidIndexSetting::Auto
    };
    let note = if n == -1 && plain {
        GidParseNote::Plain
    } else if !(0..=255).contains(&n) {
        GidParseNote::OutOfRange(n)
    } else if plain {
        GidParseNote::Plain
    } else {
        GidParseNote::ReadAs(n)
    };
    (setting, note)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u32, gid: &str, ty: Option<GidType>, netdev: Option<&str>) -> GidEntry {
        GidEntry {
            index,
            gid: Gid::parse_sysfs(gid).expect("test gid"),
            gid_type: ty,
            netdev: netdev.map(str::to_owned),
        }
    }

    fn v4(index: u32, ip: [u8; 4], ty: GidType, netdev: Option<&str>) -> GidEntry {
        GidEntry {
            index,
            gid: Gid::from(Ipv4Addr::from(ip)),
            gid_type: Some(ty),
            netdev: netdev.map(str::to_owned),
        }
    }

    const LL: &str = "fe80:0000:0000:0000:0e42:a1ff:fe1d:d12a";
    const ZERO: &str = "0000:0000:0000:0000:0000:0000:0000:0000";
    use GidType::{Ib, RoceV1, RoceV2};

    /// A RoCE table where the releases disagree: 0 link-local IPv6 with a netdev, 1 a RoCE v1
    /// twin, 2 empty, 3 IPv4 10.x on a netdev, 4 IPv4 routable without a netdev.
    fn mixed_table() -> Vec<GidEntry> {
        vec![
            entry(0, LL, Some(RoceV2), Some("ens1")),
            entry(1, LL, Some(RoceV1), Some("ens1")),
            entry(2, ZERO, None, None),
            v4(3, [10, 1, 2, 3], RoceV2, Some("ens1")),
            v4(4, [203, 0, 113, 7], RoceV2, None),
        ]
    }

    #[test]
    fn legacy_rules_pick_what_each_release_picks() {
        let t = mixed_table();
        // 0.3.12+: routable (no netdev) beats private 10.x and link-local.
        assert_eq!(select_gid(&t).chosen, Some(4));
        // 0.3.8-0.3.9: the first IPv4 with a netdev, skipping the empty slot.
        assert_eq!(select_gid_legacy(&t, LegacyGidRule::V0_3_8), Some(3));
        assert_eq!(select_gid_legacy(&t, LegacyGidRule::UpTo0_3_7), Some(3));
        // 0.3.10-0.3.11: the scan stops at the empty slot 2, so only the link-local GID is left.
        assert_eq!(select_gid_legacy(&t, LegacyGidRule::V0_3_10), Some(0));
        // Without the hole, 0.3.10 takes IPv4 with a netdev first.
        let no_hole: Vec<GidEntry> = t.iter().filter(|g| g.index != 2).cloned().collect();
        assert_eq!(select_gid_legacy(&no_hole, LegacyGidRule::V0_3_10), Some(3));
        // Only IPv6: 0.3.8 finds nothing (the device fails), 0.3.7 falls back to 0.
        let v6_only = vec![entry(0, LL, Some(RoceV2), Some("ens1"))];
        assert_eq!(select_gid_legacy(&v6_only, LegacyGidRule::V0_3_8), None);
        assert_eq!(
            select_gid_legacy(&v6_only, LegacyGidRule::UpTo0_3_7),
            Some(0)
        );
        assert_eq!(select_gid_legacy(&v6_only, LegacyGidRule::V0_3_10), Some(0));
        // IB: an IB GID (never a netdev) qualifies for every release.
        let ib = vec![entry(
            0,
            "fe80:0000:0000:0000:0002:c903:0001:0001",
            Some(Ib),
            None,
        )];
        for r in [
            LegacyGidRule::UpTo0_3_7,
            LegacyGidRule::V0_3_8,
            LegacyGidRule::V0_3_10,
        ] {
            assert_eq!(select_gid_legacy(&ib, r), Some(0), "{r:?}");
        }
    }

    #[test]
    fn legacy_rule_of_each_release() {
        assert_eq!(LegacyGidRule::of((0, 3, 13)), None);
        assert_eq!(LegacyGidRule::of((0, 3, 12)), None);
        assert_eq!(LegacyGidRule::of((0, 3, 11)), Some(LegacyGidRule::V0_3_10));
        assert_eq!(LegacyGidRule::of((0, 3, 10)), Some(LegacyGidRule::V0_3_10));
        assert_eq!(LegacyGidRule::of((0, 3, 9)), Some(LegacyGidRule::V0_3_8));
        assert_eq!(LegacyGidRule::of((0, 3, 8)), Some(LegacyGidRule::V0_3_8));
        assert_eq!(LegacyGidRule::of((0, 3, 7)), Some(LegacyGidRule::UpTo0_3_7));
    }

    #[test]
    fn virtual_netdev_names() {
        for name in [
            "docker0",
            "flannel.1",
            "cni0",
            "calico123",
            "vxlan.calico",
            "tunl0",
        ] {
            assert!(is_virtual_netdev(name), "{name}");
        }
        for name in ["ens1f0np0", "bond0", "tunl1", "eth0", "ib0", "mydocker0"] {
            assert!(!is_virtual_netdev(name), "{name}");
        }
    }

    #[test]
    fn private_ranges() {
        for ip in [
            [10, 0, 0, 1],
            [172, 16, 0, 1],
            [172, 31, 255, 255],
            [100, 64, 0, 1],
            [100, 127, 1, 1],
        ] {
            assert!(is_ranked_private_ipv4(Ipv4Addr::from(ip)), "{ip:?}");
        }
        for ip in [
            [172, 32, 0, 1],
            [172, 15, 0, 1],
            [100, 128, 0, 1],
            [100, 63, 0, 1],
            [192, 168, 1, 10],
            [8, 8, 8, 8],
        ] {
            assert!(!is_ranked_private_ipv4(Ipv4Addr::from(ip)), "{ip:?}");
        }
    }

    #[test]
    fn degraded_netdev_loses_to_routable() {
        let gids = [
            v4(0, [172, 17, 0, 1], RoceV2, Some("docker0")),
            v4(1, [192, 168, 1, 10], RoceV2, Some("ens1f0np0")),
        ];
        let sel = select_gid(&gids);
        assert_eq!(sel.chosen, Some(1));
        let c0 = sel.candidate(0).expect("0");
        assert_eq!(
            c0.assessment.rank(),
            Some(&GidRank::Degraded {
                reason: DegradedReason::VirtualNetdev {
                    netdev: "docker0".into()
                }
            })
        );
        assert_eq!(c0.outcome, SelectionOutcome::Outranked { by: 1 });
    }

    #[test]
    fn private_ipv4_ranks_below_routable_and_above_degraded() {
        let gids = [
            entry(0, LL, Some(RoceV2), Some("ens1f0np0")),
            v4(1, [10, 1, 2, 3], RoceV2, Some("ens1f0np0")),
            v4(2, [203, 0, 113, 7], RoceV2, Some("ens1f0np0")),
        ];
        let sel = select_gid(&gids);
        assert_eq!(sel.chosen, Some(2));
        assert_eq!(
            sel.candidate(1).and_then(|c| c.assessment.rank()),
            Some(&GidRank::PrivateIpv4 {
                addr: Ipv4Addr::new(10, 1, 2, 3)
            })
        );
        // Without the routable one, private beats link-local.
        assert_eq!(select_gid(&gids[..2]).chosen, Some(1));
    }

    #[test]
    fn routable_without_netdev_ranks_between() {
        let gids = [
            v4(0, [100, 64, 0, 9], RoceV2, Some("ens1f0np0")),
            v4(1, [198, 51, 100, 1], RoceV2, None),
            v4(2, [198, 51, 100, 2], RoceV2, Some("ens1f0np0")),
        ];
        let sel = select_gid(&gids);
        assert_eq!(sel.chosen, Some(2));
        assert_eq!(
            sel.candidate(1).map(|c| c.assessment.clone()),
            Some(GidAssessment::Eligible {
                rank: GidRank::RoutableNoNetdev
            })
        );
        assert_eq!(select_gid(&gids[..2]).chosen, Some(1));
    }

    #[test]
    fn ties_go_to_lowest_index_whatever_the_input_order() {
        let gids = [
            v4(7, [192, 168, 1, 11], RoceV2, Some("ens1f0np0")),
            v4(5, [192, 168, 1, 10], RoceV2, Some("ens1f0np0")),
        ];
        let sel = select_gid(&gids);
        assert_eq!(sel.chosen, Some(5));
        assert_eq!(
            sel.candidate(7).map(|c| c.outcome),
            Some(SelectionOutcome::TieLowerIndexWins { by: 5 })
        );
    }

    #[test]
    fn rejections() {
        let gids = [
            entry(0, ZERO, None, None),
            entry(1, LL, Some(RoceV1), Some("ens1f0np0")),
            entry(2, LL, None, Some("ens1f0np0")),
        ];
        let sel = select_gid(&gids);
        assert_eq!(sel.chosen, None);
        let reasons: Vec<_> = sel
            .candidates
            .iter()
            .map(|c| (c.assessment.clone(), c.outcome))
            .collect();
        let rej = |reason| {
            (
                GidAssessment::Rejected { reason },
                SelectionOutcome::Rejected,
            )
        };
        assert_eq!(
            reasons,
            vec![
                rej(GidRejection::Empty),
                rej(GidRejection::RoceV1),
                rej(GidRejection::UnknownType)
            ]
        );
        assert_eq!(sel.populated().count(), 2);
        assert!(sel.chosen_candidate().is_none());
    }

    #[test]
    fn ib_gid_is_eligible() {
        let gids = [
            entry(0, "fe80:0000:0000:0000:b859:9f03:00d4:5e3a", Some(Ib), None),
            entry(1, ZERO, None, None),
        ];
        let sel = select_gid(&gids);
        assert_eq!(sel.chosen, Some(0));
        assert_eq!(
            sel.chosen_candidate().map(|c| c.outcome),
            Some(SelectionOutcome::Chosen)
        );
    }

    #[test]
    fn empty_table() {
        let sel = select_gid(&[]);
        assert_eq!(sel.chosen, None);
        assert!(sel.candidates.is_empty());
    }

    #[test]
    fn explicit_index_verdicts() {
        let gids = [
            entry(0, LL, Some(RoceV1), Some("ens1f0np0")),
            entry(1, LL, Some(RoceV2), Some("ens1f0np0")),
            v4(3, [192, 168, 1, 10], RoceV2, Some("ens1f0np0")),
            entry(4, ZERO, None, None),
        ];
        let v = evaluate_gid_index(&gids, 4);
        assert!(v.in_table && !v.populated);
        assert_eq!(
            v.assessment,
            Some(GidAssessment::Rejected {
                reason: GidRejection::Empty
            })
        );
        let v = evaluate_gid_index(&gids, 1);
        assert!(v.populated && v.link_local);
        assert_eq!(v.gid_type, Some(RoceV2));
        assert_eq!(v.netdev.as_deref(), Some("ens1f0np0"));
        let v = evaluate_gid_index(&gids, 3);
        assert_eq!(v.ipv4, Some(Ipv4Addr::new(192, 168, 1, 10)));
        assert!(!v.link_local);
        let v = evaluate_gid_index(&gids, 300);
        assert!(!v.in_table && !v.populated);
        assert_eq!(v.assessment, None);
    }

    #[test]
    fn gid_index_parsing_is_mooncakes_atoi() {
        use GidIndexSetting::*;
        assert_eq!(parse_gid_index("3"), (Index(3), GidParseNote::Plain));
        assert_eq!(parse_gid_index(" 3"), (Index(3), GidParseNote::ReadAs(3)));
        assert_eq!(parse_gid_index("-1"), (Auto, GidParseNote::Plain));
        assert_eq!(parse_gid_index("auto"), (Index(0), GidParseNote::ReadAs(0)));
        assert_eq!(parse_gid_index(""), (Index(0), GidParseNote::ReadAs(0)));
        assert_eq!(parse_gid_index("3abc"), (Index(3), GidParseNote::ReadAs(3)));
        assert_eq!(
            parse_gid_index("300"),
            (Auto, GidParseNote::OutOfRange(300))
        );
        assert_eq!(parse_gid_index("-5"), (Auto, GidParseNote::OutOfRange(-5)));
        assert_eq!(parse_gid_index("255"), (Index(255), GidParseNote::Plain));
        assert_eq!(
            parse_gid_index("256"),
            (Auto, GidParseNote::OutOfRange(256))
        );
        assert_eq!(
            parse_gid_index("99999999999999999999"),
            (Auto, GidParseNote::OutOfRange(i64::MAX))
        );
        assert_eq!(parse_gid_index("+7"), (Index(7), GidParseNote::Plain));
    }
}
