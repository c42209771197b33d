//! The preflight against fixture nodes: RDMA sysfs trees (tests/fixtures/sysroot) combined with
//! /proc files written here in the kernel's formats (meminfo, limits, status, cgroup v1/v2), run
//! through the real `mcsup preflight --sysroot` binary. Each check has passing and failing cases.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysroot")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

use mcsup::preflight::fixture::{write_proc, Cgroup, Proc};

fn node(rdma_tree: &str, proc_: &Proc) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join(rdma_tree), dir.path());
    write_proc(dir.path(), proc_).unwrap();
    dir
}

fn seed_recipe() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/sglang-disagg-mooncake.yaml"),
    )
    .unwrap()
}

struct Outcome {
    code: i32,
    json: serde_json::Value,
}

impl Outcome {
    fn check(&self, name: &str) -> &serde_json::Value {
        self.json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| {
                panic!(
                    "no check `{name}` in {}",
                    serde_json::to_string_pretty(&self.json).unwrap()
                )
            })
    }
    fn status(&self, name: &str) -> String {
        self.check(name)["status"].as_str().unwrap().to_string()
    }
    fn text(&self, name: &str) -> String {
        let c = self.check(name);
        format!(
            "{} fix: {}",
            c["message"].as_str().unwrap_or(""),
            c["fix"].as_str().unwrap_or("")
        )
    }
}

/// `mcsup SUB` on `recipe` (written to a temporary file, returned with the command) for `role`:
/// prefill on gpu-01, the infra node; other roles on gpu-02.
fn on_node(sub: &str, recipe: &str, role: &str) -> (Command, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let rp = dir.path().join("job.yaml");
    std::fs::write(&rp, recipe).unwrap();
    let node = if role == "prefill" {
        "gpu-01"
    } else {
        "gpu-02"
    };
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcsup"));
    cmd.args([
        sub,
        "--role",
        role,
        "--node",
        node,
        "--nodelist",
        "gpu-[01-02]",
    ])
    .args([
        "--master-addr",
        "10.0.0.1",
        "--node-ip",
        "10.0.0.2",
        "--recipe",
    ])
    .arg(&rp);
    (cmd, dir)
}

/// Run the real `mcsup preflight --sysroot root` on `recipe` for `role`, with extra arguments and
/// environment.
fn run_preflight(
    root: &Path,
    recipe: &str,
    role: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let (mut cmd, _dir) = on_node("preflight", recipe, role);
    cmd.arg("--sysroot")
        .arg(root)
        .args(extra)
        .env_remove("NCCL_IB_GID_INDEX")
        .env_remove("MC_GID_INDEX");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn preflight(root: &Path, recipe: &str, role: &str, extra: &[&str]) -> Outcome {
    preflight_env(root, recipe, role, extra, &[])
}

fn preflight_env(
    root: &Path,
    recipe: &str,
    role: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Outcome {
    let mut args = vec!["--json"];
    args.extend_from_slice(extra);
    let out = run_preflight(root, recipe, role, &args, env);
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Outcome {
        code: out.status.code().unwrap_or(-1),
        json,
    }
}

#[test]
fn seed_recipe_passes_on_a_healthy_roce_node_with_index_3() {
    let n = node("two-nics", &Proc::default());
    let o = preflight(n.path(), &seed_recipe(), "decode", &[]);
    assert_eq!(
        o.code,
        0,
        "{}",
        serde_json::to_string_pretty(&o.json).unwrap()
    );
    assert_eq!(o.json["passed"], true);
    for dev in ["mlx5_0", "mlx5_1"] {
        assert_eq!(o.status(&format!("gid index {dev}")), "ok");
        assert!(o
            .text(&format!("gid index {dev}"))
            .contains("MC_GID_INDEX (recipe)=3"));
        assert_eq!(o.status(&format!("port {dev}/1")), "ok");
        assert_eq!(o.status(&format!("uverbs {dev}")), "ok");
    }
    assert_eq!(o.status("memlock"), "ok");
    assert_eq!(o.status("budget"), "ok");
    assert_eq!(o.json["facts"]["rdma.gid_index"], "mlx5_0=3,mlx5_1=3");
}

#[test]
fn gid_index_1_2_5_and_unset() {
    let n = node("two-nics", &Proc::default());
    let with = |idx: &str| {
        seed_recipe().replace("MC_GID_INDEX: \"3\"", &format!("MC_GID_INDEX: \"{idx}\""))
    };
    let o = preflight(n.path(), &with("1"), "decode", &[]);
    assert_eq!(o.status("gid index mlx5_0"), "warn");
    assert!(
        o.text("gid index mlx5_0").contains("link-local"),
        "{}",
        o.text("gid index mlx5_0")
    );
    assert!(o.text("gid index mlx5_0").contains("MC_GID_INDEX=3"));
    assert_eq!(o.code, 0, "a warning passes");
    let strict = preflight(n.path(), &with("1"), "decode", &["--strict"]);
    assert_eq!(strict.code, 1, "--strict fails on warnings");

    let o = preflight(n.path(), &with("2"), "decode", &[]);
    assert_eq!(o.status("gid index mlx5_0"), "fail");
    assert!(o.text("gid index mlx5_0").contains("RoCE v1"));
    assert!(o
        .text("gid index mlx5_0")
        .contains("retry counter exceeded"));
    assert_eq!(o.code, 1);

    let o = preflight(n.path(), &with("5"), "decode", &[]);
    assert_eq!(o.status("gid index mlx5_0"), "fail");
    assert!(o.text("gid index mlx5_0").contains("empty GID slot"));
    assert!(o.text("gid index mlx5_0").contains("use MC_GID_INDEX=3"));

    let o = preflight(n.path(), &with("99"), "decode", &[]);
    assert!(o.text("gid index mlx5_0").contains("beyond the GID table"));

    // Unset: report the index Mooncake's auto-selection picks on each device.
    let unset = seed_recipe().replace("        MC_GID_INDEX: \"3\"\n", "");
    let o = preflight(n.path(), &unset, "decode", &[]);
    assert_eq!(o.status("gid index mlx5_0"), "ok");
    assert!(
        o.text("gid index mlx5_0").contains("Mooncake will pick 3"),
        "{}",
        o.text("gid index mlx5_0")
    );
}

/// Mooncake reads MC_GID_INDEX with atoi and accepts 0..=255: `-1` and out-of-range values mean
/// automatic choice, `auto` and `""` pin slot 0 (config.cpp::loadGlobalConfig).
#[test]
fn gid_index_values_are_read_as_mooncake_reads_them() {
    let n = node("two-nics", &Proc::default());
    let with = |idx: &str| {
        seed_recipe().replace("MC_GID_INDEX: \"3\"", &format!("MC_GID_INDEX: \"{idx}\""))
    };
    // -1: the documented way to ask for automatic choice; no complaint about the value.
    let o = preflight(n.path(), &with("-1"), "decode", &[]);
    assert_eq!(o.status("gid index mlx5_0"), "ok");
    let t = o.text("gid index mlx5_0");
    assert!(
        t.contains("=-1 means automatic") && t.contains("Mooncake will pick 3"),
        "{t}"
    );
    assert!(o.json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["name"] != "gid index value"));
    // 300: Mooncake warns and chooses automatically.
    let o = preflight(n.path(), &with("300"), "decode", &[]);
    assert_eq!(o.status("gid index value"), "warn");
    assert!(
        o.text("gid index value").contains("outside 0..255"),
        "{}",
        o.text("gid index value")
    );
    assert!(o.text("gid index mlx5_0").contains("Mooncake will pick 3"));
    // auto and "": atoi reads 0, which pins slot 0 (link-local here), not automatic choice.
    for v in ["auto", ""] {
        let o = preflight(n.path(), &with(v), "decode", &[]);
        assert_eq!(o.status("gid index value"), "warn", "{v:?}");
        let t = o.text("gid index value");
        assert!(
            t.contains("atoi as 0") && t.contains("does not mean automatic"),
            "{v:?}: {t}"
        );
        assert!(
            o.text("gid index mlx5_0").contains("=0"),
            "{v:?}: {}",
            o.text("gid index mlx5_0")
        );
        assert_eq!(
            o.json["facts"]["rdma.gid_index"], "mlx5_0=0,mlx5_1=0",
            "{v:?}"
        );
    }
}

/// Both indices set, and different: Mooncake's transfers and NCCL's use different GIDs.
#[test]
fn a_gid_index_that_differs_between_mooncake_and_nccl_is_flagged() {
    let n = node("two-nics", &Proc::default());
    let json = preflight_env(
        n.path(),
        &seed_recipe(),
        "decode",
        &[],
        &[("NCCL_IB_GID_INDEX", "2")],
    )
    .json;
    let checks = json["checks"].as_array().unwrap();
    let c = checks
        .iter()
        .find(|c| c["name"] == "gid index agreement")
        .expect("the disagreement flagged");
    assert_eq!(c["status"], "warn");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.contains("MC_GID_INDEX=3") && m.contains("NCCL_IB_GID_INDEX=2"),
        "{m}"
    );
    // The same index: nothing to say.
    let json = preflight_env(
        n.path(),
        &seed_recipe(),
        "decode",
        &[],
        &[("NCCL_IB_GID_INDEX", "3")],
    )
    .json;
    assert!(!json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "gid index agreement"));
}

