//! Flags and values rendered as srtctl renders them: Python's `str()`/`repr()` of what PyYAML
//! loaded, `json.dumps` with Python's separators, and `_config_to_cli_args`. Every engine's argv
//! goes through here, so a quirk of srtctl's rendering is reproduced in one place. Pure.

use crate::recipe::FlagMap;

pub use crate::domain::python::{python_float, python_str};

/// srtctl's `_config_to_cli_args`: keys sorted by their raw text, `_` → `-`, `true` a bare flag,
/// `false`/null dropped, a list spread after one flag (an empty one leaves the bare flag), other
/// values as Python's `str()`. Keys in `skip` are left out.
pub fn config_to_cli_args(flags: &FlagMap, skip: &[&str]) -> Vec<String> {
    let mut items: Vec<&(String, serde_yaml::Value)> = flags
        .0
        .iter()
        .filter(|(k, _)| !skip.contains(&k.as_str()))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    render_flags(items.into_iter().map(|(k, v)| (k, v)), python_str)
}

/// `--kv-events-config <json>` as srtctl writes it for both engines: the recipe's settings with
/// `endpoint` replaced by this process's own ZMQ port.
pub(crate) fn kv_events_args(mut kv: Vec<(String, serde_json::Value)>, port: u16) -> [String; 2] {
    kv.retain(|(k, _)| k != "endpoint");
    kv.push(("endpoint".into(), format!("tcp://*:{port}").into()));
    ["--kv-events-config".into(), python_json_dumps(&kv)]
}

/// The CLI shape srtctl and mcsup both give a flag map: `_` → `-`, `true` a bare flag,
/// `false`/null dropped, a list spread after one flag, other values through `value` (which
/// differs: Python's `str()` for srtctl-derived argv, the plain scalar for mcsup's own).
pub fn render_flags<'a>(
    items: impl IntoIterator<Item = (&'a String, &'a serde_yaml::Value)>,
    value: fn(&serde_yaml::Value) -> String,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in items {
        let flag = format!("--{}", k.replace('_', "-"));
        match v {
            serde_yaml::Value::Bool(true) => out.push(flag),
            serde_yaml::Value::Bool(false) | serde_yaml::Value::Null => {}
            serde_yaml::Value::Sequence(items) => {
                out.push(flag);
                out.extend(items.iter().map(value));
            }
            other => {
                out.push(flag);
                out.push(value(other));
            }
        }
    }
    out
}

/// `json.dumps` with Python's default separators (`", "` and `": "`).
pub(crate) fn python_json_dumps(items: &[(String, serde_json::Value)]) -> String {
    fn value(v: &serde_json::Value) -> String {
        match v {
            serde_json::Value::Object(m) => format!(
                "{{{}}}",
                m.iter()
                    .map(|(k, v)| format!("{}: {}", serde_json::Value::from(k.as_str()), value(v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            serde_json::Value::Array(a) => {
                format!("[{}]", a.iter().map(value).collect::<Vec<_>>().join(", "))
            }
            other => other.to_string(),
        }
    }
    format!(
        "{{{}}}",
        items
            .iter()
            .map(|(k, v)| format!("{}: {}", serde_json::Value::from(k.as_str()), value(v)))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Python's `shlex.quote`: as it is when every character is in `[A-Za-z0-9_@%+=:,./-]` (and it
/// is not empty), else single-quoted with `'` written `'"'"'`.
pub fn shlex_quote(w: &str) -> String {
    if !w.is_empty()
        && w.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&c))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\"'\"'"))
    }
}

/// Python's `shlex.join`.
pub fn shlex_join(words: &[String]) -> String {
    words
        .iter()
        .map(|w| shlex_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_str_of_yaml_values() {
        let y = |t: &str| python_str(&serde_yaml::from_str::<serde_yaml::Value>(t).unwrap());
        assert_eq!(y("0.90"), "0.9");
        assert_eq!(y("5.0"), "5.0");
        assert_eq!(y("0.00001"), "1e-05");
        assert_eq!(y("1.5e+20"), "1.5e+20");
        assert_eq!(y("131072"), "131072");
        assert_eq!(y("abc"), "abc");
        assert_eq!(
            y("{method: mtp, n: 1, f: 0.5, on: true}"),
            "{'method': 'mtp', 'n': 1, 'f': 0.5, 'on': True}"
        );
        assert_eq!(y("[1, a]"), "[1, 'a']");
        assert_eq!(y("{q: \"it's\"}"), "{'q': \"it's\"}");
    }

    #[test]
    fn flags_sorted_by_raw_key_like_srtctl() {
        let f: FlagMap = serde_yaml::from_str(
            "tp-size: 8\nmem-fraction-static: 0.90\ntrust-remote-code: true\nskip: false\nnone: null\nmodel-path: /x\ncuda_graph_bs: [1, 2]\ncontext-length: 4096\n",
        )
        .unwrap();
        assert_eq!(
            config_to_cli_args(&f, &["model-path"]),
            [
                "--context-length",
                "4096",
                "--cuda-graph-bs",
                "1",
                "2",
                "--mem-fraction-static",
                "0.9",
                "--tp-size",
                "8",
                "--trust-remote-code"
            ]
        );
    }
}
