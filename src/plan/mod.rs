//! Planning: turns (recipe, roles, node context) into this node's ordered [`Plan`].
//!
//! Pure: no I/O, no clock, no environment reads. Whatever the plan needs from the system (node
//! names, addresses, the working directory) arrives in a [`crate::node::NodeContext`] value.

mod env;
mod resolve;
pub mod spec;

pub use env::EnvBuilder;
pub use resolve::*;
pub use spec::*;
