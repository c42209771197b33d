//! Planning: turns (recipe, roles, node context) into this node's ordered [`Plan`].
//!
//! Pure: no I/O, no clock, no environment reads. Whatever the plan needs from the system (node
//! names, addresses, the working directory) arrives in a [`crate::node::NodeContext`] value.
//!
//! The steps, one file each: [`model`] folds every recipe spelling into one service model;
//! [`kinds`] holds the service kinds' defaults; [`services`], [`workers`] and [`frontends`] resolve this
//! node's processes (with [`placeholders`] and [`policy`]; each engine's worker launch comes from
//! [`crate::engine`], srtctl's layout from [`crate::engine::layout`]); [`memory`] sizes HiCache
//! and headroom; [`lints`] words the warnings; `resolve` orders it all into phases and gates.
//! [`spec`] is the output.

mod env;
mod error;
pub mod frontends;
pub mod kinds;
pub mod lints;
pub mod memory;
pub mod model;
pub mod placeholders;
pub mod policy;
mod resolve;
pub mod services;
pub mod spec;
pub mod workers;

pub(crate) use crate::engine::layout as topology;
pub use env::EnvBuilder;
pub use error::PlanError;
pub use resolve::*;
pub use spec::*;
