//! GIDs (the 128-bit RDMA port addresses) and their types.
//!
//! Responsibility: parse the kernel's sysfs text form of a GID and of its type, and answer the
//! address questions the GID selection rules ask (empty slot? link-local? IPv4-mapped?).
//! Must not: read files or decide which GID a program should use (that is the caller's policy).

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use serde::{Serialize, Serializer};

/// A 16-byte GID as the kernel stores it (network byte order).
///
/// `Display` prints the kernel's sysfs form: 8 groups of 4 lowercase hex digits, never
/// compressed (`fe80:0000:0000:0000:0e42:a1ff:fe1d:d12a`), which is also what `show_gids`
/// prints; use [`Gid::to_ipv6`] for the compressed IPv6 form.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID: what the kernel shows for an empty slot of the table.
    pub const ZERO: Gid = Gid([0; 16]);

    /// Parses the sysfs form (`ports/N/gids/I`): 8 colon-separated groups of 1 to 4 hex digits,
    /// surrounding whitespace (the trailing newline) ignored. Anything else is `None`.
    ///
    /// The kernel always prints 4 digits per group; shorter groups are accepted because a
    /// hand-written fixture or another tool's output may drop leading zeros, and that is not
    /// ambiguous. The compressed `::` form is rejected: sysfs never produces it.
    pub fn parse_sysfs(s: &str) -> Option<Gid> {
        let s = s.trim();
        let mut raw = [0u8; 16];
        let mut groups = 0usize;
        for group in s.split(':') {
            if groups == 8 || group.is_empty() || group.len() > 4 {
                return None;
            }
            if !group.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            let value = u16::from_str_radix(group, 16).ok()?;
            let [hi, lo] = value.to_be_bytes();
            raw[groups * 2] = hi;
            raw[groups * 2 + 1] = lo;
            groups += 1;
        }
        (groups == 8).then_some(Gid(raw))
    }

    /// True for the all-zero GID (an empty table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// True for exactly `fe80::` (link-local prefix with a zero interface id).
    ///
    /// `show_gids` hides this one as well as zero GIDs: it is a placeholder some drivers leave
    /// in the table, not a usable address.
    pub fn is_bare_link_local(&self) -> bool {
        let mut bare = [0u8; 16];
        bare[0] = 0xfe;
        bare[1] = 0x80;
        self.0 == bare
    }

    /// True when the GID lies in the IPv6 link-local range `fe80::/10`.
    ///
    /// On RoCE such a GID cannot cross a router. Native InfiniBand port GIDs also start with
    /// `fe80::` (the default subnet prefix), so callers judging IB ports must keep that in mind.
    pub fn is_ipv6_link_local(&self) -> bool {
        self.0[0] == 0xfe && (self.0[1] & 0xc0) == 0x80
    }

    /// Decodes an IPv4-mapped GID (`::ffff:a.b.c.d`, as RoCE builds from an IPv4 address).
    pub fn ipv4_mapped(&self) -> Option<Ipv4Addr> {
        let prefix_ok =
            self.0[..10].iter().all(|&b| b == 0) && self.0[10] == 0xff && self.0[11] == 0xff;
        prefix_ok.then(|| Ipv4Addr::new(self.0[12], self.0[13], self.0[14], self.0[15]))
    }

    /// The GID as an IPv6 address (its `Display` is the compressed form, `::ffff:192.168.1.10`).
    pub fn to_ipv6(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }

    /// The 64-bit subnet prefix (first 8 bytes), as InfiniBand routing sees it.
    pub fn subnet_prefix(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_be_bytes(b)
    }

    /// The 64-bit interface id (last 8 bytes); on native IB this is the port GUID.
    pub fn interface_id(&self) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.0[8..]);
        u64::from_be_bytes(b)
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(addr: Ipv6Addr) -> Self {
        Gid(addr.octets())
    }
}

