//! One file, several jobs: srtctl's sweep and override forms, expanded as srtctl expands them
//! (NVIDIA/srt-slurm @ c88ef731: `core/sweep.py` `generate_sweep_configs`, `core/config.py`
//! `generate_override_configs` and `resolve_override_yaml`, `cli/submit.py`'s selectors), so that
//! `mcsup render`/`submit` make the jobs `srtctl apply` would, and nothing else reads such a file
//! as one job. tests/fixtures/sweeps holds srtctl's own expansion of every upstream file (and of
//! synthetic edge cases) to compare with. Pure.
//!
//! - **Form**: a mapping with a top-level `base` is an override file (a top-level `sweep` beside
//!   it is ignored, as srtctl ignores it); else one with `sweep` is a sweep; else one job.
//! - **Sweep**: the product of the `sweep` values in the mapping's order (the last varies
//!   fastest; each value iterated as Python iterates it: a list's items, a string's characters);
//!   each job is the file without `sweep`, every string value with `{key}` replaced by Python's
//!   `str()` of the value (a list value replacing a string that is exactly `{key}` whole, joined
//!   with `,` inside a longer one), named `<name>_<key><value>_...`.
//! - **Override**: every `override_<s>` (sorted), then every `zip_override_<g>` (sorted), each
//!   deep-merged into `base` (mappings merge, anything else replaces; `null` deletes a key in an
//!   `override_` section, not in a zip one, as the text srtctl submits has it); a zip group gives
//!   one job per position of its lists (length-1 lists broadcast); `{x}` is not expanded.

use serde_yaml::{Mapping, Value};

use crate::domain::python::python_str;

/// How a file turns into jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Single,
    Sweep,
    Override,
}

impl Form {
    pub fn of(doc: &Value) -> Self {
        match doc.as_mapping() {
            Some(m) if m.contains_key("base") => Form::Override,
            Some(m) if m.contains_key("sweep") => Form::Sweep,
            _ => Form::Single,
        }
    }
}

/// One job of a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    /// Its `name`: the Slurm job name.
    pub job_name: String,
    /// A sweep's parameter values, in the sweep's order.
    pub params: Vec<(String, Value)>,
    /// An override variant's suffix (`tp64`, `tp_sweep_0`) and the selector that picks it
    /// alone (`override_tp64`, `zip_override_tp_sweep[0]`).
    pub suffix: Option<String>,
    pub selector: Option<String>,
    /// The job's recipe.
    pub recipe: Value,
}

