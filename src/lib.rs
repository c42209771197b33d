//! mcsup: a per-node supervisor for Mooncake Store and SGLang/vLLM workers under Slurm.
//!
//! The crate is split the way data flows: [`recipe`] parses (syntax only), [`node`] and
//! [`plan`] resolve a node's processes ([`plan`] without I/O), [`supervisor`] runs the plan, and
//! [`cli`] wires them to the command line; [`render`] turns plans into text or JSON. Side effects
//! live only in the supervisor's runtime modules and in the few system readers.

pub mod cli;
pub mod domain;
pub mod engine;
pub mod exit;
pub mod jobs;
pub mod launch;
pub mod migrate;
pub mod mooncake;
pub mod node;
pub mod plan;
pub mod preflight;
pub mod recipe;
pub mod render;
pub mod runfiles;
pub mod secrets;
pub mod slurm;
pub mod supervisor;
