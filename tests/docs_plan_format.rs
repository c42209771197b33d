//! docs/plan.md describes the plan JSON: every key the planner writes, as the JSON plan snapshots
//! show them, must be named there.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

fn keys(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                out.insert(k.clone());
                keys(v, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

#[test]
fn every_key_of_the_plan_json_is_in_the_docs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/plan.md")).unwrap();
    let mut used = BTreeSet::new();
    let mut snapshots = 0;
    for e in std::fs::read_dir(root.join("tests/snapshots")).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // insta names a snapshot after its test module (`fast__plan_snapshots__...`).
        if !name.starts_with("fast__plan_snapshots__") || !name.ends_with("json.snap") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // The snapshot's header is `---` ... `---`; the JSON follows.
        let body = text.splitn(3, "---\n").nth(2).unwrap_or_default();
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{name}: {e}"));
        keys(&v, &mut used);
        snapshots += 1;
    }
    assert!(
        snapshots >= 10,
        "only {snapshots} JSON plan snapshots found"
    );
    let missing: Vec<_> = used
        .iter()
        .filter(|k| !doc.contains(&format!("\"{k}\"")))
        .collect();
    assert!(
        missing.is_empty(),
        "keys of the plan JSON not named in docs/plan.md: {missing:?}"
    );
}
