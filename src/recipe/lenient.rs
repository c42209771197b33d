//! The lenient walk of a mapping mcsup shares with srt-slurm: known keys are read, foreign ones
//! tolerated and listed, near-misses of a known key rejected as typos. Used by the v1 sections
//! (`types`) and the 2.0 ones (`v2`).

use serde::de::{self, IgnoredAny, MapAccess};

use super::values::*;

/// Names close to a known key ([`crate::domain::suggest_typo`]) are treated as typos, not as
/// foreign sections, where unknown keys are otherwise tolerated.
fn close_match<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    crate::domain::suggest_typo(key, known.iter().copied())
}

/// Walk a mapping of a section mcsup shares with srt-slurm: `read` takes each known key's value;
/// other keys are tolerated (recorded in `ignored` as `<prefix><key>`, their values skipped),
/// except near-misses of a known key (a typo would otherwise be silently ignored) and duplicates.
pub(super) fn visit_lenient<'de, A: MapAccess<'de>>(
    map: &mut A,
    known: &[&str],
    prefix: &str,
    ignored: &mut Vec<String>,
    mut read: impl FnMut(&str, &mut A) -> Result<(), A::Error>,
) -> Result<(), A::Error> {
    let mut seen: Vec<String> = Vec::new();
    while let Some(key) = map.next_key::<String>()? {
        if seen.contains(&key) {
            return Err(de::Error::custom(format!(
                "duplicate key `{key}`{FIX_MARKER}keep one `{key}:`"
            )));
        }
        seen.push(key.clone());
        if known.contains(&key.as_str()) {
            read(&key, map)?;
            continue;
        }
        if let Some(k) = close_match(&key, known) {
            let what = if prefix.is_empty() {
                "top-level section"
            } else {
                "key"
            };
            return Err(de::Error::custom(at_key(
                &key,
                format!("unknown {what} `{key}`"),
                format!("did you mean `{k}`?"),
            )));
        }
        map.next_value::<IgnoredAny>()?;
        ignored.push(format!("{prefix}{key}"));
    }
    Ok(())
}
