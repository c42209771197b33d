//! The size parser against Mooncake's own behaviour: a table generated from the real
//! `mooncake_config._parse_segment_size` (scripts/gen-size-table.py), plus property tests.

use mcsup::mooncake::size::{parse_mooncake_size, sglang_accepts};
use proptest::prelude::*;

#[derive(serde::Deserialize)]
struct Row {
    input: String,
    bytes: Option<u64>,
}

#[test]
fn matches_the_real_mooncake_parser() {
    let text = include_str!("fixtures/mooncake_sizes.jsonl");
    let mut checked = 0;
    let mut mismatches = Vec::new();
    for line in text.lines() {
        let row: Row = serde_json::from_str(line).expect("table row");
        let ours = parse_mooncake_size(&row.input).ok();
        // Documented divergence: Python's float() accepts non-ASCII decimal digits ("１２gb");
        // mcsup rejects them (an error the user can fix), never the other way round.
        if !row.input.is_ascii() {
            assert_eq!(
                ours, None,
                "non-ASCII input {:?} must be rejected",
                row.input
            );
            continue;
        }
        if ours != row.bytes {
            mismatches.push(format!(
                "{:?}: mooncake {:?}, mcsup {:?}",
                row.input, row.bytes, ours
            ));
        }
        checked += 1;
    }
    assert!(checked > 500, "table too small: {checked}");
    assert!(
        mismatches.is_empty(),
        "{} mismatches:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

const UNITS: [(&str, u64); 9] = [
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

proptest! {
    #[test]
    fn integer_with_unit(n in 0u64..100_000, u in 0usize..9, upper in any::<bool>(), pad in "[ \t]{0,2}") {
        let (unit, mult) = UNITS[u];
        let unit = if upper { unit.to_uppercase() } else { unit.to_string() };
        let s = format!("{pad}{n}{pad}{unit}{pad}");
        prop_assert_eq!(parse_mooncake_size(&s), Ok(n * mult));
    }

    #[test]
    fn plain_bytes_round_trip(n in 0u64..(1u64 << 52)) {
        prop_assert_eq!(parse_mooncake_size(&n.to_string()), Ok(n));
    }

    #[test]
    fn negatives_always_rejected(n in 1u64..1_000_000, u in 0usize..9) {
        let s = format!("-{n}{}", UNITS[u].0);
        prop_assert!(parse_mooncake_size(&s).is_err());
    }

    #[test]
    fn iec_units_always_rejected(n in 0u64..1_000_000, unit in "(?i)(kib|mib|gib|tib)") {
        let s = format!("{n}{unit}");
        prop_assert!(parse_mooncake_size(&s).is_err());
    }

    #[test]
    fn never_panics(s in "\\PC{0,24}") {
        let _ = parse_mooncake_size(&s);
        let _ = sglang_accepts(&s);
    }

    #[test]
    fn sglang_accepted_implies_mooncake_accepted(s in "[0-9]{1,8}(gb|GB)?") {
        prop_assert!(sglang_accepts(&s));
        prop_assert!(parse_mooncake_size(&s).is_ok());
    }
}
