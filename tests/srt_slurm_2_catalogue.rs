//! The srt-slurm 2.0 catalogue: real 2.0 recipes and docs examples from NVIDIA/srt-slurm, kept
//! verbatim under tests/fixtures/srt-slurm-2/ (each file's header names its upstream path and
//! commit, or the search-index id where the index gave no commit). Every one is planned on every
//! role it declares, on the infra node and on a worker node, and the result (plan or error) is
//! pinned by a snapshot. The upstream test expectations quoted in the fixtures' headers are
//! checked explicitly below.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mcsup::node::{self, MasterMode, NodeInputs};
use mcsup::plan::{self, ProcessKind, Role, ServiceHere};
use mcsup::{recipe, render};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/srt-slurm-2")
}

/// The upstream test's layout: head = infra = node0, engine workers on node1..node3.
fn dns(n: &str) -> Option<std::net::IpAddr> {
    let i: u8 = n.strip_prefix("node")?.parse().ok()?;
    format!("10.0.0.{}", 10 + i).parse().ok()
}

fn ctx(node: &str) -> node::NodeContext {
    let inputs = NodeInputs {
        node: Some(node.into()),
        nodelist: Some("node[0-3]".into()),
        job_id: Some("777".into()),
        hostname: "login".into(),
        cwd: "/job".into(),
        tmp_dir: "/tmp".into(),
        master: MasterMode::Auto,
        ..Default::default()
    };
    node::resolve(&inputs, &BTreeMap::new(), &dns).expect("node resolves")
}

fn load(name: &str) -> recipe::Recipe {
    recipe::load_file(&fixtures().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_fixture_cites_its_upstream_source() {
    let files = files();
    assert!(files.len() >= 12, "the catalogue shrank: {}", files.len());
    let re =
        regex::Regex::new(r"(?m)^# source: NVIDIA/srt-slurm \S+ @ ([0-9a-f]{40}|index id [0-9]+)$")
            .unwrap();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            re.is_match(&text),
            "{} has no `# source:` line",
            f.display()
        );
    }
}

#[test]
fn every_fixture_every_declared_role_on_infra_and_worker_nodes() {
    let mut planned = 0;
    for f in files() {
        let stem = f.file_stem().unwrap().to_string_lossy().to_string();
        let r = recipe::load_file(&f).unwrap_or_else(|e| panic!("{stem}: {e}"));
        let roles: Vec<Role> = match &r.roles {
            Some(declared) => Role::ALL
                .into_iter()
                .filter(|x| declared.for_role(*x).is_some())
                .collect(),
            None => Role::ALL.to_vec(),
        };
        for role in roles {
            for node_name in ["node0", "node2"] {
                let label = format!("{stem}__{role}__{node_name}");
                match plan::plan(&r, &[role], &ctx(node_name)) {
                    Ok(p) => {
                        planned += 1;
                        insta::assert_snapshot!(label, render::plan_human(&p, false));
                    }
                    Err(e) => insta::assert_snapshot!(format!("{label}__error"), e.to_string()),
                }
            }
        }
    }
    assert!(planned >= 20, "only {planned} plans succeeded");
}