/// The adversarial re-run's GID case (c): the store's `MC_GID_INDEX=3` and the decode worker's
/// `NCCL_IB_GID_INDEX=2` (its transfer engine falls back to it) passed without a word.
#[test]
fn a_gid_index_that_differs_between_the_store_and_a_worker_is_flagged() {
    let n = node("two-nics", &Proc::default());
    let recipe = seed_recipe().replace(
        "  decode_environment:\n",
        "  decode_environment:\n    NCCL_IB_GID_INDEX: \"2\"\n",
    );
    assert_ne!(recipe, seed_recipe());
    let o = preflight_env(n.path(), &recipe, "decode", &[], &[]);
    assert_eq!(o.status("gid index across processes"), "warn");
    let m = o.text("gid index across processes");
    assert!(
        m.contains("reads GID index 3 (MC_GID_INDEX, recipe)")
            && m.contains("reads 2 (NCCL_IB_GID_INDEX, which Mooncake falls back to, recipe)"),
        "{m}"
    );
    // The seed's own recipe: every process agrees.
    let o = preflight_env(n.path(), &seed_recipe(), "decode", &[], &[]);
    assert!(o.json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["name"] != "gid index across processes"));
}

#[test]
fn nccl_gid_index_is_inherited_silently_warns() {
    let n = node("two-nics", &Proc::default());
    let unset = seed_recipe().replace("        MC_GID_INDEX: \"3\"\n", "");
    let json = preflight_env(
        n.path(),
        &unset,
        "decode",
        &[],
        &[("NCCL_IB_GID_INDEX", "2")],
    )
    .json;
    let checks = json["checks"].as_array().unwrap();
    let src = checks
        .iter()
        .find(|c| c["name"] == "gid index source")
        .expect("source warning");
    assert_eq!(src["status"], "warn");
    assert!(src["message"]
        .as_str()
        .unwrap()
        .contains("NCCL_IB_GID_INDEX=2"));
    let g = checks
        .iter()
        .find(|c| c["name"] == "gid index mlx5_0")
        .unwrap();
    assert_eq!(g["status"], "fail", "index 2 is RoCE v1");
}

#[test]
fn misspelt_device_names_the_closest() {
    let n = node("two-nics", &Proc::default());
    let r = seed_recipe().replace(
        "MOONCAKE_DEVICE: \"mlx5_0,mlx5_1\"\n        MC_GID",
        "MOONCAKE_DEVICE: \"mlx5_0,mlx_51\"\n        MC_GID",
    );
    let o = preflight(n.path(), &r, "decode", &[]);
    assert_eq!(o.code, 1);
    assert_eq!(o.status("device mlx_51"), "fail");
    let t = o.text("device mlx_51");
    assert!(
        t.contains("silently drop") && t.contains("did you mean `mlx5_1`?"),
        "{t}"
    );
}

#[test]
fn memlock_8mib_fails_unlimited_or_cap_passes() {
    let eight = Proc {
        memlock_bytes: Some(8 << 20),
        ..Proc::default()
    };
    let o = preflight(
        node("two-nics", &eight).path(),
        &seed_recipe(),
        "decode",
        &[],
    );
    assert_eq!(o.status("memlock"), "fail");
    let t = o.text("memlock");
    assert!(
        t.contains("8 MiB")
            && t.contains("800 GiB")
            && t.contains("PropagateResourceLimitsExcept=MEMLOCK"),
        "{t}"
    );
    assert_eq!(o.code, 1);
    let cap = Proc {
        memlock_bytes: Some(8 << 20),
        cap_ipc_lock: true,
        ..Proc::default()
    };
    let o = preflight(node("two-nics", &cap).path(), &seed_recipe(), "decode", &[]);
    assert_eq!(o.status("memlock"), "ok");
    assert!(o.text("memlock").contains("CAP_IPC_LOCK"));
}

#[test]
fn store_must_fit_beside_hicache() {
    // Prefill: 100gb store + HiCache 60 GB x 8 ranks (480 GB = 447 GiB) + 10 GiB headroom = 557 GiB.
    let small = Proc {
        mem_available_gib: 500,
        ..Proc::default()
    };
    let o = preflight(
        node("two-nics", &small).path(),
        &seed_recipe(),
        "prefill",
        &[],
    );
    assert_eq!(o.status("budget"), "fail", "{}", o.text("budget"));
    let t = o.text("budget");
    assert!(
        t.contains("short by") && t.contains("MOONCAKE_GLOBAL_SEGMENT_SIZE"),
        "{t}"
    );
    let need: Vec<_> = o.json["budget"]["need"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["item"].as_str().unwrap().to_string())
        .collect();
    assert!(
        need.contains(&"HiCache L2 (prefill)".to_string()),
        "{need:?}"
    );
    let big = Proc {
        mem_available_gib: 600,
        ..Proc::default()
    };
    let o = preflight(
        node("two-nics", &big).path(),
        &seed_recipe(),
        "prefill",
        &[],
    );
    assert_eq!(o.status("budget"), "ok", "{}", o.text("budget"));
}

#[test]
fn cgroup_v2_and_v1_limits_bound_the_budget() {
    // Plenty of host memory, but the Slurm job's cgroup allows 300 GiB with 20 used: 400gb fails.
    let v2 = Proc {
        cgroup: Cgroup::V2 {
            max_gib: 300,
            usage_gib: 20,
        },
        ..Proc::default()
    };
    let o = preflight(node("two-nics", &v2).path(), &seed_recipe(), "decode", &[]);
    assert_eq!(o.status("budget"), "fail");
    assert_eq!(o.json["budget"]["available_total"], 280u64 << 30);
    let v1 = Proc {
        cgroup: Cgroup::V1 {
            limit_gib: 1024,
            usage_gib: 4,
        },
        ..Proc::default()
    };
    let o = preflight(node("two-nics", &v1).path(), &seed_recipe(), "decode", &[]);
    assert_eq!(o.status("budget"), "ok");
    assert_eq!(o.json["budget"]["available_total"], 1020u64 << 30);
}

#[test]
fn port_states_and_missing_hardware() {
    let one_dev = seed_recipe().replace(
        "MOONCAKE_DEVICE: \"mlx5_0,mlx5_1\"\n        MC_GID",
        "MOONCAKE_DEVICE: \"mlx5_0\"\n        MC_GID",
    );
    let o = preflight(
        node("port-down", &Proc::default()).path(),
        &one_dev,
        "decode",
        &[],
    );
    assert_eq!(o.status("port mlx5_0/1"), "fail");
    assert!(o.text("port mlx5_0/1").contains("DOWN"));

    let ib = one_dev.replace("MC_GID_INDEX: \"3\"", "MC_GID_INDEX: \"0\"");
    let o = preflight(
        node("ib-port-init", &Proc::default()).path(),
        &ib,
        "decode",
        &[],
    );
    let port = o.json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str().unwrap().starts_with("port "))
        .unwrap()
        .clone();
    assert_eq!(port["status"], "fail");
    assert!(port["message"]
        .as_str()
        .unwrap()
        .contains("no subnet manager"));

    for (tree, words) in [
        ("no-hca", "module is loaded but no HCA"),
        ("no-rdma", "RDMA subsystem is absent"),
    ] {
        let o = preflight(
            node(tree, &Proc::default()).path(),
            &seed_recipe(),
            "decode",
            &[],
        );
        assert_eq!(o.status("devices"), "fail");
        assert!(o.text("devices").contains("no RDMA devices") && o.text("devices").contains(words));
        assert_eq!(o.code, 1);
    }
}

#[test]
fn tcp_recipe_skips_rdma_and_budget_counts_small_store() {
    let local =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/local.yaml"))
            .unwrap();
    let o = preflight(
        node("no-rdma", &Proc::default()).path(),
        &local,
        "decode",
        &[],
    );
    assert_eq!(
        o.code,
        0,
        "{}",
        serde_json::to_string_pretty(&o.json).unwrap()
    );
    assert_eq!(o.status("protocol"), "skip");
    assert_eq!(
        o.json["budget"]["need_total"],
        (512u64 << 20) + (16 << 20) + (10 << 30)
    );
}

