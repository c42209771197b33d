//! Warnings about recipes that are legal but probably wrong: the memory-ownership rule of the
//! seed, srt-slurm's env layering trap, sizes one of Mooncake's parsers would read differently.
//! Each returns the warning text; the caller decides where it goes. Pure.

use crate::mooncake::{self, size};

/// `mooncake_kv_store.env` silently replaces the role's value (srt-slurm's layering order).
pub fn shared_env_override(
    process: &str,
    shared_source: &str,
    name: &str,
    value: &str,
    role_source: &str,
    role_value: &str,
) -> String {
    // Values of secrets never reach a warning (it is printed and logged as is).
    let value = crate::secrets::shown(name, value);
    let role_value = crate::secrets::shown(name, role_value);
    format!(
        "{process}: {shared_source}.{name}=\"{value}\" silently overrides {role_source}.{name}=\"{role_value}\" (srt-slurm layering) — remove one of them"
    )
}

/// The seed's memory-ownership rule: with a standalone store on the node, a worker must not
/// contribute a global segment of its own.
pub fn worker_segment(name: &str, value: Option<&str>, role_env: &str, warnings: &mut Vec<String>) {
    match value {
        None => warnings.push(format!(
            "{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE is not set, so the worker's embedded Mooncake client contributes its default segment (4gb in SGLang) besides the standalone store — set MOONCAKE_GLOBAL_SEGMENT_SIZE: \"0\" in {role_env}"
        )),
        Some(v) if v.contains('{') => {}
        Some(v) => match size::parse_mooncake_size(v) {
            Ok(0) => {}
            Ok(n) => warnings.push(format!(
                "{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE=\"{v}\" ({}) while a standalone store serves this node: the worker would contribute DRAM twice — set it to \"0\"",
                size::Bytes(n)
            )),
            Err(e) => warnings.push(format!("{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE=\"{v}\" is invalid ({e})")),
        },
    }
}

/// SGLang's own size parser is stricter than Mooncake's.
pub fn sglang_size(name: &str, value: &str, warnings: &mut Vec<String>) {
    if !size::sglang_accepts(value) && !value.contains('{') {
        warnings.push(format!(
            "{name}: MOONCAKE_GLOBAL_SEGMENT_SIZE=\"{value}\" is valid for Mooncake but SGLang's parser rejects it (it takes an integer followed by gb, or plain bytes)"
        ));
    }
}

/// A store's segment: unset means Mooncake's default; below 16 MiB Mooncake refuses it.
/// `Err(message)` is a hard error.
pub fn store_segment(
    store: &str,
    node: &str,
    value: Option<&str>,
    key: &str,
    warnings: &mut Vec<String>,
) -> Result<(), String> {
    match value {
        None => warnings.push(format!(
            "{store} on {node}: MOONCAKE_GLOBAL_SEGMENT_SIZE is not set, so Mooncake uses its default of {} — set it in {key}",
            size::Bytes(mooncake::DEFAULT_SEGMENT)
        )),
        Some(v) if !v.contains('{') => {
            if let Ok(n) = size::parse_mooncake_size(v) {
                if n < mooncake::MIN_STORE_SEGMENT {
                    return Err(format!(
                        "the store's segment {v} ({}) is below Mooncake's minimum of 16 MiB",
                        size::Bytes(n)
                    ));
                }
            }
        }
        Some(_) => {}
    }
    Ok(())
}

/// vLLM's client JSON with a non-zero `global_segment_size` next to a standalone store.
pub fn vllm_segment(source: &str, v: &serde_json::Value, warnings: &mut Vec<String>) {
    let nonzero = match v {
        serde_json::Value::Number(n) => n.as_u64() != Some(0),
        serde_json::Value::String(s) => size::parse_mooncake_size(s) != Ok(0),
        _ => true,
    };
    if nonzero {
        warnings.push(format!(
            "{source}.global_segment_size is {v}, but a standalone store serves this node: each vLLM rank would contribute DRAM too — set it to 0 and mode: standalone-store"
        ));
    }
}