impl Variant {
    /// The values that make it this job, in words (`chunked_prefill_size=4096`,
    /// `override_tp64`).
    pub fn label(&self) -> String {
        match &self.selector {
            Some(s) => s.clone(),
            None => self
                .params
                .iter()
                .map(|(k, v)| format!("{k}={}", python_str(v)))
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// Why a file gives no job: what srtctl says, at which key, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariantError {
    pub key_path: String,
    pub message: String,
    pub fix: String,
}

fn fail(key_path: &str, message: impl Into<String>, fix: impl Into<String>) -> VariantError {
    VariantError {
        key_path: key_path.into(),
        message: message.into(),
        fix: fix.into(),
    }
}

/// The jobs of `doc` (`selector`: an override file's `FILE:SELECTOR`, `None` for every job).
pub fn expand(doc: &Value, selector: Option<&str>) -> Result<Vec<Variant>, VariantError> {
    match (Form::of(doc), selector) {
        (Form::Override, _) => overrides(doc, selector),
        (_, Some(s)) => Err(fail(
            "",
            format!("`:{s}` selects an override variant, and this file has no `base:` (it is not an override file)"),
            "drop the selector",
        )),
        (Form::Sweep, None) => sweep(doc),
        (Form::Single, None) => Ok(vec![Variant {
            job_name: doc.get("name").map(python_str).unwrap_or_default(),
            params: Vec::new(),
            suffix: None,
            selector: None,
            recipe: doc.clone(),
        }]),
    }
}

/// A job's recipe as YAML text (what render writes and the batch script carries).
pub fn to_text(recipe: &Value) -> String {
    serde_yaml::to_string(recipe).unwrap_or_default()
}

/// `FILE:SELECTOR` as srtctl splits it (at the last `:`), when `FILE` alone is not a file.
pub fn split_selector(arg: &std::path::Path) -> (std::path::PathBuf, Option<String>) {
    let text = arg.to_string_lossy();
    if arg.exists() {
        return (arg.to_path_buf(), None);
    }
    match text.rsplit_once(':') {
        Some((file, sel)) if !file.is_empty() && !sel.is_empty() && !sel.contains('/') => {
            (file.into(), Some(sel.to_string()))
        }
        _ => (arg.to_path_buf(), None),
    }
}

// ---------------------------------------------------------------------------------------------
// Sweeps

fn sweep(doc: &Value) -> Result<Vec<Variant>, VariantError> {
    let Some(params) = doc.get("sweep").and_then(Value::as_mapping) else {
        return Err(fail(
            "sweep",
            "is not a mapping of parameters to their values",
            "write `sweep: {param: [value, ...]}` and `{param}` where each value goes",
        ));
    };
    let Some(name) = doc.get("name") else {
        return Err(fail(
            "name",
            "is missing: a sweep's jobs are named `<name>_<param><value>...` (srtctl fails with 'name')",
            "add `name:`",
        ));
    };
    let mut axes: Vec<(String, Vec<Value>)> = Vec::new();
    for (k, v) in params {
        let key = python_str(k);
        axes.push((
            key.clone(),
            iterate(v).map_err(|what| {
                fail(
                    &format!("sweep.{key}"),
                    format!("is {what}: srtctl iterates a sweep parameter's values"),
                    format!("write a list: `{key}: [a, b]`"),
                )
            })?,
        ));
    }
    let mut body = doc.as_mapping().cloned().unwrap_or_default();
    body.remove("sweep");
    let body = Value::Mapping(body);
    let mut out = Vec::new();
    for values in product(&axes) {
        let params: Vec<(String, Value)> =
            axes.iter().map(|(k, _)| k.clone()).zip(values).collect();
        let mut recipe = expand_template(&body, &params);
        let job_name = format!(
            "{}_{}",
            python_str(name),
            params
                .iter()
                .map(|(k, v)| format!("{k}{}", python_str(v)))
                .collect::<Vec<_>>()
                .join("_")
        );
        if let Value::Mapping(m) = &mut recipe {
            m.insert("name".into(), Value::String(job_name.clone()));
        }
        out.push(Variant {
            job_name,
            params,
            suffix: None,
            selector: None,
            recipe,
        });
    }
    Ok(out)
}

/// A sweep parameter's values as Python iterates them; what it is otherwise.
fn iterate(v: &Value) -> Result<Vec<Value>, &'static str> {
    match v {
        Value::Sequence(s) => Ok(s.clone()),
        Value::String(s) => Ok(s.chars().map(|c| Value::String(c.into())).collect()),
        Value::Mapping(m) => Ok(m.keys().cloned().collect()),
        Value::Null => Err("empty (null)"),
        Value::Bool(_) => Err("a boolean"),
        Value::Number(_) => Err("a number"),
        Value::Tagged(_) => Err("a tagged value"),
    }
}

/// itertools.product: the last axis varies fastest.
fn product(axes: &[(String, Vec<Value>)]) -> Vec<Vec<Value>> {
    let mut out: Vec<Vec<Value>> = vec![Vec::new()];
    for (_, values) in axes {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                values.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push(v.clone());
                    p
                })
            })
            .collect();
    }
    out
}

/// srtctl's `expand_template`: string values (never keys) with each `{key}` replaced in order.
fn expand_template(t: &Value, params: &[(String, Value)]) -> Value {
    match t {
        Value::Mapping(m) => Value::Mapping(
            m.iter()
                .map(|(k, v)| (k.clone(), expand_template(v, params)))
                .collect(),
        ),
        Value::Sequence(s) => {
            Value::Sequence(s.iter().map(|v| expand_template(v, params)).collect())
        }
        Value::String(s) => {
            let mut result = s.clone();
            for (key, value) in params {
                let placeholder = format!("{{{key}}}");
                match value {
                    Value::Sequence(items) => {
                        if result == placeholder {
                            return value.clone();
                        }
                        let joined = items.iter().map(python_str).collect::<Vec<_>>().join(",");
                        result = result.replace(&placeholder, &joined);
                    }
                    _ => result = result.replace(&placeholder, &python_str(value)),
                }
            }
            Value::String(result)
        }
        other => other.clone(),
    }
}

// ---------------------------------------------------------------------------------------------
// Override files

const SELECTOR_SHAPES: &str = "'base', 'override_<name>', 'zip_override_<name>', 'zip_override_<name>[N]', or a glob pattern like '*mtp*'";

