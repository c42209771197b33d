//! Config files mcsup writes for Mooncake clients are loaded by the real loader that will read
//! them: Mooncake's own `MooncakeConfig.from_file` from the installed wheel (`.venv`, as
//! scripts/setup.sh installs it). A negative control proves the loader is strict: the file
//! mcsup used to write (no `local_hostname`) is refused.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::recipe::venv_bin;
use mcsup::node::{self, MasterMode, NodeInputs};
use mcsup::plan::{self, Role};
use mcsup::recipe;

/// Load `path` with the wheel's loader; Ok(the fields it parsed) or Err(its error).
fn mooncake_load(path: &Path) -> Result<String, String> {
    let py = r#"
import sys, json
from mooncake.mooncake_config import MooncakeConfig
c = MooncakeConfig.from_file(sys.argv[1])
print(json.dumps({"local_hostname": c.local_hostname, "master": c.master_server_address,
                  "metadata": c.metadata_server, "segment": c.global_segment_size,
                  "buffer": c.local_buffer_size, "protocol": c.protocol}))
"#;
    let out = Command::new(venv_bin().join("python"))
        .args(["-c", py])
        .arg(path)
        .output()
        .expect("run the venv python");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).to_string())
    }
}

fn plan_for(recipe_path: &Path, node_name: &str, role: Role) -> plan::Plan {
    let r = recipe::load_file(recipe_path).unwrap();
    let addrs: BTreeMap<String, String> = [("gpu-01", "10.0.0.1"), ("gpu-02", "10.0.0.2")]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    let inputs = NodeInputs {
        node: Some(node_name.into()),
        nodelist: Some("gpu-[01-02]".into()),
        job_id: Some("7".into()),
        hostname: "x".into(),
        cwd: "/job".into(),
        master: MasterMode::Auto,
        ..Default::default()
    };
    let ctx = node::resolve(&inputs, &addrs, &|_| None).unwrap();
    plan::plan(&r, &[role], &ctx).unwrap()
}

#[test]
fn the_vllm_config_loads_in_mooncakes_own_loader_on_every_node() {
    let tmp = tempfile::tempdir().unwrap();
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/vllm-disagg-mooncake.yaml");
    let mut loaded = 0;
    for (node_name, role, ip) in [
        ("gpu-01", Role::Prefill, "10.0.0.1"),
        ("gpu-02", Role::Decode, "10.0.0.2"),
    ] {
        let p = plan_for(&recipe, node_name, role);
        assert_eq!(p.files.len(), 1, "{node_name}");
        let f = &p.files[0];
        // One file per node: the log directory is often shared between nodes.
        assert!(
            f.path
                .ends_with(format!("{node_name}.mooncake_store_config.json")),
            "{}",
            f.path.display()
        );
        let on_disk = tmp.path().join(f.path.file_name().unwrap());
        std::fs::write(&on_disk, &f.contents).unwrap();
        let parsed = mooncake_load(&on_disk)
            .unwrap_or_else(|e| panic!("{node_name}: Mooncake refused it:\n{e}\n{}", f.contents));
        assert!(
            parsed.contains(&format!("\"local_hostname\": \"{ip}\"")),
            "{parsed}"
        );
        assert!(parsed.contains("\"master\": \"10.0.0.1:8700\""), "{parsed}");
        assert!(
            parsed.contains("\"metadata\": \"http://10.0.0.1:8701/metadata\""),
            "{parsed}"
        );
        // The workers point at exactly this file.
        for w in p
            .processes
            .iter()
            .filter(|x| x.kind == plan::ProcessKind::Worker)
        {
            assert_eq!(
                w.env_value("MOONCAKE_CONFIG_PATH"),
                Some(f.path.to_str().unwrap())
            );
        }
        loaded += 1;

        // Negative control: without local_hostname (what mcsup wrote before), the loader
        // refuses the file, so the check above is not vacuous.
        let mut json: serde_json::Value = serde_json::from_str(&f.contents).unwrap();
        json.as_object_mut().unwrap().remove("local_hostname");
        let old = tmp.path().join(format!("{node_name}.old.json"));
        std::fs::write(&old, json.to_string()).unwrap();
        let e = mooncake_load(&old).unwrap_err();
        assert!(e.contains("local_hostname"), "{e}");
    }
    assert_eq!(loaded, 2);
}

// ------------------------------------------------------------------------------------------
// vLLM's and SGLang's own loaders (tests/py/client_loaders.py runs the release files that
// scripts/setup.sh fetched, pinned, into <venv>/client-sources).
// ------------------------------------------------------------------------------------------

