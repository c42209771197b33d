//! The error of planning: a recipe that parses but cannot be planned for this node, with the
//! key path it is about and the fix. The CLI adds the file and, from the recipe's key index, the
//! line and column.

use std::fmt;

use crate::domain::Diagnostic;

/// A recipe that is syntactically fine but cannot be planned for this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PlanError {
    /// Dotted key path in the recipe (or a CLI flag such as `--role`).
    pub key_path: String,
    pub message: String,
    pub fix: String,
}

impl PlanError {
    /// As a [`Diagnostic`], to be placed in the recipe's file by the caller.
    pub fn diagnostic(&self) -> Diagnostic {
        Diagnostic::new(&self.key_path, &self.message, &self.fix)
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.diagnostic().fmt(f)
    }
}

pub(crate) fn err(
    key_path: impl Into<String>,
    message: impl Into<String>,
    fix: impl Into<String>,
) -> PlanError {
    PlanError {
        key_path: key_path.into(),
        message: message.into(),
        fix: fix.into(),
    }
}
