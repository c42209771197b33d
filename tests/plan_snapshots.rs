//! Snapshots of `mcsup plan` (human and JSON) for every recipe in `recipes/` and each role, on a
//! fixed two-node Slurm context and on a local one, so any change to a resolved plan is reviewed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mcsup::node::{self, MasterMode, NodeInputs};
use mcsup::plan::{self, Role};
use mcsup::{recipe, render};

fn recipes_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes")
}

fn fake_dns(n: &str) -> Option<std::net::IpAddr> {
    match n {
        "gpu-01" => "10.0.0.1".parse().ok(),
        "gpu-02" => "10.0.0.2".parse().ok(),
        _ => None,
    }
}

fn ctx(node: &str, nodelist: Option<&str>, addrs: &BTreeMap<String, String>) -> node::NodeContext {
    let inputs = NodeInputs {
        node: Some(node.into()),
        nodelist: nodelist.map(String::from),
        job_id: nodelist.map(|_| "4242".into()),
        hostname: "laptop".into(),
        cwd: "/job".into(),
        master: MasterMode::Auto,
        ..Default::default()
    };
    node::resolve(&inputs, addrs, &fake_dns).expect("node resolves")
}

#[test]
fn every_recipe_every_role() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(recipes_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 3,
        "expected the seed, vLLM and local recipes"
    );
    for path in files {
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        let r = recipe::load_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let addrs = r
            .mcsup
            .as_ref()
            .map(|m| m.node_addresses.clone())
            .unwrap_or_default();
        // Role → node: prefill on the infra node (it runs the master), decode on the second.
        let cases: [(Role, &str, Option<&str>); 4] = [
            (Role::Prefill, "gpu-01", Some("gpu-[01-02]")),
            (Role::Decode, "gpu-02", Some("gpu-[01-02]")),
            (Role::Aggregated, "gpu-01", Some("gpu-01")),
            (Role::Aggregated, "laptop", None),
        ];
        for (role, node_name, list) in cases {
            let c = ctx(node_name, list, &addrs);
            let label = format!("{stem}__{role}__{node_name}");
            match plan::plan(&r, &[role], &c) {
                Ok(p) => {
                    insta::assert_snapshot!(
                        format!("{label}__human"),
                        render::plan_human(&p, false)
                    );
                    insta::assert_snapshot!(format!("{label}__json"), render::plan_json(&p, false));
                }
                Err(e) => insta::assert_snapshot!(format!("{label}__error"), e.to_string()),
            }
        }
    }
}

#[test]
fn co_located_roles_share_one_store_or_conflict() {
    let r = recipe::load_file(&recipes_dir().join("local.yaml")).unwrap();
    let c = ctx("laptop", None, &BTreeMap::new());
    // local.yaml gives prefill 256mb and decode 512mb: co-locating them must fail, naming both.
    let e = plan::plan(&r, &[Role::Prefill, Role::Decode], &c).unwrap_err();
    assert!(e.to_string().contains("prefill, decode"), "{e}");
    assert!(
        e.to_string().contains("env.MOONCAKE_GLOBAL_SEGMENT_SIZE"),
        "{e}"
    );
    // decode + aggregated are identical (512mb): one store serving both roles.
    let p = plan::plan(&r, &[Role::Decode, Role::Aggregated], &c).unwrap();
    let stores: Vec<_> = p
        .processes
        .iter()
        .filter(|s| s.kind == plan::ProcessKind::Store)
        .collect();
    assert_eq!(stores.len(), 1);
    assert_eq!(stores[0].roles, vec![Role::Decode, Role::Aggregated]);
}
