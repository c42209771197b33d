//! Mooncake's automatic GID choice (`mcsup::mooncake::gid`) on real-shaped GID tables: the
//! committed sysroot fixtures (`tests/fixtures/sysroot/*`) and builder-made trees, read through
//! `mcsup_rdma`'s sysfs reader. The reader's own values are checked in `rdma/tests/fixtures.rs`;
//! this file checks only what Mooncake would pick on them.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use mcsup::mooncake::gid::{
    evaluate_gid_index, select_gid, DegradedReason, GidAssessment, GidRank, GidRejection,
    SelectionOutcome,
};
use mcsup_rdma::fixture::{FixtureBuilder, FixtureDevice, FixturePort};
use mcsup_rdma::{Gid, GidType, SysfsReader, SysfsScan};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysroot")
        .join(name)
}

fn scan(name: &str) -> SysfsScan {
    SysfsReader::new(fixture(name))
        .scan()
        .unwrap_or_else(|e| panic!("scan {name}: {e}"))
}

#[test]
fn fixture_a_auto_selection_picks_3_and_explains_0_1_2() {
    let s = scan("roce-v2-ipv4");
    let sel = select_gid(&s.devices[0].ports[0].gids);
    assert_eq!(sel.chosen, Some(3));
    let c3 = sel.chosen_candidate().expect("chosen");
    assert_eq!(
        c3.assessment,
        GidAssessment::Eligible {
            rank: GidRank::Routable {
                netdev: "ens1f0np0".into()
            }
        }
    );
    assert_eq!(c3.outcome, SelectionOutcome::Chosen);

    let c0 = sel.candidate(0).expect("0");
    assert_eq!(
        c0.assessment,
        GidAssessment::Rejected {
            reason: GidRejection::RoceV1
        }
    );
    assert_eq!(c0.outcome, SelectionOutcome::Rejected);

    let c1 = sel.candidate(1).expect("1");
    assert_eq!(
        c1.assessment,
        GidAssessment::Eligible {
            rank: GidRank::Degraded {
                reason: DegradedReason::LinkLocal
            }
        }
    );
    assert_eq!(c1.outcome, SelectionOutcome::Outranked { by: 3 });

    let c2 = sel.candidate(2).expect("2");
    assert_eq!(
        c2.assessment,
        GidAssessment::Rejected {
            reason: GidRejection::RoceV1
        }
    );

    for index in 4..16 {
        assert_eq!(
            sel.candidate(index).map(|c| &c.assessment),
            Some(&GidAssessment::Rejected {
                reason: GidRejection::Empty
            })
        );
    }
    assert_eq!(sel.populated().count(), 4);
}

#[test]
fn fixture_a_explicit_indices() {
    let s = scan("roce-v2-ipv4");
    let gids = &s.devices[0].ports[0].gids;
    let v0 = evaluate_gid_index(gids, 0);
    assert!(v0.in_table && v0.populated && v0.link_local);
    assert_eq!(v0.gid_type, Some(GidType::RoceV1));
    let v3 = evaluate_gid_index(gids, 3);
    assert_eq!(v3.ipv4, Some(Ipv4Addr::new(192, 168, 1, 10)));
    assert_eq!(v3.netdev.as_deref(), Some("ens1f0np0"));
    let v4 = evaluate_gid_index(gids, 4);
    assert!(v4.in_table && !v4.populated);
    assert_eq!(v4.gid, Some(Gid::ZERO));
    let v200 = evaluate_gid_index(gids, 200);
    assert!(!v200.in_table);
}

#[test]
fn fixture_b_infiniband_auto_selection_picks_0() {
    let s = scan("ib-hdr");
    let p = s.device("mlx5_0").expect("mlx5_0").port(1).expect("port");
    let sel = select_gid(&p.gids);
    assert_eq!(sel.chosen, Some(0));
    assert_eq!(
        sel.chosen_candidate().map(|c| c.outcome),
        Some(SelectionOutcome::Chosen)
    );
}

