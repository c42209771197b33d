//! Config files mcsup writes for Mooncake clients are loaded by the real loader that will read
//! them: Mooncake's own `MooncakeConfig.from_file` from the installed wheel (`.venv`, as
//! scripts/setup.sh installs it). A negative control proves the loader is strict: the file
//! mcsup used to write (no `local_hostname`) is refused.

mod common;

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