/// The seed recipe with every MOONCAKE_DEVICE (store and workers) set to `dev`.
fn with_device(dev: &str) -> String {
    seed_recipe().replace(
        "MOONCAKE_DEVICE: \"mlx5_0,mlx5_1\"",
        &format!("MOONCAKE_DEVICE: \"{dev}\""),
    )
}

#[test]
fn renamed_bond_v1_only_and_ib() {
    // udev renamed mlx5_0 to rocep153s0: the recipe's name is gone, the message lists what exists.
    let o = preflight(
        node("renamed", &Proc::default()).path(),
        &with_device("mlx5_0"),
        "decode",
        &[],
    );
    assert_eq!(o.status("device mlx5_0"), "fail");
    assert!(
        o.text("device mlx5_0").contains("rocep153s0"),
        "{}",
        o.text("device mlx5_0")
    );
    let o = preflight(
        node("renamed", &Proc::default()).path(),
        &with_device("rocep153s0"),
        "decode",
        &[],
    );
    assert_eq!(
        o.status("gid index rocep153s0"),
        "ok",
        "{}",
        o.text("gid index rocep153s0")
    );

    // A RoCE LAG: the bond device with GIDs on bond0.
    let o = preflight(
        node("bond", &Proc::default()).path(),
        &with_device("mlx5_bond_0"),
        "decode",
        &[],
    );
    assert_eq!(
        o.code,
        0,
        "{}",
        serde_json::to_string_pretty(&o.json).unwrap()
    );
    assert!(o.text("gid index mlx5_bond_0").contains("bond0"));

    // Only RoCE v1 GIDs: nothing for auto-selection.
    let unset = with_device("mlx5_0").replace("        MC_GID_INDEX: \"3\"\n", "");
    let o = preflight(
        node("roce-v1-only", &Proc::default()).path(),
        &unset,
        "decode",
        &[],
    );
    assert_eq!(o.status("gid index mlx5_0"), "fail");
    assert!(o.text("gid index mlx5_0").contains("cannot pick one"));

    // InfiniBand HDR: index 0 is the native GID.
    let ib = with_device("mlx5_0").replace("MC_GID_INDEX: \"3\"", "MC_GID_INDEX: \"0\"");
    let o = preflight(node("ib-hdr", &Proc::default()).path(), &ib, "decode", &[]);
    assert_eq!(
        o.status("gid index mlx5_0"),
        "ok",
        "{}",
        o.text("gid index mlx5_0")
    );
    assert_eq!(o.status("port mlx5_0/1"), "ok");
}

#[test]
fn auto_discovery_needs_an_active_hca() {
    let auto = with_device("auto-discovery");
    let o = preflight(
        node("port-down", &Proc::default()).path(),
        &auto,
        "decode",
        &[],
    );
    assert_eq!(o.status("devices"), "fail");
    assert!(
        o.text("devices").contains("fall back to TCP")
            && o.text("devices").contains("MC_FORCE_HCA")
    );
    let o = preflight(
        node("two-nics", &Proc::default()).path(),
        &auto,
        "decode",
        &[],
    );
    assert_eq!(o.status("devices"), "ok");
}

#[test]
fn human_output_groups_checks_and_prints_the_budget_with_units() {
    let n = node(
        "two-nics",
        &Proc {
            memlock_bytes: Some(8 << 20),
            ..Proc::default()
        },
    );
    let out = run_preflight(n.path(), &seed_recipe(), "decode", &[], &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "[rdma]",
        "[limits]",
        "[memory budget]",
        "FAIL  memlock",
        "fix: raise it",
        "400 GiB",
        "429.50 GB",
        "FAIL: 1 failed",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
}

/// Move an HCA's `device` directory under a PCI root complex (as real sysfs has it, through a
/// symlink) and add an NVIDIA GPU beside it; `peermem` loads nvidia_peermem.
fn gpu_node(peermem: bool) -> tempfile::TempDir {
    let n = node("two-nics", &Proc::default());
    let root = n.path();
    for (hca, port_dir) in [
        ("mlx5_0", "pci0000:17/0000:17:01.0/0000:18:00.0"),
        ("mlx5_1", "pci0000:97/0000:97:01.0/0000:98:00.0"),
    ] {
        let real = root.join("sys/devices").join(port_dir);
        std::fs::create_dir_all(real.parent().unwrap()).unwrap();
        let link = root.join(format!("sys/class/infiniband/{hca}/device"));
        std::fs::rename(&link, &real).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
    }
    for (bdf, complex, port, numa) in [
        ("0000:19:00.0", "pci0000:17", "0000:17:01.0", "0"),
        ("0000:99:00.0", "pci0000:97", "0000:97:01.0", "1"),
    ] {
        let dev = root.join(format!("sys/devices/{complex}/{port}/{bdf}"));
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(dev.join("class"), "0x030200\n").unwrap();
        std::fs::write(dev.join("numa_node"), format!("{numa}\n")).unwrap();
        let bus = root.join("sys/bus/pci/devices");
        std::fs::create_dir_all(&bus).unwrap();
        std::os::unix::fs::symlink(&dev, bus.join(bdf)).unwrap();
    }
    // A NIC that is not a GPU must not count.
    let nic = root.join("sys/bus/pci/devices/0000:18:00.1");
    std::fs::create_dir_all(&nic).unwrap();
    std::fs::write(nic.join("vendor"), "0x15b3\n").unwrap();
    std::fs::write(nic.join("class"), "0x020000\n").unwrap();
    if peermem {
        std::fs::create_dir_all(root.join("sys/module/nvidia_peermem")).unwrap();
    }
    n
}

/// srt-slurm #429: without nvidia_peermem every GPU KV transfer fails silently. The preflight
/// fails on a GPU node without it, passes with it, and names the nearest HCA of each GPU.
#[test]
fn gpudirect_needs_nvidia_peermem_and_names_each_gpus_nearest_hca() {
    let n = gpu_node(false);
    let o = preflight(n.path(), &seed_recipe(), "decode", &[]);
    assert_eq!(o.status("gpus"), "ok");
    assert!(
        o.text("gpus")
            .contains("2 NVIDIA GPU(s): 0000:19:00.0, 0000:99:00.0"),
        "{}",
        o.text("gpus")
    );
    assert_eq!(o.status("gpudirect"), "fail");
    assert!(
        o.text("gpudirect").contains("nvidia_peermem is not loaded")
            && o.text("gpudirect").contains("modprobe nvidia_peermem")
    );
    assert_eq!(o.code, 1);
    let t = o.text("nearest hca 0000:19:00.0");
    assert!(
        t.contains("nearest HCA mlx5_0") && t.contains("NUMA 0") && t.contains("PCIe hops"),
        "{t}"
    );
    assert!(o
        .text("nearest hca 0000:99:00.0")
        .contains("nearest HCA mlx5_1"));

    let n = gpu_node(true);
    let o = preflight(n.path(), &seed_recipe(), "decode", &[]);
    assert_eq!(o.status("gpudirect"), "ok");
    assert_eq!(o.code, 0, "{}", o.json);

    // No GPU: skipped, and nothing fails.
    let n = node("two-nics", &Proc::default());
    let o = preflight(n.path(), &seed_recipe(), "decode", &[]);
    assert_eq!(o.status("gpus"), "skip");
}

/// Mooncake's path MTU is min(active MTU, MC_MTU, 4096); an MC_MTU it does not accept is
/// ignored (with an error in Mooncake's log): warned here.
#[test]
fn path_mtu_follows_mc_mtu() {
    let n = node("two-nics", &Proc::default());
    let with = |v: &str| {
        seed_recipe().replace(
            "MC_GID_INDEX: \"3\"",
            &format!("MC_GID_INDEX: \"3\"\n        MC_MTU: \"{v}\""),
        )
    };
    let o = preflight(n.path(), &with("1024"), "decode", &[]);
    assert_eq!(
        o.json["facts"]["rdma.path_mtu"],
        "1024",
        "{}",
        o.text("path mtu")
    );
    let o = preflight(n.path(), &seed_recipe(), "decode", &[]);
    let active = o.json["facts"]["rdma.active_mtu"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        o.json["facts"]["rdma.path_mtu"].as_str().unwrap(),
        active.as_str()
    );
    let o = preflight(n.path(), &with("9000"), "decode", &[]);
    assert_eq!(o.status("mc_mtu"), "warn");
    assert!(o.text("mc_mtu").contains("ignores it"));
}

/// A fake install prefix whose `bin/mooncake_master` sits next to a wheel of `version`.
fn fake_mooncake(version: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("mooncake_master"), "#!/bin/sh\n").unwrap();
    let meta = d.path().join(format!(
        "lib/python3.11/site-packages/mooncake_transfer_engine-{version}.dist-info"
    ));
    std::fs::create_dir_all(&meta).unwrap();
    std::fs::write(
        meta.join("METADATA"),
        format!("Metadata-Version: 2.4\nName: mooncake-transfer-engine\nVersion: {version}\n"),
    )
    .unwrap();
    d
}

