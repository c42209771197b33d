//! Value types for device and port attributes, and their sysfs text formats.
//!
//! Responsibility: turn one sysfs file's content into a typed value (port state, physical state,
//! link layer, node type, GUID, LID) and back, and the IB MTU arithmetic. Every parser returns
//! `None` on content it does not understand; none of them panics.
//! Must not: read files (see `sysfs`) or judge whether a value is good for a workload.

use std::fmt;

use serde::{Serialize, Serializer};

/// Splits the kernel's `"<number>: <name>"` form (`4: ACTIVE`, `5: LinkUp`, `1: CA`).
fn split_code(s: &str) -> Option<(u32, &str)> {
    let (code, name) = s.trim().split_once(':')?;
    let code = code.trim().parse::<u32>().ok()?;
    Some((code, name.trim()))
}

/// Logical port state (`ports/N/state`, `ibv_port_attr.state`).
///
/// The kernel derives the name from the number, so the number is what is parsed; a number the
/// kernel may add later is kept as [`PortState::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PortState {
    /// 0: NOP (no state change).
    Nop,
    /// 1: DOWN (no link).
    Down,
    /// 2: INIT (link up, but an InfiniBand port has no subnet manager yet).
    Init,
    /// 3: ARMED.
    Armed,
    /// 4: ACTIVE (the only state in which traffic flows).
    Active,
    /// 5: ACTIVE_DEFER.
    ActiveDefer,
    /// Any other number.
    Unknown(u32),
}

impl PortState {
    /// Parses `4: ACTIVE` and friends; `None` when there is no leading number.
    pub fn parse_sysfs(s: &str) -> Option<PortState> {
        split_code(s).map(|(code, _)| PortState::from_code(code))
    }

    /// Maps the kernel / libibverbs number (`IBV_PORT_*`).
    pub fn from_code(code: u32) -> PortState {
        match code {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            other => PortState::Unknown(other),
        }
    }

    /// The number the kernel prints before the colon.
    pub fn code(self) -> u32 {
        match self {
            PortState::Nop => 0,
            PortState::Down => 1,
            PortState::Init => 2,
            PortState::Armed => 3,
            PortState::Active => 4,
            PortState::ActiveDefer => 5,
            PortState::Unknown(code) => code,
        }
    }

    /// The kernel's name (`ACTIVE`, `DOWN`, ...; `UNKNOWN` for unknown numbers).
    pub fn name(self) -> &'static str {
        match self {
            PortState::Nop => "NOP",
            PortState::Down => "DOWN",
            PortState::Init => "INIT",
            PortState::Armed => "ARMED",
            PortState::Active => "ACTIVE",
            PortState::ActiveDefer => "ACTIVE_DEFER",
            PortState::Unknown(_) => "UNKNOWN",
        }
    }

    /// The full sysfs line without newline (`4: ACTIVE`).
    pub fn sysfs_string(self) -> String {
        format!("{}: {}", self.code(), self.name())
    }

    /// True for `ACTIVE` only.
    pub fn is_active(self) -> bool {
        self == PortState::Active
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.name())
    }
}

/// Physical port state (`ports/N/phys_state`, `ibv_port_attr.phys_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhysState {
    /// 1: Sleep.
    Sleep,
    /// 2: Polling (no cable or no peer).
    Polling,
    /// 3: Disabled (administratively down).
    Disabled,
    /// 4: PortConfigurationTraining.
    PortConfigurationTraining,
    /// 5: LinkUp.
    LinkUp,
    /// 6: LinkErrorRecovery.
    LinkErrorRecovery,
    /// 7: Phy Test.
    PhyTest,
    /// Any other number (the kernel prints `<unknown>`).
    Unknown(u32),
}

impl PhysState {
    /// Parses `5: LinkUp` and friends; `None` when there is no leading number.
    pub fn parse_sysfs(s: &str) -> Option<PhysState> {
        split_code(s).map(|(code, _)| PhysState::from_code(code))
    }

    /// Maps the kernel / libibverbs number.
    pub fn from_code(code: u32) -> PhysState {
        match code {
            1 => PhysState::Sleep,
            2 => PhysState::Polling,
            3 => PhysState::Disabled,
            4 => PhysState::PortConfigurationTraining,
            5 => PhysState::LinkUp,
            6 => PhysState::LinkErrorRecovery,
            7 => PhysState::PhyTest,
            other => PhysState::Unknown(other),
        }
    }

    /// The number the kernel prints before the colon.
    pub fn code(self) -> u32 {
        match self {
            PhysState::Sleep => 1,
            PhysState::Polling => 2,
            PhysState::Disabled => 3,
            PhysState::PortConfigurationTraining => 4,
            PhysState::LinkUp => 5,
            PhysState::LinkErrorRecovery => 6,
            PhysState::PhyTest => 7,
            PhysState::Unknown(code) => code,
        }
    }

