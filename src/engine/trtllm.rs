//! TRT-LLM endpoints as srtctl launches them (docs/trtllm.md). So far: the engine config file
//! each endpoint's ranks read, `trtllm_config_<mode>.yaml` (`--extra-engine-args` or
//! `--config`), which srtctl writes with PyYAML's `safe_dump` of the mode's `trtllm_config`
//! (`backends/trtllm.py: build_worker_command`). The rest of the derivation (the endpoint's step,
//! its environment, the rank command) is not built yet.

use serde_yaml::{Mapping, Value};

/// What `yaml.safe_dump(config)` writes: keys sorted, block style, a sequence inside a mapping
/// not indented, `{}` for an empty mapping. Values srtctl's recipes hold (mappings, sequences,
/// booleans, null, integers, floats, plain words); a string PyYAML would have to quote is
/// refused rather than guessed at.
pub fn engine_config_yaml(config: &Mapping) -> Result<String, String> {
    if config.is_empty() {
        return Ok("{}\n".into());
    }
    let mut out = String::new();
    mapping(config, 0, &mut out)?;
    Ok(out)
}

fn mapping(m: &Mapping, indent: usize, out: &mut String) -> Result<(), String> {
    let mut entries: Vec<(&str, &Value)> = Vec::with_capacity(m.len());
    for (k, v) in m {
        let Value::String(k) = k else {
            return Err(format!("a key that is not a string: {k:?}"));
        };
        entries.push((k.as_str(), v));
    }
    entries.sort_by(|a, b| a.0.cmp(b.0));
    for (i, (k, v)) in entries.into_iter().enumerate() {
        // The first key of a mapping that is a sequence item follows its `- `.
        if i > 0 || !out.ends_with("- ") {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&plain(k)?);
        out.push(':');
        value_after_key(v, indent, out)?;
    }
    Ok(())
}

fn value_after_key(v: &Value, indent: usize, out: &mut String) -> Result<(), String> {
    match v {
        Value::Mapping(m) if !m.is_empty() => {
            out.push('\n');
            mapping(m, indent + 2, out)
        }
        // PyYAML does not indent a sequence that is a mapping's value.
        Value::Sequence(s) if !s.is_empty() => {
            out.push('\n');
            sequence(s, indent, out)
        }
        other => {
            out.push(' ');
            out.push_str(&scalar(other)?);
            out.push('\n');
            Ok(())
        }
    }
}

fn sequence(s: &[Value], indent: usize, out: &mut String) -> Result<(), String> {
    for v in s {
        out.push_str(&" ".repeat(indent));
        out.push_str("- ");
        match v {
            Value::Mapping(m) if !m.is_empty() => mapping(m, indent + 2, out)?,
            Value::Sequence(inner) if !inner.is_empty() => {
                return Err("a sequence inside a sequence".into());
            }
            other => {
                out.push_str(&scalar(other)?);
                out.push('\n');
            }
        }
    }
    Ok(())
}

fn scalar(v: &Value) -> Result<String, String> {
    Ok(match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => python_float(n.as_f64().unwrap_or(f64::NAN)),
        Value::Number(n) => n.to_string(),
        Value::String(s) => plain(s)?,
        Value::Mapping(_) => "{}".into(),
        Value::Sequence(_) => "[]".into(),
        Value::Tagged(t) => return Err(format!("a tagged value: {t:?}")),
    })
}

/// Python's `repr` of a float as PyYAML writes it: `0.8`, `2.0`, `1.0e-05`, `.inf`, `.nan`.
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return ".nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.into();
    }
    let exp = if f == 0.0 {
        0
    } else {
        f.abs().log10().floor() as i32
    };
    if (-4..16).contains(&exp) {
        let s = format!("{f}");
        return if s.contains('.') { s } else { format!("{s}.0") };
    }
    // Python: `1e-05`, `1.5e+16`; PyYAML adds `.0` to a mantissa without a point.
    let s = format!("{f:e}");
    let (mantissa, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    let mantissa = if mantissa.contains('.') {
        mantissa.to_string()
    } else {
        format!("{mantissa}.0")
    };
    format!("{mantissa}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

/// A string PyYAML writes without quotes; anything it would quote is refused.
fn plain(s: &str) -> Result<String, String> {
    const YAML11_WORDS: [&str; 11] = [
        "yes", "no", "true", "false", "on", "off", "y", "n", "null", "~", "",
    ];
    let word = s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
        && s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == '/')
        && !YAML11_WORDS.contains(&s.to_ascii_lowercase().as_str());
    if word {
        Ok(s.to_string())
    } else {
        Err(format!(
            "`{s}` would need quoting in srtctl's YAML, which mcsup does not write yet"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_python_writes_them() {
        for (f, want) in [
            (0.8, "0.8"),
            (2.0, "2.0"),
            (0.0001, "0.0001"),
            (0.00001, "1.0e-05"),
            (1.5e16, "1.5e+16"),
            (f64::INFINITY, ".inf"),
        ] {
            assert_eq!(python_float(f), want);
        }
    }

    #[test]
    fn words_pyyaml_would_retype_are_refused() {
        assert!(plain("UCX").is_ok() && plain("/logs/x.yaml").is_ok());
        for s in ["yes", "Off", "1", "a b", "", "x: y"] {
            assert!(plain(s).is_err(), "{s}");
        }
    }
}
