//! `mcsup migrate`: the 2.0 form of every v1 recipe in `recipes/` plans to the same processes as
//! the recipe itself, on every declared role, on the infra node and on a second node.
//!
//! "The same" means the same kind, argv, environment values, preamble, readiness, liveness, stop
//! and restart policy, criticality and files, and the same number of dependencies. Names and
//! provenance differ by design (`master` → `mooncake-master`, `store` → `store-decode`,
//! `backend.decode_environment` → `roles.decode.env`). The one planned difference is 2.0's
//! implied etcd for the default dynamo frontend (`ETCD_ENDPOINTS` and a gate on it), which
//! `mcsup migrate` states in a note; it is taken out before comparing, and checked to appear
//! exactly when the note says so.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use mcsup::node::{self, MasterMode, NodeInputs};
use mcsup::plan::{self, Plan, ProcessSpec, Role};
use mcsup::recipe;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn dns(n: &str) -> Option<std::net::IpAddr> {
    match n {
        "gpu-01" => "10.0.0.1".parse().ok(),
        "gpu-02" => "10.0.0.2".parse().ok(),
        _ => None,
    }
}

fn ctx(node: &str) -> node::NodeContext {
    let inputs = NodeInputs {
        node: Some(node.into()),
        nodelist: Some("gpu-[01-02]".into()),
        job_id: Some("99".into()),
        hostname: "login".into(),
        cwd: "/job".into(),
        master: MasterMode::Auto,
        ..Default::default()
    };
    node::resolve(&inputs, &BTreeMap::new(), &dns).unwrap()
}

/// What must survive the migration, per process.
#[derive(Debug, PartialEq)]
struct Shape {
    kind: plan::ProcessKind,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    preamble: Option<String>,
    readiness: Option<plan::ReadinessSpec>,
    liveness: Option<plan::LivenessSpec>,
    stop: plan::StopSpec,
    restart: String,
    critical: bool,
    deps: usize,
}

const DISCOVERY: [&str; 2] = ["ETCD_ENDPOINTS", "NATS_SERVER"];