    /// The kernel's name (`LinkUp`, `Polling`, ...).
    pub fn name(self) -> &'static str {
        match self {
            PhysState::Sleep => "Sleep",
            PhysState::Polling => "Polling",
            PhysState::Disabled => "Disabled",
            PhysState::PortConfigurationTraining => "PortConfigurationTraining",
            PhysState::LinkUp => "LinkUp",
            PhysState::LinkErrorRecovery => "LinkErrorRecovery",
            PhysState::PhyTest => "Phy Test",
            PhysState::Unknown(_) => "<unknown>",
        }
    }

    /// The full sysfs line without newline (`5: LinkUp`).
    pub fn sysfs_string(self) -> String {
        format!("{}: {}", self.code(), self.name())
    }
}

impl fmt::Display for PhysState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.name())
    }
}

/// Link layer of a port (`ports/N/link_layer`, `ibv_port_attr.link_layer`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkLayer {
    /// Native InfiniBand.
    InfiniBand,
    /// Ethernet: RoCE (or iWARP).
    Ethernet,
    /// Anything else the kernel prints (it prints `Unknown` for an unspecified link layer).
    Other(String),
}

impl LinkLayer {
    /// Parses `InfiniBand` / `Ethernet`; other non-empty text is kept as [`LinkLayer::Other`].
    pub fn parse_sysfs(s: &str) -> Option<LinkLayer> {
        match s.trim() {
            "" => None,
            "InfiniBand" => Some(LinkLayer::InfiniBand),
            "Ethernet" => Some(LinkLayer::Ethernet),
            other => Some(LinkLayer::Other(other.to_owned())),
        }
    }

    /// The sysfs spelling.
    pub fn as_str(&self) -> &str {
        match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::Other(s) => s,
        }
    }
}

impl fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Node type of a device (`node_type`, e.g. `1: CA`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeType {
    /// 1: CA (channel adapter: every NIC a host uses).
    Ca,
    /// 2: switch.
    Switch,
    /// 3: router.
    Router,
    /// 4: RNIC (iWARP).
    Rnic,
    /// 5: usNIC.
    Usnic,
    /// 6: usNIC UDP.
    UsnicUdp,
    /// Any other number.
    Unknown(u32),
}

impl NodeType {
    /// Parses `1: CA` and friends; `None` when there is no leading number.
    pub fn parse_sysfs(s: &str) -> Option<NodeType> {
        split_code(s).map(|(code, _)| match code {
            1 => NodeType::Ca,
            2 => NodeType::Switch,
            3 => NodeType::Router,
            4 => NodeType::Rnic,
            5 => NodeType::Usnic,
            6 => NodeType::UsnicUdp,
            other => NodeType::Unknown(other),
        })
    }

    /// The number the kernel prints.
    pub fn code(self) -> u32 {
        match self {
            NodeType::Ca => 1,
            NodeType::Switch => 2,
            NodeType::Router => 3,
            NodeType::Rnic => 4,
            NodeType::Usnic => 5,
            NodeType::UsnicUdp => 6,
            NodeType::Unknown(code) => code,
        }
    }

    /// The kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            NodeType::Ca => "CA",
            NodeType::Switch => "switch",
            NodeType::Router => "router",
            NodeType::Rnic => "RNIC",
            NodeType::Usnic => "usNIC",
            NodeType::UsnicUdp => "usNIC UDP",
            NodeType::Unknown(_) => "<unknown>",
        }
    }
}

impl fmt::Display for NodeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.name())
    }
}

/// A 64-bit GUID (`node_guid`), printed like sysfs: `0c42:a103:001d:d12a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Guid(pub u64);

impl Guid {
    /// Parses the sysfs form: 4 colon-separated groups of 1 to 4 hex digits.
    pub fn parse_sysfs(s: &str) -> Option<Guid> {
        let mut value: u64 = 0;
        let mut groups = 0;
        for group in s.trim().split(':') {
            if groups == 4
                || group.is_empty()
                || group.len() > 4
                || !group.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return None;
            }
            value = (value << 16) | u64::from(u16::from_str_radix(group, 16).ok()?);
            groups += 1;
        }
        (groups == 4).then_some(Guid(value))
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        write!(
            f,
            "{:04x}:{:04x}:{:04x}:{:04x}",
            (v >> 48) & 0xffff,
            (v >> 32) & 0xffff,
            (v >> 16) & 0xffff,
            v & 0xffff
        )
    }
}

impl Serialize for Guid {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Parses a LID as sysfs prints it (`0x1a`; `0x0` on RoCE). Decimal is accepted too.
pub fn parse_lid(s: &str) -> Option<u32> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u32::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
        None => None,
    }
}