/// Mooncake before 0.3.13 over TCP opens a connection per transfer unless
/// `MC_TCP_ENABLE_CONNECTION_POOL` is set (measured: 2,000 puts and gets through a 0.3.12.post1
/// store put about one socket per transfer in TIME-WAIT): the local recipe (a TCP store and two TCP workers)
/// is warned with every process named and the fix; with the pool set in the recipe, or with
/// 0.3.13, it is not. A warning does not fail the preflight.
#[test]
fn tcp_transfers_without_the_pool_are_warned_before_mooncake_0_3_13() {
    let local =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/local.yaml"))
            .unwrap();
    // The workers' Mooncake env and the store's own.
    let pooled = local
        .replace(
            "    env:\n      MOONCAKE_PROTOCOL: tcp\n",
            "    env:\n      MOONCAKE_PROTOCOL: tcp\n      MC_TCP_ENABLE_CONNECTION_POOL: \"1\"\n",
        )
        .replace(
            "      env:\n        MOONCAKE_PROTOCOL: tcp\n",
            "      env:\n        MOONCAKE_PROTOCOL: tcp\n        MC_TCP_ENABLE_CONNECTION_POOL: \"1\"\n",
        );
    assert_ne!(pooled, local);
    let n = node("no-rdma", &Proc::default());
    let run = |recipe: &str, version: &str| {
        let prefix = fake_mooncake(version);
        let path = format!("{}:/usr/bin:/bin", prefix.path().join("bin").display());
        preflight_env(n.path(), recipe, "agg", &[], &[("PATH", path.as_str())])
    };
    let old = run(&local, "0.3.12.post1");
    assert_eq!(old.code, 0, "{}", old.json);
    let c = old.check("mooncake tcp connections");
    assert_eq!(c["status"], "warn", "{c}");
    let text = c["message"].as_str().unwrap();
    assert!(
        text.starts_with("store, worker-0, worker-1: mooncake-transfer-engine 0.3.12.post1 over TCP opens a new connection for every transfer"),
        "{text}"
    );
    assert!(
        c["fix"]
            .as_str()
            .unwrap()
            .contains("MC_TCP_ENABLE_CONNECTION_POOL=1"),
        "{c}"
    );
    let pooled = run(&pooled, "0.3.12.post1");
    assert!(
        pooled.json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "mooncake tcp connections"),
        "{}",
        pooled.json
    );
    let new = run(&local, "0.3.13.post1");
    assert_eq!(new.status("mooncake tcp connections"), "ok");
}

/// An older Mooncake on the node: where its auto-GID rule picks another index than the 0.3.12+
/// rule, the preflight says which and how to pin the better one. Slot 2 of mlx5_0's RoCE table
/// is emptied: 0.3.10-0.3.11 stop scanning there and take the link-local GID at 1; 0.3.8-0.3.9
/// skip it and agree with 0.3.12+ on the IPv4 RoCE v2 GID at 3; mlx5_1 is left whole and every
/// release agrees on it.
#[test]
fn an_older_mooncake_gid_rule_is_predicted_too() {
    let n = node("two-nics", &Proc::default());
    let port = n.path().join("sys/class/infiniband/mlx5_0/ports/1");
    std::fs::write(
        port.join("gids/2"),
        "0000:0000:0000:0000:0000:0000:0000:0000\n",
    )
    .unwrap();
    std::fs::remove_file(port.join("gid_attrs/types/2")).unwrap();
    std::fs::remove_file(port.join("gid_attrs/ndevs/2")).unwrap();
    let unset = seed_recipe().replace("        MC_GID_INDEX: \"3\"\n", "");
    let run = |version: &str| {
        let prefix = fake_mooncake(version);
        let path = format!("{}:/usr/bin:/bin", prefix.path().join("bin").display());
        preflight_env(n.path(), &unset, "decode", &[], &[("PATH", path.as_str())])
    };
    let checks = |o: &Outcome| -> Vec<(String, String, String)> {
        o.json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or("").to_string(),
                    c["status"].as_str().unwrap_or("").to_string(),
                    format!(
                        "{} fix: {}",
                        c["message"].as_str().unwrap_or(""),
                        c["fix"].as_str().unwrap_or("")
                    ),
                )
            })
            .collect()
    };

    let old = run("0.3.10");
    assert_eq!(old.json["facts"]["mooncake.version"], "0.3.10");
    assert!(old
        .text("gid index mlx5_0")
        .contains("Mooncake will pick 3"));
    let legacy = checks(&old)
        .into_iter()
        .find(|(name, _, _)| name == "gid index mlx5_0 (Mooncake 0.3.10)")
        .unwrap_or_else(|| panic!("{:#?}", checks(&old)));
    assert_eq!(legacy.1, "warn");
    assert!(legacy.2.contains("picks index 1"), "{}", legacy.2);
    assert!(legacy.2.contains("set MC_GID_INDEX=3"), "{}", legacy.2);
    assert!(
        !checks(&old)
            .iter()
            .any(|(name, _, _)| name.starts_with("gid index mlx5_1 (")),
        "{:#?}",
        checks(&old)
    );

    for agreeing in ["0.3.9", "0.3.13"] {
        let o = run(agreeing);
        assert_eq!(o.json["facts"]["mooncake.version"], agreeing);
        assert!(
            !checks(&o)
                .iter()
                .any(|(name, _, _)| name.contains("(Mooncake")),
            "{agreeing}: {:#?}",
            checks(&o)
        );
    }
}

/// Explicit indices on older releases: 0.3.8-0.3.9 disable a device whose configured GID has no
/// netdev (every IB GID), and up to 0.3.7 index 0 means "choose automatically".
#[test]
fn an_older_mooncake_reads_explicit_indices_its_own_way() {
    let named = |o: &Outcome, name: &str| -> Option<(String, String)> {
        o.json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| {
                (
                    c["status"].as_str().unwrap_or("").to_string(),
                    format!(
                        "{} fix: {}",
                        c["message"].as_str().unwrap_or(""),
                        c["fix"].as_str().unwrap_or("")
                    ),
                )
            })
    };
    let run = |tree: &str, recipe: &str, version: &str| {
        let prefix = fake_mooncake(version);
        let path = format!("{}:/usr/bin:/bin", prefix.path().join("bin").display());
        let n = node(tree, &Proc::default());
        preflight_env(n.path(), recipe, "decode", &[], &[("PATH", path.as_str())])
    };

    let ib = with_device("mlx5_0").replace("MC_GID_INDEX: \"3\"", "MC_GID_INDEX: \"0\"");
    let o = run("ib-hdr", &ib, "0.3.9");
    let (status, text) =
        named(&o, "gid index mlx5_0 (Mooncake 0.3.9)").unwrap_or_else(|| panic!("{:#}", o.json));
    assert_eq!(status, "fail", "{text}");
    assert!(
        text.contains("has no netdev") && text.contains("0.3.10 or later"),
        "{text}"
    );
    assert_eq!(o.code, 1);
    let o = run("ib-hdr", &ib, "0.3.10");
    assert_eq!(named(&o, "gid index mlx5_0 (Mooncake 0.3.10)"), None);
    assert_eq!(o.status("gid index mlx5_0"), "ok");

    let zero = seed_recipe().replace("MC_GID_INDEX: \"3\"", "MC_GID_INDEX: \"0\"");
    let o = run("two-nics", &zero, "0.3.7");
    let (status, text) =
        named(&o, "gid index mlx5_0 (Mooncake 0.3.7)").unwrap_or_else(|| panic!("{:#}", o.json));
    assert_eq!(status, "warn", "{text}");
    assert!(
        text.contains("picks index 3") && text.contains("MC_GID_INDEX=3"),
        "{text}"
    );
    let o = run("two-nics", &zero, "0.3.8");
    assert_eq!(named(&o, "gid index mlx5_0 (Mooncake 0.3.8)"), None);
}

