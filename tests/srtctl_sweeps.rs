//! Issue 56, item 1: one file, several jobs, as srtctl makes them. tests/fixtures/sweeps holds
//! srtctl's own expansion (scripts/capture/srtctl_sweeps.py, NVIDIA/srt-slurm @ c88ef731) of every
//! upstream sweep and override file and of synthetic edge cases. For each file mcsup's expansion
//! (src/recipe/variants.rs) gives the same jobs in the same order: their names, their parameter
//! values or override suffixes and selectors, and each job's recipe equal to the one srtctl
//! loads; each job's batch script asks for srtctl's node count; where srtctl refuses the file (or
//! a later variant of it), mcsup refuses it too, before any job; and every selector srtctl was
//! given picks the same jobs or fails with srtctl's message.

use std::path::{Path, PathBuf};

use mcsup::recipe::variants::{expand, to_text, Variant};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sweeps")
}

fn captures() -> Vec<(String, serde_yaml::Value, serde_json::Value)> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".srtctl.json"))
        .collect();
    files.sort();
    for json in files {
        let stem = json
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_end_matches(".srtctl.json")
            .to_string();
        let yaml = std::fs::read_to_string(dir().join(format!("{stem}.yaml"))).unwrap();
        let doc: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
        let cap: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        out.push((stem, doc, cap));
    }
    out
}

/// A variant as the capture records it.
fn same_as_captured(name: &str, got: &Variant, want: &serde_json::Value) {
    assert_eq!(got.job_name, want["job_name"], "{name}: job name");
    if let Some(params) = want.get("params") {
        let got_params: Vec<serde_json::Value> = got
            .params
            .iter()
            .map(|(k, v)| serde_json::json!([k, serde_json::to_value(v).unwrap()]))
            .collect();
        assert_eq!(
            &serde_json::Value::Array(got_params),
            params,
            "{name}: params"
        );
    }
    if let Some(suffix) = want.get("suffix") {
        assert_eq!(got.suffix.as_deref(), suffix.as_str(), "{name}: suffix");
        assert_eq!(
            got.selector.as_deref(),
            want["selector"].as_str(),
            "{name}: selector"
        );
    }
    let recipe = serde_json::to_value(&got.recipe).unwrap();
    assert_eq!(
        recipe, want["expanded"],
        "{name} {}: the expanded recipe",
        got.job_name
    );
}

/// The node count mcsup's batch script asks for, for one job's recipe (`Err`: mcsup refuses it).
fn sbatch_nodes(name: &str, v: &Variant) -> Result<u64, String> {
    let path = PathBuf::from(format!("{name}.yaml"));
    let recipe = mcsup::recipe::parse_str(&path, &to_text(&v.recipe)).map_err(|e| e.to_string())?;
    let a = mcsup::launch::sbatch::allocation(
        &recipe,
        &Default::default(),
        &Default::default(),
        Path::new("/OUT"),
    )
    .map_err(|e| e.to_string())?;
    Ok(a.nodes as u64)
}

#[test]
fn every_file_expands_into_srtctls_jobs() {
    let (mut files, mut jobs, mut refused) = (0, 0, 0);
    for (name, doc, cap) in captures() {
        files += 1;
        let want = cap["variants"].as_array().unwrap();
        let error = cap["errors"].get("apply");
        let got = match expand(&doc, None) {
            Ok(v) => v,
            Err(e) => {
                assert!(
                    error.is_some(),
                    "{name}: mcsup refuses what srtctl takes: {e:?}"
                );
                assert!(
                    want.is_empty(),
                    "{name}: srtctl submitted {} first",
                    want.len()
                );
                refused += 1;
                continue;
            }
        };
        // srtctl stops at the first variant its schema refuses, after submitting the ones
        // before it; mcsup plans every variant before it writes or submits any.
        let checked = match error {
            Some(e) => {
                let bad = got
                    .iter()
                    .position(|v| sbatch_nodes(&name, v).is_err())
                    .unwrap_or_else(|| {
                        panic!("{name}: srtctl refuses it ({e}); mcsup takes every variant")
                    });
                assert_eq!(bad, want.len(), "{name}: the first variant refused");
                refused += 1;
                bad
            }
            None => {
                assert_eq!(got.len(), want.len(), "{name}: the number of jobs");
                got.len()
            }
        };
        for (g, w) in got[..checked].iter().zip(want) {
            same_as_captured(&name, g, w);
            if error.is_none() {
                match sbatch_nodes(&name, g) {
                    Ok(n) => assert_eq!(
                        serde_json::json!(n),
                        w["sbatch_nodes"],
                        "{name} {}: nodes",
                        g.job_name
                    ),
                    // The synthetic edge cases hold what mcsup refuses where srtctl passes it
                    // on (a `{ mem }` flow mapping as an engine flag); every upstream job plans.
                    Err(e) => {
                        assert!(
                            name.starts_with("synthetic__"),
                            "{name} {}: {e}",
                            g.job_name
                        );
                        eprintln!("{name} {}: mcsup refuses it: {e}", g.job_name);
                    }
                }
            }
            jobs += 1;
        }
    }
    eprintln!(
        "{files} files: {jobs} jobs as srtctl makes them, {refused} refused as srtctl refuses them"
    );
    assert!(files >= 28 && jobs >= 140, "{files} files, {jobs} jobs");
}

#[test]
fn selectors_pick_srtctls_jobs_or_fail_with_its_message() {
    let (mut picked, mut failed) = (0, 0);
    for (name, doc, cap) in captures() {
        let Some(selectors) = cap.get("selectors").and_then(|s| s.as_object()) else {
            continue;
        };
        for (sel, run) in selectors {
            let got = expand(&doc, Some(sel));
            let error = run
                .get("error")
                .or_else(|| run.get("uncaught_exception"))
                .and_then(|e| e.as_str());
            match (got, error) {
                (Err(e), Some(want)) => {
                    let want = want.strip_prefix("ValueError: ").unwrap_or(want);
                    assert_eq!(e.message, want, "{name}:{sel}");
                    failed += 1;
                }
                (Ok(v), None) => {
                    let jobs = run["jobs"].as_array().unwrap();
                    assert_eq!(v.len(), jobs.len(), "{name}:{sel}");
                    for (g, w) in v.iter().zip(jobs) {
                        assert_eq!(g.job_name, w["job_name"], "{name}:{sel}");
                        assert_eq!(g.suffix.as_deref(), w["suffix"].as_str(), "{name}:{sel}");
                        if let Some(expanded) = w.get("expanded") {
                            assert_eq!(
                                &serde_json::to_value(&g.recipe).unwrap(),
                                expanded,
                                "{name}:{sel}"
                            );
                        }
                    }
                    picked += 1;
                }
                (got, want) => panic!("{name}:{sel}: mcsup {got:?}, srtctl {want:?}"),
            }
        }
        // Each variant's own selector picks it alone.
        for v in expand(&doc, None).unwrap_or_default() {
            if let Some(sel) = &v.selector {
                let alone = expand(&doc, Some(sel)).unwrap();
                assert_eq!(alone, vec![v.clone()], "{name}:{sel}");
            }
        }
    }
    eprintln!("{picked} selections as srtctl's, {failed} refusals with its message");
    assert!(
        picked >= 3 && failed >= 5,
        "{picked} picked, {failed} failed"
    );
}
