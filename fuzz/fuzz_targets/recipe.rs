//! Fuzz the recipe parser: `recipe::parse_str` must return `Ok` or `Err` on any text, never
//! panic, and its error must render (the CLI prints it). The same bytes also go through
//! `size::parse_mooncake_size`, which sees user-written strings such as "400gb".
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use mcsup::{recipe, mooncake::size};

fuzz_target!(|data: &[u8]| {
    // load_file rejects non-UTF-8 before parse_str; mirror that.
    let Ok(text) = std::str::from_utf8(data) else { return };

    let _ = size::parse_mooncake_size(text);

    match recipe::parse_str(Path::new("fuzz.yaml"), text) {
        Ok(r) => {
            let _ = format!("{r:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