/// Run one loader of tests/py/client_loaders.py with exactly `env` (nothing inherited).
fn client_loader(what: &str, env: &[(String, String)], stdin: &str) -> Result<String, String> {
    use std::io::Write;
    let bin = venv_bin();
    let sources = bin.parent().unwrap().join("client-sources");
    common::require(
        sources.join("STAMP").exists(),
        &sources.display().to_string(),
        "run scripts/setup.sh (scripts/test.sh does)",
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/client_loaders.py");
    let mut child = Command::new(bin.join("python"))
        .arg(script)
        .arg(&sources)
        .args(what.split_whitespace())
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the venv python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

fn worker_env(w: &plan::ProcessSpec) -> Vec<(String, String)> {
    w.env
        .iter()
        .map(|e| (e.name.clone(), e.value.clone()))
        .collect()
}

fn field<'a>(json: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    json.get(key)
        .unwrap_or_else(|| panic!("{key} missing in {json}"))
}

#[test]
fn the_vllm_config_loads_in_vllms_own_loader_with_the_workers_env() {
    let tmp = tempfile::tempdir().unwrap();
    let recipe = Path::new(env!("CARGO_MANIFEST_DIR")).join("recipes/vllm-disagg-mooncake.yaml");
    let mut loaded = 0;
    for (node_name, role) in [("gpu-01", Role::Prefill), ("gpu-02", Role::Decode)] {
        let p = plan_for(&recipe, node_name, role);
        let f = &p.files[0];
        let on_disk = tmp.path().join(f.path.file_name().unwrap());
        std::fs::write(&on_disk, &f.contents).unwrap();
        for w in p
            .processes
            .iter()
            .filter(|x| x.kind == plan::ProcessKind::Worker)
        {
            // The worker's own environment, its MOONCAKE_CONFIG_PATH moved to where the file is.
            let mut env = worker_env(w);
            for (k, v) in &mut env {
                if k == "MOONCAKE_CONFIG_PATH" {
                    assert_eq!(v.as_str(), f.path.to_str().unwrap());
                    *v = on_disk.to_str().unwrap().to_string();
                }
            }
            let got = client_loader("vllm-config", &env, "").unwrap_or_else(|e| {
                panic!(
                    "{node_name}/{}: vLLM refused it: {e}\n{}",
                    w.name, f.contents
                )
            });
            let got: serde_json::Value = serde_json::from_str(&got).unwrap();
            // Standalone stores own the DRAM: the connector contributes none.
            assert_eq!(field(&got, "mode"), "standalone-store", "{got}");
            assert_eq!(field(&got, "global_segment_size"), 0, "{got}");
            assert_eq!(
                field(&got, "master_server_address"),
                "10.0.0.1:8700",
                "{got}"
            );
            assert_eq!(
                field(&got, "metadata_server"),
                "http://10.0.0.1:8701/metadata",
                "{got}"
            );
            assert_eq!(field(&got, "protocol"), "rdma", "{got}");
            assert_eq!(field(&got, "device_name"), "mlx5_0", "{got}");
            assert_eq!(field(&got, "local_buffer_size"), 1 << 30, "{got}");
            loaded += 1;

            // The address vLLM's KV store worker registers as (vLLM ignores the file's
            // local_hostname): the node's, the same as the file says, not what vLLM's own
            // get_ip() would find (192.0.2.99 stands for another interface of the node).
            let host = client_loader("vllm-requester 192.0.2.99", &env, "")
                .unwrap_or_else(|e| panic!("{node_name}/{}: {e}", w.name));
            assert_eq!(host, format!("\"{}\"", p.node.ip), "{node_name}/{}", w.name);
            // (vLLM's config has no local_hostname field at all; the file's is Mooncake's.)
            assert!(got.get("local_hostname").is_none(), "{got}");
            assert!(
                f.contents
                    .contains(&format!("\"local_hostname\": \"{}\"", p.node.ip)),
                "{}",
                f.contents
            );
            // Negative control: without the variable vLLM registers as get_ip()'s address.
            let without: Vec<(String, String)> = env
                .iter()
                .filter(|(k, _)| k != "MOONCAKE_REQUESTER_LOCAL_HOSTNAME")
                .cloned()
                .collect();
            let fallback = client_loader("vllm-requester 192.0.2.99", &without, "").unwrap();
            assert_eq!(fallback, "\"192.0.2.99\"");

            // Negative control: without `mode` vLLM assumes embedded, where a 0 segment is an
            // error (Mooncake's own docs still show that spelling).
            let mut json: serde_json::Value = serde_json::from_str(&f.contents).unwrap();
            json.as_object_mut().unwrap().remove("mode");
            std::fs::write(&on_disk, json.to_string()).unwrap();
            let e = client_loader("vllm-config", &env, "").unwrap_err();
            assert!(
                e.contains("embedded mode requires global_segment_size > 0"),
                "{e}"
            );
            std::fs::write(&on_disk, &f.contents).unwrap();
        }
    }
    assert_eq!(loaded, 2);
}

#[test]
fn sglang_workers_read_their_planned_env_with_sglangs_own_loader() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut loaded = 0;
    for recipe in [
        "recipes/sglang-disagg-mooncake.yaml",
        "recipes/sglang-disagg-mooncake-2.0.yaml",
    ] {
        for (node_name, role, ip) in [
            ("gpu-01", Role::Prefill, "10.0.0.1"),
            ("gpu-02", Role::Decode, "10.0.0.2"),
        ] {
            let p = plan_for(&root.join(recipe), node_name, role);
            let workers: Vec<_> = p
                .processes
                .iter()
                .filter(|x| x.kind == plan::ProcessKind::Worker)
                .collect();
            assert!(!workers.is_empty(), "{recipe} {node_name}");
            for w in workers {
                let at = format!("{recipe} {node_name}/{}", w.name);
                let env = worker_env(w);
                let got = client_loader("sglang-env", &env, "")
                    .unwrap_or_else(|e| panic!("{at}: SGLang refused its env: {e}"));
                let got: serde_json::Value = serde_json::from_str(&got).unwrap();
                assert_eq!(
                    field(&got, "master_server_address"),
                    "10.0.0.1:8700",
                    "{at}: {got}"
                );
                assert_eq!(field(&got, "local_hostname"), ip, "{at}: {got}");
                assert_eq!(
                    Some(field(&got, "metadata_server").as_str().unwrap()),
                    w.env_value("MOONCAKE_TE_META_DATA_SERVER"),
                    "{at}: {got}"
                );
                // The seed's rule: the worker contributes no DRAM of its own.
                assert_eq!(field(&got, "global_segment_size"), 0, "{at}: {got}");
                loaded += 1;

                // Negative controls: the loader needs the master mcsup forces, and without
                // the role's "0" SGLang contributes 4gb (what mcsup's lint says it would).
                let no_master: Vec<_> = env
                    .iter()
                    .filter(|(k, _)| k != "MOONCAKE_MASTER")
                    .cloned()
                    .collect();
                let e = client_loader("sglang-env", &no_master, "").unwrap_err();
                assert!(e.contains("MOONCAKE_MASTER"), "{e}");
                let no_size: Vec<_> = env
                    .iter()
                    .filter(|(k, _)| k != "MOONCAKE_GLOBAL_SEGMENT_SIZE")
                    .cloned()
                    .collect();
                let got: serde_json::Value =
                    serde_json::from_str(&client_loader("sglang-env", &no_size, "").unwrap())
                        .unwrap();
                assert_eq!(
                    field(&got, "global_segment_size"),
                    4u64 << 30,
                    "{at}: {got}"
                );
            }
        }
    }
    assert_eq!(loaded, 4);
}