#[test]
fn listening_ports_in_the_ephemeral_range_are_warned_unless_reserved() {
    let n = node("two-nics", &Proc::default());
    let sys = n.path().join("proc/sys/net/ipv4");
    std::fs::create_dir_all(&sys).unwrap();
    // The default range: the seed's ports (etcd, NATS, 8700-8702, 8800, the store's /health on
    // 9300, the worker's) are below it.
    std::fs::write(sys.join("ip_local_port_range"), "32768\t60999\n").unwrap();
    let o = preflight(n.path(), &seed_recipe(), "prefill", &[]);
    let ranged = |o: &Outcome| -> Vec<String> {
        o.json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"].as_str().unwrap().ends_with(" range"))
            .map(|c| format!("{} {}", c["name"], c["status"]))
            .collect()
    };
    assert!(ranged(&o).is_empty(), "{:?}", ranged(&o));
    // A node whose ephemeral range starts at 1024: every listening port can be taken.
    std::fs::write(sys.join("ip_local_port_range"), "1024\t65000\n").unwrap();
    let o = preflight(n.path(), &seed_recipe(), "prefill", &[]);
    // Every planned listening port: etcd's, NATS's, the master's, the store's and the
    // worker's (its server, bootstrap and other planned ports).
    assert_eq!(ranged(&o).len(), 12, "{:?}", ranged(&o));
    for name in [
        "etcd port 2379",
        "nats port 4222",
        "sglang-prefill-0 port 7500",
    ] {
        assert_eq!(o.status(&format!("{name} range")), "warn", "{name}");
    }
    assert_eq!(o.status("store port 8800 range"), "warn");
    assert_eq!(o.status("store port 9300 range"), "warn");
    let text = o.text("master port 8700 range");
    assert!(
        text.contains("ephemeral port range 1024-65000")
            && text.contains("net.ipv4.ip_local_reserved_ports=8700"),
        "{text}"
    );
    assert_eq!(o.json["passed"], true, "a warning, not a failure");
    // Reserved ports are never handed out as source ports.
    std::fs::write(
        sys.join("ip_local_reserved_ports"),
        "2379,4222,5200,6100,7200,7500,8700-8702,8800,9300,17500\n",
    )
    .unwrap();
    let o = preflight(n.path(), &seed_recipe(), "prefill", &[]);
    assert!(ranged(&o).is_empty(), "{:?}", ranged(&o));
}

/// A plan as `mcsup plan --json` prints it for `recipe` and `role`.
fn plan_of(recipe: &str, role: &str) -> mcsup::plan::Plan {
    let (mut cmd, _dir) = on_node("plan", recipe, role);
    let out = cmd.arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `mcsup run` reads only what a verdict of its plan needs (`Scope::Verdicts`): every warning
/// and failure must still be the full preflight's, word for word, on every kind of node: RDMA
/// and TCP, store with and without HiCache, workers only, tight memlock (with and without
/// CAP_IPC_LOCK), tight DRAM, cgroup v1 and v2 limits, Slurm's allocation (small and
/// malformed), an older Mooncake on PATH or none.
#[test]
fn runs_lean_preflight_reaches_the_full_preflights_verdicts() {
    use mcsup::preflight::{self, Scope, Status};
    let seed = seed_recipe();
    let local =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/local.yaml"))
            .unwrap();
    let seed_tcp = seed.replace("MOONCAKE_PROTOCOL: rdma", "MOONCAKE_PROTOCOL: tcp");
    let mut plans = vec![
        ("seed prefill", plan_of(&seed, "prefill")),
        ("seed decode", plan_of(&seed, "decode")),
        ("seed over tcp, prefill", plan_of(&seed_tcp, "prefill")),
        ("local decode", plan_of(&local, "decode")),
    ];
    // Workers only: the seed's decode plan without its store (RDMA workers), the same over TCP
    // (only the wheel's version is read: are the transfers pooled?), and over TCP with the
    // connection pool (the node that reads nothing).
    for (label, from) in [
        ("rdma workers only", 1),
        ("tcp workers only", 2),
        ("pooled tcp workers only", 2),
    ] {
        let mut p = plans[from].1.clone();
        p.processes
            .retain(|s| s.kind == mcsup::plan::ProcessKind::Worker);
        assert!(!p.processes.is_empty());
        p.memory.hicache.clear();
        if label.starts_with("pooled") {
            for w in &mut p.processes {
                w.env.push(mcsup::plan::EnvVar {
                    name: "MC_TCP_ENABLE_CONNECTION_POOL".into(),
                    value: "1".into(),
                    source: "test".into(),
                    overrode: Vec::new(),
                });
            }
        }
        plans.push((label, p));
    }
    let procs = [
        Proc::default(),
        Proc {
            memlock_bytes: Some(8 << 20),
            ..Proc::default()
        },
        Proc {
            memlock_bytes: Some(8 << 20),
            cap_ipc_lock: true,
            ..Proc::default()
        },
        Proc {
            mem_available_gib: 100,
            ..Proc::default()
        },
        Proc {
            cgroup: Cgroup::V2 {
                max_gib: 120,
                usage_gib: 10,
            },
            ..Proc::default()
        },
        Proc {
            cgroup: Cgroup::V1 {
                limit_gib: 120,
                usage_gib: 10,
            },
            ..Proc::default()
        },
    ];
    let old_mooncake = fake_mooncake("0.3.9");
    let old_path = old_mooncake.path().join("bin").display().to_string();
    let verdicts = |r: &preflight::Report| -> Vec<String> {
        r.checks
            .iter()
            .filter(|c| c.status >= Status::Warn)
            .map(|c| {
                format!(
                    "{:?} {} {}: {} (fix: {:?})",
                    c.status, c.group, c.name, c.message, c.fix
                )
            })
            .collect()
    };
    let mut compared = 0;
    let mut warned = 0;
    let mut failed = 0;
    for tree in ["two-nics", "no-rdma"] {
        for proc_ in &procs {
            let n = node(tree, proc_);
            for slurm in [None, Some("1024"), Some("a lot")] {
                for path_var in [None, Some(old_path.clone())] {
                    for (label, plan) in &plans {
                        let opts = |scope| preflight::Options {
                            sysroot: n.path().to_path_buf(),
                            live: false,
                            slurm_env: slurm
                                .map(|v| vec![("SLURM_MEM_PER_NODE".to_string(), v.to_string())])
                                .unwrap_or_default(),
                            path_var: path_var.clone(),
                            in_slurm: false,
                            inherited_env: Vec::new(),
                            scope,
                            tool_timeout: preflight::TOOL_TIMEOUT,
                        };
                        let full = preflight::run(plan, &opts(Scope::Survey));
                        let lean = preflight::run(plan, &opts(Scope::Verdicts));
                        let context = format!("{label} on {tree}, {proc_:?}, SLURM_MEM_PER_NODE {slurm:?}, PATH {path_var:?}");
                        assert_eq!(verdicts(&lean), verdicts(&full), "{context}");
                        assert_eq!(lean.passed(false), full.passed(false), "{context}");
                        compared += 1;
                        warned += usize::from(full.worst() == Status::Warn);
                        failed += usize::from(full.worst() == Status::Fail);
                        let status = |name: &str| {
                            full.checks
                                .iter()
                                .find(|c| c.name == name)
                                .map(|c| c.status)
                        };
                        if label.contains("tcp") && path_var.is_some() {
                            // An older Mooncake's GID rule is no warning where no GID is chosen;
                            // its TCP transfers without the pool are.
                            assert_eq!(status("mooncake version"), Some(Status::Skip), "{context}");
                            assert_eq!(full.facts.mooncake_version.as_deref(), Some("0.3.9"));
                            let pooled = label.starts_with("pooled");
                            assert_eq!(
                                status("mooncake tcp connections"),
                                (!pooled).then_some(Status::Warn),
                                "{context}"
                            );
                        }
                        if label.ends_with("tcp workers only") {
                            // No memlock, no budget; the version only where transfers are not
                            // pooled.
                            assert_eq!(lean.facts.memlock, None, "{context}");
                            assert!(full.facts.memlock.is_some(), "{context}");
                            assert!(full.facts.mooncake_version.is_some(), "{context}");
                            assert_eq!(
                                lean.facts.mooncake_version.is_none(),
                                label.starts_with("pooled"),
                                "{context}"
                            );
                        }
                    }
                }
            }
        }
    }
    // The matrix has both verdicts in it, not only passes.
    assert_eq!(compared, 2 * procs.len() * 3 * 2 * plans.len());
    assert!(warned > 0 && failed > 0, "warned {warned}, failed {failed}");
}

/// A `python3 -m module` worker is checked with its own Python search variables: a module that
/// only the recipe's `PYTHONPATH` makes importable passes; without it, the check fails and says
/// which interpreter lacks which module. (The live preflight: only it checks programs.)
#[test]
fn a_python_module_is_looked_up_with_the_processs_pythonpath() {
    let modules = tempfile::tempdir().unwrap();
    std::fs::write(modules.path().join("mcsup_probe_only_here.py"), "").unwrap();
    let live = |env: &str| {
        let recipe = format!(
            "backend: {{type: sglang}}\nmcsup:\n  workers:\n    decode:\n      - name: w\n        command: [python3, -m, mcsup_probe_only_here]\n{env}"
        );
        let (mut cmd, _dir) = on_node("preflight", &recipe, "decode");
        let out = cmd.arg("--json").output().unwrap();
        Outcome {
            code: out.status.code().unwrap_or(-1),
            json: serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr))
            }),
        }
    };
    let with = live(&format!(
        "        env: {{PYTHONPATH: \"{}\"}}\n",
        modules.path().display()
    ));
    assert_eq!(with.status("w program"), "ok", "{}", with.text("w program"));
    let without = live("");
    assert_eq!(without.status("w program"), "fail");
    assert_ne!(without.code, 0);
    assert!(
        without
            .text("w program")
            .contains("cannot find module mcsup_probe_only_here"),
        "{}",
        without.text("w program")
    );
}

