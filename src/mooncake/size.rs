//! Byte sizes as Mooncake and SGLang spell them, and as people read them.
//!
//! `MOONCAKE_GLOBAL_SEGMENT_SIZE` / `MOONCAKE_LOCAL_BUFFER_SIZE` must be parsed exactly as
//! Mooncake's Python store service does (`mooncake_config._parse_segment_size`), because that is
//! the program that will read them; this is the one place where mcsup hand-writes a parser on
//! purpose. Rules (all units are powers of 1024):
//! - the string is stripped and lower-cased; empty is an error;
//! - suffixes are tried in this order: `kb mb gb tb k m g t b`; the rest, stripped again, is a
//!   Python `float` (fractions, exponents and digit underscores allowed), multiplied and truncated
//!   toward zero (`int(float(num) * mult)`);
//! - no suffix: `int(float(s))`;
//! - `gib`/`mib` fail (they end in `b`, leaving `gi` which is not a number); negatives are rejected.
//!
//! SGLang's own HiCache Mooncake backend is stricter (an integer followed by `gb`, or plain bytes):
//! [`sglang_accepts`] says whether it would take a value, so the plan can warn.
//!
//! Nothing here does I/O.

use std::fmt;

/// Why a size string was rejected. The message reads well after "invalid size: ".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("empty string")]
    Empty,
    #[error("missing number before `{0}`")]
    MissingNumber(String),
    #[error("`{0}` is not a number")]
    NotANumber(String),
    #[error("negative sizes are not allowed")]
    Negative,
    #[error("the value is too large")]
    TooLarge,
}

const SUFFIXES: [(&str, u64); 9] = [
    ("kb", 1 << 10),
    ("mb", 1 << 20),
    ("gb", 1 << 30),
    ("tb", 1 << 40),
    ("k", 1 << 10),
    ("m", 1 << 20),
    ("g", 1 << 30),
    ("t", 1 << 40),
    ("b", 1),
];

/// Parse a size exactly as Mooncake's Python store service does. Returns bytes.
pub fn parse_mooncake_size(input: &str) -> Result<u64, SizeError> {
    let s = input.trim().to_lowercase();
    if s.is_empty() {
        return Err(SizeError::Empty);
    }
    for (suffix, mult) in SUFFIXES {
        if let Some(num) = s.strip_suffix(suffix) {
            let num = num.trim();
            if num.is_empty() {
                return Err(SizeError::MissingNumber(suffix.to_string()));
            }
            let value = python_float(num)?;
            return to_bytes(value * mult as f64);
        }
    }
    to_bytes(python_float(&s)?)
}

/// `int(x)` on a float, plus Mooncake's refusal of negative sizes.
fn to_bytes(value: f64) -> Result<u64, SizeError> {
    if value.is_nan() {
        return Err(SizeError::NotANumber("nan".into()));
    }
    if value.is_infinite() {
        return Err(SizeError::TooLarge);
    }
    let truncated = value.trunc();
    if truncated < 0.0 {
        return Err(SizeError::Negative);
    }
    // 2^64 is exactly representable; anything at or above it does not fit.
    if truncated >= 18_446_744_073_709_551_616.0 {
        return Err(SizeError::TooLarge);
    }
    Ok(truncated as u64)
}

/// Python's `float(str)` grammar: optional sign, digits with single underscores between digits,
/// optional fraction and exponent, or inf/infinity/nan. Surrounding whitespace was stripped.
fn python_float(s: &str) -> Result<f64, SizeError> {
    let bad = || SizeError::NotANumber(s.to_string());
    let lower = s.to_ascii_lowercase();
    let unsigned = lower.strip_prefix(['+', '-']).unwrap_or(&lower);
    if matches!(unsigned, "inf" | "infinity" | "nan") {
        return lower.parse::<f64>().map_err(|_| bad());
    }
    // Validate the character grammar ourselves: Rust's parser differs from Python's on
    // underscores and accepts nothing Python rejects otherwise, but be explicit.
    let bytes = unsigned.as_bytes();
    let mut cleaned = String::with_capacity(s.len());
    if lower.starts_with('-') {
        cleaned.push('-');
    }
    let mut digits = 0usize;
    let mut seen_dot = false;
    let mut seen_exp = false;
    let mut exp_digits = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i] as char;
        match c {
            '0'..='9' => {
                if seen_exp {
                    exp_digits += 1;
                } else {
                    digits += 1;
                }
                cleaned.push(c);
            }
            '_' => {
                let prev_digit = i > 0 && bytes[i - 1].is_ascii_digit();
                let next_digit = bytes.get(i + 1).is_some_and(|b| b.is_ascii_digit());
                if !(prev_digit && next_digit) {
                    return Err(bad());
                }
            }
            '.' if !seen_dot && !seen_exp => {
                seen_dot = true;
                cleaned.push(c);
            }
            'e' if !seen_exp && digits > 0 => {
                seen_exp = true;
                cleaned.push(c);
                if let Some(sign @ (b'+' | b'-')) = bytes.get(i + 1) {
                    cleaned.push(*sign as char);
                    i += 1;
                }
            }
            _ => return Err(bad()),
        }
        i += 1;
    }
    if digits == 0 || (seen_exp && exp_digits == 0) {
        return Err(bad());
    }
    cleaned.parse::<f64>().map_err(|_| bad())
}

