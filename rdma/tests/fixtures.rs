//! Reads every committed sysroot fixture (`tests/fixtures/sysroot/*`) and checks the parsed
//! values; also checks builder-made trees against them. Which GID index Mooncake picks on these
//! tables is Mooncake's policy, tested in the main crate (`tests/gid_select.rs`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use mcsup_rdma::fixture::{FixtureBuilder, FixtureDevice, FixturePort};
use mcsup_rdma::{
    Gid, GidType, Guid, IbMtu, LinkLayer, NodeType, PhysState, PortState, RdmaPresence,
    SysfsReader, SysfsScan,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/sysroot")
        .join(name)
}

fn scan(name: &str) -> SysfsScan {
    SysfsReader::new(fixture(name))
        .scan()
        .unwrap_or_else(|e| panic!("scan {name}: {e}"))
}

fn gid(s: &str) -> Gid {
    Gid::parse_sysfs(s).expect("test gid")
}

const A_LL: &str = "fe80:0000:0000:0000:0e42:a1ff:fe1d:d12a";
const A_V4: &str = "0000:0000:0000:0000:0000:ffff:c0a8:010a";

#[test]
fn fixture_a_device_attributes() {
    let s = scan("roce-v2-ipv4");
    assert_eq!(s.presence(), RdmaPresence::Devices);
    assert_eq!(s.verbs_abi_version, Some(6));
    assert!(s.rdma_cm_present);
    assert_eq!(s.devices.len(), 1);
    let d = &s.devices[0];
    assert_eq!(d.name, "mlx5_0");
    assert_eq!(d.node_type, Some(NodeType::Ca));
    assert_eq!(d.node_guid, Some(Guid(0x0c42_a103_001d_d12a)));
    assert_eq!(d.fw_ver.as_deref(), Some("22.32.2004"));
    assert_eq!(d.hca_type.as_deref(), Some("MT4125"));
    assert_eq!(d.board_id.as_deref(), Some("MT_0000000436"));
    assert_eq!(d.numa_node, Some(0));
    assert_eq!(d.netdevs.len(), 1);
    assert_eq!(d.netdevs[0].name, "ens1f0np0");
    assert_eq!(d.netdevs[0].mtu, Some(1500));
    let u = d.uverbs.as_ref().expect("uverbs");
    assert_eq!(u.name, "uverbs0");
    assert!(u.char_device_present);
    assert_eq!(
        u.char_device,
        fixture("roce-v2-ipv4").join("dev/infiniband/uverbs0")
    );
    // Opened read/write as Mooncake does: on a copy, so a read-only checkout passes too.
    let tmp = tempfile::tempdir().unwrap();
    let mut copy = u.clone();
    copy.char_device = tmp.path().join("uverbs0");
    std::fs::copy(&u.char_device, &copy.char_device).unwrap();
    copy.check_open()
        .expect("a plain fixture file opens read/write");

    assert_eq!(d.ports.len(), 1);
    let p = d.port(1).expect("port 1");
    assert_eq!(p.state, Some(PortState::Active));
    assert_eq!(p.state.map(PortState::code), Some(4));
    assert_eq!(p.phys_state, Some(PhysState::LinkUp));
    assert_eq!(p.link_layer, Some(LinkLayer::Ethernet));
    assert_eq!(p.rate.as_deref(), Some("100 Gb/sec (4X EDR)"));
    assert_eq!(p.lid, Some(0));
    assert_eq!(p.sm_lid, Some(0));
}

#[test]
fn fixture_a_gid_table() {
    let s = scan("roce-v2-ipv4");
    let p = s.devices[0].port(1).expect("port 1");
    assert_eq!(p.gid_table_len(), 16);
    let expect = [
        (0, A_LL, GidType::RoceV1),
        (1, A_LL, GidType::RoceV2),
        (2, A_V4, GidType::RoceV1),
        (3, A_V4, GidType::RoceV2),
    ];
    for (index, g, ty) in expect {
        let e = p.gid(index).expect("slot");
        assert_eq!(e.gid, gid(g), "index {index}");
        assert_eq!(e.gid_type, Some(ty), "index {index}");
        assert_eq!(e.netdev.as_deref(), Some("ens1f0np0"), "index {index}");
    }
    assert_eq!(
        p.gid(3).and_then(|e| e.gid.ipv4_mapped()),
        Some(Ipv4Addr::new(192, 168, 1, 10))
    );
    for index in 4..16 {
        let e = p.gid(index).expect("slot");
        assert!(e.gid.is_zero(), "index {index}");
        assert_eq!(
            (e.gid_type, e.netdev.as_deref()),
            (None, None),
            "index {index}"
        );
    }
    assert_eq!(p.populated_gids().count(), 4);
}