/// Parses `device/numa_node`: `-1` (and any other negative value) means "unknown" and gives
/// `None`, as does unparseable content.
pub fn parse_numa_node(s: &str) -> Option<u32> {
    let value = s.trim().parse::<i64>().ok()?;
    u32::try_from(value).ok()
}

/// An InfiniBand MTU (the path MTU RDMA uses; 256 to 4096 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum IbMtu {
    /// 256 bytes (`IBV_MTU_256` = 1).
    #[serde(rename = "256")]
    Mtu256,
    /// 512 bytes (`IBV_MTU_512` = 2).
    #[serde(rename = "512")]
    Mtu512,
    /// 1024 bytes (`IBV_MTU_1024` = 3).
    #[serde(rename = "1024")]
    Mtu1024,
    /// 2048 bytes (`IBV_MTU_2048` = 4).
    #[serde(rename = "2048")]
    Mtu2048,
    /// 4096 bytes (`IBV_MTU_4096` = 5).
    #[serde(rename = "4096")]
    Mtu4096,
}

impl IbMtu {
    /// All values, smallest first.
    pub const ALL: [IbMtu; 5] = [
        IbMtu::Mtu256,
        IbMtu::Mtu512,
        IbMtu::Mtu1024,
        IbMtu::Mtu2048,
        IbMtu::Mtu4096,
    ];

    /// Maps the libibverbs enum value (`IBV_MTU_256` = 1 ... `IBV_MTU_4096` = 5).
    pub fn from_verbs(code: u32) -> Option<IbMtu> {
        match code {
            1 => Some(IbMtu::Mtu256),
            2 => Some(IbMtu::Mtu512),
            3 => Some(IbMtu::Mtu1024),
            4 => Some(IbMtu::Mtu2048),
            5 => Some(IbMtu::Mtu4096),
            _ => None,
        }
    }

    /// Size in bytes.
    pub fn bytes(self) -> u32 {
        match self {
            IbMtu::Mtu256 => 256,
            IbMtu::Mtu512 => 512,
            IbMtu::Mtu1024 => 1024,
            IbMtu::Mtu2048 => 2048,
            IbMtu::Mtu4096 => 4096,
        }
    }

    /// The active MTU the kernel gives a RoCE port whose netdev has MTU `netdev_mtu`: the largest
    /// IB MTU not above `netdev_mtu − 96`. `None` when even 256 does not fit.
    ///
    /// The 96 bytes are the headers RoCE v2 adds inside the Ethernet payload (GRH 40, UDP 8,
    /// BTH 12, extended transport headers 28, ICRC 4), as the kernel's `iboe_get_mtu` reserves
    /// them. So 1500 gives 1024 and 4192 or more gives 4096. Two peers with different active
    /// MTUs fail to connect with Mooncake, which does not negotiate it.
    pub fn for_roce_netdev_mtu(netdev_mtu: u32) -> Option<IbMtu> {
        let room = netdev_mtu.checked_sub(ROCE_HEADER_BYTES)?;
        IbMtu::ALL.iter().rev().copied().find(|m| m.bytes() <= room)
    }
}

/// Bytes of RoCE headers subtracted from the netdev MTU (see [`IbMtu::for_roce_netdev_mtu`]).
pub const ROCE_HEADER_BYTES: u32 = 96;

