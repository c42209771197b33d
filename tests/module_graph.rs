//! The crate's top-level modules form a layering: no module reaches, through any chain of
//! `crate::` paths in code, back to itself. Read from the source text (doc comments and
//! comments left out), so a new upward import fails here with the chain that closes the cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Cycles that exist today and are to be removed, each with its reason. The test fails when one
/// disappears, so the list shrinks with the code.
const KNOWN: &[(&str, &str, &str)] = &[];

/// Top-level module → the top-level modules its code names through `crate::`.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let re = regex::Regex::new(r"crate::([a-z_]+)").unwrap();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(&src).unwrap();
            let first = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let top = first.trim_end_matches(".rs").to_string();
            // The crate root and the binaries sit above every module.
            if matches!(top.as_str(), "lib" | "main" | "bin") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            let deps = g.entry(top.clone()).or_default();
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or("");
                for c in re.captures_iter(code) {
                    if c[1] != top {
                        deps.insert(c[1].to_string());
                    }
                }
            }
        }
    }
    g
}

/// Every module pair (a, b) with a path a → … → b and b → … → a.
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<(String, String)> {
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for d in g.get(&m).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let mut out = BTreeSet::new();
    for a in g.keys() {
        for b in reach(a) {
            if a < &b && reach(&b).contains(a) {
                out.insert((a.clone(), b));
            }
        }
    }
    out
}

#[test]
fn no_module_imports_one_above_it() {
    let g = graph();
    assert!(g.len() >= 10, "{g:?}");
    let found = cycles(&g);
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(a, b, _)| (a.to_string(), b.to_string()))
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    assert!(
        new.is_empty(),
        "import cycles between top-level modules: {new:?}\nthe graph: {g:#?}"
    );
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "no longer a cycle, remove it from KNOWN: {gone:?}"
    );
}

/// The engines sit below the planner: they read recipes and raise plan errors, nothing more.
#[test]
fn the_engines_know_no_planner() {
    let g = graph();
    let deps = &g["engine"];
    assert!(
        deps.iter()
            .all(|d| matches!(d.as_str(), "domain" | "recipe")),
        "{deps:?}"
    );
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    g.entry("d".into()).or_default().insert("a".into());
    let c = cycles(&g);
    assert!(c.contains(&("a".into(), "c".into())), "{c:?}");
    assert!(!c.iter().any(|(x, y)| x == "d" || y == "d"), "{c:?}");
}