#[derive(serde::Deserialize)]
struct SizeRow {
    input: String,
}

/// mcsup's "SGLang rejects this size" lint (`size::sglang_accepts`) against SGLang's own
/// `_parse_global_segment_size`, over the whole Mooncake size table.
#[test]
fn the_sglang_size_check_agrees_with_sglangs_parser() {
    let inputs: Vec<String> = include_str!("fixtures/mooncake_sizes.jsonl")
        .lines()
        .map(|l| serde_json::from_str::<SizeRow>(l).unwrap().input)
        .filter(|s| s.is_ascii())
        .collect();
    let stdin: String = inputs
        .iter()
        .map(|s| serde_json::to_string(s).unwrap() + "\n")
        .collect();
    let answers: Vec<Option<i128>> =
        serde_json::from_str(&client_loader("sglang-sizes", &[], &stdin).unwrap()).unwrap();
    assert_eq!(answers.len(), inputs.len());
    let mut accepted = 0;
    let mismatches: Vec<String> = inputs
        .iter()
        .zip(&answers)
        .filter_map(|(input, sglang)| {
            accepted += usize::from(sglang.is_some());
            let ours = mcsup::mooncake::size::sglang_accepts(input);
            (ours != sglang.is_some())
                .then(|| format!("{input:?}: SGLang {sglang:?}, mcsup accepts={ours}"))
        })
        .collect();
    assert!(
        accepted > 20 && accepted < inputs.len(),
        "{accepted} of {}",
        inputs.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}