#[test]
fn fixture_a_roce_mtu() {
    let s = scan("roce-v2-ipv4");
    let mtu = s.devices[0].netdevs[0].mtu.expect("mtu");
    assert_eq!(IbMtu::for_roce_netdev_mtu(mtu), Some(IbMtu::Mtu1024));
}

#[test]
fn fixture_b_infiniband() {
    let s = scan("ib-hdr");
    let d = s.device("mlx5_0").expect("mlx5_0");
    assert_eq!(d.numa_node, Some(1));
    assert_eq!(d.hca_type.as_deref(), Some("MT4123"));
    assert_eq!(d.node_guid, Some(Guid(0xb859_9f03_00d4_5e3a)));
    assert_eq!(
        d.netdevs
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>(),
        ["ib0"]
    );
    let p = d.port(1).expect("port");
    assert_eq!(p.state, Some(PortState::Active));
    assert_eq!(p.phys_state, Some(PhysState::LinkUp));
    assert_eq!(p.link_layer, Some(LinkLayer::InfiniBand));
    assert!(p.is_infiniband());
    assert_eq!(p.rate.as_deref(), Some("200 Gb/sec (4X HDR)"));
    assert_eq!((p.lid, p.sm_lid), (Some(0x1a), Some(0x1)));
    assert_eq!(p.gid_table_len(), 8);
    let g0 = p.gid(0).expect("0");
    assert_eq!(g0.gid, gid("fe80:0000:0000:0000:b859:9f03:00d4:5e3a"));
    assert_eq!(g0.gid.interface_id(), 0xb859_9f03_00d4_5e3a);
    assert_eq!(g0.gid_type, Some(GidType::Ib));
    assert_eq!(g0.netdev, None, "ndevs/0 is EINVAL on IB: no value");
    assert_eq!(p.populated_gids().count(), 1);
}

#[test]
fn no_hca_is_distinguished_from_no_rdma() {
    let s = scan("no-hca");
    assert_eq!(s.presence(), RdmaPresence::NoDevices);
    assert!(s.subsystem_present);
    assert!(s.devices.is_empty(), ".gitkeep is not a device");
    assert_eq!(s.verbs_abi_version, Some(6));
    assert!(s.rdma_cm_present);

    let s = scan("no-rdma");
    assert_eq!(s.presence(), RdmaPresence::NoSubsystem);
    assert!(!s.subsystem_present);
    assert_eq!(s.verbs_abi_version, None);
    assert!(!s.rdma_cm_present);
}

#[test]
fn nonexistent_root_is_no_subsystem() {
    let s = SysfsReader::new(fixture("does-not-exist"))
        .scan()
        .expect("scan");
    assert_eq!(s.presence(), RdmaPresence::NoSubsystem);
}

#[test]
fn port_down() {
    let s = scan("port-down");
    let p = s.devices[0].port(1).expect("port");
    assert_eq!(p.state, Some(PortState::Down));
    assert_eq!(p.state.map(PortState::code), Some(1));
    assert!(!p.state.is_some_and(PortState::is_active));
    assert_eq!(p.phys_state, Some(PhysState::Disabled));
    assert_eq!(p.populated_gids().count(), 2);
}

#[test]
fn ib_port_without_subnet_manager() {
    let s = scan("ib-port-init");
    let p = s.devices[0].port(1).expect("port");
    assert_eq!(p.state, Some(PortState::Init));
    assert_eq!(p.state.map(PortState::code), Some(2));
    assert_eq!(p.phys_state, Some(PhysState::Polling));
    assert_eq!(p.lid, Some(0));
    assert_eq!(p.link_layer, Some(LinkLayer::InfiniBand));
    assert!(s.devices[0].netdevs.is_empty());
}