/// A node's `/sys/class/net` beside its RDMA tree: loopback, a management NIC, the fabric
/// NICs, and a bridge that is down.
fn node_with_nics(rdma_tree: &str) -> tempfile::TempDir {
    let n = node(rdma_tree, &Proc::default());
    for (iface, state) in [
        ("lo", "unknown"),
        ("eno1", "up"),
        ("ens1f0np0", "up"),
        ("ens1f1np1", "up"),
        ("docker0", "down"),
    ] {
        let d = n.path().join("sys/class/net").join(iface);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("operstate"), format!("{state}\n")).unwrap();
    }
    n
}

/// Issue 30, item 5: the fabric variables the transports read, against the devices the node
/// has. Each broken variant fails (or warns) naming what is wrong; good values pass.
#[test]
fn fabric_variables_are_checked_against_the_nodes_devices() {
    // The prefill worker transfers over NIXL (the decode keeps Mooncake: the master needs one).
    let nixl = seed_recipe().replacen(
        "disaggregation-transfer-backend: mooncake",
        "disaggregation-transfer-backend: nixl",
        1,
    );
    assert_ne!(nixl, seed_recipe());
    let cases: [(&str, &str, &str, bool, &str, &str); 19] = [
        // (variable, value, sysroot, NIXL recipe, status, words)
        (
            "NCCL_IB_HCA",
            "mlx5_9",
            "two-nics",
            false,
            "fail",
            "`mlx5_9` is a prefix of no RDMA device here; did you mean `mlx5_0`?",
        ),
        (
            "NCCL_IB_HCA",
            "mlx5_0",
            "port-down",
            false,
            "fail",
            "mlx5_0 is not active (port 1 DOWN)",
        ),
        (
            "NCCL_IB_HCA",
            "=mlx5",
            "two-nics",
            false,
            "fail",
            "`mlx5` names no RDMA device",
        ),
        (
            "NCCL_IB_HCA",
            "^mlx5",
            "two-nics",
            false,
            "fail",
            "selects no RDMA device here",
        ),
        (
            "NCCL_IB_HCA",
            "mlx5_0:2",
            "two-nics",
            false,
            "fail",
            "mlx5_0 has no port 2 (it has 1)",
        ),
        (
            "NCCL_IB_HCA",
            "mlx5_0:x",
            "two-nics",
            false,
            "fail",
            "the port after `:` is not a number",
        ),
        (
            "UCX_NET_DEVICES",
            "mlx5_7:1",
            "two-nics",
            false,
            "fail",
            "`mlx5_7` is no RDMA device here",
        ),
        (
            "UCX_NET_DEVICES",
            "mlx5_0:1",
            "port-down",
            false,
            "fail",
            "NVIDIA/srt-slurm #429",
        ),
        (
            "UCX_NET_DEVICES",
            "all",
            "two-nics",
            false,
            "warn",
            "also binds docker0, eno1",
        ),
        (
            "UCX_NET_DEVICES",
            "mlx5_0:1,mlx5_1:1",
            "two-nics",
            true,
            "warn",
            "without `lo`",
        ),
        (
            "UCX_NET_DEVICES",
            "eth9",
            "two-nics",
            false,
            "fail",
            "`eth9` is no network interface here",
        ),
        (
            "UCX_NET_DEVICES",
            "docker0",
            "two-nics",
            false,
            "fail",
            "`docker0` is down",
        ),
        (
            "NCCL_SOCKET_IFNAME",
            "eth",
            "two-nics",
            false,
            "fail",
            "selects no network interface here (a prefix",
        ),
        (
            "NCCL_SOCKET_IFNAME",
            "=docker0",
            "two-nics",
            false,
            "fail",
            "only interfaces that are down: docker0",
        ),
        (
            "NCCL_SOCKET_IFNAME",
            "ens",
            "two-nics",
            false,
            "warn",
            "selects 2 interfaces",
        ),
        (
            "GLOO_SOCKET_IFNAME",
            "=ens1",
            "two-nics",
            false,
            "fail",
            "selects no network interface here",
        ),
        (
            "NVSHMEM_HCA_LIST",
            "mlx5_5:1",
            "two-nics",
            false,
            "fail",
            "`mlx5_5` names no RDMA device",
        ),
        (
            "NCCL_IB_HCA",
            "=mlx5_0:1,mlx5_1:1",
            "two-nics",
            false,
            "ok",
            "selects mlx5_0, mlx5_1",
        ),
        (
            "UCX_NET_DEVICES",
            "mlx5_0:1,lo",
            "two-nics",
            true,
            "ok",
            "present and active",
        ),
    ];
    for (var, value, tree, with_nixl, status, words) in cases {
        let n = node_with_nics(tree);
        let recipe = if with_nixl { &nixl } else { &seed_recipe() };
        let o = preflight_env(n.path(), recipe, "prefill", &[], &[(var, value)]);
        let name = format!("{var}={value}");
        let c = o.check(&name);
        let text = o.text(&name);
        assert_eq!(c["status"], status, "{name} on {tree}: {text}");
        assert!(text.contains(words), "{name} on {tree}: {text}");
        assert_eq!(c["group"], "fabric", "{c}");
        // Carried to the fleet view.
        assert_eq!(
            o.json["facts"][format!("fabric.{var}")],
            value,
            "{}",
            o.json["facts"]
        );
    }
    // Set nowhere: no fabric check at all.
    let o = preflight(
        node_with_nics("two-nics").path(),
        &seed_recipe(),
        "prefill",
        &[],
    );
    let fabric = o.json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["group"] == "fabric")
        .count();
    assert_eq!(fabric, 0);
}

/// Issue 30, item 1: GPU residue through NVML (the stub), the /dev/nvidia* fallback, and the
/// group's reason when neither is there. The seed's prefill worker is planned on GPUs 0-7 with
/// `mem-fraction-static: 0.82`.
#[test]
fn gpu_residue_names_the_holder_and_checks_free_memory() {
    const GIB: u64 = 1 << 30;
    let gpus = |first: serde_json::Value| {
        let mut all = vec![first];
        all.extend((1..8).map(|_| serde_json::json!({"total": 80 * GIB, "used": GIB / 2})));
        serde_json::json!({ "gpus": all })
    };
    // A foreign process (another user's) holds 40 GiB of GPU 0.
    let mut holder = Command::new("setpriv")
        .args([
            "--reuid=60001",
            "--regid=60001",
            "--clear-groups",
            "sleep",
            "60",
        ])
        .spawn()
        .unwrap();
    let held = gpus(serde_json::json!({
        "total": 80 * GIB, "used": 41 * GIB,
        "processes": [{"pid": holder.id(), "used": 40 * GIB}]
    }));
    let n = node("two-nics", &Proc::default());
    let run = |state: &serde_json::Value| {
        let (_dir, env) = common::nvml_stub(state);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        preflight_env(n.path(), &seed_recipe(), "prefill", &[], &env)
    };
    let o = run(&held);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(o.status("GPU 0"), "fail");
    let text = o.text("GPU 0");
    assert!(
        text.contains(&format!(
            "pid {} (sleep 60), uid 60001 holding 40.0 GiB",
            holder.id()
        )) && text.contains("kill PID"),
        "{text}"
    );
    assert_eq!(o.status("GPU 1"), "ok");
    assert_eq!(o.code, 1);

    // Clean: every GPU passes.
    let o = run(&gpus(
        serde_json::json!({"total": 80 * GIB, "used": GIB / 2}),
    ));
    for i in 0..8 {
        assert_eq!(
            o.status(&format!("GPU {i}")),
            "ok",
            "{}",
            o.text(&format!("GPU {i}"))
        );
    }
    // No process, but 20 GiB used: 0.82 of 80 GiB does not fit in the 60 free.
    let o = run(&gpus(
        serde_json::json!({"total": 80 * GIB, "used": 20 * GIB}),
    ));
    assert_eq!(o.status("GPU 0"), "fail");
    assert!(
        o.text("GPU 0").contains(
            "--mem-fraction-static 0.82 claims 65.6 GiB of its 80.0 GiB, but only 60.0 GiB is free"
        ),
        "{}",
        o.text("GPU 0")
    );

    // Without NVML and without /dev/nvidia*: skipped, saying why.
    let o = preflight(n.path(), &seed_recipe(), "prefill", &[]);
    assert_eq!(o.status("residue"), "skip");
    assert!(
        o.text("residue").contains("libnvidia-ml.so.1 not loaded"),
        "{}",
        o.text("residue")
    );
    // Without NVML, with /dev/nvidia0: its holders are looked for in /proc (none here).
    std::fs::create_dir_all(n.path().join("dev")).unwrap();
    std::fs::write(n.path().join("dev/nvidia0"), "").unwrap();
    let o = preflight(n.path(), &seed_recipe(), "prefill", &[]);
    assert_eq!(o.status("GPU 0"), "ok");
    assert!(
        o.text("GPU 0").contains("no process holds /dev/nvidia0"),
        "{}",
        o.text("GPU 0")
    );
}