fn overrides(doc: &Value, selector: Option<&str>) -> Result<Vec<Variant>, VariantError> {
    let Some(base) = doc.get("base").and_then(Value::as_mapping) else {
        return Err(fail(
            "base",
            "is not a mapping: an override file's `base:` is the recipe its variants change",
            "write the recipe under `base:`",
        ));
    };
    let keys = |prefix: &str| -> Vec<String> {
        let mut k: Vec<String> = doc
            .as_mapping()
            .into_iter()
            .flat_map(|m| m.keys())
            .filter_map(Value::as_str)
            .filter(|k| k.starts_with(prefix))
            .map(String::from)
            .collect();
        k.sort();
        k
    };
    let (over, zips) = (keys("override_"), keys("zip_override_"));
    let available = || {
        let all: Vec<String> = over
            .iter()
            .cloned()
            .chain(zips.iter().map(|k| format!("{k}[i]")))
            .collect();
        if all.is_empty() {
            "(none)".to_string()
        } else {
            all.join(", ")
        }
    };
    let none_if_empty = |v: Vec<String>| {
        if v.is_empty() {
            "(none)".to_string()
        } else {
            v.join(", ")
        }
    };
    let sel_err = |m: String| fail("", m, format!("select one of: {}", available()));
    let Some(sel) = selector else {
        let mut out = Vec::new();
        for k in &over {
            out.push(override_variant(doc, base, k)?);
        }
        for k in &zips {
            out.extend(zip_variants(doc, base, k)?);
        }
        return Ok(out);
    };
    if let Some((key, idx)) = zip_index(sel) {
        if !zips.contains(&key) {
            return Err(sel_err(format!(
                "'{key}' not found in config. Available zip groups: {}",
                none_if_empty(zips.iter().map(|k| format!("{k}[i]")).collect())
            )));
        }
        let mut all = zip_variants(doc, base, &key)?;
        let n = all.len();
        if idx >= n {
            return Err(sel_err(format!(
                "Index [{idx}] out of range for '{key}' (has {n} variants, valid: 0–{})",
                n.saturating_sub(1)
            )));
        }
        return Ok(vec![all.swap_remove(idx)]);
    }
    if sel == "base" {
        return Ok(vec![Variant {
            job_name: base.get("name").map(python_str).unwrap_or_default(),
            params: Vec::new(),
            suffix: Some("base".into()),
            selector: Some("base".into()),
            recipe: Value::Mapping(base.clone()),
        }]);
    }
    if sel.contains(['*', '?']) {
        let mut matched: Vec<&String> = over.iter().chain(&zips).collect();
        matched.sort();
        matched.retain(|k| fnmatch(k, sel));
        if matched.is_empty() {
            return Err(sel_err(format!(
                "No variants match '{sel}'. Available: {}",
                available()
            )));
        }
        let mut out = Vec::new();
        for k in matched {
            if k.starts_with("zip_override_") {
                out.extend(zip_variants(doc, base, k)?);
            } else {
                out.push(override_variant(doc, base, k)?);
            }
        }
        return Ok(out);
    }
    if sel.starts_with("zip_override_") {
        if !zips.iter().any(|k| k == sel) {
            return Err(sel_err(format!(
                "'{sel}' not found in config. Available: {}",
                none_if_empty(zips.clone())
            )));
        }
        return zip_variants(doc, base, sel);
    }
    if sel.starts_with("override_") {
        if !over.iter().any(|k| k == sel) {
            return Err(sel_err(format!(
                "Override '{sel}' not found in config. Available: {}",
                available()
            )));
        }
        return Ok(vec![override_variant(doc, base, sel)?]);
    }
    Err(sel_err(format!(
        "Invalid selector '{sel}'. Must be {SELECTOR_SHAPES}."
    )))
}

/// `zip_override_<g>[N]`.
fn zip_index(sel: &str) -> Option<(String, usize)> {
    let open = sel.strip_suffix(']')?.rfind('[')?;
    let (key, idx) = (&sel[..open], &sel[open + 1..sel.len() - 1]);
    let group = key.strip_prefix("zip_override_")?;
    let word = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    (!group.is_empty() && group.chars().all(word) && !idx.is_empty())
        .then_some(())
        .and_then(|()| idx.chars().all(|c| c.is_ascii_digit()).then_some(()))
        .and_then(|()| Some((key.to_string(), idx.parse().ok()?)))
}