#[test]
fn renamed_device() {
    let s = scan("renamed");
    assert!(s.device("mlx5_0").is_none());
    let d = s.device("rocep153s0").expect("renamed device");
    assert_eq!(d.uverbs.as_ref().map(|u| u.name.as_str()), Some("uverbs0"));
    assert_eq!(d.netdevs[0].name, "enp153s0np0");
    let p = d.port(1).expect("port");
    assert_eq!(
        p.gid(3).and_then(|g| g.gid.ipv4_mapped()),
        Some(Ipv4Addr::new(192, 168, 153, 10))
    );
}

#[test]
fn bond_device() {
    let s = scan("bond");
    let d = s.device("mlx5_bond_0").expect("bond device");
    assert_eq!(d.netdevs[0].name, "ens1f0np0");
    assert_eq!(
        d.netdevs[0].mtu.and_then(IbMtu::for_roce_netdev_mtu),
        Some(IbMtu::Mtu4096)
    );
    let p = d.port(1).expect("port");
    assert!(p
        .populated_gids()
        .all(|g| g.netdev.as_deref() == Some("bond0")));
}

#[test]
fn roce_v1_only_has_only_v1_gids() {
    let s = scan("roce-v1-only");
    let p = s.devices[0].port(1).expect("port");
    assert_eq!(p.populated_gids().count(), 2);
    assert!(p
        .populated_gids()
        .all(|g| g.gid_type == Some(GidType::RoceV1)));
}

#[test]
fn two_nics_device_facts() {
    let s = scan("two-nics");
    let names: Vec<_> = s.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1"]);
    // (device, IPv4 at index 3, NUMA node, uverbs entry)
    type Facts = (String, Option<Ipv4Addr>, Option<u32>, Option<String>);
    let facts: Vec<Facts> = s
        .devices
        .iter()
        .map(|d| {
            let port = &d.ports[0];
            (
                d.name.clone(),
                port.gid(3).and_then(|g| g.gid.ipv4_mapped()),
                d.numa_node,
                d.uverbs.as_ref().map(|u| u.name.clone()),
            )
        })
        .collect();
    assert_eq!(
        facts,
        vec![
            (
                "mlx5_0".into(),
                Some(Ipv4Addr::new(192, 168, 1, 10)),
                Some(0),
                Some("uverbs0".into())
            ),
            (
                "mlx5_1".into(),
                Some(Ipv4Addr::new(192, 168, 1, 11)),
                Some(1),
                Some("uverbs1".into())
            ),
        ]
    );
    assert_ne!(s.devices[0].node_guid, s.devices[1].node_guid);
}

#[test]
fn read_single_device() {
    let reader = SysfsReader::new(fixture("two-nics"));
    let d = reader.read_device("mlx5_1").expect("mlx5_1");
    assert_eq!(d.uverbs.map(|u| u.name), Some("uverbs1".into()));
    assert!(reader.read_device("mlx5_7").is_none());
}

/// Every file under `root` (dot-files excluded) with its content, by relative path.
fn tree(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(root).expect("prefix").to_path_buf();
                out.insert(rel, std::fs::read_to_string(&path).expect("read"));
            }
        }
    }
    out
}

fn fixture_a_builder() -> FixtureBuilder {
    FixtureBuilder::new().device(
        FixtureDevice::new("mlx5_0")
            .node_guid(Guid(0x0c42_a103_001d_d12a))
            .numa_node(0)
            .netdev("ens1f0np0", 1500)
            .uverbs(0)
            .port(FixturePort::roce_ipv4(
                1,
                "ens1f0np0",
                [0x0c, 0x42, 0xa1, 0x1d, 0xd1, 0x2a],
                Ipv4Addr::new(192, 168, 1, 10),
            )),
    )
}

#[test]
fn builder_matches_committed_fixture_a() {
    let dir = tempfile::tempdir().expect("tempdir");
    fixture_a_builder().write(dir.path()).expect("write");
    let built = tree(dir.path());
    let committed = tree(&fixture("roce-v2-ipv4"));
    assert_eq!(built.len(), committed.len());
    assert_eq!(built, committed);
}

