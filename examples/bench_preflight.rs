//! Benchmark (not a test): the whole preflight on an 8 NIC x 256-GID fixture node, against the
//! bare sysfs scan it is built on (the floor), measured in the same run.
//!
//!     cargo run --release --example bench_preflight -- [RUNS]
//!
//! Goal: the preflight takes <= 20 ms on this node. Prints medians and the ratio to the floor.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use mcsup::preflight::fixture::{write_proc, Proc};
use mcsup_rdma::fixture::{link_local_from_mac, FixtureBuilder, FixtureDevice, FixturePort};
use mcsup_rdma::{Gid, SysfsReader};

const NICS: u8 = 8;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runs: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200)
        .max(1);
    let dir = tempfile::tempdir()?;
    let mut builder = FixtureBuilder::new();
    for n in 0..NICS {
        let netdev = format!("ens{n}f0np0");
        let port = FixturePort::ethernet(1)
            .gid_table_len(256)
            .roce_pair(
                link_local_from_mac([0x0c, 0x42, 0xa1, 0, 0, n]),
                Some(&netdev),
            )
            .roce_pair(Gid::from(Ipv4Addr::new(192, 168, n, 10)), Some(&netdev));
        builder = builder.device(
            FixtureDevice::new(format!("mlx5_{n}"))
                .netdev(netdev.clone(), 4200)
                .uverbs(u32::from(n))
                .port(port),
        );
    }
    builder.write(dir.path())?;
    write_proc(dir.path(), &Proc::default())?;

    let devices: Vec<String> = (0..NICS).map(|n| format!("mlx5_{n}")).collect();
    let recipe_text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/recipes/sglang-disagg-mooncake.yaml"
    ))?
    .replace(
        "MOONCAKE_DEVICE: \"mlx5_0,mlx5_1\"",
        &format!("MOONCAKE_DEVICE: \"{}\"", devices.join(",")),
    );
    let recipe = mcsup::recipe::parse_str(std::path::Path::new("bench.yaml"), &recipe_text)?;
    let inputs = mcsup::node::NodeInputs {
        node: Some("gpu-02".into()),
        nodelist: Some("gpu-[01-02]".into()),
        hostname: "bench".into(),
        cwd: "/".into(),
        ..Default::default()
    };
    let ctx = mcsup::node::resolve(&inputs, &Default::default(), &|_| None)?;
    let plan = mcsup::plan::plan(&recipe, &[mcsup::plan::Role::Decode], &ctx)?;
    let opts = mcsup::preflight::Options {
        sysroot: dir.path().to_path_buf(),
        live: false,
        slurm_env: Vec::new(),
        path_var: None,
        in_slurm: false,
        inherited_env: Vec::new(),
        scope: mcsup::preflight::Scope::Survey,
        tool_timeout: mcsup::preflight::TOOL_TIMEOUT,
    };
    let report = mcsup::preflight::run(&plan, &opts);
    println!(
        "fixture: {NICS} NICs x 256 GID slots; preflight verdict: {}",
        if report.passed(false) { "pass" } else { "fail" }
    );

    let mut floor = Vec::with_capacity(runs);
    let mut full = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        std::hint::black_box(SysfsReader::new(dir.path()).scan()?);
        floor.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(mcsup::preflight::run(&plan, &opts));
        full.push(t.elapsed());
    }
    let (f, p) = (median(floor), median(full));
    println!("runs: {runs}");
    println!(
        "sysfs scan alone (floor): {:>8.3} ms median",
        f.as_secs_f64() * 1e3
    );
    println!(
        "mcsup preflight (all):    {:>8.3} ms median",
        p.as_secs_f64() * 1e3
    );
    println!(
        "ratio preflight/floor:    {:>8.2}x; goal <= 20 ms: {}",
        p.as_secs_f64() / f.as_secs_f64(),
        if p <= Duration::from_millis(20) {
            "met"
        } else {
            "NOT met"
        }
    );
    Ok(())
}
