//! Slurm facts that the planner and the preflight both use. Values only: reading Slurm's
//! configuration (`scontrol`) is the preflight's job (`preflight::slurm`).

use std::time::Duration;

/// Slurm's default `KillWait` (slurm.conf(5)).
pub const DEFAULT_KILL_WAIT: Duration = Duration::from_secs(30);
/// What mcsup needs after its deadline: SIGKILL the groups left, reap them, write the status.
pub const KILL_MARGIN: Duration = Duration::from_secs(2);
