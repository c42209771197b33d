//! Benchmark of a full sysfs scan: builds an 8 NIC × 256-slot GID table sysroot in a temp dir
//! and prints the median time per scan (each scan also walks every port's populated GIDs).
//!
//! Usage: `cargo run --release -p mcsup-rdma --example scan_bench -- [SCANS] [PAIRS]`
//! SCANS (default 200) full scans are timed; PAIRS (default 2) RoCE v1+v2 address pairs are
//! populated per port (2 = link-local + one IPv4, the usual table; 128 fills all 256 slots,
//! the worst case). The goal is well under 20 ms per scan. Not a test: nothing is asserted.
//! Mooncake's GID choice on top of the scan is timed by the main crate's `bench_preflight`.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use mcsup_rdma::fixture::{link_local_from_mac, FixtureBuilder, FixtureDevice, FixturePort};
use mcsup_rdma::{Gid, SysfsReader};

const NICS: u8 = 8;
const TABLE_LEN: u32 = 256;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let scans: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(200);
    let pairs: u32 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2);
    if scans == 0 || pairs == 0 || pairs * 2 > TABLE_LEN {
        return Err(format!("need SCANS ≥ 1 and 1 ≤ PAIRS ≤ {}", TABLE_LEN / 2).into());
    }

    let dir = tempfile::tempdir()?;
    let mut builder = FixtureBuilder::new();
    for n in 0..NICS {
        let netdev = format!("ens{n}f0np0");
        let mut port = FixturePort::ethernet(1).gid_table_len(TABLE_LEN).roce_pair(
            link_local_from_mac([0x0c, 0x42, 0xa1, 0x00, 0x00, n]),
            Some(&netdev),
        );
        for k in 1..pairs {
            let [hi, lo] = u16::try_from(k)?.to_be_bytes();
            let addr = Gid::from(Ipv4Addr::new(192, 168, n, 0) | Ipv4Addr::new(0, 0, hi, lo));
            port = port.roce_pair(addr, Some(&netdev));
        }
        builder = builder.device(
            FixtureDevice::new(format!("mlx5_{n}"))
                .numa_node(i32::from(n / 4))
                .netdev(netdev.clone(), 4200)
                .uverbs(u32::from(n))
                .port(port),
        );
    }
    let started = Instant::now();
    builder.write(dir.path())?;
    println!(
        "built {NICS} NICs × {TABLE_LEN} GID slots ({} populated per port) in {:.1} ms at {}",
        pairs * 2,
        started.elapsed().as_secs_f64() * 1e3,
        dir.path().display()
    );

    let reader = SysfsReader::new(dir.path());
    // One untimed scan warms the page cache and checks the tree.
    let warm = reader.scan()?;
    let populated: usize = warm
        .devices
        .iter()
        .flat_map(|d| &d.ports)
        .map(|p| p.populated_gids().count())
        .sum();
    println!("{} devices, {populated} populated GIDs", warm.devices.len());

    let mut times: Vec<Duration> = Vec::with_capacity(scans);
    for _ in 0..scans {
        let t = Instant::now();
        let scan = reader.scan()?;
        let populated = scan
            .devices
            .iter()
            .flat_map(|d| &d.ports)
            .map(|p| p.populated_gids().count())
            .sum::<usize>();
        times.push(t.elapsed());
        std::hint::black_box(populated);
    }
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{scans} scans: median {:.3} ms, min {:.3} ms, p90 {:.3} ms, max {:.3} ms per full scan",
        ms(times[times.len() / 2]),
        ms(times[0]),
        ms(times[times.len() * 9 / 10]),
        ms(times[times.len() - 1]),
    );
    Ok(())
}
