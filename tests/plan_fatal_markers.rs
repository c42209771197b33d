//! srt-slurm's `health_check.fatal_log_markers` / `extra_fatal_log_patterns` in the plan: the
//! workers srtctl's layout derives carry the patterns (`fatal_log_patterns` in the plan JSON),
//! the kill switch removes them, and a pattern mcsup cannot match is refused by key.

use crate::node_plan;

use mcsup::plan::{ProcessKind, Role};
use node_plan::plan_on;

/// srtctl's mocker recipe on one node (scripts/run-mocker.sh's).
const MOCKER: &str = "name: m\nmodel: {path: \"hf:Qwen/Qwen3-0.6B\"}\nresources: {gpus_per_node: 1, agg_nodes: 1, agg_workers: 1}\nfrontend: {type: dynamo, enable_multiple_frontends: false}\nbackend: {type: mocker, speedup_ratio: 100}\n";

fn patterns(yaml: &str) -> Vec<(ProcessKind, Vec<String>)> {
    let p = plan_on(yaml, "n1", &[Role::Aggregated]).unwrap_or_else(|e| panic!("{e}"));
    let json = serde_json::to_value(&p).unwrap();
    for (spec, j) in p
        .processes
        .iter()
        .zip(json["processes"].as_array().unwrap())
    {
        // The plan JSON says the same (and omits an empty list).
        let listed: Vec<String> = j["fatal_log_patterns"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        assert_eq!(listed, spec.fatal_log_patterns, "{}", spec.name);
    }
    p.processes
        .iter()
        .map(|s| (s.kind, s.fatal_log_patterns.clone()))
        .collect()
}

#[test]
fn the_derived_workers_carry_the_recipes_fatal_patterns() {
    let yaml = format!("{MOCKER}health_check:\n  extra_fatal_log_patterns: [\"CUDA error: out of memory\", \"^EngineCore died\"]\n");
    let got = patterns(&yaml);
    let workers: Vec<&Vec<String>> = got
        .iter()
        .filter(|(k, _)| *k == ProcessKind::Worker)
        .map(|(_, p)| p)
        .collect();
    assert!(!workers.is_empty());
    for w in workers {
        assert_eq!(w, &["CUDA error: out of memory", "^EngineCore died"]);
    }
    // Only workers: srtctl watches worker logs.
    assert!(got
        .iter()
        .all(|(k, p)| *k == ProcessKind::Worker || p.is_empty()));
}

#[test]
fn the_kill_switch_and_the_defaults_leave_no_pattern() {
    for yaml in [
        MOCKER.to_string(),
        format!("{MOCKER}health_check:\n  fatal_log_markers: false\n  extra_fatal_log_patterns: [oom]\n"),
    ] {
        assert!(patterns(&yaml).iter().all(|(_, p)| p.is_empty()), "{yaml}");
    }
}

#[test]
fn a_pattern_mcsup_cannot_match_is_refused_with_its_key() {
    let yaml = format!("{MOCKER}health_check:\n  extra_fatal_log_patterns: [ok, \"(?<=Rank)0\"]\n");
    let e = plan_on(&yaml, "n1", &[Role::Aggregated])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("health_check.extra_fatal_log_patterns[1]"),
        "{e}"
    );
    assert!(e.contains("look-around"), "{e}");
}
