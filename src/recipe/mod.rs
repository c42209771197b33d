//! The recipe: srt-slurm's YAML (`backend`, `backend.mooncake_kv_store`) plus mcsup's own
//! optional `mcsup:` section.
//!
//! This module only parses and checks syntax and local validity (a port is 1..=65535, an env value
//! is a string, a size string parses). It never looks at the node, the environment or the file
//! system beyond reading the one file: resolving a recipe into processes is [`crate::plan`]'s job.
//! Sections mcsup owns reject unknown keys (with a "did you mean" hint); srt-slurm sections mcsup
//! does not interpret are accepted and listed in [`Recipe::ignored`].

mod error;
mod lenient;
mod load;
pub mod locate;
mod store;
pub mod types;
pub mod v2;
mod values;
pub mod variants;

pub use error::RecipeError;
pub use load::{load_file, parse_str, read_text, selected, variant_error};
pub use locate::KeyIndex;
pub use types::*;
pub use v2::*;
pub use values::*;
