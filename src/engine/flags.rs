//! Flags and values rendered as srtctl renders them: Python's `str()`/`repr()` of what PyYAML
//! loaded, `json.dumps` with Python's separators, and `_config_to_cli_args`. Every engine's argv
//! goes through here, so a quirk of srtctl's rendering is reproduced in one place. Pure.

use crate::recipe::FlagMap;

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

/// Python's `str()` of a value PyYAML would have produced.
pub fn python_str(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::String(s) => s.clone(),
        other => python_repr(other),
    }
}

fn python_repr(v: &serde_yaml::Value) -> String {
    match v {
        serde_yaml::Value::Null => "None".into(),
        serde_yaml::Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        serde_yaml::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => python_float(f),
            _ => n.to_string(),
        },
        serde_yaml::Value::String(s) => python_str_repr(s),
        serde_yaml::Value::Sequence(items) => {
            format!(
                "[{}]",
                items.iter().map(python_repr).collect::<Vec<_>>().join(", ")
            )
        }
        serde_yaml::Value::Mapping(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", python_repr(k), python_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        serde_yaml::Value::Tagged(t) => python_repr(&t.value),
    }
}

/// `repr(float)`: the shortest round-trip digits, in exponent form below 1e-4 or from 1e16.
pub fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = f.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        let e = format!("{f:e}");
        let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let s = format!("{f}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

fn python_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::new();
    out.push(quote);
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
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