impl From<Ipv4Addr> for Gid {
    /// The IPv4-mapped GID RoCE derives from an IPv4 address.
    fn from(addr: Ipv4Addr) -> Self {
        Gid(addr.to_ipv6_mapped().octets())
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks_exact(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl Serialize for Gid {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The type of a GID table entry (the RoCE version, or native InfiniBand).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GidType {
    /// A native InfiniBand GID (on a port whose link layer is InfiniBand).
    Ib,
    /// RoCE v1: Ethernet-framed, not IP-routable.
    RoceV1,
    /// RoCE v2: UDP/IP-encapsulated, routable.
    RoceV2,
}

impl GidType {
    /// Parses `gid_attrs/types/I` (`IB/RoCE v1` or `RoCE v2`).
    ///
    /// The kernel prints the same `IB/RoCE v1` for a native IB GID and a RoCE v1 GID (they share
    /// one enum value), so the port's link layer decides: only an InfiniBand link layer makes it
    /// [`GidType::Ib`]. Unknown strings and empty content are `None`.
    pub fn parse_sysfs(s: &str, link_layer_is_infiniband: bool) -> Option<GidType> {
        match s.trim() {
            "IB/RoCE v1" if link_layer_is_infiniband => Some(GidType::Ib),
            "IB/RoCE v1" => Some(GidType::RoceV1),
            "RoCE v2" => Some(GidType::RoceV2),
            _ => None,
        }
    }

    /// The string the kernel writes in `gid_attrs/types/I` for this type.
    pub fn sysfs_str(self) -> &'static str {
        match self {
            GidType::Ib | GidType::RoceV1 => "IB/RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GidType::Ib => "IB",
            GidType::RoceV1 => "RoCE v1",
            GidType::RoceV2 => "RoCE v2",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kernel_form_and_prints_it_back() {
        let text = "fe80:0000:0000:0000:0e42:a1ff:fe1d:d12a\n";
        let gid = Gid::parse_sysfs(text).expect("valid gid");
        assert_eq!(gid.to_string(), text.trim());
        assert_eq!(gid.interface_id(), 0x0e42_a1ff_fe1d_d12a);
        assert_eq!(gid.subnet_prefix(), 0xfe80_0000_0000_0000);
        assert!(gid.is_ipv6_link_local());
        assert!(!gid.is_bare_link_local());
        assert!(!gid.is_zero());
        assert_eq!(gid.ipv4_mapped(), None);
    }

    #[test]
    fn decodes_ipv4_mapped() {
        let gid = Gid::parse_sysfs("0000:0000:0000:0000:0000:ffff:c0a8:010a").expect("valid");
        assert_eq!(gid.ipv4_mapped(), Some(Ipv4Addr::new(192, 168, 1, 10)));
        assert_eq!(gid.to_ipv6().to_string(), "::ffff:192.168.1.10");
        assert_eq!(Gid::from(Ipv4Addr::new(192, 168, 1, 10)), gid);
        assert!(!gid.is_ipv6_link_local());
    }

    #[test]
    fn zero_and_bare_link_local() {
        let zero = Gid::parse_sysfs("0000:0000:0000:0000:0000:0000:0000:0000\n").expect("valid");
        assert!(zero.is_zero());
        assert_eq!(zero, Gid::ZERO);
        assert_eq!(zero.ipv4_mapped(), None);
        let bare = Gid::parse_sysfs("fe80:0000:0000:0000:0000:0000:0000:0000").expect("valid");
        assert!(bare.is_bare_link_local());
        assert!(bare.is_ipv6_link_local());
    }

    #[test]
    fn link_local_is_a_slash_10() {
        let febf = Gid::parse_sysfs("febf:0000:0000:0000:0000:0000:0000:0001").expect("valid");
        assert!(febf.is_ipv6_link_local());
        let fec0 = Gid::parse_sysfs("fec0:0000:0000:0000:0000:0000:0000:0001").expect("valid");
        assert!(!fec0.is_ipv6_link_local());
    }

    #[test]
    fn short_groups_are_accepted() {
        let gid = Gid::parse_sysfs("fe80:0:0:0:e42:a1ff:fe1d:d12a").expect("valid");
        assert_eq!(gid.to_string(), "fe80:0000:0000:0000:0e42:a1ff:fe1d:d12a");
    }

    #[test]
    fn malformed_gids_are_none_not_panics() {
        for bad in [
            "",
            "\n",
            "fe80::1",
            "::",
            "fe80:0000:0000:0000:0e42:a1ff:fe1d",
            "fe80:0000:0000:0000:0e42:a1ff:fe1d:d12a:0000",
            "fe80:0000:0000:0000:0e42:a1ff:fe1d:d12g",
            "fe80:00000:0000:0000:0e42:a1ff:fe1d:d12a",
            "+e80:0000:0000:0000:0e42:a1ff:fe1d:d12a",
            "fe80:0000:0000:0000:0e42:a1ff:fe1d:d12a:",
            "192.168.1.10",
            "é0:0000:0000:0000:0e42:a1ff:fe1d:d12a",
            "\u{0}",
        ] {
            assert_eq!(Gid::parse_sysfs(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn gid_types_depend_on_link_layer() {
        assert_eq!(
            GidType::parse_sysfs("IB/RoCE v1\n", true),
            Some(GidType::Ib)
        );
        assert_eq!(
            GidType::parse_sysfs("IB/RoCE v1\n", false),
            Some(GidType::RoceV1)
        );
        assert_eq!(
            GidType::parse_sysfs("RoCE v2\n", false),
            Some(GidType::RoceV2)
        );
        assert_eq!(
            GidType::parse_sysfs("RoCE v2\n", true),
            Some(GidType::RoceV2)
        );
        assert_eq!(GidType::parse_sysfs("", false), None);
        assert_eq!(GidType::parse_sysfs("RoCE v3", false), None);
        assert_eq!(GidType::RoceV1.sysfs_str(), "IB/RoCE v1");
        assert_eq!(GidType::RoceV2.to_string(), "RoCE v2");
    }
}