#[test]
fn port_down_auto_selection_picks_link_local() {
    let s = scan("port-down");
    let p = s.devices[0].port(1).expect("port");
    // Only the link-local v2 GID is eligible: degraded, but still what Mooncake would pick.
    let sel = select_gid(&p.gids);
    assert_eq!(sel.chosen, Some(1));
}

#[test]
fn renamed_device_auto_selection_picks_3() {
    let s = scan("renamed");
    let p = s
        .device("rocep153s0")
        .expect("renamed device")
        .port(1)
        .expect("port");
    assert_eq!(select_gid(&p.gids).chosen, Some(3));
}

#[test]
fn bond_device_auto_selection_picks_routable_on_bond0() {
    let s = scan("bond");
    let p = s
        .device("mlx5_bond_0")
        .expect("bond device")
        .port(1)
        .expect("port");
    let sel = select_gid(&p.gids);
    assert_eq!(sel.chosen, Some(3));
    assert_eq!(
        sel.chosen_candidate().and_then(|c| c.assessment.rank()),
        Some(&GidRank::Routable {
            netdev: "bond0".into()
        })
    );
}

#[test]
fn roce_v1_only_has_nothing_eligible() {
    let s = scan("roce-v1-only");
    let p = s.devices[0].port(1).expect("port");
    assert_eq!(p.populated_gids().count(), 2);
    assert!(p
        .populated_gids()
        .all(|g| g.gid_type == Some(GidType::RoceV1)));
    let sel = select_gid(&p.gids);
    assert_eq!(sel.chosen, None);
    assert!(sel.populated().all(|c| c.assessment
        == GidAssessment::Rejected {
            reason: GidRejection::RoceV1
        }));
}

#[test]
fn two_nics_compare_across_devices() {
    let s = scan("two-nics");
    let names: Vec<_> = s.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1"]);
    // (device, chosen index, its IPv4, NUMA node, uverbs entry)
    type Pick = (
        String,
        Option<u32>,
        Option<Ipv4Addr>,
        Option<u32>,
        Option<String>,
    );
    let picked: Vec<Pick> = s
        .devices
        .iter()
        .map(|d| {
            let port = &d.ports[0];
            let sel = select_gid(&port.gids);
            let ip = sel.chosen_candidate().and_then(|c| c.gid.ipv4_mapped());
            (
                d.name.clone(),
                sel.chosen,
                ip,
                d.numa_node,
                d.uverbs.as_ref().map(|u| u.name.clone()),
            )
        })
        .collect();
    assert_eq!(
        picked,
        vec![
            (
                "mlx5_0".into(),
                Some(3),
                Some(Ipv4Addr::new(192, 168, 1, 10)),
                Some(0),
                Some("uverbs0".into())
            ),
            (
                "mlx5_1".into(),
                Some(3),
                Some(Ipv4Addr::new(192, 168, 1, 11)),
                Some(1),
                Some("uverbs1".into())
            ),
        ]
    );
    assert_ne!(s.devices[0].node_guid, s.devices[1].node_guid);
}

#[test]
fn builder_docker_netdev_loses_to_routable() {
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
    let sel = select_gid(&s.devices[0].ports[0].gids);
    assert_eq!(sel.chosen, Some(3));
    assert_eq!(
        sel.candidate(1).map(|c| (&c.assessment, c.outcome)),
        Some((
            &GidAssessment::Eligible {
                rank: GidRank::Degraded {
                    reason: DegradedReason::VirtualNetdev {
                        netdev: "docker0".into()
                    }
                }
            },
            SelectionOutcome::Outranked { by: 3 }
        ))
    );
}

#[test]
fn builder_eight_nics_256_gids_auto_selection() {
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
    for d in &s.devices {
        let sel = select_gid(&d.ports[0].gids);
        // 10/8 is private, which still beats the link-local pair.
        assert_eq!(sel.chosen, Some(3), "{}", d.name);
        assert!(matches!(
            sel.chosen_candidate().and_then(|c| c.assessment.rank()),
            Some(GidRank::PrivateIpv4 { .. })
        ));
    }
}