impl fmt::Display for IbMtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_states() {
        assert_eq!(
            PortState::parse_sysfs("4: ACTIVE\n"),
            Some(PortState::Active)
        );
        assert_eq!(PortState::parse_sysfs("1: DOWN\n"), Some(PortState::Down));
        assert_eq!(PortState::parse_sysfs("2: INIT\n"), Some(PortState::Init));
        assert_eq!(PortState::parse_sysfs("3: ARMED"), Some(PortState::Armed));
        assert_eq!(
            PortState::parse_sysfs("5: ACTIVE_DEFER"),
            Some(PortState::ActiveDefer)
        );
        assert_eq!(PortState::parse_sysfs("0: NOP"), Some(PortState::Nop));
        assert_eq!(
            PortState::parse_sysfs("9: UNKNOWN"),
            Some(PortState::Unknown(9))
        );
        assert_eq!(PortState::Active.to_string(), "4: ACTIVE");
        assert_eq!(PortState::Unknown(9).code(), 9);
        assert!(PortState::Active.is_active());
        assert!(!PortState::Init.is_active());
    }

    #[test]
    fn port_state_trusts_the_number() {
        // The kernel derives the name from the number; a mismatch means the name is stale.
        assert_eq!(PortState::parse_sysfs("4: DOWN"), Some(PortState::Active));
    }

    #[test]
    fn malformed_states_are_none() {
        for bad in [
            "",
            "\n",
            "ACTIVE",
            ": ACTIVE",
            "x: ACTIVE",
            "-1: DOWN",
            "99999999999: X",
            "4",
        ] {
            assert_eq!(PortState::parse_sysfs(bad), None, "{bad:?}");
            assert_eq!(PhysState::parse_sysfs(bad), None, "{bad:?}");
            assert_eq!(NodeType::parse_sysfs(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn phys_states() {
        assert_eq!(
            PhysState::parse_sysfs("5: LinkUp\n"),
            Some(PhysState::LinkUp)
        );
        assert_eq!(
            PhysState::parse_sysfs("2: Polling\n"),
            Some(PhysState::Polling)
        );
        assert_eq!(
            PhysState::parse_sysfs("3: Disabled\n"),
            Some(PhysState::Disabled)
        );
        assert_eq!(
            PhysState::parse_sysfs("7: Phy Test\n"),
            Some(PhysState::PhyTest)
        );
        assert_eq!(
            PhysState::parse_sysfs("0: <unknown>"),
            Some(PhysState::Unknown(0))
        );
        assert_eq!(PhysState::LinkUp.sysfs_string(), "5: LinkUp");
    }

    #[test]
    fn link_layers() {
        assert_eq!(
            LinkLayer::parse_sysfs("InfiniBand\n"),
            Some(LinkLayer::InfiniBand)
        );
        assert_eq!(
            LinkLayer::parse_sysfs("Ethernet\n"),
            Some(LinkLayer::Ethernet)
        );
        assert_eq!(
            LinkLayer::parse_sysfs("Unknown\n"),
            Some(LinkLayer::Other("Unknown".into()))
        );
        assert_eq!(LinkLayer::parse_sysfs("\n"), None);
    }

    #[test]
    fn node_types() {
        assert_eq!(NodeType::parse_sysfs("1: CA\n"), Some(NodeType::Ca));
        assert_eq!(NodeType::parse_sysfs("4: RNIC\n"), Some(NodeType::Rnic));
        assert_eq!(
            NodeType::parse_sysfs("42: <unknown>"),
            Some(NodeType::Unknown(42))
        );
        assert_eq!(NodeType::Ca.to_string(), "1: CA");
    }

    #[test]
    fn guids() {
        let guid = Guid::parse_sysfs("0c42:a103:001d:d12a\n").expect("valid");
        assert_eq!(guid, Guid(0x0c42_a103_001d_d12a));
        assert_eq!(guid.to_string(), "0c42:a103:001d:d12a");
        for bad in [
            "",
            "0c42:a103:001d",
            "0c42:a103:001d:d12a:0000",
            "0c42:a103:001d:d12z",
            "::::",
        ] {
            assert_eq!(Guid::parse_sysfs(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn lids() {
        assert_eq!(parse_lid("0x1a\n"), Some(0x1a));
        assert_eq!(parse_lid("0x0\n"), Some(0));
        assert_eq!(parse_lid("26"), Some(26));
        for bad in ["", "0x", "0xzz", "lid", "-1", "0x1ffffffff"] {
            assert_eq!(parse_lid(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn numa_nodes() {
        assert_eq!(parse_numa_node("0\n"), Some(0));
        assert_eq!(parse_numa_node("3\n"), Some(3));
        assert_eq!(parse_numa_node("-1\n"), None);
        assert_eq!(parse_numa_node(""), None);
        assert_eq!(parse_numa_node("node0"), None);
        assert_eq!(parse_numa_node("99999999999999999999999"), None);
    }

    #[test]
    fn roce_mtu_rule() {
        assert_eq!(IbMtu::for_roce_netdev_mtu(1500), Some(IbMtu::Mtu1024));
        assert_eq!(IbMtu::for_roce_netdev_mtu(4192), Some(IbMtu::Mtu4096));
        assert_eq!(IbMtu::for_roce_netdev_mtu(4191), Some(IbMtu::Mtu2048));
        assert_eq!(IbMtu::for_roce_netdev_mtu(9000), Some(IbMtu::Mtu4096));
        assert_eq!(IbMtu::for_roce_netdev_mtu(2144), Some(IbMtu::Mtu2048));
        assert_eq!(IbMtu::for_roce_netdev_mtu(352), Some(IbMtu::Mtu256));
        assert_eq!(IbMtu::for_roce_netdev_mtu(351), None);
        assert_eq!(IbMtu::for_roce_netdev_mtu(0), None);
        assert_eq!(IbMtu::for_roce_netdev_mtu(u32::MAX), Some(IbMtu::Mtu4096));
    }

    #[test]
    fn ib_mtu_codes() {
        assert_eq!(IbMtu::from_verbs(5), Some(IbMtu::Mtu4096));
        assert_eq!(IbMtu::from_verbs(0), None);
        assert_eq!(IbMtu::from_verbs(6), None);
        assert_eq!(IbMtu::Mtu1024.bytes(), 1024);
    }
}