/// One `override_<s>` section merged into `base`.
fn override_variant(doc: &Value, base: &Mapping, key: &str) -> Result<Variant, VariantError> {
    let suffix = &key["override_".len()..];
    let Some(section) = doc.get(key).and_then(Value::as_mapping) else {
        return Err(fail(
            key,
            "is not a mapping of the keys it changes in `base`",
            format!("write `{key}: {{key: value, ...}}`"),
        ));
    };
    let mut merged = deep_merge(base, section, true);
    if !section.contains_key("name") {
        merged.insert(
            "name".into(),
            Value::String(format!("{}_{suffix}", base_name(base))),
        );
    }
    Ok(Variant {
        job_name: merged.get("name").map(python_str).unwrap_or_default(),
        params: Vec::new(),
        suffix: Some(suffix.into()),
        selector: Some(key.into()),
        recipe: Value::Mapping(merged),
    })
}

/// The variants of one `zip_override_<g>` section.
fn zip_variants(doc: &Value, base: &Mapping, key: &str) -> Result<Vec<Variant>, VariantError> {
    let group = &key["zip_override_".len()..];
    let Some(section) = doc.get(key).and_then(Value::as_mapping) else {
        return Err(fail(
            key,
            "is not a mapping whose lists are zipped",
            format!("write `{key}: {{key: [v1, v2], ...}}`"),
        ));
    };
    let n = zip_length(section).map_err(|m| {
        fail(
            key,
            m,
            "give every list the same length (a list of one value applies to every variant)",
        )
    })?;
    let named = matches!(section.get("name"), Some(Value::Sequence(_)));
    Ok((0..n)
        .map(|i| {
            let sliced = zip_slice(section, i);
            // The text srtctl submits merges the plain merge back into `base`: a `null` here
            // deletes nothing.
            let mut merged = deep_merge(base, &sliced, false);
            if !named {
                merged.insert(
                    "name".into(),
                    Value::String(format!("{}_{group}_{i}", base_name(base))),
                );
            }
            Variant {
                job_name: merged.get("name").map(python_str).unwrap_or_default(),
                params: Vec::new(),
                suffix: Some(format!("{group}_{i}")),
                selector: Some(format!("{key}[{i}]")),
                recipe: Value::Mapping(merged),
            }
        })
        .collect())
}

fn base_name(base: &Mapping) -> String {
    base.get("name")
        .map_or_else(|| "unnamed".into(), python_str)
}