/// Would SGLang's HiCache Mooncake backend parse this value (`_parse_global_segment_size`)? It
/// strips and lower-cases it, drops a `gb` suffix, and hands the rest to Python's `int()`: an
/// integer with an optional sign and `_` between digits. `4g`, `1.5gb`, `4096mb` are errors there.
/// (A negative value parses, and is refused later, by Mooncake, as any size mcsup checks is.)
pub fn sglang_accepts(input: &str) -> bool {
    let s = input.trim().to_ascii_lowercase();
    let num = s.strip_suffix("gb").unwrap_or(&s);
    python_int(num)
}

/// Python's `int(str)` grammar for ASCII input: surrounding whitespace, an optional sign, digits
/// with single underscores between them.
fn python_int(s: &str) -> bool {
    let s = s.trim_matches(|c: char| c.is_ascii_whitespace() || c == '\x0b');
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    !digits.is_empty()
        && digits
            .split('_')
            .all(|group| !group.is_empty() && group.bytes().all(|b| b.is_ascii_digit()))
}

/// A byte count printed with explicit binary units, e.g. `400 GiB (429496729600 B)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 5] = [
            ("PiB", 1 << 50),
            ("TiB", 1 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ];
        let n = self.0;
        for (unit, size) in UNITS {
            if n >= size {
                let whole = n / size;
                let rem = n % size;
                if rem == 0 {
                    return write!(f, "{whole} {unit}");
                }
                return write!(f, "{:.2} {unit}", n as f64 / size as f64);
            }
        }
        write!(f, "{n} B")
    }
}

/// Decimal gigabytes (10^9), as SGLang's `--hicache-size` counts them.
pub fn decimal_gb(n: u64) -> String {
    format!("{:.2} GB", n as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn mooncake_table() {
        // (input, expected) — each row checked against mooncake_config._parse_segment_size.
        let ok: &[(&str, u64)] = &[
            ("100gb", 100 * GIB),
            ("400GB", 400 * GIB),
            (" 4 gb ", 4 * GIB),
            ("1.5gb", 3 * GIB / 2),
            ("512mb", 512 * MIB),
            ("512m", 512 * MIB),
            ("16M", 16 * MIB),
            ("1k", 1024),
            ("2kb", 2048),
            ("1t", 1 << 40),
            ("1tb", 1 << 40),
            ("0", 0),
            ("0gb", 0),
            ("1024", 1024),
            ("1024b", 1024),
            ("3355443200", 3_355_443_200),
            ("1e3", 1000),
            ("1e3mb", 1000 * MIB),
            ("1_000", 1000),
            ("0.5", 0),
            ("1.9", 1),
            (".5gb", GIB / 2),
            ("5.gb", 5 * GIB),
            ("+1gb", GIB),
            ("-0", 0),
        ];
        for (input, want) in ok {
            assert_eq!(parse_mooncake_size(input), Ok(*want), "input {input:?}");
        }
        let bad = [
            "", "  ", "gb", "b", "100gib", "100mib", "-1gb", "-1", "abc", "1.2.3gb", "1__0", "_1",
            "1_", "nan", "inf", "1e", "e5", "0x10", "1 000", "1e400",
        ];
        for input in bad {
            assert!(
                parse_mooncake_size(input).is_err(),
                "input {input:?} should fail"
            );
        }
    }

    #[test]
    fn sglang_strictness() {
        // As SGLang's parser (Python's int()) reads them: signs and digit underscores parse.
        for ok in [
            "4gb",
            "4GB",
            "100gb",
            "0",
            "4294967296",
            " 4gb ",
            "-1gb",
            "+8",
            "1_024gb",
        ] {
            assert!(sglang_accepts(ok), "{ok}");
        }
        for bad in [
            "4g", "1.5gb", "4096mb", "", "gb", "4 g", "1__0", "_1", "1_", "+-1", "- 1",
        ] {
            assert!(!sglang_accepts(bad), "{bad}");
        }
    }

    #[test]
    fn bytes_display() {
        assert_eq!(Bytes(400 * GIB).to_string(), "400 GiB");
        assert_eq!(Bytes(512 * MIB).to_string(), "512 MiB");
        assert_eq!(Bytes(3 * GIB / 2).to_string(), "1.50 GiB");
        assert_eq!(Bytes(12).to_string(), "12 B");
    }
}
