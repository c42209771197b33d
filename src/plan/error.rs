//! The error of planning: a recipe that parses but cannot be planned for this node, with the
//! key path it is about and the fix. The CLI adds the file and, from the recipe's key index, the
//! line and column.

pub(crate) use crate::domain::plan_err as err;
pub use crate::domain::PlanError;