/// srtctl's `deep_merge`: mappings merge, anything else (lists too) replaces; `null` deletes the
/// key when `null_deletes`, else is skipped.
fn deep_merge(base: &Mapping, over: &Mapping, null_deletes: bool) -> Mapping {
    let mut out = base.clone();
    for (k, v) in over {
        match (v, out.get(k)) {
            (Value::Null, _) => {
                if null_deletes {
                    out.shift_remove(k);
                }
            }
            (Value::Mapping(o), Some(Value::Mapping(b))) => {
                let merged = deep_merge(b, o, null_deletes);
                out.insert(k.clone(), Value::Mapping(merged));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out
}

/// The length of every list in a zip section (recursively), as srtctl's
/// `_determine_zip_length` checks them.
fn zip_length(section: &Mapping) -> Result<usize, String> {
    fn lengths(m: &Mapping, out: &mut Vec<usize>) {
        for v in m.values() {
            match v {
                Value::Sequence(s) => out.push(s.len()),
                Value::Mapping(m) => lengths(m, out),
                _ => {}
            }
        }
    }
    let mut all = Vec::new();
    lengths(section, &mut all);
    if all.is_empty() {
        return Err("zip_override section contains no list values — nothing to zip".into());
    }
    if all.contains(&0) {
        return Err("zip_override contains an empty list — cannot zip zero-length lists".into());
    }
    let mut other: Vec<usize> = all.into_iter().filter(|n| *n != 1).collect();
    other.sort_unstable();
    other.dedup();
    match other[..] {
        [] => Ok(1),
        [n] => Ok(n),
        _ => Err(format!(
            "Incompatible zip lengths {}. All lists must have the same length or length 1 (broadcast).",
            python_str(&Value::Sequence(other.iter().map(|n| (*n as u64).into()).collect()))
        )),
    }
}

/// Each list replaced by its `i`-th item (a list of one: its only item).
fn zip_slice(m: &Mapping, i: usize) -> Mapping {
    m.iter()
        .map(|(k, v)| {
            let v = match v {
                Value::Sequence(s) => s[if s.len() == 1 { 0 } else { i }].clone(),
                Value::Mapping(m) => Value::Mapping(zip_slice(m, i)),
                other => other.clone(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// Python's `fnmatch.fnmatch` on names (`*`, `?`, `[seq]`, `[!seq]`; case-sensitive on POSIX).
fn fnmatch(name: &str, pattern: &str) -> bool {
    fn go(n: &[char], p: &[char]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some('*') => (0..=n.len()).any(|i| go(&n[i..], &p[1..])),
            Some('?') => !n.is_empty() && go(&n[1..], &p[1..]),
            Some('[') => {
                let Some(close) = p.iter().skip(2).position(|c| *c == ']').map(|i| i + 2) else {
                    return n.first() == Some(&'[') && go(&n[1..], &p[1..]);
                };
                let Some(c) = n.first() else { return false };
                let (neg, set) = match p[1] {
                    '!' => (true, &p[2..close]),
                    _ => (false, &p[1..close]),
                };
                let mut hit = false;
                let mut j = 0;
                while j < set.len() {
                    if j + 2 < set.len() && set[j + 1] == '-' {
                        hit |= set[j] <= *c && *c <= set[j + 2];
                        j += 3;
                    } else {
                        hit |= set[j] == *c;
                        j += 1;
                    }
                }
                hit != neg && go(&n[1..], &p[close + 1..])
            }
            Some(c) => n.first() == Some(c) && go(&n[1..], &p[1..]),
        }
    }
    let (n, p): (Vec<char>, Vec<char>) = (name.chars().collect(), pattern.chars().collect());
    go(&n, &p)
}

// ---------------------------------------------------------------------------------------------
// Placeholders left in one job

/// The key path of the first string value of `doc` that contains `needle`.
pub fn key_holding(doc: &Value, needle: &str) -> Option<String> {
    fn find(v: &Value, path: &str, needle: &str) -> Option<String> {
        match v {
            Value::Mapping(m) => m.iter().find_map(|(k, v)| {
                let k = python_str(k);
                find(
                    v,
                    &if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    },
                    needle,
                )
            }),
            Value::Sequence(s) => s
                .iter()
                .enumerate()
                .find_map(|(i, v)| find(v, &format!("{path}[{i}]"), needle)),
            Value::String(s) if s.contains(needle) => Some(path.to_string()),
            _ => None,
        }
    }
    find(doc, "", needle)
}

/// Every `{identifier}` in `s` that is not a variable of another syntax: a shell's `${VAR}`,
/// nsys's `%q{VAR}`.
pub fn placeholders_in(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = s[i..].find('{') {
        let start = i + off;
        i = start + 1;
        let before = &s[..start];
        if before.ends_with('$') || before.ends_with("%q") {
            continue;
        }
        let rest = &s[start + 1..];
        let Some(end) = rest.find('}') else { break };
        let name = &rest[..end];
        let ident = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if ident {
            out.push(format!("{{{name}}}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> Value {
        serde_yaml::from_str(s).unwrap()
    }

    #[test]
    fn placeholders_are_identifiers_in_braces_and_not_shell_variables() {
        let placeholder_in = |s: &str| placeholders_in(s).into_iter().next();
        assert_eq!(placeholder_in("--x {conc}").as_deref(), Some("{conc}"));
        assert_eq!(placeholder_in("${HOME}/x"), None);
        assert_eq!(placeholder_in("{\"a\": 1}"), None);
        assert_eq!(placeholder_in("{ x }"), None);
        assert_eq!(placeholder_in("rank%q{SLURM_PROCID}"), None);
        assert_eq!(placeholders_in("{node}-{conc}"), ["{node}", "{conc}"]);
        let doc = yaml("a: {b: [x, '--p={p}']}\nc: '${Q}'");
        assert_eq!(key_holding(&doc, "{p}").as_deref(), Some("a.b[1]"));
    }

    #[test]
    fn fnmatch_as_python() {
        assert!(fnmatch("override_tp64", "*tp*"));
        assert!(fnmatch("zip_override_tp_sweep", "zip_*"));
        assert!(!fnmatch("override_small", "*tp*"));
        assert!(fnmatch("override_a1", "override_?[0-9]"));
        assert!(!fnmatch("override_ab", "override_?[!b]"));
    }
}