/// Issue 30, item 4: files in /dev/shm and mcsup's scratch directories whose owner has no
/// process left on the node are reported with owner, size and age (largest first); a live
/// user's are not.
#[test]
fn leftovers_of_gone_users_are_named_with_owner_size_and_age() {
    use std::os::unix::fs::PermissionsExt as _;
    let n = node("two-nics", &Proc::default());
    // The node's one process belongs to root.
    let p1 = n.path().join("proc/1");
    std::fs::create_dir_all(&p1).unwrap();
    std::fs::write(p1.join("status"), "Name:\tinit\nUid:\t0\t0\t0\t0\n").unwrap();
    let shm = n.path().join("dev/shm");
    let scratch = n.path().join("tmp/mcsup-41-gpu-01/etcd");
    std::fs::create_dir_all(&shm).unwrap();
    std::fs::create_dir_all(&scratch).unwrap();
    let chown = |p: &Path, uid: u32| {
        std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
    };
    let file = |p: &Path, bytes: u64, uid: u32, days: u64| {
        let f = std::fs::File::create(p).unwrap();
        f.set_len(bytes).unwrap();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(days * 86_400 + 60);
        f.set_modified(old).unwrap();
        chown(p, uid);
    };
    file(&shm.join("nccl-shm-old"), 3 << 20, 60001, 3);
    file(&shm.join("mooncake-seg"), 2 << 30, 60002, 1);
    file(&shm.join("rootfile"), 5 << 20, 0, 0);
    file(&scratch.join("db"), 1 << 20, 60001, 0);
    chown(&scratch, 60001);
    chown(scratch.parent().unwrap(), 60001);
    std::fs::set_permissions(
        scratch.parent().unwrap(),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let o = preflight_env(
        n.path(),
        &seed_recipe(),
        "prefill",
        &[],
        &[("TMPDIR", "/tmp")],
    );
    assert_eq!(o.status("shm and scratch"), "warn");
    let text = o.text("shm and scratch");
    let mooncake = text.find("/dev/shm/mooncake-seg (uid 60002, 2.0 GiB, 1 d old)");
    let nccl = text.find("/dev/shm/nccl-shm-old (uid 60001, 3.0 MiB, 3 d old)");
    let scratch_at = text.find("/tmp/mcsup-41-gpu-01 (uid 60001, 1.0 MiB");
    assert!(
        text.contains("3 leftover(s)")
            && [mooncake, nccl, scratch_at].iter().all(Option::is_some)
            && mooncake < nccl
            && nccl < scratch_at,
        "{text}"
    );
    assert!(!text.contains("rootfile"), "{text}");
}

/// The HCA each GPU of [`eight_gpu_node`] shares a PCIe switch with, by GPU index: not in name
/// order, so a table that pairs by index cannot pass.
const PAIRED: [&str; 8] = [
    "mlx5_3", "mlx5_2", "mlx5_0", "mlx5_1", "mlx5_7", "mlx5_5", "mlx5_6", "mlx5_4",
];

/// An 8-GPU / 8-NIC node as a DGX-class board lays it out: GPUs 0-3 and their NICs on NUMA 0
/// (root complex 17), GPUs 4-7 and theirs on NUMA 1 (root complex 97), each GPU behind the
/// same PCIe switch as one NIC (`PAIRED`). A ninth NIC, `mgmt0`, sits behind GPU 0's switch
/// too but its port is DOWN: it must never be chosen.
fn eight_gpu_node() -> tempfile::TempDir {
    use mcsup_rdma::fixture::{FixtureBuilder, FixtureDevice, FixturePort};
    use mcsup_rdma::{PhysState, PortState};
    let n = node("no-hca", &Proc::default());
    let root = n.path();
    let mut b = FixtureBuilder::new();
    let nic = |name: &str, k: u8, numa: i32| {
        let netdev = format!("ens{k}np0");
        FixtureDevice::new(name)
            .numa_node(numa)
            .netdev(&netdev, 4200)
            .uverbs(u32::from(k))
            .port(FixturePort::roce_ipv4(
                1,
                &netdev,
                [0x02, 0, 0, 0, 0, k],
                std::net::Ipv4Addr::new(192, 168, k, 10),
            ))
    };
    for (k, name) in PAIRED.iter().enumerate() {
        b = b.device(nic(name, k as u8, if k < 4 { 0 } else { 1 }));
    }
    b = b.device(
        nic("mgmt0", 8, 0)
            .port(FixturePort::ethernet(2).state(PortState::Down, PhysState::Disabled)),
    );
    b.write(root).unwrap();
    // mgmt0's port 1 goes down too: a NIC with no ACTIVE port at all.
    std::fs::write(
        root.join("sys/class/infiniband/mgmt0/ports/1/state"),
        "1: DOWN\n",
    )
    .unwrap();
    let bus = root.join("sys/bus/pci/devices");
    std::fs::create_dir_all(&bus).unwrap();
    for (k, name) in PAIRED.iter().chain(&["mgmt0"]).enumerate() {
        let i = k % 8;
        let complex = if i < 4 { "17" } else { "97" };
        let switch = format!(
            "sys/devices/pci0000:{complex}/0000:{complex}:0{}.0/0000:{:02x}:00.0",
            i % 4 + 1,
            0x18 + 0x10 * i
        );
        let real = root
            .join(&switch)
            .join(format!("0000:{:02x}:00.{}", 0x1a + 0x10 * i, k / 8));
        std::fs::create_dir_all(real.parent().unwrap()).unwrap();
        let link = root.join(format!("sys/class/infiniband/{name}/device"));
        std::fs::rename(&link, &real).unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        if k == 8 {
            continue;
        }
        let bdf = format!("0000:{:02x}:00.0", 0x19 + 0x10 * i);
        let gpu = root.join(&switch).join(&bdf);
        std::fs::create_dir_all(&gpu).unwrap();
        std::fs::write(gpu.join("vendor"), "0x10de\n").unwrap();
        std::fs::write(gpu.join("class"), "0x030200\n").unwrap();
        std::fs::write(gpu.join("numa_node"), format!("{}\n", i / 4)).unwrap();
        std::os::unix::fs::symlink(&gpu, bus.join(&bdf)).unwrap();
    }
    std::fs::create_dir_all(root.join("sys/module/nvidia_peermem")).unwrap();
    n
}

/// The seed with 4 decode workers of 2 GPUs each on the decode node and `per_gpu_hca` on;
/// `env` goes into the decode environment.
fn per_gpu_recipe(env: &str) -> String {
    seed_recipe()
        .replace(
            "  decode_workers: 1\n",
            "  decode_workers: 4\n  gpus_per_decode: 2\n",
        )
        .replace(
            "      tp-size: 8\n      disaggregation-mode: decode",
            "      tp-size: 2\n      disaggregation-mode: decode",
        )
        .replace(
            "  decode_environment:\n",
            &format!("  decode_environment:\n{env}"),
        )
        .replace("mcsup:\n", "mcsup:\n  network:\n    per_gpu_hca: true\n")
}

/// `mcsup plan --json` for the decode node, reading `sysroot` when given.
fn decode_plan(recipe: &str, sysroot: Option<&Path>, json: bool) -> std::process::Output {
    let (mut cmd, _dir) = on_node("plan", recipe, "decode");
    if json {
        cmd.arg("--json");
    }
    if let Some(r) = sysroot {
        cmd.arg("--sysroot").arg(r);
    }
    cmd.output().unwrap()
}

/// Issue 30, item 6: `mcsup.network.per_gpu_hca` gives each worker the HCAs nearest its GPUs,
/// equal to the pairing the node's PCIe tree dictates, shown with where each value came from;
/// the preflight's fabric and RDMA checks pass what it generates.
#[test]
fn per_gpu_hca_pins_each_worker_to_the_nics_next_to_its_gpus() {
    let n = eight_gpu_node();
    let out = decode_plan(&per_gpu_recipe(""), Some(n.path()), true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let workers: Vec<&serde_json::Value> = plan["processes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["kind"] == "worker")
        .collect();
    assert_eq!(workers.len(), 4);
    for w in &workers {
        let gpus: Vec<usize> = w["placement"]["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_u64().unwrap() as usize)
            .collect();
        let env = |name: &str| {
            w["env"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == name)
                .unwrap_or_else(|| panic!("no {name} in {w}"))
                .clone()
        };
        let nics: Vec<&str> = gpus.iter().map(|g| PAIRED[*g]).collect();
        let ports: Vec<String> = nics.iter().map(|n| format!("{n}:1")).collect();
        assert_eq!(env("MOONCAKE_DEVICE")["value"], nics.join(","), "{w}");
        assert_eq!(env("UCX_NET_DEVICES")["value"], ports.join(","));
        assert_eq!(env("NCCL_IB_HCA")["value"], format!("={}", ports.join(",")));
        let source = env("MOONCAKE_DEVICE")["source"]
            .as_str()
            .unwrap()
            .to_string();
        let g = gpus[0];
        let want = format!(
            "mcsup.network.per_gpu_hca: GPU {g} (0000:{:02x}:00.0) → {} port 1 (NUMA {}, 2 PCIe hops)",
            0x19 + 0x10 * g,
            PAIRED[g],
            g / 4
        );
        assert!(source.starts_with(&want), "{source}\nwanted {want}");
    }
    // The text plan shows each value with its source, and a note per worker.
    let text =
        String::from_utf8(decode_plan(&per_gpu_recipe(""), Some(n.path()), false).stdout).unwrap();
    assert!(
        text.contains("MOONCAKE_DEVICE=mlx5_3,mlx5_2") && text.contains("per-GPU HCAs for "),
        "{text}"
    );
    // The preflight checks what was generated: every fabric and worker-device check passes.
    let o = preflight(n.path(), &per_gpu_recipe(""), "decode", &[]);
    let checks = o.json["checks"].as_array().unwrap();
    let fabric: Vec<&serde_json::Value> =
        checks.iter().filter(|c| c["group"] == "fabric").collect();
    assert_eq!(
        fabric.len(),
        8,
        "UCX and NCCL for each of 4 workers: {fabric:#?}"
    );
    for c in fabric {
        assert_eq!(c["status"], "ok", "{c}");
    }
    assert!(
        !checks.iter().any(|c| c["group"] == "rdma"
            && c["status"] == "fail"
            && c["name"].as_str().unwrap_or("").contains(" device ")),
        "{checks:#?}"
    );
}

/// What the recipe sets (the seed's job-wide `MOONCAKE_DEVICE`, a role's `UCX_NET_DEVICES`)
/// is replaced and shown as overridden; a plan for another node without its /sys says where the
/// values will come from; a node without GPUs refuses to plan them.
#[test]
fn per_gpu_hca_replaces_the_recipes_setting_and_says_where_it_cannot_see() {
    let n = eight_gpu_node();
    let out = decode_plan(
        &per_gpu_recipe("    UCX_NET_DEVICES: mlx5_0:1\n"),
        Some(n.path()),
        true,
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let w = &plan["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "sglang-decode-1")
        .unwrap()["env"];
    let ucx = w
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "UCX_NET_DEVICES")
        .unwrap();
    assert_eq!(ucx["value"], "mlx5_0:1,mlx5_1:1", "{ucx}");
    assert_eq!(
        ucx["overrode"],
        serde_json::json!([{"source": "backend.decode_environment", "value": "mlx5_0:1"}])
    );
    let notes = plan["notes"].to_string();
    assert!(
        notes.contains("in place of the recipe's UCX_NET_DEVICES=mlx5_0:1 (backend.decode_environment), MOONCAKE_DEVICE=mlx5_0,mlx5_1 (backend.mooncake_kv_store.env)"),
        "{notes}"
    );
    // Not this machine, no --sysroot: nothing generated, and the plan says when it will be.
    let out = decode_plan(&per_gpu_recipe(""), None, true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        !plan.to_string().contains("mcsup.network.per_gpu_hca: GPU"),
        "{plan}"
    );
    assert!(
        plan["notes"]
            .to_string()
            .contains("paired with its GPUs on gpu-02 when `mcsup run` starts there"),
        "{}",
        plan["notes"]
    );
    // A node without GPUs: the plan cannot be made, and says why and what to do.
    let bare = node("two-nics", &Proc::default());
    let out = decode_plan(&per_gpu_recipe(""), Some(bare.path()), true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("mcsup.network.per_gpu_hca: cannot pair the GPUs of gpu-02 with HCAs: no NVIDIA GPU on the PCI bus")
            && err.contains("fix: "),
        "{err}"
    );
}

/// Issue 56, item 5: the host names the node's processes use must resolve on it. srtctl writes
/// the infra node's name into `ETCD_ENDPOINTS`/`NATS_SERVER`: with a node name that resolves
/// nowhere (`.invalid`, RFC 6761) the live preflight fails in group `network`, naming the name,
/// who uses it and the variables to set; with the addresses given in `environment:` (and the
/// node's in `mcsup.node_addresses`) it has nothing to say against them.
#[test]
fn a_host_name_the_processes_use_must_resolve_on_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/srt-slurm-v1/mocker-agg.yaml"),
    )
    .unwrap();
    let node = "mcsup-test-node.invalid";
    let run = |text: &str| {
        let rp = dir.path().join("job.yaml");
        std::fs::write(&rp, text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_mcsup"))
            .args([
                "preflight",
                "--json",
                "--node",
                node,
                "--nodelist",
                node,
                "--recipe",
            ])
            .arg(&rp)
            .output()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stderr)));
        json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["group"] == "network")
            .cloned()
            .collect::<Vec<_>>()
    };
    let checks = run(&recipe);
    let failed: Vec<&serde_json::Value> = checks.iter().filter(|c| c["status"] == "fail").collect();
    assert_eq!(failed.len(), 1, "{checks:#?}");
    let c = failed[0];
    assert_eq!(c["name"], format!("{node} resolves"));
    let message = c["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!("{node} ("))
            && message.contains("does not resolve on this node"),
        "{message}"
    );
    let fix = c["fix"].as_str().unwrap();
    assert!(
        fix.contains("ETCD_ENDPOINTS") && fix.contains("NATS_SERVER") && fix.contains("/etc/hosts"),
        "{fix}"
    );
    let given = format!(
        "{recipe}\nenvironment: {{ETCD_ENDPOINTS: \"http://127.0.0.1:2379\", NATS_SERVER: \"nats://127.0.0.1:4222\"}}\nmcsup:\n  node_addresses: {{{node}: 127.0.0.1}}\n"
    );
    let checks = run(&given);
    assert!(checks.iter().all(|c| c["status"] != "fail"), "{checks:#?}");
}

/// Issue 56, item 5: a node whose mcsup refuses to start leaves what a reader needs. `mcsup run`
/// of the mocker recipe on a node whose name resolves nowhere fails its preflight (exit 1,
/// nothing started) and leaves a final status (exit code 1, the reason) and a `refused` event:
/// `mcsup why` names the node and the failed checks, `mcsup status --job` the node's outcome.
#[test]
fn a_node_that_refuses_to_start_leaves_a_status_and_an_event() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("job.yaml");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/srt-slurm-v1/mocker-agg.yaml"),
        &recipe,
    )
    .unwrap();
    let logs = dir.path().join("logs");
    let node = "mcsup-test-node.invalid";
    let out = Command::new(env!("CARGO_BIN_EXE_mcsup"))
        .args(["run", "--node", node, "--nodelist", node, "--recipe"])
        .arg(&recipe)
        .arg("--log-dir")
        .arg(&logs)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nothing was started"), "{err}");
    let status: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(logs.join(format!("{node}.status.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(status["exit_code"], 1);
    let reason = status["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("refused to start: preflight failed: ")
            && reason.contains(&format!("network {node} resolves")),
        "{reason}"
    );
    let events = std::fs::read_to_string(logs.join(format!("{node}.events.jsonl"))).unwrap();
    assert!(events.contains("\"event\":\"refused\""), "{events}");
    let why = Command::new(env!("CARGO_BIN_EXE_mcsup"))
        .arg("why")
        .arg(&logs)
        .output()
        .unwrap();
    let why = String::from_utf8_lossy(&why.stdout);
    assert!(
        why.starts_with(&format!(
            "first failure: {node}/mcsup at +0.0 s: refused to start: preflight failed:"
        )),
        "{why}"
    );
    let job = Command::new(env!("CARGO_BIN_EXE_mcsup"))
        .args(["status", "--job"])
        .arg(&logs)
        .output()
        .unwrap();
    let job = String::from_utf8_lossy(&job.stdout);
    assert!(job.contains("refused to start"), "{job}");
}
