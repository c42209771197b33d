//! The crate's shape, read from the source text: the top-level modules form a layering (no
//! module reaches, through any chain of `crate::` paths in code, back to itself; a new upward
//! import fails here with the chain that closes the cycle), and no function in `src/` is longer
//! than [`MAX_FUNCTION_LINES`].

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

/// The longest a function in `src/` may be: past it, a function is split into named steps.
const MAX_FUNCTION_LINES: usize = 150;

/// Functions allowed past [`MAX_FUNCTION_LINES`], each with its reason (also in CONTRIBUTING.md).
const LONG_FUNCTIONS: &[(&str, &str)] = &[];

/// `(lines, name, first line)` of every function in rustfmt-formatted `text`: from its `fn` line
/// to the closing brace at the same indentation. Declarations without a body are skipped.
fn function_lengths(text: &str) -> Vec<(usize, String, usize)> {
    let re = regex::Regex::new(
        r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\S+\s+)?fn\s+(\w+)",
    )
    .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(c) = re.captures(line) else {
            continue;
        };
        // The signature ends at its first line ending in `{` (a body) or `;` (none).
        let Some(open) = lines[i..]
            .iter()
            .position(|l| l.trim_end().ends_with('{') || l.trim_end().ends_with(';'))
        else {
            continue;
        };
        if lines[i + open].trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{}}}", &c[1]);
        if let Some(n) = lines[i..].iter().position(|l| l.trim_end() == close) {
            out.push((n + 1, c[2].to_string(), i + 1));
        }
    }
    out
}

#[test]
fn function_lengths_are_measured_to_the_closing_brace() {
    let text = "fn a() {\n    let x = 1;\n}\n\nimpl S {\n    pub fn b(&self) -> u8 {\n        if true {\n        }\n        1\n    }\n}\ntrait T {\n    fn c(&self);\n}\n";
    assert_eq!(
        function_lengths(text),
        vec![(3, "a".to_string(), 1), (5, "b".to_string(), 6)]
    );
}

#[test]
fn no_function_in_src_is_longer_than_the_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut long = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                let rel = p.strip_prefix(&src).unwrap().display().to_string();
                for (n, name, line) in function_lengths(&text) {
                    let id = format!("{rel}:{name}");
                    if n > MAX_FUNCTION_LINES && !LONG_FUNCTIONS.iter().any(|(f, _)| *f == id) {
                        long.push(format!("src/{rel}:{line} {name}: {n} lines"));
                    }
                }
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (split them into named steps, or list one in LONG_FUNCTIONS and CONTRIBUTING.md with its reason):\n{}",
        long.join("\n")
    );
}

/// Lines outside `src/engine/` that may spell an engine's or a frontend's name, with why: none
/// compares one.
const NAME_SPELLED: &[(&str, &str)] = &[(
    "recipe/types.rs",
    // The recipe's `dynamo:` section key, not the frontend.
    "\"dynamo\" => r.dynamo = map.next_value()?,",
)];

/// An engine and a frontend are each one module behind a registry (`engine::ENGINES`,
/// `engine::frontend::FRONTENDS`): no code outside `src/engine/` compares or matches on their
/// names, so adding one touches its module and a registry line.
#[test]
fn engines_and_frontends_are_named_only_in_their_modules() {
    let names: Vec<&str> = mcsup::engine::ENGINES
        .iter()
        .map(|k| k.name())
        .chain(
            mcsup::engine::frontend::FRONTENDS
                .iter()
                .flat_map(|k| std::iter::once(k.name()).chain(k.aliases().iter().copied())),
        )
        .collect();
    assert!(names.len() >= 10, "{names:?}");
    let alternatives = names
        .iter()
        .map(|n| regex::escape(n))
        .collect::<Vec<_>>()
        .join("|");
    let re = regex::Regex::new(&format!(
        r#"(==|!=)\s*"({alternatives})"|"({alternatives})"\s*(=>|\|)"#
    ))
    .unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(&src).unwrap().display().to_string();
            if p.is_dir() {
                if rel != "engine" {
                    stack.push(p);
                }
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap();
            // Tests may spell names; they sit at the end of a file.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (i, line) in code.lines().enumerate() {
                let known = NAME_SPELLED
                    .iter()
                    .any(|(f, l)| *f == rel && line.trim() == *l);
                if re.is_match(line) && !known {
                    found.push(format!("src/{rel}:{}: {}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "an engine or frontend compared by name outside src/engine/ (ask its EngineKind/FrontendKind instead):\n{}",
        found.join("\n")
    );
}
