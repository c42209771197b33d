//! Reading a recipe file and turning serde's errors into [`RecipeError`]s a person can act on.

use std::path::Path;

use super::error::RecipeError;
use super::types::Recipe;
use super::values::{split_at_key, FIX_MARKER};

/// Largest recipe accepted; real ones are a few KiB.
const MAX_RECIPE_BYTES: u64 = 4 << 20;

/// Read and parse the recipe at `path`.
pub fn load_file(path: &Path) -> Result<Recipe, RecipeError> {
    let meta = std::fs::metadata(path).map_err(|source| RecipeError::Io {
        path: path.into(),
        source,
    })?;
    if meta.is_dir() {
        return Err(RecipeError::IsDirectory { path: path.into() });
    }
    if meta.len() > MAX_RECIPE_BYTES {
        return Err(RecipeError::invalid(
            path,
            "",
            None,
            format!(
                "the file is {} bytes, larger than any recipe should be",
                meta.len()
            ),
            Some("check that --recipe names the YAML recipe".into()),
        ));
    }
    let bytes = std::fs::read(path).map_err(|source| RecipeError::Io {
        path: path.into(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| {
        RecipeError::invalid(
            path,
            "",
            None,
            format!(
                "the file is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
            Some("save the recipe as UTF-8".into()),
        )
    })?;
    parse_str(path, &text)
}

/// Parse recipe text; `path` is only used in messages.
pub fn parse_str(path: &Path, text: &str) -> Result<Recipe, RecipeError> {
    if text.trim().is_empty() || only_comments(text) {
        return Err(RecipeError::Empty { path: path.into() });
    }
    // A document that is just `null`/`~` is as empty as an empty file.
    if matches!(text.trim(), "~" | "null" | "---" | "--- ~" | "---\n~") {
        return Err(RecipeError::Empty { path: path.into() });
    }
    let de = serde_yaml::Deserializer::from_str(text);
    match serde_path_to_error::deserialize::<_, Recipe>(de) {
        Ok(mut r) => {
            r.positions = super::locate::KeyIndex::build(text);
            r.raw = serde_yaml::from_str(text).unwrap_or_default();
            Ok(r)
        }
        Err(e) => Err(convert(path, text, e)),
    }
}

fn only_comments(text: &str) -> bool {
    text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#') || t == "---" || t == "..."
    })
}

fn convert(
    path: &Path,
    text: &str,
    e: serde_path_to_error::Error<serde_yaml::Error>,
) -> RecipeError {
    let mut key_path = render_path(e.path());
    let inner = e.inner();
    let mut position = inner.location().map(|l| (l.line(), l.column()));
    let raw = inner.to_string();
    // serde_yaml appends " at line L column C" to its messages; we print the position ourselves.
    let raw = strip_position(&raw);
    let raw = strip_path_prefix(&raw);
    // A check inside a value may name the key it is about (`http.path`, `MC_GID_INDEX`, `[1]`).
    let (sub, rest) = split_at_key(&raw);
    let named_sub = sub.is_some_and(|s| !s.is_empty());
    if let Some(sub) = sub.filter(|s| !s.is_empty()) {
        key_path = if sub.starts_with('[') || key_path.is_empty() {
            format!("{key_path}{sub}")
        } else {
            format!("{key_path}.{sub}")
        };
    }
    let raw = rest.to_string();
    // The parser reports where it stands when a check fails: for a check on a whole block that
    // is often the start of the enclosing entry, before the key. The key's own line is better
    // then, and always when the message named the key inside the value.
    if !key_path.is_empty() {
        if let Some(at) = super::locate::KeyIndex::build(text).find_exact(&key_path) {
            if named_sub || position.is_none_or(|p| p < at) {
                position = Some(at);
            }
        }
    }
    let (message, fix) = match raw.split_once(FIX_MARKER) {
        Some((m, f)) => (m.to_string(), Some(f.to_string())),
        None => explain(&raw),
    };
    if raw.starts_with("invalid type: string") && key_path.is_empty() {
        return RecipeError::invalid(
            path,
            "",
            position,
            "the file is not a YAML mapping (it parsed as a plain string)",
            Some("a recipe is a mapping with a `backend:` section; check the file's indentation and that it is the right file".into()),
        );
    }
    // The path ends at the map that holds a bad key; make it point at the key itself.
    let key_path = match unknown_key(&raw) {
        Some(k) if !key_path.ends_with(&k) => join(&key_path, &k),
        _ => key_path,
    };
    RecipeError::invalid(path, key_path, position, message, fix)
}

fn join(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

fn render_path(p: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for seg in p.iter() {
        match seg {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Enum { variant } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(variant);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// serde_yaml prefixes nested errors with its own dotted path ("a.b[0].c: msg"); we print ours.
fn strip_path_prefix(msg: &str) -> String {
    match msg.split_once(": ") {
        Some((prefix, rest))
            if !prefix.is_empty() && !prefix.contains(' ') && !prefix.contains('`') =>
        {
            rest.to_string()
        }
        _ => msg.to_string(),
    }
}

fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) if msg[i..].contains(" column ") => msg[..i].to_string(),
        _ => msg.to_string(),
    }
}

/// The offending name in serde's "unknown field `x`" / "unknown variant `x`" messages.
fn unknown_key(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

/// Names listed in "expected one of `a`, `b`" / "expected `a` or `b`".
fn expected_names(msg: &str) -> Vec<String> {
    let Some(i) = msg.find("expected") else {
        return Vec::new();
    };
    msg[i..]
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Turn serde's built-in messages into (message, fix).
fn explain(raw: &str) -> (String, Option<String>) {
    if let Some(rest) = raw
        .strip_prefix("unknown field `")
        .or_else(|| raw.strip_prefix("unknown variant `"))
    {
        let bad = &rest[..rest.find('`').unwrap_or(rest.len())];
        let expected = expected_names(raw);
        let what = if raw.starts_with("unknown field") {
            "key"
        } else {
            "value"
        };
        let message = format!("unknown {what} `{bad}`");
        let closest = expected
            .iter()
            .map(|k| (strsim::damerau_levenshtein(&bad.to_ascii_lowercase(), k), k))
            .filter(|(d, k)| *d <= 3 && *d < k.len())
            .min_by_key(|(d, _)| *d)
            .map(|(_, k)| k.clone());
        let list = expected
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let fix = match (closest, expected.is_empty()) {
            (Some(c), _) => format!("did you mean `{c}`? (valid: {list})"),
            (None, false) => format!("valid {what}s here: {list}"),
            (None, true) => "remove it".to_string(),
        };
        return (message, Some(fix));
    }
    if let Some(rest) = raw.strip_prefix("missing field `") {
        let name = &rest[..rest.find('`').unwrap_or(rest.len())];
        return (
            format!("required key `{name}` is missing"),
            Some(format!("add `{name}:`")),
        );
    }
    if let Some(rest) = raw.strip_prefix("duplicate field `") {
        let name = &rest[..rest.find('`').unwrap_or(rest.len())];
        return (
            format!("key `{name}` appears twice"),
            Some(format!("keep one `{name}:`")),
        );
    }
    if raw.starts_with("invalid type: ") {
        let fix = if raw.contains("expected an engine type string") {
            Some("write `engine: sglang` or `engine: {type: sglang}`".to_string())
        } else if raw.contains("expected a recipe") {
            Some("a recipe is a YAML mapping whose top level has `backend:` (and optionally `mcsup:`); see recipes/local.yaml".to_string())
        } else if raw.contains("expected a boolean") {
            Some("write true or false".to_string())
        } else if raw.contains("expected a sequence") || raw.contains("expected a list") {
            Some("write a YAML list, e.g. [a, b]".to_string())
        } else if raw.contains("expected struct")
            || raw.contains("expected a mapping")
            || raw.contains("expected map")
        {
            Some("write a YAML mapping (key: value lines indented under this key)".to_string())
        } else if raw.contains("expected a string") {
            Some("quote the value".to_string())
        } else if raw.contains("expected u32")
            || raw.contains("expected i32")
            || raw.contains("expected u16")
            || raw.contains("expected f64")
        {
            Some("write a plain number".to_string())
        } else {
            None
        };
        return (raw.to_string(), fix);
    }
    if raw.starts_with("invalid value: integer")
        && (raw.contains("expected u32") || raw.contains("expected u16"))
    {
        return (
            raw.to_string(),
            Some("use a non-negative whole number in range".into()),
        );
    }
    if raw.contains("did not find expected")
        || raw.contains("found character that cannot start")
        || raw.contains("mapping values are not allowed")
        || raw.contains("while parsing")
        || raw.contains("while scanning")
    {
        return (
            format!("YAML syntax error: {raw}"),
            Some(
                "check indentation (spaces, not tabs), colons and quotes around this position"
                    .into(),
            ),
        );
    }
    (raw.to_string(), None)
}
