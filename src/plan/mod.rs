//! Planning: turns (recipe, roles, node context) into this node's ordered [`Plan`].
//!
//! Pure: no I/O, no clock, no environment reads. Whatever the plan needs from the system (node
//! names, addresses, the working directory) arrives in a [`crate::node::NodeContext`] value.
//!
//! `resolve::plan_with` is the pipeline; its steps, one file each: [`model`] folds every recipe
//! spelling into one service model ([`kinds`]: the service kinds' defaults); [`topo`] reads
//! srtctl's worker layout for the job and takes this node's part; [`services`], [`workers`] and
//! [`frontends`] resolve this node's processes, and [`benchmark`] the job's benchmark client (with [`placeholders`] and [`policy`]; each
//! engine's worker launch comes from [`crate::engine`]); `files` lists what the node writes;
//! `order` gates on other nodes and orders the phases; [`memory`] sizes HiCache and headroom;
//! [`lints`] words the warnings. `declared` reads one `services:` entry for [`model`].
//! [`spec`] is the output.

pub mod benchmark;
pub mod control;
mod declared;
mod env;
mod error;
mod files;
pub mod frontends;
pub mod kinds;
pub mod lints;
pub mod memory;
pub mod model;
mod order;
pub mod placeholders;
pub mod policy;
mod resolve;
pub mod role_restart;
pub mod services;
pub mod spec;
pub mod stores;
pub mod topo;
pub mod workers;

pub(crate) use crate::engine::layout as topology;
pub use env::EnvBuilder;
pub use error::PlanError;
pub use resolve::*;
pub use spec::*;