#[test]
fn builder_no_hca_and_no_rdma_match_committed() {
    let dir = tempfile::tempdir().expect("tempdir");
    FixtureBuilder::new().write(dir.path()).expect("write");
    assert_eq!(tree(dir.path()), tree(&fixture("no-hca")));
    assert_eq!(
        SysfsReader::new(dir.path())
            .scan()
            .expect("scan")
            .presence(),
        RdmaPresence::NoDevices
    );
    let dir = tempfile::tempdir().expect("tempdir");
    FixtureBuilder::no_rdma().write(dir.path()).expect("write");
    assert!(tree(dir.path()).is_empty());
    assert_eq!(
        SysfsReader::new(dir.path())
            .scan()
            .expect("scan")
            .presence(),
        RdmaPresence::NoSubsystem
    );
}

#[test]
fn builder_missing_char_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    FixtureBuilder::new()
        .device(FixtureDevice::new("mlx5_0").uverbs(4).without_char_device())
        .write(dir.path())
        .expect("write");
    let s = SysfsReader::new(dir.path()).scan().expect("scan");
    let u = s.devices[0].uverbs.as_ref().expect("uverbs entry");
    assert_eq!(u.name, "uverbs4");
    assert!(!u.char_device_present);
    assert!(u.check_open().is_err());
}

#[test]
fn builder_roce_pairs_keep_their_netdevs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let docker = Gid::from(Ipv4Addr::new(172, 17, 0, 1));
    let routable = Gid::from(Ipv4Addr::new(192, 168, 7, 2));
    FixtureBuilder::new()
        .device(
            FixtureDevice::new("mlx5_0").port(
                FixturePort::ethernet(1)
                    .roce_pair(docker, Some("docker0"))
                    .roce_pair(routable, Some("ens1f0np0")),
            ),
        )
        .write(dir.path())
        .expect("write");
    let s = SysfsReader::new(dir.path()).scan().expect("scan");
    let p = &s.devices[0].ports[0];
    let slots: Vec<_> = p
        .populated_gids()
        .map(|g| (g.index, g.gid, g.gid_type, g.netdev.as_deref()))
        .collect();
    assert_eq!(
        slots,
        vec![
            (0, docker, Some(GidType::RoceV1), Some("docker0")),
            (1, docker, Some(GidType::RoceV2), Some("docker0")),
            (2, routable, Some(GidType::RoceV1), Some("ens1f0np0")),
            (3, routable, Some(GidType::RoceV2), Some("ens1f0np0")),
        ]
    );
}

#[test]
fn builder_eight_nics_256_gids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = FixtureBuilder::new();
    for n in 0..8u8 {
        b = b.device(
            FixtureDevice::new(format!("mlx5_{n}"))
                .numa_node(i32::from(n / 4))
                .netdev(format!("ens{n}np0"), 4200)
                .uverbs(u32::from(n))
                .port(
                    FixturePort::roce_ipv4(
                        1,
                        &format!("ens{n}np0"),
                        [0x0c, 0x42, 0xa1, 0x00, 0x00, n],
                        Ipv4Addr::new(10, 0, 0, n + 1),
                    )
                    .gid_table_len(256),
                ),
        );
    }
    b.write(dir.path()).expect("write");
    let s = SysfsReader::new(dir.path()).scan().expect("scan");
    assert_eq!(s.devices.len(), 8);
    for (n, d) in s.devices.iter().enumerate() {
        assert_eq!(d.name, format!("mlx5_{n}"));
        assert_eq!(
            d.uverbs.as_ref().map(|u| u.name.clone()),
            Some(format!("uverbs{n}"))
        );
        let p = &d.ports[0];
        assert_eq!(p.gid_table_len(), 256);
        assert_eq!(p.populated_gids().count(), 4);
        assert_eq!(
            p.gid(3).map(|g| (g.gid_type, g.gid.ipv4_mapped())),
            Some((
                Some(GidType::RoceV2),
                Some(Ipv4Addr::new(10, 0, 0, n as u8 + 1))
            ))
        );
    }
}

#[test]
fn live_sysfs_scan_is_clean() {
    // This machine has no RDMA; a machine that has some must still scan without error.
    let s = SysfsReader::live().scan().expect("live scan");
    if !Path::new("/sys/class/infiniband").exists() {
        assert_eq!(s.presence(), RdmaPresence::NoSubsystem);
    }
}
