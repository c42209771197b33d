//! The README states facts the code also holds; these tests keep the two from drifting.

use std::collections::BTreeMap;

use mcsup::exit::ExitCode;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

/// The rows of the markdown table under `heading`: first cell -> second cell.
fn table_under(text: &str, heading: &str) -> BTreeMap<String, String> {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("README has no `{heading}`"));
    text[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').splitn(2, '|').map(str::trim).collect();
            (cells[0].to_string(), cells[1].to_string())
        })
        .collect()
}

#[test]
fn the_readme_exit_code_table_is_the_exit_code_type() {
    let rows = table_under(&readme(), "### Exit codes");
    let mut want: BTreeMap<String, String> = ExitCode::TABLE
        .iter()
        .map(|(c, meaning)| (c.code().to_string(), meaning.to_string()))
        .collect();
    want.insert("N, 128+S".into(), ExitCode::CHILD_MEANING.into());
    assert_eq!(rows, want);
}
