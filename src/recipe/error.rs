//! Errors from reading a recipe: each names the file, the key path, the position when known, what
//! is wrong, and how to fix it.

use std::path::PathBuf;

use crate::domain::Diagnostic;

/// A recipe could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error("{path}: cannot read the recipe: {source}\n  fix: check the path given to --recipe (or MCSUP_RECIPE)")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("{path}: is a directory, not a recipe file\n  fix: pass the YAML file itself, e.g. {path}/job.yaml")]
    IsDirectory { path: PathBuf },

    #[error("{path}: the recipe is empty\n  fix: a recipe needs at least a `backend:` section (see recipes/local.yaml)")]
    Empty { path: PathBuf },

    #[error("{0}")]
    Invalid(Box<Invalid>),
}

/// The details of an invalid recipe: a [`Diagnostic`] whose file is the recipe.
pub type Invalid = Diagnostic;

impl RecipeError {
    /// Build an [`RecipeError::Invalid`].
    pub fn invalid(
        path: impl Into<PathBuf>,
        key_path: impl Into<String>,
        position: Option<(usize, usize)>,
        message: impl Into<String>,
        fix: Option<String>,
    ) -> Self {
        RecipeError::Invalid(Box::new(Diagnostic {
            file: Some(path.into()),
            key_path: key_path.into(),
            position,
            message: message.into(),
            fix,
        }))
    }

    /// The key path of an invalid recipe (tests and tooling).
    pub fn key_path(&self) -> Option<&str> {
        match self {
            RecipeError::Invalid(i) => Some(&i.key_path),
            _ => None,
        }
    }
}
