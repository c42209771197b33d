//! The engines srt-slurm 2.0 registers (`engine.type`) for which mcsup derives no worker: a
//! recipe naming one is read (its services, its stores), and its workers are what
//! `mcsup.workers` lists.

use std::sync::Arc;

use super::{Engine, EngineInputs, EngineKind};
use crate::domain::PlanError;

/// `atom` (srt-slurm 2.0).
#[derive(Debug)]
pub struct Atom;

/// `tilert` (srt-slurm 2.0).
#[derive(Debug)]
pub struct Tilert;

macro_rules! unmanaged {
    ($kind:ty, $name:literal) => {
        impl EngineKind for $kind {
            fn name(&self) -> &'static str {
                $name
            }

            fn in_v1(&self) -> bool {
                false
            }

            fn flags_section(&self) -> &'static str {
                concat!($name, "_config")
            }

            fn role_args(&self) -> super::RoleArgs {
                super::RoleArgs::Unread
            }

            fn dynamo_module(&self) -> &'static str {
                concat!("dynamo.", $name)
            }

            fn settings(
                &self,
                _: &EngineInputs<'_, '_>,
            ) -> Result<Option<Arc<dyn Engine>>, PlanError> {
                Ok(None)
            }
        }
    };
}

unmanaged!(Atom, "atom");
unmanaged!(Tilert, "tilert");