/// `tests/test_services.py::test_mooncake_stores_launch_once_per_role_node_with_master_env`:
/// the prefill store on its node gets 100gb, the decode stores 400gb, each with the master's
/// address forced over the recipe's `MOONCAKE_MASTER: ignored:9999`; JSON braces in values and
/// the preamble's newlines survive placeholder rendering.
///
/// Layout: srtctl's `Nodes.from_slurm` makes every node of the list a worker node unless one is
/// dedicated, so 1P + 2D on node[0-3] puts prefill on node0 (also head and infra) and decode on
/// node1 and node2. (The upstream test builds its runtime with a head node that runs no worker,
/// so there prefill is on node1; its `{role}-{node_id}` = `prefill-0` holds here too.)
#[test]
fn role_sized_stores_with_forced_master_address() {
    for file in [
        "test-mooncake-stores-engine-form.yaml",
        "test-mooncake-stores-backend-form-early.yaml",
    ] {
        let r = load(file);
        let prefill = plan::plan(&r, &[Role::Prefill], &ctx("node0")).unwrap();
        let store = prefill
            .processes
            .iter()
            .find(|p| p.kind == ProcessKind::Store)
            .unwrap_or_else(|| panic!("{file}: no store on the prefill node"));
        assert_eq!(store.name, "store-prefill");
        assert_eq!(
            store.env_value("MOONCAKE_GLOBAL_SEGMENT_SIZE"),
            Some("100gb")
        );
        let master = store
            .env
            .iter()
            .find(|v| v.name == "MOONCAKE_MASTER")
            .unwrap();
        assert_eq!(master.value, "10.0.0.10:8700");
        assert_eq!(master.source, "forced");
        assert_eq!(master.overrode[0].value, "ignored:9999");
        assert_eq!(
            store.env_value("MOONCAKE_TE_META_DATA_SERVER"),
            Some("http://10.0.0.10:8701/metadata")
        );
        assert_eq!(
            store.env_value("MOONCAKE_EXTRA_CONFIG"),
            Some(r#"{"prefetch_timeout_base": 4}"#)
        );
        assert_eq!(
            store.env_value("MOONCAKE_LOCAL_HOSTNAME"),
            Some("10.0.0.10")
        );
        assert_eq!(
            store.preamble.as_deref(),
            Some("ulimit -n 1048576\necho starting-prefill-on-node0\n")
        );
        assert!(
            store
                .argv
                .ends_with(&["--label".into(), "prefill-0".into()]),
            "{:?}",
            store.argv
        );
        assert!(store.critical);
        // The master runs once, here on the infra node, implied by the Mooncake block, and the
        // store waits for it.
        let masters: Vec<_> = prefill
            .processes
            .iter()
            .filter(|p| p.kind == ProcessKind::Master)
            .collect();
        assert_eq!(masters.len(), 1, "{file}");
        assert_eq!(masters[0].name, "mooncake-master");
        assert!(store
            .depends_on
            .iter()
            .any(|d| d.target == "mooncake-master"));
        let row = prefill
            .services
            .iter()
            .find(|s| s.name == "mooncake-master")
            .unwrap();
        assert!(row.implied_by.is_some(), "{file}");

        for node_name in ["node1", "node2"] {
            let decode = plan::plan(&r, &[Role::Decode], &ctx(node_name)).unwrap();
            let stores: Vec<_> = decode
                .processes
                .iter()
                .filter(|p| p.kind == ProcessKind::Store)
                .collect();
            assert_eq!(stores.len(), 1, "{file} {node_name}");
            assert_eq!(stores[0].name, "store-decode");
            assert_eq!(
                stores[0].env_value("MOONCAKE_GLOBAL_SEGMENT_SIZE"),
                Some("400gb")
            );
            assert_eq!(
                stores[0].env_value("MOONCAKE_MASTER"),
                Some("10.0.0.10:8700")
            );
            assert!(decode
                .gates
                .iter()
                .any(|g| g.name == "mooncake-master@node0"));
        }
    }
}

/// `test_colocated_roles_with_same_port_rejected_before_launch`: two role stores on one node and
/// one port are an error naming both, the port and the node (2.0 has no merge of co-located
/// roles; one `placement.node: workers` entry is the fix).
#[test]
fn co_located_role_stores_on_one_port_are_rejected() {
    let r = load("test-mooncake-stores-engine-form.yaml");
    let e = plan::plan(&r, &[Role::Prefill, Role::Decode], &ctx("node1")).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("both listen on port 8800 on node node1"),
        "{text}"
    );
    assert!(
        text.contains("services[store-prefill]") && text.contains("services[store-decode]"),
        "{text}"
    );
    assert!(text.contains("placement.node: workers"), "{text}");
}

/// An external etcd replaces the implied one: nothing launched, clients get its address.
#[test]
fn external_etcd_is_not_launched_and_reaches_the_workers() {
    let r = load("test-etcd-external.yaml");
    let p = plan::plan(&r, &[Role::Decode], &ctx("node1")).unwrap();
    let etcd = p.services.iter().find(|s| s.r#type == "etcd").unwrap();
    let ServiceHere::External { endpoint } = &etcd.here else {
        panic!("{:?}", etcd.here)
    };
    assert!(p
        .processes
        .iter()
        .all(|x| x.service.as_ref().is_none_or(|o| o.r#type != "etcd")));
    for w in p.processes.iter().filter(|x| x.kind == ProcessKind::Worker) {
        assert_eq!(w.env_value("ETCD_ENDPOINTS"), Some(endpoint.as_str()));
    }
}

/// Kinds mcsup does not run are listed with the reason, never dropped; `--strict` refuses them.
#[test]
fn services_mcsup_does_not_run_are_listed_and_strict_refuses_them() {
    let r = load("trtllm-serve-mooncake-donor.yaml");
    let declared = r.roles.as_ref().unwrap();
    let role = Role::ALL
        .into_iter()
        .find(|x| declared.for_role(*x).is_some())
        .unwrap();
    let mut listed = false;
    for node_name in ["node0", "node1", "node2"] {
        if let Ok(p) = plan::plan(&r, &[role], &ctx(node_name)) {
            listed |= p.services.iter().any(|s| {
                s.r#type == "mooncake-donor"
                    && matches!(&s.here, ServiceHere::NotRun { why } if why.contains("donor"))
            });
        }
        let strict = plan::plan_with(
            &r,
            &[role],
            &ctx(node_name),
            plan::PlanOptions {
                strict: true,
                ..Default::default()
            },
        );
        assert!(strict.is_err(), "--strict accepted a donor on {node_name}");
    }
    assert!(listed, "the donor was not listed as not run");
}