fn is_discovery(p: &ProcessSpec) -> bool {
    p.service
        .as_ref()
        .is_some_and(|o| o.r#type == "etcd" || o.r#type == "nats")
}

fn shapes(p: &Plan) -> Vec<Shape> {
    let discovery_gates: Vec<&str> = p
        .gates
        .iter()
        .filter(|g| g.name.starts_with("etcd@") || g.name.starts_with("nats@"))
        .map(|g| g.name.as_str())
        .collect();
    let local_discovery: Vec<&str> = p
        .processes
        .iter()
        .filter(|x| is_discovery(x))
        .map(|x| x.name.as_str())
        .collect();
    p.processes
        .iter()
        .filter(|x| !is_discovery(x))
        .map(|x| Shape {
            kind: x.kind,
            argv: x.argv.clone(),
            env: x
                .env
                .iter()
                .filter(|v| !DISCOVERY.contains(&v.name.as_str()))
                .map(|v| (v.name.clone(), v.value.clone()))
                .collect(),
            preamble: x.preamble.clone(),
            readiness: x.readiness.clone(),
            liveness: x.liveness.clone(),
            stop: x.stop.clone(),
            restart: format!("{:?}", x.restart),
            critical: x.critical,
            deps: x
                .depends_on
                .iter()
                .filter(|d| {
                    !discovery_gates.contains(&d.target.as_str())
                        && !local_discovery.contains(&d.target.as_str())
                })
                .count(),
        })
        .collect()
}

fn v1_recipes() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("recipes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| {
            let r = recipe::load_file(p).unwrap();
            r.schema.is_none() && r.services.is_none() && r.roles.is_none() && r.engine.is_none()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn every_v1_recipe_migrates_to_the_same_processes() {
    let recipes = v1_recipes();
    assert!(recipes.len() >= 3, "{recipes:?}");
    let tmp = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for path in recipes {
        let text = std::fs::read_to_string(&path).unwrap();
        let m = mcsup::migrate::migrate(&path, &text).unwrap();
        let out = tmp.path().join(path.file_name().unwrap());
        std::fs::write(&out, &m.yaml).unwrap();
        let v1 = recipe::load_file(&path).unwrap();
        let v2 = recipe::load_file(&out)
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), m.yaml));
        assert_eq!(v2.schema, Some(2));
        let declared = v2.roles.clone().expect("the 2.0 form declares roles");
        for role in Role::ALL
            .into_iter()
            .filter(|r| declared.for_role(*r).is_some())
        {
            for node_name in ["gpu-01", "gpu-02"] {
                let label = format!("{} {role} {node_name}", path.display());
                let a = plan::plan(&v1, &[role], &ctx(node_name));
                let b = plan::plan(&v2, &[role], &ctx(node_name));
                let (a, b) = match (a, b) {
                    (Ok(a), Ok(b)) => (a, b),
                    (Err(a), Err(b)) => {
                        // Both refuse: for the same reason (the message's key path differs).
                        assert_eq!(a.message, b.message, "{label}");
                        continue;
                    }
                    (a, b) => panic!("{label}: v1 {:?} vs 2.0 {:?}", a.err(), b.err()),
                };
                assert_eq!(shapes(&a), shapes(&b), "{label}\n{}", m.yaml);
                assert_eq!(a.files, b.files, "{label}");
                // The only extra: 2.0's implied etcd (local process or gate) and its env.
                let extra: Vec<&str> = b
                    .services
                    .iter()
                    .filter(|s| !a.services.iter().any(|x| x.r#type == s.r#type))
                    .map(|s| s.r#type.as_str())
                    .collect();
                // Exactly when migrate says so (a recipe with a non-dynamo frontend gets none).
                let noted = m.notes.iter().any(|n| n.contains("implies an etcd"));
                let expected: Vec<&str> = if noted { vec!["etcd"] } else { vec![] };
                assert_eq!(extra, expected, "{label}");
                compared += 1;
            }
        }
    }
    assert!(compared >= 10, "only {compared} plans compared");
}

#[test]
fn migrate_cli_prints_yaml_and_refuses_a_2_0_recipe() {
    let bin = env!("CARGO_BIN_EXE_mcsup");
    let out = Command::new(bin)
        .args(["migrate", "recipes/sglang-disagg-mooncake.yaml"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("# srt-slurm 2.0 form of"), "{text}");
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(doc["schema"], serde_yaml::Value::from(2));
    assert_eq!(doc["services"][0]["type"].as_str(), Some("mooncake-master"));
    assert!(doc.get("backend").is_none());
    // The seed's placements became role-sized store services.
    let sizes: Vec<(String, String)> = doc["services"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter(|s| s["type"].as_str() == Some("mooncake-store"))
        .map(|s| {
            (
                s["placement"]["node"].as_str().unwrap().to_string(),
                s["env"]["MOONCAKE_GLOBAL_SEGMENT_SIZE"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect();
    assert!(
        sizes.contains(&("prefill".into(), "100gb".into())),
        "{sizes:?}"
    );
    assert!(
        sizes.contains(&("decode".into(), "400gb".into())),
        "{sizes:?}"
    );

    let again = Command::new(bin)
        .args([
            "migrate",
            "tests/fixtures/srt-slurm-2/test-mooncake-stores-engine-form.yaml",
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("already in the 2.0 layout"), "{err}");
}

/// Issue 29, class 7: srtctl loads recipes with PyYAML (YAML 1.1), where a plain `12:00:00` is
/// 43200, `yes`/`on`/`Off` are booleans, `1_000` and `0x10` numbers and `2024-01-01` a date.
/// `migrate` used to drop the quotes that kept such values strings. Read with PyYAML itself,
/// every value the migration moved means what it meant in the recipe, a plain `yes` included
/// (a boolean for srtctl before and after).
#[test]
fn migrated_values_mean_to_pyyaml_what_they_meant() {
    let dir = tempfile::tempdir().unwrap();
    let original = std::fs::read_to_string(repo().join("recipes/sglang-disagg-mooncake.yaml"))
        .unwrap()
        .replace(r#"time_limit: "04:00:00""#, r#"time_limit: "12:00:00""#)
        .replace(
            "    SGLANG_HICACHE_MOONCAKE_REUSE_TE: \"1\"\n",
            "    SGLANG_HICACHE_MOONCAKE_REUSE_TE: \"1\"\n    FLAG_A: \"yes\"\n    FLAG_B: 'on'\n    FLAG_C: \"Off\"\n    SIZE: \"1_000\"\n    DAY: \"2024-01-01\"\n    EMPTY: \"\"\n    TILDE: \"~\"\n    PLAIN_YES: yes\n    PLAIN_TIME: 1:30\n    \"no\": a quoted key\n",
        )
        .replace(
            "      hicache-size: 60\n",
            "      hicache-size: 60\n      some-flag: \"0x10\"\n      other-flag: \"017\"\n      ratio: \"1.5e+3\"\n",
        );
    assert!(original.contains("FLAG_A") && original.contains("some-flag"));
    let input = dir.path().join("job.yaml");
    std::fs::write(&input, &original).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mcsup"))
        .arg("migrate")
        .arg(&input)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let migrated = dir.path().join("migrated.yaml");
    std::fs::write(&migrated, &out.stdout).unwrap();
    let python = common::recipe::venv_bin().join("python");
    let check = r#"
import sys, yaml
a = yaml.safe_load(open(sys.argv[1]))
b = yaml.safe_load(open(sys.argv[2]))
bad = []
def same(what, x, y):
    if x != y or type(x) is not type(y):
        bad.append(f"{what}: {x!r} became {y!r}")
same("slurm", a["slurm"], b["slurm"])
env = b["roles"]["prefill"]["env"]
for k, v in a["backend"]["prefill_environment"].items():
    same(f"env {k!r}", v, env.get(k, "<missing>"))
same("args", a["backend"]["sglang_config"]["prefill"], b["roles"]["prefill"]["args"])
assert a["slurm"]["time_limit"] == "12:00:00" and a["backend"]["prefill_environment"]["PLAIN_YES"] is True
assert a["backend"]["prefill_environment"]["PLAIN_TIME"] == 90
print("\n".join(bad) if bad else "same")
"#;
    let ran = Command::new(&python)
        .args(["-c", check])
        .arg(&input)
        .arg(&migrated)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success() && said.trim() == "same",
        "{said}{}\n{}",
        String::from_utf8_lossy(&ran.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}
